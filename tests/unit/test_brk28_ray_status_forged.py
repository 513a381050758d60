"""brk28 (M): since kray28 whether a RayCluster's own Running pods counted for its evicted
Workload depended on the cluster's status (condition ``RayClusterSuspended`` True,
``spec.suspend``), which a tenant allowed to patch ``rayclusters/status`` writes (the lab's
tenant of tests/e2e/test_jobset.py ``tenant`` has ``ray.io`` ``*``; KubeRay's status is not
protected by pykueue's webhooks). Once pykueue suspends the preempted cluster, the tenant
replaces the conditions with ``[RayClusterSuspended True]`` and ``state: suspended``: KubeRay
v1.6.0 then deletes no pod (``reconcilePods``: ``suspendStatus == RayClusterSuspended``
returns at once; its ``calculateStatus`` keeps both, and sets ``state: ready`` only when the
pod count equals the desired count, 0 + 1 while suspended), and pykueue counted none of the
Running GPU pods: the Workload was released while the cluster ran on. Now the pods count in
that state too, and pykueue deletes them (``RayCluster.operator_stopped``,
``framework.stop_pods_left``). (Kueue v0.17.1 reads only ``state``, so there a status
writer wins outright.) The same for AppWrapper (``status.phase: Suspended``,
``appwrappers/status``): tests/unit/test_self_controlled_pods.py."""

from __future__ import annotations

import copy

from app.integrations.ray.ray import RAYCLUSTER
from tests.unit.test_ray import group, raycluster
from tests.unit.test_self_controlled_pods import RAY_GVK, _released, _stopped_pass


def _real_worker() -> dict:
    """A Ray worker KubeRay made for ``rc`` at its admission, Running on a GPU node."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "rc-gpu-worker-abcde", "namespace": "ns", "uid": "p-w",
        "labels": {"ray.io/cluster": "rc", "ray.io/node-type": "worker", "ray.io/group": "gpu",
                   "kueue.x-k8s.io/podset": "gpu"},
        "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "rc",
                             "uid": "u-1", "controller": True}]},
        "spec": {"nodeName": "gpu-0"}, "status": {"phase": "Running"}}


def _forged() -> dict:
    rc = raycluster(group("gpu", 2))
    rc["metadata"]["uid"] = "u-1"
    rc["spec"]["suspend"] = True  # pykueue's stop of the preempted cluster
    rc["status"] = {"state": "suspended", "conditions": [   # the tenant's status patch
        {"type": "RayClusterSuspended", "status": "True"}]}
    return rc


def test_control_without_the_forged_status_the_running_worker_holds_the_quota() -> None:
    rc = copy.deepcopy(_forged())
    rc["status"] = {"state": "ready"}
    assert not _released(RAYCLUSTER, RAY_GVK, rc, _real_worker())


def test_a_forged_suspended_status_does_not_release_a_running_clusters_quota() -> None:
    """The Running worker holds the quota, and pykueue deletes it (KubeRay, taking the
    cluster as suspended, would not)."""
    assert not _released(RAYCLUSTER, RAY_GVK, _forged(), _real_worker())
    assert _stopped_pass(RAYCLUSTER, RAY_GVK, _forged(), [_real_worker()]) == (
        False, [("rc-gpu-worker-abcde", "p-w", 30)])

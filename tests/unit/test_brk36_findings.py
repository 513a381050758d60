"""brk36 (session 36, against 4153668): false positives of the Pod webhook's CREATE rule
(``app.controllers.pod_create_check``), shown on the stores alone; the lab runs are in
``tests/e2e/test_brk36_findings.py``.

F1: an AppWrapper wrapping a PyTorchJob or a RayCluster (appwrapper v1.2.0 infers their
podSets, ``infer_pod_sets``): appwrapper injects the AppWrapper's podSet names
(``<aw>-<n>``) as the ``kueue.x-k8s.io/podset`` label of the wrapped object's templates, so
its operator's pods carry ``aw-0``, ``aw-1``; the rule reads the podSets of the pod's
controller (``PyTorchJob.direct_podsets``: ``master``, ``worker``; ``RayCluster``'s:
``head`` and its groups) and refuses every pod. Lab: the wrapped PyTorchJob's two creates
refused (``FailedCreatePod``), no pod in 60 s. A RayJob an AppWrapper wraps takes the same
path (its cluster's pods carry ``aw-N``).

Not a denial of service (measured on these stores): the count walks the pods indexed under
the controller's uid, 0.9 ms per create check with 100 terminal pods under it, 7.6 ms with
1,000, 38.8 ms with 10,000 (linear); pods of other namespaces under a forged uid are skipped
after the index and the garbage collector deletes them (their owner is not found)."""

from __future__ import annotations

import copy
from typing import Any

from app.integrations.appwrapper.appwrapper import KIND as APPWRAPPER
from app.integrations.kubeflow.kubeflow import PYTORCHJOB
from app.integrations.ray.ray import RAYCLUSTER
from app.kube.context import WL
from tests.unit.test_pod_create_check import NS, QUEUE, Stores, _pod, _template, _workload

AW_REF = {"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper", "name": "aw",
          "uid": "aw-uid", "controller": True}


def _wrapped(component: dict[str, Any], kind: Any, uid: str) -> Stores:
    """AppWrapper ``aw`` (admitted) wrapping ``component``, stored as its controller made
    it (``uid``, ``aw`` as controller)."""
    aw = {"apiVersion": AW_REF["apiVersion"], "kind": "AppWrapper",
          "metadata": {"namespace": NS, "name": "aw", "uid": "aw-uid", "labels": QUEUE},
          "spec": {"suspend": False, "components": [{"template": component}]}}
    made = copy.deepcopy(component)
    made["metadata"] = {"namespace": NS, "name": component["metadata"]["name"], "uid": uid,
                        "ownerReferences": [dict(AW_REF)]}
    wl = _workload(APPWRAPPER, aw,
                   {t.name: (t.count, _template(None)) for t in APPWRAPPER.templates(aw)})
    return Stores({APPWRAPPER.key: [aw], kind.key: [made], WL: [wl]})


def test_f1_the_pods_of_a_pytorchjob_an_appwrapper_wraps_are_allowed() -> None:
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "ddp"},
           "spec": {"pytorchReplicaSpecs": {
               "Master": {"replicas": 1, "template": _template(None)},
               "Worker": {"replicas": 2, "template": _template(None)}}}}
    s = _wrapped(job, PYTORCHJOB, "ddp-uid")
    owner = ("kubeflow.org/v1", "PyTorchJob", "ddp", "ddp-uid")
    errors = {name: s.check.errors(_pod(name, podset, claim=None, owner=owner))
              for name, podset in (("ddp-master-0", "aw-0"), ("ddp-worker-0", "aw-1"),
                                   ("ddp-worker-1", "aw-1"))}
    assert errors == {"ddp-master-0": [], "ddp-worker-0": [], "ddp-worker-1": []}, errors


def test_f1_the_pods_of_a_raycluster_an_appwrapper_wraps_are_allowed() -> None:
    cluster = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "rc"},
               "spec": {"headGroupSpec": {"rayStartParams": {}, "template": _template(None)},
                        "workerGroupSpecs": [{"groupName": "gpu", "replicas": 1,
                                              "minReplicas": 0, "maxReplicas": 1,
                                              "rayStartParams": {},
                                              "template": _template(None)}]}}
    s = _wrapped(cluster, RAYCLUSTER, "rc-uid")
    owner = ("ray.io/v1", "RayCluster", "rc", "rc-uid")
    errors = {name: s.check.errors(_pod(name, podset, claim=None, owner=owner))
              for name, podset in (("rc-head", "aw-0"), ("rc-gpu-worker", "aw-1"))}
    assert errors == {"rc-head": [], "rc-gpu-worker": []}, errors


def _wrapped_pytorchjob() -> Stores:
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "ddp"},
           "spec": {"pytorchReplicaSpecs": {
               "Master": {"replicas": 1, "template": _template(None)},
               "Worker": {"replicas": 2, "template": _template(None)}}}}
    return _wrapped(job, PYTORCHJOB, "ddp-uid")


def test_f1_a_wrapped_pytorchjobs_pods_are_counted_by_the_appwrappers_podsets() -> None:
    """The AppWrapper's podSet ``aw-1`` (the workers) admitted for 2, both running: a third
    pod labelled ``aw-1`` under the PyTorchJob is refused, and one labelled with the
    PyTorchJob's own replica type (``worker``, no podSet of the admission) too."""
    s = _wrapped_pytorchjob()
    owner = ("kubeflow.org/v1", "PyTorchJob", "ddp", "ddp-uid")
    for name in ("ddp-worker-0", "ddp-worker-1"):
        pod = _pod(name, "aw-1", claim=None, owner=owner)
        assert s.check.errors(pod) == []
        s.add_pod(pod)
    (why,) = s.check.errors(_pod("copy", "aw-1", claim=None, owner=owner)) or [""]
    assert "podSet aw-1" in why and "2 pod(s)" in why, why
    (why,) = s.check.errors(_pod("other", "worker", claim=None, owner=owner)) or [""]
    assert "aw-0, aw-1" in why and "'worker'" in why, why

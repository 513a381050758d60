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

B1 (bypass): the reconciler's backstop (``JobReconciler._delete_excess``) keeps only the
counts of the controller's own podSet names (``ps in direct``), none of a wrapping
AppWrapper's, so it deletes no copy of a wrapped PyTorchJob's worker (``excess_pods`` is
given ``{}``). Lab (default setup): 2 copies Running, 4 GPUs on an admission of 2.

Not a denial of service (measured on these stores): the count walks the pods indexed under
the controller's uid, 0.9 ms per create check with 100 terminal pods under it, 7.6 ms with
1,000, 38.8 ms with 10,000 (linear); pods of other namespaces under a forged uid are skipped
after the index and the garbage collector deletes them (their owner is not found)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from app.integrations import default_registry
from app.integrations.appwrapper.appwrapper import KIND as APPWRAPPER
from app.integrations.kubeflow.kubeflow import PYTORCHJOB
from app.integrations.ray.ray import RAYCLUSTER
from app.kube.context import POD, WL
from tests.unit.test_foreground_deletion import _admitted as _fd_admitted
from tests.unit.test_foreground_deletion import _reconciler as _fd_reconciler
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


def test_b1_copies_of_a_wrapped_pytorchjobs_worker_are_deleted_by_the_backstop() -> None:
    """B1 (the e2e module doc): PyTorchJob ``ddp`` (Master 1, Worker 1) wrapped by the
    admitted AppWrapper ``aw`` (podSets ``aw-0``, ``aw-1``), its two pods and two copies of
    its worker Running under it: the backstop (``_delete_excess``) deletes the two copies,
    as it does for an unwrapped PyTorchJob."""
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": "ddp", "namespace": "ns", "uid": "ddp-uid",
                        "ownerReferences": [dict(AW_REF)]},
           "spec": {"runPolicy": {"suspend": False}, "pytorchReplicaSpecs": {
               "Master": {"replicas": 1, "template": _template(None)},
               "Worker": {"replicas": 1, "template": _template(None)}}}}
    component = copy.deepcopy(job)
    component["metadata"] = {"name": "ddp"}
    aw = {"apiVersion": AW_REF["apiVersion"], "kind": "AppWrapper",
          "metadata": {"namespace": "ns", "name": "aw", "uid": "aw-uid", "labels": QUEUE},
          "spec": {"suspend": False, "components": [{"template": component}]}}
    wl = _fd_admitted(APPWRAPPER.workload_object(aw), deleting=False)
    assert [ps["name"] for ps in wl["spec"]["podSets"]] == ["aw-0", "aw-1"]
    pods = []
    for name, podset, created in (("ddp-master-0", "aw-0", "10:00:00"),
                                  ("ddp-worker-0", "aw-1", "10:00:00"),
                                  ("copy0", "aw-1", "10:05:00"), ("copy1", "aw-1", "10:05:01")):
        pod = _pod(name, podset, claim=None, owner=("kubeflow.org/v1", "PyTorchJob", "ddp",
                                                     "ddp-uid"))
        pod["metadata"].update(namespace="ns", creationTimestamp=f"2026-12-07T{created}Z")
        pod["status"] = {"phase": "Running"}
        pods.append(pod)
    rec, ctx = _fd_reconciler(
        PYTORCHJOB, "kubeflow.org/pytorchjob",
        {POD: pods, PYTORCHJOB.key: [job], APPWRAPPER.key: [aw], WL: [wl]},
        resources={APPWRAPPER.key: APPWRAPPER.resource})
    rec.registry = default_registry(["kubeflow.org/pytorchjob",
                                     "workload.codeflare.dev/appwrapper"])
    deleted = asyncio.run(rec._delete_excess(PYTORCHJOB, job))
    gone = sorted(w[2] for w in ctx.writes if w[:2] == ("delete", "pods"))
    assert (deleted, gone) == (2, ["copy0", "copy1"])

"""brk27 (H1): a tenant's bare pod whose controller ownerReference names the queued object
itself (the API server takes it at create) and which no node takes counts as the object's
only when its operator would delete it on a suspension; else a preempted object's evicted
Workload held its quota for good."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from app.integrations.appwrapper.appwrapper import KIND as APPWRAPPER
from app.integrations.framework import pod_of
from app.integrations.jobset.jobset import JOBSETS
from app.integrations.jobset.jobset import KIND as JOBSET
from app.integrations.kubeflow.kubeflow import MPIJOB, PYTORCHJOB, TFJOB
from app.integrations.ray.ray import RAYCLUSTER
from app.integrations.sparkapplication.sparkapplication import APP_NAME_LABEL
from app.integrations.sparkapplication.sparkapplication import KIND as SPARK
from app.integrations.trainjob.trainjob import CHILD_JOBSETS, CLUSTER_RUNTIMES, RUNTIMES
from app.integrations.trainjob.trainjob import KIND as TRAINJOB
from app.kube.context import POD, WL
from tests.unit.test_appwrapper import POD as POD_SPEC
from tests.unit.test_appwrapper import aw
from tests.unit.test_foreground_deletion import _admitted, _reconciler, _workload_writes
from tests.unit.test_jobset import jobset, rjob
from tests.unit.test_kinds_being_deleted import _mpijob, _pytorchjob
from tests.unit.test_ray import group, raycluster
from tests.unit.test_sparkapplication import app
from tests.unit.test_trainjob import composed, runtime, trainjob

JOB_NAME = "training.kubeflow.org/job-name"
OPERATOR = "training.kubeflow.org/operator-name"


def _pod(name: str, labels: dict[str, str], api_version: str, kind: str, owner: str,
         uid: str = "u-1") -> dict[str, Any]:
    """A Pending pod no node takes, controlled by ``kind`` ``owner`` (``uid``) itself."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": "ns", "uid": f"p-{name}", "labels": labels,
        "ownerReferences": [{"apiVersion": api_version, "kind": kind, "name": owner,
                             "uid": uid, "controller": True}]},
        "spec": {"nodeSelector": {"no-such": "node"}}, "status": {"phase": "Pending"}}


def _released(kind: Any, gvk: str, obj: dict[str, Any], pod: dict[str, Any], *,
              wl_obj: dict[str, Any] | None = None, **kw: Any) -> bool:
    """Whether the preempted (Evicted), stopped ``obj``'s Workload is released in one pass
    with ``pod`` in the Pod store."""
    obj = {**obj, "status": obj.get("status") or {}}
    wl = _admitted(kind.workload_object(wl_obj or obj), deleting=False)
    wl["status"]["conditions"].append({"type": "Evicted", "status": "True",
                                       "reason": "Preempted", "message": "Preempted"})
    extra = kw.pop("objects", {})
    rec, ctx = _reconciler(kind, gvk, {POD: [pod], kind.key: [obj], WL: [wl], **extra}, **kw)
    again = asyncio.run(rec.reconcile_object(kind, "ns", obj["metadata"]["name"]))
    return again is None and bool(_workload_writes(ctx))


def test_a_pod_controlled_by_a_jobset_itself_holds_none_of_its_quota() -> None:
    """JobSet v0.11.1 controls no pod itself (its Jobs do)."""
    js = jobset(rjob("w", 1, 2))
    labels = {"jobset.sigs.k8s.io/jobset-name": "train", "jobset.sigs.k8s.io/jobset-uid": "u-1"}
    decoy = _pod("decoy", labels, "jobset.x-k8s.io/v1alpha2", "JobSet", "train")
    assert _released(JOBSET, "jobset.x-k8s.io/jobset", js, decoy)


def test_a_pod_controlled_by_a_trainjob_itself_holds_none_of_its_quota() -> None:
    """Trainer v2.2.0 controls no pod itself (its JobSet's Jobs do)."""
    tj = trainjob(suspend=True)
    rt = runtime()
    rt["metadata"]["namespace"] = "ns"
    decoy = _pod("decoy", {"jobset.sigs.k8s.io/jobset-name": "tj"},
                 "trainer.kubeflow.org/v1alpha1", "TrainJob", "tj")
    assert _released(TRAINJOB, "trainer.kubeflow.org/trainjob", tj, decoy,
                     wl_obj=composed(tj, rt), objects={RUNTIMES: [rt]},
                     extra=(RUNTIMES, CLUSTER_RUNTIMES), resources={CHILD_JOBSETS: JOBSETS})


def test_a_spark_applications_pod_counts_only_as_the_driver_spark_operator_deletes() -> None:
    """spark-operator v2.5.0 deletes only the driver, by name, on a suspension, and no pod
    once the application is ``SUSPENDED``: pykueue deletes a driver left then, which counts
    until it is gone (brk28: a tenant may forge that state)."""
    sa = app()
    sa["spec"]["suspend"] = True
    api = "sparkoperator.k8s.io/v1beta2"
    decoy = _pod("decoy", {APP_NAME_LABEL: "pi"}, api, "SparkApplication", "pi")
    assert _released(SPARK, "sparkoperator.k8s.io/sparkapplication", sa, decoy)
    driver = _pod("pi-driver", {APP_NAME_LABEL: "pi"}, api, "SparkApplication", "pi")
    assert not _released(SPARK, "sparkoperator.k8s.io/sparkapplication", sa, driver)
    done = {**sa, "status": {"applicationState": {"state": "SUSPENDED"}}}
    gvk = "sparkoperator.k8s.io/sparkapplication"
    assert _stopped_pass(SPARK, gvk, done, [driver]) == (False, [("pi-driver", "p-pi-driver",
                                                                  30)])
    assert _stopped_pass(SPARK, gvk, done, [_unbound_deleted(driver)]) == (True, [])
    assert _stopped_pass(SPARK, gvk, done, [decoy]) == (True, [])  # not the driver: nothing
    # Once SUSPENDED, the driver whose deletion the operator asked for counts while killed;
    # with a grace beyond its Workload's, it is deleted again with that one.
    killed = copy.deepcopy(driver)  # Running on a node, being killed
    killed.update(spec={"nodeName": "cpu-0"}, status={"phase": "Running"})
    killed["metadata"].update(deletionTimestamp="2026-12-06T09:00:30Z",
                              deletionGracePeriodSeconds=30)
    assert _stopped_pass(SPARK, gvk, done, [killed]) == (False, [])
    killed["metadata"]["deletionGracePeriodSeconds"] = 315360000
    assert _stopped_pass(SPARK, gvk, done, [killed]) == (False, [("pi-driver", "p-pi-driver",
                                                                  30)])
    # SUSPENDED but resumed (spec.suspend false): the operator's, which resumes it.
    resumed = {**done, "spec": {**done["spec"], "suspend": False}}
    assert not SPARK.operator_stopped(resumed)
    named = {**sa, "spec": {**sa["spec"], "driver": {**sa["spec"]["driver"], "podName": "d"}}}
    assert not _released(SPARK, "sparkoperator.k8s.io/sparkapplication", named,
                         _pod("d", {APP_NAME_LABEL: "pi"}, api, "SparkApplication", "pi"))
    assert pod_of(SPARK, driver, "pi", "u-1")  # no stores: any name


def test_a_kubeflow_jobs_pod_counts_only_when_its_operator_selects_it() -> None:
    """training-operator v1.9.3 selects (and deletes while suspended) only the pods with its
    job-name and operator-name labels; mpi-operator v0.8.0 deletes the workers by name."""
    pt = {**_pytorchjob(deleting=False), "status": {}}  # its pods stopped
    pt["metadata"]["uid"] = "u-1"
    api = "kubeflow.org/v1"
    decoy = _pod("decoy", {JOB_NAME: "train"}, api, "PyTorchJob", "train")
    assert _released(PYTORCHJOB, "kubeflow.org/pytorchjob", pt, decoy)
    other = _pod("decoy", {JOB_NAME: "train", OPERATOR: "tfjob-controller"},
                 api, "PyTorchJob", "train")
    assert _released(PYTORCHJOB, "kubeflow.org/pytorchjob", pt, other)
    real = _pod("train-worker-0", {JOB_NAME: "train", OPERATOR: "pytorchjob-controller"},
                api, "PyTorchJob", "train")
    assert not _released(PYTORCHJOB, "kubeflow.org/pytorchjob", pt, real)
    assert pod_of(TFJOB, {**real, "metadata": {**real["metadata"], "labels": {
        JOB_NAME: "train", OPERATOR: "tfjob-controller"}, "ownerReferences": [
        {"apiVersion": api, "kind": "TFJob", "name": "train", "uid": "u-1",
         "controller": True}]}}, "train", "u-1")
    mpi = _mpijob()
    mpi["metadata"]["uid"] = "u-1"
    api = "kubeflow.org/v2beta1"
    labels = {JOB_NAME: "train", OPERATOR: "mpi-operator"}
    for name in ("decoy", "train-worker-1", "train-worker-00"):
        assert _released(MPIJOB, "kubeflow.org/mpijob", mpi,
                         _pod(name, labels, api, "MPIJob", "train")), name
    assert not _released(MPIJOB, "kubeflow.org/mpijob", mpi,
                         _pod("train-worker-0", labels, api, "MPIJob", "train"))



RAY_GVK = "ray.io/raycluster"


def _suspended_cluster(done: bool) -> dict[str, Any]:
    """RayCluster ``rc`` (uid ``u-1``) stopped by pykueue (``spec.suspend``): with the status
    KubeRay v1.6.0 writes once no pod of it is left (``done``; ``RayClusterStatusConditions``
    on, its default), else none yet."""
    rc = raycluster(group("gpu", 2))
    rc["metadata"]["uid"] = "u-1"
    if done:
        rc["status"] = {"state": "suspended", "conditions": [
            {"type": "RayClusterSuspending", "status": "False"},
            {"type": "RayClusterSuspended", "status": "True"}]}
    return rc


def _being_killed(pod: dict[str, Any], grace: int) -> dict[str, Any]:
    """``pod`` Running on a node, being deleted with a grace period of ``grace`` s."""
    out = copy.deepcopy(pod)
    out.update(spec={"nodeName": "gpu-0"}, status={"phase": "Running"})
    out["metadata"].update(deletionTimestamp="2026-12-06T09:00:30Z",
                           deletionGracePeriodSeconds=grace)
    return out


def _stopped_pass(kind: Any, gvk: str, obj: dict[str, Any], pods: list[dict[str, Any]], *,
                  wl_obj: dict[str, Any] | None = None
                  ) -> tuple[bool, list[tuple[str, str | None, int | None]]]:
    """One pass over the preempted (Evicted) ``obj`` with ``pods`` in the Pod store: whether
    its Workload is released, and the pods deleted (name, uid precondition, grace period)."""
    obj = {**obj, "status": obj.get("status") or {}}
    wl = _admitted(kind.workload_object(wl_obj or obj), deleting=False)
    wl["status"]["conditions"].append({"type": "Evicted", "status": "True",
                                       "reason": "Preempted", "message": "Preempted"})
    rec, ctx = _reconciler(kind, gvk, {POD: pods, kind.key: [obj], WL: [wl]})
    deleted: list[tuple[str, str | None, int | None]] = []

    async def delete(res: Any, name: str, namespace: str = "", **kw: Any) -> None:
        assert res.plural == "pods" and namespace == "ns"
        deleted.append((name, kw.get("uid"), kw.get("grace_period_seconds")))
    ctx.delete = delete  # type: ignore[method-assign]
    again = asyncio.run(rec.reconcile_object(kind, "ns", obj["metadata"]["name"]))
    return again is None and bool(_workload_writes(ctx)), deleted


def _unbound_deleted(pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` deleted by pykueue before any node took it (a finalizer of the tenant's keeps
    it: it holds nothing, ``pod_holds_quota``)."""
    out = copy.deepcopy(pod)
    out["metadata"].update(deletionTimestamp="2026-12-06T09:00:30Z",
                           deletionGracePeriodSeconds=0, finalizers=["tenant.example/keep"])
    return out


def test_a_pod_left_to_a_suspended_raycluster_is_deleted_and_counts_until_gone() -> None:
    """KubeRay v1.6.0 deletes every pod labelled ``ray.io/cluster: <name>`` while a cluster
    is ``Suspending`` and reports it ``RayClusterSuspended`` once none is left; then it
    deletes (and makes) none until it is resumed (``reconcilePods`` returns at once). A
    tenant's pod controlled by the cluster and made after that, Pending for good, held the
    evicted Workload's quota for good (kray28); not counting it let a tenant that forges the
    condition run its pods uncounted (brk28). pykueue deletes it; it counts until gone."""
    labels = {"ray.io/cluster": "rc", "ray.io/node-type": "worker", "ray.io/group": "gpu"}
    decoy = _pod("rc-gpu-worker-x", labels, "ray.io/v1", "RayCluster", "rc")
    done = _suspended_cluster(True)
    assert _stopped_pass(RAYCLUSTER, RAY_GVK, done, [decoy]) == (
        False, [("rc-gpu-worker-x", "p-rc-gpu-worker-x", 30)])
    # Deleted before a node took it, it holds nothing (a finalizer may keep it): released.
    assert _stopped_pass(RAYCLUSTER, RAY_GVK, done, [_unbound_deleted(decoy)]) == (True, [])
    assert _stopped_pass(RAYCLUSTER, RAY_GVK, done, []) == (True, [])
    # Before KubeRay reports it suspended, such a pod is one it deletes: it counts, and
    # pykueue leaves it to KubeRay.
    assert _stopped_pass(RAYCLUSTER, RAY_GVK, _suspended_cluster(False), [decoy]) == (False, [])
    # Being killed within the grace its Workload allows: counted, left to run it out.
    assert _stopped_pass(RAYCLUSTER, RAY_GVK, done, [_being_killed(decoy, 30)]) == (False, [])
    # With a grace of ten years: counted, and deleted again with the Workload's (shortened).
    assert _stopped_pass(RAYCLUSTER, RAY_GVK, done, [_being_killed(decoy, 315360000)]) == (
        False, [("rc-gpu-worker-x", "p-rc-gpu-worker-x", 30)])
    # Its own grace period, capped by the Workload's templates' longest.
    short, endless = copy.deepcopy(decoy), copy.deepcopy(decoy)
    short["spec"]["terminationGracePeriodSeconds"] = 5
    endless["spec"]["terminationGracePeriodSeconds"] = 315360000
    endless["metadata"].update(name="rc-gpu-worker-y", uid="p-y")
    assert sorted(_stopped_pass(RAYCLUSTER, RAY_GVK, done, [short, endless])[1]) == [
        ("rc-gpu-worker-x", "p-rc-gpu-worker-x", 5), ("rc-gpu-worker-y", "p-y", 30)]
    slow = copy.deepcopy(done)
    slow["spec"]["workerGroupSpecs"][0]["template"]["spec"]["terminationGracePeriodSeconds"] = 90
    assert _stopped_pass(RAYCLUSTER, RAY_GVK, done, [endless], wl_obj=slow)[1] == [
        ("rc-gpu-worker-y", "p-y", 90)]
    # A pod another object controls (a tenant's ReplicaSet), Failed, or of another cluster
    # (uid): not the cluster's to delete.
    other = _pod("rs-x", labels, "apps/v1", "ReplicaSet", "rs")
    failed = {**copy.deepcopy(decoy), "status": {"phase": "Failed"}}
    stale = _pod("rc-gpu-worker-z", labels, "ray.io/v1", "RayCluster", "rc", uid="u-0")
    assert _stopped_pass(RAYCLUSTER, RAY_GVK, done, [other, failed, stale]) == (True, [])
    # Resumed (KubeRay has not looked yet): KubeRay's, and every pod it controls counts.
    resumed = copy.deepcopy(done)
    resumed["spec"]["suspend"] = False
    assert not RAYCLUSTER.operator_stopped(resumed)
    for rc in (resumed, _suspended_cluster(False), done):
        _, ctx = _reconciler(RAYCLUSTER, RAY_GVK, {POD: [], RAYCLUSTER.key: [rc], WL: []})
        assert pod_of(RAYCLUSTER, decoy, "rc", "u-1", ctx=ctx)
    assert pod_of(RAYCLUSTER, decoy, "rc", "u-1")  # no stores: any


def test_a_pod_event_reconciles_the_stopped_object_that_controls_it() -> None:
    """A pod made once the object is stopped changes nothing the object's watch sees: the
    Pod informer's handler (``JobReconciler.on_pod``) queues the object, only then."""
    labels = {"ray.io/cluster": "rc"}
    decoy = _pod("rc-gpu-worker-x", labels, "ray.io/v1", "RayCluster", "rc")
    for rc, queued in ((_suspended_cluster(True), ["raycluster:ns/rc"]),
                       (_suspended_cluster(False), [])):
        rec, _ = _reconciler(RAYCLUSTER, RAY_GVK, {POD: [], RAYCLUSTER.key: [rc], WL: []})
        added: list[str] = []
        rec.queue = type("Q", (), {"add": staticmethod(added.append)})()  # type: ignore[assignment]
        rec.on_pod("ADDED", None, decoy)
        rec.on_pod("DELETED", decoy, None)
        rec.on_pod("ADDED", None, _pod("x", labels, "apps/v1", "ReplicaSet", "rc"))
        assert added == queued * 2


AW_GVK = "workload.codeflare.dev/appwrapper"


def test_a_pod_left_to_a_suspended_appwrapper_is_deleted_and_counts_until_gone() -> None:
    """appwrapper v1.2.0 deletes its components and waits until no pod labelled with its
    name is left before it enters phase ``Suspended``, in which it deletes (and deploys)
    nothing until it is resumed. A tenant's pod controlled by the AppWrapper and made after
    that, Pending for good, held the evicted Workload's quota for good; not counting it let
    a tenant that forges the phase run its pods uncounted (brk28). pykueue deletes it; it
    counts until gone."""
    obj = aw({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, **POD_SPEC})
    obj["metadata"].update(namespace="ns", uid="u-1")
    obj["status"] = {"phase": "Suspended", "conditions": [
        {"type": "QuotaReserved", "status": "False", "reason": "Suspended", "message": ""}]}
    labels = {"workload.codeflare.dev/appwrapper": "aw"}
    api = "workload.codeflare.dev/v1beta2"
    decoy = _pod("p", labels, api, "AppWrapper", "aw")
    assert _stopped_pass(APPWRAPPER, AW_GVK, obj, [decoy]) == (False, [("p", "p-p", 30)])
    assert _stopped_pass(APPWRAPPER, AW_GVK, obj, [_unbound_deleted(decoy)]) == (True, [])
    # A Pod component running under a forged phase: counted, and deleted.
    running = {**copy.deepcopy(decoy), "spec": {"nodeName": "gpu-0"},
               "status": {"phase": "Running"}}
    assert _stopped_pass(APPWRAPPER, AW_GVK, obj, [running]) == (False, [("p", "p-p", 30)])
    assert _stopped_pass(APPWRAPPER, AW_GVK, obj, [_being_killed(decoy, 30)]) == (False, [])
    assert _stopped_pass(APPWRAPPER, AW_GVK, obj, [_being_killed(decoy, 315360000)]) == (
        False, [("p", "p-p", 30)])
    # Still Suspending (its deletions not done): the pod is one it deletes, it counts.
    suspending = {**obj, "status": {**obj["status"], "phase": "Suspending"}}
    assert _stopped_pass(APPWRAPPER, AW_GVK, suspending, [decoy]) == (False, [])
    resumed = {**obj, "spec": {**obj["spec"], "suspend": False}}
    assert not APPWRAPPER.operator_stopped(resumed)

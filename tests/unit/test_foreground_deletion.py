"""An object being deleted whose operator never writes its status again (spark-operator
v2.5.0 leaves a deleted SparkApplication ``RUNNING``; Trainer v2.2.0's ``jobsStatus`` of a
TrainJob stays as it was once its JobSet is gone), with ``jobs.workload_finalizer`` on: its
Workload's quota is released once the Pod store shows no pod of it holding resources, not
when that status says so. With ``kubectl delete --cascade=foreground`` (Argo CD's default)
the object waits for its Workload (``blockOwnerDeletion``): a count from its status would
keep the Workload, the object and the quota forever (reviewer's probes, session 26)."""

from __future__ import annotations

import asyncio
from typing import Any

from app.integrations import default_registry
from app.integrations.jobset.jobset import JOBSETS
from app.integrations.reconciler import PODS_POLL, JobReconciler
from app.integrations.sparkapplication.sparkapplication import APP_NAME_LABEL
from app.integrations.sparkapplication.sparkapplication import KIND as SPARK
from app.integrations.trainjob.trainjob import CHILD_JOBSETS, CLUSTER_RUNTIMES, RUNTIMES
from app.integrations.trainjob.trainjob import KIND as TRAINJOB
from app.kube.client import JOBS, NAMESPACES, PODS, RESOURCE_FLAVORS, WORKLOADS
from app.kube.context import CHILD_JOBS, NS, PC, POD, RF, WL, WPC
from app.wire.names import RESOURCE_IN_USE_FINALIZER as IN_USE
from tests.unit.fake_ctx import FakeCtx
from tests.unit.test_sparkapplication import app
from tests.unit.test_trainjob import composed, runtime, trainjob

GONE = "2026-12-06T01:00:00Z"


def _admitted(wl: dict[str, Any], *, deleting: bool) -> dict[str, Any]:
    wl["metadata"].update(namespace="ns", uid="w-1", resourceVersion="5", finalizers=[IN_USE])
    if deleting:
        wl["metadata"]["deletionTimestamp"] = GONE
    wl["status"] = {"admission": {"clusterQueue": "cq", "podSetAssignments": [
        {"name": ps["name"], "count": ps["count"], "flavors": {"nvidia.com/gpu": "a100"}}
        for ps in wl["spec"]["podSets"]]}, "conditions": [
        {"type": t, "status": "True", "reason": t, "message": ""}
        for t in ("QuotaReserved", "Admitted")]}
    return wl


def _pod(labels: dict[str, str], ref: dict[str, Any], name: str = "p-0") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "uid": "pod-0", "labels": labels,
                         "ownerReferences": [{**ref, "controller": True}]},
            "status": {"phase": "Running"}}


def _reconciler(kind: Any, gvk: str, objects: dict[str, list[dict[str, Any]]],
                extra: tuple[str, ...] = (), resources: dict[str, Any] | None = None
                ) -> tuple[JobReconciler, FakeCtx]:
    keys = {WL: WORKLOADS, WPC: WORKLOADS, PC: WORKLOADS, kind.key: kind.resource, POD: PODS,
            NS: NAMESPACES, RF: RESOURCE_FLAVORS, **{k: WORKLOADS for k in extra},
            **(resources or {})}
    ctx = FakeCtx(keys, objects)
    ctx.clock = lambda: 1e9  # type: ignore[attr-defined]
    rec = JobReconciler.__new__(JobReconciler)
    rec.ctx, rec.registry = ctx, default_registry([gvk])  # type: ignore[assignment]
    rec.queue = type("Q", (), {"add": staticmethod(lambda *_, **__: None)})()  # type: ignore[assignment]
    return rec, ctx


def _spark(*, suspended: bool, wl_deleting: bool) -> tuple[JobReconciler, FakeCtx, str]:
    """A SparkApplication being deleted (foreground), ``RUNNING`` in its status for good,
    its driver pod Running, its admitted Workload (being deleted too when ``wl_deleting``)."""
    obj = app()
    obj["spec"]["suspend"] = suspended
    obj["metadata"].update(deletionTimestamp=GONE, finalizers=["foregroundDeletion"],
                           resourceVersion="9")
    obj["status"] = {"applicationState": {"state": "RUNNING"}}
    wl = _admitted(SPARK.workload_object(obj), deleting=wl_deleting)
    driver = _pod({APP_NAME_LABEL: "pi"}, {"apiVersion": "sparkoperator.k8s.io/v1beta2",
                                          "kind": "SparkApplication", "name": "pi",
                                          "uid": "u-1"}, name="pi-driver")
    rec, ctx = _reconciler(SPARK, "sparkoperator.k8s.io/sparkapplication",
                           {POD: [driver], SPARK.key: [obj], WL: [wl]})
    return rec, ctx, wl["metadata"]["name"]


def _workload_writes(ctx: FakeCtx) -> list[tuple[str, str, str]]:
    return [w for w in ctx.writes if w[1] == "workloads"]


def test_a_running_spark_application_deleted_in_the_foreground_releases_once_its_pods_go(
        ) -> None:
    rec, ctx, name = _spark(suspended=False, wl_deleting=True)
    assert asyncio.run(rec.reconcile_object(SPARK, "ns", "pi")) == PODS_POLL
    assert ("replace", "sparkapplications", "pi") in ctx.writes  # stopped
    assert _workload_writes(ctx) == []  # its driver still runs: the quota stays
    ctx.store(POD).remove("ns/pi-driver")
    assert asyncio.run(rec.reconcile_object(SPARK, "ns", "pi")) is None
    assert _workload_writes(ctx) == [("replace", "workloads", name)]  # the finalizer goes


def test_a_suspended_spark_application_being_deleted_has_its_workload_deleted_once_pods_go(
        ) -> None:
    """``_never_to_start``: the same count, before the Workload is deleted."""
    rec, ctx, name = _spark(suspended=True, wl_deleting=False)
    assert asyncio.run(rec.reconcile_object(SPARK, "ns", "pi")) == PODS_POLL
    assert _workload_writes(ctx) == []
    ctx.store(POD).remove("ns/pi-driver")
    assert asyncio.run(rec.reconcile_object(SPARK, "ns", "pi")) is None
    assert _workload_writes(ctx) == [("delete", "workloads", name)]


def trainjob_being_deleted(pod: dict[str, Any], jobs: list[dict[str, Any]]
                           ) -> tuple[JobReconciler, FakeCtx, str]:
    """TrainJob ``tj`` (uid ``u-1``) deleted in the foreground, its stale ``jobsStatus``
    saying 2 active, its admitted Workload being deleted, the trainer's JobSet ``tj`` still
    stored, the unlabelled batch Job store holding ``jobs`` and the Pod store ``pod``;
    returns the reconciler, its context and the Workload's name."""
    tj = trainjob(suspend=False)
    tj["metadata"].update(deletionTimestamp=GONE, finalizers=["foregroundDeletion"],
                          resourceVersion="9")
    tj["status"] = {"jobsStatus": [{"name": "node", "active": 2, "ready": 2}]}
    rt = runtime()
    rt["metadata"]["namespace"] = "ns"
    wl = _admitted(TRAINJOB.workload_object(composed(tj, rt)), deleting=True)
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {
        "name": "tj", "namespace": "ns", "uid": "js-1", "ownerReferences": [
            {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "tj",
             "uid": "u-1", "controller": True}]}}
    rec, ctx = _reconciler(TRAINJOB, "trainer.kubeflow.org/trainjob",
                           {POD: [pod], TRAINJOB.key: [tj], WL: [wl], RUNTIMES: [rt],
                            CHILD_JOBSETS: [jobset], CHILD_JOBS: jobs},
                           extra=(RUNTIMES, CLUSTER_RUNTIMES),
                           resources={CHILD_JOBSETS: JOBSETS, CHILD_JOBS: JOBS})
    return rec, ctx, wl["metadata"]["name"]


def test_a_trainjob_with_a_stale_jobs_status_releases_once_its_pods_go() -> None:
    node = _pod({"jobset.sigs.k8s.io/jobset-name": "tj"},
                {"apiVersion": "batch/v1", "kind": "Job", "name": "tj-node-0", "uid": "j-1"})
    # The trainer's Job, as the stores hold it while the pods terminate (``pod_of``: a
    # batch Job's pod counts when its Job is the TrainJob's own).
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": "tj-node-0", "namespace": "ns", "uid": "j-1", "ownerReferences": [
            {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "tj",
             "uid": "js-1", "controller": True}]}}
    rec, ctx, name = trainjob_being_deleted(node, [job])
    assert asyncio.run(rec.reconcile_object(TRAINJOB, "ns", "tj")) == PODS_POLL
    assert _workload_writes(ctx) == []
    ctx.store(POD).remove("ns/p-0")
    assert asyncio.run(rec.reconcile_object(TRAINJOB, "ns", "tj")) is None
    assert _workload_writes(ctx) == [("replace", "workloads", name)]


def test_a_running_object_not_being_deleted_still_counts_its_status() -> None:
    """The Workload deleted by hand, the application running and not being deleted: its
    operator keeps writing its status, which counts (``RUNNING``: every podSet's pods)."""
    rec, ctx, _ = _spark(suspended=False, wl_deleting=True)
    obj = ctx.store(SPARK.key).get("ns/pi")
    assert obj is not None
    del obj["metadata"]["deletionTimestamp"]
    ctx.store(POD).remove("ns/p-0")
    assert asyncio.run(rec.reconcile_object(SPARK, "ns", "pi")) == PODS_POLL
    assert _workload_writes(ctx) == []


def test_an_appwrapper_being_deleted_holds_while_its_status_says_its_components_run() -> None:
    """appwrapper v1.2.0 keeps ``QuotaReserved`` True until its wrapped components (and their
    pods) are gone, and a wrapped PyTorchJob's pods are not ones the Pod store can name for
    the AppWrapper (their controller is the PyTorchJob): its status still counts
    (``status_kept_once_deleted``), so the quota is not released under running pods."""
    from app.integrations.appwrapper.appwrapper import KIND as APPWRAPPER
    from tests.unit.test_appwrapper import aw

    pytorch = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "w"},
               "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {
                   "spec": {"containers": [{"name": "c", "resources": {"requests": {
                       "nvidia.com/gpu": "1"}}}]}}}}}}
    obj = aw(pytorch, podsets=[{"replicas": 1, "path": "template.spec.pytorchReplicaSpecs"
                                ".Master.template"}])
    obj["metadata"].update(namespace="ns", deletionTimestamp=GONE, resourceVersion="9",
                           finalizers=["workload.codeflare.dev/finalizer"])
    obj["spec"]["suspend"] = False
    obj["status"] = {"phase": "Running", "conditions": [
        {"type": "QuotaReserved", "status": "True", "reason": "Admitted", "message": ""}]}
    wl = _admitted(APPWRAPPER.workload_object(obj), deleting=True)
    master = _pod({"training.kubeflow.org/job-name": "w"},
                  {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "w",
                   "uid": "pt-1"})
    rec, ctx = _reconciler(APPWRAPPER, "workload.codeflare.dev/appwrapper",
                           {POD: [master], APPWRAPPER.key: [obj], WL: [wl]})
    assert asyncio.run(rec.reconcile_object(APPWRAPPER, "ns", "aw")) == PODS_POLL
    assert _workload_writes(ctx) == []  # its components still run: the quota stays
    now = ctx.store(APPWRAPPER.key).get("ns/aw")
    assert now is not None
    now["status"]["conditions"][0]["status"] = "False"  # components and their pods gone
    ctx.store(POD).remove("ns/p-0")
    assert asyncio.run(rec.reconcile_object(APPWRAPPER, "ns", "aw")) is None
    assert _workload_writes(ctx) == [("replace", "workloads", wl["metadata"]["name"])]

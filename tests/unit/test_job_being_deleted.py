"""A batch Job being deleted (a tenant's own finalizer keeps it): the Kubernetes Job controller
does nothing for it (v1.36 ``syncJob`` runs ``manageJob`` only without a
``deletionTimestamp``), so pykueue's stop deletes its running pods itself
(``BatchJob._delete_pods``, docs/security.md). Two things around that stop:

- its pod template is not restored: the API server refuses the restore while the Job
  controller counts its pods active, which for a Job being deleted it never settles, so the
  restore was refused and retried (with backoff up to 30 s) for as long as the Job stayed;
- a Job suspended by pykueue and deleted before the Job controller acted on the suspension
  (its start record already gone, as where the API server lets the template change while pods
  run) is stopped again: its running pods are deleted, not left running on an evicted
  Workload's quota."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

from app.integrations import default_registry
from app.integrations.batchjob.job import KIND as JOB_KIND
from app.integrations.reconciler import JobReconciler
from app.kube.client import JOBS, NAMESPACES, PODS, RESOURCE_FLAVORS, WORKLOADS
from app.kube.context import NS, PC, POD, RF, WL, WPC
from app.kube.informers import Store
from app.wire.names import ORIGINAL_ANNOTATION
from app.wire.workload import workload_name_for_job
from tests.unit.fake_ctx import FakeCtx

UID = "j-1"
DELETING = "2026-12-05T22:00:00Z"


def _ctx(pods: list[dict[str, Any]]) -> FakeCtx:
    """The stores ``JobReconciler.reconcile_object`` and ``BatchJob.stop`` read."""
    return FakeCtx({WL: WORKLOADS, WPC: WORKLOADS, PC: WORKLOADS, JOB_KIND.key: JOBS,
                    POD: PODS, NS: NAMESPACES, RF: RESOURCE_FLAVORS}, {POD: pods})


def _pod(name: str, **meta: Any) -> dict[str, Any]:
    """A pod of Job ``train`` as the Job controller makes it (its controller: the Job)."""
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": UID,
             "controller": True}
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"p-{name}",
                         "ownerReferences": [owner], **meta,
                         "labels": {"batch.kubernetes.io/job-name": "train",
                                    "batch.kubernetes.io/controller-uid": UID}},
            "spec": {"nodeName": "a100-0"}, "status": {"phase": "Running"}}


def _job(*, suspend: bool, record: bool, deleting: bool) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "train", "namespace": "ns", "uid": UID,
                            "resourceVersion": "5",
                            "labels": {"kueue.x-k8s.io/queue-name": "lq"}}
    if record:
        meta["annotations"] = {ORIGINAL_ANNOTATION: json.dumps({"nodeSelector": {}})}
    if deleting:
        meta.update(deletionTimestamp=DELETING, finalizers=["example.com/keep"])
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
            "spec": {"suspend": suspend, "parallelism": 2, "completions": 2, "template": {
                "metadata": {"labels": {"kueue.x-k8s.io/podset": "main"}},
                "spec": {"nodeSelector": {"gpu": "a100"}, "restartPolicy": "Never",
                         "containers": [{"name": "c", "resources": {
                             "requests": {"nvidia.com/gpu": "1"}}}]}}},
            "status": {"startTime": "2026-12-05T21:59:00Z", "active": 2}}


def test_stopping_a_job_being_deleted_deletes_its_pods_and_restores_no_template() -> None:
    """Preempted while being deleted: one write suspends it and its running pod is deleted
    (one already going is left); no startTime clearing and no template restore, which the
    API server refuses for as long as the Job controller counts the pods active (never
    settled for a Job being deleted). A Job not being deleted still gets all three writes."""
    pods = [_pod("train-a"), _pod("train-b", deletionTimestamp=DELETING)]
    ctx = _ctx(pods)
    out = asyncio.run(JOB_KIND.stop(ctx, _job(suspend=False, record=True, deleting=True),  # type: ignore[arg-type]
                                    "Preempted"))
    assert ctx.writes == [("replace", "jobs", "train"), ("delete", "pods", "train-a")]
    assert out["spec"]["suspend"] is True
    # Looked at again (already suspended): no write but the pods' deletion.
    ctx = _ctx(pods[1:])
    asyncio.run(JOB_KIND.stop(ctx, out, "Preempted"))  # type: ignore[arg-type]
    assert ctx.writes == []
    ctx = _ctx(pods)
    asyncio.run(JOB_KIND.stop(ctx, _job(suspend=False, record=True, deleting=False),  # type: ignore[arg-type]
                              "Preempted"))
    assert ctx.writes == [("replace", "jobs", "train"), ("patch", "jobs", "train"),
                          ("replace", "jobs", "train")]


def _evicted_workload() -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": workload_name_for_job("train", UID), "namespace": "ns",
                         "uid": "w-1", "ownerReferences": [
                             {"apiVersion": "batch/v1", "kind": "Job", "name": "train",
                              "uid": UID, "controller": True}]},
            "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": 2, "template": {
                "spec": {"containers": [{"name": "c", "resources": {
                    "requests": {"nvidia.com/gpu": "1"}}}]}}}]},
            "status": {"admission": {"clusterQueue": "cq", "podSetAssignments": [
                {"name": "main", "count": 2, "flavors": {"nvidia.com/gpu": "a100"}}]},
                "conditions": [{"type": "Evicted", "status": "True", "reason": "Preempted",
                                "message": "Preempted to accommodate a workload"}]}}


def _reconcile(job: dict[str, Any], pods: list[dict[str, Any]]) -> FakeCtx:
    ctx = _ctx(pods)
    ctx.store(JOB_KIND.key).put(job)
    ctx.store(WL).put(_evicted_workload())
    rec = JobReconciler.__new__(JobReconciler)
    rec.ctx, rec.registry = ctx, default_registry()  # type: ignore[assignment]
    assert asyncio.run(rec.reconcile_object(JOB_KIND, "ns", "train")) is not None
    return ctx


def test_a_job_suspended_then_deleted_before_the_job_controller_acted_is_stopped_again() -> None:
    """Its Workload evicted (preempted), the Job suspended by pykueue and its record gone (the
    template restored), then deleted under a tenant's finalizer before the Job controller
    deleted its pods: they run on, and nothing else will stop them. The reconciler deletes
    them (the Workload keeps the quota until they are gone). The same Job not being deleted is
    the Job controller's to settle, and pods already being deleted are left."""
    job = _job(suspend=True, record=False, deleting=True)
    ctx = _reconcile(job, [_pod("train-a"), _pod("train-b")])
    assert sorted(w for w in ctx.writes if w[0] == "delete") == [
        ("delete", "pods", "train-a"), ("delete", "pods", "train-b")]
    assert not [w for w in ctx.writes if w[1] == "jobs"]
    ctx = _reconcile(_job(suspend=True, record=False, deleting=False), [_pod("train-a")])
    assert ctx.writes == []
    ctx = _reconcile(job, [_pod("train-a", deletionTimestamp=DELETING)])
    assert ctx.writes == []


def _workload(*, admitted: bool) -> dict[str, Any]:
    """The Job's Workload: pending, or admitted (quota reserved, Admitted) and not evicted."""
    wl = _evicted_workload()
    if not admitted:
        del wl["status"]
        return wl
    wl["status"]["conditions"] = [
        {"type": t, "status": "True", "reason": t, "message": ""}
        for t in ("QuotaReserved", "Admitted")]
    return wl


def _look(job: dict[str, Any], wl: dict[str, Any],
          pods: list[dict[str, Any]] | None = None) -> tuple[FakeCtx, float | None]:
    """One ``reconcile_object`` of ``job`` with Workload ``wl``: (the context, its answer)."""
    ctx = _ctx(pods or [])
    ctx.clock = lambda: 1e9  # type: ignore[attr-defined]
    ctx.store(JOB_KIND.key).put(job)
    ctx.store(WL).put(wl)
    rec = JobReconciler.__new__(JobReconciler)
    rec.ctx, rec.registry = ctx, default_registry()  # type: ignore[assignment]
    return ctx, asyncio.run(rec.reconcile_object(JOB_KIND, "ns", "train"))


def _never_started(*, deleting: bool) -> dict[str, Any]:
    """The Job as the webhook stored it: suspended, no start record, never run."""
    job = _job(suspend=True, record=False, deleting=deleting)
    job["status"] = {}
    return job


WL_NAME = workload_name_for_job("train", UID)


def test_a_suspended_job_being_deleted_is_not_started_and_its_admitted_workload_goes() -> None:
    """small24: a Job deleted while pending (its tenant's finalizer keeps it) whose Workload
    was admitted then was unsuspended: pods for a Job that is going (or, the Job controller
    ignoring it, quota held by nothing). Now it stays suspended and its Workload is deleted,
    so the quota returns. The same Job not being deleted is started."""
    ctx, again = _look(_never_started(deleting=True), _workload(admitted=True))
    assert ctx.writes == [("delete", "workloads", WL_NAME)]
    assert again is None
    ctx, _ = _look(_never_started(deleting=False), _workload(admitted=True))
    assert ("replace", "jobs", "train") in ctx.writes
    assert not [w for w in ctx.writes if w[0] == "delete"]


def test_the_pending_workload_of_a_suspended_job_being_deleted_is_deleted_not_admitted() -> None:
    """Pending, its Workload leaves the queue at once (else admitted later, above); a Job
    not being deleted keeps its pending Workload."""
    ctx, _ = _look(_never_started(deleting=True), _workload(admitted=False))
    assert ctx.writes == [("delete", "workloads", WL_NAME)]
    ctx, _ = _look(_never_started(deleting=False), _workload(admitted=False))
    assert not [w for w in ctx.writes if w[0] == "delete"], ctx.writes


def test_an_admitted_workload_of_a_job_being_deleted_waits_for_its_pods() -> None:
    """Suspended by pykueue with its start record (the admission's scheduling still in its
    template) and pods still running: they are deleted (``BatchJob.stop``), no template
    restored, the Job not started again; the Workload keeps its quota until they are gone."""
    job = _job(suspend=True, record=True, deleting=True)
    ctx, again = _look(job, _workload(admitted=True), [_pod("train-a"), _pod("train-b")])
    assert sorted(ctx.writes) == [("delete", "pods", "train-a"), ("delete", "pods", "train-b")]
    assert again is not None
    job["status"] = {"startTime": job["status"]["startTime"]}  # the Job controller: 0 active
    ctx, again = _look(job, _workload(admitted=True))
    assert ctx.writes == [("delete", "workloads", WL_NAME)] and again is None


class UnscannedStore(Store):
    """A Pod store that refuses a scan of all its pods (its indexes answer)."""

    def __iter__(self) -> Iterator[dict[str, Any]]:
        raise AssertionError("the whole Pod store scanned")

    def list(self) -> list[dict[str, Any]]:
        raise AssertionError("the whole Pod store scanned")


def test_the_pods_a_job_being_deleted_has_deleted_are_found_through_an_index() -> None:
    """small24: ``BatchJob._delete_pods`` looked at every pod of the cluster for one Job's
    (on a big cluster, tens of thousands per stop): now the Pod store's namespace index (the
    reconciler's) gives the namespace's pods. The selection is the same: the Job's running
    pods; not one already going, not another Job's, not a pod of a Job of the same name in
    another namespace (whose uid label names another uid) nor one of this Job's labels
    there."""
    ctx = _ctx([])
    store = UnscannedStore(PODS)
    ctx.informers.informers[POD].store = store
    other_ns = {**_pod("train-x"), "metadata": {**_pod("train-x")["metadata"],
                                                "namespace": "other"}}
    for pod in (_pod("train-a"), _pod("train-b", deletionTimestamp=DELETING), other_ns,
                {**_pod("eval-a"), "metadata": {**_pod("eval-a")["metadata"], "labels": {
                    "batch.kubernetes.io/job-name": "eval",
                    "batch.kubernetes.io/controller-uid": "j-2"}}}):
        store.put(pod)
    asyncio.run(JOB_KIND._delete_pods(ctx, _job(suspend=True, record=True, deleting=True),  # type: ignore[arg-type]
                                      "Preempted"))
    assert ctx.writes == [("delete", "pods", "train-a")]

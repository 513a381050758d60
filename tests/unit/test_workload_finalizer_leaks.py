"""Ways the ``kueue.x-k8s.io/resource-in-use`` finalizer (``jobs.workload_finalizer``)
stayed on a Workload for good, its quota counted as admitted (review25, review26), and the
rule each now follows (Kueue v0.17.1's, except the last):

- a Job deleted and created again under its name while the first one's pods were going: the
  first one's Workload (its name carries the old uid) loses the finalizer and is deleted
  (``ensureOneWorkload``: the Workloads listed by owner name that do not match);
- a MultiKueue manager's Workload deleted while its Job's status still mirrors the worker's
  active pods: the finalizer goes at once (its pods run on the worker);
- a Finished Workload deleted: the finalizer goes first, its completed Job is not stopped
  (the reconciler's order: Finished before deleted);
- a Finished Workload deleted while its Job runs without the queue label: the finalizer goes
  at once (Kueue ignores such a Job until it is deleted)."""

from __future__ import annotations

import copy
from typing import Any

from app.integrations import default_registry
from app.integrations.batchjob.job import KIND as JOB
from app.integrations.reconciler import PODS_POLL, JobReconciler
from app.kube.context import POD, WL
from app.wire.names import RESOURCE_IN_USE_FINALIZER as IN_USE
from tests.unit.test_job_being_deleted import _job
from tests.unit.test_orphaned_workloads import NS, pod
from tests.unit.test_quota_release_on_terminal import _admitted_workload, _stores
from tests.unit.test_workload_finalizer import GONE, _deleted_jobs_workload, _pass


def _recreated(wl_deleting: bool) -> tuple[JobReconciler, Any, dict[str, Any]]:
    """``_deleted_jobs_workload``'s Job ``train`` (uid-1) created again (uid-2), queued and
    suspended, no Workload of its own yet; the first one's Workload, admitted, carries the
    finalizer (``wl_deleting``: the garbage collector is deleting it)."""
    rec, ctx, wl = _deleted_jobs_workload()
    if not wl_deleting:
        wl["metadata"].pop("deletionTimestamp")
        ctx.store(WL).put(wl)
    again = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": "train", "namespace": NS, "uid": "uid-2", "resourceVersion": "1",
        "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
        "spec": {"suspend": True, "parallelism": 1, "completions": 1, "template": {"spec": {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}},
        "status": {}}
    ctx.store(JOB.key).put(again)
    ctx.inflight = set()
    rec._priority_maps = lambda: ({}, {})  # type: ignore[method-assign]

    async def create(res: Any, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        ctx.created = [*getattr(ctx, "created", []), body]
        out = copy.deepcopy(body)
        out["metadata"]["uid"] = "wl-uid-2"
        rec.on_workload("ADDED", None, out)  # the watch's event
        return out
    ctx.client.create = create
    read = ctx.client.get

    async def get(res: Any, name: str, ns: str) -> dict[str, Any]:
        if res.plural == "jobs":
            return copy.deepcopy(again)
        return await read(res, name, ns)  # type: ignore[no-any-return]
    ctx.client.get = get
    return rec, ctx, wl


def _finalizers_written(ctx: Any, wl: dict[str, Any]) -> list[list[str]]:
    return [b["metadata"].get("finalizers") for b in ctx.client.updates
            if b["metadata"]["name"] == wl["metadata"]["name"]]


def test_a_job_recreated_under_its_name_releases_its_predecessors_workload() -> None:
    """The old Workload, being deleted by the garbage collector, keeps the finalizer while the
    old Job's pods run (``WhenPodsGone``), then loses it; the new Job gets its Workload."""
    rec, ctx, wl = _recreated(wl_deleting=True)
    assert _pass(rec) == PODS_POLL  # the old pods, Running (grace period)
    assert _finalizers_written(ctx, wl) == []
    [created] = ctx.created
    assert created["metadata"]["name"] != wl["metadata"]["name"]  # the new Job's, uid-2
    for i in range(2):
        ctx.store(POD).put(pod("job", "train", "uid-1", i, phase="Failed", deleting=True,
                               owner_ref=True))
    _pass(rec)
    assert _finalizers_written(ctx, wl) == [["example.com/other"]]
    assert ctx.client.deletes == []  # being deleted already: the garbage collector's
    # The new Job's own Workload (in the owner index now) is never taken for an old one.
    assert [b["metadata"]["name"] for b in ctx.client.updates] == [wl["metadata"]["name"]]


def test_a_predecessors_workload_not_yet_deleted_is_deleted_as_kueue() -> None:
    rec, ctx, wl = _recreated(wl_deleting=False)
    for i in range(2):
        ctx.store(POD).remove(f"{NS}/train-uid-1-{i}")
    _pass(rec)
    assert _finalizers_written(ctx, wl) == [["example.com/other"]]
    assert ctx.client.deletes == [wl["metadata"]["name"]]
    # Without the finalizer (the setting off): deleted the same (before, only the garbage
    # collector did, as it still may first).
    rec, ctx, wl = _recreated(wl_deleting=False)
    wl["metadata"].pop("finalizers")
    ctx.store(WL).put(wl)
    for i in range(2):
        ctx.store(POD).remove(f"{NS}/train-uid-1-{i}")
    _pass(rec)
    assert _finalizers_written(ctx, wl) == []
    assert ctx.client.deletes == [wl["metadata"]["name"]]


def _deleted_workload_of(job: dict[str, Any], *, finished: bool = False,
                         finalizers: tuple[str, ...] = (IN_USE,)
                         ) -> tuple[JobReconciler, Any, dict[str, Any]]:
    wl = _admitted_workload(job)
    if finished:
        wl["status"]["conditions"].append(
            {"type": "Finished", "status": "True", "reason": "Succeeded"})
    wl["metadata"].update(deletionTimestamp=GONE, finalizers=list(finalizers),
                          resourceVersion="3")
    ctx = _stores([])
    ctx.store(JOB.key).put(job)
    ctx.store(WL).put(wl)
    rec = JobReconciler.__new__(JobReconciler)
    rec.ctx, rec.registry = ctx, default_registry()  # type: ignore[assignment]
    return rec, ctx, wl


def _manager_job(managed_by: str | None) -> dict[str, Any]:
    """``train`` stopped by the first pass ("Workload is deleted"); its status still counts
    2 active pods (a MultiKueue manager's: mirrored from the worker, its copy deleted)."""
    job = _job(suspend=True, record=False, deleting=False)
    if managed_by is not None:
        job["spec"]["managedBy"] = managed_by
    job["status"] = {"active": 2, "ready": 2}
    return job


def test_a_multikueue_managers_deleted_workload_loses_the_finalizer_at_once() -> None:
    rec, ctx, wl = _deleted_workload_of(_manager_job("kueue.x-k8s.io/multikueue"))
    assert _pass(rec, "ns") is None
    assert ctx.writes == [("replace", "workloads", wl["metadata"]["name"])]
    # A Job of this cluster (its pods here) still waits for them (``WhenPodsGone``).
    rec, ctx, _ = _deleted_workload_of(_manager_job(None))
    assert _pass(rec, "ns") == PODS_POLL
    assert ctx.writes == []


def _completed_job() -> dict[str, Any]:
    job = _job(suspend=False, record=True, deleting=False)
    job["status"] = {"startTime": "2026-12-05T21:59:00Z",
                     "completionTime": "2026-12-05T22:59:00Z", "succeeded": 2,
                     "conditions": [{"type": "Complete", "status": "True"}]}
    return job


def test_a_deleted_finished_workload_loses_the_finalizer_its_job_untouched() -> None:
    rec, ctx, wl = _deleted_workload_of(_completed_job(), finished=True)
    assert _pass(rec, "ns") is None
    assert ctx.writes == [("replace", "workloads", wl["metadata"]["name"])]
    # Without the finalizer (the setting off; another's keeps it): nothing written either.
    rec, ctx, _ = _deleted_workload_of(_completed_job(), finished=True,
                                       finalizers=("example.com/other",))
    assert _pass(rec, "ns") is None
    assert ctx.writes == []


def test_a_finished_workload_of_a_job_running_unqueued_loses_the_finalizer() -> None:
    """Its Job runs on without the queue label (removed behind the webhook's back): its
    Workload stays as its record, but once Finished it holds no quota, so a deletion by hand
    completes at once rather than waiting for the Job to go."""
    rec, ctx, wl = _deleted_jobs_workload()
    wl["status"]["conditions"].append({"type": "Finished", "status": "True"})
    ctx.store(WL).put(wl)
    job = _job(suspend=False, record=True, deleting=False)
    job["metadata"].update(uid="uid-1", namespace=NS, labels={})
    ctx.store(JOB.key).put(job)

    async def get(res: Any, name: str, ns: str) -> dict[str, Any]:
        return copy.deepcopy(job if res.plural == "jobs" else wl)
    ctx.client.get = get
    _pass(rec)
    assert _finalizers_written(ctx, wl) == [["example.com/other"]]
    assert ctx.client.deletes == []  # being deleted already

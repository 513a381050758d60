"""The ``kueue.x-k8s.io/resource-in-use`` finalizer on Workloads (``jobs.workload_finalizer``):
Kueue v0.17.1 puts it on every Workload it creates (``NewWorkload``) and takes it off when the
Workload is Finished, when its job is gone or being deleted, when the Workload is deleted
(its job stopped first) or has no owner and is being deleted. pykueue does the same, except
that with ``jobs.deleted_quota_release: WhenPodsGone`` the finalizer of an admitted
Workload goes only once no pod of its owner holds resources: a deleted Workload then stays
in the API, its quota held, through a restart of pykueue (docs/security.md)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from app.config import Settings
from app.integrations import default_registry
from app.integrations.batchjob.job import KIND as JOB
from app.integrations.reconciler import PODS_POLL, JobReconciler
from app.kube.context import POD, WL
from app.kube.errors import NotFound
from app.wire.names import RESOURCE_IN_USE_FINALIZER as IN_USE
from tests.unit.test_job_being_deleted import _job, _pod
from tests.unit.test_orphaned_workloads import NS, _Ctx, pod, workload
from tests.unit.test_quota_release_on_terminal import _admitted_workload, _stopped_job, _stores

GONE = "2026-12-06T01:00:00Z"


class _Client:
    """Records Workload updates and deletes; the Job is gone (GET: NotFound); a Workload GET
    answers the stored one."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.updates: list[dict[str, Any]] = []
        self.deletes: list[str] = []

    async def get(self, res: Any, name: str, ns: str) -> dict[str, Any]:
        if res.plural == "workloads":
            found = self.ctx.store(WL).get(f"{ns}/{name}")
            if found is not None:
                return copy.deepcopy(found)  # type: ignore[no-any-return]
        raise NotFound(404, "NotFound", f"{name} not found")

    async def replace(self, res: Any, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
        assert not kw.get("subresource"), "no status write expected"
        self.updates.append(body)
        return copy.deepcopy(body)

    async def delete(self, res: Any, name: str, *_: Any, **__: Any) -> None:
        self.deletes.append(name)


def _deleted_jobs_workload(release: str = "WhenPodsGone"
                           ) -> tuple[JobReconciler, Any, dict[str, Any]]:
    """Job ``train`` deleted (gone) with its admitted Workload, which the garbage collector
    is deleting (``deletionTimestamp``), kept by the finalizer; the Job's 2 pods Running,
    being deleted (their grace period)."""
    ctx = _Ctx()
    ctx.settings = Settings(controllers_enabled=False,  # type: ignore[attr-defined]
                            jobs={"deleted_quota_release": release})
    ctx.client = _Client(ctx)  # type: ignore[assignment]
    rec = JobReconciler(ctx, default_registry())  # type: ignore[arg-type]
    wl = workload("job", "train", "uid-1", owned=True, labelled=True)
    wl["metadata"].update(deletionTimestamp=GONE, finalizers=[IN_USE, "example.com/other"])
    ctx.store(WL).put(wl)
    rec.on_workload("ADDED", None, wl)
    for i in range(2):
        ctx.store(POD).put(pod("job", "train", "uid-1", i, phase="Running", deleting=True,
                               owner_ref=True))
    return rec, ctx, wl


def _pass(rec: JobReconciler, ns: str = NS) -> float | None:
    return asyncio.run(rec.reconcile_object(JOB, ns, "train"))


def test_a_deleted_jobs_workload_keeps_the_finalizer_while_its_pods_run() -> None:
    rec, ctx, wl = _deleted_jobs_workload()
    assert _pass(rec) == PODS_POLL
    assert ctx.client.updates == [] and ctx.client.deletes == []
    # Killed (Failed), kept by a finalizer of the tenant's: they hold nothing any more.
    for i in range(2):
        ctx.store(POD).put(pod("job", "train", "uid-1", i, phase="Failed", deleting=True,
                               owner_ref=True))
    assert _pass(rec) is None
    [body] = ctx.client.updates
    assert body["metadata"]["name"] == wl["metadata"]["name"]
    assert body["metadata"]["finalizers"] == ["example.com/other"]
    assert ctx.client.deletes == []  # being deleted already: the garbage collector's


def test_immediately_takes_the_finalizer_off_at_once_as_kueue() -> None:
    rec, ctx, _ = _deleted_jobs_workload("Immediately")
    _pass(rec)  # looked at again while the pods run (the orphaned pods' rule), released now
    assert [b["metadata"]["finalizers"] for b in ctx.client.updates] == [["example.com/other"]]


def test_an_ownerless_workload_being_deleted_keeps_it_while_its_pods_run() -> None:
    """Its owner gone with ``--cascade=orphan`` (no ownerReference, the job-uid label), then
    deleted by hand: the finalizer goes once the orphaned pods are gone (Kueue: at once)."""
    rec, ctx, _ = _deleted_jobs_workload()
    wl = workload("job", "train", "uid-1", owned=False, labelled=True)
    wl["metadata"].update(deletionTimestamp=GONE, finalizers=[IN_USE])
    ctx.store(WL).put(wl)
    rec.on_workload("MODIFIED", None, wl)
    name = wl["metadata"]["name"]
    assert asyncio.run(rec.reconcile_workload(NS, name)) == PODS_POLL
    assert ctx.client.updates == []
    for i in range(2):
        ctx.store(POD).remove(f"{NS}/train-uid-1-{i}")
    assert asyncio.run(rec.reconcile_workload(NS, name)) is None
    assert [b["metadata"].get("finalizers") for b in ctx.client.updates] == [[]]


def test_a_finished_workload_loses_the_finalizer() -> None:
    rec, ctx, _ = _deleted_jobs_workload()
    wl = workload("job", "other", "uid-2", owned=False, labelled=False)
    wl["metadata"]["finalizers"] = [IN_USE]
    wl["status"]["conditions"].append({"type": "Finished", "status": "True"})
    ctx.store(WL).put(wl)
    assert asyncio.run(rec.reconcile_workload(NS, wl["metadata"]["name"])) is None
    assert [b["metadata"].get("finalizers") for b in ctx.client.updates] == [[]]


def test_a_workload_deleted_by_hand_stops_its_job_then_loses_the_finalizer() -> None:
    """Kueue v0.17.1: the Job is stopped ("Workload is deleted"), then the finalizer goes;
    pykueue (``WhenPodsGone``) once the stopped Job's pods are gone."""
    job = _job(suspend=False, record=True, deleting=False)
    wl = _admitted_workload(job)
    wl["metadata"].update(deletionTimestamp=GONE, finalizers=[IN_USE], resourceVersion="3")
    ctx = _stores([_pod("train-a")])
    ctx.store(JOB.key).put(job)
    ctx.store(WL).put(wl)
    rec = JobReconciler.__new__(JobReconciler)
    rec.ctx, rec.registry = ctx, default_registry()  # type: ignore[assignment]
    assert _pass(rec, "ns") == PODS_POLL
    assert ("replace", "jobs", "train") in ctx.writes  # suspended
    assert ("replace", "workloads", wl["metadata"]["name"]) not in ctx.writes
    ctx = _stores([])
    ctx.store(JOB.key).put(_stopped_job())
    ctx.store(WL).put(wl)
    rec.ctx = ctx  # type: ignore[assignment]
    assert _pass(rec, "ns") is None
    assert ctx.writes == [("replace", "workloads", wl["metadata"]["name"])]


def test_created_workloads_carry_the_finalizer_when_asked() -> None:
    for on in (False, True):
        ctx = _stores([])
        ctx.settings = Settings(jobs={"workload_finalizer": on})
        ctx.store(JOB.key).put(_stopped_job())
        rec = JobReconciler.__new__(JobReconciler)
        rec.ctx, rec.registry = ctx, default_registry()  # type: ignore[assignment]
        _pass(rec, "ns")
        [body] = ctx.created
        assert body["metadata"].get("finalizers", []) == ([IN_USE] if on else [])

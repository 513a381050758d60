"""A tenant's pod that carries a job's name and uid labels (the uid is on the job's Workload's
``kueue.x-k8s.io/job-uid`` label) but is not the job's (no controller, or one of its own) does
not keep the job's deleted Workload's quota (``pod_of``: the controller chain must lead back
to the job; ``JobReconciler.pods_holding``: a pod without a controller counts only for a
Workload whose owner went with its owner reference, ``kubectl delete --cascade=orphan``).
The job's own pods still count, for each kind with a uid label (batch Job, JobSet)."""

from __future__ import annotations

from typing import Any

from app.integrations.batchjob.job import KIND as JOB
from app.integrations.framework import pod_of
from app.integrations.jobset.jobset import KIND as JOBSET
from app.kube.context import POD, WL
from tests.unit.test_orphaned_workloads import NS, owner, pod, reconciler, workload
from tests.unit.test_workload_finalizer import _deleted_jobs_workload, _pass


def _controlled(p: dict[str, Any], api_version: str, kind: str, name: str,
                uid: str) -> dict[str, Any]:
    p["metadata"]["ownerReferences"] = [{"apiVersion": api_version, "kind": kind,
                                         "name": name, "uid": uid, "controller": True}]
    return p


def _decoy(name: str = "decoy") -> dict[str, Any]:
    """A bare Pod with Job ``train``'s (uid ``uid-1``) two pod labels and no owner."""
    p = pod("job", "train", "uid-1", 9, phase="Running")
    p["metadata"].update(name=name, uid=f"p-{name}")
    return p


def test_a_decoy_pod_does_not_keep_a_deleted_jobs_quota() -> None:
    """The rev26 recipe: Job ``train`` deleted, its pods gone, a tenant's bare Pod with its
    labels runs: the finalizer goes and the core's hold (``pods_holding``) is 0."""
    rec, ctx, wl = _deleted_jobs_workload()
    for i in range(2):
        ctx.store(POD).remove(f"{NS}/train-uid-1-{i}")
    ctx.store(POD).put(_decoy())
    assert rec.pods_holding(wl, "uid-1") == 0
    assert _pass(rec) is None
    assert [b["metadata"]["finalizers"] for b in ctx.client.updates] == [["example.com/other"]]


def test_a_pod_controlled_by_a_tenants_own_object_does_not_count() -> None:
    """Labelled as the Job's, controlled by the tenant's own (stored) Job: not the Job's,
    whether the Workload names its owner or the owner went with its reference."""
    rec, ctx, wl = _deleted_jobs_workload()
    for i in range(2):
        ctx.store(POD).remove(f"{NS}/train-uid-1-{i}")
    ctx.store("job").put(owner("job", "mine", "uid-9"))
    ctx.store(POD).put(_controlled(_decoy(), "batch/v1", "Job", "mine", "uid-9"))
    ctx.store(POD).put(_controlled(_decoy("rs"), "apps/v1", "ReplicaSet", "rs", "uid-8"))
    assert rec.pods_holding(wl, "uid-1") == 0
    orphaned = workload("job", "train", "uid-1", owned=False, labelled=True)
    assert rec.pods_holding(orphaned, "uid-1") == 0


def test_the_deleted_jobs_own_pods_still_hold_its_quota() -> None:
    """Its pods (controller: the Job, by its uid) still running out their grace period hold
    the quota, the decoy beside them adding nothing."""
    rec, ctx, wl = _deleted_jobs_workload()
    ctx.store(POD).put(_decoy())
    assert rec.pods_holding(wl, "uid-1") == 2
    assert _pass(rec) == 1.0 and ctx.client.updates == []


def test_a_bare_pod_counts_only_once_the_job_went_with_its_owner_reference() -> None:
    """While the Job exists a bare pod is not its own (the Job controller adopts it: then it
    is, by its reference); once the Job is gone and its Workload still names it (deleted in
    the background), neither; after ``kubectl delete --cascade=orphan`` (the Workload lost
    its reference, or the Job still carries the garbage collector's ``orphan`` finalizer)
    its pods have no controller any more, and a bare one with its labels counts."""
    rec, ctx = reconciler()
    job = owner("job", "train", "uid-1")
    ctx.store("job").put(job)
    bare = _decoy()
    assert not pod_of(JOB, bare, "train", "uid-1", ctx=ctx)  # type: ignore[arg-type]
    adopted = _controlled(_decoy(), "batch/v1", "Job", "train", "uid-1")
    assert pod_of(JOB, adopted, "train", "uid-1", ctx=ctx)  # type: ignore[arg-type]
    ctx.store(POD).put(bare)
    owned = workload("job", "train", "uid-1", owned=True, labelled=True)
    ctx.store(WL).put(owned)
    assert rec.pods_holding(owned, "uid-1") == 0  # the Job there, not being orphaned
    ctx.store("job").put(owner("job", "train", "uid-1", deleting=True))  # orphan finalizer
    assert rec.pods_holding(owned, "uid-1") == 1
    ctx.store("job").remove(f"{NS}/train")
    assert rec.pods_holding(owned, "uid-1") == 0  # gone in the background
    orphaned = workload("job", "train", "uid-1", owned=False, labelled=True)
    assert rec.pods_holding(orphaned, "uid-1") == 1  # gone with --cascade=orphan


def test_a_jobsets_pods_count_through_its_child_jobs() -> None:
    """A JobSet's pods are controlled by its child Jobs: one the stores hold controlled by
    the JobSet, or one no store holds (deleted: its pods go after it); not one the stores
    hold controlled by anything else (a tenant's CronJob's Job whose pods carry the JobSet's
    labels), nor a pod with no controller while the JobSet's Workload names it. (Orphaned,
    a JobSet's Jobs lost their controller too: a Job with none is taken for one of them.)"""
    rec, ctx = reconciler()
    wl = workload("jobset", "ts", "js-1", owned=True, labelled=True)
    child = _controlled({"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": "ts-w-0", "namespace": NS, "uid": "c-1"}},
        "jobset.x-k8s.io/v1alpha2", "JobSet", "ts", "js-1")
    mine = _controlled(owner("job", "mine", "uid-9"), "batch/v1", "CronJob", "cron", "uid-7")
    ctx.store("job").put(child)
    ctx.store("job").put(mine)
    real = _controlled(pod("jobset", "ts", "js-1", 0, phase="Running"),
                       "batch/v1", "Job", "ts-w-0", "c-1")
    gone = _controlled(pod("jobset", "ts", "js-1", 1, phase="Running"),
                       "batch/v1", "Job", "ts-w-1", "c-2")
    forged = _controlled(pod("jobset", "ts", "js-1", 2, phase="Running"),
                         "batch/v1", "Job", "mine", "uid-9")
    bare = pod("jobset", "ts", "js-1", 3, phase="Running")
    for p in (real, gone, forged, bare):
        ctx.store(POD).put(p)
    assert [pod_of(JOBSET, p, "ts", "js-1", ctx=ctx)  # type: ignore[arg-type]
            for p in (real, gone, forged, bare)] == [True, True, False, False]
    assert rec.pods_holding(wl, "js-1") == 2
    assert rec.pods_holding(workload("jobset", "ts", "js-1", owned=False, labelled=True),
                            "js-1") == 3  # orphaned: the bare one counts, not the forged

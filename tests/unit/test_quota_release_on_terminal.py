"""A pod's quota is released once it is Succeeded or Failed, even while it is being deleted
(Kueue KEP-10076 "Quota Release Strategy", ``OnTerminal``: held until all pods physically
reach Succeeded or Failed; breaker finding F4): a finalizer a tenant puts on its pods keeps a
killed (Failed, being deleted) pod as long as the tenant likes, and with it, before, the
quota of the deleted or evicted job, borrowed quota included. A stopped job is still not
started again while its killed pods exist (``pod_blocks_restart``: its operator would count
their failure against the new run). docs/lifecycle.md, docs/security.md."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from app.core.types import WorkloadKey
from app.integrations import default_registry
from app.integrations.batchjob.job import KIND as JOB_KIND
from app.integrations.framework import pod_blocks_restart, pod_holds_quota
from app.integrations.reconciler import PODS_POLL, JobReconciler
from app.kube.client import JOBS, NAMESPACES, PODS, RESOURCE_FLAVORS, WORKLOADS
from app.kube.context import NS as NS_STORE
from app.kube.context import PC, POD, RF, WL, WPC
from tests.unit.fake_ctx import FakeCtx
from tests.unit.test_deleted_workload_hold import (
    KEY,
    _delete_train,
    _pod_event,
    _queue_b,
    _setup,
)
from tests.unit.test_job_being_deleted import DELETING, _evicted_workload, _job, _pod
from tests.unit.test_orphaned_workloads import NS

KEEP = "example.com/keep"  # a tenant's own finalizer on its pods


def _killed(name: str) -> dict[str, Any]:
    """A pod of ``train`` killed by a stop (Failed, being deleted) that a finalizer keeps."""
    p = _pod(name, deletionTimestamp=DELETING, finalizers=[KEEP])
    p["status"]["phase"] = "Failed"
    return p


def _terminating(name: str) -> dict[str, Any]:
    """A pod of ``train`` being deleted that still runs out its grace period."""
    return _pod(name, deletionTimestamp=DELETING, finalizers=[KEEP])


@pytest.mark.parametrize(("phase", "deleting", "quota", "restart"), [
    ("Pending", False, True, True),
    ("Running", False, True, True),
    ("Running", True, True, True),   # its grace period: still runs
    ("Failed", True, False, True),   # killed, kept by a finalizer: no quota, no restart yet
    ("Succeeded", True, False, True),
    ("Failed", False, False, False),
    ("Succeeded", False, False, False),
])
def test_the_two_predicates(phase: str, deleting: bool, quota: bool, restart: bool) -> None:
    pod = _pod("p", **({"deletionTimestamp": DELETING} if deleting else {}))
    pod["status"]["phase"] = phase
    assert (pod_holds_quota(pod), pod_blocks_restart(pod)) == (quota, restart)


def test_a_deleted_workloads_quota_goes_when_its_pods_are_failed_though_kept() -> None:
    """The deletion hold (``InformerFeed``): both pods of the deleted ``train`` killed and
    kept by the tenant's finalizer: the quota is released and ``b`` admitted. One of them
    still Running while being deleted keeps it held."""
    sim, loop, jctx, pods = _setup()
    _delete_train(loop)
    kept = []
    for p in pods:
        p = copy.deepcopy(p)
        p["metadata"]["finalizers"] = [KEEP]
        kept.append(p)
        _pod_event(loop, jctx, p, deleting=True)
    _pod_event(loop, jctx, kept[0], phase="Failed", deleting=True)
    assert _queue_b(sim) == [] and sim.usage("cq", resource="gpu") == 2
    assert sim.c.workload(KEY) is not None
    _pod_event(loop, jctx, kept[1], phase="Failed", deleting=True)
    assert sim.c.workload(KEY) is None and loop.feed.held == {}
    assert sim.admits(sim.cycle()) == [WorkloadKey(f"{NS}/b")]


def _stores(pods: list[dict[str, Any]]) -> FakeCtx:
    """``_ctx``'s stores, the ResourceFlavors' (a start reads them) and a clock."""
    ctx = FakeCtx({WL: WORKLOADS, WPC: WORKLOADS, PC: WORKLOADS, JOB_KIND.key: JOBS,
                   POD: PODS, NS_STORE: NAMESPACES, RF: RESOURCE_FLAVORS}, {POD: pods})
    ctx.clock = lambda: 1000.0  # type: ignore[attr-defined]
    return ctx


def _reconcile(job: dict[str, Any], wl: dict[str, Any], pods: list[dict[str, Any]]
               ) -> tuple[Any, float | None, list[tuple[Any, ...]]]:
    ctx = _stores(pods)
    events: list[tuple[Any, ...]] = []
    ctx.recorder = type("R", (), {"emit": staticmethod(lambda *a: events.append(a))})()
    ctx.store(JOB_KIND.key).put(job)
    ctx.store(WL).put(wl)
    rec = JobReconciler.__new__(JobReconciler)
    rec.ctx, rec.registry = ctx, default_registry()  # type: ignore[assignment]
    again = asyncio.run(rec.reconcile_object(JOB_KIND, "ns", "train"))
    return ctx, again, events


def _stopped_job() -> dict[str, Any]:
    """``train`` stopped (suspended, its record gone), no pod counted active any more."""
    job = _job(suspend=True, record=False, deleting=False)
    job["status"] = {}
    return job


def test_an_evicted_workloads_quota_goes_when_its_pods_are_failed_though_kept() -> None:
    """The eviction path (``_stop_then_release``): the stopped Job's pods killed, kept by the
    tenant's finalizer: the Workload's quota is released (its status written). A pod still
    Running while being deleted keeps it (no write, looked at again)."""
    release = ("replace", WORKLOADS.plural, _evicted_workload()["metadata"]["name"])
    ctx, again, _ = _reconcile(_stopped_job(), _evicted_workload(),
                               [_killed("train-a"), _killed("train-b")])
    assert ctx.writes == [release] and again is None
    ctx, again, events = _reconcile(_stopped_job(), _evicted_workload(),
                                    [_killed("train-a"), _terminating("train-b")])
    assert ctx.writes == [] and again == PODS_POLL
    assert [e[2] for e in events] == ["WaitingForPods"]


def _admitted_workload(job: dict[str, Any]) -> dict[str, Any]:
    """``job``'s Workload, admitted again (its quota was released at the eviction)."""
    wl = JOB_KIND.workload_object(job, priority_classes={}, pod_priority_classes={})
    wl = copy.deepcopy(_evicted_workload()) | {"spec": wl["spec"]}
    wl["status"]["conditions"] = [
        {"type": t, "status": "True", "reason": t} for t in ("QuotaReserved", "Admitted")]
    return wl


def test_a_stopped_job_is_not_started_again_while_its_killed_pods_exist() -> None:
    """Its Workload admitted again while the killed pods (Failed, being deleted) are kept by
    the tenant's finalizer: the Job stays suspended (Event ``WaitingForPods``, looked at
    again); once they are gone it is started."""
    job = _stopped_job()
    ctx, again, events = _reconcile(job, _admitted_workload(job), [_killed("train-a")])
    assert ctx.writes == [] and again == PODS_POLL
    assert [e[2] for e in events] == ["WaitingForPods"]
    ctx, _, _ = _reconcile(job, _admitted_workload(job), [])
    assert ("replace", "jobs", "train") in ctx.writes


def test_a_replaced_workload_goes_but_no_new_one_while_killed_pods_exist() -> None:
    """A Job changed after admission (``spec.parallelism`` raised: ``_stop_mismatched``),
    stopped, its pods killed and kept: the old Workload is deleted (its quota released), and
    no Workload for the new shape is created while they exist (``_without_workload``)."""
    job = _stopped_job()
    wl = _admitted_workload(job)
    raised = copy.deepcopy(job)
    raised["spec"]["parallelism"] = raised["spec"]["completions"] = 3
    ctx, _, _ = _reconcile(raised, wl, [_killed("train-a")])
    assert ("delete", WORKLOADS.plural, wl["metadata"]["name"]) in ctx.writes
    ctx = _stores([_killed("train-a")])
    ctx.store(JOB_KIND.key).put(raised)
    rec = JobReconciler.__new__(JobReconciler)
    rec.ctx, rec.registry = ctx, default_registry()  # type: ignore[assignment]
    assert asyncio.run(rec.reconcile_object(JOB_KIND, "ns", "train")) == PODS_POLL
    assert ctx.writes == []
    ctx.store(POD).remove("ns/train-a")
    asyncio.run(rec.reconcile_object(JOB_KIND, "ns", "train"))
    assert [w[:2] for w in ctx.writes] == [("create", WORKLOADS.plural)]


@pytest.mark.parametrize("phase", ["Pending", "Running"])
def test_a_pod_being_deleted_that_no_node_was_given_holds_no_quota(phase: str) -> None:
    """break26: a tenant's finalizer keeps a Pending pod being deleted (the API server refuses
    to bind a pod being deleted, kube-scheduler skips one): it never runs, so it holds none of
    its job's quota; it still keeps its stopped job from being started again while it exists.
    The same pod on a node holds (its grace period)."""
    pod = _pod("p", deletionTimestamp=DELETING, finalizers=[KEEP])
    pod["status"]["phase"] = phase
    pod["spec"].pop("nodeName", None)
    assert (pod_holds_quota(pod), pod_blocks_restart(pod)) == (False, True)
    pod["spec"]["nodeName"] = "a100-0"
    assert pod_holds_quota(pod)

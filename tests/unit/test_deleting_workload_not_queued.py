"""A pending Workload being deleted (``deletionTimestamp``, kept by the
``kueue.x-k8s.io/resource-in-use`` finalizer or another) is not queued
(``InformerFeed.on_workload``): admitted, or preempting for, it would hold quota for a job
that never runs until its finalizer goes. Nor is an admission written for one whose deletion
the store shows after the decision (``DecisionWriter.admit``). An admitted one keeps its
usage until it is released (review26; Kueue v0.17.1's queues keep it until its delete
event)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from app.config import Settings
from app.controllers.scheduling_loop import SchedulerLoop
from app.core.decisions import Admit
from tests.builders import Sim, cluster_queue, workload
from tests.unit.test_eta_messages import FakeClient, FakeStore

GONE = "2026-12-06T01:00:00Z"


def _object(name: str, *, deleting: bool, admitted: bool = False) -> dict[str, Any]:
    """Workload ``ns/<name>`` (1 pod, 2 CPU) in LocalQueue ``lq-cq``."""
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"u-{name}",
                            "resourceVersion": "3", "creationTimestamp": "2026-12-06T00:00:00Z",
                            "finalizers": ["kueue.x-k8s.io/resource-in-use"]}
    if deleting:
        meta["deletionTimestamp"] = GONE
    status: dict[str, Any] = {"conditions": []}
    if admitted:
        status = {"admission": {"clusterQueue": "cq", "podSetAssignments": [
            {"name": "main", "count": 1, "flavors": {"cpu": "default-flavor"},
             "resourceUsage": {"cpu": "2"}}]},
            "conditions": [{"type": t, "status": "True", "reason": t, "message": "",
                            "lastTransitionTime": "2026-12-06T00:00:01Z"}
                           for t in ("QuotaReserved", "Admitted")]}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": meta,
            "spec": {"queueName": "lq-cq", "podSets": [
                {"name": "main", "count": 1, "template": {"spec": {"containers": [
                    {"name": "c", "image": "i", "resources": {"requests": {"cpu": "2"}}}]}}}]},
            "status": status}


def _loop(sim: Sim) -> tuple[SchedulerLoop, Any, FakeStore]:
    store = FakeStore()
    ctx = SimpleNamespace(
        settings=Settings(controllers_enabled=False), client=FakeClient(),
        store=lambda kind: store, clock=lambda: sim.now, may_write=True, inflight=set(),
        informers=SimpleNamespace(informers={}), leader=SimpleNamespace(is_leader=True),
        wake=lambda: None, recorder=SimpleNamespace(emit=lambda *a: None))
    framework = SimpleNamespace(owner_object=lambda wl: None, notify=lambda wl, key: None,
                                pods_holding=lambda wl, uid: None)
    return SchedulerLoop(ctx, jobs=framework, cluster=sim.c), ctx, store  # type: ignore[arg-type]


def test_a_pending_workload_being_deleted_leaves_the_queue() -> None:
    sim = Sim(cluster_queue("cq").flavor("default-flavor", cpu=4))
    loop, _, store = _loop(sim)
    pending = _object("p", deleting=False)
    store.put(pending)
    loop.feed.on_workload("ADDED", None, pending)
    assert sim.pending("p")
    deleting = _object("p", deleting=True)
    store.put(deleting)
    loop.feed.on_workload("MODIFIED", pending, deleting)
    assert sim.c.workload(sim.key("p")) is None
    assert sim.admits(sim.cycle()) == [] and sim.usage("cq") == 0


async def test_an_admitted_workload_being_deleted_keeps_its_usage() -> None:
    sim = Sim(cluster_queue("cq").flavor("default-flavor", cpu=4))
    loop, _, store = _loop(sim)
    admitted = _object("a", deleting=False, admitted=True)
    store.put(admitted)
    loop.feed.on_workload("ADDED", None, admitted)
    deleting = _object("a", deleting=True, admitted=True)
    store.put(deleting)
    loop.feed.on_workload("MODIFIED", admitted, deleting)
    assert sim.admitted("a") and sim.usage("cq") == 2000


async def test_no_admission_is_written_for_a_workload_deleted_after_the_decision() -> None:
    sim = Sim(cluster_queue("cq").flavor("default-flavor", cpu=4))
    loop, ctx, store = _loop(sim)
    sim.submit(workload("p").cq("cq").pods(1, cpu=2))
    [d] = [d for d in sim.cycle() if isinstance(d, Admit)]
    assert sim.usage("cq") == 2000  # assumed
    store.put(_object("p", deleting=True))  # the store shows its deletion before the write
    ctx.inflight.add(str(d.workload))
    await loop.decisions.admit(d)
    assert ctx.client.writes == []
    assert sim.c.workload(sim.key("p")) is None and sim.usage("cq") == 0

"""An eviction decided for a preemptor that no longer waits is not written
(app/controllers/decision_writer.py ``DecisionWriter.evict`` / ``_still_preempting``).

At a low client QPS the eviction writes of a Preempt decision wait for write slots; quota
freed by others meanwhile can admit the preemptor first. The eviction, still queued, would
then throw the victim's work away for nothing (seen in the side-by-side run at QPS 50, issue
16). Kueue v0.17.1 writes a cycle's preemptions before its next cycle, so it never evicts for
a preemptor already admitted."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from app.config import Settings
from app.controllers.scheduling_loop import SchedulerLoop
from app.core.decisions import Admit, Preempt
from app.core.spec import LocalQueue
from app.core.types import ClusterQueueName
from app.kube.workqueue import acting_lane
from tests.builders import Sim, cluster_queue, workload
from tests.unit.test_eta_messages import FakeClient, FakeStore


def _loop(sim: Sim) -> tuple[SchedulerLoop, SimpleNamespace]:
    store = FakeStore()
    for k in sim.c.workload_keys():
        ns, name = k.split("/", 1)
        store.put({"metadata": {"namespace": ns, "name": name, "resourceVersion": "1"},
                   "spec": {}, "status": {"admission": {"clusterQueue": "cq"}}})
    ctx = SimpleNamespace(
        settings=Settings(controllers_enabled=False), client=FakeClient(),
        store=lambda kind: store, clock=lambda: sim.now, may_write=True, inflight=set(),
        leader=SimpleNamespace(is_leader=True), wake=lambda: None,
        recorder=SimpleNamespace(emit=lambda *a: None))
    framework = SimpleNamespace(owner_object=lambda wl: None, notify=lambda wl, key: None,
                                pods_holding=lambda wl, uid: None)
    return SchedulerLoop(ctx, jobs=framework, cluster=sim.c), ctx  # type: ignore[arg-type]


def _preempt() -> tuple[Sim, Preempt]:
    """cq (4 CPU, withinClusterQueue LowerPriority): f and v (2 CPU each, priority 0)
    admitted, v the more recent; p (2 CPU, priority 10) preempts v."""
    sim = Sim(cluster_queue("cq").flavor("default-flavor", cpu=4).preemption(
        within="LowerPriority"))
    for name in ("f", "v"):
        sim.submit(workload(name).cq("cq").pods(1, cpu=2))
        assert sim.admits(sim.cycle()) == [f"ns/{name}"]
    sim.submit(workload("p").cq("cq").pods(1, cpu=2).priority(10))
    d = next(d for d in sim.cycle() if isinstance(d, Preempt))
    assert d.preemptor == "ns/p" and [v.workload for v in d.victims] == ["ns/v"]
    return sim, d


async def _evict(loop: SchedulerLoop, d: Preempt) -> bool:
    v = d.victims[0]
    return await loop.decisions.evict(v.workload, "Preempted", v.message, v, d)  # noqa: SLF001


async def test_an_eviction_whose_preemptor_was_admitted_meanwhile_is_not_written() -> None:
    sim, d = _preempt()
    loop, ctx = _loop(sim)
    sim.finish("f")  # f ends while v's eviction waits for a write slot: p fits without it
    assert sim.admits(sim.cycle()) == ["ns/p"]
    assert not await _evict(loop, d)
    assert ctx.client.writes == [] and loop.decisions.evictions_dropped == 1
    assert sim.admitted("v") and sim.usage("cq") == 4000  # v keeps running, p beside it


async def test_an_eviction_whose_preemptor_was_deleted_is_not_written() -> None:
    sim, d = _preempt()
    loop, ctx = _loop(sim)
    assert sim.c.delete_workload(sim.key("p"))
    assert not await _evict(loop, d)
    assert ctx.client.writes == [] and sim.admitted("v")


async def test_an_eviction_whose_preemptor_still_waits_is_written() -> None:
    sim, d = _preempt()
    loop, ctx = _loop(sim)
    assert await _evict(loop, d)
    written: Any = ctx.client.writes[-1]
    conds = {c["type"]: c for c in written["status"]["conditions"]}
    assert conds["Evicted"]["status"] == "True" and conds["Evicted"]["reason"] == "Preempted"
    assert loop.decisions.evictions_dropped == 0 and sim.state("v") == "evicting"
    assert not any(isinstance(x, Admit) for x in sim.cycle())  # p waits for v to stop


async def test_a_reclaims_victim_writes_take_the_preemptors_namespace_turns() -> None:
    """team-a borrows team-b's quota in the cohort; team-b's Workload reclaims it
    (reclaimWithinCohort Any). The victim's eviction is written, and its owner handed to the
    job framework, acting for team-b (``app.kube.workqueue.acting_for``): its writes wait in
    team-b's turns, not behind team-a's flood. The victim chosen is Kueue's."""
    sim = Sim(cluster_queue("a").cohort("co").flavor("default-flavor", cpu=2),
              cluster_queue("b").cohort("co").flavor("default-flavor", cpu=2)
              .preemption(reclaim="Any"),
              namespaces={"team-a": {}, "team-b": {}})
    sim.c.add_local_queue(LocalQueue("team-a", "lq", ClusterQueueName("a")))
    sim.c.add_local_queue(LocalQueue("team-b", "lq", ClusterQueueName("b")))
    for name in ("a1", "a2"):
        sim.submit(workload(name).namespace("team-a").queue("lq").pods(1, cpu=2))
        sim.cycle()
    assert sim.usage("a") == 4000  # borrows team-b's 2 CPU
    sim.submit(workload("p").namespace("team-b").queue("lq").pods(1, cpu=2))
    d = next(d for d in sim.cycle() if isinstance(d, Preempt))
    assert d.preemptor == "team-b/p" and [v.workload for v in d.victims] == ["team-a/a2"]
    loop, ctx = _loop(sim)
    lanes: list[tuple[str, str | None]] = []

    async def replace(resource: Any, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
        lanes.append(("evict", acting_lane()))
        return body
    ctx.client.replace = replace
    loop.decisions.jobs.notify = lambda wl, key: lanes.append(("notify", acting_lane()))
    loop.apply(d)
    assert acting_lane() is None  # only the victims' tasks act for team-b
    await asyncio.gather(*loop.writes._tasks)  # noqa: SLF001
    assert lanes == [("evict", "team-b"), ("notify", "team-b")]

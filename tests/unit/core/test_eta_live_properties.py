"""breaker7, property test (hypothesis): a ``bounded`` ETA is the start the live core gives
when every Workload runs exactly to its ``maximumExecutionTimeSeconds`` and evictions end
in the instant of their preemption, after its cycles settle (the ETA run's own model), over
random cohorts with bounded preemption (minimum runtime, reclaim backoff), a ClusterQueue
deleted and created again, and random running and pending Workloads. The live side is the
core run forward by hand: ends, evictions and the core's wake-ups (``next_wakeup``)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.decisions import Admit, Preempt
from app.core.eta import BOUNDED, RuntimeModel, estimate
from app.core.spec import ClusterQueueSpec, FairSharing
from app.core.types import ClusterQueueName, WorkloadKey
from tests.builders import Sim, cluster_queue, workload
from tests.unit.core.test_properties import cluster_queues

PROPS = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))

WL = st.tuples(st.integers(0, 3), st.integers(1, 3), st.integers(1, 3), st.integers(-1, 1),
               st.sampled_from([30, 100, 250]))


@st.composite
def scenes(draw):
    specs = draw(cluster_queues())
    specs = [replace(s, min_runtime_s=draw(st.sampled_from([None, 40.0])),
                     reclaim_backoff_s=draw(st.sampled_from([None, 70.0]))) for s in specs]
    first = draw(st.lists(WL, max_size=5))
    second = draw(st.lists(WL, min_size=1, max_size=5))
    recreate = draw(st.none() | st.integers(0, 3))
    return specs, first, second, draw(st.booleans()), recreate


def _submit(sim: Sim, specs: list[ClusterQueueSpec], tag: str, wls) -> None:
    for i, (cq, pods, cpu, prio, limit) in enumerate(wls):
        sim.submit(workload(f"{tag}{i}").cq(f"cq{cq % len(specs)}").pods(pods, cpu=cpu)
                   .priority(prio).limit(limit))


def _step(sim: Sim, t: float, ends: dict[WorkloadKey, float],
          starts: dict[WorkloadKey, float]) -> None:
    """Cycles at ``t`` until none decides anything; admissions land at once; victims stop at
    ``t`` too, once the cycles reached that fixed point (an eviction is an event of its own,
    after the decisions of the instant, as the simulator and the ETA run order it: an
    eviction delay of 0), and the cycles at ``t`` go on until nothing is left."""
    stopping: dict[WorkloadKey, None] = {}
    for _ in range(200):
        ds = sim.c.schedule(t)
        if not ds:
            if not stopping:
                return
            for key in stopping:
                sim.c.finish_eviction(key, t)
            stopping.clear()
            continue
        for d in ds:
            if isinstance(d, Admit):
                starts.setdefault(d.workload, t)
                wl = sim.c.domain_workload(d.workload)
                sim.c.update_workload(wl)
                ends[d.workload] = t + wl.max_execution_seconds
            elif isinstance(d, Preempt):
                for v in d.victims:
                    ends.pop(v.workload, None)
                    stopping[v.workload] = None
    raise AssertionError("no fixed point")


def _live(sim: Sim, t: float, ends: dict[WorkloadKey, float]) -> dict[WorkloadKey, float]:
    starts: dict[WorkloadKey, float] = {}
    for _ in range(300):
        _step(sim, t, ends, starts)
        nxt = [x for x in (min(ends.values(), default=None), sim.c.next_wakeup())
               if x is not None and x > t]
        if not nxt:
            return starts
        t = min(nxt)
        for k in [k for k, e in ends.items() if e <= t]:
            del ends[k]
            sim.c.finish(k)
    return starts


@PROPS
@given(scenes())
def test_property_a_bounded_eta_is_the_live_start(scene):
    specs, first, second, fair, recreate = scene
    sim = Sim(*specs, fair_sharing=FairSharing() if fair else None)
    ends: dict[WorkloadKey, float] = {}
    _submit(sim, specs, "r", first)
    _step(sim, sim.tick(), ends, {})
    sim.tick(20.0)
    if recreate is not None:  # a ClusterQueue deleted and created again (its memory gone)
        spec = specs[recreate % len(specs)]
        assert sim.c.delete_cluster_queue(spec.name)
        sim.c.add_cluster_queue(spec)
    _submit(sim, specs, "p", second)
    now = sim.tick()
    _step(sim, now, ends, {})
    etas = {}
    for s in specs:
        etas.update(estimate(sim.c, s.name, now, RuntimeModel()).etas)
    starts = _live(sim, now, ends)
    for key, e in etas.items():
        if e.confidence == BOUNDED:
            assert starts.get(key) == e.start, (key, e, starts.get(key))


def test_fair_sharing_a_bounded_eta_is_the_live_start_after_a_share_rise() -> None:
    """breaker7: p0 is parked (no fair-sharing victim while cq2 holds only p2); p3's
    admission later in the same cycle raises cq2's share without requeueing p0 (Kueue
    v0.17.1 requeues inadmissible Workloads when quota frees, not on an admission). The
    ETA's fork re-evaluated parked Workloads and preempted p2 at once (ETA now); the live
    core starts p0 at p2's end (+30 s). The fork keeps them parked."""
    specs = [cluster_queue("cq0").cohort("co").flavor("f0", cpu=6).flavor("f1", cpu=2)
             .preemption(reclaim="Any").build(),
             cluster_queue("cq1").flavor("f0", cpu=0).flavor("f1", cpu=0).build(),
             cluster_queue("cq2").cohort("co").flavor("f0", cpu=4).flavor("f1", cpu=4).build()]
    sim = Sim(*specs, fair_sharing=FairSharing())
    ends: dict[WorkloadKey, float] = {}
    _submit(sim, specs, "p", [(0, 3, 3, 0, 30), (1, 1, 1, 0, 30), (2, 2, 3, 0, 30),
                              (2, 2, 3, 0, 30)])
    now = sim.tick()
    _step(sim, now, ends, {})
    assert sim.pending("p0") and sim.admitted("p2") and sim.admitted("p3")
    e = estimate(sim.c, ClusterQueueName("cq0"), now, RuntimeModel()).etas[sim.key("p0")]
    assert e.confidence == BOUNDED
    assert _live(sim, now, ends)[sim.key("p0")] == e.start

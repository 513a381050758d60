"""Property tests (hypothesis): ClusterQueues deleted and created again while Workloads are
admitted, being evicted, pending and parked (``Scheduler.delete_cluster_queue``, which also
forgets the scheduler's per-queue memory: usage peaks, kept-room run, reclaim backoff,
nominations, parked class-mates), with bounded preemption (min runtime, reclaim backoff).

Two deletion modes:

- under the ``kueue.x-k8s.io/resource-in-use`` finalizer (Kueue v1beta2: the object goes
  only once no Workload holds quota in it): capacity, lending and gang invariants hold in
  every cycle (``test_properties.check_capacity``);
- forced (the finalizer removed by hand): admitted Workloads keep their records, so the
  cohort may be over-committed once the queue is back, but no Workload is lost, none holds
  a partial admission, and an empty cluster admits or explains every pending Workload.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.decisions import PendingReason
from app.core.spec import ClusterQueueSpec
from app.core.types import ClusterQueueName, WorkloadKey
from tests.builders import Sim
from tests.unit.core.test_properties import (
    check_capacity,
    check_gang,
    cluster_queues,
    submit_op,
)

PROPS = settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))


@st.composite
def bounded_queues(draw) -> list[ClusterQueueSpec]:
    specs = draw(cluster_queues())
    return [replace(s, min_runtime_s=draw(st.sampled_from([None, 5.0, 30.0])),
                    reclaim_backoff_s=draw(st.sampled_from([None, 10.0, 60.0])))
            for s in specs]


OP = st.one_of(
    st.tuples(st.just("submit"), st.integers(0, 3), st.integers(1, 3), st.integers(1, 4),
              st.integers(-2, 2), st.booleans()),
    st.tuples(st.just("cycle")),
    st.tuples(st.just("cycle")),
    st.tuples(st.just("finish"), st.integers(0, 50)),
    st.tuples(st.just("finish_eviction"), st.integers(0, 50)),
    st.tuples(st.just("delete"), st.integers(0, 3)),
    st.tuples(st.just("recreate"), st.integers(0, 3)),
    st.tuples(st.just("tick"), st.sampled_from([1.0, 20.0, 100.0])),
)


def _run(specs: list[ClusterQueueSpec], ops: list, *, force: bool) -> tuple[Sim, set]:
    sim = Sim(*specs)
    by_name = {s.name: s for s in specs}
    present = set(by_name)
    submitted: list[WorkloadKey] = []
    finished: set[WorkloadKey] = set()
    for i, op in enumerate(ops):
        kind = op[0]
        if kind == "submit":
            submitted.append(submit_op(sim, i, op, len(specs)))
        elif kind == "cycle":
            live = [s for s in specs if s.name in present]
            before = _cohort_use(sim, live)
            sim.cycle()
            if not force:
                # Under the finalizer a deleted queue held nothing, so every holder is live.
                check_gang(sim, live)
                # A deleted lender leaves its borrowers over the cohort's capacity (Kueue's
                # finalizer guards only the queue's own Workloads); a cycle must not add
                # to an excess nor make one.
                for k, (used, cap) in _cohort_use(sim, live).items():
                    assert used <= max(cap, before.get(k, (0, 0))[0]), (k, used, cap)
        elif kind == "tick":
            sim.tick(op[1])
        elif kind in ("delete", "recreate"):
            name = ClusterQueueName(f"cq{op[1] % len(specs)}")
            if kind == "delete" and name in present:
                if force or not sim.c.admitted(name):
                    assert sim.c.delete_cluster_queue(name)
                    present.discard(name)
            elif kind == "recreate" and name not in present:
                sim.c.add_cluster_queue(by_name[name])
                present.add(name)
        elif submitted:
            key = submitted[op[1] % len(submitted)]
            info = sim.c.workload(key)
            if kind == "finish" and info is not None and info.state == "admitted":
                sim.c.finish(key)
                finished.add(key)
            elif kind == "finish_eviction" and info is not None and info.state == "evicting":
                sim.c.finish_eviction(key, sim.now)
        # No Workload is ever lost: every one not finished is still known.
        for key in submitted:
            if key not in finished:
                assert sim.c.workload(key) is not None, key
    # Every queue back, then drain: nothing stays stuck.
    for name in sorted(set(by_name) - present):
        sim.c.add_cluster_queue(by_name[name])
    return sim, finished


def _cohort_use(sim: Sim, live: list[ClusterQueueSpec]) -> dict[tuple, tuple[int, int]]:
    """Per (cohort, flavor-resource): (Σ max(usage, guaranteed), Σ nominal) of the live
    members (``test_properties.check_capacity``'s cohort sum)."""
    out: dict[tuple, tuple[int, int]] = {}
    for s in live:
        if s.cohort is None:
            continue
        usage = sim.c.usage(s.name)
        for f, q in s.quotas.items():
            guaranteed = 0 if q.lending_limit is None else max(0, q.nominal - q.lending_limit)
            used, cap = out.get((s.cohort, f), (0, 0))
            out[(s.cohort, f)] = (used + max(usage.get(f, 0), guaranteed), cap + q.nominal)
    return out


def _drains(sim: Sim, specs: list[ClusterQueueSpec]) -> None:
    for _ in range(100):
        sim.tick(1000.0)  # past every min runtime and reclaim backoff
        sim.settle_evictions()
        holding = [k for k in sim.c.workload_keys() if sim.c.workload(k).state != "pending"]
        if not holding:
            break
        for k in holding:
            if sim.c.workload(k).state == "admitted":
                sim.c.finish(k)
    for s in specs:
        assert sim.c.usage(s.name) == {}, s.name
        pending = sim.c.pending_workloads(s.name)
        if s.queueing_strategy == "StrictFIFO":
            pending = pending[:1]
        assert all(p.reason == PendingReason.EXCEEDS_MAX_QUOTA for p in pending), pending


@PROPS
@given(bounded_queues(), st.lists(OP, max_size=35))
def test_property_delete_under_finalizer_keeps_capacity_and_loses_nothing(specs, ops):
    sim, _ = _run(specs, ops, force=False)
    _drains(sim, specs)
    check_capacity(sim, specs)


@PROPS
@given(bounded_queues(), st.lists(OP, max_size=35))
def test_property_forced_delete_loses_nothing_and_nothing_stays_stuck(specs, ops):
    sim, _ = _run(specs, ops, force=True)
    check_gang(sim, specs)  # every queue is back: its Workloads' records count again
    _drains(sim, specs)

"""Preemption within one scheduling cycle follows Kueue v0.17.1's scheduler
(``pkg/scheduler/scheduler.go``: ``nominate`` -> ``getAssignments`` -> ``GetTargets``, then
``fits``): a preemptor's targets are chosen at nomination against the usage at the start of the
cycle; when an earlier admission or preemptor of the same cycle took the room those targets
would free, the preemptor is skipped and retried next cycle; it never evicts more Workloads to
make up for it. Issue 16's differential trace: pykueue's extra evictions were mostly several
preemptors of one cohort evicting in the same cycle, each for capacity another had taken."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.decisions import Preempt
from app.core.scheduling_cycle import KEEP_PEAK_WINDOW_S, Scheduler
from app.core.types import ClusterQueueName, WorkloadKey
from tests.builders import Sim, cluster_queue, workload


def _queues(n: int, nominal: list[int]) -> list:
    return [
        cluster_queue(f"q{i}").cohort("co").flavor("default-flavor", cpu=nominal[i])
        .preemption(within="LowerPriority", reclaim="Any")
        for i in range(n)
    ]


def test_a_preemptor_whose_room_an_earlier_admission_took_is_skipped_not_given_more_victims():
    s = Sim(*_queues(3, [4, 4, 4]))
    # q2 borrows 6 of the cohort's 12 with ten 1-CPU Workloads: 2 CPU are free.
    s.submit(*[workload(f"c{i}").cq("q2").pods(1, cpu=1) for i in range(10)])
    s.settle()
    assert s.usage("q2") == 10_000
    # b (older) fits in the 2 free CPU; a needs 4 within its nominal: reclaim 2 of q2's.
    s.submit(workload("b").cq("q1").pods(1, cpu=2), workload("a").cq("q0").pods(1, cpu=4))
    ds = s.cycle()
    assert Sim.admits(ds) == ["ns/b"]
    assert s.evictions(ds) == [], "a's 2 targets no longer make room once b took 2: skipped"
    assert "no longer fits" in Sim.pendings(ds)["ns/a"].message
    # Two of q2's Workloads finish before the next cycle: a now needs 2 victims, not 4.
    s.finish("c0", "c1")
    ds = s.cycle()
    assert [v for v, _ in s.evictions(ds)] == ["ns/c9", "ns/c8"]
    s.finish_eviction("c9", "c8")
    assert Sim.admits(s.cycle()) == ["ns/a"]
    assert len(s.evictions()) == 2


def test_two_preemptors_of_a_cohort_in_one_cycle_do_not_evict_for_the_same_room():
    s = Sim(*_queues(3, [4, 4, 4]))
    s.submit(*[workload(f"c{i}").cq("q2").pods(1, cpu=1) for i in range(12)])
    s.settle()
    # Both need 4 within their nominal; the cohort is full of q2's borrowed Workloads.
    s.submit(workload("a").cq("q0").pods(1, cpu=4), workload("b").cq("q1").pods(1, cpu=4))
    ds = s.cycle()
    preempts = [d for d in ds if isinstance(d, Preempt)]
    assert [d.preemptor for d in preempts] == ["ns/a"]
    assert len(s.evictions(ds)) == 4
    # Kueue ``preemptedWorkloads.HasAny``: b's targets are a's, so b is skipped.
    assert "overlap" in Sim.pendings(ds)["ns/b"].message
    # Next cycle b's first targets are a's victims, still counted while they stop: it waits
    # for them (Kueue: "Preemption ongoing") and evicts nothing new.
    ds = s.cycle()
    assert s.evictions(ds) == []


def _fits(c: Scheduler, cq: ClusterQueueName, usage, allow_borrowing: bool) -> bool:
    tree = c.tree
    return all(
        r <= tree.available(cq, fr)
        and (allow_borrowing or tree.usage(cq, fr) + r <= tree.nominal(cq, fr))
        for fr, r in usage.items()
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nominal=st.lists(st.sampled_from([2, 4, 6]), min_size=2, max_size=4),
    running=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 2), st.integers(0, 1)),
                     max_size=14),
    heads=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 6), st.integers(0, 2)),
                   min_size=1, max_size=4),
)
def test_every_victim_of_a_cycle_is_needed_against_the_usage_the_cycle_started_from(
    nominal, running, heads
):
    """Whatever the same cycle admitted or preempted before it, a preemptor's victims are the
    fewest that make it fit the usage at the start of the cycle: putting any one of them back
    (the others gone) leaves it not fitting (Kueue chooses targets at nomination)."""
    n = len(nominal)
    s = Sim(*_queues(n, nominal))
    for i, (q, cpu, prio) in enumerate(running):
        s.submit(workload(f"r{i}").cq(f"q{q % n}").pods(1, cpu=cpu).priority(prio))
    s.settle()
    s.submit(*[workload(f"h{i}").cq(f"q{q % n}").pods(1, cpu=cpu).priority(prio)
               for i, (q, cpu, prio) in enumerate(heads)])
    start = s.c.fork(s.c.cluster_queue_names())
    for d in s.cycle():
        if not isinstance(d, Preempt):
            continue
        gone = [WorkloadKey(v.workload) for v in d.victims] + list(d.awaiting)
        usage = {k: start._wls[k].usage for k in gone}
        for k in gone:
            start.tree.remove_usage(start._wls[k].wl.admission.cluster_queue, usage[k])
        assert _fits(start, d.cluster_queue, d.usage, d.allow_borrowing)
        for v in d.victims:
            cq = start._wls[v.workload].wl.admission.cluster_queue
            start.tree.add_usage(cq, usage[v.workload])
            assert not _fits(start, d.cluster_queue, d.usage, d.allow_borrowing), (
                f"{v.workload} evicted for {d.preemptor} though not needed at the cycle start")
            start.tree.remove_usage(cq, usage[v.workload])
        for k in gone:
            start.tree.add_usage(start._wls[k].wl.admission.cluster_queue, usage[k])


def test_a_lender_admitting_from_its_queue_keeps_its_nominal_room_and_nothing_is_reclaimed():
    """pykueue's rule (not Kueue's; docs/architecture.md): while q0 admits its queue one head
    per cycle, the rest of its nominal quota is not lent to q1 in the same cycle, so q0 never
    has to reclaim it by evicting what q1 just started."""
    s = Sim(*_queues(2, [4, 4]))
    s.submit(*[workload(f"r{i}").cq("q1").pods(1, cpu=1) for i in range(4)])
    s.settle()
    s.submit(*[workload(f"b{i}").cq("q1").pods(1, cpu=1) for i in range(4)])
    s.submit(*[workload(f"a{i}").cq("q0").pods(1, cpu=1) for i in range(4)])
    s.settle()
    assert s.evictions() == []
    assert s.usage("q0") == 4000 and s.usage("q1") == 4000
    # Once q0's queue is empty its unused quota is lent again.
    s.finish("a0", "a1")
    s.settle()
    assert s.usage("q1") == 6000 and s.evictions() == []


def test_a_lender_whose_head_does_not_fit_lends_its_room():
    s = Sim(*_queues(2, [4, 4]))
    s.submit(*[workload(f"r{i}").cq("q1").pods(1, cpu=1) for i in range(4)])
    s.settle()
    s.submit(workload("big").cq("q0").pods(1, cpu=9), workload("b").cq("q1").pods(1, cpu=1))
    s.settle()
    assert s.admitted("b") and s.pending("big")


def test_a_borrower_is_not_starved_by_a_lender_that_admits_every_cycle():
    """breaker5: q0 uses 1 of its 4 CPU, admitting one short 1-CPU Workload per cycle from a
    queue that never empties (each finishes before the next cycle). The unused nominal room it
    keeps while it admits must not keep q1's 1-CPU borrower out for ever: it keeps no more
    than its queued Workloads request (2), not all its room (3), and that only for
    KEEP_PEAK_WINDOW_S (the next test: any borrower size)."""
    s = Sim(*_queues(2, [4, 4]))
    s.submit(*[workload(f"r{i}").cq("q1").pods(1, cpu=1) for i in range(4)])
    s.settle()
    s.submit(workload("b").cq("q1").pods(1, cpu=1))
    s.submit(*[workload(f"a{i}").cq("q0").pods(1, cpu=1) for i in range(3)])
    done: set[str] = set()
    for i in range(3, 40):
        s.cycle()
        if s.admitted("b"):
            break
        for name in [f"a{j}" for j in range(i) if f"a{j}" not in done]:
            if s.admitted(name):
                s.finish(name)
                done.add(name)
        s.submit(workload(f"a{i}").cq("q0").pods(1, cpu=1))
    assert s.admitted("b"), (s.usage("q0"), s.usage("q1"))


def _add(s: Sim, *wls) -> None:
    """Submit without advancing the clock (arrivals between two cycles)."""
    for w in wls:
        s.c.add_workload(w.build(creation=s.now))


@pytest.mark.parametrize(("borrower_cpu", "queued"), [(1, 3), (1, 4), (2, 3), (2, 4), (3, 4)])
def test_a_borrower_waits_at_most_the_window_for_a_lender_that_admits_every_cycle(
    borrower_cpu, queued
):
    """breaker5's pattern, any borrower size or queue length: q0 admits one short 1-CPU
    Workload per cycle (each finishes before the next) from a queue that never empties, so
    its usage stays at 1 of its 4 CPU. Room kept for its queue beyond what it used lapses
    after KEEP_PEAK_WINDOW_S (capping the room at its queued requests did not: q1's borrower
    waited for ever unless it fitted beside them)."""
    s = Sim(*_queues(2, [4, 4]))
    _add(s, *[workload(f"r{i}").cq("q1").pods(1, cpu=1) for i in range(4)])
    s.settle()
    _add(s, workload("b").cq("q1").pods(1, cpu=borrower_cpu))
    _add(s, *[workload(f"a{i}").cq("q0").pods(1, cpu=1) for i in range(queued)])
    start, waiting = s.now, [f"a{i}" for i in range(queued)]
    for i in range(queued, 40):
        s.cycle()
        if s.admitted("b"):
            break
        running = [a for a in waiting if s.admitted(a)]
        assert len(running) == 1
        s.finish(*running)
        waiting.remove(running[0])
        waiting.append(f"a{i}")
        _add(s, workload(f"a{i}").cq("q0").pods(1, cpu=1))
    assert s.admitted("b"), (s.usage("q0"), s.usage("q1"))
    assert s.now - start <= KEEP_PEAK_WINDOW_S + 2
    assert s.evictions() == []


def test_a_lender_keeps_the_room_it_used_just_before_when_its_next_arrival_is_not_queued_yet():
    """The baseline's pattern (issue 16): q0's large Workload (its whole nominal) finishes,
    q0 admits a small one with one more queued, and its next large arrives right after that
    cycle. Room kept up to what q0 used within the window is not lent, so the large fits
    without reclaiming; kept only up to the one queued small (1 CPU), 2 CPU went to q1's
    borrower and the large evicted it one cycle later."""
    s = Sim(*_queues(2, [4, 4]))
    _add(s, workload("big").cq("q0").pods(1, cpu=4), workload("r").cq("q1").pods(1, cpu=4))
    s.settle()
    _add(s, *[workload(f"b{i}").cq("q1").pods(1, cpu=1) for i in range(4)])
    s.finish("big")
    _add(s, workload("s0").cq("q0").pods(1, cpu=1), workload("s1").cq("q0").pods(1, cpu=1))
    # A fork (the ETA projection's) remembers the peak too and decides the same.
    fork = s.c.fork(s.c.cluster_queue_names())
    assert isinstance(fork, Scheduler)
    assert Sim.admits(fork.schedule(s.now + 1)) == ["ns/s0"]
    s.cycle()
    assert s.admitted("s0") and not s.admitted("b0")
    s.finish("s0")
    _add(s, workload("big2").cq("q0").pods(1, cpu=4))
    s.cycle()
    s.finish("s1")
    s.settle()
    assert s.admitted("big2")
    assert s.evictions() == []
    # Once q0 stops admitting, its room is lent.
    s.finish("big2")
    s.settle()
    assert all(s.admitted(f"b{i}") for i in range(4))


def test_a_head_reuses_its_nominations_victim_search_within_the_cycle_only():
    """The victim search a nomination's preemption oracle made is the head's targets in the
    same cycle (the state has not changed in between); a later cycle searches again, and the
    victims are the same as a fresh search's."""
    s = Sim(*_queues(2, [4, 4]))
    s.submit(*[workload(f"c{i}").cq("q1").pods(1, cpu=1).priority(i) for i in range(8)])
    s.settle()
    assert s.usage("q1") == 8_000  # q1 borrows q0's 4
    reuses = s.c.search_reuses
    s.submit(workload("a").cq("q0").pods(1, cpu=2))
    ds = s.cycle()
    # reclaim within nominal: the two lowest-priority borrowers of q1
    assert sorted(v for v, _ in s.evictions(ds)) == ["ns/c0", "ns/c1"]
    assert s.c.search_reuses == reuses + 1
    assert not s.c._cycle_searches, "emptied after the cycle's nominations"
    # The same need from a fresh scheduler state: the same victims without any reuse.
    t = Sim(*_queues(2, [4, 4]))
    t.submit(*[workload(f"c{i}").cq("q1").pods(1, cpu=1).priority(i) for i in range(8)])
    t.settle()
    t.submit(workload("a").cq("q0").pods(1, cpu=2))
    real = t.c._entry_targets

    def fresh(entry):  # the search made again, as before the reuse
        t.c._cycle_searches.clear()
        return real(entry)

    t.c._entry_targets = fresh
    ds2 = t.cycle()
    assert s.evictions(ds) == t.evictions(ds2)
    assert t.c.search_reuses == 0

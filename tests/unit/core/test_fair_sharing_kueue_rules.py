"""Fair-sharing preemption and admission order as Kueue v0.17.1 runs them
(``pkg/scheduler/preemption/preemption.go`` ``fairPreemptions``, ``runFirstFsStrategy``,
``runSecondFsStrategy``; ``preemption/fairsharing``; ``pkg/scheduler/fair_sharing_iterator.go``).
Each scenario is also a conformance case run against real Kueue
(tests/conformance/test_fair_sharing_cases.py, same names and numbers); the expected victims
are what Kueue chose there. One flavor, cpu; every queue in cohort ``co``, weight 1 unless
said; lendable capacity = the sum of the nominal quotas."""

from __future__ import annotations

from app.core.spec import FairSharing
from tests.builders import Sim, cluster_queue, workload

FAIR = FairSharing()


def _cq(name: str, nominal: int, reclaim: str = "Never", within: str = "Never"):
    return (cluster_queue(name).cohort("co").flavor("default", cpu=nominal)
            .preemption(within=within, reclaim=reclaim))


def _admit(s: Sim, *wls) -> None:
    for w in wls:
        s.submit(w)
        s.settle()


def _one_target_queue(base: int, first: tuple[str, int], second: tuple[str, int],
                      p_cpu: int) -> Sim:
    """a (4, reclaimWithinCohort LowerPriority) full with a0 (4 cpu, priority 9); b (4) holds
    base (``base`` cpu, priority 9: not a candidate), then ``first`` (name, cpu; priority 0)
    and ``second`` (priority 1), borrowing from c (4, idle); then p (a, ``p_cpu``, priority
    5) arrives and the cycles settle."""
    s = Sim(_cq("a", 4, reclaim="LowerPriority"), _cq("b", 4), _cq("c", 4), fair_sharing=FAIR)
    _admit(s, workload("a0").cq("a").pods(1, cpu=4).priority(9),
           workload("base").cq("b").pods(1, cpu=base).priority(9),
           workload(first[0]).cq("b").pods(1, cpu=first[1]).priority(0),
           workload(second[0]).cq("b").pods(1, cpu=second[1]).priority(1))
    s.submit(workload("p").cq("a").pods(1, cpu=p_cpu).priority(5))
    s.settle()
    return s


def test_s2a_tries_the_target_queues_next_candidate_when_one_fails():
    # b borrows 4 of 12 (share 333); p (1 cpu) makes a borrow 1 (83). Evicting big (b's
    # first candidate, lowest priority) leaves b at 0 < 83: S2-a refuses it; small leaves b
    # at 250 >= 83: S2-a takes it. Dropping b at big (pykueue before) left S2-b to evict big.
    s = _one_target_queue(3, ("big", 4), ("small", 1), 1)
    assert s.evictions() == [("ns/small", "InCohortFairSharing")]


def test_s2b_continues_from_s2a_with_its_victims_and_its_refused_candidates():
    # b borrows 4 of 12 (333); p (2 cpu) makes a borrow 2 (167). S2-a takes x1 (b at 250),
    # refuses x2 (b would be at 83); p does not fit yet. S2-b goes on from there: 167 < 250,
    # x2 goes; the fill-back returns x1 (x2's 2 cpu are enough). Run from scratch (pykueue
    # before), S2-b took only x1, one victim per queue, and p stayed pending.
    s = _one_target_queue(5, ("x1", 1), ("x2", 2), 2)
    assert s.evictions() == [("ns/x2", "InCohortFairSharing")]


def test_the_target_queue_is_chosen_with_the_preemptors_usage_counted():
    # a (3 of 6) holds a1 (2 cpu); b borrows 1 (167). With p (3 cpu) a borrows 2 (333), so
    # the search starts in a (a1, InClusterQueue) and then takes b1 with a back within its
    # nominal. Without p's usage a's share was 0: b first, where S2-a (333 <= 0) and S2-b
    # (333 < 167) both refuse, and p stayed pending.
    s = Sim(_cq("a", 3, reclaim="Any", within="LowerPriority"), _cq("b", 3), fair_sharing=FAIR)
    _admit(s, workload("a1").cq("a").pods(1, cpu=2).priority(0),
           workload("b1").cq("b").pods(1, cpu=2).priority(0),
           workload("b2").cq("b").pods(1, cpu=2).priority(1))
    s.submit(workload("p").cq("a").pods(1, cpu=3).priority(10))
    s.settle()
    assert sorted(s.evictions()) == [("ns/a1", "InClusterQueue"),
                                     ("ns/b1", "InCohortFairSharing")]


def _sticky_scenario(fair: FairSharing) -> Sim:
    # d lends 4; c borrows them (v, v2). q (b, weight 2, StrictFIFO, reclaim Never) does not
    # fit; p (a) evicts v. Once v is gone both heads fit the 2 free cpu: q's share with it
    # (500 / 2) is below p's (500).
    s = Sim(_cq("a", 0, reclaim="Any"),
            cluster_queue("b").cohort("co").flavor("default", cpu=0).strict_fifo()
            .fair_weight(2),
            _cq("c", 0), _cq("d", 4), fair_sharing=fair)
    _admit(s, workload("v").cq("c").pods(1, cpu=2).priority(0),
           workload("v2").cq("c").pods(1, cpu=2).priority(1),
           workload("q").cq("b").pods(1, cpu=2))
    s.submit(workload("p").cq("a").pods(1, cpu=2))
    s.settle()
    assert s.evictions() == [("ns/v", "InCohortFairSharing")]
    s.finish_eviction("v")
    s.settle()
    return s


def test_a_preemptor_has_no_precedence_in_the_tournament():
    s = _sticky_scenario(FAIR)
    assert s.admitted("q") and s.pending("p") and s.admitted("v2")


def test_sticky_preemptor_first_serves_the_preemptor_before_a_lower_share():
    s = _sticky_scenario(FairSharing(sticky_preemptor_first=True))  # pykueue's opt-in
    assert s.admitted("p") and s.pending("q") and s.admitted("v2")

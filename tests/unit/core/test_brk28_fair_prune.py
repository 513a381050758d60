"""Fair-sharing preemption where brk28 found pykueue apart from Kueue v0.17.1 (by Kueue's
code), now following it; each test states Kueue's outcome.

1. A target ClusterQueue stays a target while it borrows any flavor-resource (Kueue
   ``preemption/fairsharing/ordering.go`` ``nextTarget`` prunes it only when
   ``!drs.IsBorrowing()``), not only one the preemptor needs (``QuotaTree.fair_target``).

   Scenario (one flavor; cohort co): a (0 cpu, 0 gpu; reclaim Any), b (2 cpu, 0 gpu), c
   (4 cpu, 4 gpu, idle lender). b runs b1 {1 cpu, 2 gpu} p0, b2 {1 cpu, 2 gpu} p0, b3
   {1 cpu} p1: b borrows 1 cpu and 4 gpu (share 1000, gpu). p (a, 5 cpu, p5): 3 cpu free,
   need cpu; with p a's share is 833 (5 of 6 cpu). S2-a refuses b1, b2 (b would be at 500
   < 833), takes b3 (b stays at 1000: gpu); b still borrows (gpu) so it stays a target;
   S2-b: 833 < 1000, takes its first kept one (b2, the later admitted); p fits (5 cpu
   free); fill-back keeps both. Victims b3 and b2 (b left at 1 cpu, below its nominal 2).
   Pruning on the needed resources alone dropped b after b3: p stayed pending.

2. Two weight-0 borrowers compare by their unweighted ratios (Kueue ``CompareDRS``,
   ``pkg/cache/scheduler/fair_sharing.go``; ``quota.Share``), both above every weighted
   share; +inf for both tied them by node name. So a weight-0 preemptor passes neither
   strategy against a weight-0 borrower of a larger share.

3. (fsl29, next to them) Another ClusterQueue's Workloads are candidates when the queue
   itself borrows a flavor-resource needing preemption (Kueue ``findCandidates``:
   ``cqIsBorrowing``); the hierarchical check of classical reclaim is not Kueue's
   fair-sharing rule.
"""

from __future__ import annotations

from app.core.spec import FairSharing
from tests.builders import Sim, cluster_queue, cohort, workload


def _sim() -> Sim:
    s = Sim(cluster_queue("a").cohort("co").flavor("default", cpu=0, gpu=0)
            .preemption(reclaim="Any"),
            cluster_queue("b").cohort("co").flavor("default", cpu=2, gpu=0),
            cluster_queue("c").cohort("co").flavor("default", cpu=4, gpu=4),
            fair_sharing=FairSharing())
    for w in (workload("b1").cq("b").pods(1, cpu=1, gpu=2).priority(0),
              workload("b2").cq("b").pods(1, cpu=1, gpu=2).priority(0),
              workload("b3").cq("b").pods(1, cpu=1).priority(1)):
        s.submit(w)
        s.settle()
    assert all(s.admitted(n) for n in ("b1", "b2", "b3"))
    s.submit(workload("p").cq("a").pods(1, cpu=5).priority(5))
    s.settle()
    return s


def test_target_kept_while_it_borrows_any_resource():
    # b3 by S2-a, then S2-b takes the first kept candidate (b2 by Kueue's order: of equal
    # priority, the later admitted first; b1 otherwise): two victims.
    ev = sorted(_sim().evictions())
    assert len(ev) == 2 and ("ns/b3", "InCohortFairSharing") in ev
    assert ev[0] in (("ns/b1", "InCohortFairSharing"), ("ns/b2", "InCohortFairSharing"))


def _zero_weight_sim() -> Sim:
    """co: a (0 cpu, weight 1, reclaim Any), b and z (0 cpu, weight 0), c (4 cpu, idle
    lender). b runs b1 (3 cpu), z runs z1 (1 cpu): the cohort is full. p (a, 1 cpu)."""
    s = Sim(cluster_queue("a").cohort("co").flavor("default", cpu=0).preemption(reclaim="Any"),
            cluster_queue("b").cohort("co").flavor("default", cpu=0).fair_weight(0),
            cluster_queue("z").cohort("co").flavor("default", cpu=0).fair_weight(0),
            cluster_queue("c").cohort("co").flavor("default", cpu=4),
            fair_sharing=FairSharing())
    for w in (workload("b1").cq("b").pods(1, cpu=3), workload("z1").cq("z").pods(1, cpu=1)):
        s.submit(w)
        s.settle()
    assert s.admitted("b1") and s.admitted("z1")
    s.submit(workload("p").cq("a").pods(1, cpu=1).priority(5))
    s.settle()
    return s


def test_two_zero_weight_borrowers_compare_by_unweighted_ratio():
    # b 750 > z 250 (both above a's weighted share): b is the target, S2-b takes b1.
    assert _zero_weight_sim().evictions() == [("ns/b1", "InCohortFairSharing")]


def _zero_weight_preemptor_sim() -> Sim:
    """co: a and b (0 cpu, weight 0; a reclaim Any), c (4 cpu, idle lender). b runs b1..b4
    (1 cpu each): the cohort is full. p (a, weight 0, 3 cpu)."""
    s = Sim(cluster_queue("a").cohort("co").flavor("default", cpu=0).preemption(reclaim="Any")
            .fair_weight(0),
            cluster_queue("b").cohort("co").flavor("default", cpu=0).fair_weight(0),
            cluster_queue("c").cohort("co").flavor("default", cpu=4),
            fair_sharing=FairSharing())
    for i in range(1, 5):
        s.submit(workload(f"b{i}").cq("b").pods(1, cpu=1))
        s.settle()
    s.submit(workload("p").cq("a").pods(1, cpu=3).priority(5))
    s.settle()
    return s


def test_zero_weight_preemptor_against_zero_weight_borrower():
    # p 750 <= b after b1 750: b1 passes S2-a; after b2 b would be at 500 < 750: refused
    # (b3, b4 alike); S2-b: 750 < 750 refused. p does not fit: no victim, p pending.
    s = _zero_weight_preemptor_sim()
    assert s.evictions() == [] and s.pending("p")


def test_admission_order_between_zero_weight_borrowers_by_unweighted_ratio():
    """Kueue's fair-sharing admission tournament compares the children's shares with each
    head admitted by ``CompareDRS`` too (``fair_sharing_iterator.go`` ``entryComparer``).
    co: y and z (0 cpu, weight 0), c (3 cpu, idle lender). z runs z1 (1 cpu); then z2 and
    y1 (2 cpu each) wait in one cycle, 2 cpu free: with it y would be at 667, z at 1000, so
    y1 goes first although z2 is older (+inf for both tied them: the older z2 went)."""
    s = Sim(cluster_queue("y").cohort("co").flavor("default", cpu=0).fair_weight(0),
            cluster_queue("z").cohort("co").flavor("default", cpu=0).fair_weight(0),
            cluster_queue("c").cohort("co").flavor("default", cpu=3),
            fair_sharing=FairSharing())
    s.submit(workload("z1").cq("z").pods(1, cpu=1))
    s.settle()
    s.submit(workload("z2").cq("z").pods(1, cpu=2), workload("y1").cq("y").pods(1, cpu=2))
    s.settle()
    assert s.admitted("y1") and s.pending("z2")


def test_candidate_needs_only_its_own_queue_to_borrow_a_needed_resource():
    """Kueue's fair-sharing candidates are the Workloads of ClusterQueues that themselves
    borrow a flavor-resource needing preemption (``findCandidates``: ``cqIsBorrowing``, no
    hierarchical check as classical preemption has); the search then drops a cohort off the
    preemptor's path that borrows nothing (``nextTarget``), not one that borrows another
    resource. Root R: co1 {a (0), reclaim Any}, co2 {b (0), d (4 gpu)}, e (4 cpu). b runs
    b0..b3 {0.5 cpu, 1 gpu}: b borrows gpu within co2 (co2 does not borrow gpu) and co2
    borrows 2 cpu from R. p (a, 1 gpu): at R, co1 with p 250 (1 of 4 gpu) <= co2 after b3
    375 (1.5 of 4 cpu): b3 is the victim (with the classical rule b was no candidate: p
    stayed pending)."""
    s = Sim(cohort("co1").parent("R"), cohort("co2").parent("R"),
            cluster_queue("a").cohort("co1").flavor("default", cpu=0, gpu=0)
            .preemption(reclaim="Any"),
            cluster_queue("b").cohort("co2").flavor("default", cpu=0, gpu=0),
            cluster_queue("d").cohort("co2").flavor("default", cpu=0, gpu=4),
            cluster_queue("e").cohort("R").flavor("default", cpu=4, gpu=0),
            fair_sharing=FairSharing())
    for i in range(4):
        s.submit(workload(f"b{i}").cq("b").pods(1, cpu=0.5, gpu=1).priority(3 - i))
        s.settle()
    assert all(s.admitted(f"b{i}") for i in range(4))
    s.submit(workload("p").cq("a").pods(1, gpu=1))
    s.settle()
    assert s.evictions() == [("ns/b3", "InCohortFairSharing")]
    s.finish_eviction("b3")
    s.settle()
    assert s.admitted("p")

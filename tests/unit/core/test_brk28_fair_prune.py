"""brk28: fair-sharing preemption keeps a target queue while it borrows anything (Kueue
v0.17.1 ``fairsharing/ordering.go`` ``nextTarget`` prunes a ClusterQueue only when
``!drs.IsBorrowing()``, any flavor-resource), where pykueue drops it once it no longer borrows
a flavor-resource the preemptor needs (``tree.reclaimable(own, cq, need)`` in
``_FairSearch.first`` / ``second``). docs/fair-sharing.md rule 2 presents pykueue's as Kueue's.

Scenario (one flavor; cohort co): a (0 cpu, 0 gpu; reclaim Any), b (2 cpu, 0 gpu), c (4 cpu,
4 gpu, idle lender). b runs b1 {1 cpu, 2 gpu} p0, b2 {1 cpu, 2 gpu} p0, b3 {1 cpu} p1: b
borrows 1 cpu and 4 gpu (share 1000, gpu). p (a, 5 cpu, p5): 3 cpu free, need cpu; with p a's
share is 833 (5 of 6 cpu).
Kueue, by its code: S2-a refuses b1, b2 (b would be at 500 < 833), takes b3 (b stays at 1000:
gpu); b still borrows (gpu) so it stays a target; S2-b: 833 < 1000, takes its first kept one
(b2, the later admitted); p fits (5 cpu free); fill-back keeps both. Victims b3 and b2 (b
left at 1 cpu, below its nominal 2).
pykueue: after b3, b no longer borrows cpu: dropped; S2-b skips it; p stays pending.
"""

from __future__ import annotations

import pytest

from app.core.spec import FairSharing
from tests.builders import Sim, cluster_queue, workload


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


def test_pykueue_outcome_today():
    s = _sim()
    assert s.evictions() == []
    assert s.pending("p")


@pytest.mark.xfail(strict=True, reason="brk28 L: pykueue prunes a fair-sharing target once it "
                   "no longer borrows a needed flavor-resource; Kueue v0.17.1 keeps it while "
                   "it borrows any (nextTarget: drs.IsBorrowing())")
def test_kueue_v0171_outcome():
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


def test_zero_weight_pykueue_outcome_today():
    # Both zero-weight borrowers have share +inf: a tie, broken by node name (cq:z > cq:b).
    assert _zero_weight_sim().evictions() == [("ns/z1", "InCohortFairSharing")]


@pytest.mark.xfail(strict=True, reason="brk28 L: Kueue v0.17.1 CompareDRS orders two "
                   "zero-weight borrowers by their unweighted ratios (b 750 > z 250: b is the "
                   "target, S2-b takes b1); pykueue's _share gives both +inf and the tie goes "
                   "by node name (z1)")
def test_zero_weight_kueue_v0171_outcome():
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


def test_zero_weight_preemptor_pykueue_outcome_today():
    # +inf <= +inf: S2-a passes for every b victim that leaves b borrowing at all.
    assert len(_zero_weight_preemptor_sim().evictions()) == 3


@pytest.mark.xfail(strict=True, reason="brk28 L: Kueue v0.17.1 compares two zero-weight "
                   "borrowers by unweighted ratio (p 750 <= b after b1 750: b1; after b2 500 "
                   "< 750: refused; S2-b 750 < 750 refused): no victim, p pending. pykueue's "
                   "+inf <= +inf lets a weight-0 queue take three victims (docs/fair-sharing.md: "
                   "weight 0 never preempts a borrower)")
def test_zero_weight_preemptor_kueue_v0171_outcome():
    s = _zero_weight_preemptor_sim()
    assert s.evictions() == [] and s.pending("p")

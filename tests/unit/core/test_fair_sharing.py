"""Fair sharing (Kueue Configuration ``fairSharing``, reference 3.8): dominant resource
shares order the heads of a cycle and choose victims; weights; weight 0; strategies."""

from __future__ import annotations

from app.core.spec import FairSharing, FairSharingStrategy
from app.core.types import ClusterQueueName
from tests.builders import Sim, cluster_queue, cohort, workload

FAIR = FairSharing()


def _team(name: str, weight: float, nominal: int = 0):
    return (cluster_queue(name).cohort("org").flavor("default", cpu=nominal)
            .preemption(reclaim="Any").fair_weight(weight))


def test_weights_1_to_3_split_idle_capacity_1_to_3():
    s = Sim(_team("a", 1), _team("b", 3), _team("donor", 1, nominal=8), fair_sharing=FAIR)
    # a arrives first and takes all 8 idle CPUs; then b's demand rebalances by weight.
    s.submit(*[workload(f"a{i}").cq("a").pods(1, cpu=1) for i in range(8)])
    s.settle()
    assert s.usage("a", "default") == 8000
    s.submit(*[workload(f"b{i}").cq("b").pods(1, cpu=1) for i in range(8)])
    s.settle_evictions()
    assert (s.usage("a", "default"), s.usage("b", "default")) == (2000, 6000)
    assert {r for _, r in s.evictions()} == {"InCohortFairSharing"}
    # Equal weighted shares: a 2/8 x 1000 / 1, b 6/8 x 1000 / 3.
    assert s.c.tree.share(ClusterQueueName("a")) == s.c.tree.share(ClusterQueueName("b")) == 250


def test_without_fair_sharing_the_first_borrower_keeps_everything():
    s = Sim(_team("a", 1), _team("b", 3), _team("donor", 1, nominal=8))
    s.submit(*[workload(f"a{i}").cq("a").pods(1, cpu=1) for i in range(8)])
    s.settle()
    s.submit(*[workload(f"b{i}").cq("b").pods(1, cpu=1) for i in range(8)])
    s.settle()
    assert (s.usage("a", "default"), s.usage("b", "default")) == (8000, 0)
    assert s.evictions() == []


def test_the_lower_share_queue_is_served_first_in_a_cycle():
    # a and b borrow 2 each; one CPU is left. Classical order (earlier creation) would pick
    # a's head; fair sharing picks b's: b's share with it (3/8 / 3) is below a's (3/8).
    s = Sim(_team("a", 1), _team("b", 3), _team("donor", 1, nominal=5), fair_sharing=FAIR)
    s.submit(workload("a0").cq("a").pods(2, cpu=1), workload("b0").cq("b").pods(2, cpu=1))
    s.settle()
    s.submit(workload("a1").cq("a").pods(1, cpu=1), workload("b1").cq("b").pods(1, cpu=1))
    s.settle()
    assert s.admitted("b1") and s.pending("a1")


def test_preemption_takes_from_the_queue_furthest_above_its_share():
    # x borrows 3, y borrows 1; z reclaims its nominal. Classical order would evict y's
    # newest workload first; the fair search descends to the highest share: x.
    s = Sim(_team("x", 1), _team("y", 1), _team("z", 1, nominal=4), fair_sharing=FAIR)
    s.submit(*[workload(f"x{i}").cq("x").pods(1, cpu=1) for i in range(3)])
    s.settle()
    s.submit(workload("y0").cq("y").pods(1, cpu=1))
    s.settle()
    s.submit(workload("z0").cq("z").pods(1, cpu=1))
    s.settle()
    (victim,) = s.evictions()
    assert victim[0].startswith("ns/x") and victim[1] == "InCohortReclamation"


def test_weight_zero_gets_only_idle_capacity_and_yields_to_any_borrower():
    s = Sim(_team("idle", 0), _team("w", 1), _team("donor", 1, nominal=2), fair_sharing=FAIR)
    s.submit(workload("i0").cq("idle").pods(2, cpu=1))
    s.settle()
    assert s.admitted("i0")  # idle capacity: taken
    s.submit(workload("w0").cq("w").pods(1, cpu=1))
    s.settle()
    assert s.evictions() == [("ns/i0", "InCohortFairSharing")]
    s.finish_eviction("i0")
    s.settle()
    assert s.admitted("w0") and s.pending("i0")
    # and the weight-0 queue never preempts a borrower back (its share would be infinite)
    s.submit(workload("i1").cq("idle").pods(1, cpu=1))
    s.settle()
    assert s.admitted("i1")  # the one free CPU
    s.submit(workload("i2").cq("idle").pods(1, cpu=1))
    s.settle()
    assert s.pending("i2") and len(s.evictions()) == 1


def test_less_than_initial_share_alone_takes_victims_while_the_preemptor_stays_below():
    # Kueue v0.17.1 runs a lone LessThanInitialShare as its first strategy
    # (runFirstFsStrategy): after each victim the target is chosen again, so one queue can
    # lose several while the preemptor's share (b with b-big: 2/4) stays below its (a: 4/4,
    # then 3/4). Only as the second strategy is it one victim per queue.
    only_b = FairSharing((FairSharingStrategy.LESS_THAN_INITIAL_SHARE,))
    s = Sim(_team("a", 1), _team("b", 1), _team("donor", 1, nominal=4), fair_sharing=only_b)
    s.submit(*[workload(f"a{i}").cq("a").pods(1, cpu=1) for i in range(4)])
    s.settle()
    s.submit(workload("b-big").cq("b").pods(2, cpu=1))
    s.settle()
    assert s.evictions() == [("ns/a3", "InCohortFairSharing"), ("ns/a2", "InCohortFairSharing")]


def test_cohort_weights_split_between_subtrees():
    # Two team cohorts under org with weights 1 and 3; the shares compared at org are the
    # cohorts' (not the queues').
    s = Sim(
        cohort("org").flavor("default", cpu=8),
        cohort("t1").parent("org").weight(1),
        cohort("t3").parent("org").weight(3),
        cluster_queue("q1").cohort("t1").flavor("default", cpu=0).preemption(reclaim="Any"),
        cluster_queue("q3").cohort("t3").flavor("default", cpu=0).preemption(reclaim="Any"),
        fair_sharing=FAIR,
    )
    s.submit(*[workload(f"a{i}").cq("q1").pods(1, cpu=1) for i in range(8)])
    s.settle()
    s.submit(*[workload(f"b{i}").cq("q3").pods(1, cpu=1) for i in range(8)])
    s.settle_evictions()
    assert (s.usage("q1", "default"), s.usage("q3", "default")) == (2000, 6000)

"""Nomination memo of the scheduling cycle: a head of the same shape in the same ClusterQueue
gets the memoized outcome only while its cohort's version is unchanged (scheduler step 3)."""

from __future__ import annotations

from dataclasses import replace

from app.core.decisions import Pending, PendingReason
from app.core.spec import AdmissionFairSharing
from app.core.types import ClusterQueueName, ResourceName
from tests.builders import Sim, cluster_queue, workload


def _hits(s: Sim) -> int:
    return s.c._nomination_hits


def test_same_shape_head_reuses_the_outcome_and_its_pending_message():
    s = Sim(cluster_queue("cq").flavor("default-flavor", cpu=2))
    s.submit(workload("fill").cq("cq").pods(1, cpu=2))
    s.settle()
    s.submit(workload("w1").cq("cq").pods(1, cpu=1), workload("w2").cq("cq").pods(1, cpu=1))
    hits = _hits(s)
    (p1,) = s.cycle()  # w1 nominated: no fit, parked
    (p2,) = s.cycle()  # w2: same ClusterQueue, shape, priority and cohort version
    assert isinstance(p1, Pending) and isinstance(p2, Pending)
    assert (p1.workload, p2.workload) == ("ns/w1", "ns/w2")
    assert _hits(s) == hits + 1
    assert p2.reason == p1.reason == PendingReason.WAITING_FOR_QUOTA
    assert p2.message == p1.message and "cpu" in p2.message
    assert p2.shortfalls == p1.shortfalls and p2.shortfalls[0].available == 0


def test_a_finish_in_the_same_cohort_invalidates_the_memo_and_the_head_is_admitted():
    s = Sim(
        cluster_queue("a").cohort("co").strict_fifo().flavor("default-flavor", cpu=2),
        cluster_queue("b").cohort("co").flavor("default-flavor", cpu=2),
    )
    s.submit(workload("fill-a").cq("a").pods(1, cpu=2), workload("fill-b").cq("b").pods(1, cpu=2))
    s.settle()
    s.submit(workload("w").cq("a").pods(1, cpu=1))
    s.settle()
    assert s.pending("w")
    hits = _hits(s)
    s.cycle()  # StrictFIFO: the same head again, nothing changed: memo reused
    assert _hits(s) == hits + 1 and s.pending("w")
    s.finish("fill-b")  # capacity freed in another ClusterQueue of the cohort
    assert Sim.admits(s.cycle()) == ["ns/w"]
    assert s.status("a").borrowed == 1000


def test_memo_is_not_shared_across_cohorts_and_other_cohorts_keep_it_valid():
    s = Sim(
        cluster_queue("a1").cohort("co1").flavor("default-flavor", cpu=2),
        cluster_queue("a2").cohort("co1").flavor("default-flavor", cpu=2),
        cluster_queue("b1").cohort("co2").flavor("default-flavor", cpu=2),
        cluster_queue("b2").cohort("co2").flavor("default-flavor", cpu=2),
    )
    s.submit(workload("fill-a1").cq("a1").pods(1, cpu=2))
    s.submit(workload("fill-a2").cq("a2").pods(1, cpu=2))
    s.submit(workload("fill-b2").cq("b2").pods(1, cpu=2))
    s.settle()
    s.submit(workload("wa").cq("a1").pods(1, cpu=1))
    s.settle()
    assert s.pending("wa")
    version = s.c._version(ClusterQueueName("a1"))
    # The same shape in the other cohort, which has room, is admitted.
    s.submit(workload("wb").cq("b1").pods(1, cpu=1))
    s.settle()
    assert s.admitted("wb")
    s.finish("fill-b2")
    assert s.c._version(ClusterQueueName("a1")) == version
    hits = _hits(s)
    s.submit(workload("wa2").cq("a1").pods(1, cpu=1))
    (p,) = s.cycle()
    assert isinstance(p, Pending) and p.workload == "ns/wa2" and _hits(s) == hits + 1
    # A finish in co1 frees a1's quota: the parked heads come back and one is admitted.
    s.finish("fill-a2")
    assert s.c._version(ClusterQueueName("a1")) != version
    s.settle()
    assert s.admitted("wa") and s.admitted("wa2")


def test_priority_is_part_of_the_key_so_preemption_is_decided_per_priority():
    s = Sim(cluster_queue("cq").preemption(within="LowerPriority").flavor("default-flavor", cpu=2))
    s.submit(workload("low").cq("cq").pods(1, cpu=2).priority(1))
    s.settle()
    s.submit(workload("same").cq("cq").pods(1, cpu=2).priority(1))
    (p,) = s.cycle()  # no lower-priority candidate: parked, outcome memoized
    assert isinstance(p, Pending) and p.workload == "ns/same"
    # Same shape, same cohort version, higher priority: must not reuse that outcome.
    s.submit(workload("high").cq("cq").pods(1, cpu=2).priority(5))
    ds = s.cycle()
    assert s.evictions(ds) == [("ns/low", "InClusterQueue")]
    s.finish_eviction("low")
    assert "ns/high" in Sim.admits(s.settle())
    assert s.pending("same") and s.reason("same") == PendingReason.WAITING_FOR_QUOTA


def test_eviction_mark_changes_the_version_of_the_cohort():
    s = Sim(cluster_queue("cq").preemption(within="LowerPriority").flavor("default-flavor", cpu=2))
    s.submit(workload("low").cq("cq").pods(1, cpu=2).priority(1))
    s.settle()
    before = s.c._version(ClusterQueueName("cq"))
    assert s.c.evict(Sim.key("low"), s.now)
    after_evict = s.c._version(ClusterQueueName("cq"))
    assert after_evict != before
    assert s.c.cancel_eviction(Sim.key("low"))
    assert s.c._version(ClusterQueueName("cq")) != after_evict


def _afs_backoff_sim() -> Sim:
    """Cohort ``co``: ``q1`` (4 CPUs, reclaims) and ``q0`` (4 CPUs, Admission Fair Sharing,
    LocalQueues ``lq-a`` and ``lq-b``, within-ClusterQueue preemption, a reclaim backoff)
    holding A (3 CPUs, ``lq-a``) and B1, B2 (1 CPU each, ``lq-b``): 5 CPUs, borrowing 1,
    and ``lq-b`` with a heavy past that decays. q1 has just reclaimed q0's X: q0 may not
    borrow for five minutes, and the cohort is full (q0 5, q1 3)."""
    s = Sim(cluster_queue("q1").cohort("co").flavor("default-flavor", cpu=4)
            .preemption(reclaim="Any"),
            admission_fair_sharing=AdmissionFairSharing(half_life_s=10.0, sampling_s=2.0))
    spec = (cluster_queue("q0").cohort("co").flavor("default-flavor", cpu=4)
            .preemption(within="LowerPriority").admission_fair_sharing().build())
    s.add_cq(replace(spec, reclaim_backoff_s=300.0), namespaces=())
    s.add_lq("ns/lq-a", "q0")
    s.add_lq("ns/lq-b", "q0")
    assert s.c.seed_local_queue_usage("ns/lq-b", {ResourceName("cpu"): 20_000.0})
    s.submit(workload("A").queue("lq-a").pods(1, cpu=3),
             *[workload(n).queue("lq-b").pods(1, cpu=1) for n in ("B1", "B2", "X")])
    s.settle()
    s.submit(workload("Y").cq("q1").pods(1, cpu=3))
    s.settle()
    assert s.evictions() == [("ns/X", "InCohortReclamation")]
    assert s.c.delete_workload(s.key("X"))
    s.settle()
    assert s.admitted("Y")
    return s


def test_an_afs_sample_that_reorders_the_victims_invalidates_the_memo():
    """A's LocalQueue has the lower usage, so a 2-CPU head of priority 5 would evict B1
    and B2 and then borrow: held back by the backoff. A minute later, with no usage
    moved (the cohort's version unchanged), ``lq-b``'s past has decayed below ``lq-a``'s:
    A goes first, and evicting it leaves q0 within its nominal quota, which the backoff
    allows. A head of the same shape must be nominated afresh (Kueue orders the candidates
    by the usage of each cycle), not get the memoized borrowing nomination."""
    s = _afs_backoff_sim()
    s.submit(workload("H").queue("lq-b").pods(1, cpu=2).priority(5))
    (p,) = s.cycle()
    assert isinstance(p, Pending) and p.workload == "ns/H" and "may not borrow" in p.message
    usage = s.c.local_queue_fair_sharing
    assert usage("ns/lq-b").usage > usage("ns/lq-a").usage
    version = s.c._version(ClusterQueueName("q0"))
    s.tick(60)
    s.submit(workload("H2").queue("lq-b").pods(1, cpu=2).priority(5))
    assert s.c._version(ClusterQueueName("q0")) == version
    ds = s.cycle()
    assert usage("ns/lq-b").usage < usage("ns/lq-a").usage
    assert s.evictions(ds) == [("ns/A", "InClusterQueue")]
    assert ds[0].preemptor == "ns/H2"


def test_without_a_sample_the_afs_memo_is_reused():
    """The same head again before the next sample is due: the memoized nomination."""
    s = _afs_backoff_sim()
    s.submit(workload("H").queue("lq-b").pods(1, cpu=2).priority(5))
    s.cycle()
    hits, samples = _hits(s), dict(s.c._afs_samples)
    s.c.add_workload(workload("H2").queue("lq-b").pods(1, cpu=2).priority(5).build(s.now))
    (p,) = s.c.schedule(s.now + 0.5)  # the next sample is due 2 s after the last
    assert s.c._afs_samples == samples
    assert isinstance(p, Pending) and p.workload == "ns/H2" and "may not borrow" in p.message
    assert _hits(s) == hits + 1

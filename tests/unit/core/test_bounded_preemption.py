"""Preemption you can bound (pykueue annotations on a ClusterQueue): a minimum runtime before
reclaim or fair sharing may preempt a Workload, and a reclaim backoff that stops the
borrow / evict loop."""

from __future__ import annotations

from dataclasses import replace

from app.core.spec import FairSharing
from tests.builders import Sim, cluster_queue, workload


def _cqs(min_runtime=None, backoff=None):
    borrower = replace(
        cluster_queue("borrower").cohort("org").flavor("default", cpu=0).build(),
        min_runtime_s=min_runtime, reclaim_backoff_s=backoff)
    owner = cluster_queue("owner").cohort("org").flavor("default", cpu=4).preemption(
        reclaim="Any")
    return borrower, owner


def test_min_runtime_protects_a_young_victim_and_the_reason_says_when_it_expires():
    s = Sim(*_cqs(min_runtime=300.0))
    s.submit(workload("young").cq("borrower").pods(4, cpu=1))
    s.cycle()
    assert s.admitted("young")
    reserved = s.now  # the cycle that admitted it
    s.now = reserved + 48 - 2  # submit and cycle each tick 1 s: the cycle runs at +48 s
    s.submit(workload("mine").cq("owner").pods(1, cpu=4))
    s.cycle()
    assert s.now == reserved + 48
    assert s.evictions() == [] and s.pending("mine")
    msg = s.c.workload(s.key("mine")).message
    assert msg.endswith("; preemption possible in 4m12s (its victims are within their "
                        "ClusterQueue's pykueue.dev/min-runtime-before-preemption)")
    assert s.c.next_wakeup() == reserved + 300
    # Nothing happens before the expiry; at it, the reclaim goes through.
    s.now = reserved + 290
    s.settle()
    assert s.evictions() == []
    s.now = reserved + 300
    s.settle()
    assert s.evictions() == [("ns/young", "InCohortReclamation")]


def test_min_runtime_also_bounds_fair_sharing_preemption():
    a = replace(cluster_queue("a").cohort("org").flavor("default", cpu=0)
                .preemption(reclaim="Any").build(), min_runtime_s=600.0)
    b = cluster_queue("b").cohort("org").flavor("default", cpu=0).preemption(reclaim="Any")
    donor = cluster_queue("donor").cohort("org").flavor("default", cpu=4)
    s = Sim(a, b, donor, fair_sharing=FairSharing())
    s.submit(*[workload(f"a{i}").cq("a").pods(1, cpu=1) for i in range(4)])
    s.settle()
    s.submit(workload("b0").cq("b").pods(1, cpu=1))
    s.settle()
    assert s.evictions() == [] and "preemption possible in" in s.c.workload(
        s.key("b0")).message
    s.now += 600
    s.settle()
    assert [r for _, r in s.evictions()] == ["InCohortFairSharing"]


def test_without_backoff_a_reclaimed_queue_borrows_again_and_is_evicted_again():
    s = Sim(*_cqs())
    assert _borrow_evict_rounds(s) == 3  # every round: borrow, get reclaimed


def test_backoff_stops_the_borrow_evict_loop():
    s = Sim(*_cqs(backoff=120.0))
    assert _borrow_evict_rounds(s) == 1
    msg = s.c.workload(s.key("b2")).message
    assert "may not borrow for another" in msg and "pykueue.dev/reclaim-backoff" in msg
    # After the backoff the queue borrows again (its oldest pending Workload first).
    s.now = s.c.next_wakeup()
    s.settle()
    assert s.admitted("b1") and s.pending("b2")


def _borrow_evict_rounds(s: Sim) -> int:
    """The owner's short jobs keep arriving while the borrower keeps submitting: count the
    reclaims of the borrower's Workloads over three rounds."""
    evictions = 0
    for i in range(3):
        s.submit(workload(f"b{i}").cq("borrower").pods(4, cpu=1))
        s.settle()
        s.submit(workload(f"o{i}").cq("owner").pods(1, cpu=2))
        s.settle()
        evicting = [k for k in s.c.workload_keys() if s.c.workload(k).state == "evicting"]
        for k in evicting:
            s.c.finish_eviction(k, s.now)
            s.c.delete_workload(k)  # the borrower gives up on the evicted one
        evictions += len(evicting)
        s.settle()
        s.finish(f"o{i}")
        s.settle()
    return evictions


def test_a_fork_keeps_the_reclaim_backoff_of_the_live_state() -> None:
    """An ETA projection (``Scheduler.fork``) made while a reclaim backoff runs must not let the
    reclaimed queue borrow before the live state would."""
    s = Sim(*_cqs(backoff=120.0))
    assert _borrow_evict_rounds(s) == 1
    fork = s.c.fork(s.c.cluster_queue_names())
    live = s.c.schedule(s.now + 1)
    projected = fork.schedule(s.now + 1)
    assert Sim.admits(projected) == Sim.admits(live) == []
    assert fork.next_wakeup() == s.c.next_wakeup()


def test_a_cluster_queue_created_again_forgets_the_reclaim_backoff() -> None:
    """Deleting a ClusterQueue drops the scheduler's memory of it: created again under the
    same name it may borrow at once (its backoff belonged to the deleted queue)."""
    s = Sim(*_cqs(backoff=120.0))
    assert _borrow_evict_rounds(s) == 1
    assert s.pending("b2")
    borrower = _cqs(backoff=120.0)[0]
    s.c.delete_cluster_queue(borrower.name)
    s.c.add_cluster_queue(borrower)
    s.settle()
    assert s.admitted("b1")


def test_the_eta_projection_admits_when_the_reclaim_backoff_ends() -> None:
    """breaker7: the ETA fork carries the backoff, and its run wakes when it ends as the live
    loop does (``Scheduler.next_wakeup``): the borrower's head starts then, not "never
    admitted" for want of another event in the projection."""
    from app.core.eta import BOUNDED, RuntimeModel, estimate

    s = Sim(*_cqs(backoff=120.0))
    assert _borrow_evict_rounds(s) == 1
    wake = s.c.next_wakeup()
    assert wake is not None and wake > s.now
    run = estimate(s.c, "borrower", s.now, RuntimeModel())
    b1 = run.etas[s.key("b1")]
    assert (b1.start, b1.confidence) == (wake, BOUNDED)
    s.now = wake
    s.settle()
    assert s.admitted("b1")  # the live state agrees


def test_the_eta_projection_preempts_when_the_victims_min_runtime_ends() -> None:
    from app.core.eta import RuntimeModel, estimate

    s = Sim(*_cqs(min_runtime=300.0))
    s.submit(workload("young").cq("borrower").pods(4, cpu=1))
    s.cycle()
    reserved = s.now
    s.submit(workload("mine").cq("owner").pods(1, cpu=4))
    s.cycle()
    assert s.pending("mine") and s.c.next_wakeup() == reserved + 300
    e = estimate(s.c, "owner", s.now, RuntimeModel()).etas[s.key("mine")]
    assert e.start == reserved + 300, e

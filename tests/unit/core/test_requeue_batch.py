"""Kueue's requeue batch (``Scheduler(requeue_batch_s=...)``, Kueue v0.17.1
``requeueBatchPeriod``): parked Workloads return ``requeue_batch_s`` after the first change in
their cohort, later changes join that batch, and everything else is as without it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.core.decisions import Pending
from app.core.scheduling_cycle import REQUEUE_BATCH_S, Scheduler
from app.core.types import ClusterQueueName
from tests.builders import Sim, cluster_queue, workload


def parked(s: Sim, cq: str = "cq") -> list[str]:
    return [p.workload for p in s.c.pending_workloads(ClusterQueueName(cq)) if p.inadmissible]


def full_queue(batch: float) -> Sim:
    """cq (4 CPUs) runs a0..a3 (1 CPU each); b (2 CPUs) is parked behind them."""
    s = Sim(cluster_queue("cq").flavor("default-flavor", cpu=4), requeue_batch_s=batch)
    s.submit(*[workload(f"a{i}").cq("cq").pods(1, cpu=1).priority(10) for i in range(4)])
    s.submit(workload("b").cq("cq").pods(1, cpu=2).priority(10))
    s.settle()
    assert parked(s) == ["ns/b"] and s.usage("cq") == 4000
    return s


def test_kueues_batch_is_one_second_and_pykueues_default_is_none():
    from app.config import Settings
    assert REQUEUE_BATCH_S == 1.0
    assert Scheduler().requeue_batch_s == 0.0  # the next cycle
    assert Settings().scheduling.requeue_batch_seconds == 0.0
    for bad in (-1.0, float("inf"), float("nan")):  # never: parked Workloads would stay so
        with pytest.raises(ValidationError, match="requeue_batch_seconds"):
            Settings(scheduling={"requeue_batch_seconds": bad})


def test_a_parked_workload_returns_one_batch_after_the_first_finish_not_before():
    s = full_queue(1.0)
    s.finish("a0", "a1")
    t = s.now
    assert s.c.schedule(t) == [] and parked(s) == ["ns/b"]  # the batch starts here
    assert s.c.next_wakeup() == t + 1.0
    assert s.c.schedule(t + 0.999) == [] and parked(s) == ["ns/b"]
    assert Sim.admits(s.c.schedule(t + 1.0)) == ["ns/b"]
    assert s.c.next_wakeup() is None


def test_without_a_batch_the_next_cycle_returns_it():
    s = full_queue(0.0)
    s.finish("a0", "a1")
    assert Sim.admits(s.c.schedule(s.now)) == ["ns/b"]


def test_changes_during_a_batch_join_it_and_do_not_push_it_back():
    s = full_queue(1.0)
    s.finish("a0")
    t = s.now
    s.c.schedule(t)
    s.finish("a1")  # frees the second CPU b needs, 0.5 s into the batch
    assert s.c.schedule(t + 0.5) == [] and s.c.next_wakeup() == t + 1.0
    assert Sim.admits(s.c.schedule(t + 1.0)) == ["ns/b"]


def test_a_change_after_a_batch_fired_starts_a_new_one():
    s = full_queue(1.0)
    s.submit(workload("c").cq("cq").pods(1, cpu=4).priority(10))
    s.settle()
    assert parked(s) == ["ns/b", "ns/c"]
    s.finish("a0")
    t = s.now
    s.c.schedule(t)
    # b and c return, still do not fit (1 CPU free): parked again, one head a cycle
    assert not Sim.admits(s.c.schedule(t + 1.0) + s.c.schedule(t + 1.0))
    assert s.c.schedule(t + 1.0) == [] and parked(s) == ["ns/b", "ns/c"]
    s.finish("a1")
    assert s.c.schedule(t + 1.5) == [] and s.c.next_wakeup() == t + 2.5
    assert Sim.admits(s.c.schedule(t + 2.5)) == ["ns/b"]


def test_new_workloads_are_not_held_by_the_batch():
    """A Workload that arrives while the parked ones wait is queued and tried at once
    (Kueue: a new Workload goes to the heap, not to the inadmissible set)."""
    s = full_queue(1.0)
    s.finish("a0")
    t = s.now
    s.c.schedule(t)
    s.c.add_workload(workload("small").cq("cq").pods(1, cpu=1).priority(5).build(creation=t))
    assert Sim.admits(s.c.schedule(t + 0.1)) == ["ns/small"]
    assert parked(s) == ["ns/b"]


def test_the_batch_is_per_cohort_each_queue_of_it_returns_together():
    s = Sim(cluster_queue("x").cohort("co").flavor("default-flavor", cpu=2),
            cluster_queue("y").cohort("co").flavor("default-flavor", cpu=2),
            requeue_batch_s=1.0)
    s.submit(workload("x1").cq("x").pods(1, cpu=2), workload("y1").cq("y").pods(1, cpu=2))
    s.settle()
    s.submit(workload("x2").cq("x").pods(1, cpu=1), workload("y2").cq("y").pods(1, cpu=1))
    s.settle()
    assert parked(s, "x") == ["ns/x2"] and parked(s, "y") == ["ns/y2"]
    s.finish("x1")  # frees 2 CPUs in the cohort: both parked heads fit (y2 by borrowing)
    t = s.now
    assert s.c.schedule(t) == []
    assert sorted(Sim.admits(s.c.schedule(t + 1.0))) == ["ns/x2", "ns/y2"]


def test_the_cores_own_timers_requeue_at_once_and_take_the_batch_with_them():
    """A reclaim backoff / minimum runtime expiry requeues every ClusterQueue at once (the
    wake-up was already a timer); a batch waiting then has nothing left to return."""
    s = full_queue(1.0)
    s.finish("a0", "a1")
    t = s.now
    s.c.schedule(t)
    s.c._wake(t + 0.2)  # as a minimum runtime ending at t + 0.2 would
    assert s.c.next_wakeup() == t + 0.2
    assert Sim.admits(s.c.schedule(t + 0.2)) == ["ns/b"]
    assert s.c.next_wakeup() is None


def test_a_deleted_cluster_queue_leaves_no_batch_behind():
    s = full_queue(1.0)
    s.finish("a0")
    s.c.schedule(s.now)
    assert s.c.delete_cluster_queue(ClusterQueueName("cq"))
    assert s.c._requeue_due == {}


def test_a_projection_fork_keeps_the_waiting_batch():
    s = full_queue(1.0)
    s.finish("a0", "a1")
    t = s.now
    s.c.schedule(t)
    f = s.c.fork([ClusterQueueName("cq")])
    assert isinstance(f, Scheduler) and f.next_wakeup() == t + 1.0
    assert f.schedule(t + 0.5) == []
    ds = f.schedule(t + 1.0)
    assert [d.workload for d in ds if not isinstance(d, Pending)] == ["ns/b"]


def test_a_cluster_queue_active_again_returns_what_it_parked_as_inactive_at_once():
    """Kueue keeps an inactive ClusterQueue's Workloads in its heap, skipped until it is
    active again; pykueue parks them. Active again, they return at the next cycle, not one
    batch later: else a StrictFIFO queue admits a newer arrival before them (found by
    breaker20)."""
    from app.core.spec import ResourceFlavor
    from app.core.types import FlavorName

    s = Sim(cluster_queue("cq").flavor("f", cpu=1).strict_fifo(), requeue_batch_s=1.0)
    s.c.delete_flavor(FlavorName("f"))
    s.submit(workload("old").cq("cq").pods(1, cpu=1))
    s.cycle()
    assert parked(s) == ["ns/old"]
    s.c.add_flavor(ResourceFlavor(FlavorName("f")))
    t = s.now
    s.c.add_workload(workload("new").cq("cq").pods(1, cpu=1).build(creation=t + 0.2))
    assert Sim.admits(s.c.schedule(t + 0.3)) == ["ns/old"]
    assert not Sim.admits(s.c.schedule(t + 0.4)) and s.pending("new")

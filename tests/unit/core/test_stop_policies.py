"""Stop policies (Kueue v1beta2 ClusterQueue and LocalQueue ``spec.stopPolicy``; reference 1.2,
1.4, 3.10): ``Hold`` admits nothing new and keeps what runs; ``HoldAndDrain`` also evicts the
admitted Workloads (reasons ``ClusterQueueStopped`` / ``LocalQueueStopped``), once each."""

from __future__ import annotations

from dataclasses import replace

from app.core.decisions import Admit, PendingReason
from app.core.spec import LocalQueue, StopPolicy
from app.core.types import ClusterQueueName, WorkloadKey
from tests.builders import Sim, cluster_queue, workload

CQ = ClusterQueueName("cq")


def _running(stop: StopPolicy = StopPolicy.NONE) -> Sim:
    """cq (4 cpu) with LocalQueues lq-cq and other; a1 running from lq-cq, b1 from other."""
    sim = Sim(cluster_queue("cq").flavor("f", cpu=4))
    sim.c.add_local_queue(LocalQueue("ns", "other", CQ))
    sim.submit(workload("a1").cq("cq").pods(1, cpu=1),
               workload("b1").queue("other").pods(1, cpu=1))
    assert sum(isinstance(d, Admit) for d in sim.settle()) == 2
    return sim


def test_cluster_queue_hold_keeps_running_workloads_and_admits_nothing_new() -> None:
    sim = _running()
    sim.add_cq(replace(sim.c.cluster_queue_spec(CQ), stop_policy=StopPolicy.HOLD))
    sim.submit(workload("a2").cq("cq").pods(1, cpu=1))
    assert not any(isinstance(d, Admit) for d in sim.settle())
    assert sim.c.drain(sim.now) == []
    assert {k for k in sim.c.admitted(CQ)} == {WorkloadKey("ns/a1"), WorkloadKey("ns/b1")}
    assert not sim.c.cluster_queue_status(CQ).active


def test_cluster_queue_hold_and_drain_evicts_every_admitted_workload_once() -> None:
    sim = _running()
    sim.add_cq(replace(sim.c.cluster_queue_spec(CQ), stop_policy=StopPolicy.HOLD_AND_DRAIN))
    drained = sim.c.drain(sim.now)
    assert sorted((str(k), r) for k, r, _ in drained) == [
        ("ns/a1", "ClusterQueueStopped"), ("ns/b1", "ClusterQueueStopped")]
    assert all(sim.c.workload(k).state == "evicting" for k, _, _ in drained)
    assert sim.c.drain(sim.now) == []  # each once: they are already evicting
    for k, _, _ in drained:
        sim.c.finish_eviction(k, sim.now)
    assert sim.c.admitted(CQ) == [] and not any(isinstance(d, Admit) for d in sim.settle())
    sim.add_cq(replace(sim.c.cluster_queue_spec(CQ), stop_policy=StopPolicy.NONE))
    assert sum(isinstance(d, Admit) for d in sim.settle()) == 2  # restarted: both again


def test_local_queue_hold_stops_only_its_own_workloads() -> None:
    sim = _running()
    sim.c.add_local_queue(LocalQueue("ns", "other", CQ, StopPolicy.HOLD))
    sim.submit(workload("b2").queue("other").pods(1, cpu=1),
               workload("a2").cq("cq").pods(1, cpu=1))
    admitted = [d.workload for d in sim.settle() if isinstance(d, Admit)]
    assert admitted == [WorkloadKey("ns/a2")]
    b2 = sim.c.workload(WorkloadKey("ns/b2"))
    assert b2.state != "admitted" and b2.reason == PendingReason.LOCAL_QUEUE_STOPPED
    assert "LocalQueue other is stopped" in b2.message
    assert sim.c.drain(sim.now) == []  # Hold: b1 keeps running
    assert sim.c.workload(WorkloadKey("ns/b1")).state == "admitted"
    sim.c.add_local_queue(LocalQueue("ns", "other", CQ))
    assert [d.workload for d in sim.settle() if isinstance(d, Admit)] == [WorkloadKey("ns/b2")]


def test_local_queue_hold_and_drain_evicts_only_its_own_admitted_workloads() -> None:
    sim = _running()
    sim.c.add_local_queue(LocalQueue("ns", "other", CQ, StopPolicy.HOLD_AND_DRAIN))
    assert [(str(k), r) for k, r, _ in sim.c.drain(sim.now)] == [
        ("ns/b1", "LocalQueueStopped")]
    assert sim.c.workload(WorkloadKey("ns/a1")).state == "admitted"

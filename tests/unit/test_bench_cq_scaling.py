"""bench/cq_scaling.py ``--idle``: ClusterQueues without Workloads, each in a cohort of its
own, added to a row leave its Workloads and decisions as they were."""

from __future__ import annotations

from app.sim import parse_trace
from tests.unit.bench_scripts import bench_script


def test_idle_cluster_queues_are_alone_in_their_cohorts_and_change_no_decision() -> None:
    cq_scaling = bench_script("cq_scaling")
    trace = parse_trace(cq_scaling.trace_text(10, 5, (3, 1, 1), idle=4), source="t")
    idle = [s for s in trace.cluster_queues if s.name.startswith("idle")]
    assert sorted(s.cohort for s in idle) == ["idle-0", "idle-1", "idle-2", "idle-3"]
    assert len(trace.cluster_queues) == 14
    assert {c.local_queue.split("/")[1] for c in trace.classes} == {
        s.name for s in trace.cluster_queues if not s.name.startswith("idle")}
    busy = cq_scaling.run(10, 5, (3, 1, 1), with_hash=True)
    with_idle = cq_scaling.run(10, 5, (3, 1, 1), idle=4, with_hash=True)
    assert with_idle["idle_cluster_queues"] == 4
    assert (with_idle["admissions"], with_idle["cycles"]) == (busy["admissions"], busy["cycles"])
    assert busy["admissions"] == busy["workloads"] == 50
    assert with_idle["decision_hash"] == busy["decision_hash"]

"""Queue metrics (app.controllers.metrics): /metrics scraped and parsed with the Prometheus text
parser; gauges computed from the known core (Scheduler) of tests/status_scenario.py, counters and
histograms from the recorder the reconciler calls. Names and labels are Kueue's."""

from __future__ import annotations

import math
from types import SimpleNamespace

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from app.config import LeaderElectionSettings, ServerSettings, Settings
from app.controllers.decision_writer import DecisionWriter
from app.controllers.metrics import (
    WAIT_BUCKETS,
    MetricsRecorder,
    QueueCollector,
    install,
    replica_role,
)
from app.core.types import WorkloadKey
from app.main import create_app
from app.wire.workload_status import priority_class_name
from tests.status_scenario import build_cluster

# One replica without leader election: the metrics say replica_role="standalone".
STANDALONE = Settings(controllers_enabled=False,
                      leader_election=LeaderElectionSettings(enabled=False),
                      server=ServerSettings(metrics_auth=False))

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: Samples, metric: str, /, **labels: str) -> float:
    labels.setdefault("replica_role", "standalone")
    return samples[(metric, frozenset(labels.items()))]


def series(samples: Samples, metric: str) -> list[dict[str, str]]:
    return [dict(lbl) for (n, lbl) in samples if n == metric]


async def scrape(app) -> Samples:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as c:
        r = await c.get("/metrics")
    assert r.status_code == 200
    return parse(r.text)


@pytest.fixture
def app():
    app = create_app(STANDALONE)
    app.state.cluster = build_cluster()
    return app


# ------------------------------------------------------------------------------ gauges


async def test_pending_workloads_per_cluster_queue_and_status(app) -> None:
    s = await scrape(app)
    # research-cq: eval-1, train-4, probe all parked; solo-cq: next (head of a StrictFIFO
    # queue) and after stay in the queue; inference-cq: none.
    expected = {
        ("research-cq", "active"): 0, ("research-cq", "inadmissible"): 3,
        ("solo-cq", "active"): 2, ("solo-cq", "inadmissible"): 0,
        ("inference-cq", "active"): 0, ("inference-cq", "inadmissible"): 0,
    }
    for (cq, status), n in expected.items():
        assert value(s, "kueue_pending_workloads", cluster_queue=cq, status=status) == n
    assert len(series(s, "kueue_pending_workloads")) == len(expected)


async def test_reserving_and_admitted_active_workloads(app) -> None:
    s = await scrape(app)
    # serve-2's admission write is in flight: reserving but not yet admitted.
    for cq, reserving, admitted in (("research-cq", 1, 1), ("inference-cq", 1, 0),
                                    ("solo-cq", 1, 1)):
        assert value(s, "kueue_reserving_active_workloads", cluster_queue=cq) == reserving
        assert value(s, "kueue_admitted_active_workloads", cluster_queue=cq) == admitted


async def test_cluster_queue_status_is_one_hot(app) -> None:
    app.state.cluster.delete_flavor("default-flavor")  # solo-cq becomes inactive
    s = await scrape(app)
    for cq, current in (("research-cq", "active"), ("solo-cq", "pending")):
        got = {st: value(s, "kueue_cluster_queue_status", cluster_queue=cq, status=st)
               for st in ("pending", "active", "terminating")}
        assert got == {st: float(st == current) for st in got}


async def test_quota_and_usage_per_flavor_resource(app) -> None:
    s = await scrape(app)
    gpu = {"cohort": "ai", "flavor": "a100", "resource": "nvidia.com/gpu"}
    research = {**gpu, "cluster_queue": "research-cq"}
    inference = {**gpu, "cluster_queue": "inference-cq"}
    assert value(s, "kueue_cluster_queue_nominal_quota", **research) == 4
    assert value(s, "kueue_cluster_queue_borrowing_limit", **research) == 4
    assert value(s, "kueue_cluster_queue_borrowing_limit", **inference) == math.inf
    assert value(s, "kueue_cluster_queue_lending_limit", **research) == math.inf
    # train-6: 6 GPUs, 2 above nominal, taken from inference's unused quota.
    assert value(s, "kueue_cluster_queue_resource_reservation", **research) == 6
    assert value(s, "kueue_cluster_queue_resource_usage", **research) == 6
    assert value(s, "pykueue_cluster_queue_resource_borrowed", **research) == 2
    assert value(s, "pykueue_cluster_queue_resource_lent", **inference) == 2
    # serve-2 reserves 2 GPUs; its admission is not stored yet, so usage is still 0.
    assert value(s, "kueue_cluster_queue_resource_reservation", **inference) == 2
    assert value(s, "kueue_cluster_queue_resource_usage", **inference) == 0


async def test_cpu_in_cores_memory_in_bytes_and_no_cohort_label(app) -> None:
    s = await scrape(app)
    solo = {"cohort": "", "cluster_queue": "solo-cq", "flavor": "default-flavor"}
    assert value(s, "kueue_cluster_queue_nominal_quota", **solo, resource="cpu") == 8.0
    assert value(s, "kueue_cluster_queue_resource_usage", **solo, resource="cpu") == 6.0
    assert value(s, "kueue_cluster_queue_nominal_quota", **solo, resource="memory") == 32 * 2**30
    assert value(s, "kueue_cluster_queue_resource_usage", **solo, resource="memory") == \
        20 * 2**30


async def test_local_queue_gauges(app) -> None:
    s = await scrape(app)
    lq = {"name": "lq-research", "namespace": "research"}
    assert value(s, "kueue_local_queue_pending_workloads", **lq, status="inadmissible") == 2
    assert value(s, "kueue_local_queue_pending_workloads", **lq, status="active") == 0
    assert value(s, "kueue_local_queue_reserving_active_workloads", **lq) == 1
    assert value(s, "kueue_local_queue_admitted_active_workloads", **lq) == 1
    assert value(s, "kueue_local_queue_status", **lq, active="True") == 1
    orphan = {"name": "lq-orphan", "namespace": "research"}
    assert value(s, "kueue_local_queue_status", **orphan, active="False") == 1
    assert value(s, "kueue_local_queue_status", **orphan, active="True") == 0
    # research/lost waits in no queue (its ClusterQueue is missing): inadmissible.
    assert value(s, "kueue_local_queue_pending_workloads", **orphan, status="inadmissible") == 1
    assert value(s, "kueue_local_queue_pending_workloads", **orphan, status="active") == 0


async def test_local_queue_resource_reservation_and_usage(app) -> None:
    """Kueue's LocalQueue twins of the ClusterQueue resource gauges: reservation counts an
    admission in flight, usage only admitted Workloads."""
    s = await scrape(app)
    gpu = {"flavor": "a100", "resource": "nvidia.com/gpu"}
    research = {"name": "lq-research", "namespace": "research", **gpu}
    inference = {"name": "lq-inference", "namespace": "inference", **gpu}
    assert value(s, "kueue_local_queue_resource_reservation", **research) == 6
    assert value(s, "kueue_local_queue_resource_usage", **research) == 6
    assert value(s, "kueue_local_queue_resource_reservation", **inference) == 2
    assert value(s, "kueue_local_queue_resource_usage", **inference) == 0


async def test_gauges_follow_the_core_at_scrape_time(app) -> None:
    cluster = app.state.cluster
    cluster.finish(WorkloadKey("research/train-6"))
    s = await scrape(app)
    research = {"cohort": "ai", "flavor": "a100", "resource": "nvidia.com/gpu",
                "cluster_queue": "research-cq"}
    assert value(s, "kueue_cluster_queue_resource_usage", **research) == 0
    assert value(s, "kueue_reserving_active_workloads", cluster_queue="research-cq") == 0


async def test_no_cluster_yet_means_no_queue_series() -> None:
    app = create_app(STANDALONE)
    s = await scrape(app)
    assert series(s, "kueue_pending_workloads") == []
    assert series(s, "kueue_cluster_queue_nominal_quota") == []


# ------------------------------------------------------------------------------ counters


async def test_recorder_counts_admissions_with_wait_time(app) -> None:
    rec: MetricsRecorder = app.state.metrics_recorder
    rec.admitted("research-cq", 3.0, namespace="research", local_queue="lq-research")
    rec.admitted("research-cq", 12.0, namespace="research", local_queue="lq-research")
    rec.admitted("solo-cq", 0.5, priority_class="high")
    s = await scrape(app)
    cq = {"cluster_queue": "research-cq", "priority_class": ""}
    assert value(s, "kueue_admitted_workloads_total", **cq) == 2
    assert value(s, "kueue_quota_reserved_workloads_total", **cq) == 2
    assert value(s, "kueue_admitted_workloads_total", cluster_queue="solo-cq",
                 priority_class="high") == 1
    # 3 s falls in le=5 (not le=2.5); 12 s in le=20 (not le=10).
    h = "kueue_admission_wait_time_seconds_bucket"
    assert [value(s, h, **cq, le=le) for le in ("2.5", "5.0", "10.0", "20.0", "+Inf")] == \
        [0, 1, 1, 2, 2]
    assert value(s, "kueue_admission_wait_time_seconds_sum", **cq) == 15.0
    assert value(s, "kueue_quota_reserved_wait_time_seconds_count", **cq) == 2
    lq = {"name": "lq-research", "namespace": "research", "priority_class": ""}
    assert value(s, "kueue_local_queue_admitted_workloads_total", **lq) == 2
    assert value(s, "kueue_local_queue_admission_wait_time_seconds_count", **lq) == 2


async def test_recorder_counts_evictions_preemptions_and_finishes(app) -> None:
    rec: MetricsRecorder = app.state.metrics_recorder
    rec.evicted("research-cq", "Preempted", namespace="research", local_queue="lq-research")
    rec.preempted("inference-cq", "InCohortReclamation")
    rec.evicted("research-cq", "Deactivated")
    rec.finished("solo-cq")
    rec.admission_attempt(True, 0.002)
    rec.admission_attempt(False, 0.001)
    rec.admission_attempt(False, 0.001)
    s = await scrape(app)
    ev = {"cluster_queue": "research-cq", "underlying_cause": "", "priority_class": ""}
    assert value(s, "kueue_evicted_workloads_total", **ev, reason="Preempted") == 1
    assert value(s, "kueue_evicted_workloads_total", **ev, reason="Deactivated") == 1
    assert value(s, "kueue_local_queue_evicted_workloads_total", name="lq-research",
                 namespace="research", reason="Preempted", underlying_cause="",
                 priority_class="") == 1
    assert value(s, "kueue_preempted_workloads_total", preempting_cluster_queue="inference-cq",
                 reason="InCohortReclamation") == 1
    assert value(s, "kueue_finished_workloads_total", cluster_queue="solo-cq",
                 priority_class="") == 1
    assert value(s, "kueue_admission_attempts_total", result="success") == 1
    assert value(s, "kueue_admission_attempts_total", result="inadmissible") == 2
    assert value(s, "kueue_admission_attempt_duration_seconds_count", result="inadmissible") == 2


def test_wait_buckets_are_kueues() -> None:
    assert WAIT_BUCKETS == (1, 2.5, 5, 10, 20, 40, 80, 160, 320, 640, 1280, 2560, 5120, 10240)


@pytest.mark.parametrize(("election", "leading", "role"), [
    pytest.param(False, True, "standalone", id="no leader election: standalone"),
    pytest.param(True, True, "leader", id="leading replica: leader"),
    pytest.param(True, False, "follower", id="other replica: follower"),
])
def test_replica_role_label(election: bool, leading: bool, role: str) -> None:
    registry = CollectorRegistry()
    fn = replica_role(election, lambda: leading)
    rec = install(registry, build_cluster, fn)
    rec.admitted("research-cq", 1.0)
    s = parse(generate_latest(registry).decode())
    assert value(s, "kueue_admitted_workloads_total", cluster_queue="research-cq",
                 priority_class="", replica_role=role) == 1
    assert value(s, "kueue_pending_workloads", cluster_queue="research-cq",
                 status="inadmissible", replica_role=role) == 3


def test_collector_registers_without_collecting() -> None:
    calls = []

    def source():
        calls.append(1)
        return None

    CollectorRegistry().register(QueueCollector(source))
    assert calls == []


def _wl(reason_conditions: list[dict], priority_class: str | None = None) -> dict:
    spec: dict = {"queueName": "lq-research"}
    if priority_class is not None:
        spec["priorityClassRef"] = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass",
                                    "name": priority_class}
    return {"metadata": {"namespace": "research", "name": "w"}, "spec": spec,
            "status": {"admission": {"clusterQueue": "research-cq"},
                       "conditions": reason_conditions}}


@pytest.mark.parametrize(("written", "conditions", "reason", "cause"), [
    pytest.param("DeactivatedDueToMaximumExecutionTimeExceeded", [], "Deactivated",
                 "MaximumExecutionTimeExceeded", id="deactivated with a cause"),
    pytest.param("PodsReadyTimeout", [], "PodsReadyTimeout", "WaitForStart",
                 id="never ready"),
    pytest.param("PodsReadyTimeout", [{"type": "PodsReady", "status": "False",
                                       "reason": "WaitForRecovery"}],
                 "PodsReadyTimeout", "WaitForRecovery", id="lost readiness"),
    pytest.param("Preempted", [], "Preempted", "", id="preempted: no cause (Kueue)"),
])
async def test_evictions_are_counted_with_kueues_reason_cause_and_priority_class(
        app, written: str, conditions: list[dict], reason: str, cause: str) -> None:
    """The decision writer reports an eviction as Kueue v0.17.1 does: the Evicted reason
    without its cause suffix, the cause in ``underlying_cause``, the Workload's
    priorityClassRef name in ``priority_class``."""
    rec: MetricsRecorder = app.state.metrics_recorder
    writer = SimpleNamespace(metrics=rec)
    DecisionWriter._count_eviction(writer, _wl(conditions, "high"), written, None, None)  # type: ignore[arg-type]
    s = await scrape(app)
    assert value(s, "kueue_evicted_workloads_total", cluster_queue="research-cq",
                 reason=reason, underlying_cause=cause, priority_class="high") == 1
    assert value(s, "kueue_local_queue_evicted_workloads_total", name="lq-research",
                 namespace="research", reason=reason, underlying_cause=cause,
                 priority_class="high") == 1


def test_priority_class_name_is_the_workloads_priority_class_ref() -> None:
    assert priority_class_name(_wl([], "high")) == "high"
    assert priority_class_name(_wl([])) == ""

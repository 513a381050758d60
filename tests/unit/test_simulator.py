"""``pykueue simulate`` (issue 9): the simulator drives the admission core and nothing else.

- its decisions are the core's: the same trace driven by hand through ``Scheduler`` gives the
  same decisions, in the same order, at the same instants;
- a small trace's timeline, computed by hand below, is asserted exactly;
- bad traces are rejected with ``file:line:`` and the field path.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import app as cli
from app.core.decisions import Admit, Decision, Pending, Preempt, PreemptionReason
from app.core.scheduling_cycle import Scheduler
from app.core.types import ClusterQueueName, FlavorName, FlavorResource, ResourceName, WorkloadKey
from app.sim import Simulator, TraceError, load_trace, parse_trace, summarize, timelines
from app.sim.report import bucket_means, capacity_bound
from app.sim.trace import US, parse_duration_us, with_nominal

ROOT = Path(__file__).resolve().parents[2]
CPU = FlavorResource(FlavorName("default"), ResourceName("cpu"))

# Two ClusterQueues of 4 cpu in cohort "ai". team-a may borrow up to 4 and never preempts;
# team-b reclaims what it lent (reclaimWithinCohort Any). A preempted Workload takes 1 s to
# stop (evictionDelay).
SMALL = """\
name: small
evictionDelay: 1s
flavors:
  - name: default
cohorts:
  - name: ai
    clusterQueues:
      - name: team-a
        namespaceSelector: {}
        resourceGroups:
          - coveredResources: [cpu]
            flavors:
              - name: default
                resources: [{name: cpu, nominalQuota: 4, borrowingLimit: 4}]
      - name: team-b
        preemption: {reclaimWithinCohort: Any, withinClusterQueue: LowerPriority}
        namespaceSelector: {}
        resourceGroups:
          - coveredResources: [cpu]
            flavors:
              - name: default
                resources: [{name: cpu, nominalQuota: 4}]
arrivals:
  - {at: 0s, name: a1, localQueue: team-a, request: {cpu: 3}, runtime: 10s, class: train}
  - {at: 0s, name: a2, localQueue: team-a, request: {cpu: 3}, runtime: 10s, class: train}
  - {at: 2s, name: b1, localQueue: team-b, request: {cpu: 4}, runtime: 3s, class: serve}
"""


def _small() -> Simulator:
    return Simulator(parse_trace(SMALL, "small.yaml"), record_decisions=True).run()


def _cpu(samples: list[dict[FlavorResource, int]]) -> list[float]:
    return [s.get(CPU, 0) / 1000 for s in samples]


class CountingScheduler(Scheduler):
    """The core, counting its cycles: proves the simulator drives the object it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def schedule(self, now: float) -> list[Decision]:
        self.calls += 1
        return super().schedule(now)


# ---- the timeline, by hand ----------------------------------------------------------------------
#
# t=0   a1 (3 cpu) and a2 (3 cpu) arrive in team-a. One head per ClusterQueue per cycle:
#       cycle 1 admits a1 (3 <= nominal 4); cycle 2 admits a2: team-a then uses 6, borrowing 2
#       of team-b's idle 4 (cohort 8 in all; borrowingLimit 4 allows up to 8). team-a: 6 cpu.
# t=2   b1 (4 cpu) arrives in team-b: the cohort has 8 - 6 = 2 free, but 4 <= team-b's nominal,
#       so team-b reclaims from team-a, which borrows. Candidates (other ClusterQueue first,
#       equal priority, both admitted at 0, then uid): a1 before a2; evicting a1 (3) frees
#       enough (cohort 3 used, team-b 0 + 4 <= 4). Preempt(b1, victims=[a1],
#       InCohortReclamation). a1 keeps its quota while it stops (evictionDelay 1 s).
# t=3   a1 has stopped: finish_eviction puts it back in team-a's queue (its run is lost).
#       Cycle: b1 (not borrowing) is ordered first and admitted: team-b 4 cpu. a1 no longer
#       fits (cohort 3 + 4 = 7 of 8, 1 free) and team-a may not preempt: pending.
#       team-a: 3 cpu (a2), 1 pending, 1 admitted.
# t=6   b1 ends (admitted at 3 + 3 s runtime). The cohort has 8 - 3 = 5 free: a1 is admitted
#       again (team-a 6 cpu, borrowing 2); it runs 10 s from now.
# t=10  a2 ends (admitted at 0 + 10 s). team-a: 3 cpu.
# t=16  a1 ends (re-admitted at 6 + 10 s). Makespan 16 s.
#
# Time to admission (creation -> last admission, as Kueue's recorder): a1 6 s, a2 0 s,
# b1 3 - 2 = 1 s. Usage integrals: team-a 6x3 + 3x3 + 6x4 + 3x6 = 69 cpu-s over [0, 16];
# team-b 4x3 = 12 cpu-s over [0, 6].

def test_small_trace_timeline_is_exactly_the_hand_computed_one() -> None:
    sim = _small()
    a = sim.timelines[ClusterQueueName("team-a")]
    b = sim.timelines[ClusterQueueName("team-b")]
    assert [t / US for t in a.t_us] == [0, 3, 6, 10, 16]
    assert _cpu(a.usage) == [6, 3, 6, 3, 0]
    assert a.pending == [0, 1, 0, 0, 0]
    assert a.admitted == [2, 1, 2, 1, 0]
    assert [t / US for t in b.t_us] == [0, 2, 3, 6]
    assert _cpu(b.usage) == [0, 0, 4, 0]
    assert b.pending == [0, 1, 0, 0]
    assert b.admitted == [0, 0, 1, 0]
    assert a.integral == {CPU: 69_000 * US} and a.last_change_us == 16 * US
    assert b.integral == {CPU: 12_000 * US} and b.last_change_us == 6 * US
    assert sim.end_us == 16 * US

    runs = {k.split("/")[1]: r for k, r in sim.runs.items()}
    assert (runs["a1"].first_admitted_us, runs["a1"].last_admitted_us) == (0, 6 * US)
    assert (runs["a1"].evictions, runs["a1"].admissions, runs["a1"].finished_us) == (1, 2, 16 * US)
    assert (runs["a2"].last_admitted_us, runs["a2"].finished_us) == (0, 10 * US)
    assert (runs["b1"].last_admitted_us, runs["b1"].finished_us) == (3 * US, 6 * US)

    admits = [(t / US, d.workload) for t, d in sim.decisions if isinstance(d, Admit)]
    assert admits == [(0, "default/a1"), (0, "default/a2"), (3, "default/b1"), (6, "default/a1")]
    preempts = [(t / US, d) for t, d in sim.decisions if isinstance(d, Preempt)]
    assert [(t, d.preemptor, [(v.workload, v.reason) for v in d.victims])
            for t, d in preempts] == [
        (2, "default/b1", [("default/a1", PreemptionReason.IN_COHORT_RECLAMATION)])]


def test_capacity_bound_leaves_out_workloads_that_can_never_run() -> None:
    """Fresh-user check, session 2: 8-cpu Workloads in a 4-cpu ClusterQueue never run, so
    they must not push the bound above the makespan (200 x 1 cpu x 10 s on 4 cpu = 500 s)."""
    text = """\
flavors: [{name: default}]
clusterQueues:
  - name: team
    namespaceSelector: {}
    resourceGroups:
      - coveredResources: [cpu]
        flavors: [{name: default, resources: [{name: cpu, nominalQuota: 4}]}]
    workloads:
      - {class: small, count: 200, interval: 0.1s, request: {cpu: 1}, runtime: 10s}
      - {class: big, count: 3, interval: 1s, request: {cpu: 8}, runtime: 20s}
"""
    t = parse_trace(text, "never.yaml")
    f = summarize(Simulator(t).run())
    assert capacity_bound(t) == 500.0
    assert 500.0 <= f["makespan_s"] < 501.0  # the bound holds (it was 560 s before)
    assert f["classes"]["big"]["finished"] == 0


def test_small_trace_figures() -> None:
    f = summarize(_small())
    assert f["makespan_s"] == 16
    # cohort work: a1 3x10 + a2 3x10 + b1 4x3 = 72 cpu-s on 8 cpu.
    assert f["capacity_bound_s"] == 9
    assert f["decisions"]["admit"] == 4
    assert (f["decisions"]["preempt"], f["decisions"]["victims"]) == (1, 1)
    # train: a1 6 s and a2 0 s; first admissions both at 0.
    assert f["classes"]["train"]["avg_time_to_admission_s"] == 3
    assert f["classes"]["train"]["avg_time_to_first_admission_s"] == 0
    assert f["classes"]["train"]["evictions"] == 1
    assert f["classes"]["serve"]["avg_time_to_admission_s"] == 1
    # a1 admitted at 0, preempted at 2 (the Preempt decision: Evicted=True): 2 s thrown away.
    lost_a1 = {"evictions": 1, "lost_s": 2.0, "unmatched": 0, "clamped": 0, "after_finish": 0}
    assert f["lost_to_eviction"] == {
        "serve": {"evictions": 0, "lost_s": 0.0, "unmatched": 0, "clamped": 0,
                  "after_finish": 0},
        "train": lost_a1, "total": lost_a1}
    # 69 / 16 = 4.3125 cpu of 4 = 107.81 %; 12 / 6 = 2 of 4 = 50 %; both: 81 / 16 / 8.
    assert f["cluster_queues"]["team-a"]["usage_pct"] == {"default/cpu": 107.81}
    assert f["cluster_queues"]["team-b"]["usage_pct"] == {"default/cpu": 50.0}
    assert f["usage_pct"] == {"default/cpu": 63.28}
    assert f["unadmitted"]["count"] == 0
    tl = timelines(_small())["team-a"]
    assert tl["t_s"] == [0, 3, 6, 10, 16]
    assert tl["usage"]["default/cpu"] == [6, 3, 6, 3, 0]


def test_decisions_are_the_cores_own_when_driven_by_hand() -> None:
    """Drive ``Scheduler`` by hand with the events of the small trace (the reconciler's
    calls: add, schedule until quiet, confirm admissions, finish_eviction, finish) and get
    the very decisions the simulator recorded."""
    sim = _small()
    trace = parse_trace(SMALL, "small.yaml")
    c = Scheduler()
    for f in trace.flavors:
        c.add_flavor(f)
    for ns, labels in trace.namespaces.items():
        c.set_namespace(ns, labels)
    for spec in trace.cluster_queues:
        c.add_cluster_queue(spec)
    for lq in trace.local_queues:
        c.add_local_queue(lq)
    wls = {s.workload.name: s.workload for s in trace.submissions()}
    log: list[tuple[int, Decision]] = []

    def settle(t: float) -> None:
        while ds := c.schedule(t):
            for d in ds:
                log.append((int(t * US), d))
                if isinstance(d, Admit):
                    name = d.workload.split("/")[1]
                    c.update_workload(replace(wls[name], admission=d.admission,
                                              quota_reserved_at=t, evicted_at=None))

    c.add_workload(wls["a1"])
    c.add_workload(wls["a2"])
    settle(0)
    c.add_workload(wls["b1"])
    settle(2)
    assert c.finish_eviction(WorkloadKey("default/a1"), 3)
    settle(3)
    assert c.finish(WorkloadKey("default/b1"))
    settle(6)
    assert c.finish(WorkloadKey("default/a2"))
    settle(10)
    assert c.finish(WorkloadKey("default/a1"))
    settle(16)
    assert log == sim.decisions
    assert any(isinstance(d, Pending) for _, d in log)


def test_simulator_runs_the_cluster_it_is_given() -> None:
    core = CountingScheduler()
    sim = Simulator(parse_trace(SMALL, "small.yaml"), cluster=core).run()
    assert core.calls == sim.cycles > 0
    assert sim.cluster is core


def test_simulator_counts_match_the_cores_status_after_every_cycle() -> None:
    trace = load_trace(ROOT / "bench" / "scenarios" / "research-gpus.yaml")
    checked = []

    def check(t: int, decisions: list[Decision]) -> None:
        for name in sim.timelines:
            st = sim.cluster.cluster_queue_status(name)
            assert st is not None
            assert (st.pending, st.admitted) == (sim.pending_count(name),
                                                 sim.admitted_count(name)), (t, name)
        checked.append(t)

    sim = Simulator(trace, on_cycle=check)
    sim.run()
    assert len(checked) == sim.cycles > 40


def test_eviction_delay_zero_readmits_the_preemptor_at_the_same_instant() -> None:
    sim = Simulator(parse_trace(SMALL, "small.yaml"), eviction_delay_us=0,
                    record_decisions=True).run()
    admits = [(t / US, d.workload) for t, d in sim.decisions if isinstance(d, Admit)]
    # b1 preempts a1 at 2 and is admitted at 2; b1 ends at 5, a1 is back at 5, ends at 15.
    assert admits == [(0, "default/a1"), (0, "default/a2"), (2, "default/b1"), (5, "default/a1")]
    assert sim.end_us == 15 * US


def test_until_stops_the_clock_and_counts_usage_still_held() -> None:
    sim = Simulator(parse_trace(SMALL, "small.yaml"), until_us=4 * US).run()
    a = sim.timelines[ClusterQueueName("team-a")]
    # 6 cpu for 3 s, then 3 cpu from 3 s to the last instant (3 s): nothing after it.
    assert sim.end_us == 3 * US
    assert a.integral == {CPU: 18_000 * US}
    assert summarize(sim)["unadmitted"]["count"] == 3


def test_a_workload_that_can_never_fit_is_reported_with_the_cores_reason() -> None:
    text = SMALL + "  - {at: 1s, name: huge, localQueue: team-a, request: {cpu: 9}, runtime: 1s}\n"
    f = summarize(Simulator(parse_trace(text, "t.yaml")).run())
    assert f["unadmitted"]["count"] == 1
    (u,) = f["unadmitted"]["first"]
    assert u["workload"] == "default/huge" and u["state"] == "pending"
    assert u["reason"] == "ExceedsMaxQuota"
    assert f["classes"]["arrivals"]["finished"] == 0


# ---- the scenarios -------------------------------------------------------------------------------

def test_baseline_scenario_is_kueues() -> None:
    t = load_trace(ROOT / "bench" / "scenarios" / "baseline.yaml")
    assert len(t.cluster_queues) == 30
    assert {str(cq.cohort) for cq in t.cluster_queues} == {f"cohort-{i}" for i in range(5)}
    cq = next(c for c in t.cluster_queues if c.name == "cq-4-5")
    assert cq.cohort == "cohort-4"
    assert cq.quota(CPU).nominal == 20_000 and cq.quota(CPU).borrowing_limit == 100_000
    assert (cq.preemption.reclaim_within_cohort, cq.preemption.within_cluster_queue) == (
        "Any", "LowerPriority")
    subs = t.submissions()
    assert len(subs) == 15_000
    per_class = {c: [s for s in subs if s.class_name == c and s.workload.queue_name == "cq-0-0"]
                 for c in ("small", "medium", "large")}
    small, medium, large = per_class["small"], per_class["medium"], per_class["large"]
    assert (len(small), len(medium), len(large)) == (350, 100, 50)
    assert small[-1].at_us == 349 * 100_000 and large[-1].at_us == 49 * 1_200_000
    assert (small[0].runtime_us, medium[0].runtime_us, large[0].runtime_us) == (
        200_000, 500_000, 1_000_000)
    assert [s[0].workload.priority for s in (small, medium, large)] == [50, 100, 200]
    assert [s[0].workload.pod_sets[0].requests for s in (small, medium, large)] == [
        {"cpu": 1000}, {"cpu": 5000}, {"cpu": 20_000}]
    assert capacity_bound(t) == 66.0


def test_large_scenario_has_1000_queues_and_50000_workloads() -> None:
    t = load_trace(ROOT / "bench" / "scenarios" / "large.yaml")
    assert len(t.cluster_queues) == 1000
    assert len({cq.cohort for cq in t.cluster_queues}) == 10
    assert t.workload_count() == 50_000


def test_admission_fair_sharing_scenario_serves_the_teams_behind_a_flood() -> None:
    trace = load_trace(ROOT / "bench" / "scenarios" / "afs-teams.yaml")
    assert trace.admission_fair_sharing is not None
    assert trace.admission_fair_sharing.half_life_s == 1800
    weights = {lq.key: lq.fair_weight_milli for lq in trace.local_queues}
    assert weights["team-c/jobs"] == 2000

    def wait_of(t) -> dict[str, float]:
        sim = Simulator(t).run()
        waits: dict[str, list[float]] = {}
        for key, r in sim.runs.items():
            waits.setdefault(key.split("/", 1)[0], []).append(
                (r.last_admitted_us - r.created_us) / US)
        return {lq: sum(w) / len(w) for lq, w in waits.items()}

    fair, fifo = wait_of(trace), wait_of(replace(trace, admission_fair_sharing=None))
    # First come, first served, B's jobs wait hours behind A's flood; with AFS minutes.
    assert fifo["team-b"] > 4 * 3600
    assert fair["team-b"] < 15 * 60
    assert fair["team-c"] < fifo["team-c"] / 4


def test_what_if_nominal_changes_one_quota() -> None:
    t = load_trace(ROOT / "bench" / "scenarios" / "research-gpus.yaml")
    gpu = FlavorResource(FlavorName("a100"), ResourceName("nvidia.com/gpu"))
    t6 = with_nominal(t, "research:a100:nvidia.com/gpu=6")
    research = {cq.name: cq for cq in t6.cluster_queues}[ClusterQueueName("research")]
    assert research.quota(gpu).nominal == 6
    before = summarize(Simulator(t).run())
    after = summarize(Simulator(t6).run())
    assert (after["classes"]["training"]["avg_time_to_admission_s"]
            < before["classes"]["training"]["avg_time_to_admission_s"])
    for bad, why in [("research:a100:cpu=6", "no quota for cpu"),
                     ("nope:a100:nvidia.com/gpu=6", "no ClusterQueue nope in the trace"),
                     ("research:a100=6", "expected CLUSTERQUEUE"),
                     ("research:a100:nvidia.com/gpu=lots", "research:a100")]:
        with pytest.raises(ValueError, match=why):
            with_nominal(t, bad)


# ---- bad traces ----------------------------------------------------------------------------------

def _cq(extra: str = "", quota: str = "{name: cpu, nominalQuota: 4}") -> str:
    return f"""\
flavors:
  - name: default
clusterQueues:
  - name: q
{extra}    resourceGroups:
      - coveredResources: [cpu]
        flavors:
          - name: default
            resources: [{quota}]
"""


BAD = [
    ("yaml syntax", "flavors:\n  - name: x\n\tnodeLabels: {}\n", 3, "invalid YAML: found char"),
    ("empty", "", 1, "empty trace"),
    ("top level is a list", "- 1\n", 1, "expected a mapping"),
    ("unknown top-level field", "flavors: []\nqueues: []\n", 2, "queues: unknown field"),
    ("unknown ClusterQueue field", _cq("    cohrt: ai\n"), 5, "clusterQueues[0].cohrt"),
    ("flavor not defined", _cq().replace("- name: default\n            ",
                                         "- name: gpu\n            "),
     8, "ResourceFlavor 'gpu' is not defined"),
    ("bad enum", _cq("    queueingStrategy: Fastest\n"), 5,
     "queueingStrategy: unsupported value 'Fastest'"),
    ("bad quantity", _cq(quota="{name: cpu, nominalQuota: 4x}"), 9,
     "nominalQuota: invalid quantity '4x'"),
    ("negative quota", _cq(quota="{name: cpu, nominalQuota: -1}"), 9, "must not be negative"),
    ("core validation", _cq(quota="{name: cpu, nominalQuota: 4, borrowingLimit: 1}"), 9,
     "borrowingLimit: must be nil when cohortName is empty"),
    ("duplicate ClusterQueue", _cq() + _cq().split("clusterQueues:\n")[1], 10,
     "ClusterQueue 'q' is defined twice (first at line 4)"),
    ("count not an integer", _cq() + "workloads:\n  - {class: w, count: many, localQueue: q, "
     "request: {cpu: 1}, runtime: 1s}\n", 11, "workloads[0].count: expected an integer"),
    ("count below zero", _cq() + "workloads:\n  - {class: w, count: -2, localQueue: q, "
     "request: {cpu: 1}, runtime: 1s}\n", 11, "must be >= 0"),
    ("unknown LocalQueue", _cq() + "arrivals:\n  - {at: 1s, localQueue: ml/train, "
     "request: {cpu: 1}, runtime: 1s}\n", 11, "LocalQueue 'ml/train' is not defined"),
    ("bad duration", _cq() + "arrivals:\n  - {at: 10 parsecs, localQueue: q, "
     "request: {cpu: 1}, runtime: 1s}\n", 11, "arrivals[0].at: not a duration"),
    ("missing runtime", _cq() + "arrivals:\n\n  - {at: 1s, localQueue: q, "
     "request: {cpu: 1}}\n", 12, "missing required field 'runtime'"),
    ("empty request", _cq() + "arrivals:\n  - {at: 1s, localQueue: q, request: {}, "
     "runtime: 1s}\n", 11, "request: expected a non-empty mapping"),
    ("same Workload twice", _cq() + "arrivals:\n  - {at: 1s, name: w, localQueue: q, "
     "request: {cpu: 1}, runtime: 1s}\n  - {at: 2s, name: w, localQueue: q, "
     "request: {cpu: 1}, runtime: 1s}\n", 12, "Workload default/w would be created twice"),
    ("local queue to unknown ClusterQueue", _cq() + "localQueues:\n  - {name: lq, "
     "clusterQueue: nope}\n", 11, "ClusterQueue 'nope' is not defined"),
    ("bad admission mode", _cq("    admissionScope: {admissionMode: Sometimes}\n"), 5,
     "admissionScope.admissionMode: unsupported value 'Sometimes'"),
    ("negative LocalQueue weight", _cq() + "localQueues:\n  - {name: lq, clusterQueue: q, "
     "fairSharing: {weight: -1}}\n", 11, "fairSharing.weight"),
    ("admission fair sharing without a half-life", _cq() + "admissionFairSharing:\n"
     "  usageSamplingInterval: 1m\n", 11, "missing required field 'usageHalfLifeTime'"),
    ("negative resource weight", _cq() + "admissionFairSharing:\n  usageHalfLifeTime: 1h\n"
     "  resourceWeights: {cpu: -2}\n", 12, "cpu: expected a number >= 0"),
    ("cohort given twice", "flavors: [{name: default}]\ncohorts:\n  - name: ai\n"
     "    clusterQueues:\n      - name: q\n        cohort: ml\n        resourceGroups: []\n",
     6, "takes its cohort from there"),
]


@pytest.mark.parametrize(("text", "line", "fragment"),
                         [pytest.param(t, ln, fr, id=i) for i, t, ln, fr in BAD])
def test_bad_trace_is_rejected_naming_the_line(text: str, line: int, fragment: str) -> None:
    with pytest.raises(TraceError) as err:
        t = parse_trace(text, "bad.yaml")
        t.submissions()
    assert err.value.line == line, str(err.value)
    assert str(err.value).startswith(f"bad.yaml:{line}: ")
    assert fragment in str(err.value)


@pytest.mark.parametrize(("text", "us"), [
    (0, 0), (1, US), (0.25, 250_000), ("200ms", 200_000), ("1.5s", 1_500_000),
    ("2m", 120 * US), ("1h", 3600 * US), ("7us", 7),
])
def test_durations(text: object, us: int) -> None:
    assert parse_duration_us(text) == us


@pytest.mark.parametrize("text", ["-1s", "1.5us", "soon", True, "1d"])
def test_bad_durations(text: object) -> None:
    with pytest.raises(ValueError):
        parse_duration_us(text)


def test_bucket_means_weights_a_step_function_by_time() -> None:
    # 4 from 0 to 2 s, 0 from 2 to 3 s, 8 from 3 to 4 s; buckets of 2 s.
    assert bucket_means([0, 2 * US, 3 * US], [4, 0, 8], 4 * US, 2) == [4.0, 4.0]


# ---- the command line ----------------------------------------------------------------------------

def test_cli_prints_json_with_the_timeline(tmp_path: Path) -> None:
    trace = tmp_path / "small.yaml"
    trace.write_text(SMALL)
    r = CliRunner().invoke(cli, ["simulate", str(trace), "--json", "--timeline"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["makespan_s"] == 16
    assert out["timeline"]["team-b"]["t_s"] == [0, 2, 3, 6]


def test_kueues_requeue_batch_delays_the_parked_readmission_by_one_second(
        tmp_path: Path) -> None:
    """The small trace with ``--requeue-batch 1s`` (Kueue v0.17.1's requeueBatchPeriod): a1,
    parked at t=3, returns one second after b1 ends at t=6, so it is admitted at 7 and ends at
    17; everything before that is the hand-computed timeline."""
    trace = tmp_path / "small.yaml"
    trace.write_text(SMALL)
    r = CliRunner().invoke(cli, ["simulate", str(trace), "--json", "--timeline",
                                 "--requeue-batch", "1s"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["makespan_s"] == 17
    assert out["timeline"]["team-b"]["t_s"] == [0, 2, 3, 6]
    assert out["timeline"]["team-a"]["t_s"] == [0, 3, 7, 10, 17]
    bad = CliRunner().invoke(cli, ["simulate", str(trace), "--requeue-batch", "soon"])
    assert bad.exit_code == 2 and "not a duration" in bad.output


def test_the_preempted_queue_order_option_is_read_and_checked(tmp_path: Path) -> None:
    """``--preempted-queue-order``: Creation runs (the small trace preempts nothing, so the
    same timeline as Eviction); any other value exits 2 naming the option."""
    trace = tmp_path / "small.yaml"
    trace.write_text(SMALL)
    runs = [CliRunner().invoke(cli, ["simulate", str(trace), "--json", "--timeline",
                                     "--preempted-queue-order", order])
            for order in ("Eviction", "Creation")]
    assert all(r.exit_code == 0 for r in runs), [r.output for r in runs]
    assert json.loads(runs[0].output)["timeline"] == json.loads(runs[1].output)["timeline"]
    bad = CliRunner().invoke(cli, ["simulate", str(trace), "--preempted-queue-order", "Age"])
    assert bad.exit_code == 2 and "--preempted-queue-order" in bad.output


# One ClusterQueue of 4 cpu; a and b take all of it (a's runtime: RUNTIME).
ONE_QUEUE = """\
name: one-queue
flavors: [{name: default}]
clusterQueues:
  - {name: q, namespaceSelector: {}, resourceGroups: [{coveredResources: [cpu], flavors: [
      {name: default, resources: [{name: cpu, nominalQuota: 4}]}]}]}
arrivals:
  - {at: 0s, name: a, localQueue: q, request: {cpu: 4}, runtime: RUNTIME, class: x}
  - {at: 0s, name: b, localQueue: q, request: {cpu: 4}, runtime: 1s, class: x}
"""


@pytest.mark.parametrize("runtime_us", [3_000_000, 3_000_004])
def test_a_requeue_batch_a_float_puts_past_its_microsecond_still_runs_there(
        runtime_us: int) -> None:
    """a ends at 3.000004 s: the batch is due at 3.000004 + 1.0 = 4.000004000000001 in
    floats, past 4.000004 (the instant the simulator rounds it to). The cycles there must
    see it due, or next_wakeup names the same instant again, no wake-up is pushed and b,
    parked, never starts (found by breaker20)."""
    trace = parse_trace(ONE_QUEUE.replace("RUNTIME", f"{runtime_us}us"), "one.yaml")
    sim = Simulator(trace, requeue_batch_s=1.0).run()
    b = sim.runs[WorkloadKey("default/b")]
    assert (b.last_admitted_us, b.finished_us) == (runtime_us + US, runtime_us + 2 * US)
    assert sim.end_us == runtime_us + 2 * US and sim.cluster.next_wakeup() is None


def test_a_requeue_batch_shorter_than_a_microsecond_runs_at_the_next_one() -> None:
    """A batch of 0.1 ns is due within a's end instant's microsecond: rounded, it names that
    instant again; the simulator runs it one microsecond later instead of never."""
    trace = parse_trace(ONE_QUEUE.replace("RUNTIME", "3s"), "one.yaml")
    sim = Simulator(trace, requeue_batch_s=1e-10).run()
    assert sim.runs[WorkloadKey("default/b")].last_admitted_us == 3 * US + 1


def test_a_batch_after_the_last_finish_that_only_parks_again_does_not_end_the_run() -> None:
    """big (8 cpu) never fits; b ends last, at 5 s: its requeue batch at 6 s returns big,
    which is parked again (a Pending decision) and nothing else happens. The makespan is
    b's end, as without a batch (found by breaker20: it was 6 s)."""
    trace = parse_trace(ONE_QUEUE.replace("RUNTIME", "3s") + "  - {at: 0s, name: big, "
                        "localQueue: q, request: {cpu: 8}, runtime: 1s, class: x}\n", "t.yaml")
    sim = Simulator(trace, requeue_batch_s=1.0).run()
    assert sim.runs[WorkloadKey("default/b")].finished_us == 5 * US
    assert sim.end_us == 5 * US and summarize(sim)["makespan_s"] == 5.0
    assert sim.runs[WorkloadKey("default/big")].last_admitted_us is None


def test_cli_table_plot_and_what_if(tmp_path: Path) -> None:
    png = tmp_path / "usage.png"
    out = tmp_path / "figures.json"
    r = CliRunner().invoke(cli, [
        "simulate", str(ROOT / "bench" / "scenarios" / "research-gpus.yaml"),
        "--nominal", "research:a100:nvidia.com/gpu=6", "--plot", str(png),
        "--output", str(out)])
    assert r.exit_code == 0, r.output
    assert "research" in r.output and "Makespan" in r.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = json.loads(out.read_text())
    assert saved["cluster_queues"]["research"]["nominal"] == {"a100/nvidia.com/gpu": 6}
    assert set(saved["timeline"]) == {"research", "production"}


def test_cli_bad_trace_exits_2_naming_the_line(tmp_path: Path) -> None:
    trace = tmp_path / "bad.yaml"
    trace.write_text("flavors: []\nqueues: []\n")
    r = CliRunner().invoke(cli, ["simulate", str(trace)])
    assert r.exit_code == 2
    assert f"{trace}:2: queues: unknown field" in r.output


HIERARCHY = """
flavors: [{name: default}]
cohorts:
  - name: org
    resourceGroups:
      - coveredResources: [cpu]
        flavors: [{name: default, resources: [{name: cpu, nominalQuota: 4}]}]
  - name: team
    parentName: org
    fairSharing: {weight: 2}
    clusterQueues:
      - name: a
        fairSharing: {weight: 0.5}
        namespaceSelector: {}
        resourceGroups:
          - coveredResources: [cpu]
            flavors: [{name: default, resources: [{name: cpu, nominalQuota: 0}]}]
        workloads: [{class: w, count: 1, request: {cpu: 4}, runtime: 10s}]
"""


def test_trace_cohort_objects_lend_their_quota_down_the_tree() -> None:
    t = parse_trace(HIERARCHY, "tree.yaml")
    assert [(c.name, c.parent, c.fair_weight_milli) for c in t.cohorts] == [
        ("org", None, 1000), ("team", "org", 2000)]
    assert t.cluster_queues[0].fair_weight_milli == 500
    sim = Simulator(t).run()
    # a's 4 CPUs come from org's own pool, two levels up: admitted at once.
    assert sim.admits == 1 and sim.end_us == 10 * 1_000_000


def test_trace_cohort_limits_need_a_parent() -> None:
    bad = HIERARCHY.replace("nominalQuota: 4}", "nominalQuota: 4, borrowingLimit: 1}")
    with pytest.raises(TraceError, match=r"borrowingLimit: must be nil when "
                                         r"parentName is empty \(Cohort org\)"):
        parse_trace(bad, "tree.yaml")


def test_fair_allocation_is_weighted_max_min() -> None:
    from app.sim.fairness import fair_allocation

    w = {"a": 1000, "b": 1000, "c": 2000}
    assert fair_allocation(16, {"a": 40, "b": 40, "c": 40}, w) == {"a": 4, "b": 4, "c": 8}
    # a wants only 2: the rest is split 1:2 between b and c.
    got = fair_allocation(16, {"a": 2, "b": 40, "c": 40}, w)
    assert got["a"] == 2 and abs(got["b"] - 14 / 3) < 1e-9 and abs(got["c"] - 28 / 3) < 1e-9
    # weight 0 gets only what nobody else wants
    assert fair_allocation(4, {"a": 3, "z": 5}, {"a": 1000, "z": 0}) == {"a": 3, "z": 1}


def test_fair_teams_scenario_meets_its_fair_shares_with_fair_sharing_only() -> None:
    from app.core.scheduling_cycle import Scheduler
    from app.core.spec import FairSharing
    from app.core.types import ResourceName
    from app.sim.fairness import FairnessProbe

    def shares(fair: bool) -> dict:
        t = load_trace(Path(__file__).parents[2] / "bench" / "scenarios" / "fair-teams.yaml")
        probe = FairnessProbe([q.name for q in t.cluster_queues],
                              {q.name: q.fair_weight_milli for q in t.cluster_queues},
                              16, ResourceName("nvidia.com/gpu"))
        sim = Simulator(t, cluster=Scheduler(FairSharing() if fair else None), on_cycle=probe)
        probe.bind(sim).sim.run()
        return {q: v for q, v in probe.report(sim.end_us).items() if not q.startswith("_")}

    assert all(abs(v["diff_points"]) <= 5 for v in shares(True).values())
    assert any(abs(v["diff_points"]) > 5 for v in shares(False).values())

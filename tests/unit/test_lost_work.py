"""Admitted seconds lost to eviction (issue 33): the pure computation (app.sim.lost_work) and
its replay of a recorded Workload watch (bench/workload_watch.py), Kueue's and pykueue's
condition writes alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.sim.lost_work import ADMITTED, EVICTED, FINISHED, LostWork, lost_work, lost_work_by_class
from tests.unit.bench_scripts import bench_script

ROOT = Path(__file__).resolve().parents[2]


def _watch_module() -> Any:
    return bench_script("workload_watch")


# ---- the pure computation -----------------------------------------------------------------

def test_admitted_evicted_readmitted_evicted_again_finished() -> None:
    log = [(ADMITTED, 10.0), (EVICTED, 14.0), (ADMITTED, 20.0), (EVICTED, 21.5),
           (ADMITTED, 30.0), (FINISHED, 40.0)]
    assert lost_work(log) == LostWork(evictions=2, lost_s=5.5)


def test_never_evicted_loses_nothing() -> None:
    assert lost_work([(ADMITTED, 1.0), (FINISHED, 9.0)]) == LostWork()
    assert lost_work([]) == LostWork()


def test_eviction_at_the_admission_instant_loses_zero_and_is_not_clamped() -> None:
    assert lost_work([(ADMITTED, 5.0), (EVICTED, 5.0)]) == LostWork(evictions=1)


def test_eviction_timed_before_its_admission_is_clamped_to_zero() -> None:
    # two clocks (lastTransitionTime) or out-of-order arrivals: never a negative amount
    assert lost_work([(ADMITTED, 5.2), (EVICTED, 5.0), (ADMITTED, 6.0), (EVICTED, 7.0)]) == \
        LostWork(evictions=2, lost_s=1.0, clamped=1)


def test_eviction_without_an_open_admission_counts_but_adds_nothing() -> None:
    # a watch that missed the admission; a second Evicted without a re-admission between
    assert lost_work([(EVICTED, 3.0)]) == LostWork(evictions=1, unmatched=1)
    assert lost_work([(ADMITTED, 1.0), (EVICTED, 3.0), (EVICTED, 4.0)]) == \
        LostWork(evictions=2, lost_s=2.0, unmatched=1)


def test_eviction_of_a_finished_workload_throws_nothing_away() -> None:
    # the controller's cache had not seen Finished yet (Kueue v0.17.1 and pykueue both do it)
    assert lost_work([(ADMITTED, 1.0), (FINISHED, 2.0), (EVICTED, 3.0)]) == \
        LostWork(evictions=1, after_finish=1)


def test_the_latest_admission_counts() -> None:
    assert lost_work([(ADMITTED, 1.0), (ADMITTED, 4.0), (EVICTED, 6.0)]) == \
        LostWork(evictions=1, lost_s=2.0)


def test_unknown_kind_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown event kind 'preempted'"):
        lost_work([("preempted", 1.0)])


def test_by_class_and_total() -> None:
    logs = {"a": [(ADMITTED, 0.0), (EVICTED, 2.0)], "b": [(ADMITTED, 0.0), (EVICTED, 3.0)],
            "c": [(ADMITTED, 1.0), (FINISHED, 2.0)], "d": [(EVICTED, 1.0)]}
    got = lost_work_by_class(logs, {"a": "small", "b": "small", "c": "large"})
    assert list(got) == ["?", "large", "small", "total"]
    assert got["small"] == LostWork(2, 5.0)
    assert got["large"] == LostWork()
    assert got["?"] == LostWork(1, 0.0, unmatched=1)
    assert got["total"].as_dict() == {"evictions": 3, "lost_s": 5.0, "unmatched": 1,
                                      "clamped": 0, "after_finish": 0}


# ---- the watch replay ---------------------------------------------------------------------

def _wl(uid: str, ns: str, conds: dict[str, tuple[str, str]], cls: str = "small",
        cpu: str = "1", admission: bool = False) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "name": uid, "namespace": ns,
                         "labels": {"kueue.x-k8s.io/performance-scheduler-class": cls}},
            "spec": {"podSets": [{"count": 1, "template": {"spec": {"containers": [
                {"resources": {"requests": {"cpu": cpu}}}]}}}]},
            "status": {"admission": {"clusterQueue": ns} if admission else None,
                       "conditions": [{"type": k, "status": s, "lastTransitionTime": t}
                                      for k, (s, t) in conds.items()]}}


def _write(path: Path, events: list[tuple[float, str, dict[str, Any]]]) -> Path:
    with path.open("w") as f:
        for t, kind, obj in events:
            f.write(f"{t:.3f} " + json.dumps({"type": kind, "object": obj}) + "\n")
        f.write('{"type":"ERROR","object":{}}\n')  # a watch error line is skipped
    return path


T0 = "2026-12-04T10:00:00Z"
CQ = "cq-0-0-cohort-0"


def _kueue_like(uid: str) -> list[tuple[float, str, dict[str, Any]]]:
    """Kueue v0.17.1: admitted; Evicted=True; the runner clears the admission; re-admitted
    with Evicted=False (SetQuotaReservation); evicted again; re-admitted; finished."""
    def at(s: int) -> str:
        return f"2026-12-04T10:00:{s:02d}Z"
    return [
        (100.0, "ADDED", _wl(uid, CQ, {})),
        (101.0, "MODIFIED", _wl(uid, CQ, {"QuotaReserved": ("True", at(1))}, admission=True)),
        (104.5, "MODIFIED", _wl(uid, CQ, {"QuotaReserved": ("True", at(1)),
                                         "Evicted": ("True", at(4))}, admission=True)),
        (104.7, "MODIFIED", _wl(uid, CQ, {"QuotaReserved": ("False", at(4)),
                                         "Evicted": ("True", at(4))})),
        (110.0, "MODIFIED", _wl(uid, CQ, {"QuotaReserved": ("True", at(10)),
                                         "Evicted": ("False", at(10))}, admission=True)),
        (110.25, "MODIFIED", _wl(uid, CQ, {"QuotaReserved": ("True", at(10)),
                                          "Evicted": ("True", at(10))}, admission=True)),
        (110.5, "MODIFIED", _wl(uid, CQ, {"QuotaReserved": ("False", at(10)),
                                         "Evicted": ("True", at(10))})),
        (120.0, "MODIFIED", _wl(uid, CQ, {"QuotaReserved": ("True", at(20)),
                                         "Evicted": ("False", at(20))}, admission=True)),
        (121.0, "MODIFIED", _wl(uid, CQ, {"QuotaReserved": ("True", at(20)),
                                         "Evicted": ("False", at(20)),
                                         "Finished": ("True", at(21))}, admission=True)),
        (130.0, "DELETED", _wl(uid, CQ, {"QuotaReserved": ("True", at(20)),
                                        "Finished": ("True", at(21))}, admission=True)),
    ]


def test_replay_of_a_kueue_like_watch(tmp_path: Path) -> None:
    ww = _watch_module()
    got = ww.analyse(_write(tmp_path / "w.jsonl", _kueue_like("u1")))
    # arrival times: 104.5 - 101 + 110.25 - 110 = 3.75 s; by lastTransitionTime 3 + 0 s
    assert got["lost"]["small"] == {"evictions": 2, "lost_s": 3.75, "unmatched": 0,
                                    "clamped": 0, "after_finish": 0}
    assert got["lost_ltt"]["total"]["lost_s"] == 3.0
    assert got["admissions"] == 3
    assert got["time_to_admission_s"]["small"]["max"] == 20.0  # first seen 100, latest 120
    assert got["workloads"] == 1
    # the first 5 s of the watch: only the first eviction
    early = ww.analyse(tmp_path / "w.jsonl", until_s=5.0)
    assert early["lost"]["total"]["evictions"] == 1 and early["lost"]["total"]["lost_s"] == 3.5


def test_replay_when_evicted_stays_true_across_a_readmission(tmp_path: Path) -> None:
    """A controller that leaves Evicted=True while re-admitting: the second eviction is a new
    lastTransitionTime of the same True condition, and still counts."""
    ww = _watch_module()
    ev = [(0.0, "ADDED", _wl("u", CQ, {}, cls="large")),
          (1.0, "MODIFIED", _wl("u", CQ, {"QuotaReserved": ("True", "2026-12-04T10:00:01Z")},
                                cls="large")),
          (3.0, "MODIFIED", _wl("u", CQ, {"QuotaReserved": ("True", "2026-12-04T10:00:01Z"),
                                          "Evicted": ("True", "2026-12-04T10:00:03Z")},
                                cls="large")),
          (5.0, "MODIFIED", _wl("u", CQ, {"QuotaReserved": ("True", "2026-12-04T10:00:05Z"),
                                          "Evicted": ("True", "2026-12-04T10:00:03Z")},
                                cls="large")),
          (9.0, "MODIFIED", _wl("u", CQ, {"QuotaReserved": ("True", "2026-12-04T10:00:05Z"),
                                          "Evicted": ("True", "2026-12-04T10:00:09Z")},
                                cls="large"))]
    got = ww.analyse(_write(tmp_path / "w.jsonl", ev))
    assert got["lost"]["large"]["evictions"] == 2
    assert got["lost"]["large"]["lost_s"] == 6.0  # 3 - 1 + 9 - 5


def test_idle_quota_while_a_fitting_workload_pends(tmp_path: Path) -> None:
    """One ClusterQueue of 2 CPUs: w1 (1 CPU) admitted at 1 while w2 (1 CPU) pends until 5:
    1 CPU idle for 4 s with a Workload that fits pending, of 2 x 5 CPU-seconds nominal."""
    ww = _watch_module()
    gen = tmp_path / "g.yaml"
    gen.write_text("cohorts:\n- className: cohort\n  count: 1\n  queuesSets:\n"
                   "  - className: cq\n    count: 1\n    nominalQuota: 2\n"
                   "    borrowingLimit: 0\n")
    quotas = ww.generator_quotas(gen)
    assert quotas == {CQ: ("cohort-0", 2000, 0)}
    qr = {"QuotaReserved": ("True", T0)}
    ev = [(0.0, "ADDED", _wl("w1", CQ, {})), (0.0, "ADDED", _wl("w2", CQ, {})),
          (1.0, "MODIFIED", _wl("w1", CQ, qr)), (5.0, "MODIFIED", _wl("w2", CQ, qr)),
          (6.0, "MODIFIED", _wl("w1", CQ, {**qr, "Finished": ("True", T0)})),
          (6.0, "MODIFIED", _wl("w2", CQ, {**qr, "Finished": ("True", T0)}))]
    got = ww.analyse(_write(tmp_path / "w.jsonl", ev), quotas)
    c = got["cohorts"]["cohort-0"]
    assert c["pending_s"] == 5.0 and c["peak_pending"] == 2
    assert c["admissions_while_pending"] == 2 and c["admissions_per_min_while_pending"] == 24.0
    assert c["idle_cpu_s_while_fit_pending"] == 6.0  # 2 CPU for 1 s, then 1 CPU for 4 s
    assert got["idle_pct_while_pending"] == 60.0  # 6 of 10 CPU-seconds
    assert got["usage_pct_while_pending"] == 40.0
    assert got["admissions"] == 2 and got["admissions_per_min"] == 24.0  # 2 in 5 s


def test_readmission_latency_counts_only_finishes_with_one_pending(tmp_path: Path) -> None:
    """w1 finishes at 3.0 while w2 pends in its ClusterQueue: w2's admission at 3.05 is 50 ms
    later. w2's own finish at 4.0, with nothing pending, and w3's admission in another
    ClusterQueue are not counted."""
    ww = _watch_module()
    other = "cq-0-1-cohort-0"
    qr = {"QuotaReserved": ("True", T0)}
    done = {**qr, "Finished": ("True", T0)}
    ev = [(0.0, "ADDED", _wl("w1", CQ, {})), (0.0, "ADDED", _wl("w2", CQ, {})),
          (0.5, "ADDED", _wl("w3", other, {})),
          (1.0, "MODIFIED", _wl("w1", CQ, qr)), (3.0, "MODIFIED", _wl("w1", CQ, done)),
          (3.01, "MODIFIED", _wl("w3", other, qr)), (3.05, "MODIFIED", _wl("w2", CQ, qr)),
          (4.0, "MODIFIED", _wl("w2", CQ, done)), (5.0, "MODIFIED", _wl("w3", other, done))]
    got = ww.analyse(_write(tmp_path / "w.jsonl", ev))
    assert got["readmission_ms"] == {"count": 1, "p50": 50.0, "p90": 50.0, "mean": 50.0}


def test_deep_config_scales_and_its_quotas_are_read() -> None:
    """bench/scenarios/versus-deep.yaml: 3 ClusterQueues of 10 CPUs, 401 Workloads each;
    bench/deep.py scales it to --per-cq / --cqs."""
    import yaml

    ww = _watch_module()
    deep = ROOT / "bench" / "scenarios" / "versus-deep.yaml"
    assert ww.generator_quotas(deep) == {f"cq-0-{i}-cohort-0": ("cohort-0", 10_000, 0)
                                         for i in range(3)}
    cfg = bench_script("deep").scaled(yaml.safe_load(deep.read_text()), 100, 2)
    qs = cfg["cohorts"][0]["queuesSets"][0]
    assert qs["count"] == 2
    # the blocker stays one; 7 x 50 small and 50 medium of 401 -> 12 each
    assert [ws["count"] for ws in qs["workloadsSets"]] == [1] + [12] * 8

"""bench/versus.py: the floors on a run's wall (issue 33 item 3): the API server's, etcd's and
the runner's CPU, the runner's generation time, and the controller's admissions at its client
QPS."""

from __future__ import annotations

from tests.unit.bench_scripts import bench_script


def run(name: str, wall: float, others: float, generation: float, admissions: int) -> dict:
    return {"run": name, "wall_s": wall, "generation_s": generation,
            "machine": {"others_bound_s": others}, "watch": {"admissions": admissions}}


def test_the_write_budget_bounds_a_shipped_baseline_run() -> None:
    # The numbers of the 2026-12-05 19:59 baseline run (pykueue, client QPS 50).
    b = bench_script("versus").bounds_of(run("pykueue", 342.0, 181.3, 66.1, 15001))
    assert b["write_bound_s"] == 300.0  # 15,001 admissions at 50 a second
    assert b["client_qps"] == 50
    assert (b["bound_by"], b["bound_s"]) == ("write_bound_s", 300.0)
    assert b["wall_over_bound"] == 1.14


def test_at_qps_1000_the_machine_or_the_runner_bounds_the_wall() -> None:
    versus = bench_script("versus")
    b = versus.bounds_of(run("pykueue-qps1000", 335.0, 245.6, 70.0, 15100))
    assert b["write_bound_s"] == 15.1 and b["client_qps"] == 1000
    assert (b["bound_by"], b["wall_over_bound"]) == ("others_bound_s", 1.36)
    # The large generator at runner QPS 50: the runner's creates (999.3 s) and the
    # controller's admissions at its QPS 50 (50,060 / 50) are the same floor.
    b = versus.bounds_of(run("kueue-noleader", 1304.0, 895.8, 999.3, 50060))
    assert b["write_bound_s"] == 1001.2 and b["generation_s"] == 999.3
    assert b["bound_by"] == "write_bound_s" and b["wall_over_bound"] == 1.30


def test_a_run_without_figures_has_no_bounds() -> None:
    versus = bench_script("versus")
    assert versus.bounds_of({"run": "pykueue", "error": "runner failed"}) == {}
    b = versus.bounds_of({"run": "kueue", "wall_s": 400.0, "generation_s": 100.0})
    assert b == {"generation_s": 100.0, "client_qps": 50, "bound_s": 100.0,
                 "bound_by": "generation_s", "wall_over_bound": 4.0}

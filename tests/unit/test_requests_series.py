"""bench/requests_series.py: write requests a second per interval from bench/versus.py's
``--requests-every`` counts (issue 33's write-budget analysis)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.unit.bench_scripts import bench_script


def test_rates_per_interval_top_writes_and_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    lines = [
        {"t": 30.0, "requests": {"PUT workloads/status": 1200, "POST events": 30,
                                 "GET pods": 900, "PATCH clusterqueues/status": 6}},
        {"t": 60.0, "requests": {"PUT workloads/status": 2700, "POST events": 60,
                                 "GET pods": 1800, "PATCH clusterqueues/status": 36}},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    cols, rows = bench_script("requests_series").series(path, top=2)
    # reads (GET) are left out; the two biggest writes by the last count, then the rest
    assert cols == ["PUT workloads/status", "POST events", "other writes"]
    assert rows == [(30.0, [40.0, 1.0, 0.2]), (60.0, [50.0, 1.0, 1.0])]

#!/usr/bin/env python3
"""Admission Fair Sharing on bench/scenarios/afs-teams.yaml (one ClusterQueue of 8 GPUs,
team A floods it, team B sends a steady trickle, team C of LocalQueue weight 2 a burst).

    .venv/bin/python bench/admission_fair_sharing.py

Prints one JSON document, for the trace as written (``with_afs``: the ClusterQueue's
``admissionScope: UsageBasedAdmissionFairSharing`` with the trace's ``admissionFairSharing``,
half-life 30 minutes) and for the same trace without the configuration (``without_afs``:
first come, first served, as Kueue does when ``admissionFairSharing`` is not configured):

- ``shares``: per LocalQueue, its share (percent) of the GPU-time admitted in the contended
  window (from C's first arrival to B's last arrival, while every team has work queued);
- ``wait_s``: per LocalQueue, average and p95 seconds from creation to admission;
- ``cpu_s``: CPU of the simulation;

and ``baseline_cpu_s`` / ``baseline_decision_hash``: Kueue's baseline scenario
(bench/simulate.py), whose decisions must not change.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.sim import Simulator, load_trace  # noqa: E402
from app.sim.trace import US  # noqa: E402

SCENARIO = ROOT / "bench" / "scenarios" / "afs-teams.yaml"
WINDOW_US = (60 * 60 * US, (10 * 60 + 35 * 5 * 60) * US)  # C's first .. B's last arrival


def _p95(values: list[float]) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(0.95 * len(s)))] if s else 0.0


def run(afs: bool) -> dict:
    trace = load_trace(SCENARIO)
    if not afs:
        trace = replace(trace, admission_fair_sharing=None)
    sim = Simulator(trace).run()
    lo, hi = WINDOW_US
    gpu_us: dict[str, float] = {}
    waits: dict[str, list[float]] = {}
    for key, r in sim.runs.items():
        lq = key.split("/", 1)[0]
        if r.last_admitted_us is None:
            continue
        waits.setdefault(lq, []).append((r.last_admitted_us - r.created_us) / US)
        end = r.finished_us if r.finished_us is not None else sim.end_us
        gpu_us[lq] = gpu_us.get(lq, 0.0) + max(0, min(end, hi) - max(r.last_admitted_us, lo))
    total = sum(gpu_us.values()) or 1.0
    return {
        "shares": {lq: round(100 * v / total, 1) for lq, v in sorted(gpu_us.items())},
        "wait_s": {lq: {"avg": round(sum(w) / len(w), 1), "p95": round(_p95(w), 1)}
                   for lq, w in sorted(waits.items())},
        "makespan_s": sim.end_us / US,
        "cpu_s": round(sim.cpu_seconds, 3),
    }


def main() -> None:
    with_afs, without = run(True), run(False)
    sys.path.insert(0, str(ROOT / "bench"))
    import simulate  # bench/simulate.py

    base = simulate.run("baseline", 2.0)
    print(json.dumps({
        "window_s": [WINDOW_US[0] / US, WINDOW_US[1] / US],
        "with_afs": with_afs,
        "without_afs": without,
        "baseline_cpu_s": base["cpu_s"],
        "baseline_decision_hash": base["decision_hash"],
    }, indent=2))


if __name__ == "__main__":
    main()

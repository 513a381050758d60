#!/usr/bin/env python3
"""Fair sharing on bench/scenarios/fair-teams.yaml (3 teams, weights 1, 1, 2, bursty demand).

    .venv/bin/python bench/fair_sharing.py

Prints one JSON document:

- ``shares``: per team, the time-averaged share of the cohort's 16 GPUs against its fair
  share (weighted max-min over the teams with demand at each instant, ``app.sim.fairness``),
  over the contended time (the teams together want more than 16 GPUs) and over the whole run;
  target: within 5 points;
- ``preemptions_per_hour``: victims per simulated hour with fair sharing, without and with a
  minimum runtime of 5 and 14 minutes (``pykueue.dev/min-runtime-before-preemption`` on every
  queue; the jobs run 15 minutes, and most victims are older than 5 minutes when a burst
  arrives);
- ``classic``: the same trace without fair sharing (first come, first served borrowing);
- ``baseline_cpu_s``: CPU of Kueue's baseline scenario with fair sharing off (bench/simulate.py).
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.core.scheduling_cycle import Scheduler  # noqa: E402
from app.core.spec import FairSharing  # noqa: E402
from app.core.types import ResourceName  # noqa: E402
from app.sim import Simulator, load_trace  # noqa: E402
from app.sim.fairness import FairnessProbe  # noqa: E402
from app.sim.trace import US  # noqa: E402

SCENARIO = ROOT / "bench" / "scenarios" / "fair-teams.yaml"
GPU = ResourceName("nvidia.com/gpu")
CAPACITY = 16


def run(fair: bool, min_runtime_s: float | None = None) -> dict:
    trace = load_trace(SCENARIO)
    if min_runtime_s is not None:
        trace.cluster_queues = [replace(q, min_runtime_s=min_runtime_s)
                                for q in trace.cluster_queues]
    queues = [q.name for q in trace.cluster_queues]
    weights = {q.name: q.fair_weight_milli for q in trace.cluster_queues}
    probe = FairnessProbe(queues, weights, CAPACITY, GPU)
    sim = Simulator(trace, cluster=Scheduler(FairSharing() if fair else None), on_cycle=probe)
    probe.bind(sim)
    sim.run()
    hours = sim.end_us / US / 3600
    return {
        "shares": probe.report(sim.end_us),
        "victims": sim.victims,
        "preemptions_per_hour": round(sim.victims / hours, 1) if hours else 0.0,
        "makespan_s": sim.end_us / US,
        "cpu_s": round(sim.cpu_seconds, 2),
    }


def main() -> None:
    fair = run(True)
    fair_min = run(True, 300.0)
    fair_min14 = run(True, 840.0)
    classic = run(False)
    sys.path.insert(0, str(ROOT / "bench"))
    import simulate  # bench/simulate.py

    base = simulate.run("baseline", 2.0)
    teams = {k: v for k, v in fair["shares"].items() if not k.startswith("_")}
    out = {
        "shares": fair["shares"],
        "within_5_points": all(abs(v["diff_points"]) <= 5 for v in teams.values()),
        "preemptions_per_hour": {
            "fair_sharing": fair["preemptions_per_hour"],
            "fair_sharing_min_runtime_5m": fair_min["preemptions_per_hour"],
            "fair_sharing_min_runtime_14m": fair_min14["preemptions_per_hour"],
        },
        "shares_min_runtime_5m": fair_min["shares"],
        "shares_min_runtime_14m": fair_min14["shares"],
        "classic": {"shares": classic["shares"],
                    "preemptions_per_hour": classic["preemptions_per_hour"]},
        "cpu_s": {"fair": fair["cpu_s"], "fair_min_runtime": fair_min["cpu_s"],
                  "classic": classic["cpu_s"]},
        "baseline_cpu_s": base["cpu_s"],
        "baseline_decision_hash": base["decision_hash"],
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

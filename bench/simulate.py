#!/usr/bin/env python3
"""Kueue's scheduler performance scenarios through pykueue's core, with a virtual clock.

    .venv/bin/python bench/simulate.py                      # baseline, then large
    .venv/bin/python bench/simulate.py --scenario baseline  # one of them
    .venv/bin/python bench/simulate.py --budget 2           # stop each after 2x its CPU target

Runs ``pykueue simulate`` in-process (``app.sim``) on bench/scenarios/<name>.yaml and prints
one JSON document: per scenario ``cpu_s`` (CPU seconds of the simulation), ``makespan_s``
(virtual time until the last Workload finished) against ``capacity_bound_s`` (66 s for the
baseline) and its ratio, ``classes`` (average, p50, p95 time to admission per workload class,
evictions, admitted seconds lost to them), ``lost_to_eviction`` (per class and total:
evictions and Σ latest admission -> eviction in virtual seconds, app.sim.lost_work),
``usage_pct`` (Kueue's ClusterQueue-class usage), decision counts and
``decision_hash`` (sha256 of every decision's time and repr, in order: equal hashes mean
identical decisions), and whether
the issue's targets are met:

- baseline: <= 10 s CPU and makespan <= 1.25 x 66 s;
- large (1,000 ClusterQueues, 50,000 Workloads): <= 120 s CPU.

A scenario still running after ``--budget`` x its CPU target is stopped (``completed``:
false, with the virtual time reached), so the script always ends. Kueue's recorded results
for the same scenarios are included for comparison (``kueue``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app import gc_policy  # noqa: E402
from app.sim import Simulator, load_trace, summarize  # noqa: E402
from app.sim.trace import US  # noqa: E402

TARGETS = {
    "baseline": {"cpu_s": 10.0, "makespan_ratio": 1.25},
    "large": {"cpu_s": 120.0},
}
KUEUE = {  # Kueue's recorded results (test/performance/scheduler)
    "baseline": {"wall_s": 351, "avg_time_to_admission_s": {"small": 215, "medium": 77,
                                                             "large": 16.5},
                 "usage_pct": 56},
    # Kueue's large-scale CI means (configs/large-scale/rangespec.yaml, kueue bf42a83f09)
    "large": {"wall_s": 1179, "avg_time_to_admission_s": {"small": 700, "medium": 256,
                                                          "large": 106},
              "usage_pct": 38.6},
}


class _Budget(Exception):
    pass


def run(name: str, budget: float, requeue_batch_s: float = 0.0) -> dict:
    gc_policy.apply()  # the collector as `pykueue serve` sets it
    trace = load_trace(ROOT / "bench" / "scenarios" / f"{name}.yaml")
    limit = TARGETS[name]["cpu_s"] * budget
    start = time.process_time()

    digest = hashlib.sha256()

    def guard(t: int, decisions: list) -> None:
        # Every decision, in order, with its virtual time: a change of any admission,
        # victim, reason or message changes the hash (the "decisions identical" check).
        for d in decisions:
            digest.update(f"{t} {d!r}\n".encode())
        if time.process_time() - start > limit:
            raise _Budget

    sim = Simulator(trace, on_cycle=guard, requeue_batch_s=requeue_batch_s)
    completed = True
    try:
        sim.run()
    except _Budget:
        completed = False
        sim.cpu_seconds = time.process_time() - start
    f = summarize(sim)
    bound = f["capacity_bound_s"]
    out = {
        "completed": completed,
        "cpu_s": f["cpu_s"],
        "virtual_time_reached_s": sim.end_us / US,
        "makespan_s": f["makespan_s"] if completed else None,
        "capacity_bound_s": bound,
        "makespan_over_bound": round(f["makespan_s"] / bound, 3) if completed and bound else None,
        "workloads": trace.workload_count(),
        "arrived": f["workloads"],
        "finished": sum(c["finished"] for c in f["classes"].values()),
        "cluster_queues": f["cluster_queue_count"],
        "cycles": f["cycles"],
        "decisions": f["decisions"],
        "decision_hash": digest.hexdigest(),
        "classes": {k: {"avg_time_to_admission_s": c["avg_time_to_admission_s"],
                        "p50_time_to_admission_s": c["p50_time_to_admission_s"],
                        "p95_time_to_admission_s": c["p95_time_to_admission_s"],
                        "avg_time_to_first_admission_s": c["avg_time_to_first_admission_s"],
                        "evictions": c["evictions"],
                        "lost_s": (f["lost_to_eviction"].get(k) or {}).get("lost_s")}
                    for k, c in f["classes"].items()},
        "lost_to_eviction": f["lost_to_eviction"],
        "usage_pct": f["usage_pct"],
        "kueue": KUEUE.get(name),
    }
    t = TARGETS[name]
    met = {"cpu": completed and f["cpu_s"] <= t["cpu_s"]}
    if "makespan_ratio" in t:
        met["makespan"] = completed and f["makespan_s"] <= t["makespan_ratio"] * bound
    out["targets"] = {**t, "met": met}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", choices=sorted(TARGETS), action="append",
                    help="run only this one (repeatable); default: all")
    ap.add_argument("--budget", type=float, default=2.0,
                    help="stop a scenario after this many times its CPU target")
    ap.add_argument("--requeue-batch-seconds", type=float, default=0.0,
                    help="the core's requeue batch (Settings.scheduling.requeue_batch_seconds; "
                         "1 = Kueue v0.17.1's requeueBatchPeriod); default 0 as shipped")
    args = ap.parse_args()
    names = args.scenario or ["baseline", "large"]
    print(json.dumps({name: run(name, args.budget, args.requeue_batch_seconds)
                      for name in names}, indent=2))


if __name__ == "__main__":
    main()

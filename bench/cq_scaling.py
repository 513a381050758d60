#!/usr/bin/env python3
"""Per-admission CPU cost of the admission core as the number of ClusterQueues grows.

    .venv/bin/python bench/cq_scaling.py                       # 30, 300, 1000, 3000 ClusterQueues
    .venv/bin/python bench/cq_scaling.py --queues 30 --queues 300 --cohort-size 10

Each row is one simulator run (``app.sim``, virtual clock, zero API latency) of the shape of
Kueue's scheduler performance scenario: ClusterQueues in cohorts of ``--cohort-size``, each with
the baseline's quota and policies (nominalQuota 20 cpu, borrowingLimit 100, reclaimWithinCohort
Any, withinClusterQueue LowerPriority) and the same Workloads per ClusterQueue: by default
Kueue's large-scale generator's 35 small, 11 medium, 4 large with its requests (1, 5, 20 cpu),
runtimes (150, 350, 700 ms), intervals (60, 300, 700 ms) and priorities (bench/scenarios/
large.yaml). Demand is several times the nominal quota, so Workloads queue, borrow and preempt.
Only the number of ClusterQueues changes, so the per-admission cost should stay flat.

Prints one JSON document: per row the ClusterQueue count, Workloads, admissions, cycles, CPU
seconds (process time of the simulation), CPU microseconds per admission and per cycle, and
``per_admission_vs_smallest`` (this row's per-admission cost over the first row's). The goal
is ``per_admission_vs_smallest`` <= 1.5 at 3,000 ClusterQueues.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app import gc_policy  # noqa: E402
from app.sim import Simulator, parse_trace, summarize  # noqa: E402

GOAL_RATIO = 1.5
# Kueue's large-scale generator: creation interval (i) and runtime (r) per class, milliseconds.
TIMES_MS = {"si": 60, "sr": 150, "mi": 300, "mr": 350, "li": 700, "lr": 700}

TEMPLATE = """\
name: cq-scaling-{queues}
evictionDelay: 0s
flavors:
  - name: default
cohorts:
  - name: cohort
    count: {cohorts}
    clusterQueues:
      - name: cq
        count: {cohort_size}
        preemption:
          reclaimWithinCohort: Any
          withinClusterQueue: LowerPriority
        namespaceSelector: {{}}
        resourceGroups:
          - coveredResources: [cpu]
            flavors:
              - name: default
                resources:
                  - name: cpu
                    nominalQuota: 20
                    borrowingLimit: 100
        workloads:
          - {{class: small, count: {small}, interval: {si}ms, request: {{cpu: 1}},
             runtime: {sr}ms, priority: 50}}
          - {{class: medium, count: {medium}, interval: {mi}ms, request: {{cpu: 5}},
             runtime: {mr}ms, priority: 100}}
          - {{class: large, count: {large}, interval: {li}ms, request: {{cpu: 20}},
             runtime: {lr}ms, priority: 200}}
"""


def run(queues: int, cohort_size: int, mix: tuple[int, int, int]) -> dict:
    """One simulator run with ``queues`` ClusterQueues (a multiple of ``cohort_size``)."""
    if queues % cohort_size:
        raise SystemExit(f"--queues {queues} is not a multiple of --cohort-size {cohort_size}")
    small, medium, large = mix
    trace = parse_trace(TEMPLATE.format(queues=queues, cohorts=queues // cohort_size,
                                        cohort_size=cohort_size, small=small, medium=medium,
                                        large=large, **TIMES_MS), source=f"cq-scaling-{queues}")
    start = time.process_time()
    sim = Simulator(trace)
    sim.run()
    cpu = time.process_time() - start
    f = summarize(sim)
    admits = f["decisions"]["admit"]
    return {
        "cluster_queues": queues,
        "workloads": trace.workload_count(),
        "admissions": admits,
        "cycles": f["cycles"],
        "cpu_s": round(cpu, 3),
        "cpu_us_per_admission": round(cpu / admits * 1e6, 1) if admits else None,
        "cpu_us_per_cycle": round(cpu / f["cycles"] * 1e6, 1) if f["cycles"] else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queues", type=int, action="append",
                    help="ClusterQueue count of one row (repeatable); default 30 300 1000 3000")
    ap.add_argument("--cohort-size", type=int, default=10, help="ClusterQueues per cohort")
    ap.add_argument("--mix", type=int, nargs=3, default=(35, 11, 4),
                    metavar=("SMALL", "MEDIUM", "LARGE"),
                    help="Workloads per ClusterQueue of each class")
    ap.add_argument("--default-gc", action="store_true",
                    help="keep CPython's collector thresholds instead of pykueue's "
                         "(app.gc_policy, as `pykueue serve` sets them)")
    args = ap.parse_args()
    if not args.default_gc:
        gc_policy.apply()
    queues = args.queues or [30, 300, 1000, 3000]
    rows = [run(q, args.cohort_size, tuple(args.mix)) for q in queues]
    first = rows[0]["cpu_us_per_admission"]
    for r in rows:
        r["per_admission_vs_smallest"] = (round(r["cpu_us_per_admission"] / first, 2)
                                          if first and r["cpu_us_per_admission"] else None)
    worst = max((r["per_admission_vs_smallest"] or 0) for r in rows)
    print(json.dumps({"cohort_size": args.cohort_size, "mix": list(args.mix),
                      "gc_thresholds": list(gc.get_threshold()), "rows": rows,
                      "goal_ratio": GOAL_RATIO, "goal_met": worst <= GOAL_RATIO}, indent=2))


if __name__ == "__main__":
    main()

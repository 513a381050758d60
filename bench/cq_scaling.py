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

``--idle N`` adds N ClusterQueues with the same quota and no Workloads, each in a cohort of its
own (``idle-0`` ..), to every row: a cluster where most ClusterQueues have nothing queued.
The Workloads and decisions are those of the row without them; what they cost shows in
``cpu_us_per_admission_after_configure`` (the run without the one-time configuration of the
core, whose cost grows with the ClusterQueues configured). ``--hash`` adds each row's
``decision_hash`` (sha256 of every decision's time and repr, in order, as
``bench/simulate.py``'s; the hashing adds to the CPU time).

Prints one JSON document: per row the ClusterQueue count, idle ClusterQueues, Workloads,
admissions, cycles, CPU seconds (process time of the simulation, configuration included),
CPU microseconds per admission and per cycle, the configuration's CPU seconds and the CPU
microseconds per admission without it, and
``per_admission_vs_smallest`` (this row's per-admission cost over the first row's). The goal
is ``per_admission_vs_smallest`` <= 1.5 at 3,000 ClusterQueues.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
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

# Every ClusterQueue's policies and quota (the baseline's), under its ``- name:`` line.
QUEUE = """\
        preemption:
          reclaimWithinCohort: Any
          withinClusterQueue: LowerPriority
        namespaceSelector: {}
        resourceGroups:
          - coveredResources: [cpu]
            flavors:
              - name: default
                resources:
                  - name: cpu
                    nominalQuota: 20
                    borrowingLimit: 100
"""

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
{queue}\
        workloads:
          - {{class: small, count: {small}, interval: {si}ms, request: {{cpu: 1}},
             runtime: {sr}ms, priority: 50}}
          - {{class: medium, count: {medium}, interval: {mi}ms, request: {{cpu: 5}},
             runtime: {mr}ms, priority: 100}}
          - {{class: large, count: {large}, interval: {li}ms, request: {{cpu: 20}},
             runtime: {lr}ms, priority: 200}}
"""

IDLE_TEMPLATE = """\
  - name: idle
    count: {idle}
    clusterQueues:
      - name: idle
{queue}\
"""


def trace_text(queues: int, cohort_size: int, mix: tuple[int, int, int], idle: int = 0) -> str:
    """The trace of one row: ``queues`` busy ClusterQueues (a multiple of ``cohort_size``) in
    cohorts of ``cohort_size``, plus ``idle`` ClusterQueues without Workloads, one per
    cohort."""
    if queues % cohort_size:
        raise SystemExit(f"--queues {queues} is not a multiple of --cohort-size {cohort_size}")
    small, medium, large = mix
    text = TEMPLATE.format(queues=queues, cohorts=queues // cohort_size,
                           cohort_size=cohort_size, small=small, medium=medium, large=large,
                           queue=QUEUE, **TIMES_MS)
    if idle:
        text += IDLE_TEMPLATE.format(idle=idle, queue=QUEUE)
    return text


def run(queues: int, cohort_size: int, mix: tuple[int, int, int], idle: int = 0,
        with_hash: bool = False) -> dict:
    """One simulator run with ``queues`` busy ClusterQueues and ``idle`` idle ones."""
    trace = parse_trace(trace_text(queues, cohort_size, mix, idle),
                        source=f"cq-scaling-{queues}")
    digest = hashlib.sha256()

    def record(t: int, decisions: list) -> None:
        for d in decisions:
            digest.update(f"{t} {d!r}\n".encode())

    start = time.process_time()
    sim = Simulator(trace, on_cycle=record if with_hash else None)
    configure_cpu = 0.0
    configure = sim._configure

    def timed_configure() -> None:
        nonlocal configure_cpu
        t0 = time.process_time()
        configure()
        configure_cpu = time.process_time() - t0

    sim._configure = timed_configure  # type: ignore[method-assign]
    sim.run()
    cpu = time.process_time() - start
    f = summarize(sim)
    admits = f["decisions"]["admit"]
    row = {
        "cluster_queues": queues,
        "idle_cluster_queues": idle,
        "workloads": trace.workload_count(),
        "admissions": admits,
        "cycles": f["cycles"],
        "cpu_s": round(cpu, 3),
        "cpu_us_per_admission": round(cpu / admits * 1e6, 1) if admits else None,
        "cpu_us_per_cycle": round(cpu / f["cycles"] * 1e6, 1) if f["cycles"] else None,
        "configure_cpu_s": round(configure_cpu, 3),
        "cpu_us_per_admission_after_configure": (
            round((cpu - configure_cpu) / admits * 1e6, 1) if admits else None),
    }
    if with_hash:
        row["decision_hash"] = digest.hexdigest()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queues", type=int, action="append",
                    help="ClusterQueue count of one row (repeatable); default 30 300 1000 3000")
    ap.add_argument("--cohort-size", type=int, default=10, help="ClusterQueues per cohort")
    ap.add_argument("--mix", type=int, nargs=3, default=(35, 11, 4),
                    metavar=("SMALL", "MEDIUM", "LARGE"),
                    help="Workloads per ClusterQueue of each class")
    ap.add_argument("--idle", type=int, default=0, metavar="N",
                    help="add N ClusterQueues without Workloads, each in its own cohort, "
                         "to every row")
    ap.add_argument("--hash", action="store_true",
                    help="add each row's decision_hash (every decision in order)")
    ap.add_argument("--default-gc", action="store_true",
                    help="keep CPython's collector thresholds instead of pykueue's "
                         "(app.gc_policy, as `pykueue serve` sets them)")
    args = ap.parse_args()
    if not args.default_gc:
        gc_policy.apply()
    queues = args.queues or [30, 300, 1000, 3000]
    rows = [run(q, args.cohort_size, tuple(args.mix), args.idle, args.hash) for q in queues]
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

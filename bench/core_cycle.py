"""Benchmark: one scheduling cycle of the pure core at scale; prints JSON.

Scenario (shaped after Kueue's performance test): 1,000 ClusterQueues in 100 cohorts of 10,
two flavors in one cpu/memory resource group, 50,000 pending Workloads (50 per queue, mixed
priorities and sizes). Measures: setup, the first cycle (about one admission per queue),
then steady cycles where some admitted Workloads finish before each cycle.

    .venv/bin/python bench/core_cycle.py [--cqs 1000] [--workloads 50000] [--cycles 30]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.core.decisions import Admit, Pending, Preempt  # noqa: E402
from app.core.scheduling_cycle import Scheduler  # noqa: E402
from app.core.spec import (  # noqa: E402
    ClusterQueueSpec,
    FlavorQuotas,
    LabelSelector,
    LocalQueue,
    PreemptionPolicy,
    ReclaimWithinCohort,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    WithinClusterQueue,
)
from app.core.types import ClusterQueueName, CohortName, FlavorName, ResourceName  # noqa: E402
from app.core.workload import PodSet, Workload  # noqa: E402

CPU, MEM = ResourceName("cpu"), ResourceName("memory")
GI = 2**30


def build(n_cqs: int, n_wls: int, seed: int) -> tuple[Scheduler, float]:
    rng = random.Random(seed)
    t0 = time.perf_counter()
    c = Scheduler()
    flavors = (FlavorName("on-demand"), FlavorName("spot"))
    for f in flavors:
        c.add_flavor(ResourceFlavor(f))
    c.set_namespace("bench", {})
    for i in range(n_cqs):
        name = ClusterQueueName(f"cq-{i}")
        group = ResourceGroup(
            (CPU, MEM),
            tuple(
                FlavorQuotas(
                    f,
                    (
                        ResourceQuota(CPU, 20_000, borrowing_limit=10_000),
                        ResourceQuota(MEM, 40 * GI, borrowing_limit=20 * GI),
                    ),
                )
                for f in flavors
            ),
        )
        c.add_cluster_queue(
            ClusterQueueSpec(
                name,
                (group,),
                CohortName(f"cohort-{i // 10}"),
                namespace_selector=LabelSelector(),
                preemption=PreemptionPolicy(
                    WithinClusterQueue.LOWER_PRIORITY, ReclaimWithinCohort.ANY
                ),
            )
        )
        c.add_local_queue(LocalQueue("bench", f"lq-{i}", name))
    for j in range(n_wls):
        cq = j % n_cqs
        pods = rng.choice((1, 1, 2, 4, 8))
        c.add_workload(
            Workload(
                "bench",
                f"wl-{j}",
                f"lq-{cq}",
                (
                    PodSet(
                        "main",
                        pods,
                        {CPU: rng.choice((500, 1000, 2000)), MEM: rng.choice((1, 2)) * GI},
                    ),
                ),
                priority=rng.choice((0, 0, 0, 10, 100)),
                creation=float(j),
                uid=f"u{j}",
            )
        )
    return c, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cqs", type=int, default=1000)
    ap.add_argument("--workloads", type=int, default=50_000)
    ap.add_argument("--cycles", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed + 1)
    c, setup = build(args.cqs, args.workloads, args.seed)
    now = 1_000_000.0
    times, counts = [], {"admit": 0, "preempt": 0, "pending": 0}
    admitted: list = []
    for i in range(args.cycles + 1):
        if i > 0 and admitted:  # a tenth of the running workloads finish between cycles
            rng.shuffle(admitted)
            for key in admitted[: max(1, len(admitted) // 10)]:
                c.finish(key)
            admitted = admitted[max(1, len(admitted) // 10) :]
        t0 = time.perf_counter()
        ds = c.schedule(now + i)
        times.append(time.perf_counter() - t0)
        for d in ds:
            if isinstance(d, Admit):
                counts["admit"] += 1
                admitted.append(d.workload)
            elif isinstance(d, Preempt):
                counts["preempt"] += 1
            elif isinstance(d, Pending):
                counts["pending"] += 1
    steady = sorted(times[1:]) or [0.0]
    print(
        json.dumps(
            {
                "cluster_queues": args.cqs,
                "pending_workloads_at_start": args.workloads,
                "setup_seconds": round(setup, 3),
                "first_cycle_ms": round(times[0] * 1000, 2),
                "steady_cycles": len(times) - 1,
                "steady_cycle_ms_p50": round(statistics.median(steady) * 1000, 2),
                "steady_cycle_ms_p95": round(steady[int(0.95 * (len(steady) - 1))] * 1000, 2),
                "steady_cycle_ms_max": round(steady[-1] * 1000, 2),
                "decisions": counts,
                "per_head_us_first_cycle": round(times[0] / args.cqs * 1e6, 1),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()

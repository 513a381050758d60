#!/usr/bin/env python3
"""Microbenchmark of scheduler step 1 (``Scheduler._apply_requeues``): a cohort of
BestEffortFIFO ClusterQueues, each full and with a backlog of parked Workloads in a few
nomination classes, requeued again and again (issue 16: its cost per requeue should follow
what changed, not the backlog). Prints JSON.

    .venv/bin/python bench/requeue_step1.py [--cqs 6] [--parked 500] [--classes 6] [--rounds 200]

Each round: a 1-cpu Workload of a spare ClusterQueue in the cohort finishes (the cohort's
ClusterQueues are requeued; nothing of the backlog fits), then cycles run until every
representative returned by step 1 has been evaluated and parked again. Measured: CPU time
inside ``_apply_requeues`` per requeue of a backlogged ClusterQueue, and per round in
``schedule``. The same decisions are made before and after the change (their count and a
hash are printed to compare runs of two trees).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.core.scheduling_cycle import Scheduler  # noqa: E402
from app.core.spec import (  # noqa: E402
    ClusterQueueSpec,
    FlavorQuotas,
    LabelSelector,
    LocalQueue,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
)
from app.core.types import ClusterQueueName, CohortName, FlavorName, ResourceName  # noqa: E402
from app.core.workload import PodSet, Workload  # noqa: E402

CPU = ResourceName("cpu")
FLAVOR = FlavorName("default")


def _cq(name: str, cpu: int) -> ClusterQueueSpec:
    group = ResourceGroup((CPU,), (FlavorQuotas(FLAVOR, (ResourceQuota(CPU, cpu * 1000, 0),)),))
    return ClusterQueueSpec(ClusterQueueName(name), (group,), CohortName("pool"),
                            namespace_selector=LabelSelector())


def _wl(name: str, lq: str, cpu: int, prio: int, t: float) -> Workload:
    return Workload("bench", name, lq, (PodSet("main", 1, {CPU: cpu * 1000}),), priority=prio,
                    creation=t, uid=f"u-{name}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cqs", type=int, default=6)
    ap.add_argument("--parked", type=int, default=500, help="parked Workloads per ClusterQueue")
    ap.add_argument("--classes", type=int, default=6, help="nomination classes per ClusterQueue")
    ap.add_argument("--rounds", type=int, default=200)
    args = ap.parse_args()

    c = Scheduler()
    c.add_flavor(ResourceFlavor(FLAVOR))
    c.set_namespace("bench", {})
    names = [f"cq-{i}" for i in range(args.cqs)]
    for n in [*names, "spare"]:
        c.add_cluster_queue(_cq(n, 4))
        c.add_local_queue(LocalQueue("bench", f"lq-{n}", ClusterQueueName(n)))
    now = 1000.0
    for n in names:  # each full: nothing of its backlog fits (borrowingLimit 0)
        c.add_workload(_wl(f"{n}-run", f"lq-{n}", 4, 0, now))
    c.schedule(now)
    for j in range(args.parked):
        for n in names:
            k = j % args.classes  # class: (size, priority)
            c.add_workload(_wl(f"{n}-w{j}", f"lq-{n}", 1 + k % 3, k // 3, now + j))
    digest, decisions = hashlib.sha256(), 0

    def cycle() -> list:
        nonlocal now, decisions
        now += 1
        ds = c.schedule(now)
        decisions += len(ds)
        for d in ds:
            digest.update(f"{now} {d!r}\n".encode())
        return ds

    def settle() -> None:
        while any(c._cqs[ClusterQueueName(n)].queue.active_count for n in names):
            cycle()

    settle()
    in_step1 = 0.0
    original = c._apply_requeues

    def timed() -> None:
        nonlocal in_step1
        t0 = time.process_time()
        original()
        in_step1 += time.process_time() - t0

    c._apply_requeues = timed  # type: ignore[method-assign]
    parked = sum(len(list(c._cqs[ClusterQueueName(n)].queue.parked())) for n in names)
    t0 = time.process_time()
    for r in range(args.rounds):
        c.add_workload(_wl(f"spare-{r}", "lq-spare", 1, 0, now))
        cycle()
        c.finish(f"bench/spare-{r}")  # type: ignore[arg-type]
        settle()
    total = time.process_time() - t0
    requeues = args.rounds * args.cqs
    print(json.dumps({
        "cluster_queues": args.cqs,
        "parked_per_cluster_queue": parked / args.cqs,
        "classes_per_cluster_queue": args.classes,
        "rounds": args.rounds,
        "step1_us_per_requeue_of_a_backlogged_queue": round(in_step1 / requeues * 1e6, 1),
        "step1_cpu_s": round(in_step1, 3),
        "schedule_cpu_s": round(total, 3),
        "decisions": decisions,
        "decision_hash": digest.hexdigest()[:16],
    }, indent=2))


if __name__ == "__main__":
    main()

"""Benchmark: the cost of one ETA run (app/core/eta.py) at 1,000 pending / 500 running; JSON.

Scenario: one cohort of 5 GPU ClusterQueues (220 GPUs nominal each, BestEffortFIFO,
borrowing allowed), 500 running Workloads (1-4 GPUs, time limits 10 min - 4 h, admitted in
the last hour) and 1,000 pending ones (1-8 GPUs, limits 10 min - 4 h; a quarter without a
limit, estimated from learned runtimes). Measures the full run (no budget), then one run
under the default budget (how many ETAs a single slice answers), then the run in slices
(``EtaBoard.advance`` until whole, as the ETA refresher does: slices, the longest slice,
CPU and wall time to the full answer, and that it equals the unbudgeted one), then
``EtaBoard`` called as the status API would, once per second for a minute with the state
unchanged (cache hits).

``with_arrivals``: the same, with projected arrivals (``ArrivalModel``, the default window
``scheduling.eta_arrivals_window_seconds``): besides the scenario's Workloads (priority 0:
never projected, nothing pending is below them), each ClusterQueue has had a priority-10
stream of 2-GPU jobs (30 min limit) every ``--arrivals-every`` seconds for the last hour,
so each stream is projected an hour ahead (``ArrivalModel``: as long as it has gone on),
and the ETAs behind it get Gott's 50% interval (``RangedRun``: the run again with the
streams ending 20 min and 3 h ahead; ``full_run.ms_median_without_ranges``: without).

    .venv/bin/python bench/eta_cost.py [--pending 1000] [--running 500] [--budget-ms 50]
        [--arrivals-every 60]
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

from app.config import SchedulingSettings  # noqa: E402
from app.core.eta import ArrivalModel, EtaBoard, RuntimeModel, estimate, summary  # noqa: E402
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

GPU = ResourceName("nvidia.com/gpu")
NOW = 1_000_000.0


def build(n_pending: int, n_running: int, seed: int) -> tuple[Scheduler, RuntimeModel]:
    rng = random.Random(seed)
    c = Scheduler()
    c.add_flavor(ResourceFlavor(FlavorName("a100")))
    c.set_namespace("team", {})
    names = [ClusterQueueName(f"team-{i}") for i in range(5)]
    for name in names:
        c.add_cluster_queue(ClusterQueueSpec(
            name, cohort=CohortName("gpus"), namespace_selector=LabelSelector(),
            resource_groups=(ResourceGroup((GPU,), (
                FlavorQuotas(FlavorName("a100"), (ResourceQuota(GPU, 220),)),)),)))
        c.add_local_queue(LocalQueue("team", name, name))
    model = RuntimeModel()
    for i in range(n_running + n_pending):
        running = i < n_running
        gpus = rng.choice((1, 1, 2, 4)) if running else rng.choice((1, 2, 4, 8))
        limit = rng.choice((600, 1800, 3600, 14400))
        q = names[i % 5]
        wl = Workload("team", f"w{i}", q, (PodSet("main", 1, {GPU: gpus}),),
                      creation=NOW - 3600 + i * 0.1, uid=f"u{i}",
                      max_execution_seconds=None if (not running and i % 4 == 0) else limit)
        c.add_workload(wl)
        if running:
            for _ in range(5):
                if not c.schedule(NOW - 3600 + rng.random() * 3000):
                    break
        else:
            for _ in range(3):
                model.observe(wl, rng.lognormvariate(7, 1))
    return c, model


def stream_arrivals(names: list[ClusterQueueName], every: float) -> ArrivalModel:
    """The ``with_arrivals`` model: one priority-10 stream per ClusterQueue over the last
    hour (see the module doc)."""
    model = ArrivalModel(window_seconds=SchedulingSettings().eta_arrivals_window_seconds)
    for name in names:
        for i in range(int(3600 // every)):
            model.observe(Workload("team", f"hi-{name}-{i}", name, (PodSet("main", 1, {GPU: 2}),),
                                   creation=NOW - 3600 + (i + 1) * every, uid=f"hi-{name}-{i}",
                                   priority=10, max_execution_seconds=1800))
    return model


def measure(c: Scheduler, cq: ClusterQueueName, model: RuntimeModel, a: argparse.Namespace,
            arrivals: ArrivalModel | None = None) -> dict:
    """The four measurements of the module doc, as a JSON-ready dict."""
    full, plain = [], []
    for _ in range(a.repeat if arrivals is not None else 0):
        plain.append(estimate(c, cq, NOW, model, clock=time.perf_counter, arrivals=arrivals,
                              ranges=False).ms)
    for _ in range(a.repeat):
        run = estimate(c, cq, NOW, model, budget_ms=None, clock=time.perf_counter,
                       arrivals=arrivals)
        full.append(run.ms)
    budgeted = estimate(c, cq, NOW, model, budget_ms=a.budget_ms, clock=time.perf_counter,
                        arrivals=arrivals)
    sliced = EtaBoard(model, budget_ms=a.budget_ms, clock=time.perf_counter, arrivals=arrivals)
    slice_ms: list[float] = []
    w0, c0 = time.perf_counter(), time.process_time()
    while True:
        s0 = time.perf_counter()
        whole = sliced.advance(c, cq, NOW)
        slice_ms.append((time.perf_counter() - s0) * 1000)
        if whole:
            break
    sliced_wall = (time.perf_counter() - w0) * 1000
    sliced_cpu = (time.process_time() - c0) * 1000
    answer = sliced.for_cluster_queue(c, cq, NOW)
    board = EtaBoard(model, budget_ms=a.budget_ms, clock=time.perf_counter, arrivals=arrivals)
    t0 = time.perf_counter()
    for s in range(60):
        board.for_cluster_queue(c, cq, NOW + s)
    board_ms = (time.perf_counter() - t0) * 1000
    return {
        "full_run": {"ms_median": round(statistics.median(full), 1),
                     "ms_runs": [round(x, 1) for x in full], "cycles": run.cycles,
                     "confidence": summary(run.etas),
                     # Gott's 50% interval (RangedRun): the ETAs that got one, and the run
                     # without them (the point estimate only) for the cost of the ranges.
                     "with_range": sum(e.earliest is not None for e in run.etas.values()),
                     "ms_median_without_ranges": (round(statistics.median(plain), 1)
                                                  if plain else None)},
        "budgeted_run": {"budget_ms": a.budget_ms, "ms": round(budgeted.ms, 1),
                         "truncated": budgeted.truncated,
                         "confidence": summary(budgeted.etas)},
        "sliced_run": {"budget_ms_per_slice": a.budget_ms, "slices": sliced.slices,
                       "longest_slice_ms": round(max(slice_ms), 1),
                       "first_slice_ms_with_fork": round(slice_ms[0], 1),
                       "total_wall_ms": round(sliced_wall, 1),
                       "total_cpu_ms": round(sliced_cpu, 1),
                       "confidence": summary(answer.etas),
                       "same_as_full_run": answer.etas == run.etas},
        "board_60_queries_1s_apart": {"recomputations": board.runs,
                                      "total_ms": round(board_ms, 1)},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pending", type=int, default=1000)
    ap.add_argument("--running", type=int, default=500)
    ap.add_argument("--budget-ms", type=float, default=50.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--arrivals-every", type=float, default=60.0,
                    help="seconds between a queue's priority-10 arrivals (0: no with_arrivals)")
    a = ap.parse_args()
    c, model = build(a.pending, a.running, a.seed)
    cq = ClusterQueueName("team-0")
    running = sum(len(c.admitted(n)) for n in c.scope_members(cq))
    pending = sum(len(c.pending_workloads(n)) for n in c.scope_members(cq))
    out = {"running": running, "pending": pending, **measure(c, cq, model, a)}
    if a.arrivals_every > 0:
        arrivals = stream_arrivals(sorted(c.scope_members(cq)), a.arrivals_every)
        lqs = {f"team/{n}" for n in c.scope_members(cq)}
        out["with_arrivals"] = {
            "window_seconds": arrivals.window_seconds,
            "projected": len(arrivals.future(NOW, lqs, above_priority=0)),
            **measure(c, cq, model, a, arrivals)}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

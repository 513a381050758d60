#!/usr/bin/env python3
"""The blocker of bench/scenarios/deep-blocker.yaml: its wait against the cycle time.

    .venv/bin/python bench/deep_blocker.py [CYCLE_S ...]     # default 0 0.01 0.03 0.05 0.1 0.2

Drives pykueue's core (``app.core.scheduling_cycle.Scheduler``) with a fixed cycle time: a
cycle takes CYCLE_S seconds of virtual time and the arrivals and finishes of that time are
applied before the next (0: the simulator's rule, cycles until a fixed point at each
instant). Each line gives the blocker's wait (creation -> admission) with pykueue's requeue
(parked Workloads return at the next cycle after a finish) and with Kueue v0.17.1's
(``pkg/cache/queue/inadmissible_workloads.go``: the requeuer's ``AddAfter(batchPeriod)``,
1 s after the first notification, later ones merged while it waits), emulated by holding the
core's requeue marks (a private field: a measurement, not an API).
"""

from __future__ import annotations

import heapq
import json
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.core.decisions import Admit  # noqa: E402
from app.core.scheduling_cycle import Scheduler  # noqa: E402
from app.sim import load_trace  # noqa: E402
from app.sim.trace import US  # noqa: E402

TRACE = ROOT / "bench" / "scenarios" / "deep-blocker.yaml"


def blocker_wait(cycle_s: float, batch_s: float = 0.0) -> float | None:
    """Seconds from the blocker's creation to its admission (None: never)."""
    t = load_trace(TRACE)
    c = Scheduler()
    for f in t.flavors:
        c.add_flavor(f)
    for spec in t.cluster_queues:
        c.add_cluster_queue(spec)
    for lq in t.local_queues:
        c.add_local_queue(lq)
    subs = sorted(t.submissions(), key=lambda s: s.at_us)
    wls, runtime, created, admitted = {}, {}, {}, {}
    fin: list[tuple[float, str]] = []
    held: dict = {}
    due: float | None = None
    i, now = 0, 0.0
    while True:
        while fin and fin[0][0] <= now:
            c.finish(heapq.heappop(fin)[1])
        while i < len(subs) and subs[i].at_us / US <= now:
            s = subs[i]
            i += 1
            k = s.workload.key
            wls[k], runtime[k], created[k] = s.workload, s.runtime_us / US, s.at_us / US
            c.add_workload(s.workload)
        if batch_s > 0:  # Kueue's requeuer
            if c._requeue:  # noqa: SLF001
                held.update(c._requeue)  # noqa: SLF001
                c._requeue = {}  # noqa: SLF001
                if due is None:
                    due = now + batch_s
            if due is not None and now >= due:
                c._requeue, held, due = held, {}, None  # noqa: SLF001
        ds = c.schedule(now)
        for d in ds:
            if isinstance(d, Admit):
                k = d.workload
                admitted[k] = now
                c.update_workload(replace(wls[k], admission=d.admission, quota_reserved_at=now))
                heapq.heappush(fin, (now + runtime[k], k))
        if ds:
            now += cycle_s
            continue
        nxt = [x for x in (fin[0][0] if fin else None,
                           subs[i].at_us / US if i < len(subs) else None, due) if x is not None]
        if not nxt:
            break
        now = max(min(nxt), now + cycle_s)
    k = next(k for k in wls if k.endswith("/blocker"))
    return round(admitted[k] - created[k], 3) if k in admitted else None


def main() -> None:
    cycles = [float(a) for a in sys.argv[1:]] or [0, 0.01, 0.03, 0.05, 0.1, 0.2]
    for cs in cycles:
        print(json.dumps({"cycle_s": cs, "pykueue_requeue_wait_s": blocker_wait(cs),
                          "kueue_1s_batched_requeue_wait_s": blocker_wait(cs, 1.0)}))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The admission core's per-admission memory pattern without its logic: does a fixed amount of
Python work per admission cost more when the state it is spread over is larger?

    .venv/bin/python bench/cache_touch.py                     # 30 and 3000 "ClusterQueues"
    .venv/bin/python bench/cache_touch.py --queues 30 --queues 300 --queues 3000

A stand-in for ``bench/cq_scaling.py`` (issue 33 item 3) that keeps only the shape of the
state and the objects one admission touches: per "ClusterQueue" a spec, a quota node (quota
and usage dicts, a parent cohort node shared by ``--cohort-size`` queues), a pending heap,
memo dicts keyed by its name, and ``--workloads`` Workload-like objects (a dataclass with a
pod set and its requests dict, a record with a usage dict), allocated interleaved across the
queues as the simulator's arrivals are. Each cycle visits every queue in name order (as
``Scheduler.schedule`` does) and "admits" its head: the same fixed sequence of attribute
reads, dict lookups (queue-name keyed dicts of every queue, the queue's own dicts, the
cohort's), a heap pop, and a usage add and remove, the same number of Python operations per
admission at every size. Only the number of queues (the working set) changes, so whatever
the per-admission time grows by is the cost of the memory the work is spread over (CPU
caches), not of the work.

Prints one JSON document: per row the queue count, the queues visited per cycle, admissions,
ns per admission and the ratio to the first row. ``--visit 30`` keeps the state of every
queue but visits only 30 per cycle: if the growth is the memory the cycle walks, that row
costs what the 30-queue row does.
"""

from __future__ import annotations

import argparse
import heapq
import json
import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class _PodSet:
    name: str
    count: int
    requests: dict[str, int]


@dataclass(frozen=True)
class _Workload:
    key: str
    priority: int
    created: float
    uid: str
    pod_sets: tuple[_PodSet, ...]


@dataclass
class _Record:
    wl: _Workload
    state: str = "pending"
    cq: str | None = None
    usage: dict[tuple[str, str], int] = field(default_factory=dict)


@dataclass
class _Node:
    quotas: dict[tuple[str, str], tuple[int, int | None, int | None]]
    usage: dict[tuple[str, str], int] = field(default_factory=dict)
    parent: _Node | None = None


@dataclass
class _Spec:
    name: str
    cohort: str
    reclaim: str = "Any"
    within: str = "LowerPriority"
    strategy: str = "BestEffortFIFO"


@dataclass
class _Queue:
    spec: _Spec
    node: _Node
    heap: list[tuple[int, float, str, str]] = field(default_factory=list)
    active: dict[str, tuple[int, float, str, str]] = field(default_factory=dict)


FR = ("default", "cpu")


def build(queues: int, cohort_size: int, workloads: int):
    cohorts = [_Node({FR: (0, None, None)}) for _ in range(queues // cohort_size)]
    names = [f"cohort-{i // cohort_size}-cq-{i % cohort_size}" for i in range(queues)]
    cqs: dict[str, _Queue] = {}
    memos: list[dict[str, object]] = [{} for _ in range(6)]
    records: dict[str, _Record] = {}
    for i, n in enumerate(names):
        node = _Node({FR: (20_000, 100_000, None)}, parent=cohorts[i // cohort_size])
        cqs[n] = _Queue(_Spec(n, f"cohort-{i // cohort_size}"), node)
        for j, m in enumerate(memos):
            m[n] = (j, {FR: j})
    for w in range(workloads):  # interleaved: the w-th Workload of every queue, then the next
        for n in names:
            key = f"ns-{n}/wl-{w}"
            wl = _Workload(key, w % 3, float(w), f"uid-{n}-{w}",
                           (_PodSet("main", 1, {"cpu": 1000 * (1 + w % 5)}),))
            records[key] = _Record(wl, cq=n)
            sk = (-wl.priority, wl.created, wl.uid, key)
            q = cqs[n]
            q.active[key] = sk
            heapq.heappush(q.heap, sk)
    return names, cqs, memos, records


def admit(q: _Queue, memos: list[dict[str, object]], records: dict[str, _Record]) -> int:
    """One admission's worth of touches (the same at every size)."""
    name = q.spec.name
    for m in memos:  # the scheduler's and state's per-queue dicts keyed by name
        m.get(name)
    sk = heapq.heappop(q.heap)
    key = sk[3]
    del q.active[key]
    rec = records[key]
    wl = rec.wl
    node = q.node
    total = 0
    for ps in wl.pod_sets:
        for r, v in ps.requests.items():
            fr = ("default", r)
            quota = node.quotas.get(fr)
            used = node.usage.get(fr, 0)
            parent = node.parent
            pu = parent.usage.get(fr, 0) if parent is not None else 0
            pq = parent.quotas.get(fr) if parent is not None else None
            if quota is not None and q.spec.reclaim == "Any" and pq is not None:
                total += quota[0] - used - pu + v * ps.count + wl.priority
            rec.usage[fr] = v * ps.count
            node.usage[fr] = used + v
            if parent is not None:
                parent.usage[fr] = pu + v
            node.usage[fr] = used  # finish: release again, so every cycle is alike
            if parent is not None:
                parent.usage[fr] = pu
    rec.state = "admitted"
    heapq.heappush(q.heap, sk)  # back in the queue: the state keeps its size
    q.active[key] = sk
    return total


def run(queues: int, cohort_size: int, workloads: int, admissions: int,
        visit: int | None = None) -> dict:
    names, cqs, memos, records = build(queues, cohort_size, workloads)
    order = sorted(names)[:visit]
    cycles = max(1, admissions // len(order))
    start = time.process_time()
    for _ in range(cycles):
        for n in order:
            admit(cqs[n], memos, records)
    cpu = time.process_time() - start
    done = cycles * len(order)
    return {"queues": queues, "visited_per_cycle": len(order),
            "workloads": queues * workloads, "admissions": done,
            "ns_per_admission": round(cpu / done * 1e9)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queues", type=int, action="append", help="default 30 3000")
    ap.add_argument("--cohort-size", type=int, default=10)
    ap.add_argument("--workloads", type=int, default=50, help="Workloads per queue")
    ap.add_argument("--admissions", type=int, default=300_000)
    ap.add_argument("--visit", type=int, default=None,
                    help="visit only the first VISIT queues each cycle (the same state, a "
                         "smaller working set); default every queue")
    args = ap.parse_args()
    rows = [run(q, args.cohort_size, args.workloads, args.admissions, args.visit)
            for q in (args.queues or [30, 3000])]
    for r in rows:
        r["vs_first"] = round(r["ns_per_admission"] / rows[0]["ns_per_admission"], 2)
    print(json.dumps({"rows": rows}, indent=2))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Check of the BestEffortFIFO requeue shortcut (app/core/scheduling_cycle.py, step 1) on Kueue's
baseline scenario: the same admissions and preemptions, at the same times, as Kueue's rule.

    .venv/bin/python bench/requeue_shortcut.py [--scenario baseline]

Kueue (v0.17.1, ``queue.Manager.QueueInadmissibleWorkloads``) returns every parked Workload of
a ClusterQueue whose cohort changed to its heap. pykueue returns one representative per
nomination class. This script runs the simulator (``app.sim``, virtual clock) on
bench/scenarios/<scenario>.yaml twice: as shipped, and with step 1 replaced by Kueue's rule
(every parked Workload whose namespace matches returns, no followers). It compares the Admit
and Preempt decisions (virtual time, Workload, ClusterQueue, flavors and counts, victims and
their reasons), prints one JSON document (decision counts, CPU seconds, the first difference
if any) and exits 1 when they differ. The Pending decisions are expected to differ (fewer
re-evaluations is the point); their counts are printed.

What it shows and what not: pykueue with and without its shortcut, in pykueue's core. It says
nothing about pykueue against Kueue itself (``make bench-versus``, docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.core.decisions import Admit, Pending, Preempt  # noqa: E402
from app.core.scheduling_cycle import Scheduler  # noqa: E402
from app.sim import Simulator, load_trace  # noqa: E402


def _kueue_requeues(self: Scheduler) -> None:
    """Kueue's step 1: every parked Workload of a marked, active ClusterQueue returns (its
    namespace matching the selector), whatever the strategy. Reads the scheduler's private
    state on purpose: the check swaps exactly this step and nothing else."""
    marked, self._requeue = self._requeue, {}
    for name in marked:
        cq = self._cqs.get(name)
        if cq is None or not cq.active:
            continue
        sel = cq.spec.namespace_selector
        for k in list(cq.queue.parked()):
            if (sel is not None and sel.selects_all) or \
                    self.namespace_matches(cq.spec, self._wls[k].wl.namespace):
                cq.queue.unpark(k)


def _trace_of(scenario: str, kueue_rule: bool) -> dict:
    original = Scheduler._apply_requeues
    if kueue_rule:
        Scheduler._apply_requeues = _kueue_requeues  # type: ignore[method-assign]
    events: list[str] = []
    pending = 0

    def record(t: int, decisions: list) -> None:
        nonlocal pending
        for d in decisions:
            if isinstance(d, Admit):
                psa = [(p.name, p.count, sorted(p.flavors.items()))
                       for p in d.admission.pod_set_assignments]
                events.append(f"{t} admit {d.workload} {d.cluster_queue} {psa}")
            elif isinstance(d, Preempt):
                victims = sorted((str(v.workload), str(v.reason)) for v in d.victims)
                events.append(f"{t} preempt {d.preemptor} {d.cluster_queue} {victims}")
            elif isinstance(d, Pending):
                pending += 1
    try:
        start = time.process_time()
        sim = Simulator(load_trace(ROOT / "bench" / "scenarios" / f"{scenario}.yaml"),
                        on_cycle=record)
        sim.run()
        cpu = time.process_time() - start
    finally:
        Scheduler._apply_requeues = original  # type: ignore[method-assign]
    return {"events": events, "pending": pending, "cpu_s": round(cpu, 1),
            "end_s": sim.end_us / 1e6}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default="baseline")
    a = ap.parse_args()
    shipped, kueue = _trace_of(a.scenario, False), _trace_of(a.scenario, True)
    first = next((i for i, (x, y) in enumerate(zip(shipped["events"], kueue["events"],
                                                   strict=False)) if x != y), None)
    if first is None and len(shipped["events"]) != len(kueue["events"]):
        first = min(len(shipped["events"]), len(kueue["events"]))
    out = {
        "scenario": a.scenario,
        "identical_admissions_and_preemptions": first is None,
        "admit_and_preempt_decisions": len(shipped["events"]),
        "admissions": sum(" admit " in e for e in shipped["events"]),
        "preemptions": sum(" preempt " in e for e in shipped["events"]),
        "pending_decisions": {"shortcut": shipped["pending"], "kueue_rule": kueue["pending"]},
        "cpu_s": {"shortcut": shipped["cpu_s"], "kueue_rule": kueue["cpu_s"]},
        "virtual_end_s": {"shortcut": shipped["end_s"], "kueue_rule": kueue["end_s"]},
    }
    if first is not None:
        out["first_difference"] = {
            "index": first,
            "shortcut": shipped["events"][first] if first < len(shipped["events"]) else None,
            "kueue_rule": kueue["events"][first] if first < len(kueue["events"]) else None}
    print(json.dumps(out, indent=2))
    return 0 if first is None else 1


if __name__ == "__main__":
    raise SystemExit(main())

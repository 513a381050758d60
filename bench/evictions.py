#!/usr/bin/env python3
"""Every preemption of a ``bench/versus.py --trace`` run, classified (issue 16: the evictions
Kueue does not make).

    .venv/bin/python bench/evictions.py OUT/kueue-qps1000 OUT/pykueue-qps1000 [--json F]

Reads ``workloads.jsonl`` (the Workload watch, in resourceVersion order) of each run and
replays it: which Workload holds quota (``status.admission`` set and not Finished) in which
ClusterQueue, and every eviction (Evicted=True reason Preempted with a new transition time)
with its Preempted condition (reason, and the preemptor's UID from the message, as Kueue
writes it: ``Preempted to accommodate a workload (UID: ...``). Assumes Kueue's performance
generator (ClusterQueue = namespace = ``<class>-<set>-<i>-<cohort>``, one resource ``cpu``,
each ClusterQueue's quota from ``--nominal`` / ``--borrowing-limit``).

Per eviction, flags (not exclusive) then one primary class (the first flag that holds, in this
order):

* ``fit_by_borrowing``: at the eviction, the preemptor would have fit as things stood
  (its ClusterQueue's usage + request <= nominal + borrowingLimit and the cohort's usage +
  request <= the cohort's nominal sum): no preemption was needed at that moment;
* ``excess_victim``: the preemptor's victims (all rounds) freed more than its request by at
  least this victim's size (it could have been spared);
* ``repeat_round``: the preemptor had preempted before, in an earlier round (its earlier
  victims' evictions were more than one event batch ago, ``--round-gap`` resource versions);
* ``concurrent_cohort``: another preemptor of the same cohort evicted within the same round
  window (``--round-gap``);
* ``victim_fresh``: the victim got its quota at most ``--fresh`` seconds before (second
  resolution of lastTransitionTime);
* ``victim_again``: the victim had been evicted before;
* ``victim_after_preemptor``: the victim got its quota after the preemptor (of higher
  priority) was created (watch arrival times): admitted while the preemptor already
  waited, or before the controller had seen it;
* ``preemptor_not_admitted``: the preemptor was never admitted afterwards;
* else ``plain``.
Also the reason split (InClusterQueue / InCohortReclamation / ...), classes of victim and
preemptor, victims per preemptor.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workload_watch import cpu_milli as cpu  # noqa: E402
from workload_watch import ts  # noqa: E402
from workload_watch import watch_events as events  # noqa: E402

UID_RE = re.compile(r"UID: ([0-9a-f-]{36})")
FLAGS = ("fit_by_borrowing", "excess_victim", "repeat_round", "concurrent_cohort",
         "victim_fresh", "victim_again", "victim_after_preemptor", "preemptor_not_admitted")
# Seconds from the first Workload event: when in the run the evictions happen.
WHEN = ((10.0, "0-10s"), (60.0, "10-60s"), (float("inf"), "60s+"))


def cond(obj: dict[str, Any], t: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == t:
            return c
    return None


def analyse(run_dir: Path, nominal: int, borrowing_limit: int, round_gap: int,
            fresh: float) -> dict[str, Any]:
    holds: dict[str, tuple[str, int]] = {}  # uid -> (cq, milli-CPU)
    usage: Counter[str] = Counter()
    info: dict[str, dict[str, Any]] = {}
    seen_evictions: dict[str, set[str]] = defaultdict(set)
    admitted_after: dict[str, list[int]] = defaultdict(list)  # uid -> seq of admissions
    evictions: list[dict[str, Any]] = []
    cq_count: Counter[str] = Counter()
    seq = 0
    first_t: float | None = None
    seen_at: dict[str, float] = {}  # uid -> watch arrival of its first event
    held_at: dict[str, float] = {}  # uid -> watch arrival of its latest admission
    for t, ev in events(run_dir / "workloads.jsonl"):
        seq += 1
        if t is not None:
            first_t = t if first_t is None else first_t
        obj = ev["object"]
        md = obj["metadata"]
        uid = md["uid"]
        cq = md["namespace"]
        cohort = cq.rsplit("-", 2)[-2] + "-" + cq.rsplit("-", 1)[-1]
        if uid not in info:
            info[uid] = {"name": f"{cq}/{md['name']}", "cq": cq, "cohort": cohort,
                         "cls": (md.get("labels") or {}).get(
                             "kueue.x-k8s.io/performance-scheduler-class", "?"),
                         "prio": obj["spec"].get("priority", 0), "req": cpu(obj),
                         "evicted": 0}
            cq_count[cq] += 0
            if t is not None:
                seen_at[uid] = t
        wi = info[uid]
        # eviction (before applying this event's usage change: a victim holds its quota
        # until its owner clears the admission)
        evc = cond(obj, "Evicted")
        if ev["type"] != "DELETED" and evc and evc.get("status") == "True" \
                and evc.get("reason") == "Preempted":
            mark = evc.get("lastTransitionTime", "")
            if mark not in seen_evictions[uid]:
                seen_evictions[uid].add(mark)
                pc = cond(obj, "Preempted") or {}
                m = UID_RE.search(pc.get("message") or evc.get("message") or "")
                qr = cond(obj, "QuotaReserved") or {}
                evictions.append({
                    "seq": seq, "victim": uid, "preemptor": m.group(1) if m else None,
                    "reason": pc.get("reason", "?"), "evicted_at": ts(mark),
                    "victim_reserved_at": ts(qr.get("lastTransitionTime"))
                    if qr.get("status") == "True" else None,
                    "victim_evicted_before": wi["evicted"],
                    "victim_held_at": held_at.get(uid),
                    "t": None if t is None or first_t is None else t - first_t,
                    "usage": dict(usage),
                })
                wi["evicted"] += 1
        fin = cond(obj, "Finished")
        hold = (ev["type"] != "DELETED" and bool((obj.get("status") or {}).get("admission"))
                and not (fin and fin.get("status") == "True"))
        if hold and uid not in holds:
            holds[uid] = (cq, wi["req"])
            usage[cq] += wi["req"]
            if t is not None:
                held_at[uid] = t
            admitted_after[uid].append(seq)
        elif not hold and uid in holds:
            c, r = holds.pop(uid)
            usage[c] -= r
    cap = nominal + borrowing_limit
    cqs_of: dict[str, list[str]] = defaultdict(list)
    for cq in cq_count:
        cqs_of[cq.rsplit("-", 2)[-2] + "-" + cq.rsplit("-", 1)[-1]].append(cq)
    by_preemptor: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in evictions:
        by_preemptor[e["preemptor"]].append(e)
    # rounds: a preemptor's evictions closer than round_gap events belong to one round
    for _p, es in by_preemptor.items():
        rnd, last = 0, None
        for e in es:
            if last is not None and e["seq"] - last > round_gap:
                rnd += 1
            e["round"] = rnd
            last = e["seq"]
    out_classes: Counter[str] = Counter()
    flags_count: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    pairs: Counter[str] = Counter()
    when: Counter[str] = Counter()
    for e in evictions:
        if e["t"] is not None:
            when[next(name for edge, name in WHEN if e["t"] < edge)] += 1
        p = info.get(e["preemptor"] or "", {})
        v = info[e["victim"]]
        reasons[e["reason"]] += 1
        pairs[f"{p.get('cls', '?')}<-{v['cls']} {e['reason']}"] += 1
        flags: set[str] = set()
        if p:
            cq, coh, r = p["cq"], p["cohort"], p["req"]
            cohort_used = sum(e["usage"].get(c, 0) for c in cqs_of[coh])
            cohort_cap = nominal * 1000 * len(cqs_of[coh])
            if (e["usage"].get(cq, 0) + r <= cap * 1000 and cohort_used + r <= cohort_cap):
                flags.add("fit_by_borrowing")
            mine = by_preemptor[e["preemptor"]]
            freed = sum(info[x["victim"]]["req"] for x in mine)
            if freed - v["req"] >= r and len(mine) > 1:
                flags.add("excess_victim")
            if e["round"] > 0:
                flags.add("repeat_round")
            if not any(s > e["seq"] for s in admitted_after.get(e["preemptor"], [])):
                flags.add("preemptor_not_admitted")
            for other in evictions:
                if other["preemptor"] not in (e["preemptor"], None) and \
                        abs(other["seq"] - e["seq"]) <= round_gap and \
                        info.get(other["preemptor"], {}).get("cohort") == coh:
                    flags.add("concurrent_cohort")
                    break
        if e["victim_reserved_at"] is not None and e["evicted_at"] is not None and \
                e["evicted_at"] - e["victim_reserved_at"] <= fresh:
            flags.add("victim_fresh")
        if e["victim_evicted_before"]:
            flags.add("victim_again")
        created = seen_at.get(e["preemptor"] or "")
        if created is not None and e["victim_held_at"] is not None \
                and e["victim_held_at"] > created:
            flags.add("victim_after_preemptor")
        for f in flags:
            flags_count[f] += 1
        out_classes[next((f for f in FLAGS if f in flags), "plain")] += 1
    rounds = Counter(max(x["round"] for x in es) + 1 for es in by_preemptor.values())
    victims = Counter(len(es) for es in by_preemptor.values())
    return {"run": run_dir.name, "workloads": len(info), "evictions": len(evictions),
            "preemptors": len(by_preemptor), "reasons": dict(reasons),
            "primary_class": dict(out_classes), "flags": dict(flags_count),
            "pairs": dict(pairs.most_common()), "when": dict(when),
            "victims_per_preemptor": dict(sorted(victims.items())),
            "rounds_per_preemptor": dict(sorted(rounds.items())),
            "evicted_more_than_once": sum(1 for w in info.values() if w["evicted"] > 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--nominal", type=int, default=20)
    ap.add_argument("--borrowing-limit", type=int, default=100)
    ap.add_argument("--round-gap", type=int, default=60,
                    help="events (resource versions) between two rounds of one preemptor")
    ap.add_argument("--fresh", type=float, default=1.0)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    res = [analyse(r, a.nominal, a.borrowing_limit, a.round_gap, a.fresh) for r in a.runs]
    keys = ["workloads", "evictions", "preemptors", "evicted_more_than_once"]
    width = max(len(r["run"]) for r in res) + 2
    print("".ljust(34) + "".join(r["run"].rjust(width) for r in res))
    for k in keys:
        print(k.ljust(34) + "".join(str(r[k]).rjust(width) for r in res))
    for group in ("when", "reasons", "primary_class", "flags", "victims_per_preemptor",
                  "rounds_per_preemptor", "pairs"):
        names = sorted({n for r in res for n in r[group]}, key=str)
        print(f"-- {group}")
        for n in names:
            print(f"  {str(n)[:32]}".ljust(34) + "".join(str(r[group].get(n, 0)).rjust(width)
                                                       for r in res))
    if a.json:
        a.json.write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Figures from a Workload watch recorded by ``bench/versus.py`` (``<out>/<run>/workloads.jsonl``,
one watch event a line, each prefixed with the Unix time it arrived) — issue 33.

    .venv/bin/python bench/workload_watch.py OUT/kueue OUT/pykueue [--generator G.yaml]

* **Admitted seconds lost to eviction** (``app.sim.lost_work``): per Workload class (the
  runner's ``kueue.x-k8s.io/performance-scheduler-class`` label) and in total, the evictions
  and Σ (eviction - latest admission). A Workload's admission is its ``QuotaReserved``
  condition turning True (or its lastTransitionTime changing while True), an eviction its
  ``Evicted`` condition turning True (likewise), its end ``Finished`` turning True: Kueue
  v0.17.1 sets ``Evicted=False`` again when it reserves quota (``SetQuotaReservation``), so
  each eviction is one transition to True. Timed twice: by the watch events' **arrival
  times** (``lost``, millisecond resolution, one clock for both controllers: the figure in
  the table) and by the conditions' ``lastTransitionTime`` (``lost_ltt``: metav1.Time has
  second resolution, so with sub-second runtimes an admission and its eviction often fall in
  one second and sum to 0; written by each controller's own clock). The arrival time lags the
  write by the watch's latency, about the same for the admission and the eviction.
* **Deep queues** (issue 33 item 4): admissions (every QuotaReserved transition, re-admissions
  included) per minute over the window from the first Workload seen to the last admission,
  and per cohort per minute of the time when some Workload of the cohort was pending
  (``admissions_per_min_while_pending``: the admission rate the queue saw while it waited);
  time to admission per class (first seen to latest admission: avg, p50, p95, max); and per
  cohort, how much quota sat idle while Workloads that fit were pending: ∫ max(0, Σ nominal -
  Σ usage) dt over the times when some ClusterQueue of the cohort had a pending Workload with
  request <= both the cohort's free nominal quota and its ClusterQueue's room (nominal +
  borrowingLimit - usage), against ∫ Σ nominal dt while any was pending. Needs the generator
  config (quotas); usage = Σ cpu requests of the Workloads holding quota (QuotaReserved True,
  not Finished). Kueue's performance generator names each ClusterQueue and its namespace
  ``<queuesSet>-<setIdx>-<i>-<cohort>-<cohortIdx>``.
* **Re-admission latency** (``readmission_ms``): for each Finished transition of a Workload
  that held quota while another Workload of the same ClusterQueue (the Workload's namespace:
  the generator gives each ClusterQueue its own) was pending, the time from that watch event
  to the next admission in the ClusterQueue (count, p50, p90, mean in milliseconds): how long
  freed quota waited for the controller (the finish's watch event, a cycle, the admission
  write, its watch event). Needs no generator config.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import sys
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.sim.lost_work import ADMITTED, EVICTED, FINISHED, lost_work_by_class  # noqa: E402

CLASS_LABEL = "kueue.x-k8s.io/performance-scheduler-class"


def ts(v: str | None) -> float | None:
    """RFC 3339 time -> Unix seconds (None for empty)."""
    return None if not v else datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp()


def watch_events(path: Path) -> Iterator[tuple[float | None, dict[str, Any]]]:
    """``(arrival_unix_s or None, watch event)`` per line of a Tracer file; BOOKMARK, ERROR and
    torn lines are skipped."""
    with path.open() as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            t = None
            if not line.startswith("{"):
                head, line = line.split(" ", 1)
                t = float(head)
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                continue
            if ev.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                yield t, ev


def _cond(obj: dict[str, Any], kind: str) -> tuple[bool, str]:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return c.get("status") == "True", c.get("lastTransitionTime") or ""
    return False, ""


def _milli(v: Any) -> int:
    """A cpu quantity (``2``, ``"2"``, ``"500m"``, ``1.5``) in milli-CPU."""
    v = str(v if v is not None else 0)
    return int(v[:-1]) if v.endswith("m") else int(float(v) * 1000)


def cpu_milli(obj: dict[str, Any]) -> int:
    """The Workload's cpu request in milli-CPU (Σ count x per-pod request)."""
    total = 0
    for ps in (obj.get("spec") or {}).get("podSets") or []:
        for c in ((ps.get("template") or {}).get("spec") or {}).get("containers") or []:
            total += _milli(((c.get("resources") or {}).get("requests") or {}).get("cpu")) \
                * ps.get("count", 1)
    return total


def generator_quotas(path: Path) -> dict[str, tuple[str, int, int]]:
    """ClusterQueue name -> (cohort, nominal milli-CPU, borrowingLimit milli-CPU) from a
    generator config of Kueue's performance runner (v0.17.1 naming, see the docstring)."""
    cfg = yaml.safe_load(path.read_text()) or {}
    out = {}
    for cs in cfg.get("cohorts") or []:
        for ci in range(cs.get("count", 1)):
            cohort = f"{cs['className']}-{ci}"
            for qi, qs in enumerate(cs.get("queuesSets") or []):
                for i in range(qs.get("count", 1)):
                    out[f"{qs['className']}-{qi}-{i}-{cohort}"] = (
                        cohort, _milli(qs.get("nominalQuota", 0)),
                        _milli(qs.get("borrowingLimit", 0)))
    return out


def _pct(sorted_v: list[float], p: float) -> float:
    return sorted_v[max(0, math.ceil(p / 100 * len(sorted_v)) - 1)]


class _Cohort:
    """Integrals of one cohort's quota while Workloads were pending (see the docstring)."""

    def __init__(self, members: dict[str, tuple[int, int]]) -> None:
        self.members = members  # cq -> (nominal, borrowingLimit) in milli-CPU
        self.nominal = sum(n for n, _ in members.values())
        self.usage: Counter[str] = Counter()
        self.pending: dict[str, Counter[int]] = {cq: Counter() for cq in members}
        self.last_t: float | None = None
        self.pending_s = 0.0  # seconds with any pending Workload
        self.nominal_while_pending = 0.0  # ∫ Σ nominal dt (milli-CPU s) while pending
        self.used_while_pending = 0.0  # ∫ min(Σ usage, Σ nominal) dt while pending
        self.idle_while_fit = 0.0  # ∫ free nominal dt while a pending one fit
        self.fit_s = 0.0
        self.peak_pending = 0
        self.admitted_from_pending = 0  # admissions while the cohort had pending Workloads

    def advance(self, t: float) -> None:
        if self.last_t is not None and t > self.last_t:
            dt = t - self.last_t
            used = sum(self.usage.values())
            if any(self.pending[cq] for cq in self.members):
                self.pending_s += dt
                self.nominal_while_pending += self.nominal * dt
                self.used_while_pending += min(used, self.nominal) * dt
                free = self.nominal - used
                if free > 0:
                    for cq, (nom, bl) in self.members.items():
                        reqs = self.pending[cq]
                        if reqs and min(reqs) <= min(free, nom + bl - self.usage[cq]):
                            self.idle_while_fit += free * dt
                            self.fit_s += dt
                            break
        self.last_t = t if self.last_t is None else max(t, self.last_t)

    def figures(self) -> dict[str, Any]:
        nwp = self.nominal_while_pending
        return {"nominal_cpu": self.nominal / 1000, "pending_s": round(self.pending_s, 1),
                "peak_pending": self.peak_pending,
                "admissions_while_pending": self.admitted_from_pending,
                "admissions_per_min_while_pending": round(
                    60 * self.admitted_from_pending / self.pending_s, 1)
                if self.pending_s else None,
                "usage_pct_while_pending": round(100 * self.used_while_pending / nwp, 1)
                if nwp else None,
                "idle_cpu_s_while_fit_pending": round(self.idle_while_fit / 1000, 1),
                "idle_pct_while_pending": round(100 * self.idle_while_fit / nwp, 1)
                if nwp else None,
                "fit_pending_idle_s": round(self.fit_s, 1)}


def analyse(path: Path, quotas: dict[str, tuple[str, int, int]] | None = None,
            until_s: float | None = None) -> dict[str, Any]:
    """The figures of one ``workloads.jsonl`` (see the module docstring). ``quotas``: from
    ``generator_quotas``; without it the idle-quota figures are left out. ``until_s``: only
    the events that arrived within that many seconds of the first (to compare a run with one
    whose controller exited early)."""
    logs: dict[str, list[tuple[str, float]]] = {}
    logs_ltt: dict[str, list[tuple[str, float]]] = {}
    cls_of: dict[str, str] = {}
    seen: dict[str, float] = {}
    last_adm: dict[str, float] = {}
    state: dict[str, dict[str, Any]] = {}
    admissions: list[float] = []
    cohorts: dict[str, _Cohort] = {}
    if quotas:
        by: dict[str, dict[str, tuple[int, int]]] = {}
        for cq, (coh, nom, bl) in quotas.items():
            by.setdefault(coh, {})[cq] = (nom, bl)
        cohorts = {coh: _Cohort(m) for coh, m in by.items()}
    cohort_of = {cq: coh for cq, (coh, _, _) in (quotas or {}).items()}
    pending_in: Counter[str] = Counter()  # namespace -> Workloads pending there
    admitted_in: dict[str, list[float]] = {}  # namespace -> admission times, in arrival order
    freed: list[tuple[str, float]] = []  # (namespace, finish time) with one pending there
    first_t: float | None = None
    for t, ev in watch_events(path):
        obj = ev["object"]
        md = obj.get("metadata") or {}
        uid = md.get("uid", "")
        if t is not None:
            first_t = t if first_t is None else first_t
            if until_s is not None and t - first_t > until_s:
                break
        if uid not in state:
            cls_of[uid] = (md.get("labels") or {}).get(CLASS_LABEL, "?")
            state[uid] = {"qr": (False, ""), "ev": (False, ""), "fin": False,
                          "cq": md.get("namespace", ""), "req": cpu_milli(obj),
                          "held": False, "pending": False}
            logs[uid], logs_ltt[uid] = [], []
            if t is not None:
                seen[uid] = t
        st = state[uid]
        coh = cohorts.get(cohort_of.get(st["cq"], ""))
        if coh is not None and t is not None:
            coh.advance(t)
        deleted = ev["type"] == "DELETED"
        qr, evc, fin = _cond(obj, "QuotaReserved"), _cond(obj, "Evicted"), _cond(obj, "Finished")
        now = t if t is not None else 0.0
        # order within one event: an eviction and a re-admission in one update (a missed
        # intermediate state) close the old admission first
        if evc[0] and evc != st["ev"]:
            logs[uid].append((EVICTED, now))
            logs_ltt[uid].append((EVICTED, ts(evc[1]) or now))
        if qr[0] and qr != st["qr"]:
            logs[uid].append((ADMITTED, now))
            logs_ltt[uid].append((ADMITTED, ts(qr[1]) or now))
            admissions.append(now)
            last_adm[uid] = now
            admitted_in.setdefault(st["cq"], []).append(now)
        if fin[0] and not st["fin"]:
            if st["held"] and pending_in[st["cq"]] > 0:
                freed.append((st["cq"], now))
            logs[uid].append((FINISHED, now))
            logs_ltt[uid].append((FINISHED, ts(fin[1]) or now))
        st["qr"], st["ev"], st["fin"] = qr, evc, fin[0]
        held = qr[0] and not fin[0] and not deleted
        pending = not qr[0] and not fin[0] and not deleted
        if pending != st["pending"]:
            pending_in[st["cq"]] += 1 if pending else -1
        if coh is not None:
            if held and not st["held"] and st["pending"]:
                coh.admitted_from_pending += 1
            if held != st["held"]:
                coh.usage[st["cq"]] += st["req"] if held else -st["req"]
            if pending != st["pending"]:
                waiting = coh.pending[st["cq"]]
                waiting[st["req"]] += 1 if pending else -1
                if waiting[st["req"]] <= 0:
                    del waiting[st["req"]]  # an empty Counter is falsy: "nothing pending"
                coh.peak_pending = max(coh.peak_pending,
                                       sum(sum(c.values()) for c in coh.pending.values()))
        st["held"], st["pending"] = held, pending
    lost = lost_work_by_class(logs, cls_of)
    lost_ltt = lost_work_by_class(logs_ltt, cls_of)
    waits: dict[str, list[float]] = {}
    for uid, t in last_adm.items():
        if uid in seen:
            waits.setdefault(cls_of[uid], []).append(t - seen[uid])
    tta = {}
    for c, w in sorted(waits.items()):
        w.sort()
        tta[c] = {"count": len(w), "avg": round(sum(w) / len(w), 2),
                  "p50": round(_pct(w, 50), 2), "p95": round(_pct(w, 95), 2),
                  "max": round(w[-1], 2)}
    window = (max(admissions) - first_t) if admissions and first_t is not None else 0.0
    out: dict[str, Any] = {
        "workloads": len(state),
        "lost": {k: v.as_dict() for k, v in lost.items()},
        "lost_ltt": {k: v.as_dict() for k, v in lost_ltt.items()},
        "admissions": len(admissions),
        "admission_window_s": round(window, 1),
        "admissions_per_min": round(60 * len(admissions) / window, 1) if window else None,
        "time_to_admission_s": tta,
        "readmission_ms": _readmission(freed, admitted_in),
    }
    if cohorts:
        end = max((c.last_t or 0.0) for c in cohorts.values())
        for c in cohorts.values():
            c.advance(end)
        out["cohorts"] = {k: c.figures() for k, c in sorted(cohorts.items())}
        tot = sum(c.nominal_while_pending for c in cohorts.values())
        out["idle_pct_while_pending"] = (round(100 * sum(c.idle_while_fit for c in
                                                         cohorts.values()) / tot, 1)
                                         if tot else None)
        out["usage_pct_while_pending"] = (round(100 * sum(c.used_while_pending for c in
                                                          cohorts.values()) / tot, 1)
                                          if tot else None)
    return out


def _readmission(freed: list[tuple[str, float]],
                 admitted_in: dict[str, list[float]]) -> dict[str, Any] | None:
    """``readmission_ms`` (module docstring): per freeing finish, milliseconds to the next
    admission in its namespace; finishes never followed by one are left out."""
    gaps = []
    for ns, t in freed:
        times = admitted_in.get(ns, [])
        i = bisect.bisect_right(times, t)
        if i < len(times):
            gaps.append(1000 * (times[i] - t))
    if not gaps:
        return None
    gaps.sort()
    return {"count": len(gaps), "p50": round(_pct(gaps, 50), 1),
            "p90": round(_pct(gaps, 90), 1), "mean": round(sum(gaps) / len(gaps), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="<out>/<run> directories")
    ap.add_argument("--generator", type=Path, help="the run's generator config (quotas)")
    ap.add_argument("--until", type=float, help="only the first UNTIL seconds of each watch")
    a = ap.parse_args()
    quotas = generator_quotas(a.generator) if a.generator else None
    res = {r.name: analyse(r / "workloads.jsonl", quotas, a.until) for r in a.runs}
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()

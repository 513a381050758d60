"""Figures of a simulation (Kueue's performance-test measures) as JSON, a rich table, a plot.

``summarize(sim)`` returns a plain dict (JSON-ready)::

    {"trace": str, "workloads": int, "cluster_queue_count": int,
     "makespan_s": float,            # virtual time of the last event (last finish)
     "capacity_bound_s": float,      # work / quota of the busiest cohort (see capacity_bound)
     "cpu_s": float,                 # CPU seconds the simulation took
     "cycles": int, "decisions": {"admit", "preempt", "victims", "pending"},
     "classes": {class: {"count", "admitted", "finished", "evictions",
                         "avg_time_to_admission_s", "p50_time_to_admission_s",
                         "p95_time_to_admission_s", "max_time_to_admission_s",
                         "avg_time_to_first_admission_s", "avg_time_to_finish_s"}},
     "usage_pct": {"flavor/resource": float},         # all ClusterQueues
     "cluster_queue_classes": {class: {"usage_pct": {...}, "nominal": {...},
                                       "average": {...}, "window_s": float}},
     "cluster_queues": {name: {"cohort", "class", "nominal", "average", "peak",
                               "usage_pct", "admissions", "evictions", "last_change_s"}},
     "unadmitted": {"count": int, "first": [{"workload", "cluster_queue", "reason",
                                             "message"}]},
     "lost_to_eviction": {class | "total": {"evictions", "lost_s", "unmatched",
                                            "clamped"}}}

``lost_to_eviction``: admitted seconds lost to eviction (app.sim.lost_work): per eviction the
virtual time from the victim's latest admission to its Preempt decision, summed.

Amounts in ``nominal`` / ``average`` / ``peak`` are in display units: cores for cpu, bytes
for memory, counts otherwise. ``timelines(sim)`` gives the per-queue timeline (columns).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from app.core.quantity import is_milli
from app.core.types import ClusterQueueName, FlavorResource
from app.sim.engine import QueueTimeline, Simulator
from app.sim.lost_work import lost_work_by_class
from app.sim.trace import US, Trace

__all__ = ["capacity_bound", "plot", "print_report", "summarize", "timelines"]

_BARS = " ▁▂▃▄▅▆▇█"


def _fr(fr: FlavorResource) -> str:
    return f"{fr.flavor}/{fr.resource}"


def _display(amount: float, resource: str) -> float:
    """Amount in display units: cores for cpu (milli-CPU / 1000), else as is."""
    return amount / 1000 if is_milli(resource) else amount


def _round(x: float, digits: int = 3) -> float:
    return round(x, digits)


def _percentile(sorted_values: Sequence[float], p: float) -> float:
    if not sorted_values:
        return 0.0
    i = max(0, math.ceil(p / 100 * len(sorted_values)) - 1)
    return sorted_values[i]


def _nominals(trace: Trace) -> dict[ClusterQueueName, dict[FlavorResource, int]]:
    return {cq.name: {fr: q.nominal for fr, q in cq.quotas.items()}
            for cq in trace.cluster_queues}


def capacity_bound(trace: Trace) -> float:
    """Lower bound on the makespan from capacity alone, in seconds: for each cohort (or
    ClusterQueue without one) and resource, Σ request × pods × runtime of the Workloads
    sent to its ClusterQueues / Σ their nominal quota of that resource; the largest.
    A Workload asking more of a resource than its cohort's whole nominal quota can never run
    and adds no work."""
    group: dict[ClusterQueueName, str] = {
        cq.name: (f"cohort/{cq.cohort}" if cq.cohort else f"cq/{cq.name}")
        for cq in trace.cluster_queues}
    lq_cq = {lq.key: lq.cluster_queue for lq in trace.local_queues}
    capacity: dict[tuple[str, str], int] = {}
    for cq in trace.cluster_queues:
        for fr, q in cq.quotas.items():
            k = (group[cq.name], fr.resource)
            capacity[k] = capacity.get(k, 0) + q.nominal
    work: dict[tuple[str, str], int] = {}

    def add(lq: str, pods: int, req: Mapping[str, int], runtime_us: int, n: int) -> None:
        g = group[lq_cq[lq]]
        if any(v * pods > capacity.get((g, r), 0) for r, v in req.items() if v):
            return  # can never be admitted
        for r, v in req.items():
            work[(g, r)] = work.get((g, r), 0) + v * pods * runtime_us * n

    for c in trace.classes:
        add(c.local_queue, c.pods, c.requests, c.runtime_us, c.count)
    for a in trace.arrivals:
        add(a.local_queue, a.pods, a.requests, a.runtime_us, 1)
    bound = 0.0
    for k, w in work.items():
        cap = capacity.get(k, 0)
        if cap > 0:
            bound = max(bound, w / cap / US)
    return bound


def _usage(integral: Mapping[FlavorResource, int], window_us: int) -> dict[FlavorResource, float]:
    return {fr: (v / window_us if window_us else 0.0) for fr, v in integral.items()}


def _pct(avg: Mapping[FlavorResource, float], nominal: Mapping[FlavorResource, int]) -> dict:
    return {_fr(fr): _round(100 * avg.get(fr, 0.0) / n, 2) for fr, n in nominal.items() if n}


def _disp(values: Mapping[FlavorResource, float]) -> dict[str, float]:
    return {_fr(fr): _round(_display(v, fr.resource)) for fr, v in values.items()}


def _group_usage(tls: Iterable[QueueTimeline], nominal: Mapping[ClusterQueueName, dict]) -> dict:
    """Kueue's ClusterQueue-class figure: Σ∫usage / window / Σ nominal, window = [0, last
    change of any member]."""
    total: dict[FlavorResource, int] = {}
    nom: dict[FlavorResource, int] = {}
    window = 0
    for tl in tls:
        window = max(window, tl.last_change_us)
        for fr, v in tl.integral.items():
            total[fr] = total.get(fr, 0) + v
        for fr, v in nominal[tl.name].items():
            nom[fr] = nom.get(fr, 0) + v
    avg = _usage(total, window)
    return {"usage_pct": _pct(avg, nom), "nominal": _disp(nom), "average": _disp(avg),
            "window_s": _round(window / US)}


def summarize(sim: Simulator, *, max_unadmitted: int = 20) -> dict[str, Any]:
    """The figures of a finished simulation (see the module docstring)."""
    trace = sim.trace
    classes: dict[str, dict[str, Any]] = {}
    waits: dict[str, list[float]] = {}
    firsts: dict[str, list[float]] = {}
    finishes: dict[str, list[float]] = {}
    unadmitted = []
    for r in sim.runs.values():
        c = classes.setdefault(r.class_name, {"count": 0, "admitted": 0, "finished": 0,
                                              "evictions": 0})
        c["count"] += 1
        c["evictions"] += r.evictions
        if r.last_admitted_us is not None:
            c["admitted"] += 1
            waits.setdefault(r.class_name, []).append((r.last_admitted_us - r.created_us) / US)
            firsts.setdefault(r.class_name, []).append(
                (r.first_admitted_us - r.created_us) / US)  # type: ignore[operator]
        if r.finished_us is not None:
            c["finished"] += 1
            finishes.setdefault(r.class_name, []).append((r.finished_us - r.created_us) / US)
        else:
            unadmitted.append(r)
    for name, c in classes.items():
        w = sorted(waits.get(name, []))
        c["avg_time_to_admission_s"] = _round(sum(w) / len(w)) if w else None
        c["p50_time_to_admission_s"] = _round(_percentile(w, 50)) if w else None
        c["p95_time_to_admission_s"] = _round(_percentile(w, 95)) if w else None
        c["max_time_to_admission_s"] = _round(w[-1]) if w else None
        f1 = firsts.get(name, [])
        c["avg_time_to_first_admission_s"] = _round(sum(f1) / len(f1)) if f1 else None
        fin = finishes.get(name, [])
        c["avg_time_to_finish_s"] = _round(sum(fin) / len(fin)) if fin else None

    nominal = _nominals(trace)
    queues: dict[str, Any] = {}
    admissions: dict[ClusterQueueName, int] = {}
    evictions: dict[ClusterQueueName, int] = {}
    for r in sim.runs.values():
        if r.cluster_queue is not None:
            admissions[r.cluster_queue] = admissions.get(r.cluster_queue, 0) + r.admissions
            evictions[r.cluster_queue] = evictions.get(r.cluster_queue, 0) + r.evictions
    by_class: dict[str, list[QueueTimeline]] = {}
    for cq in trace.cluster_queues:
        tl = sim.timelines[cq.name]
        cls = trace.cq_class[cq.name]
        by_class.setdefault(cls, []).append(tl)
        avg = _usage(tl.integral, tl.last_change_us)
        queues[str(cq.name)] = {
            "cohort": cq.cohort, "class": cls, "nominal": _disp(nominal[cq.name]),
            "average": _disp(avg), "peak": _disp(tl.peak),
            "usage_pct": _pct(avg, nominal[cq.name]),
            "admissions": admissions.get(cq.name, 0), "evictions": evictions.get(cq.name, 0),
            "last_change_s": _round(tl.last_change_us / US),
        }
    overall = _group_usage(sim.timelines.values(), nominal)
    first = []
    for r in unadmitted[:max_unadmitted]:
        info = sim.cluster.workload(r.key)
        first.append({
            "workload": r.key, "cluster_queue": r.cluster_queue,
            "state": None if info is None else info.state,
            "reason": None if info is None or info.reason is None else str(info.reason),
            "message": "" if info is None else info.message,
        })
    return {
        "trace": trace.name,
        "workloads": len(sim.runs),
        "cluster_queue_count": len(trace.cluster_queues),
        "makespan_s": _round(sim.end_us / US),
        "capacity_bound_s": _round(capacity_bound(trace)),
        "cpu_s": _round(sim.cpu_seconds, 2),
        "cycles": sim.cycles,
        "decisions": {"admit": sim.admits, "preempt": sim.preemptions, "victims": sim.victims,
                      "pending": sim.pendings},
        "eviction_delay_s": sim.eviction_delay_us / US,
        "lost_to_eviction": {k: v.as_dict() for k, v in lost_work_by_class(
            {r.key: r.log for r in sim.runs.values()},
            {r.key: r.class_name for r in sim.runs.values()}).items()},
        "classes": dict(sorted(classes.items())),
        "usage_pct": overall["usage_pct"],
        "cluster_queue_classes": {k: _group_usage(v, nominal) for k, v in by_class.items()},
        "cluster_queues": queues,
        "unadmitted": {"count": len(unadmitted), "first": first},
    }


def timelines(sim: Simulator) -> dict[str, dict[str, Any]]:
    """Per ClusterQueue, columns of its samples: ``t_s``, ``usage`` {"flavor/resource":
    [display amounts]}, ``pending``, ``admitted``. Usage holds from one sample to the next."""
    out = {}
    nominals = _nominals(sim.trace)
    for name, tl in sim.timelines.items():
        frs = sorted({fr for u in tl.usage for fr in u} | set(nominals[name]))
        out[str(name)] = {
            "t_s": [t / US for t in tl.t_us],
            "usage": {_fr(fr): [_display(u.get(fr, 0), fr.resource) for u in tl.usage]
                      for fr in frs},
            "pending": list(tl.pending),
            "admitted": list(tl.admitted),
        }
    return out


# ---- time buckets (sparklines, plots) -------------------------------------------------------

def bucket_means(t_us: Sequence[int], values: Sequence[float], end_us: int, n: int) -> list[float]:
    """Time-weighted mean of a step function (``values[i]`` holds from ``t_us[i]`` to the next
    sample) over ``n`` equal buckets of [0, ``end_us``]."""
    if end_us <= 0 or not t_us:
        return [0.0] * n
    width = end_us / n
    acc = [0.0] * n
    for i, (t0, v) in enumerate(zip(t_us, values, strict=True)):
        t1 = t_us[i + 1] if i + 1 < len(t_us) else end_us
        if not v or t1 <= t0:
            continue
        b = min(int(t0 / width), n - 1)
        while t0 < t1 and b < n:
            edge = min(t1, (b + 1) * width)
            acc[b] += v * (edge - t0)
            t0, b = edge, b + 1
    return [a / width for a in acc]


def sparkline(values: Sequence[float], top: float) -> str:
    """Unicode bars for ``values`` scaled to ``top``."""
    if top <= 0:
        return " " * len(values)
    steps = len(_BARS) - 1
    return "".join(_BARS[min(steps, max(0, math.ceil(v / top * steps)))] for v in values)


def _queue_series(sim: Simulator, name: ClusterQueueName, nominal: Mapping[FlavorResource, int],
                  n: int) -> tuple[list[float], list[float]]:
    tl = sim.timelines[name]
    nom = sum(nominal.values()) or 1
    usage = [sum(u.get(fr, 0) for fr in nominal) * 100 / nom for u in tl.usage]
    return (bucket_means(tl.t_us, usage, sim.end_us, n),
            bucket_means(tl.t_us, tl.pending, sim.end_us, n))


# ---- rich ------------------------------------------------------------------------------------

def print_report(sim: Simulator, summary: Mapping[str, Any], *, max_queues: int = 40,
                 width: int = 30, console: Any = None) -> None:
    """Print the summary, per-class and per-ClusterQueue tables (with usage and pending
    sparklines over the run) with rich."""
    from rich.console import Console
    from rich.table import Table

    con = console or Console()
    s = summary
    head = Table(title=f"pykueue simulate: {s['trace']}", show_header=False)
    head.add_row("Workloads / ClusterQueues", f"{s['workloads']} / {s['cluster_queue_count']}")
    head.add_row("Makespan (virtual)" if not s["unadmitted"]["count"]
                 else "Virtual time at the end (not all finished)", f"{s['makespan_s']:.3f} s")
    head.add_row("Capacity bound", f"{s['capacity_bound_s']:.3f} s")
    head.add_row("Usage of nominal quota",
                 ", ".join(f"{k} {v:.1f}%" for k, v in s["usage_pct"].items()) or "-")
    d = s["decisions"]
    head.add_row("Decisions", f"{d['admit']} admit, {d['preempt']} preempt "
                              f"({d['victims']} victims), {d['pending']} pending")
    head.add_row("Cycles / CPU", f"{s['cycles']} / {s['cpu_s']:.2f} s")
    if s["unadmitted"]["count"]:
        head.add_row("Never finished", str(s["unadmitted"]["count"]))
    con.print(head)

    ct = Table(title="Workload classes (times in seconds; admission = last, as Kueue)")
    for col in ("class", "count", "finished", "avg to admission", "p50", "p95", "max",
                "avg to finish", "evictions", "lost s"):
        ct.add_column(col, justify="left" if col == "class" else "right")

    def f(v: float | None) -> str:
        return "-" if v is None else f"{v:.3f}"

    for name, c in s["classes"].items():
        ct.add_row(name, str(c["count"]), str(c["finished"]), f(c["avg_time_to_admission_s"]),
                   f(c["p50_time_to_admission_s"]), f(c["p95_time_to_admission_s"]),
                   f(c["max_time_to_admission_s"]), f(c["avg_time_to_finish_s"]),
                   str(c["evictions"]),
                   f((s.get("lost_to_eviction", {}).get(name) or {}).get("lost_s")))
    con.print(ct)

    qt = Table(title="ClusterQueues (amounts in cores for cpu, else as counted)")
    for col in ("ClusterQueue", "cohort", "nominal", "avg usage", "peak", "admitted",
                "evicted"):
        qt.add_column(col, justify="left" if col in ("ClusterQueue", "cohort") else "right")
    tt = Table(title=f"Timeline, 0 .. {s['makespan_s']:.1f} s in {width} steps")
    tt.add_column("ClusterQueue")
    tt.add_column("usage (% of nominal, full = 100%)", no_wrap=True)
    tt.add_column("pending (full = its peak)", no_wrap=True)
    names = list(s["cluster_queues"])
    nominals = _nominals(sim.trace)
    for name in names[:max_queues]:
        q = s["cluster_queues"][name]
        qt.add_row(
            name, q["cohort"] or "-", ", ".join(f"{v:g}" for v in q["nominal"].values()),
            ", ".join(f"{v:.1f}%" for v in q["usage_pct"].values()),
            ", ".join(f"{v:g}" for v in q["peak"].values()) or "0",
            str(q["admissions"]), str(q["evictions"]),
        )
        cq = ClusterQueueName(name)
        usage, pending = _queue_series(sim, cq, nominals[cq], width)
        tt.add_row(name, sparkline(usage, max(100.0, max(usage, default=0))),
                   sparkline(pending, max(pending, default=0)))
    if len(names) > max_queues:
        qt.caption = tt.caption = f"{len(names) - max_queues} more ClusterQueues in --json"
    con.print(qt)
    con.print(tt)
    shown = s["unadmitted"]["first"][:5]
    for u in shown:
        con.print(f"[yellow]not finished[/]: {u['workload']} ({u['state']}, {u['reason']}): "
                  f"{u['message']}")
    if s["unadmitted"]["count"] > len(shown):
        con.print(f"... and {s['unadmitted']['count'] - len(shown)} more not finished "
                  f"(--json lists {len(s['unadmitted']['first'])})")


# ---- matplotlib ------------------------------------------------------------------------------

def plot(sim: Simulator, path: str, *, points: int = 400) -> None:
    """Draw usage (% of nominal) and pending Workloads over time into ``path`` (PNG).

    Up to 8 ClusterQueues are drawn one by one; more are grouped by cohort. Needs
    matplotlib (``pip install 'pykueue[plot]'``); raises ``ImportError`` without it.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    trace = sim.trace
    nominals = _nominals(trace)
    groups: dict[str, list[ClusterQueueName]] = {}
    if len(trace.cluster_queues) <= 8:
        for cq in trace.cluster_queues:
            groups[str(cq.name)] = [cq.name]
    else:
        for cq in trace.cluster_queues:
            groups.setdefault(f"cohort {cq.cohort}" if cq.cohort else "no cohort",
                              []).append(cq.name)
    end = max(sim.end_us, 1)
    xs = [(i + 0.5) * end / points / US for i in range(points)]
    fig, (ax_u, ax_p) = plt.subplots(2, 1, sharex=True, figsize=(11, 7))
    for label, members in groups.items():
        usage = [0.0] * points
        pending = [0.0] * points
        nom = 0
        for name in members:
            tl = sim.timelines[name]
            nominal = nominals[name]
            nom += sum(nominal.values())
            raw = [sum(u.get(fr, 0) for fr in nominal) for u in tl.usage]
            for i, v in enumerate(bucket_means(tl.t_us, raw, end, points)):
                usage[i] += v
            for i, v in enumerate(bucket_means(tl.t_us, tl.pending, end, points)):
                pending[i] += v
        ax_u.plot(xs, [100 * u / (nom or 1) for u in usage], label=label, linewidth=1)
        ax_p.plot(xs, pending, label=label, linewidth=1)
    ax_u.set_ylabel("usage, % of nominal quota")
    ax_p.set_ylabel("pending Workloads")
    ax_p.set_xlabel("virtual time (s)")
    ax_u.set_title(f"pykueue simulate: {trace.name} (makespan {sim.end_us / US:.1f} s)")
    ax_u.grid(alpha=0.3)
    ax_p.grid(alpha=0.3)
    ax_u.legend(fontsize="small", ncol=2, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)

"""The cost of preemption as work thrown away (issue 33): admitted seconds lost to eviction.

For each eviction of a Workload, the time from its latest admission to that eviction; summed
over the Workload's life, then over a class of Workloads. A Workload admitted at 10 s, evicted
at 14 s, re-admitted at 20 s, evicted at 21 s and re-admitted at 30 s then finished has
2 evictions and 4 + 1 = 5 admitted seconds lost.

Pure (no I/O, no clock): the callers give each Workload's log of ``(kind, time_s)`` in the
order things happened, ``kind`` one of ``"admitted"`` (quota reserved: the Workload starts
holding quota), ``"evicted"`` (Kueue v0.17.1's ``Evicted=True``: the run is lost) and
``"finished"``. Used by ``bench/versus.py`` (from the Workloads' watch events) and by the
simulator's summary (from its own event log, ``app.sim.engine``).

Edge cases, each counted so a report can say how much it trusts the figure:

* an eviction after ``finished`` (the controller preempted a Workload whose Finished
  condition its cache had not seen yet: both Kueue v0.17.1 and pykueue do it under Kueue's
  performance runner): the eviction counts, it adds no seconds, nothing was thrown away
  (``after_finish``);
* an eviction with no admission open otherwise (a watch that missed the admission, or a
  second ``Evicted`` without a re-admission in between): the eviction counts, it adds no
  seconds (``unmatched``);
* an eviction timed before its admission (two clocks, or watch events that arrived out of
  order): the eviction counts, it adds 0 seconds (``clamped``), never a negative amount;
* an admission while one is open (a re-admission whose eviction was never seen): the later
  admission replaces the earlier (the figure uses the *latest* admission);
* ``finished`` closes the open admission (its seconds were not lost).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["ADMITTED", "EVICTED", "FINISHED", "LostWork", "lost_work", "lost_work_by_class"]

ADMITTED, EVICTED, FINISHED = "admitted", "evicted", "finished"


@dataclass(frozen=True, slots=True)
class LostWork:
    """Evictions and the admitted seconds they threw away.

    ``evictions``: every eviction in the log(s); ``lost_s``: Σ (eviction - latest
    admission) in seconds, never negative; ``unmatched``: evictions with no admission open
    (no seconds added); ``clamped``: evictions timed before their admission (0 seconds
    added); ``after_finish``: evictions of a finished Workload (no seconds added)."""

    evictions: int = 0
    lost_s: float = 0.0
    unmatched: int = 0
    clamped: int = 0
    after_finish: int = 0

    def __add__(self, other: LostWork) -> LostWork:
        return LostWork(self.evictions + other.evictions, self.lost_s + other.lost_s,
                        self.unmatched + other.unmatched, self.clamped + other.clamped,
                        self.after_finish + other.after_finish)

    def as_dict(self, digits: int = 3) -> dict[str, float | int]:
        """JSON-ready: ``{"evictions", "lost_s", "unmatched", "clamped", "after_finish"}``."""
        return {"evictions": self.evictions, "lost_s": round(self.lost_s, digits),
                "unmatched": self.unmatched, "clamped": self.clamped,
                "after_finish": self.after_finish}


def lost_work(log: Iterable[tuple[str, float]]) -> LostWork:
    """One Workload's evictions and lost admitted seconds from its log of ``(kind, time_s)``
    (see the module docstring). Raises ``ValueError`` for an unknown kind."""
    open_at: float | None = None
    finished = False
    evictions = unmatched = clamped = after_finish = 0
    lost = 0.0
    for kind, t in log:
        if kind == ADMITTED:
            open_at, finished = t, False
        elif kind == EVICTED:
            evictions += 1
            if open_at is None and finished:
                after_finish += 1
            elif open_at is None:
                unmatched += 1
            elif t < open_at:
                clamped += 1
            else:
                lost += t - open_at
            open_at = None
        elif kind == FINISHED:
            open_at, finished = None, True
        else:
            raise ValueError(f"unknown event kind {kind!r} (expected {ADMITTED}, {EVICTED} "
                             f"or {FINISHED})")
    return LostWork(evictions, lost, unmatched, clamped, after_finish)


def lost_work_by_class(logs: Mapping[str, Iterable[tuple[str, float]]],
                       class_of: Mapping[str, str]) -> dict[str, LostWork]:
    """``lost_work`` of each Workload's log (keyed by any id), summed per class
    (``class_of[id]``, ``"?"`` when missing) and in ``"total"``."""
    out: dict[str, LostWork] = {}
    total = LostWork()
    for key, log in logs.items():
        lw = lost_work(log)
        cls = class_of.get(key, "?")
        out[cls] = out.get(cls, LostWork()) + lw
        total = total + lw
    out = dict(sorted(out.items()))
    out["total"] = total
    return out

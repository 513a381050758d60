"""How often the controllers rewrite what they have already said, to keep API writes per
admission low: pure rules, no I/O.

Pending messages. The core's QuotaReserved=False message carries live numbers ("6 requested,
2 available ... cohort ai: 14 of 16 in use") and the loop appends the ETA tail
(``position 3, expected start in ~12m``), so on a busy cohort every admission changes the
message of every head. Kueue v0.17.1 rewrites the condition only when its message changes
(``UnsetQuotaReservationWithCondition``); pykueue keeps that, and paces the changes that say
nothing new:

* ``MATERIAL``: the condition is not yet QuotaReserved=False, its reason changed, or the words
  of the message changed (``skeleton``: the core message without its ETA tail, every number
  and quantity masked) -> written at once;
* ``REFRESH``: only numbers or the ETA tail changed -> written at most once per
  ``Settings.scheduling.pending_message_refresh_seconds`` per Workload, the newest text when
  the interval ends (``PendingMessages._write_pending``);
* ``SAME``: the message is the one stored.

Events about a pending Workload follow the material changes only (one Warning Event per
reason and wording, not per number).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

MATERIAL, REFRESH, SAME = "material", "refresh", "same"

# A number with an optional fraction, exponent and Kubernetes quantity suffix ("500m",
# "1.5Gi", "2e3", "12"): masked as one token so "500m" -> "2" is a number change.
_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?:[KMGTPE]i?|[kmun])?")
# The loop's ETA tail (``app.controllers.pending_messages.eta_suffix``) after the core message.
_TAIL = re.compile(r"; (?:position \d+|expected start |start time unknown)")


def split_tail(message: str) -> tuple[str, str]:
    """(core message, ETA tail) of a pending message as the loop writes it (``core; tail``);
    the tail is empty when there is none."""
    m = _TAIL.search(message)
    return (message[:m.start()], message[m.start() + 2:]) if m else (message, "")


def skeleton(message: str) -> str:
    """The words of a pending message: the core message without its ETA tail, every number
    replaced by ``#``. Two messages with the same skeleton say the same thing about why the
    Workload waits."""
    return _NUMBER.sub("#", split_tail(message)[0])


def pending_change(current: Mapping[str, Any] | None, reason: str, message: str) -> str:
    """How QuotaReserved=False ``reason`` / ``message`` differs from ``current`` (the
    Workload's QuotaReserved condition, None when absent): ``MATERIAL``, ``REFRESH`` or
    ``SAME`` (see the module doc)."""
    if current is None or current.get("status") != "False" or current.get("reason") != reason:
        return MATERIAL
    old = str(current.get("message") or "")
    if old == message:
        return SAME
    return REFRESH if skeleton(old) == skeleton(message) else MATERIAL


class RefreshCredit:
    """CPU credit of a background refresher that gives way to the rest of the process
    (the ETA refresher: ``PendingMessages.run_refresher``).

    Credit (seconds of computing) is earned at ``share`` x what the rest of the process
    leaves idle, never below ``share x floor``: over each interval between two ``earn``
    calls, ``other`` = (process CPU seconds - the refresher's own spent seconds) / wall
    seconds, clamped to [0, 1], and the rate is ``share x max(floor, 1 - other)``. On a
    quiet controller that is about ``share`` of the time; while admissions keep it busy (an
    admission storm, when every ETA is stale within seconds anyway) it falls to
    ``share x floor``, so estimates never take CPU from admissions beyond that. At most
    ``cap`` seconds are banked. Pure: the caller passes the clocks.

    ``share`` (0, 1], ``floor`` [0, 1], ``cap`` seconds; ``ValueError`` otherwise."""

    def __init__(self, share: float, cap: float, *, floor: float = 0.25,
                 wall: float = 0.0, cpu: float = 0.0) -> None:
        if not 0 < share <= 1 or not 0 <= floor <= 1 or cap < 0:
            raise ValueError(f"share {share} must be in (0, 1], floor {floor} in [0, 1], "
                             f"cap {cap} >= 0")
        self.share, self.floor, self.cap = share, floor, cap
        self.credit = cap
        self.rate = share
        self._wall, self._cpu, self._own = wall, cpu, 0.0

    def earn(self, wall: float, cpu: float) -> float:
        """Add the credit earned since the last call (``wall``: a monotonic clock, ``cpu``:
        the process's CPU seconds, e.g. ``time.process_time()``); returns the credit."""
        dt = wall - self._wall
        if dt > 0:
            other = (cpu - self._cpu - self._own) / dt
            self.rate = self.share * max(self.floor, 1.0 - min(1.0, max(0.0, other)))
            self.credit = min(self.cap, self.credit + self.rate * dt)
            self._wall, self._cpu, self._own = wall, cpu, 0.0
        return self.credit

    def spend(self, seconds: float) -> None:
        """The refresher computed ``seconds`` (not counted as the rest's CPU)."""
        self.credit -= seconds
        self._own += seconds

    def seconds_until(self, amount: float) -> float:
        """Seconds until ``amount`` of credit (at most ``cap``: no more is ever banked) is
        banked at the current rate (0: it is; ``inf`` at a zero rate, ``floor`` 0 on a busy
        process)."""
        short = min(amount, self.cap) - self.credit
        if short <= 0:
            return 0.0
        return short / self.rate if self.rate > 0 else math.inf

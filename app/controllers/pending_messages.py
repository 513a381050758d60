"""The pending Workloads' QuotaReserved=False messages and their ETA (Kueue v1beta2
Workload status: QuotaReserved=False with the scheduler's reason and message,
``UnsetQuotaReservationWithCondition``).

Input: the core's ``Pending`` decisions (``offer``), coalesced per Workload (the latest wins)
in a ``FairMap`` taken in namespace turns, so a namespace's flood of pending Workloads does
not hold back another team's message. Output: a ``workloads/status`` update per message
change, written only when different from the object's, plus a Warning Event on the Job
(``OwnerNotifier.owner_object``) when the reason or the wording changed.

The message ends with the Workload's place and ETA (``position 3, expected start in ~12m``:
``eta_suffix``, ``app.core.eta``); the position is given for the first ``ETA_POSITIONS`` of
a ClusterQueue only and the ETA text is coarsely rounded. Pacing
(``app.controllers.pacing``): a change of numbers or of the ETA tail alone is written at most
every ``Settings.scheduling.pending_message_refresh_seconds`` per Workload (the newest text
when the interval ends); a Workload's first message waits at most
``pending_message_eta_grace_seconds`` for its first ETA when its cohort's run may start now.

ETA (``Settings.scheduling.eta_enabled``): ``eta``, an ``EtaBoard``, answers per cohort,
cached; finished Workloads teach its ``RuntimeModel`` (admission to Finished, seconds, per
LocalQueue and shape: ``learn_runtime``) and new Workloads its ``ArrivalModel``. The
refresher recomputes every ``eta_message_seconds`` (round robin over ClusterQueues, leader
only) and, between periods, the ClusterQueues where a Workload became pending, once their
cohort's run may start (at most every ``eta_min_interval_seconds``). Both draw on one CPU
budget (``pacing.RefreshCredit``): ``eta_refresh_share`` of what the rest of the controller
leaves idle.

Write errors are caught and logged; a 409 retries on the object the watch brings.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Any

from app.controllers.decision_writer import OwnerNotifier
from app.controllers.pacing import REFRESH, RefreshCredit, pending_change, skeleton
from app.controllers.write_tasks import WorkloadWrites
from app.core.decisions import Pending, PendingReason
from app.core.eta import UNKNOWN, ArrivalModel, EtaBoard, RuntimeModel, eta_text
from app.core.scheduling_cycle import Scheduler
from app.core.types import ClusterQueueName, WorkloadKey
from app.core.workload import Workload
from app.kube.aio import wait_event
from app.kube.client import WORKLOADS
from app.kube.context import WL, Context
from app.kube.errors import Conflict, from_exception
from app.kube.events import WARNING
from app.kube.workqueue import FairMap
from app.wire.fields import Obj
from app.wire.workload_status import (
    QUOTA_RESERVED,
    condition,
    has_admission,
    is_finished,
    parse_time,
    with_pending,
)

log = logging.getLogger(__name__)


# Pending messages name the position of the first ETA_POSITIONS Workloads of a ClusterQueue;
# beyond, every admission would shift every message (one status write each).
ETA_POSITIONS = 10


def eta_suffix(position: int, eta: Any, now: float) -> str:
    """The tail of a pending message: ``position 3, expected start in ~12m`` (1-based
    position, given below ``ETA_POSITIONS``; the ETA text of ``app.core.eta.eta_text``,
    left out when unknown). Empty when there is nothing to say."""
    parts = []
    if position < ETA_POSITIONS:
        parts.append(f"position {position + 1}")
    if eta is not None and eta.confidence != UNKNOWN:
        parts.append(eta_text(eta, now))
    return ", ".join(parts)


class PendingMessages:
    """The pending-message writer and the ETA refresher of ``cluster`` (module doc).
    Counters: ``pending_writes``, ``pending_deferred`` (refreshes held back by pacing),
    ``eta_message_refreshes``."""

    def __init__(self, ctx: Context, cluster: Scheduler, jobs: OwnerNotifier,
                 writes: WorkloadWrites) -> None:
        self.ctx = ctx
        self.cluster = cluster
        self.jobs = jobs
        self.writes = writes
        s = ctx.settings.scheduling
        self.eta: EtaBoard | None = None
        if s.eta_enabled:
            window = s.eta_arrivals_window_seconds
            self.eta = EtaBoard(RuntimeModel(), min_interval=s.eta_min_interval_seconds,
                                budget_ms=s.eta_budget_ms, clock=time.perf_counter,
                                arrivals=ArrivalModel(window_seconds=window)
                                if window > 0 else None, ranges=s.eta_ranges)
        self.pending_writes = 0
        self.pending_deferred = 0
        self.eta_message_refreshes = 0
        # Pending decisions to write (the latest per Workload), taken in namespace turns.
        self._pending: FairMap[Pending] = FairMap()
        self._pending_kick = asyncio.Event()
        # Per pending Workload: the core's last Pending (to rewrite with a new ETA), the ETA
        # tail last put in its message, the (reason, wording) last announced by an Event,
        # when its pending message was last written, and when a refresh held back by
        # ``pending_message_refresh_seconds`` is due.
        self._core_pending: dict[WorkloadKey, Pending] = {}
        self._eta_tail: dict[WorkloadKey, str] = {}
        self._evented: dict[WorkloadKey, tuple[str, str]] = {}
        self._pending_written: dict[WorkloadKey, float] = {}
        self._deferred: dict[WorkloadKey, float] = {}
        # When the core first said each Workload is pending (its first message's ETA grace).
        self._pending_since: dict[WorkloadKey, float] = {}
        # ClusterQueues where a Workload became pending since their ETA run: the refresher
        # computes them as soon as the board allows (``refresh_eta_arrivals``), woken by
        # ``_eta_kick``, so a new Workload is not "not computed yet" for a whole period.
        self._eta_arrived: set[ClusterQueueName] = set()
        self._eta_kick = asyncio.Event()
        # The refresher's own computing in the refresh under way (seconds): a stopwatch
        # paused while it yields (``_eta_yield``), so what other coroutines run meanwhile
        # is neither charged to its credit nor hidden from ``RefreshCredit.earn``.
        self._eta_own = 0.0
        self._eta_mark = 0.0

    # ------------------------------------------------------------------ input

    def offer(self, d: Pending) -> None:
        """The core's latest ``Pending`` decision for ``d.workload``: queue its message."""
        if d.workload not in self._core_pending:
            self._pending_since.setdefault(d.workload, self.ctx.clock())
            if d.cluster_queue is not None and self.eta is not None:
                self._eta_arrived.add(d.cluster_queue)  # new here: its ETA soon
                self._eta_kick.set()
        self._core_pending[d.workload] = d
        self._pending[d.workload] = d
        self._pending_kick.set()

    def forget(self, key: WorkloadKey) -> None:
        """``key`` is no longer pending (admitted, or about to be): its message, ETA tail
        and pacing end here; a message already queued is still judged when taken."""
        self._core_pending.pop(key, None)
        self._eta_tail.pop(key, None)
        self._evented.pop(key, None)
        self._pending_written.pop(key, None)
        self._deferred.pop(key, None)
        self._pending_since.pop(key, None)

    def drop(self, key: WorkloadKey) -> None:
        """``key`` finished or is gone: ``forget`` it, and no queued message."""
        self._pending.pop(key, None)
        self.forget(key)

    def observe_arrival(self, wl: Workload) -> None:
        """A new pending Workload: one more arrival of its class (the ETA's
        ``ArrivalModel``)."""
        if self.eta is not None and self.eta.arrivals is not None:
            self.eta.arrivals.observe(wl)

    def learn_runtime(self, key: WorkloadKey, obj: Obj) -> None:
        """Teach the ETA's RuntimeModel how long ``key`` ran: QuotaReserved=True to
        Finished=True (the condition times; now when Finished has none)."""
        wl = self.cluster.domain_workload(key)
        if self.eta is None or wl is None or wl.quota_reserved_at is None:
            return
        fin = condition(obj, "Finished") or {}
        end = parse_time(fin.get("lastTransitionTime")) or self.ctx.clock()
        self.eta.runtimes.observe(wl, end - wl.quota_reserved_at)

    # ------------------------------------------------------------------ ETA

    def refresh_eta_messages(self, names: list[ClusterQueueName] | None = None) -> int:
        """Recompute the ETA tails of pending messages of ClusterQueues ``names`` (all when
        None; cohorts cached by the board) and queue a rewrite of each Workload whose tail
        changed; returns how many were queued. Workloads the core has not yet given a
        Pending decision are left alone."""
        if self.eta is None:
            return 0
        now, queued = self.ctx.clock(), 0
        c = self.cluster
        if names is None:
            self._forget_admitted()
            names = c.cluster_queue_names()
        for name in names:
            entries = c.pending_workloads(name)
            if not entries:
                continue
            run = self.eta.for_cluster_queue(c, name, now)
            for e in entries:
                d = self._core_pending.get(e.workload)
                if d is None:
                    continue
                tail = eta_suffix(e.position, run.etas.get(e.workload), now)
                if tail != self._eta_tail.get(e.workload, ""):
                    self._eta_tail[e.workload] = tail
                    if e.workload not in self._pending:
                        self._pending[e.workload] = d
                        queued += 1
        if queued:
            self.eta_message_refreshes += queued
            self._pending_kick.set()
        return queued

    def _forget_admitted(self) -> None:
        if self.eta is not None:
            self.eta.forget_missing(self.cluster.cluster_queue_names())
        for key in list(self._core_pending):
            info = self.cluster.workload(key)
            if info is None or info.state != "pending":
                self.forget(key)  # admitted since (or gone)

    async def run_refresher(self) -> None:
        """Every ``eta_message_seconds``: ``refresh_eta_period`` (leader only); between
        periods, woken by a new pending Workload: ``refresh_eta_arrivals`` once its
        cohort's run may start (``EtaBoard.due_at``: at most every
        ``eta_min_interval_seconds``). Both draw on one budget
        (``app.controllers.pacing.RefreshCredit``): ``eta_refresh_share`` of what the rest
        of the controller leaves idle (at least a quarter of the share; at most one
        period's worth banked), so arrivals never make the refresher compute more than the
        period alone may, and an admission storm keeps most of the CPU. Runs until
        cancelled."""
        sched = self.ctx.settings.scheduling
        await self.ctx.informers.wait_synced()
        loop = asyncio.get_running_loop()
        share, period = sched.eta_refresh_share, sched.eta_message_seconds
        budget = RefreshCredit(share, share * period, wall=loop.time(), cpu=time.process_time())
        start = 0
        next_period = loop.time() + period
        arrivals_at: float | None = None  # loop time an owed queue is due (None: look now)
        while True:
            now = loop.time()
            credit = budget.earn(now, time.process_time())
            wait = next_period - now
            if self._eta_arrived:
                # Owed a refresh: when its run may start and a slice's budget is earned.
                need = budget.seconds_until(sched.eta_budget_ms / 1000.0)
                due = 0.0 if arrivals_at is None else arrivals_at - now
                wait = min(wait, max(need, due))
            if wait > 0:
                self._eta_kick.clear()
                await wait_event(self._eta_kick, wait)
                if self._eta_kick.is_set():
                    arrivals_at = None  # a new arrival: see when it is due
                continue
            if not self.ctx.may_write:
                self._eta_arrived.clear()
                next_period = loop.time() + period
                continue
            self._eta_own, self._eta_mark = 0.0, time.perf_counter()
            try:
                if loop.time() >= next_period:
                    next_period = loop.time() + period
                    start = await self.refresh_eta_period(start, credit)
                if self._eta_arrived:
                    wait_s = await self.refresh_eta_arrivals(credit - self._eta_spent())
                    arrivals_at = None if wait_s is None else loop.time() + wait_s
            except Exception:  # noqa: BLE001 - an ETA bug must not stop the messages
                log.exception("ETA refresh failed")
                self._eta_arrived.clear()
            budget.spend(self._eta_spent())

    def _eta_spent(self) -> float:
        """Seconds the refresh under way has computed so far (its yields left out)."""
        return self._eta_own + time.perf_counter() - self._eta_mark

    async def _eta_yield(self) -> None:
        """Let other coroutines run between ETA slices; their time is not the refresher's."""
        self._eta_own += time.perf_counter() - self._eta_mark
        try:
            await asyncio.sleep(0)
        finally:
            self._eta_mark = time.perf_counter()

    async def refresh_eta_period(self, start: int, budget_s: float) -> int:
        """One refresh: from the ``start``-th ClusterQueue on (round robin), advance each
        cohort's ETA run in slices until it is whole, then rewrite that queue's messages;
        stop once ``budget_s`` seconds of computing are spent (the run resumes next time).
        Yields to the event loop between slices. Returns where the next refresh starts."""
        self._forget_admitted()
        names = self.cluster.cluster_queue_names()
        if not names:
            return 0
        spent = 0.0
        for i in range(len(names)):
            name = names[(start + i) % len(names)]
            whole, spent = await self._eta_whole(name, spent, budget_s)
            if not whole:
                return (start + i) % len(names)  # this queue first next time
            if self.eta.due_at(self.cluster, name, self.ctx.clock()) is None:
                self._eta_arrived.discard(name)  # its run covers every Workload there
            self.refresh_eta_messages([name])
            await self._eta_yield()
            if spent >= budget_s:
                return (start + i + 1) % len(names)
        return start

    async def refresh_eta_arrivals(self, budget_s: float) -> float | None:
        """The ClusterQueues where a Workload became pending since their last ETA run
        (``offer``): each whose cohort's run may start now (``EtaBoard.due_at``) is computed
        in slices until its answer covers the state as it is (a run that was going when the
        Workload came is finished first, then a new one started once the board allows),
        its messages rewritten after each whole run; ``budget_s`` seconds spent: the rest
        stays owed. Returns the seconds until the next owed queue is due (0: owed now,
        out of budget), None when none is owed. Nothing is computed without budget."""
        spent, wait = 0.0, None
        for name in sorted(self._eta_arrived):
            while True:
                now = self.ctx.clock()
                due = self.eta.due_at(self.cluster, name, now)
                if due is None:
                    self._eta_arrived.discard(name)
                    self.refresh_eta_messages([name])
                    break
                if due > now or spent >= budget_s:
                    left = max(0.0, due - now)
                    wait = left if wait is None else min(wait, left)
                    break
                whole, spent = await self._eta_whole(name, spent, budget_s)
                if whole:
                    self.refresh_eta_messages([name])
        return wait

    async def _eta_whole(self, name: ClusterQueueName, spent: float,
                         budget_s: float) -> tuple[bool, float]:
        """Advance ``name``'s cohort's ETA run one slice at a time (yielding between them)
        until it is whole or ``spent`` reaches ``budget_s`` (at least one slice); returns
        (whole, spent)."""
        while True:
            t0 = time.perf_counter()
            whole = self.eta.advance(self.cluster, name, self.ctx.clock())
            spent += time.perf_counter() - t0
            if whole or spent >= budget_s:
                return whole, spent
            await self._eta_yield()

    # ------------------------------------------------------------------ writing

    async def run_writer(self) -> None:
        """Write coalesced QuotaReserved=False conditions (latest decision per Workload), and
        the refreshes held back by ``pending_message_refresh_seconds`` when they fall due.
        Runs until cancelled."""
        ctx = self.ctx
        writes = self.writes
        while True:
            if not self._pending:
                self._pending_kick.clear()
                wait = self._next_deferred()
                await wait_event(self._pending_kick, wait)
                self.requeue_deferred()
                if not self._pending:
                    continue
            key, d = self._pending.pop_next()
            if not ctx.may_write:
                continue
            try:
                async with writes.lock(key):
                    await self._write_pending(key, d)
            except asyncio.CancelledError:
                raise
            except Conflict:
                if key not in self._pending:
                    self._pending[key] = d  # retry on the fresh object the watch brings
                await asyncio.sleep(0.05)
            except Exception as exc:  # noqa: BLE001
                log.info("pending status of %s not written: %s", key, from_exception(exc))
            finally:
                writes.release(key)

    def _next_deferred(self) -> float | None:
        """Seconds until the first held-back pending refresh is due (None: none)."""
        if not self._deferred:
            return None
        return max(0.0, min(self._deferred.values()) - self.ctx.clock())

    def requeue_deferred(self) -> int:
        """Queue for writing the held-back pending refreshes that are due (their newest core
        decision); returns how many."""
        if not self._deferred:
            return 0
        now, n = self.ctx.clock(), 0
        for key, due in list(self._deferred.items()):
            if due > now:
                continue
            del self._deferred[key]
            d = self._core_pending.get(key)
            if d is not None and key not in self._pending:
                self._pending[key] = d
                n += 1
        return n

    def _await_first_eta(self, key: WorkloadKey, d: Pending, obj: Obj, now: float) -> bool:
        """Hold back ``key``'s first QuotaReserved=False message (none written yet) for at
        most ``pending_message_eta_grace_seconds`` after it became pending, when its cohort's
        ETA run may start now: the refresher then queues the message again with its ETA tail
        (``refresh_eta_messages``), or the grace ends and it is written without. Returns
        whether it was held back. Not for a cohort whose run must wait for
        ``eta_min_interval_seconds`` (a burst): its messages go out at once."""
        grace = self.ctx.settings.scheduling.pending_message_eta_grace_seconds
        since = self._pending_since.get(key)
        current = condition(obj, QUOTA_RESERVED)
        if self.eta is None or grace <= 0 or since is None or now >= since + grace \
                or d.cluster_queue is None or d.cluster_queue not in self._eta_arrived \
                or (current is not None and current.get("status") == "False"):
            return False
        if self.eta.due_at(self.cluster, d.cluster_queue, now) != now:
            return False
        self._deferred[key] = since + grace
        return True

    async def _write_pending(self, key: WorkloadKey, d: Pending) -> None:
        """QuotaReserved=False for ``d``: written at once when it changes the condition
        materially, a refresh (numbers, ETA tail) at most every
        ``pending_message_refresh_seconds`` per Workload (``app.controllers.pacing``); a
        Warning Event when the reason or the wording is new. Raises the client's
        ``ApiError`` (``Conflict``: retried by ``run_writer``)."""
        ctx = self.ctx
        obj = ctx.store(WL).get(key)
        info = self.cluster.workload(key)
        if obj is None or has_admission(obj) or is_finished(obj) or info is None \
                or info.state != "pending" or str(key) in ctx.inflight:
            return
        reason = d.reason.condition_reason
        tail = self._eta_tail.get(key, "")
        message = f"{d.message}; {tail}" if tail else d.message
        queued = d.reason not in (PendingReason.CLUSTER_QUEUE_INACTIVE,
                                  PendingReason.LOCAL_QUEUE_STOPPED)
        now = ctx.clock()
        body, changed = with_pending(obj, reason, message, now, queued=queued)
        if not changed:
            self._deferred.pop(key, None)
            return
        if not tail and queued and self._await_first_eta(key, d, obj, now):
            return
        if pending_change(condition(obj, QUOTA_RESERVED), reason, message) == REFRESH:
            due = self._pending_written.get(key, -math.inf) \
                + ctx.settings.scheduling.pending_message_refresh_seconds
            if now < due:
                if key not in self._deferred:
                    self.pending_deferred += 1
                self._deferred[key] = due
                return
        out = await ctx.client.replace(WORKLOADS, body, subresource="status")
        ctx.store(WL).put(out)
        self.pending_writes += 1
        self._pending_written[key] = now
        self._deferred.pop(key, None)
        said = (reason, skeleton(d.message))
        if self._evented.get(key) == said:
            return  # only numbers or the ETA tail changed: no new Event
        self._evented[key] = said
        target = self.jobs.owner_object(obj) or obj
        ctx.recorder.emit(target, WARNING, reason, d.message)

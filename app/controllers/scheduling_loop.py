"""The scheduling loop: runs the core's cycle (``Scheduler.schedule(now)``) and hands each
decision to the part that writes it (Kueue's scheduler loop, ``pkg/scheduler/scheduler.go``).

Parts, each with its own module: ``InformerFeed`` (the informer handlers feeding the core),
``DecisionWriter`` (admissions, evictions, deactivations), ``PendingMessages``
(QuotaReserved=False messages and their ETA), ``DraVerdicts`` (DRA Inadmissible / resolved
writes), ``Lifecycle`` (admission checks, waitForPodsReady) and ``WorkloadWrites`` (one lock
per Workload, the in-flight cap). ``SchedulerLoop`` builds them around one core and exposes
them as attributes.

Cycles run when woken (a watch event, a write of ours: ``ctx.wake``) after a 5 ms debounce,
with ``requeue_batch_seconds`` > 0 when the core's next timer is due (``Scheduler.next_wakeup``:
Kueue's 1-s batch that returns parked Workloads after a change), and at least every
``Settings.scheduling.cycle_interval_seconds``; a cycle that decided
something is followed by another (Kueue's KeepGoing), up to 1,000 in a row. Before each
cycle the loop waits ``cycle_pause_ratio`` times the last cycle's duration (at least the
debounce, at most ``cycle_pause_max_seconds``): a cycle's cost grows with the heads it
nominates, not with the events since the last one, so a slow core batches the events of
the pause into one cycle and the event loop stays free for the watches, the writes and the
leader lease (with 0, Kueue's pacing: the next cycle at once). Only the
leader (``ctx.may_write``) runs cycles. A cycle:

1. ``schedule(now)`` (seconds since the epoch, ``ctx.clock()``) returns the decisions;
2. with waitForPodsReady.blockAdmission (Kueue v1beta2 Configuration) each ``Admit`` is
   undone in the core while an admitted Workload's pods are not all Ready or an admission is
   being written, and becomes Pending reason WaitingForPodsReady; otherwise only the first
   ``Admit`` of the cycle goes ahead;
3. ``Admit`` -> ``DecisionWriter.admit``; ``Preempt`` -> one ``DecisionWriter.evict`` per
   victim (reason Preempted), recorded in ``preemptions``; ``Pending`` ->
   ``PendingMessages.offer``;
4. Workloads past their maximum execution time are deactivated, and the Workloads the core
   drains evicted (a ClusterQueue or LocalQueue ``stopPolicy: HoldAndDrain``: reasons
   ClusterQueueStopped, LocalQueueStopped).

A core exception in a cycle is logged and the loop goes on after a second.

Every replica samples the ClusterQueues' usage into ``history`` every
``history_interval_seconds`` (for the dashboard).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from app.controllers.decision_writer import DecisionWriter, OwnerNotifier
from app.controllers.dra_verdicts import DraVerdicts
from app.controllers.history import PreemptionLog, UsageHistory
from app.controllers.informer_feed import InformerFeed
from app.controllers.lifecycle import Lifecycle
from app.controllers.pending_messages import PendingMessages
from app.controllers.write_tasks import WorkloadWrites
from app.core.decisions import Admit, Decision, Pending, PendingReason, Preempt
from app.core.scheduling_cycle import Scheduler
from app.kube.aio import wait_event
from app.kube.context import Context
from app.kube.workqueue import acting_for, namespace_of

log = logging.getLogger(__name__)


class SchedulerLoop:
    """Drives ``cluster``'s cycles and applies its decisions (module doc).

    Parts: ``writes``, ``decisions``, ``messages`` (with ``eta``), ``dra``, ``lifecycle``,
    ``feed`` (its ``on_*`` handlers are what the manager registers). Counters: ``cycles``,
    ``blocked_cycles`` (admissions held by waitForPodsReady.blockAdmission).
    """

    def __init__(self, ctx: Context, jobs: OwnerNotifier, cluster: Scheduler | None = None, *,
                 max_inflight: int = 32, metrics: Any = None) -> None:
        self.ctx = ctx
        self.metrics = metrics
        self.cluster = cluster or Scheduler()
        self.cycles = 0
        self.blocked_cycles = 0
        self.last_cycle_seconds = 0.0  # wall time of the latest cycle (the pause scales with it)
        self._loops: list[asyncio.Task[None]] = []
        self.writes = WorkloadWrites(ctx, max_inflight)
        self.decisions = DecisionWriter(ctx, self.cluster, jobs, self.writes, metrics=metrics,
                                        on_admitted=lambda obj: self.lifecycle.observe(obj))
        self.messages = PendingMessages(ctx, self.cluster, jobs, self.writes)
        self.eta = self.messages.eta
        self.dra = DraVerdicts(ctx, jobs, self.writes)
        self.lifecycle = Lifecycle(ctx, self.cluster, self.writes, self.decisions, jobs)
        self.feed = InformerFeed(ctx, self.cluster, lifecycle=self.lifecycle,
                                 decisions=self.decisions, messages=self.messages,
                                 dra=self.dra, writes=self.writes, metrics=metrics,
                                 pods_holding=jobs.pods_holding)
        s = ctx.settings.scheduling
        # For the dashboard: usage rings per ClusterQueue (every replica samples) and the
        # preemptions this replica decided as leader.
        self.history = UsageHistory(capacity=s.history_samples,
                                    interval_seconds=s.history_interval_seconds)
        self.preemptions = PreemptionLog()

    async def run(self) -> None:
        """Cycle forever (cancel to stop); see the module doc."""
        s = self.ctx.settings.scheduling
        await self.ctx.informers.wait_synced()
        while True:
            await wait_event(self.ctx.wake_event, self.idle_wait(s.cycle_interval_seconds))
            await asyncio.sleep(self.pause(0.005))  # debounce a burst of events into one cycle
            self.ctx.wake_event.clear()
            if not self.ctx.may_write:
                continue
            self.dra.flush()
            try:
                for _ in range(1000):
                    if not self.run_cycle():
                        break
                    await asyncio.sleep(self.pause(0.0))
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a core bug must not kill the loop
                log.exception("scheduling cycle failed")
                await asyncio.sleep(1)

    def idle_wait(self, interval: float) -> float:
        """Seconds to wait for an event before the next cycle: ``interval``, or, with a
        requeue batch (``requeue_batch_seconds`` > 0), less when the core's next timer
        (``Scheduler.next_wakeup``: the batch, a backoff, a minimum runtime, an Admission
        Fair Sharing sample) is due sooner. Without a batch the core's timers are run by the
        next cycle within ``interval`` (the loop's pacing before the batch existed). A
        replica that is not the leader runs no cycle, so its core's timers stay due: it waits
        ``interval``."""
        if not self.ctx.may_write or self.ctx.settings.scheduling.requeue_batch_seconds <= 0:
            return interval
        at = self.cluster.next_wakeup()
        if at is None:
            return interval
        return max(0.0, min(interval, at - self.ctx.clock()))

    def pause(self, floor: float) -> float:
        """Seconds to wait before the next cycle: ``cycle_pause_ratio`` x the latest cycle's
        wall time, at most ``cycle_pause_max_seconds``, at least ``floor`` (the debounce
        after a wake-up; 0 between KeepGoing cycles). See the module doc."""
        s = self.ctx.settings.scheduling
        return max(floor, min(s.cycle_pause_max_seconds,
                              self.last_cycle_seconds * s.cycle_pause_ratio))

    def run_cycle(self) -> int:
        """One core cycle; schedules the writes; returns the number of decisions (a held
        admission is none: the loop does not go on at once only to hold it again)."""
        wfpr = self.ctx.settings.wait_for_pods_ready
        t0 = time.perf_counter()
        decisions = self.cluster.schedule(self.ctx.clock())
        self.last_cycle_seconds = time.perf_counter() - t0
        self.cycles += 1
        if decisions and self.metrics is not None:
            self.metrics.admission_attempt(any(isinstance(d, Admit) for d in decisions),
                                           time.perf_counter() - t0)
        if wfpr.enable and wfpr.block_admission:
            decisions = self._block(decisions)
        for d in decisions:
            self.apply(d)
        self.decisions.expire(self.ctx.clock())
        drained = self.cluster.drain(self.ctx.clock())
        for key, reason, message in drained:
            self.writes.spawn(self.decisions.evict(key, reason, message, None, None))
        held = sum(1 for d in decisions if isinstance(d, Pending)
                   and d.reason is PendingReason.WAITING_FOR_PODS_READY)
        return len(decisions) - held + len(drained)

    def _block(self, decisions: list[Decision]) -> list[Decision]:
        """waitForPodsReady.blockAdmission (Kueue's scheduler waits for every admitted
        Workload to be PodsReady before the next admission): while one is not (or an
        admission is being written), each Admit of the cycle is undone in the core and
        becomes QuotaReserved=False reason WaitingForPodsReady; otherwise only the first
        Admit goes ahead. The Workload becoming ready or being evicted wakes the loop."""
        waiting = bool(self.lifecycle.not_ready or self.ctx.inflight)
        out: list[Decision] = []
        for d in decisions:
            if isinstance(d, Admit) and waiting:
                self.cluster.forget(d.workload)
                self.blocked_cycles += 1
                d = Pending(d.workload, d.cluster_queue, PendingReason.WAITING_FOR_PODS_READY,
                            "waiting for all admitted workloads to be in PodsReady condition")
            elif isinstance(d, Admit):
                waiting = True
            out.append(d)
        return out

    def apply(self, d: Decision) -> None:
        """Start writing decision ``d`` (module doc, step 3)."""
        if isinstance(d, Admit):
            # Its pending message, ETA tail and pacing end here: if it is evicted or its
            # write fails it is pending anew, and an ETA from before would be stale.
            self.messages.forget(d.workload)
            self.ctx.inflight.add(str(d.workload))
            self.writes.spawn(self.decisions.admit(d))
        elif isinstance(d, Preempt):
            if d.victims:
                self.preemptions.record(d, self.ctx.clock())
            # The victims' writes (eviction, stop, release) wait in the preemptor's turns.
            with acting_for(namespace_of(d.preemptor)):
                for v in d.victims:
                    self.writes.spawn(self.decisions.evict(v.workload, "Preempted",
                                                           v.message, v, d))
        elif isinstance(d, Pending):
            self.messages.offer(d)

    async def _history_sampler(self) -> None:
        """Every ``history_interval_seconds``: a usage sample of every ClusterQueue."""
        await self.ctx.informers.wait_synced()
        while True:
            try:
                self.history.sample(self.cluster, self.ctx.clock())
            except Exception:  # noqa: BLE001 - history is for display; never stop the loop
                log.exception("history sample failed")
            await asyncio.sleep(self.history.interval_seconds)

    @property
    def tasks(self) -> list[asyncio.Task[None]]:
        """The long-running tasks (scheduling loop, pending writer, history sampler, ETA
        refresher); not the per-write ones."""
        return list(self._loops)

    def start(self) -> None:
        self._loops = [asyncio.create_task(self.run(), name="scheduler-loop"),
                       asyncio.create_task(self.messages.run_writer(), name="pending-writer")]
        self._loops.append(asyncio.create_task(self._history_sampler(), name="history-sampler"))
        if self.eta is not None:
            self._loops.append(asyncio.create_task(self.messages.run_refresher(),
                                                   name="eta-refresher"))

    async def stop(self) -> None:
        tasks = [*self._loops, *self.writes.tasks]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._loops.clear()

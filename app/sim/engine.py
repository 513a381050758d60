"""Discrete-event simulation of the admission core with a virtual clock.

The simulator drives ``app.core.scheduling_cycle.Scheduler`` exactly as the reconciler does
(``app/controllers/scheduling_loop.py``), with every API write succeeding at once:

- configuration: ``add_flavor``, ``set_namespace``, ``add_cluster_queue``,
  ``add_local_queue`` from the trace;
- a Workload is created: ``add_workload`` (pending, creation time = arrival time);
- cycles: at each instant with events, ``schedule(now)`` runs again and again while it
  returns decisions (the reconciler's "keep going" loop), events due at the same instant
  being applied between cycles;
- ``Admit``: the admission is "written" (``update_workload`` with the admission confirms
  the core's assumption) and the Workload runs for its runtime from that instant, then
  ``finish``;
- ``Preempt``: each victim (already marked evicting by the core) stops after the
  eviction delay, then ``finish_eviction`` puts it back in its queue (its run is lost; it
  runs its whole runtime again when re-admitted); a victim whose runtime ends before its
  eviction completes finishes instead;
- ``Pending``: nothing (the reconciler only writes a condition).

Events at one instant are applied in this order: finishes, completed evictions, arrivals
(in trace order). The clock is integer microseconds; the core gets seconds (float).

Figures follow Kueue's scheduler performance test recorder: time to admission is measured
from creation to the *last* admission (a preempted Workload counts its re-admission);
ClusterQueue usage is the time-average of usage over [0, last change] of the group,
divided by the group's nominal quota.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from app.core.decisions import Admit, Decision, Pending, Preempt
from app.core.scheduling_cycle import Scheduler
from app.core.types import ClusterQueueName, FlavorResource, ResourceName, WorkloadKey
from app.sim.lost_work import ADMITTED, EVICTED, FINISHED
from app.sim.trace import US, Submission, Trace

__all__ = ["QueueTimeline", "SimulationError", "Simulator", "WorkloadRun"]

_FINISH, _EVICTED, _WAKE = 0, 1, 2


class SimulationError(RuntimeError):
    """The simulation cannot go on (e.g. the core keeps deciding at one instant)."""


@dataclass(slots=True)
class WorkloadRun:
    """What happened to one Workload (times in microseconds of virtual time)."""

    key: WorkloadKey
    class_name: str
    cluster_queue: ClusterQueueName | None
    created_us: int
    runtime_us: int
    first_admitted_us: int | None = None
    last_admitted_us: int | None = None
    finished_us: int | None = None
    admissions: int = 0
    evictions: int = 0
    run: int = 0  # bumped when a run starts or is lost: stale finish events are ignored
    # (kind, virtual seconds) of each admission, eviction (the Preempt decision: Kueue sets
    # Evicted=True then) and the finish, in order: app.sim.lost_work's input
    log: list[tuple[str, float]] = field(default_factory=list)


@dataclass(slots=True)
class QueueTimeline:
    """One ClusterQueue over time: a sample at each instant where it changed.

    ``t_us``: sample times; ``usage``: per sample ``{FlavorResource: amount}`` (milli-CPU,
    bytes, counts); ``pending`` / ``admitted``: Workload counts (admitted includes those
    being evicted). ``integral``: ∫usage dt per FlavorResource in amount·µs up to
    ``last_change_us`` (the last sample; the end of the run if usage is still held then:
    Kueue's recorder window ends at a ClusterQueue's last status event); ``peak``: the
    highest usage seen.
    """

    name: ClusterQueueName
    t_us: list[int] = field(default_factory=list)
    usage: list[dict[FlavorResource, int]] = field(default_factory=list)
    pending: list[int] = field(default_factory=list)
    admitted: list[int] = field(default_factory=list)
    integral: dict[FlavorResource, int] = field(default_factory=dict)
    peak: dict[FlavorResource, int] = field(default_factory=dict)
    last_change_us: int = 0


DecisionLog = list[tuple[int, Decision]]


class Simulator:
    """Run ``trace`` through the core; see the module docstring.

    ``cluster``: the core to drive (by default a fresh ``Scheduler`` with the trace's
    ``admissionFairSharing`` and ``requeue_batch_s``: 0 as shipped, ``REQUEUE_BATCH_S``
    for Kueue's 1-s requeue batch; tests pass their own);
    ``eviction_delay_us``: overrides the trace's ``evictionDelay``; ``record_decisions``:
    keep ``(time_us, decision)`` of every decision in ``decisions``; ``until_us``: stop
    before the first instant after it; ``max_cycles_per_instant``: guard against a core
    that never settles (raises ``SimulationError``).
    After ``run()``: ``runs`` (per Workload), ``timelines`` (per ClusterQueue), counters
    ``cycles``, ``admits``, ``preemptions``, ``victims``, ``pendings``, ``end_us``,
    ``cpu_seconds``.
    """

    def __init__(
        self,
        trace: Trace,
        *,
        cluster: Scheduler | None = None,
        eviction_delay_us: int | None = None,
        record_decisions: bool = False,
        until_us: int | None = None,
        max_cycles_per_instant: int = 100_000,
        on_cycle: Callable[[int, list[Decision]], None] | None = None,
        requeue_batch_s: float = 0.0,
    ) -> None:
        self.trace = trace
        self.cluster = cluster if cluster is not None else Scheduler(
            admission_fair_sharing=trace.admission_fair_sharing,
            requeue_batch_s=requeue_batch_s)
        self.eviction_delay_us = (trace.eviction_delay_us if eviction_delay_us is None
                                  else eviction_delay_us)
        self.record = record_decisions
        self.until_us = until_us
        self.max_cycles = max_cycles_per_instant
        self.on_cycle = on_cycle
        self.decisions: DecisionLog = []
        self.runs: dict[WorkloadKey, WorkloadRun] = {}
        self.timelines: dict[ClusterQueueName, QueueTimeline] = {}
        self.cycles = self.admits = self.preemptions = self.victims = self.pendings = 0
        self.end_us = 0
        self.cpu_seconds = 0.0
        self._subs: list[Submission] = []
        self._next = 0
        self._events: list[tuple[int, int, int, WorkloadKey, int]] = []
        self._seq = 0
        self._lq_cq: dict[str, ClusterQueueName] = {}
        self._pending: dict[ClusterQueueName, int] = {}
        self._admitted: dict[ClusterQueueName, int] = {}
        self._touched: dict[ClusterQueueName, None] = {}
        self._wls: dict = {}
        self._wake_pushed = -1
        # Instant (us) -> the latest core wake-up (seconds) pushed for it: the cycles there
        # run at no earlier a time, or a wake-up a float's rounding puts a hair past t / US
        # (e.g. 3.000004 + 1.0 > 4.000004) would not be due at its own instant, and
        # ``next_wakeup`` would name that instant again: never pushed, never run.
        self._wake_s: dict[int, float] = {}

    # ---- set-up ---------------------------------------------------------------------------
    def _configure(self) -> None:
        c, t = self.cluster, self.trace
        for f in t.flavors:
            c.add_flavor(f)
        for ns, labels in t.namespaces.items():
            c.set_namespace(ns, labels)
        for co in t.cohorts:
            c.add_cohort(co)
        for spec in t.cluster_queues:
            c.add_cluster_queue(spec)
            self.timelines[spec.name] = QueueTimeline(spec.name)
            self._pending[spec.name] = self._admitted[spec.name] = 0
            self._touched[spec.name] = None
        for lq in t.local_queues:
            c.add_local_queue(lq)
            self._lq_cq[lq.key] = lq.cluster_queue
        self._subs = t.submissions()

    # ---- the loop -------------------------------------------------------------------------
    def run(self) -> Simulator:
        """Simulate until no event is left (or ``until_us``); returns ``self``."""
        cpu0 = time.process_time()
        self._configure()
        self._sample(0)
        events, subs = self._events, self._subs
        while True:
            t = events[0][0] if events else None
            if self._next < len(subs) and (t is None or subs[self._next].at_us < t):
                t = subs[self._next].at_us
            if t is None or (self.until_us is not None and t > self.until_us):
                break
            # An instant of the core's timer alone that admits and preempts nothing (e.g. a
            # requeue batch due after the last Workload finished, that parks again what can
            # never run) does not extend the run.
            timer_only = self._timer_only(t)
            before, self.end_us = self.end_us, t
            self._drain(t)
            now = max(t / US, self._wake_s.pop(t, 0.0))
            decided = False
            for _ in range(self.max_cycles):
                ds = self.cluster.schedule(now)
                self.cycles += 1
                for d in ds:
                    self._apply(t, d)
                if self.on_cycle is not None:
                    self.on_cycle(t, ds)
                decided = decided or any(not isinstance(d, Pending) for d in ds)
                if not self._drain(t) and not ds:
                    break
            else:
                raise SimulationError(
                    f"the core still decided after {self.max_cycles} cycles at t={now}s")
            if timer_only and not decided:
                self.end_us = before
            wake = self.cluster.next_wakeup()
            if wake is not None:
                at = math.ceil(round(wake * US, 3))
                if at <= t < wake * US:  # due within a microsecond (a tiny batch): the next
                    at = t + 1
                if at > t:
                    self._wake_s[at] = max(wake, self._wake_s.get(at, 0.0))
                    if at != self._wake_pushed:
                        self._wake_pushed = at
                        self._push(at, _WAKE, WorkloadKey(""), 0)
            self._sample(t)
        self._close()
        self.cpu_seconds = time.process_time() - cpu0
        return self

    def _timer_only(self, t: int) -> bool:
        """True when the only events at ``t`` are the core's wake-ups (no finish, eviction
        or arrival)."""
        if self._next < len(self._subs) and self._subs[self._next].at_us == t:
            return False
        # The heap orders an instant's events by kind, and _WAKE is the last kind.
        return bool(self._events) and self._events[0][:2] == (t, _WAKE)

    def _drain(self, t: int) -> bool:
        """Apply every event due at ``t``; True if there was one."""
        events, subs, any_ = self._events, self._subs, False
        while events and events[0][0] == t:
            _, kind, _, key, run = heapq.heappop(events)
            any_ = True
            if kind == _FINISH:
                self._finish(t, key, run)
            elif kind == _WAKE:
                pass  # a minimum runtime or reclaim backoff ended: the cycles re-decide
            else:
                self._evicted(t, key, run)
        while self._next < len(subs) and subs[self._next].at_us == t:
            self._arrive(subs[self._next])
            self._next += 1
            any_ = True
        return any_

    def _push(self, at: int, kind: int, key: WorkloadKey, run: int) -> None:
        self._seq += 1
        heapq.heappush(self._events, (at, kind, self._seq, key, run))

    # ---- events ---------------------------------------------------------------------------
    def _arrive(self, s: Submission) -> None:
        wl = s.workload
        cq = self._lq_cq.get(f"{wl.namespace}/{wl.queue_name}")
        self.runs[wl.key] = WorkloadRun(wl.key, s.class_name, cq, s.at_us, s.runtime_us)
        self._wls[wl.key] = wl
        self.cluster.add_workload(wl)
        if cq is not None:
            self._pending[cq] += 1
            self._touched[cq] = None

    def _finish(self, t: int, key: WorkloadKey, run: int) -> None:
        r = self.runs[key]
        if r.run != run or r.finished_us is not None:
            return
        self.cluster.finish(key)
        r.finished_us = t
        r.log.append((FINISHED, t / US))
        self._wls.pop(key, None)
        cq = r.cluster_queue
        assert cq is not None
        self._admitted[cq] -= 1
        self._touched[cq] = None

    def _evicted(self, t: int, key: WorkloadKey, run: int) -> None:
        r = self.runs[key]
        if r.run != run or r.finished_us is not None:
            return
        self.cluster.finish_eviction(key, t / US)
        r.run += 1  # the run is lost: its finish event no longer counts
        cq = r.cluster_queue
        assert cq is not None
        self._admitted[cq] -= 1
        self._pending[cq] += 1
        self._touched[cq] = None

    # ---- decisions ------------------------------------------------------------------------
    def _apply(self, t: int, d: Decision) -> None:
        if self.record:
            self.decisions.append((t, d))
        if isinstance(d, Admit):
            self.admits += 1
            r = self.runs[d.workload]
            if r.first_admitted_us is None:
                r.first_admitted_us = t
            r.last_admitted_us = t
            r.admissions += 1
            r.run += 1
            r.log.append((ADMITTED, t / US))
            # The status write "lands": the watch brings the Workload with its admission.
            wl = replace(self._wls[d.workload], admission=d.admission,
                         quota_reserved_at=t / US, evicted_at=None)
            self.cluster.update_workload(wl)
            self._push(t + r.runtime_us, _FINISH, d.workload, r.run)
            cq = d.cluster_queue
            self._pending[cq] -= 1
            self._admitted[cq] += 1
            self._touched[cq] = None
        elif isinstance(d, Preempt):
            self.preemptions += 1
            for v in d.victims:
                self.victims += 1
                r = self.runs[v.workload]
                r.evictions += 1
                r.log.append((EVICTED, t / US))
                self._push(t + self.eviction_delay_us, _EVICTED, v.workload, r.run)
        elif isinstance(d, Pending):
            self.pendings += 1

    # ---- timeline -------------------------------------------------------------------------
    def _sample(self, t: int) -> None:
        cluster = self.cluster
        for name in self._touched:
            tl = self.timelines[name]
            usage = cluster.usage(name)
            pending, admitted = self._pending[name], self._admitted[name]
            if tl.t_us:
                prev = tl.usage[-1]
                if usage == prev and tl.pending[-1] == pending and tl.admitted[-1] == admitted:
                    continue
                dt = t - tl.t_us[-1]
                for fr, v in prev.items():
                    tl.integral[fr] = tl.integral.get(fr, 0) + v * dt
                tl.last_change_us = t
                if not dt:  # two samples at one instant: keep the later
                    tl.t_us.pop(), tl.usage.pop(), tl.pending.pop(), tl.admitted.pop()
            for fr, v in usage.items():
                if v > tl.peak.get(fr, 0):
                    tl.peak[fr] = v
            tl.t_us.append(t)
            tl.usage.append(usage)
            tl.pending.append(pending)
            tl.admitted.append(admitted)
        self._touched.clear()

    def _close(self) -> None:
        """Count usage still held at the end (a run cut by ``until_us``) up to ``end_us``."""
        for tl in self.timelines.values():
            if tl.t_us and tl.usage[-1]:
                for fr, v in tl.usage[-1].items():
                    tl.integral[fr] = tl.integral.get(fr, 0) + v * (self.end_us - tl.t_us[-1])
                tl.last_change_us = self.end_us

    # ---- views ----------------------------------------------------------------------------
    def pending_count(self, name: ClusterQueueName) -> int:
        """Pending Workloads the simulator counts in ClusterQueue ``name``."""
        return self._pending[name]

    def pending_demand(self, name: ClusterQueueName, resource: ResourceName) -> int:
        """Σ requests of ``resource`` (all pods) of the pending Workloads of ``name``."""
        total = 0
        for p in self.cluster.pending_workloads(name):
            wl = self._wls.get(p.workload)
            if wl is not None:
                total += sum(ps.total().get(resource, 0) for ps in wl.pod_sets)
        return total

    def admitted_count(self, name: ClusterQueueName) -> int:
        """Workloads holding quota in ``name`` (admitted or being evicted)."""
        return self._admitted[name]

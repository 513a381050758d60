"""The scheduling loop: feed the core from the watches, run cycles, apply decisions.

Feeding (informer handlers, synchronous, no I/O): ResourceFlavors, ClusterQueues,
LocalQueues and Namespaces are mirrored into ``app.core.scheduler.Cluster``; every Workload
object is turned into a domain ``Workload`` (``workload_from_object`` plus its eviction and
reservation times) and added / updated / finished / deleted. A restart therefore rebuilds
usage from ``Workload.status.admission`` during the first list, and no cycle runs before
every informer has synced.

DRA (issue 21, docs/dra.md): a pending Workload's podSets get the devices its pods claim
through ResourceClaimTemplates (``app.wire.dra``, renamed by ``resources.deviceClassMappings``)
added to their per-pod requests before the core sees it, as Kueue's Workload controller does
while a Workload is pending (an admitted one is counted by its ``status.admission``). Claims
that cannot be counted keep the Workload out of the core with QuotaReserved=False and
Requeued=False, reason ``Inadmissible``, the message naming the claim; a change of a
ResourceClaimTemplate re-reads the pending Workloads of its namespace that name it, and one
that becomes countable gets Requeued=True (``DRAResourcesResolved``, Kueue #15888).

Cycles run when woken (a watch event, a write of ours) after a short debounce, and at least
every ``Settings.scheduling.cycle_interval_seconds``; a cycle that decided something is
followed at once by another (Kueue's KeepGoing). Only the leader runs cycles.

Applying decisions (Kueue's scheduler ``admit``; design.md "assume, persist, forget"):

- ``Admit``: the core has already *assumed* the Workload (its whole usage is reserved in
  memory). Persist ``status.admission`` + QuotaReserved/Admitted with the object's
  resourceVersion (Admitted waits for the queue's admission checks, and with
  waitForPodsReady.blockAdmission the admission itself waits: ``app.controllers.lifecycle``);
  on success the Job controller starts the Job. On 409 the Workload changed
  under us: forget at once and let the next cycle re-decide on the new version. On an
  ambiguous failure (timeout, 5xx) re-read the object first: if the admission landed, keep it;
  otherwise keep the reservation for a backoff, then forget (so a failing API server does
  not make the loop spin). Never a half-admitted Job: the Job is started only after the
  Workload's admission is stored, and a Job running without one is stopped.
- ``Preempt``: each new victim gets Evicted=True (reason Preempted) and Preempted=True (the
  victim's reason, a message naming the preemptor); the core keeps counting the victim until
  its Job has stopped and the Job controller clears its admission. A failed write cancels the
  eviction in the core.
- ``Pending``: QuotaReserved=False with the core's reason and message, coalesced per Workload
  and written only when different from the object's, plus a Warning Event on the Job when
  the reason or the wording changed. The message ends with the Workload's place and ETA
  (``position 3, expected start in ~12m``: ``app.core.eta``), refreshed every
  ``eta_message_seconds``; the position is given for the first ``ETA_POSITIONS`` of a
  ClusterQueue only and the ETA text is coarsely rounded. A change of numbers or of the ETA
  tail alone is written at most every ``pending_message_refresh_seconds`` per Workload
  (``app.controllers.pacing``; the newest text when the interval ends), so a queue moving
  on does not rewrite every head at each admission (issue 16).

ETA: ``eta`` (an ``EtaBoard``) answers per cohort, cached; finished Workloads teach its
``RuntimeModel`` (admission to Finished, per LocalQueue and shape).

Writes for one Workload are serialised (a lock per key), so an eviction cannot overtake the
admission it undoes (KQ-29).

Our own successful writes are confirmed in the core at once (``_confirm``), not left to their
watch events: a writer stores its response in the informer store, and the informer then
skips any older event of that object, so when an admission is followed at once by an
eviction and the quota release, the core may never see a version carrying the admission and
would keep the Workload *assumed* (holding its quota) forever.
"""

from __future__ import annotations

import asyncio
import copy
import heapq
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Protocol

from app.controllers.history import PreemptionLog, UsageHistory
from app.controllers.lifecycle import Lifecycle, backoff_held
from app.controllers.pacing import REFRESH, RefreshCredit, pending_change, skeleton
from app.core.decisions import Admit, Decision, Pending, PendingReason, Preempt, Victim
from app.core.eta import UNKNOWN, ArrivalModel, EtaBoard, RuntimeModel, eta_text
from app.core.scheduler import Cluster
from app.core.spec import checks_for_flavors
from app.core.types import ClusterQueueName, CohortName, FlavorName, WorkloadKey
from app.core.workload import Workload
from app.kube.aio import wait_event
from app.kube.client import WORKLOADS
from app.kube.context import RCT, WL, Context
from app.kube.errors import ApiError, Conflict, NotFound, from_exception
from app.kube.events import NORMAL, WARNING
from app.kube.informers import DELETED
from app.kube.workqueue import FairMap, acting_for, namespace_of
from app.wire.dra import INADMISSIBLE, DraInadmissible, claim_template_names, with_claim_requests
from app.wire.fields import Obj, WorkloadSpecError
from app.wire.queues import (
    admission_check,
    cluster_queue,
    cohort,
    consumed_from_status,
    local_queue,
    resource_flavor,
)
from app.wire.workload import workload_from_object
from app.wire.workload_status import (
    ADMITTED,
    DEACTIVATION_TARGET,
    EVICTED,
    QUOTA_RESERVED,
    REQUEUED,
    condition,
    execution_deadline,
    has_admission,
    is_active,
    is_evicted,
    is_finished,
    is_true,
    set_condition,
    with_admission,
    with_eviction,
    with_inadmissible,
    with_pending,
    with_requeued,
)
from app.wire.workload_status import parse_time as _ts

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


def domain_workload(obj: Mapping[str, Any]) -> Workload:
    """Workload object -> domain ``Workload`` including ``evicted_at`` (Evicted=True
    lastTransitionTime) and ``quota_reserved_at`` (QuotaReserved=True lastTransitionTime).
    Raises ``WorkloadSpecError`` naming a bad field."""
    wl = workload_from_object(obj)
    ev = condition(obj, EVICTED)
    qr = condition(obj, QUOTA_RESERVED)
    evicted_at = _ts(ev.get("lastTransitionTime")) if ev and ev.get("status") == "True" else None
    reserved_at = _ts(qr.get("lastTransitionTime")) if qr and qr.get("status") == "True" else None
    return replace(wl, evicted_at=evicted_at, quota_reserved_at=reserved_at)


def _dra_blocked(obj: Mapping[str, Any]) -> bool:
    """Requeued=False with reason Inadmissible: set by ``_write_dra``, cleared when the
    Workload's claims can be counted."""
    c = condition(obj, REQUEUED)
    return bool(c) and c.get("status") == "False" and c.get("reason") == INADMISSIBLE


def _key(obj: Mapping[str, Any]) -> WorkloadKey:
    meta = obj["metadata"]
    return WorkloadKey(f"{meta['namespace']}/{meta['name']}")


class OwnerNotifier(Protocol):
    """The job framework's side of the loop (``app.integrations.reconciler.JobReconciler``):
    the loop knows no job kind."""

    def notify(self, workload: Obj | None, key: str) -> None:
        """Workload ``key`` was admitted or evicted by the loop: reconcile its owner."""
        ...

    def owner_object(self, workload: Obj) -> Obj | None:
        """The object that controls ``workload`` (Events about it go there), or None."""
        ...


class SchedulerLoop:
    """Feeds ``cluster`` from the informers and applies its decisions (see the module doc).

    Counters for tests/metrics: ``cycles``, ``admitted``, ``forgotten``, ``evictions``,
    ``pending_writes``.
    """

    def __init__(self, ctx: Context, jobs: OwnerNotifier, cluster: Cluster | None = None, *,
                 max_inflight: int = 32, metrics: Any = None) -> None:
        self.ctx = ctx
        self.metrics = metrics
        self.jobs = jobs
        self.cluster = cluster or Cluster()
        self.cycles = 0
        self.admitted = 0
        self.forgotten = 0
        self.evictions = 0
        self.evictions_dropped = 0  # not written: their preemptor no longer waited
        self.pending_writes = 0
        self._sem = asyncio.Semaphore(max_inflight)
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        # Pending decisions to write (the latest per Workload), taken in namespace turns so a
        # namespace's flood of pending Workloads does not hold back another team's message.
        self._pending: FairMap[Pending] = FairMap()
        self._pending_kick = asyncio.Event()
        # maximumExecutionTimeSeconds: (deadline, key) heap; the latest deadline per key.
        self._deadlines: list[tuple[float, WorkloadKey]] = []
        self._deadline_of: dict[WorkloadKey, float] = {}
        self._loops: list[asyncio.Task[None]] = []
        self._backoff: dict[WorkloadKey, int] = {}
        self.bad_workloads: dict[WorkloadKey, str] = {}
        # DRA: DeviceClass -> quota resource; pending Workloads whose claims cannot be
        # counted (key -> message), kept out of the core.
        self.device_classes = ctx.settings.resources.device_classes()
        self.dra_inadmissible: dict[WorkloadKey, str] = {}
        self._dra_unwritten: set[WorkloadKey] = set()
        s = ctx.settings.scheduling
        self.eta: EtaBoard | None = None
        if s.eta_enabled:
            window = s.eta_arrivals_window_seconds
            self.eta = EtaBoard(RuntimeModel(), min_interval=s.eta_min_interval_seconds,
                                budget_ms=s.eta_budget_ms, clock=time.perf_counter,
                                arrivals=ArrivalModel(window_seconds=window)
                                if window > 0 else None, ranges=s.eta_ranges)
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
        self.eta_message_refreshes = 0
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
        self.pending_deferred = 0
        # For the dashboard: usage rings per ClusterQueue (every replica samples) and the
        # preemptions this replica decided as leader.
        self.history = UsageHistory(capacity=s.history_samples,
                                    interval_seconds=s.history_interval_seconds)
        self.preemptions = PreemptionLog()
        # Admission checks and waitForPodsReady (app/controllers/lifecycle.py); cycles held
        # by waitForPodsReady.blockAdmission.
        self.lifecycle = Lifecycle(self)
        self.blocked_cycles = 0

    # ================================================================== feeding (handlers)

    def on_flavor(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        if etype == DELETED:
            self.cluster.delete_flavor(FlavorName(old["metadata"]["name"]))  # type: ignore[index]
        elif new is not None:
            try:
                self.cluster.add_flavor(resource_flavor(new))
            except WorkloadSpecError as exc:
                # The CRD refuses such a flavor; one written before it is read as absent, so
                # the ClusterQueues naming it stay inactive rather than admit onto it.
                log.warning("ResourceFlavor %s is unreadable, treated as absent: %s",
                            new["metadata"]["name"], exc)
                self.cluster.delete_flavor(FlavorName(new["metadata"]["name"]))
        self.ctx.wake()

    def on_cluster_queue(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        if etype == DELETED:
            self.cluster.delete_cluster_queue(
                ClusterQueueName(old["metadata"]["name"]))  # type: ignore[index]
        elif new is not None:
            spec, _ = cluster_queue(new)
            self.cluster.add_cluster_queue(spec)
            if old is not None and (old.get("spec") or {}).get("admissionChecksStrategy") \
                    != (new.get("spec") or {}).get("admissionChecksStrategy"):
                # Its Workloads holding quota get the queue's checks now (Kueue syncs them).
                store = self.ctx.store(WL)
                for key in self.cluster.admitted(spec.name):
                    if (obj := store.get(key)) is not None:
                        self.lifecycle.observe(obj)
        self.ctx.wake()

    def on_cohort(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        if etype == DELETED:
            self.cluster.delete_cohort(CohortName(old["metadata"]["name"]))  # type: ignore[index]
        elif new is not None:
            spec, _ = cohort(new)
            self.cluster.add_cohort(spec)
        self.ctx.wake()

    def on_admission_check(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        """An AdmissionCheck changed: ClusterQueues naming it are re-validated (Kueue: a
        missing or inactive check makes them inactive)."""
        if etype == DELETED:
            self.cluster.delete_admission_check(admission_check(old)[0])  # type: ignore[arg-type]
        elif new is not None:
            self.cluster.set_admission_check(*admission_check(new))
        self.ctx.wake()

    def on_local_queue(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        if etype == DELETED:
            m = old["metadata"]  # type: ignore[index]
            self.cluster.delete_local_queue(f"{m['namespace']}/{m['name']}")
        elif new is not None:
            try:
                lq = local_queue(new)
            except WorkloadSpecError as exc:
                # The CRD refuses such a weight; one written before it keeps the default 1.
                log.warning("LocalQueue %s/%s: %s; using weight 1", new["metadata"].get(
                    "namespace"), new["metadata"]["name"], exc)
                lq = local_queue({**new, "spec": {**(new.get("spec") or {}),
                                                  "fairSharing": {}}})
            self.cluster.add_local_queue(lq)
            if self.cluster.admission_fair_sharing is not None:
                # After a restart, the history persisted in the status (Kueue seeds its
                # ledger the same way); ignored once the core has its own.
                consumed = consumed_from_status(new)
                if consumed is not None:
                    self.cluster.seed_local_queue_usage(lq.key, consumed)
        self.ctx.wake()

    def on_namespace(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        if etype == DELETED:
            self.cluster.delete_namespace(old["metadata"]["name"])  # type: ignore[index]
        elif new is not None:
            self.cluster.set_namespace(new["metadata"]["name"],
                                       new["metadata"].get("labels") or {})
        self.ctx.wake()

    def on_workload(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        obj = new or old
        if obj is None:
            return
        key = _key(obj)
        self.ctx.wake()
        if etype == DELETED or new is None:
            self.cluster.delete_workload(key)
            self._deadline_of.pop(key, None)
            self._pending.pop(key, None)
            self._forget_pending(key)
            self.lifecycle.forget(key)
            return
        if is_finished(new):
            info = self.cluster.workload(key)
            if info is not None and info.state != "pending" \
                    and not (old is not None and is_finished(old)):
                self._learn_runtime(key, new)
            if self.metrics is not None and info is not None and info.cluster_queue \
                    and info.state != "pending" and not (old is not None and is_finished(old)):
                self.metrics.finished(info.cluster_queue, namespace=key.split("/", 1)[0],
                                      local_queue=(new.get("spec") or {}).get("queueName", ""))
            self.cluster.finish(key)
            self._deadline_of.pop(key, None)
            self._pending.pop(key, None)
            self._forget_pending(key)
            self.lifecycle.forget(key)
            return
        if (not is_active(new) and not has_admission(new)) or backoff_held(new):
            # Deactivated, or waiting out a requeue backoff (Requeued=False): not queued.
            self.cluster.delete_workload(key)
            self.lifecycle.observe(new)
            return
        try:
            wl = domain_workload(new)
            if wl.admission is None:
                wl = with_claim_requests(wl, new, self._claim_template, self.device_classes)
        except DraInadmissible as exc:
            self.cluster.delete_workload(key)
            self.dra_inadmissible[key] = str(exc)
            self._dra_verdict(key)
            return
        except WorkloadSpecError as exc:
            self.bad_workloads[key] = str(exc)
            self.cluster.delete_workload(key)
            return
        self.bad_workloads.pop(key, None)
        if self.dra_inadmissible.pop(key, None) is not None or _dra_blocked(new):
            self._dra_verdict(key)
        if wl.admission is None and wl.evicted_at is not None \
                and self.ctx.settings.wait_for_pods_ready.requeuing_strategy.timestamp \
                == "Creation" and (condition(new, EVICTED) or {}).get("reason") \
                == "PodsReadyTimeout":
            wl = replace(wl, evicted_at=None)  # requeuingStrategy.timestamp: Creation
        if old is None and wl.admission is None and self.eta is not None \
                and self.eta.arrivals is not None:
            self.eta.arrivals.observe(wl)  # a new Workload: one more arrival of its class
        self.cluster.update_workload(wl)
        deadline = execution_deadline(new)
        if deadline is not None and self._deadline_of.get(key) != deadline:
            self._deadline_of[key] = deadline
            heapq.heappush(self._deadlines, (deadline, key))
        if not is_active(new) and has_admission(new) and not is_evicted(new) \
                and self.ctx.may_write and self.cluster.evict(key, self.ctx.clock()):
            reason, message = "Deactivated", "The workload is deactivated"
            target = condition(new, DEACTIVATION_TARGET)
            if target is not None and target.get("status") == "True":
                reason = f"DeactivatedDueTo{target.get('reason', '')}"
                message = f"The workload is deactivated due to {target.get('message', '')}"
            self._spawn(self._evict(key, reason, message, None, None))
        self.lifecycle.observe(new)

    def _claim_template(self, namespace: str, name: str) -> Obj | None:
        if RCT not in self.ctx.informers.informers:
            return None
        return self.ctx.store(RCT).get(f"{namespace}/{name}")

    def on_claim_template(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        """A ResourceClaimTemplate changed: re-read the pending Workloads of its namespace
        whose pods name it (their device counts or admissibility may change)."""
        obj = new or old
        if obj is None:
            return
        ns, name = obj["metadata"].get("namespace", ""), obj["metadata"]["name"]
        for wl in self.ctx.store(WL).list():
            if wl["metadata"].get("namespace") == ns and not has_admission(wl) \
                    and name in claim_template_names(wl):
                self.on_workload("MODIFIED", wl, wl)

    def _dra_verdict(self, key: WorkloadKey) -> None:
        """Write ``key``'s DRA verdict now, or once this replica leads (``run``)."""
        if self.ctx.may_write:
            self._spawn(self._write_dra(key))
        else:
            self._dra_unwritten.add(key)

    async def _write_dra(self, key: WorkloadKey) -> None:
        """Write the DRA verdict of pending Workload ``key``: Inadmissible (QuotaReserved and
        Requeued False) with the message, plus a Warning Event on its owner; or, once its
        claims can be counted again, Requeued=True (``DRAResourcesResolved``)."""
        ctx = self.ctx
        try:
            async with self._sem, self._lock(key):
                obj = ctx.store(WL).get(key)
                if obj is None or is_finished(obj) or not ctx.may_write:
                    return
                message = self.dra_inadmissible.get(key)
                if message is not None and not has_admission(obj):
                    body, changed = with_inadmissible(obj, INADMISSIBLE, message, ctx.clock())
                elif message is None and _dra_blocked(obj):  # (also once admitted meanwhile)
                    body, changed = with_requeued(obj, "DRAResourcesResolved",
                                                  "The DRA resource claims can be counted",
                                                  ctx.clock())
                else:
                    return
                if not changed:
                    return
                try:
                    out = await ctx.client.replace(WORKLOADS, body, subresource="status")
                except (Conflict, NotFound):
                    return  # the watch brings the new version, which is judged again
                ctx.store(WL).put(out)
                if message is not None:
                    ctx.recorder.emit(self.jobs.owner_object(obj) or obj, WARNING, INADMISSIBLE,
                                      message)
                ctx.wake()
        finally:
            self._release_lock(key)

    # ================================================================== loop

    async def run(self) -> None:
        """Cycle forever (cancel to stop); see the module doc."""
        s = self.ctx.settings.scheduling
        await self.ctx.informers.wait_synced()
        while True:
            await wait_event(self.ctx.wake_event, s.cycle_interval_seconds)
            await asyncio.sleep(0.005)  # debounce a burst of events into one cycle
            self.ctx.wake_event.clear()
            if not self.ctx.may_write:
                continue
            while self._dra_unwritten:
                self._spawn(self._write_dra(self._dra_unwritten.pop()))
            try:
                for _ in range(1000):
                    if not self.run_cycle():
                        break
                    await asyncio.sleep(0)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a core bug must not kill the loop
                log.exception("scheduling cycle failed")
                await asyncio.sleep(1)

    def run_cycle(self) -> int:
        """One core cycle; schedules the writes; returns the number of decisions. With
        waitForPodsReady.blockAdmission no admission is made while an admitted Workload's
        pods are not all Ready (``_hold``; the Workload becoming ready or being evicted
        wakes the loop)."""
        wfpr = self.ctx.settings.wait_for_pods_ready
        t0 = time.perf_counter()
        decisions = self.cluster.schedule(self.ctx.clock())
        self.cycles += 1
        if decisions and self.metrics is not None:
            self.metrics.admission_attempt(any(isinstance(d, Admit) for d in decisions),
                                           time.perf_counter() - t0)
        if wfpr.enable and wfpr.block_admission:
            decisions = self._block(decisions)
        for d in decisions:
            self.apply(d)
        self._expire(self.ctx.clock())
        drained = self.cluster.drain(self.ctx.clock())
        for key, reason, message in drained:
            self._spawn(self._evict(key, reason, message, None, None))
        # A held admission is no decision: the loop does not go on at once (it would only
        # hold it again).
        held = sum(1 for d in decisions if isinstance(d, Pending)
                   and d.reason is PendingReason.WAITING_FOR_PODS_READY)
        return len(decisions) - held + len(drained)

    def _block(self, decisions: list[Decision]) -> list[Decision]:
        """waitForPodsReady.blockAdmission (Kueue's scheduler waits for every admitted
        Workload to be PodsReady before the next admission): while one is not (or an
        admission is being written), each Admit of the cycle is undone in the core and
        becomes QuotaReserved=False reason WaitingForPodsReady; otherwise only the first
        Admit goes ahead."""
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
        if isinstance(d, Admit):
            # Its pending message, ETA tail and pacing end here: if it is evicted or its
            # write fails it is pending anew, and an ETA from before would be stale.
            self._forget_pending(d.workload)
            self.ctx.inflight.add(str(d.workload))
            self._spawn(self._admit(d))
        elif isinstance(d, Preempt):
            if d.victims:
                self.preemptions.record(d, self.ctx.clock())
            # The victims' writes (eviction, stop, release) wait in the preemptor's turns.
            with acting_for(namespace_of(d.preemptor)):
                for v in d.victims:
                    self._spawn(self._evict(v.workload, "Preempted", v.message, v, d))
        elif isinstance(d, Pending):
            if d.workload not in self._core_pending:
                self._pending_since.setdefault(d.workload, self.ctx.clock())
                if d.cluster_queue is not None and self.eta is not None:
                    self._eta_arrived.add(d.cluster_queue)  # new here: its ETA soon
                    self._eta_kick.set()
            self._core_pending[d.workload] = d
            self._pending[d.workload] = d
            self._pending_kick.set()

    # ================================================================== max execution time

    def _expire(self, now: float) -> None:
        """Deactivate the admitted Workloads past their ``maximumExecutionTimeSeconds``
        (Kueue: DeactivationTarget reason MaximumExecutionTimeExceeded, then
        ``spec.active: false``, evicted ``DeactivatedDueToMaximumExecutionTimeExceeded``)."""
        heap = self._deadlines
        while heap and heap[0][0] <= now:
            deadline, key = heapq.heappop(heap)
            if self._deadline_of.get(key) != deadline:
                continue  # superseded by a newer admission's deadline
            del self._deadline_of[key]
            self._spawn(self._deactivate(key, "MaximumExecutionTimeExceeded",
                                         "exceeding the maximum execution time"))

    async def _deactivate(self, key: WorkloadKey, reason: str, message: str,
                          still: Callable[[Obj], bool] | None = None) -> bool:
        """DeactivationTarget=True (``reason``) in status, then ``spec.active: false``; the
        Workload event that follows evicts it (``on_workload``). ``still(obj)``: the cause
        still holds on the stored object (default: past its maximum execution time).
        Returns True when it deactivated."""
        retry_limit = still is None  # the time limit is re-armed until it holds
        if still is None:
            def still(o: Obj) -> bool:
                deadline = execution_deadline(o)
                return deadline is not None and deadline <= self.ctx.clock()
        ctx = self.ctx
        ns, name = key.split("/", 1)
        done = False
        try:
            async with self._sem, self._lock(key):
                for _attempt in range(3):
                    obj = ctx.store(WL).get(key)
                    if obj is None or not is_active(obj) or not still(obj):
                        done = True  # gone, already inactive, or the cause is over
                        return False
                    if not ctx.leader.is_leader:
                        return False
                    body = copy.deepcopy(obj)
                    set_condition(body, DEACTIVATION_TARGET, "True", reason, message,
                                  ctx.clock())
                    try:
                        out = await ctx.client.replace(WORKLOADS, body, subresource="status")
                        out = copy.deepcopy(out)
                        out.setdefault("spec", {})["active"] = False
                        out = await ctx.client.replace(WORKLOADS, out)
                    except Conflict:
                        ctx.store(WL).put(await ctx.client.get(WORKLOADS, name, ns))
                        continue
                    ctx.store(WL).put(out)
                    ctx.recorder.emit(out, NORMAL, "Deactivated",
                                      f"The workload is deactivated due to {message}")
                    done = True
                    return True
        except Exception as exc:  # noqa: BLE001
            log.warning("deactivation of %s failed: %s", key, from_exception(exc))
        finally:
            self._release_lock(key)
            if not done and retry_limit and key not in self._deadline_of:
                # Try again later: nothing else re-arms the limit of a running Workload (no
                # event need come), and a failed write must not let it run unbounded.
                retry = ctx.clock() + ctx.settings.scheduling.requeue_backoff_seconds
                self._deadline_of[key] = retry
                heapq.heappush(self._deadlines, (retry, key))
        return False

    # ================================================================== ETA

    def _forget_pending(self, key: WorkloadKey) -> None:
        self._core_pending.pop(key, None)
        self._eta_tail.pop(key, None)
        self._evented.pop(key, None)
        self._pending_written.pop(key, None)
        self._deferred.pop(key, None)
        self._pending_since.pop(key, None)

    def _learn_runtime(self, key: WorkloadKey, obj: Obj) -> None:
        """Teach the ETA's RuntimeModel how long ``key`` ran: QuotaReserved=True to
        Finished=True (the condition times; now when Finished has none)."""
        wl = self.cluster.domain_workload(key)
        if self.eta is None or wl is None or wl.quota_reserved_at is None:
            return
        fin = condition(obj, "Finished") or {}
        end = _ts(fin.get("lastTransitionTime")) or self.ctx.clock()
        self.eta.runtimes.observe(wl, end - wl.quota_reserved_at)

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
                self._forget_pending(key)  # admitted since (or gone)

    async def _history_sampler(self) -> None:
        """Every ``history_interval_seconds``: a usage sample of every ClusterQueue."""
        await self.ctx.informers.wait_synced()
        while True:
            try:
                self.history.sample(self.cluster, self.ctx.clock())
            except Exception:  # noqa: BLE001 - history is for display; never stop the loop
                log.exception("history sample failed")
            await asyncio.sleep(self.history.interval_seconds)

    async def _eta_refresher(self) -> None:
        """Every ``eta_message_seconds``: ``refresh_eta_period`` (leader only); between
        periods, woken by a new pending Workload: ``refresh_eta_arrivals`` once its
        cohort's run may start (``EtaBoard.due_at``: at most every
        ``eta_min_interval_seconds``). Both draw on one budget
        (``app.controllers.pacing.RefreshCredit``): ``eta_refresh_share`` of what the rest
        of the controller leaves idle (at least a quarter of the share; at most one
        period's worth banked), so arrivals never make the refresher compute more than the
        period alone may, and an admission storm keeps most of the CPU."""
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
        (``apply``): each whose cohort's run may start now (``EtaBoard.due_at``) is computed
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

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._write_done)

    def _write_done(self, task: asyncio.Task[Any]) -> None:
        """A write task ended: forget it; an escaped exception is a bug, never silent."""
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("scheduler write task failed", exc_info=task.exception())
            self.ctx.wake()

    def _lock(self, key: str) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    def _release_lock(self, key: str) -> None:
        lock = self._locks.get(key)
        if lock is not None and not lock.locked():
            self._locks.pop(key, None)

    # ================================================================== admission

    async def _admit(self, d: Admit) -> None:
        key = d.workload
        ctx = self.ctx
        try:
            async with self._sem, self._lock(key):
                obj = ctx.store(WL).get(key)
                if obj is None or not ctx.leader.is_leader:
                    self._forget(key)
                    return
                if has_admission(obj):
                    return  # already stored (e.g. by a previous leader)
                spec = self.cluster.cluster_queue_spec(d.cluster_queue)
                checks = () if spec is None or not spec.admission_checks else \
                    checks_for_flavors(spec, {f for psa in d.admission.pod_set_assignments
                                              for f in psa.flavors.values()})
                body = with_admission(obj, d.admission, ctx.clock(), checks)
                try:
                    out = await ctx.client.replace(WORKLOADS, body, subresource="status")
                except Conflict:
                    self._forget(key)  # changed under us: re-decide on the new version
                    return
                except NotFound:
                    self._forget(key)
                    return
                except Exception as exc:  # noqa: BLE001 - ambiguous: did it land?
                    await self._after_failed_admit(key, from_exception(exc))
                    return
                ctx.store(WL).put(out)
                self._confirm(key, out)
                self.lifecycle.observe(out)  # waitForPodsReady: not ready from now on
                self.admitted += 1
                self._backoff.pop(key, None)
                self._announce_admission(out, d)
                if is_true(out, ADMITTED):  # else once its admission checks are Ready
                    self.count_admitted(obj, d.cluster_queue)
        finally:
            ctx.inflight.discard(str(key))
            self._release_lock(key)
        self.jobs.notify(out, str(key))

    def count_admitted(self, wl: Obj, cluster_queue: str) -> None:
        """``kueue_admitted_workloads_total`` and the admission wait (from the queue-order
        time of ``wl``, best the object as it was before its reservation) for a Workload
        Admitted=True in ``cluster_queue`` now."""
        if self.metrics is None:
            return
        try:
            wait = self.ctx.clock() - domain_workload(wl).queue_order_time
        except WorkloadSpecError:
            return
        self.metrics.admitted(cluster_queue, wait, namespace=wl["metadata"]["namespace"],
                              local_queue=(wl.get("spec") or {}).get("queueName", ""))

    def _confirm(self, key: WorkloadKey, out: Obj) -> None:
        """Feed the core the object our admission / eviction write of ``key`` returned, so
        an assumed Workload is confirmed without waiting for the write's watch event (the
        informer skips that event when a later write's response is already in the store; see
        the module doc). Only while ``out`` is still the newest version known and the core
        holds the Workload's quota: a newer version is announced by the informer anyway, and
        a Workload the core no longer holds must not get its quota back from an old object.
        A core eviction mark that ``out`` does not carry yet (the eviction write waits
        behind this admission's lock) is kept, so the victim is not picked twice."""
        if self.ctx.store(WL).get(key) is not out or not has_admission(out):
            return
        info = self.cluster.workload(key)
        if info is None or info.state == "pending":
            return
        try:
            wl = domain_workload(out)
        except WorkloadSpecError:
            return
        if info.state == "evicting" and wl.evicted_at is None:
            wl = replace(wl, evicted_at=self.ctx.clock())
        self.cluster.update_workload(wl)

    def _announce_admission(self, wl: Obj, d: Admit) -> None:
        msg = f"Quota reserved in ClusterQueue {d.cluster_queue}"
        self.ctx.recorder.emit(wl, NORMAL, "QuotaReserved", msg)
        if is_true(wl, ADMITTED):  # else when its admission checks are Ready (lifecycle)
            self.ctx.recorder.emit(wl, NORMAL, "Admitted",
                                   f"Admitted by ClusterQueue {d.cluster_queue}")

    async def _after_failed_admit(self, key: WorkloadKey, err: ApiError) -> None:
        ctx = self.ctx
        n = self._backoff.get(key, 0)
        self._backoff[key] = n + 1
        s = ctx.settings.scheduling
        delay = min(s.requeue_backoff_max_seconds, s.requeue_backoff_seconds * 2 ** min(n, 20))
        log.warning("admission of %s failed (%s); checking, then retrying in %.1fs", key, err,
                    delay)
        try:
            ns, name = key.split("/", 1)
            live = await ctx.client.get(WORKLOADS, name, ns)
        except NotFound:
            self._forget(key)
            return
        except Exception:  # noqa: BLE001 - unknown: keep the reservation, look again later
            live = None
        if live is not None:
            ctx.store(WL).put(live)
            if has_admission(live):
                # It landed: keep it, and start the Job (the success path would have).
                self.cluster.update_workload(domain_workload(live))
                self.jobs.notify(live, str(key))
                return
        # Keep the quota reserved during the backoff, then give it back and re-decide.
        asyncio.get_running_loop().call_later(delay, self._forget, key)

    def _forget(self, key: WorkloadKey) -> None:
        if self.cluster.forget(key):
            self.forgotten += 1
        self.ctx.wake()

    # ================================================================== eviction

    async def _evict(self, key: WorkloadKey, reason: str, message: str, victim: Victim | None,
                     d: Preempt | None, *,
                     requeue_state: Mapping[str, Any] | None = None) -> bool:
        ctx = self.ctx
        ok = False
        try:
            async with self._sem, self._lock(key):
                for _attempt in range(3):
                    obj = ctx.store(WL).get(key)
                    if obj is None or not ctx.leader.is_leader:
                        break
                    if is_evicted(obj):
                        ok = True
                        break
                    if d is not None and not self._still_preempting(d):
                        self.evictions_dropped += 1
                        break
                    body = with_eviction(obj, reason, message, ctx.clock(),
                                         preempted_reason=victim.reason if victim else None,
                                         requeue_state=requeue_state)
                    try:
                        out = await ctx.client.replace(WORKLOADS, body, subresource="status")
                    except Conflict:
                        ns, name = key.split("/", 1)
                        ctx.store(WL).put(await ctx.client.get(WORKLOADS, name, ns))
                        continue
                    ctx.store(WL).put(out)
                    self._confirm(key, out)
                    ok = True
                    self.evictions += 1
                    self._announce_eviction(out, reason, message, d)
                    self._count_eviction(out, reason, victim, d)
                    break
        except Exception as exc:  # noqa: BLE001
            log.warning("eviction of %s failed: %s", key, from_exception(exc))
        finally:
            self._release_lock(key)
        if not ok:
            self.cluster.cancel_eviction(key)
            self.ctx.wake()
            return False
        self.jobs.notify(ctx.store(WL).get(key), str(key))
        return True

    def _still_preempting(self, d: Preempt) -> bool:
        """Whether ``d``'s preemptor still waits for the room its victims free: not when it
        was admitted meanwhile (quota freed by others while this write waited for the
        write slots, e.g. at a low client QPS), finished or deleted. Kueue v0.17.1 issues a
        cycle's preemptions before its next cycle, so it has no such window; an eviction
        whose preemptor no longer waits would only throw the victim's work away."""
        info = self.cluster.workload(d.preemptor)
        return info is not None and info.state == "pending"

    def _count_eviction(self, wl: Obj, reason: str, victim: Victim | None,
                        d: Preempt | None) -> None:
        if self.metrics is None:
            return
        adm = (wl.get("status") or {}).get("admission") or {}
        self.metrics.evicted(str(adm.get("clusterQueue", "")), reason,
                             namespace=wl["metadata"]["namespace"],
                             local_queue=(wl.get("spec") or {}).get("queueName", ""))
        if victim is not None and d is not None:
            self.metrics.preempted(d.cluster_queue, str(victim.reason))

    def _announce_eviction(self, wl: Obj, reason: str, message: str, d: Preempt | None) -> None:
        rec = self.ctx.recorder
        rec.emit(wl, NORMAL, f"EvictedDueTo{reason}", message)
        if d is not None:
            rec.emit(wl, NORMAL, "Preempted", message)
            pre = self.ctx.store(WL).get(d.preemptor)
            if pre is not None:
                rec.emit(pre, NORMAL, "PreemptedWorkload",
                         f"Preempted {_key(wl)} to accommodate this workload")

    # ================================================================== pending

    async def _pending_writer(self) -> None:
        """Write coalesced QuotaReserved=False conditions (latest decision per Workload), and
        the refreshes held back by ``pending_message_refresh_seconds`` when they fall due."""
        ctx = self.ctx
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
                async with self._lock(key):
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
                self._release_lock(key)

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
        ``eta_min_interval_seconds`` (a burst): its messages go out at once, as before."""
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
        Warning Event when the reason or the wording is new."""
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

    # ================================================================== lifecycle

    @property
    def tasks(self) -> list[asyncio.Task[None]]:
        """The long-running tasks (scheduling loop, pending writer); not the per-write ones."""
        return list(self._loops)

    def start(self) -> None:
        self._loops = [asyncio.create_task(self.run(), name="scheduler-loop"),
                       asyncio.create_task(self._pending_writer(), name="pending-writer")]
        self._loops.append(asyncio.create_task(self._history_sampler(), name="history-sampler"))
        if self.eta is not None:
            self._loops.append(asyncio.create_task(self._eta_refresher(), name="eta-refresher"))

    async def stop(self) -> None:
        tasks = [*self._loops, *self._tasks]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._loops.clear()

"""Writing the core's admissions and evictions to the API server (Kueue's scheduler
``admit`` and preemptor, ``pkg/scheduler/scheduler.go`` and ``pkg/scheduler/preemption``;
design.md "assume, persist, forget"), and deactivations (``spec.active: false``).

Inputs are the core's decisions (``app.core.decisions``); outputs are Workload status
writes (``workloads/status`` update, ``workloads`` update for ``spec.active``), Events and
metrics. Times are seconds since the epoch (``ctx.clock()``).

- ``admit(Admit)``: the core has already *assumed* the Workload (its whole usage is reserved
  in memory). Persist ``status.admission`` + QuotaReserved/Admitted with the object's
  resourceVersion (Admitted waits for the queue's admission checks, and with
  waitForPodsReady.blockAdmission the admission itself waits: ``app.controllers.lifecycle``);
  on success the job framework starts the Job (``OwnerNotifier.notify``). On 409 the
  Workload changed under us: forget at once and let the next cycle re-decide on the new
  version. On an ambiguous failure (timeout, 5xx) re-read the object first: if the admission
  landed, keep it; otherwise keep the reservation for a backoff (``requeue_backoff_seconds``
  doubling up to ``requeue_backoff_max_seconds``), then forget, so a failing API server
  does not make the loop spin. Never a half-admitted Job: the Job is started only after the
  Workload's admission is stored. A Workload the store shows being deleted
  (``deletionTimestamp``) by then gets no admission: it is dropped from the core.
- ``evict(...)``: Evicted=True (the reason given: Preempted, PodsReadyTimeout,
  AdmissionCheck, Deactivated...) and, for a preemption victim, Preempted=True with the
  victim's reason and a message naming the preemptor (Kueue v1beta2 condition types). The
  core keeps counting the victim until its Job has stopped and the job framework clears its
  admission. A failed write (three tries on 409) cancels the eviction in the core. A victim
  whose preemptor no longer waits (admitted meanwhile, finished, deleted) is not evicted.
- ``deactivate(...)``: DeactivationTarget=True in status, then ``spec.active: false``
  (Kueue's workload controller); the Workload event that follows evicts it with reason
  ``DeactivatedDueTo<reason>``. ``expire(now)`` does it for the admitted Workloads past
  their ``maximumExecutionTimeSeconds`` (reason ``MaximumExecutionTimeExceeded``).

Our own successful writes are confirmed in the core at once (``_confirm``), not left to their
watch events: a writer stores its response in the informer store, and the informer then
skips any older event of that object, so when an admission is followed at once by an
eviction and the quota release, the core may never see a version carrying the admission and
would keep the Workload *assumed* (holding its quota) forever.

API errors are caught and logged (``app.kube.errors``); nothing here raises to its caller.
"""

from __future__ import annotations

import asyncio
import copy
import heapq
import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Protocol

from app.controllers.write_tasks import WorkloadWrites
from app.core.decisions import Admit, Preempt, Victim
from app.core.scheduling_cycle import Scheduler
from app.core.spec import checks_for_flavors
from app.core.types import WorkloadKey
from app.kube.client import WORKLOADS
from app.kube.context import WL, Context
from app.kube.errors import ApiError, Conflict, NotFound, from_exception
from app.kube.events import NORMAL
from app.wire.fields import Obj, WorkloadSpecError
from app.wire.workload import domain_workload, workload_key
from app.wire.workload_status import (
    ADMITTED,
    DEACTIVATION_TARGET,
    eviction_cause,
    execution_deadline,
    has_admission,
    is_active,
    is_evicted,
    is_true,
    priority_class_name,
    set_condition,
    with_admission,
    with_eviction,
)

log = logging.getLogger(__name__)


class OwnerNotifier(Protocol):
    """The job framework's side of the loop (``app.integrations.reconciler.JobReconciler``):
    the loop knows no job kind."""

    def notify(self, workload: Obj | None, key: str) -> None:
        """Workload ``key`` was admitted or evicted by the loop: reconcile its owner."""
        ...

    def owner_object(self, workload: Obj) -> Obj | None:
        """The object that controls ``workload`` (Events about it go there), or None."""
        ...

    def pods_holding(self, workload: Obj, uid: str) -> int | None:
        """How many pods of ``workload``'s owner (uid ``uid``, gone or going) still hold
        resources; None when no pods are watched."""
        ...


class DecisionWriter:
    """Persists admissions, evictions and deactivations of ``cluster``'s Workloads (module
    doc). ``on_admitted(obj)`` is called with every admission this writer stored (the
    lifecycle's ``observe``). Counters: ``admitted``, ``forgotten``, ``evictions``,
    ``evictions_dropped`` (not written: their preemptor no longer waited)."""

    def __init__(self, ctx: Context, cluster: Scheduler, jobs: OwnerNotifier,
                 writes: WorkloadWrites, *, metrics: Any = None,
                 on_admitted: Callable[[Obj], None] = lambda obj: None) -> None:
        self.ctx = ctx
        self.cluster = cluster
        self.jobs = jobs
        self.writes = writes
        self.metrics = metrics
        self.on_admitted = on_admitted
        self.admitted = 0
        self.forgotten = 0
        self.evictions = 0
        self.evictions_dropped = 0
        self._backoff: dict[WorkloadKey, int] = {}
        # maximumExecutionTimeSeconds: (deadline, key) heap; the latest deadline per key.
        self._deadlines: list[tuple[float, WorkloadKey]] = []
        self._deadline_of: dict[WorkloadKey, float] = {}

    # ------------------------------------------------------------------ admission

    async def admit(self, d: Admit) -> None:
        """Persist the core's admission ``d`` (module doc); the caller has put
        ``d.workload`` in ``ctx.inflight``, taken out here."""
        key = d.workload
        ctx = self.ctx
        writes = self.writes
        try:
            async with writes.limit, writes.lock(key):
                obj = ctx.store(WL).get(key)
                if obj is None or not ctx.leader.is_leader:
                    self._forget(key)
                    return
                if has_admission(obj):
                    return  # already stored (e.g. by a previous leader)
                if (obj.get("metadata") or {}).get("deletionTimestamp"):
                    # Its deletion was seen after this decision: no admission for a
                    # Workload that never runs, nor a place in the queues (``InformerFeed``).
                    self.cluster.delete_workload(key)
                    ctx.wake()
                    return
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
                self.on_admitted(out)  # waitForPodsReady: not ready from now on
                self.admitted += 1
                self._backoff.pop(key, None)
                self._announce_admission(out, d)
                if is_true(out, ADMITTED):  # else once its admission checks are Ready
                    self.count_admitted(obj, d.cluster_queue)
        finally:
            ctx.inflight.discard(str(key))
            writes.release(key)
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
                              local_queue=(wl.get("spec") or {}).get("queueName", ""),
                              priority_class=priority_class_name(wl))

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

    # ------------------------------------------------------------------ eviction

    async def evict(self, key: WorkloadKey, reason: str, message: str, victim: Victim | None,
                    d: Preempt | None, *,
                    requeue_state: Mapping[str, Any] | None = None) -> bool:
        """Evicted=True (``reason``, ``message``) on Workload ``key``, which the core has
        marked evicting; for victim ``victim`` of preemption ``d`` also Preempted=True.
        ``requeue_state``: the ``status.requeueState`` to write with it. Returns whether the
        Workload is evicted now; when not, the core's eviction is cancelled."""
        ctx = self.ctx
        writes = self.writes
        ok = False
        try:
            async with writes.limit, writes.lock(key):
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
            writes.release(key)
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
        reason, cause = eviction_cause(wl, reason)
        self.metrics.evicted(str(adm.get("clusterQueue", "")), reason,
                             underlying_cause=cause,
                             priority_class=priority_class_name(wl),
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
                         f"Preempted {workload_key(wl)} to accommodate this workload")

    # ------------------------------------------------------------------ deactivation

    def track_deadline(self, key: WorkloadKey, obj: Obj) -> None:
        """Arm ``key``'s ``maximumExecutionTimeSeconds`` deadline from its object (a new
        admission's deadline replaces the previous one)."""
        deadline = execution_deadline(obj)
        if deadline is not None and self._deadline_of.get(key) != deadline:
            self._deadline_of[key] = deadline
            heapq.heappush(self._deadlines, (deadline, key))

    def drop_deadline(self, key: WorkloadKey) -> None:
        """``key`` finished or is gone: no deadline."""
        self._deadline_of.pop(key, None)

    def expire(self, now: float) -> None:
        """Deactivate the admitted Workloads past their ``maximumExecutionTimeSeconds``
        (Kueue: DeactivationTarget reason MaximumExecutionTimeExceeded, then
        ``spec.active: false``, evicted ``DeactivatedDueToMaximumExecutionTimeExceeded``)."""
        heap = self._deadlines
        while heap and heap[0][0] <= now:
            deadline, key = heapq.heappop(heap)
            if self._deadline_of.get(key) != deadline:
                continue  # superseded by a newer admission's deadline
            del self._deadline_of[key]
            self.writes.spawn(self.deactivate(key, "MaximumExecutionTimeExceeded",
                                              "exceeding the maximum execution time"))

    async def deactivate(self, key: WorkloadKey, reason: str, message: str,
                         still: Callable[[Obj], bool] | None = None) -> bool:
        """DeactivationTarget=True (``reason``) in status, then ``spec.active: false``; the
        Workload event that follows evicts it. ``still(obj)``: the cause still holds on the
        stored object (default: past its maximum execution time, re-armed after
        ``requeue_backoff_seconds`` when the write fails). Returns True when it
        deactivated."""
        retry_limit = still is None  # the time limit is re-armed until it holds
        if still is None:
            def still(o: Obj) -> bool:
                deadline = execution_deadline(o)
                return deadline is not None and deadline <= self.ctx.clock()
        ctx = self.ctx
        writes = self.writes
        ns, name = key.split("/", 1)
        done = False
        try:
            async with writes.limit, writes.lock(key):
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
            writes.release(key)
            if not done and retry_limit and key not in self._deadline_of:
                # Try again later: nothing else re-arms the limit of a running Workload (no
                # event need come), and a failed write must not let it run unbounded.
                retry = ctx.clock() + ctx.settings.scheduling.requeue_backoff_seconds
                self._deadline_of[key] = retry
                heapq.heappush(self._deadlines, (retry, key))
        return False

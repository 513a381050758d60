"""The Workload lifecycle after quota reservation: admission checks and waitForPodsReady
(Kueue v1beta2 workload controller, ``pkg/controller/core/workload_controller.go``;
reference 3.9, 3.10).

Input: Workload objects (``observe``, called by the informer feed for every Workload event
and by the decision writer after each admission it stored; ``observe_all`` on gaining
leadership). Collaborators, passed in: the core (``Scheduler``: the ClusterQueue's checks,
``evict`` marks), ``WorkloadWrites`` (per-Workload lock, write tasks), ``DecisionWriter``
(the evictions and deactivations it decides) and the job framework (``OwnerNotifier``).
Output: ``workloads/status`` updates, Events, evictions. Times are seconds since the epoch
(``ctx.clock()``); RFC 3339 in the objects. A write that fails with 409/404 is decided again
on the Workload's next event; any other failure is logged and looked at again a second
later. Nothing raises to the caller.

Admission checks (Kueue's contract with external check controllers: any controller may set
the state of its check in ``status.admissionChecks``):

- a Workload reserving quota in a ClusterQueue with checks for its flavors gets a Pending
  entry per check and QuotaReserved=True, but Admitted only once every entry is Ready (then
  the job framework starts its object);
- a Retry entry evicts it (reason ``AdmissionCheck``, "Evicted due to AdmissionCheck in
  Retry state: ..."): the object stops, the quota is released, the checks are reset to
  Pending and the Workload waits until ``requeueState.requeueAt`` (the latest
  lastTransitionTime + ``requeueAfterSeconds`` of its Retry checks; at once when unset) with
  Requeued=False, then queues again;
- a Rejected entry deactivates it (DeactivationTarget, then ``spec.active: false``, then the
  eviction ``DeactivatedDueToAdmissionCheck``);
- the entries follow the ClusterQueue's ``admissionChecksStrategy`` while the quota is held
  (Kueue ``syncAdmissionCheckConditions``); ``awaiting_checks`` lists the Workloads holding
  quota that are not Admitted yet (the queue status counts them as reserving only).

waitForPodsReady (``Settings.wait_for_pods_ready``): an admitted Workload whose PodsReady
condition (written by the job framework's reconciler) is not True ``timeout_seconds`` after
Admitted turned True, or ``recovery_seconds`` after PodsReady turned False with
WaitForRecovery, is evicted whole with reason ``PodsReadyTimeout`` ("Exceeded the PodsReady
timeout ns/name") and ``requeueState`` {count + 1, requeueAt = now + base * 2^count, capped};
once ``count`` would exceed ``backoff_limit_count`` it is deactivated instead (reason
``RequeuingLimitExceeded``). ``not_ready`` lists the admitted Workloads whose pods are not
Ready yet (``block_admission`` holds every admission while it is not empty). Both backoffs
keep the Workload out of the core (Requeued=False) until ``requeueAt``; then Requeued=True
(BackoffFinished) and it queues again.

Timers: a Workload that will need a decision later (a timeout, a backoff's end) is looked at
again then (``loop.call_later``), and on any event of it sooner.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from app.controllers.decision_writer import DecisionWriter, OwnerNotifier
from app.controllers.write_tasks import WorkloadWrites
from app.core.scheduling_cycle import Scheduler
from app.core.spec import checks_for_flavors
from app.core.types import WorkloadKey
from app.kube.client import WORKLOADS
from app.kube.context import Context
from app.kube.errors import Conflict, NotFound, from_exception
from app.kube.events import NORMAL, WARNING
from app.wire.fields import Obj
from app.wire.workload import workload_key
from app.wire.workload_status import (
    ADMITTED,
    BACKOFF_REASONS,
    PODS_READY,
    REQUEUED,
    check_states,
    condition,
    has_admission,
    is_active,
    is_evicted,
    is_finished,
    is_true,
    parse_time,
    rfc3339,
    with_backoff_finished,
    with_checks_admitted,
    with_checks_synced,
)

log = logging.getLogger(__name__)

def checks_message(checks: list[Obj], state: str) -> str:
    """Kueue ``buildAdmissionChecksMessage``: ``AdmissionCheck in Retry state: "prov"
    (no capacity)``, names sorted."""
    parts = [f'"{c.get("name")}" ({c["message"]})' if c.get("message") else f'"{c.get("name")}"'
             for c in sorted(checks, key=lambda c: str(c.get("name")))]
    noun = "AdmissionChecks" if len(checks) > 1 else "AdmissionCheck"
    return f"{noun} in {state} state: {'; '.join(parts)}"


def retry_requeue_at(checks: list[Obj]) -> float | None:
    """The latest lastTransitionTime + ``requeueAfterSeconds`` of the Retry checks (Kueue
    ``GetMaxRetryTime``), or None when none sets a delay."""
    at = [t + float(c["requeueAfterSeconds"]) for c in checks
          if c.get("state") == "Retry" and c.get("requeueAfterSeconds") is not None
          and (t := parse_time(c.get("lastTransitionTime"))) is not None]
    return max(at) if at else None


def backoff_seconds(count: int, base: float, cap: float) -> float:
    """Kueue ``UpdateRequeueState``: base * 2^(count-1) seconds, at most ``cap`` (count >= 1)."""
    return float(min(cap, base * 2 ** max(0, min(count - 1, 40))))


def pods_ready_deadline(wl: Mapping[str, Any], timeout: float,
                        recovery: float) -> float | None:
    """When an admitted Workload's pods-ready wait times out (seconds since the epoch), or
    None when nothing is waited for (not admitted, PodsReady True). Kueue
    ``admittedNotReadyWorkload``: ``timeout`` from Admitted's lastTransitionTime while
    PodsReady is absent or WaitForStart; ``recovery`` from PodsReady's lastTransitionTime
    with WaitForRecovery."""
    if not is_true(wl, ADMITTED):
        return None
    pr = condition(wl, PODS_READY)
    if pr is not None and pr.get("status") == "True":
        return None
    if pr is not None and pr.get("reason") == "WaitForRecovery":
        since = parse_time(pr.get("lastTransitionTime"))
        return None if since is None else since + recovery
    since = parse_time((condition(wl, ADMITTED) or {}).get("lastTransitionTime"))
    return None if since is None else since + timeout


def backoff_held(wl: Mapping[str, Any]) -> bool:
    """The Workload waits out a requeue backoff: no admission and Requeued=False after a
    ``BACKOFF_REASONS`` eviction. Kueue keeps it out of the queue until the backoff ends."""
    c = condition(wl, REQUEUED)
    return (not has_admission(wl) and c is not None and c.get("status") == "False"
            and c.get("reason") in BACKOFF_REASONS)


class Lifecycle:
    """Admission checks and waitForPodsReady for the Workloads of ``cluster`` (module doc).
    Counters: ``deactivations``, ``timeouts``, ``check_evictions``, ``backoffs_finished``."""

    def __init__(self, ctx: Context, cluster: Scheduler, writes: WorkloadWrites,
                 decisions: DecisionWriter, jobs: OwnerNotifier) -> None:
        self.ctx = ctx
        self.cluster = cluster
        self.writes = writes
        self.decisions = decisions
        self.jobs = jobs
        self.cfg = ctx.settings.wait_for_pods_ready
        self.not_ready: set[WorkloadKey] = set()
        # Holding quota, admission checks not all Ready: not Admitted (queue status counts).
        self.awaiting_checks: set[WorkloadKey] = set()
        self._timers: dict[WorkloadKey, asyncio.TimerHandle] = {}
        self._busy: set[WorkloadKey] = set()
        self.deactivations = 0
        self.timeouts = 0
        self.check_evictions = 0
        self.backoffs_finished = 0

    # ------------------------------------------------------------------ observing

    def forget(self, key: WorkloadKey) -> None:
        """``key`` is gone or finished: drop its timer and readiness."""
        self.not_ready.discard(key)
        self.awaiting_checks.discard(key)
        t = self._timers.pop(key, None)
        if t is not None:
            t.cancel()

    def observe_all(self) -> None:
        """``observe`` every stored Workload (on gaining leadership: a follower kept no
        timers and wrote nothing)."""
        for obj in list(self.ctx.store("wl")):
            self.observe(obj)

    def observe(self, obj: Mapping[str, Any]) -> None:
        """Look at one Workload (a watch event or a timer) and start what it needs: one
        write at a time per Workload; the result comes back as an event."""
        key = workload_key(obj)
        if is_finished(obj):
            self.forget(key)
            return
        self._track_ready(key, obj)
        if not self.ctx.may_write or key in self._busy:
            return
        t = self._timers.pop(key, None)
        if t is not None:
            t.cancel()
        now = self.ctx.clock()
        if backoff_held(obj):
            at = parse_time(((obj.get("status") or {}).get("requeueState") or {}).get("requeueAt"))
            if at is None or at <= now:
                self._run(key, self._backoff_finished(key))
            else:
                self._later(key, at - now)
            return
        if not has_admission(obj) or is_evicted(obj) or not is_active(obj):
            return
        want = self._checks_for(obj)
        if want is not None and set(want) != {c.get("name") for c in check_states(obj)}:
            self._run(key, self._sync_checks(key, want))
            return
        checks = check_states(obj)
        rejected = [c for c in checks if c.get("state") == "Rejected"]
        retry = [c for c in checks if c.get("state") == "Retry"]
        if rejected:
            self._deactivate(key, "AdmissionCheck", checks_message(rejected, "Rejected"),
                             lambda o: any(c.get("state") == "Rejected"
                                           for c in check_states(o)))
            return
        if retry:
            self._evict_for_retry(key, retry, now)
            return
        if not is_true(obj, ADMITTED):
            if all(c.get("state") == "Ready" for c in checks):
                self._run(key, self._admit_checked(key))
            return
        if self.cfg.enable:
            self._pods_ready_timeout(key, obj, now)

    def _checks_for(self, obj: Mapping[str, Any]) -> tuple[str, ...] | None:
        """The checks the Workload's ClusterQueue asks of its admitted flavors now (Kueue
        ``AdmissionChecksForWorkload``), sorted; None when the ClusterQueue is unknown."""
        adm = (obj.get("status") or {}).get("admission") or {}
        spec = self.cluster.cluster_queue_spec(adm.get("clusterQueue", ""))
        if spec is None:
            return None
        return checks_for_flavors(spec, {f for psa in adm.get("podSetAssignments") or []
                                         for f in (psa.get("flavors") or {}).values()})

    def _track_ready(self, key: WorkloadKey, obj: Mapping[str, Any]) -> None:
        if has_admission(obj) and not is_true(obj, ADMITTED) and not is_evicted(obj):
            self.awaiting_checks.add(key)
        else:
            self.awaiting_checks.discard(key)
        pr = condition(obj, PODS_READY)
        waiting = (self.cfg.enable and has_admission(obj) and is_true(obj, ADMITTED)
                   and not is_evicted(obj) and is_active(obj)
                   and not (pr is not None and pr.get("status") == "True"))
        if waiting:
            self.not_ready.add(key)
        elif key in self.not_ready:
            self.not_ready.discard(key)
            self.ctx.wake()  # blockAdmission may have held a cycle for it

    def _later(self, key: WorkloadKey, delay: float) -> None:
        def again() -> None:
            self._timers.pop(key, None)
            obj = self.ctx.store("wl").get(key)
            if obj is not None:
                self.observe(obj)
        self._timers[key] = asyncio.get_running_loop().call_later(max(0.0, delay) + 0.05,
                                                                  again)

    def _run(self, key: WorkloadKey, coro: Any) -> None:
        self._busy.add(key)

        async def run() -> None:
            try:
                async with self.writes.lock(key):
                    await coro
            except (Conflict, NotFound):
                pass  # changed or gone: the next event of it decides again
            except Exception as exc:  # noqa: BLE001 - logged, retried on the next event
                log.warning("lifecycle write of %s failed: %s", key, from_exception(exc))
                self._later(key, 1.0)
            finally:
                self._busy.discard(key)
                self.writes.release(key)
                obj = self.ctx.store("wl").get(key)
                if obj is not None:
                    self.observe(obj)
        self.writes.spawn(run())

    # ------------------------------------------------------------------ decisions

    def _pods_ready_timeout(self, key: WorkloadKey, obj: Mapping[str, Any], now: float) -> None:
        deadline = pods_ready_deadline(obj, self.cfg.timeout_seconds, self.cfg.recovery_seconds)
        if deadline is None:
            return
        if deadline > now:
            self._later(key, deadline - now)
            return
        rs = self.cfg.requeuing_strategy
        count = int(((obj.get("status") or {}).get("requeueState") or {}).get("count") or 0)
        if rs.backoff_limit_count is not None and count + 1 > rs.backoff_limit_count:
            self._deactivate(key, "RequeuingLimitExceeded",
                             "exceeding the maximum number of re-queuing retries",
                             lambda o: has_admission(o) and not is_evicted(o))
            return
        if not self.cluster.evict(key, now):
            return
        self.timeouts += 1
        delay = backoff_seconds(count + 1, rs.backoff_base_seconds, rs.backoff_max_seconds)
        state = {"count": count + 1, "requeueAt": rfc3339(now + delay)}
        self._evict(key, "PodsReadyTimeout", f"Exceeded the PodsReady timeout {key}", state)

    def _evict_for_retry(self, key: WorkloadKey, retry: list[Obj], now: float) -> None:
        if not self.cluster.evict(key, now):
            return
        self.check_evictions += 1
        obj = self.ctx.store("wl").get(key) or {}
        state = dict((obj.get("status") or {}).get("requeueState") or {})
        at = retry_requeue_at(retry)
        if at is not None and at > now:
            state["requeueAt"] = rfc3339(at)
        else:
            state.pop("requeueAt", None)
        self._evict(key, "AdmissionCheck", f"Evicted due to {checks_message(retry, 'Retry')}",
                    state)

    def _evict(self, key: WorkloadKey, reason: str, message: str,
               requeue_state: Mapping[str, Any]) -> None:
        self._in_writer(key, self.decisions.evict(key, reason, message, None, None,
                                            requeue_state=requeue_state))

    def _deactivate(self, key: WorkloadKey, reason: str, message: str,
                    still: Callable[[Obj], bool]) -> None:
        """DeactivationTarget then ``spec.active: false`` (``DecisionWriter.deactivate``; the
        deactivated Workload is then evicted, ``DeactivatedDueTo<reason>``)."""
        async def run() -> bool:
            if not await self.decisions.deactivate(key, reason, message, still):
                return False
            self.deactivations += 1
            obj = self.ctx.store("wl").get(key)
            if reason == "AdmissionCheck" and obj is not None:
                self.ctx.recorder.emit(obj, WARNING, "AdmissionCheckRejected",
                                       f"Deactivated due to {message}")
            return True
        self._in_writer(key, run())

    def _in_writer(self, key: WorkloadKey, coro: Any) -> None:
        """Run one of the decision writer's writes (which takes the Workload's lock itself;
        True when it wrote) for ``key``, then look at the Workload again: at once, or a
        second later when the write did not happen (so a failing API server is not
        hammered)."""
        self._busy.add(key)

        async def run() -> None:
            ok = False
            try:
                ok = bool(await coro)
            finally:
                self._busy.discard(key)
                obj = self.ctx.store("wl").get(key)
                if not ok:
                    self._later(key, 1.0)
                elif obj is not None:
                    self.observe(obj)
        self.writes.spawn(run())

    # ------------------------------------------------------------------ writes

    async def _put_status(self, body: Obj) -> Obj:
        out = await self.ctx.client.replace(WORKLOADS, body, subresource="status")
        self.ctx.store("wl").put(out)
        return out

    async def _admit_checked(self, key: WorkloadKey) -> None:
        obj = self.ctx.store("wl").get(key)
        if obj is None or not has_admission(obj) or is_evicted(obj):
            return
        body, changed = with_checks_admitted(obj, self.ctx.clock())
        if not changed:
            return
        out = await self._put_status(body)
        self.jobs.notify(out, str(key))
        cq = out["status"]["admission"]["clusterQueue"]
        self.ctx.recorder.emit(out, NORMAL, "Admitted", f"Admitted by ClusterQueue {cq}")
        self.decisions.count_admitted(out, cq)

    async def _sync_checks(self, key: WorkloadKey, want: tuple[str, ...]) -> None:
        obj = self.ctx.store("wl").get(key)
        if obj is None or not has_admission(obj) or is_evicted(obj):
            return
        body, changed = with_checks_synced(obj, want, self.ctx.clock())
        if changed:
            out = await self._put_status(body)
            self.jobs.notify(out, str(key))

    async def _backoff_finished(self, key: WorkloadKey) -> None:
        obj = self.ctx.store("wl").get(key)
        if obj is None or not backoff_held(obj):
            return
        await self._put_status(with_backoff_finished(obj, self.ctx.clock()))
        self.backoffs_finished += 1
        self.ctx.wake()


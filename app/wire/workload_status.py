"""Workload object status as Kueue v1beta2 writes it (reference section 2): pure builders.

Each ``with_*`` function returns a new Workload object (dict) whose ``status`` reflects one
step of the lifecycle; the caller PUTs it to ``/status`` with the object's resourceVersion
(optimistic concurrency). Conditions follow metav1.Condition rules: ``lastTransitionTime``
changes only when ``status`` changes; ``observedGeneration`` = ``metadata.generation``.

Lifecycle: pending (QuotaReserved=False, reason/message from the core) -> quota reserved
and admitted (``status.admission`` + QuotaReserved=True "Quota reserved in ClusterQueue
<cq>" + Admitted=True "The workload is admitted") -> finished (Finished=True, Succeeded or
Failed). Eviction: Evicted=True (+ Preempted=True when preempted) while the quota is still
held; when the Job has stopped, ``admission`` is cleared, QuotaReserved=False, Admitted=False
(NoReservation) and Requeued=True. A new reservation resets Evicted/Preempted to False with
reason QuotaReserved and message "Previously: <old message>".
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from app.core.quantity import format_quantity
from app.core.workload import Admission
from app.wire.fields import Obj

QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
EVICTED = "Evicted"
PREEMPTED = "Preempted"
REQUEUED = "Requeued"
DEACTIVATION_TARGET = "DeactivationTarget"
DEACTIVATED_DUE_TO = "DeactivatedDueTo"  # Evicted reason prefix: Kueue ReasonWithCause
STOPPED_REASONS = frozenset({"ClusterQueueStopped", "LocalQueueStopped"})
FINISHED = "Finished"
PODS_READY = "PodsReady"

# Eviction reasons after which the Workload waits out a backoff (``status.requeueState``)
# with Requeued=False before it queues again (Kueue workload controller).
BACKOFF_REASONS = frozenset({"PodsReadyTimeout", "AdmissionCheck"})

MAX_MESSAGE = 32768


def rfc3339(ts: float) -> str:
    """Seconds since the epoch -> ``2024-01-02T03:04:05Z`` (metav1.Time, second precision)."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: Any) -> float | None:
    """metav1.Time (``2024-01-02T03:04:05Z``) -> seconds since the epoch; None when absent
    or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def execution_deadline(wl: Mapping[str, Any]) -> float | None:
    """When an admitted Workload exceeds ``spec.maximumExecutionTimeSeconds`` (seconds since
    the epoch): Admitted=True time + the limit - ``status.accumulatedPastExecutionTimeSeconds``
    (Kueue v1beta2 Workload); None without a limit or when not admitted."""
    limit = (wl.get("spec") or {}).get("maximumExecutionTimeSeconds")
    adm = condition(wl, ADMITTED)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1 or adm is None \
            or adm.get("status") != "True" or not has_admission(wl):
        return None
    since = parse_time(adm.get("lastTransitionTime"))
    if since is None:
        return None
    past = (wl.get("status") or {}).get("accumulatedPastExecutionTimeSeconds") or 0
    return since + limit - (past if isinstance(past, int) else 0)


def conditions(obj: Mapping[str, Any]) -> list[Obj]:
    return list(((obj.get("status") or {}).get("conditions")) or [])


def condition(obj: Mapping[str, Any], ctype: str) -> Obj | None:
    """The condition of type ``ctype`` or None."""
    for c in conditions(obj):
        if c.get("type") == ctype:
            return c
    return None


def is_true(obj: Mapping[str, Any], ctype: str) -> bool:
    c = condition(obj, ctype)
    return c is not None and c.get("status") == "True"


def priority_class_name(wl: Mapping[str, Any]) -> str:
    """``spec.priorityClassRef.name`` of a Workload, or ``""`` (Kueue ``PriorityClassName``:
    the ``priority_class`` label of its metrics)."""
    ref = (wl.get("spec") or {}).get("priorityClassRef")
    return str(ref.get("name") or "") if isinstance(ref, Mapping) else ""


def eviction_cause(wl: Mapping[str, Any], reason: str) -> tuple[str, str]:
    """``(reason, underlying_cause)`` as Kueue v0.17.1 reports an eviction of ``wl`` written
    with Evicted reason ``reason`` in its metrics: ``DeactivatedDueTo<X>`` (the condition's
    reason, Kueue ``ReasonWithCause``) is ``("Deactivated", X)``; ``PodsReadyTimeout`` has
    cause ``WaitForStart`` or ``WaitForRecovery`` (from the PodsReady condition); any other
    reason has cause ``""`` (a preemption's cause is in its Preempted condition)."""
    if reason.startswith(DEACTIVATED_DUE_TO):
        return "Deactivated", reason[len(DEACTIVATED_DUE_TO):]
    if reason == "PodsReadyTimeout":
        ready = condition(wl, PODS_READY)
        recovery = ready is not None and ready.get("reason") == "WaitForRecovery"
        return reason, "WaitForRecovery" if recovery else "WaitForStart"
    return reason, ""


def is_finished(obj: Mapping[str, Any]) -> bool:
    return is_true(obj, FINISHED)


def has_admission(obj: Mapping[str, Any]) -> bool:
    """``status.admission`` is set: the Workload holds quota (admitted, or evicted but not
    yet released)."""
    return bool((obj.get("status") or {}).get("admission"))


def is_evicted(obj: Mapping[str, Any]) -> bool:
    """Evicted=True while the quota is still held (the eviction is in progress)."""
    return has_admission(obj) and is_true(obj, EVICTED)


def is_active(obj: Mapping[str, Any]) -> bool:
    """``spec.active`` (default true)."""
    return (obj.get("spec") or {}).get("active", True) is not False


def set_condition(obj: Obj, ctype: str, status: str, reason: str, message: str,
                  now: float) -> bool:
    """Set one condition on ``obj`` in place; returns True when anything changed."""
    st = obj.setdefault("status", {})
    conds = st.setdefault("conditions", [])
    message = message[:MAX_MESSAGE]
    gen = (obj.get("metadata") or {}).get("generation")
    for c in conds:
        if c.get("type") != ctype:
            continue
        changed = (c.get("status"), c.get("reason"), c.get("message")) != (status, reason, message)
        if c.get("status") != status:
            c["lastTransitionTime"] = rfc3339(now)
        c.update(status=status, reason=reason, message=message)
        if gen is not None:
            changed = changed or c.get("observedGeneration") != gen
            c["observedGeneration"] = gen
        return changed
    new: Obj = {"type": ctype, "status": status, "reason": reason, "message": message,
                "lastTransitionTime": rfc3339(now)}
    if gen is not None:
        new["observedGeneration"] = gen
    conds.append(new)
    return True


def admission_status(admission: Admission) -> Obj:
    """Domain ``Admission`` -> ``status.admission`` JSON (quantities in canonical form)."""
    return {
        "clusterQueue": admission.cluster_queue,
        "podSetAssignments": [
            {
                "name": psa.name,
                "flavors": dict(psa.flavors),
                "resourceUsage": {r: format_quantity(v, r) for r, v in psa.resource_usage.items()},
                "count": psa.count,
            }
            for psa in admission.pod_set_assignments
        ],
    }


def _reset_previous(out: Obj, ctype: str, now: float) -> None:
    c = condition(out, ctype)
    if c is not None and c.get("status") == "True":
        set_condition(out, ctype, "False", QUOTA_RESERVED, f"Previously: {c.get('message', '')}",
                      now)


def check_states(obj: Mapping[str, Any]) -> list[Obj]:
    """``status.admissionChecks`` (Kueue v1beta2 AdmissionCheckState entries)."""
    return [c for c in ((obj.get("status") or {}).get("admissionChecks") or [])
            if isinstance(c, Mapping)]


def all_checks_ready(obj: Mapping[str, Any]) -> bool:
    """Every admission check of the Workload is Ready (True when it has none)."""
    return all(c.get("state") == "Ready" for c in check_states(obj))


def sync_admitted(out: Obj, now: float) -> bool:
    """Kueue ``SyncAdmittedCondition`` in place: Admitted=True exactly when quota is reserved
    and every admission check is Ready. A Workload never admitted gets no Admitted condition
    while it waits; one that was gets False with reason NoReservation,
    NoReservationUnsatisfiedChecks or UnsatisfiedChecks. Returns True when it changed."""
    reserved = has_admission(out) and is_true(out, QUOTA_RESERVED)
    ready = all_checks_ready(out)
    admitted = is_true(out, ADMITTED)
    if admitted == (reserved and ready):
        return False
    if reserved and ready:
        return set_condition(out, ADMITTED, "True", ADMITTED, "The workload is admitted", now)
    if not reserved and not ready:
        reason, msg = ("NoReservationUnsatisfiedChecks",
                       "The workload has no reservation and not all checks ready")
    elif not reserved:
        reason, msg = "NoReservation", "The workload has no reservation"
    else:
        reason, msg = "UnsatisfiedChecks", "The workload has not all checks ready"
    return set_condition(out, ADMITTED, "False", reason, msg, now)


def _sync_checks(out: Obj, checks: tuple[str, ...], now: float) -> None:
    """``status.admissionChecks`` = one entry per name of ``checks`` (Kueue
    ``syncAdmissionCheckConditions``): existing entries kept, new ones Pending, others
    dropped, sorted by name."""
    st = out.setdefault("status", {})
    have = {c.get("name"): c for c in check_states(out)}
    if not checks:
        st.pop("admissionChecks", None)
        return
    st["admissionChecks"] = [have.get(n) or {"name": n, "state": "Pending", "message": "",
                                             "lastTransitionTime": rfc3339(now)}
                             for n in sorted(checks)]


def with_checks_synced(wl: Obj, checks: tuple[str, ...], now: float) -> tuple[Obj, bool]:
    """The ClusterQueue's checks for the Workload's flavors changed since its reservation:
    ``status.admissionChecks`` = ``checks`` (``_sync_checks``) and Admitted re-synced (a new
    Pending check un-admits it, a removed one may admit it); (object, changed)."""
    out = copy.deepcopy(wl)
    before = check_states(out)
    _sync_checks(out, checks, now)
    changed = check_states(out) != before
    return out, sync_admitted(out, now) or changed


def with_admission(wl: Obj, admission: Admission, now: float,
                   checks: tuple[str, ...] = ()) -> Obj:
    """Quota reserved in ``admission.cluster_queue``; Admitted=True at once when the
    ClusterQueue has no admission checks for the chosen flavors (``checks``: their names),
    else each check gets a Pending entry in ``status.admissionChecks`` and the Workload is
    Admitted only when all are Ready (``sync_admitted``, Kueue v1beta2)."""
    out = copy.deepcopy(wl)
    out.setdefault("status", {})["admission"] = admission_status(admission)
    cq = admission.cluster_queue
    set_condition(out, QUOTA_RESERVED, "True", QUOTA_RESERVED,
                  f"Quota reserved in ClusterQueue {cq}", now)
    _sync_checks(out, checks, now)
    sync_admitted(out, now)
    _reset_previous(out, EVICTED, now)
    _reset_previous(out, PREEMPTED, now)
    _restarted(out, now)
    return out


def _restarted(out: Obj, now: float) -> bool:
    """A Workload a stop policy drained (Requeued=False ``ClusterQueueStopped`` /
    ``LocalQueueStopped``) is queued or admitted again: Requeued=True ``...Restarted``."""
    req = condition(out, REQUEUED) or {}
    if req.get("status") != "False" or req.get("reason") not in STOPPED_REASONS:
        return False
    again = str(req["reason"]).replace("Stopped", "Restarted")
    return set_condition(out, REQUEUED, "True", again, "The queue was restarted", now)


def with_pending(wl: Obj, reason: str, message: str, now: float, *,
                 queued: bool = True) -> tuple[Obj, bool]:
    """QuotaReserved=False with the core's ``reason`` / ``message``; (object, changed).
    ``queued``: its queue takes it again (not stopped nor inactive), so a Workload a stop
    policy drained gets Requeued=True ``ClusterQueueRestarted`` / ``LocalQueueRestarted``."""
    out = copy.deepcopy(wl)
    changed = set_condition(out, QUOTA_RESERVED, "False", reason, message, now)
    if queued:
        changed = _restarted(out, now) or changed
    return out, changed


def with_inadmissible(wl: Obj, reason: str, message: str, now: float) -> tuple[Obj, bool]:
    """QuotaReserved=False and Requeued=False, both with ``reason`` (Kueue's ``Inadmissible``
    for a Workload whose DRA claims it cannot count: it stays out of the queue until its
    spec, templates or mappings change); (object, changed)."""
    out = copy.deepcopy(wl)
    changed = set_condition(out, QUOTA_RESERVED, "False", reason, message, now)
    changed = set_condition(out, REQUEUED, "False", reason, message, now) or changed
    return out, changed


def with_requeued(wl: Obj, reason: str, message: str, now: float) -> tuple[Obj, bool]:
    """Requeued=True with ``reason`` (``DRAResourcesResolved``: its claims can be counted
    again, Kueue #15888); (object, changed)."""
    out = copy.deepcopy(wl)
    return out, set_condition(out, REQUEUED, "True", reason, message, now)


def with_eviction(wl: Obj, reason: str, message: str, now: float, *,
                  preempted_reason: str | None = None,
                  requeue_state: Mapping[str, Any] | None = None) -> Obj:
    """Evicted=True (``reason``: Preempted, ClusterQueueStopped, ...) and, for a
    preemption, Preempted=True with ``preempted_reason`` (InClusterQueue,
    InCohortReclamation, ...). Admission checks not Pending are reset to Pending (a Retry
    one counts a retry), a deactivation consumes the DeactivationTarget condition, and
    ``requeue_state`` (``{count, requeueAt}``) replaces ``status.requeueState`` when given
    (Kueue ``Evict``).
    The quota stays held until ``with_released``."""
    out = copy.deepcopy(wl)
    set_condition(out, EVICTED, "True", reason, message, now)
    if reason.startswith("Deactivated"):  # the request is carried out: Kueue drops it
        st = out.get("status") or {}
        st["conditions"] = [c for c in st.get("conditions") or []
                            if c.get("type") != DEACTIVATION_TARGET]
    if preempted_reason:
        set_condition(out, PREEMPTED, "True", preempted_reason, message, now)
    for c in check_states(out):
        if c.get("state") == "Pending":
            continue
        if c.get("state") == "Retry":
            c["retryCount"] = int(c.get("retryCount") or 0) + 1
        c.update(state="Pending", lastTransitionTime=rfc3339(now),
                 message=f"Reset to Pending after eviction. Previously: {c.get('state')}")
    if requeue_state is not None:
        out.setdefault("status", {})["requeueState"] = dict(requeue_state)
    return out


def with_checks_admitted(wl: Obj, now: float) -> tuple[Obj, bool]:
    """Every admission check turned Ready: Admitted=True (``sync_admitted``); (object,
    changed)."""
    out = copy.deepcopy(wl)
    return out, sync_admitted(out, now)


def with_backoff_finished(wl: Obj, now: float) -> Obj:
    """The requeue backoff is over: ``requeueState.requeueAt`` cleared and Requeued=True
    (reason BackoffFinished); the Workload queues again."""
    out = copy.deepcopy(wl)
    rs = (out.get("status") or {}).get("requeueState")
    if isinstance(rs, dict):
        rs.pop("requeueAt", None)
    set_condition(out, REQUEUED, "True", "BackoffFinished", "The workload backoff was finished",
                  now)
    return out


POD_READY_MESSAGES = {
    "Started": "All pods reached readiness and the workload is running",
    "Recovered": "All pods reached readiness and the workload is running",
    "WaitForStart": "Not all pods are ready or succeeded",
    "WaitForRecovery": "At least one pod has failed, waiting for recovery",
}


def pods_ready_condition(wl: Mapping[str, Any], ready: bool) -> tuple[str, str]:
    """(status, reason) of the PodsReady condition for an admitted Workload whose pods are
    (``ready``) or are not all Ready (Kueue ``generatePodsReadyCondition``): True Started,
    or Recovered after a recovery; False WaitForStart before they first were, WaitForRecovery
    after (a pod failed)."""
    c = condition(wl, PODS_READY)
    if ready:
        recovering = c is not None and c.get("reason") in ("WaitForRecovery", "Recovered")
        return "True", "Recovered" if recovering else "Started"
    if c is not None and (c.get("status") == "True" or c.get("reason") == "WaitForRecovery"):
        return "False", "WaitForRecovery"
    return "False", "WaitForStart"


def with_pods_ready(wl: Obj, ready: bool, now: float) -> tuple[Obj, bool]:
    """The PodsReady condition for ``ready`` (``pods_ready_condition``); (object, changed)."""
    out = copy.deepcopy(wl)
    status, reason = pods_ready_condition(wl, ready)
    return out, set_condition(out, PODS_READY, status, reason, POD_READY_MESSAGES[reason], now)


def with_released(wl: Obj, now: float) -> Obj:
    """The evicted Workload's Job has stopped: clear ``admission``, QuotaReserved=False,
    Admitted=False (``sync_admitted``: NoReservation...), PodsReady=False (WaitForStart) when
    present, and Requeued with the eviction's reason: True, or False after a stop policy's
    drain (Kueue keeps it out of the queue until the queue restarts) or a ``BACKOFF_REASONS``
    eviction (it waits out its backoff)."""
    out = copy.deepcopy(wl)
    adm = condition(out, ADMITTED) or {}
    since = parse_time(adm.get("lastTransitionTime")) if adm.get("status") == "True" else None
    if since is not None:  # Kueue accumulates the admitted time across admissions
        past = int((out.get("status") or {}).get("accumulatedPastExecutionTimeSeconds") or 0)
        out["status"]["accumulatedPastExecutionTimeSeconds"] = past + max(0, int(now - since))
    out.setdefault("status", {}).pop("admission", None)
    ev = condition(out, EVICTED) or {}
    msg = str(ev.get("message") or "The workload was evicted")
    reason = str(ev.get("reason") or "Evicted")
    set_condition(out, QUOTA_RESERVED, "False", "Pending", msg, now)
    sync_admitted(out, now)
    if condition(out, PODS_READY) is not None:
        set_condition(out, PODS_READY, "False", "WaitForStart",
                      POD_READY_MESSAGES["WaitForStart"], now)
    # Kueue keeps a Workload drained by a stop policy, or waiting out a backoff, out of the
    # queue (Requeued=False with the eviction's reason).
    held = reason in STOPPED_REASONS or reason in BACKOFF_REASONS
    set_condition(out, REQUEUED, "False" if held else "True", reason, msg, now)
    return out


def with_finished(wl: Obj, reason: str, message: str, now: float) -> Obj:
    """Finished=True (``Succeeded`` / ``Failed`` / ``FailedToStart``)."""
    out = copy.deepcopy(wl)
    set_condition(out, FINISHED, "True", reason, message, now)
    return out

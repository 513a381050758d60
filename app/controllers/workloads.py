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

Obj = dict[str, Any]

QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
EVICTED = "Evicted"
PREEMPTED = "Preempted"
REQUEUED = "Requeued"
DEACTIVATION_TARGET = "DeactivationTarget"
STOPPED_REASONS = frozenset({"ClusterQueueStopped", "LocalQueueStopped"})
FINISHED = "Finished"

MAX_MESSAGE = 32768


def rfc3339(ts: float) -> str:
    """Seconds since the epoch -> ``2024-01-02T03:04:05Z`` (metav1.Time, second precision)."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _seconds(value: Any) -> float | None:
    """metav1.Time -> seconds since the epoch (None when absent or unreadable)."""
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
    since = _seconds(adm.get("lastTransitionTime"))
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


def with_admission(wl: Obj, admission: Admission, now: float) -> Obj:
    """Quota reserved and admitted in ``admission.cluster_queue`` (no admission checks)."""
    out = copy.deepcopy(wl)
    out.setdefault("status", {})["admission"] = admission_status(admission)
    cq = admission.cluster_queue
    set_condition(out, QUOTA_RESERVED, "True", QUOTA_RESERVED,
                  f"Quota reserved in ClusterQueue {cq}", now)
    set_condition(out, ADMITTED, "True", ADMITTED, "The workload is admitted", now)
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


def with_eviction(wl: Obj, reason: str, message: str, now: float, *,
                  preempted_reason: str | None = None) -> Obj:
    """Evicted=True (``reason``: Preempted, ClusterQueueStopped, ...) and, for a
    preemption, Preempted=True with ``preempted_reason`` (InClusterQueue,
    InCohortReclamation, ...). The quota stays held until ``with_released``."""
    out = copy.deepcopy(wl)
    set_condition(out, EVICTED, "True", reason, message, now)
    if reason.startswith("Deactivated"):  # the request is carried out: Kueue drops it
        st = out.get("status") or {}
        st["conditions"] = [c for c in st.get("conditions") or []
                            if c.get("type") != DEACTIVATION_TARGET]
    if preempted_reason:
        set_condition(out, PREEMPTED, "True", preempted_reason, message, now)
    return out


def with_released(wl: Obj, now: float) -> Obj:
    """The evicted Workload's Job has stopped: clear ``admission``, QuotaReserved=False,
    Admitted=False (NoReservation) and Requeued with the eviction's reason: True, or False
    after a stop policy's drain (Kueue keeps it out of the queue until the queue restarts)."""
    out = copy.deepcopy(wl)
    adm = condition(out, ADMITTED) or {}
    since = _seconds(adm.get("lastTransitionTime")) if adm.get("status") == "True" else None
    if since is not None:  # Kueue accumulates the admitted time across admissions
        past = int((out.get("status") or {}).get("accumulatedPastExecutionTimeSeconds") or 0)
        out["status"]["accumulatedPastExecutionTimeSeconds"] = past + max(0, int(now - since))
    out.setdefault("status", {}).pop("admission", None)
    ev = condition(out, EVICTED) or {}
    msg = str(ev.get("message") or "The workload was evicted")
    set_condition(out, QUOTA_RESERVED, "False", "Pending", msg, now)
    if condition(out, ADMITTED) is not None:
        set_condition(out, ADMITTED, "False", "NoReservation", "The workload has no reservation",
                      now)
    reason = str(ev.get("reason") or "Evicted")
    # Kueue keeps a Workload drained by a stop policy out of the queue (Requeued=False with
    # the eviction's reason) until its queue restarts.
    requeued = "False" if reason in STOPPED_REASONS else "True"
    set_condition(out, REQUEUED, requeued, reason, msg, now)
    return out


def with_finished(wl: Obj, reason: str, message: str, now: float) -> Obj:
    """Finished=True (``Succeeded`` / ``Failed`` / ``FailedToStart``)."""
    out = copy.deepcopy(wl)
    set_condition(out, FINISHED, "True", reason, message, now)
    return out

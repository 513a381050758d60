"""Applying an admission to pod templates, for every job kind (Kueue ``RunWithPodSetsInfo``,
kueue-semantics.md 4.4): the ``nodeLabels`` of the flavors assigned to a podSet become its
nodeSelector, their ``tolerations`` are appended without duplicates (a toleration with an empty
operator equals one with ``Equal``, KQ-21 / kueue#11147), and the pod label
``kueue.x-k8s.io/podset=<podSet>`` is added.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from app.integrations.framework import StartError
from app.kube.errors import Permanent
from app.kube.events import NORMAL, WARNING
from app.wire.fields import Obj


class InjectionConflict(StartError, ValueError):
    """The flavors' nodeLabels contradict the object's own nodeSelector (or each other).

    Kueue treats this as a permanent start failure (Workload Finished, reason FailedToStart).
    """


# ------------------------------------------------------------------------- tolerations


def toleration_identity(t: Mapping[str, Any]) -> tuple[str, str, str, str, Any]:
    """Normalised identity of a core/v1 Toleration dict: (key, operator, value, effect,
    tolerationSeconds); an empty/missing operator is ``Equal`` (kueue#11147)."""
    return (
        str(t.get("key") or ""),
        str(t.get("operator") or "Equal"),
        str(t.get("value") or ""),
        str(t.get("effect") or ""),
        t.get("tolerationSeconds"),
    )


def merge_tolerations(existing: Iterable[Mapping[str, Any]],
                      extra: Iterable[Mapping[str, Any]]) -> list[Obj]:
    """``existing`` unchanged, then each of ``extra`` not already present (by identity)."""
    out = [dict(t) for t in existing]
    seen = {toleration_identity(t) for t in out}
    for t in extra:
        ident = toleration_identity(t)
        if ident not in seen:
            seen.add(ident)
            out.append({k: v for k, v in dict(t).items() if v not in (None, "")})
    return out


# ------------------------------------------------------------------------- flavors


def podset_scheduling(flavor_names: Iterable[str],
                      flavors: Mapping[str, Obj]) -> tuple[dict[str, str], list[Obj]]:
    """Union of ``spec.nodeLabels`` and ``spec.tolerations`` of the named ResourceFlavors.

    ``flavors``: ResourceFlavor objects (dicts) by name; a missing one contributes nothing.
    Raises ``InjectionConflict`` when two flavors want different values for one label.
    """
    selector: dict[str, str] = {}
    tolerations: list[Obj] = []
    for name in dict.fromkeys(flavor_names):
        spec = (flavors.get(name) or {}).get("spec") or {}
        for k, v in (spec.get("nodeLabels") or {}).items():
            if selector.get(k, v) != v:
                raise InjectionConflict(
                    f"flavors assigned to one podSet disagree on node label {k}: "
                    f"{selector[k]!r} vs {v!r} (flavor {name})")
            selector[k] = v
        tolerations = merge_tolerations(tolerations, spec.get("tolerations") or [])
    return selector, tolerations


def admitted_scheduling(ctx: Any, workload: Mapping[str, Any]
                        ) -> dict[str, tuple[dict[str, str], list[Obj]]]:
    """podSet name -> (nodeSelector, tolerations) of the flavors ``workload``'s admission
    assigned to it, read from the ResourceFlavors in ``ctx``'s store. Raises
    ``InjectionConflict``."""
    flavors = {o["metadata"]["name"]: o for o in ctx.store("rf")}
    out = {name: podset_scheduling(names, flavors)
           for name, names in podset_assignments(workload).items()}
    for name, (selector, tolerations) in out.items():
        _check_updates(workload, name, selector, tolerations)
    return out


def _check_updates(workload: Mapping[str, Any], pod_set: str, selector: dict[str, str],
                   tolerations: list[Obj]) -> None:
    """Merge into ``selector`` / ``tolerations`` (in place) the ``podSetUpdates`` the
    Workload's admission checks ask for ``pod_set`` (Kueue v1beta2
    ``status.admissionChecks[].podSetUpdates[]``: additive only; a nodeSelector key with
    another value is a permanent start failure, as in Kueue). ``labels`` and
    ``annotations`` updates are refused the same way: pykueue does not apply them to pod
    templates yet, and running the pods without them would break the check's contract."""
    for check in (workload.get("status") or {}).get("admissionChecks") or []:
        for psu in check.get("podSetUpdates") or []:
            if not isinstance(psu, Mapping) or psu.get("name") != pod_set:
                continue
            unsupported = [f for f in ("labels", "annotations") if psu.get(f)]
            if unsupported:
                raise InjectionConflict(
                    f"admission check {check.get('name')} asks for podSet {pod_set} "
                    f"{' and '.join(unsupported)} (podSetUpdates): not supported by pykueue")
            for k, v in (psu.get("nodeSelector") or {}).items():
                if selector.get(k, v) != v:
                    raise InjectionConflict(
                        f"admission check {check.get('name')} asks for node label {k}={v} "
                        f"in podSet {pod_set}, which already has {k}={selector[k]}")
                selector[k] = v
            tolerations[:] = merge_tolerations(tolerations, psu.get("tolerations") or [])


def podset_assignments(workload: Mapping[str, Any]) -> dict[str, list[str]]:
    """podSet name -> the flavor names assigned to it in ``status.admission`` (one per
    resource, in order; duplicates kept for ``podset_scheduling`` to fold)."""
    admission = (workload.get("status") or {}).get("admission") or {}
    return {str(a.get("name", "main")): list((a.get("flavors") or {}).values())
            for a in admission.get("podSetAssignments") or []}


async def write_start(ctx: Any, obj: Obj, desired: Obj, workload: Mapping[str, Any],
                      put: Callable[[Any, Obj], Awaitable[Obj]]) -> None:
    """Write ``desired`` (``obj`` started with ``workload``'s admission) with ``put``, then the
    event ``Started`` (Kueue's message); a ``Permanent`` refusal gets the event
    ``FailedToStart`` and is re-raised (the reconciler finishes the Workload)."""
    try:
        await put(ctx, desired)
    except Permanent as exc:
        ctx.recorder.emit(obj, WARNING, "FailedToStart", exc.message)
        raise
    admission = (workload.get("status") or {}).get("admission") or {}
    ctx.recorder.emit(obj, NORMAL, "Started",
                      f"Admitted by clusterQueue {admission.get('clusterQueue', '')}")

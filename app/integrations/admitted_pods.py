"""How many pods of a podSet an admission covers, and which pods under an object's controller
run beyond it: shared by the Pod webhook's CREATE rule
(``app.controllers.pod_create_check``) and the reconciler, which deletes pods beyond the
count that slipped past the webhook (``JobReconciler._delete_excess``). Pure: no I/O.

A kind whose operator makes its pods itself, controlled by the object, as many per podSet as
admitted and each with the ``kueue.x-k8s.io/podset`` label the start injects
(``KindDefaults.direct_podsets``), runs no more pods of a podSet than
``status.admission.podSetAssignments[].count`` (else ``spec.podSets[].count``). Beyond
Kueue v0.17.1, which leaves the pods of such objects to their operator.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from app.integrations.framework import pod_holds_quota
from app.wire.names import PODSET_LABEL
from app.wire.workload_status import ADMITTED, has_admission, is_evicted, is_true


def admitted(wl: Mapping[str, Any] | None) -> bool:
    """``wl`` is Admitted, holds its admission and is not being evicted."""
    return wl is not None and has_admission(wl) and not is_evicted(wl) \
        and is_true(wl, ADMITTED)


def admitted_counts(wl: Mapping[str, Any]) -> dict[str, int]:
    """PodSet name -> the pods its admission covers: ``status.admission.podSetAssignments``'
    ``count`` (partial admission), else ``spec.podSets[].count``; unreadable counts left
    out (Kueue v1beta2 Workload ``PodSetAssignment.count``)."""
    out: dict[str, int] = {}
    for ps in (wl.get("spec") or {}).get("podSets") or []:
        if isinstance(ps, Mapping) and isinstance(ps.get("count"), int):
            out[str(ps.get("name", ""))] = ps["count"]
    for psa in ((wl.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []:
        if isinstance(psa, Mapping) and isinstance(psa.get("count"), int) \
                and str(psa.get("name", "")) in out:
            out[str(psa.get("name", ""))] = psa["count"]
    return out


def podset_of(pod: Mapping[str, Any]) -> str | None:
    """The pod's ``kueue.x-k8s.io/podset`` label, None without one."""
    labels = (pod.get("metadata") or {}).get("labels")
    value = labels.get(PODSET_LABEL) if isinstance(labels, Mapping) else None
    return str(value) if value is not None else None


def _keep_first(pod: Mapping[str, Any]) -> tuple[bool, bool, str, str]:
    """Sort key, the pods to keep first: given a node, then Running, then the oldest
    (``creationTimestamp``, whole seconds), then by name. As a ReplicaSet ranks the pods it
    deletes (``controller.ActivePods``): a copy made the same second as the operator's pod
    and not placed yet goes first."""
    meta = pod.get("metadata") or {}
    return (not (pod.get("spec") or {}).get("nodeName"),
            (pod.get("status") or {}).get("phase") != "Running",
            str(meta.get("creationTimestamp", "")), str(meta.get("name", "")))


def excess_pods(pods: Iterable[Mapping[str, Any]], counts: Mapping[str, int]
                ) -> list[Mapping[str, Any]]:
    """Among ``pods`` (those of one controller), the ones beyond their podSet's count in
    ``counts`` (``admitted_counts``): per podSet, the pods holding resources
    (``pod_holds_quota``) and not being deleted, all but the first ``count`` of them in
    ``_keep_first``'s order (placed and running before the others, then oldest: the
    operator made its pods before any tenant's copy could take a place). Pods being
    deleted count for their podSet's places (they still hold) but are not chosen again. A
    pod of no podSet in ``counts`` is left alone (the webhook refuses such a create on
    every replica alike; one made before the label was injected is its operator's)."""
    by_set: dict[str, list[Mapping[str, Any]]] = {}
    for p in pods:
        podset = podset_of(p)
        if podset in counts and pod_holds_quota(p):
            by_set.setdefault(podset, []).append(p)
    out: list[Mapping[str, Any]] = []
    for podset, members in by_set.items():
        members.sort(key=_keep_first)
        out += [p for p in members[counts[podset]:]
                if not (p.get("metadata") or {}).get("deletionTimestamp")]
    return out

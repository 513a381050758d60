"""Applying an admission to pod templates, for every job kind (Kueue ``RunWithPodSetsInfo``
and ``RestorePodSetsInfo``, kueue-semantics.md 4.4).

- Flavors: the ``nodeLabels`` of the flavors assigned to a podSet become its nodeSelector,
  their ``tolerations`` are appended without duplicates (a toleration with an empty operator
  equals one with ``Equal``, kueue#11147), and the pod label ``kueue.x-k8s.io/podset=<podSet>``
  is added (``admitted_scheduling``, ``inject_template``); an admission check's
  ``podSetUpdates`` add to them. A contradiction raises ``InjectionConflict`` (a
  ``StartError``: Kueue's ``FailedToStart``).
- Start record: what the user wrote in a pod template (``nodeSelector``, ``tolerations``,
  ``metadata.labels``) is kept as JSON on the object (``template_record``, ``record_text``;
  the kind chooses the annotation layout), so a stop restores exactly it (``apply_record``)
  whatever became of the Workload, and a repeated start is a no-op.
- Start event: ``write_start`` writes the started object and records ``Started`` /
  ``FailedToStart`` (Kueue's messages).
- A pod's podSet in a pod group: ``role_hash`` (Kueue ``GenerateRoleHash``).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from app.integrations.framework import StartError
from app.integrations.webhook_toolkit import UnreadableObjectError
from app.kube.errors import Permanent
from app.kube.events import NORMAL, WARNING
from app.wire.fields import Obj
from app.wire.names import ORIGINAL_ANNOTATION, PODSET_LABEL


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


# ------------------------------------------------------------------------- start record

_RECORD_TYPES: dict[str, type] = {"nodeSelector": dict, "tolerations": list, "labels": dict,
                                   "parallelism": int}


def read_record(text: object) -> Obj | None:
    """The start record of one pod template (``text``: JSON of its ``nodeSelector``,
    ``tolerations`` and ``metadata.labels`` as the user wrote them, a key absent when the
    field was absent; a batch Job's also holds its ``parallelism``), or None when it is not
    one: not JSON, not an object, or a field of the wrong type. The record sits on the
    tenant's own object, which the tenant may edit at any time, so an unreadable record is
    ignored (nothing to restore) rather than make every stop fail: a stop that raises would
    keep an evicted or expired job's quota forever."""
    if not isinstance(text, str):
        return None
    try:
        rec = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(rec, dict) or any(
            k in rec and (not isinstance(rec[k], t) or isinstance(rec[k], bool))
            for k, t in _RECORD_TYPES.items()) or rec.get("parallelism", 0) < 0:
        return None
    return rec


def record_text(rec: Mapping[str, Any]) -> str:
    """``rec`` as the compact JSON text the object stores."""
    return json.dumps(rec, sort_keys=True, separators=(",", ":"))


def has_start_record(obj: Mapping[str, Any]) -> bool:
    """True when ``obj`` carries pykueue's start record (``ORIGINAL_ANNOTATION``): pykueue
    started it and has not stopped it since."""
    return ORIGINAL_ANNOTATION in (((obj.get("metadata") or {}).get("annotations")) or {})


def mark_started(obj: Obj, started: bool) -> None:
    """Put on ``obj`` (in place) the empty start record ``{}`` (``started``: a kind that
    changes none of its pod templates, whose admission lives elsewhere in the object), or
    take the start record off it (dropping ``metadata.annotations`` left empty)."""
    meta = obj.setdefault("metadata", {})
    anns = dict(meta.get("annotations") or {})
    if started:
        meta["annotations"] = {**anns, ORIGINAL_ANNOTATION: "{}"}
    elif anns.pop(ORIGINAL_ANNOTATION, None) is not None:
        if anns:
            meta["annotations"] = anns
        else:
            meta.pop("annotations", None)


def template_record(template: Mapping[str, Any], stored: object = None) -> Obj:
    """The user's scheduling fields of pod template ``template`` (a PodTemplateSpec): the
    ``stored`` record when it is readable (``read_record``), else read from the template."""
    if stored and (rec := read_record(stored)) is not None:
        return rec
    spec = template.get("spec") or {}
    rec: Obj = {}
    if "nodeSelector" in spec and spec["nodeSelector"] is not None:
        rec["nodeSelector"] = copy.deepcopy(spec["nodeSelector"])
    if "tolerations" in spec and spec["tolerations"] is not None:
        rec["tolerations"] = copy.deepcopy(spec["tolerations"])
    labels = (template.get("metadata") or {}).get("labels")
    if labels is not None:
        rec["labels"] = copy.deepcopy(labels)
    return rec


def apply_record(template: Obj, rec: Mapping[str, Any]) -> None:
    """Set ``template``'s nodeSelector, tolerations and labels (in place) to exactly those of
    ``rec`` (a field absent from ``rec`` is removed)."""
    spec = template.setdefault("spec", {})
    for field in ("nodeSelector", "tolerations"):
        if field in rec:
            spec[field] = copy.deepcopy(rec[field])
        else:
            spec.pop(field, None)
    if "labels" in rec:
        template.setdefault("metadata", {})["labels"] = copy.deepcopy(rec["labels"])
    elif isinstance(template.get("metadata"), dict):
        template["metadata"].pop("labels", None)
        if not template["metadata"]:
            del template["metadata"]


def strip_admission(template: Obj, flavors: Iterable[Mapping[str, Any]]) -> None:
    """Take what an admission injects out of pod template ``template`` (in place): the podSet
    label, each nodeSelector entry some flavor's ``spec.nodeLabels`` holds, each toleration
    among some flavor's ``spec.tolerations`` (``flavors``: ResourceFlavor objects; one the
    user wrote the same goes too: the object is not going to run on a flavor's nodes without
    an admission)."""
    labels: set[tuple[str, str]] = set()
    tolerations: set[Any] = set()
    for rf in flavors:
        spec = rf.get("spec") or {}
        labels.update((str(k), str(v)) for k, v in (spec.get("nodeLabels") or {}).items())
        tolerations.update(toleration_identity(t) for t in spec.get("tolerations") or []
                           if isinstance(t, Mapping))
    spec = template.setdefault("spec", {})
    selector = {k: v for k, v in (spec.get("nodeSelector") or {}).items()
                if (k, v) not in labels}
    if selector:
        spec["nodeSelector"] = selector
    else:
        spec.pop("nodeSelector", None)
    kept = [t for t in spec.get("tolerations") or []
            if not isinstance(t, Mapping) or toleration_identity(t) not in tolerations]
    if kept:
        spec["tolerations"] = kept
    else:
        spec.pop("tolerations", None)
    meta = template.get("metadata") or {}
    if isinstance(meta.get("labels"), dict):
        meta["labels"].pop(PODSET_LABEL, None)


def merged_node_selector(user: Mapping[str, str], flavor: Mapping[str, str], what: str
                         ) -> dict[str, str]:
    """The user's nodeSelector ``user`` with the flavors' node labels ``flavor`` added.
    Raises ``InjectionConflict`` (naming ``what``, the object's kind) when a label of
    ``flavor`` has another value in ``user``."""
    for k, v in flavor.items():
        if user.get(k, v) != v:
            raise InjectionConflict(
                f"the {what}'s nodeSelector {k}={user[k]} contradicts the flavor's {k}={v}")
    return {**user, **flavor}


def inject_template(template: Obj, rec: Mapping[str, Any], pod_set: str,
                    node_selector: Mapping[str, str], tolerations: Iterable[Mapping[str, Any]],
                    *, inject_node_selector: bool = True) -> None:
    """Start pod template ``template`` (in place) for podSet ``pod_set``: the user's record
    ``rec`` applied, then the flavors' ``node_selector`` merged into its nodeSelector (when
    ``inject_node_selector``), their ``tolerations`` appended without duplicates and the
    label ``kueue.x-k8s.io/podset=<pod_set>``. Idempotent over the same ``rec``. Raises
    ``InjectionConflict`` when ``node_selector`` contradicts the user's nodeSelector."""
    apply_record(template, rec)
    spec = template["spec"]
    if inject_node_selector and node_selector:
        spec["nodeSelector"] = merged_node_selector(rec.get("nodeSelector") or {},
                                                    node_selector, "Job")
    extra = list(tolerations)
    if extra:
        spec["tolerations"] = merge_tolerations(rec.get("tolerations") or [], extra)
    labels = dict(rec.get("labels") or {})
    labels[PODSET_LABEL] = pod_set
    template.setdefault("metadata", {})["labels"] = labels


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


# ------------------------------------------------------------------------- a pod's podSet

_SHAPE_FIELDS = ("nodeSelector", "affinity", "tolerations", "runtimeClassName", "priority",
                 "priorityClassName", "topologySpreadConstraints", "overhead", "resourceClaims",
                 "resources")


def role_hash(pod: Mapping[str, Any]) -> str:
    """8 hex digits naming the Pod's shape: what decides its quota and placement (containers'
    and init containers' requests and ports, nodeSelector, affinity, tolerations, runtime
    class, priority, spread constraints, overhead, claims, pod-level resources), as Kueue's
    ``GenerateRoleHash``. pykueue always computes it (a user-written hash is replaced), so
    pods with other requests can never share a podSet (kueue#13382)."""
    spec = pod.get("spec")
    if spec is None:
        spec = {}
    elif not isinstance(spec, Mapping):
        raise UnreadableObjectError("spec", "expected an object")

    def containers(field: str) -> list[dict[str, Any]]:
        return [{"requests": ((c.get("resources") or {}).get("requests") or {}),
                 "ports": c.get("ports") or []}
                for c in spec.get(field) or [] if isinstance(c, Mapping)]

    shape = {"containers": containers("containers"), "initContainers": containers(
        "initContainers"), **{f: spec.get(f) for f in _SHAPE_FIELDS if spec.get(f) is not None}}
    return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:8]

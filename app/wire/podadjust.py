"""Kueue's adjustment of a Workload's pod sets before they are counted in quota, and the
checks its scheduler makes of the result (Kueue v0.17.1 ``pkg/workload/resources.go``
``AdjustResources``, ``ValidateResources``, ``ValidateLimitRange``; ``pkg/util/limitrange``).

Adjustment (``adjust_pod_spec``), in Kueue's order, on a copy of each pod template's spec:

1. RuntimeClass pod overhead: a spec with ``runtimeClassName`` and no (or an empty)
   ``overhead`` gets the RuntimeClass's ``overhead.podFixed`` as its ``overhead`` (a
   RuntimeClass that does not exist, or has no overhead, adds nothing: Kueue logs it and
   counts the pods without);
2. LimitRange defaults: the namespace's LimitRanges of type ``Container`` give every
   container and init container its missing ``limits`` (``default``) and missing
   ``requests`` (``defaultRequest``); type ``Pod`` has no defaults and adds nothing;
3. limits as missing requests: a container's limit stands for its missing request.

The per-pod requests are then the Kubernetes pod resource model's of the adjusted spec
(``app.wire.podtemplate.pod_requests``: containers, sidecars, init containers, pod-level
resources, overhead).

Checks (``resource_problem``), on the adjusted spec, as Kueue's scheduler makes them before it
looks for quota (``nominate``); a Workload failing one stays pending with the message:

- ``resources validation failed: ...``: a container's request above its limit
  (``requests must not exceed its limits``), checked first, for every Workload;
- ``resources didn't satisfy LimitRange constraints: ...``, when the namespace has
  LimitRanges: per container (the larger of request and limit against ``max``, the smaller
  against ``min``) and, for type ``Pod``, the pod's total requests (overhead included)
  against ``max`` and ``min``. ``maxLimitRequestRatio`` is not checked (Kueue summarizes it
  but never checks it; the API server's LimitRanger refuses such pods at creation).

Several LimitRanges of a namespace are summarized per type as Kueue does: the lowest ``max``,
the highest ``min``, and the first ``default`` / ``defaultRequest`` of each resource (first in
LimitRange name order; Kueue's is its cache's, unspecified). A resource is compared only
where both sides name it. Messages are Kubernetes field errors as Kueue prints them (the
resource names sorted: Kueue's order is a Go map's), joined as an aggregate error.

Pure: plain JSON in (pod specs, LimitRange objects, RuntimeClass ``overhead.podFixed``
lists), amounts as exact integers (milli-CPU, bytes, counts; ``app.core.quantity``).
Raises ``WorkloadSpecError`` naming the field of an unreadable quantity.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from app.core.types import ResourceName
from app.core.workload import Workload
from app.wire.fields import mapping, resource_list, sequence, string
from app.wire.podtemplate import pod_requests

# LimitRange item types Kueue reads (``PersistentVolumeClaim`` items play no part).
CONTAINER, POD = "Container", "Pod"

# Kueue v0.17.1's messages (pkg/workload/resources.go, pkg/util/limitrange, pkg/scheduler).
INVALID_RESOURCES = "resources validation failed"
LIMIT_RANGE_UNSATISFIED = "resources didn't satisfy LimitRange constraints"
REQUESTS_ABOVE_LIMITS = "requests must not exceed its limits"
ABOVE_MAX = "requests must not be above the limitRange max"
BELOW_MIN = "requests must not be below the limitRange min"

_CONTAINER_LISTS = ("initContainers", "containers")  # Kueue checks init containers first

# RuntimeClass name -> its ``overhead.podFixed`` (a core/v1 ResourceList JSON; None or empty:
# no overhead). A name absent from the mapping is a RuntimeClass that does not exist.
Overheads = Mapping[str, Mapping[str, Any] | None]


@dataclass(frozen=True, slots=True)
class LimitSummary:
    """The items of one LimitRange type of a namespace, summarized (Kueue ``Summarize``):
    ``max`` the lowest and ``min`` the highest per resource (exact amounts), ``default`` and
    ``default_request`` the first given per resource (quantities as written, to go into a
    pod spec)."""

    max: Mapping[ResourceName, int] = field(default_factory=dict)
    min: Mapping[ResourceName, int] = field(default_factory=dict)
    default: Mapping[str, Any] = field(default_factory=dict)
    default_request: Mapping[str, Any] = field(default_factory=dict)


def summarize(limit_ranges: Iterable[Mapping[str, Any]]) -> dict[str, LimitSummary]:
    """``{type: LimitSummary}`` of ``limit_ranges`` (LimitRange objects of one namespace), for
    the types ``Container`` and ``Pod`` that appear (module doc). Raises ``WorkloadSpecError``
    naming ``LimitRange <ns>/<name>.spec.limits[i].<field>[<resource>]`` for an unreadable
    quantity (the API server validates LimitRanges, so this is not expected)."""
    ordered = sorted(limit_ranges, key=lambda o: str(
        (o.get("metadata") or {}).get("name", "")))
    acc: dict[str, dict[str, dict[str, Any]]] = {}
    for lr in ordered:
        meta = mapping(lr.get("metadata"), "metadata")
        where = f"LimitRange {meta.get('namespace', '')}/{meta.get('name', '')}.spec.limits"
        for i, item in enumerate(sequence(mapping(lr.get("spec"), "spec").get("limits"),
                                          where)):
            iw = f"{where}[{i}]"
            item = mapping(item, iw, required=True)
            kind = string(item.get("type"), f"{iw}.type")
            if kind not in (CONTAINER, POD):
                continue
            s = acc.setdefault(kind, {"max": {}, "min": {}, "default": {},
                                      "defaultRequest": {}})
            for name, amount in resource_list(item.get("max"), f"{iw}.max").items():
                s["max"][name] = min(amount, s["max"].get(name, amount))
            for name, amount in resource_list(item.get("min"), f"{iw}.min").items():
                s["min"][name] = max(amount, s["min"].get(name, amount))
            for key in ("default", "defaultRequest"):
                resource_list(item.get(key), f"{iw}.{key}")  # readable, or say which
                for name, qty in mapping(item.get(key), f"{iw}.{key}").items():
                    s[key].setdefault(name, qty)
    return {kind: LimitSummary(max=s["max"], min=s["min"], default=s["default"],
                               default_request=s["defaultRequest"])
            for kind, s in acc.items()}


def _keep_first(have: Any, extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(have) if isinstance(have, Mapping) else {}
    for name, qty in extra.items():
        out.setdefault(name, qty)
    return out


def made_pod_requests(pod_spec: Mapping[str, Any], container_limits: LimitSummary | None
                      ) -> dict[ResourceName, int]:
    """Per-pod effective requests (``pod_requests``: milli-CPU, bytes, counts) of a pod made
    from ``pod_spec`` as the API server makes it: limits copied into missing requests (Pod
    defaulting, before the LimitRanger), then the namespace's ``Container`` LimitRange
    defaults ``container_limits`` (the LimitRanger; None: none). Kueue's AdjustResources
    applies ``defaultRequest`` before the limits instead (``adjust_pod_spec``). Raises
    ``WorkloadSpecError`` naming the field."""
    spec = adjust_pod_spec(pod_spec, {}, None)
    if container_limits is not None:
        spec = adjust_pod_spec(spec, {}, container_limits)
    return pod_requests(spec, field="spec")


def adjust_pod_spec(pod_spec: Mapping[str, Any], overheads: Overheads,
                    container_limits: LimitSummary | None) -> dict[str, Any]:
    """A copy of ``pod_spec`` (core/v1 PodSpec JSON) adjusted as Kueue adjusts a Workload's
    pod template before counting it (module doc, steps 1-3 in that order).
    ``overheads``: RuntimeClass name -> ``overhead.podFixed``; ``container_limits``: the
    namespace's ``Container`` LimitRange summary (``summarize``), None when it has none.
    ``pod_spec`` is not changed; values it does not name are not validated here."""
    spec = dict(pod_spec)
    rc = spec.get("runtimeClassName")
    if isinstance(rc, str) and rc and not spec.get("overhead"):
        fixed = overheads.get(rc)
        if fixed:
            spec["overhead"] = dict(fixed)
    defaults = container_limits.default if container_limits is not None else {}
    default_requests = container_limits.default_request if container_limits is not None \
        else {}
    for key in _CONTAINER_LISTS:
        containers = spec.get(key)
        if not isinstance(containers, Sequence) or isinstance(containers, (str, bytes)):
            continue
        adjusted = []
        for c in containers:
            if not isinstance(c, Mapping):
                adjusted.append(c)
                continue
            res = c.get("resources")
            res = dict(res) if isinstance(res, Mapping) else {}
            limits = _keep_first(res.get("limits"), defaults)
            requests = _keep_first(res.get("requests"), default_requests)
            requests = _keep_first(requests, limits)
            if limits:
                res["limits"] = limits
            if requests:
                res["requests"] = requests
            adjusted.append({**c, "resources": res} if res else c)
        spec[key] = adjusted
    return spec


def _field_error(path: str, names: Iterable[str], detail: str) -> str:
    """A Kubernetes ``field.Invalid`` error as Go prints it: ``<path>: Invalid value:
    ["cpu"]: <detail>``."""
    return f"{path}: Invalid value: {json.dumps(sorted(names), separators=(',', ':'))}: " \
        f"{detail}"


def _greater(a: Mapping[ResourceName, int], b: Mapping[ResourceName, int]) -> list[str]:
    """Resources ``a`` names above ``b``, among those both name (Kueue ``GreaterKeys``)."""
    return [name for name, v in a.items() if name in b and v > b[name]]


def _container_resources(c: Any, where: str) -> tuple[dict[ResourceName, int],
                                                      dict[ResourceName, int]]:
    res = mapping(mapping(c, where, required=True).get("resources"), f"{where}.resources")
    return (resource_list(res.get("requests"), f"{where}.resources.requests"),
            resource_list(res.get("limits"), f"{where}.resources.limits"))


def invalid_requests(pod_spec: Mapping[str, Any], *, field: str = "spec") -> list[str]:
    """Kueue ``ValidateResources`` on one (adjusted) pod spec: a field error per container
    whose request of some resource is above its limit (init containers first). Raises
    ``WorkloadSpecError`` for an unreadable quantity."""
    out = []
    for key in _CONTAINER_LISTS:
        for i, c in enumerate(sequence(pod_spec.get(key), f"{field}.{key}")):
            where = f"{field}.{key}[{i}]"
            res = mapping(mapping(c, where, required=True).get("resources"),
                          f"{where}.resources")
            req = mapping(res.get("requests"), f"{where}.resources.requests")
            lim = mapping(res.get("limits"), f"{where}.resources.limits")
            # Only what both name, written differently, can differ (every pending Workload
            # passes here: most name a resource in both alike, or in one of them only).
            both = [n for n in req if n in lim and req[n] != lim[n]]
            if not both:
                continue
            above = _greater(
                resource_list({n: req[n] for n in both}, f"{where}.resources.requests"),
                resource_list({n: lim[n] for n in both}, f"{where}.resources.limits"))
            if above:
                out.append(_field_error(where, above, REQUESTS_ABOVE_LIMITS))
    return out


def limit_range_violations(pod_spec: Mapping[str, Any], summary: Mapping[str, LimitSummary],
                           *, field: str = "spec") -> list[str]:
    """Kueue ``Summary.ValidatePodSpec`` on one (adjusted) pod spec: per container (init
    containers first) the larger of request and limit above the ``Container`` ``max``, the
    smaller below its ``min``; then the pod's requests (``pod_requests``) against the
    ``Pod`` ``max`` and ``min``. Raises ``WorkloadSpecError`` for an unreadable quantity."""
    out = []
    box = summary.get(CONTAINER)
    if box is not None:
        for key in _CONTAINER_LISTS:
            for i, c in enumerate(sequence(pod_spec.get(key), f"{field}.{key}")):
                where = f"{field}.{key}[{i}]"
                requests, limits = _container_resources(c, where)
                low, high = dict(requests), dict(requests)
                for name, v in limits.items():
                    low[name] = min(v, low.get(name, v))
                    high[name] = max(v, high.get(name, v))
                if above := _greater(high, box.max):
                    out.append(_field_error(where, above, ABOVE_MAX))
                if below := _greater(box.min, low):
                    out.append(_field_error(where, below, BELOW_MIN))
    pod = summary.get(POD)
    if pod is not None:
        total = pod_requests(pod_spec, field=field)
        if above := _greater(total, pod.max):
            out.append(_field_error(field, above, ABOVE_MAX))
        if below := _greater(pod.min, total):
            out.append(_field_error(field, below, BELOW_MIN))
    return out


def _aggregate(errors: Sequence[str]) -> str:
    """Go's aggregate error text: one error as itself, several ``[a, b]``, repeats once."""
    unique = list(dict.fromkeys(errors))
    return unique[0] if len(unique) == 1 else f"[{', '.join(unique)}]"


@dataclass(frozen=True, slots=True)
class AdjustedPods:
    """What Kueue counts of a Workload's pod sets: per-pod ``requests`` of each pod set in
    order (milli-CPU, bytes, counts) and ``problem``, the message the scheduler leaves it
    pending with ("" when its resources pass the checks)."""

    requests: tuple[dict[ResourceName, int], ...]
    problem: str = ""


def adjusted_pod_sets(pod_specs: Sequence[Mapping[str, Any]], overheads: Overheads,
                      limit_ranges: Sequence[Mapping[str, Any]], *,
                      field: str = "spec.podSets") -> AdjustedPods:
    """Kueue's adjustment and checks (module doc) of the pod specs of one Workload's pod sets
    (``pod_specs[i]``: ``spec.podSets[i].template.spec``), given the RuntimeClass overheads
    (``overheads``: name -> ``overhead.podFixed``; absent: no such RuntimeClass) and the
    LimitRange objects of the Workload's namespace. Error paths read
    ``<field>[i].template.spec...``. Raises ``WorkloadSpecError`` naming the field of an
    unreadable pod spec or LimitRange."""
    summary = summarize(limit_ranges) if limit_ranges else {}
    requests, invalid, outside = [], [], []
    for i, spec in enumerate(pod_specs):
        where = f"{field}[{i}].template.spec"
        adjusted = adjust_pod_spec(spec, overheads, summary.get(CONTAINER))
        requests.append(pod_requests(adjusted, field=where))
        invalid += invalid_requests(adjusted, field=where)
        if limit_ranges:
            outside += limit_range_violations(adjusted, summary, field=where)
    problem = ""
    if invalid:
        problem = f"{INVALID_RESOURCES}: {_aggregate(invalid)}"
    elif outside:
        problem = f"{LIMIT_RANGE_UNSATISFIED}: {_aggregate(outside)}"
    return AdjustedPods(tuple(requests), problem)


def runtime_class_names(obj: Mapping[str, Any]) -> set[str]:
    """The RuntimeClasses the pod sets of Workload ``obj`` name without their own
    ``overhead`` (the ones whose overhead Kueue adds). Never raises: a malformed object is the
    Workload reader's to report."""
    names = set()
    for spec in _pod_specs(obj):
        rc = spec.get("runtimeClassName")
        if isinstance(rc, str) and rc and not spec.get("overhead"):
            names.add(rc)
    return names


def _pod_specs(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    out: list[Mapping[str, Any]] = []
    spec = obj.get("spec")
    sets = spec.get("podSets") if isinstance(spec, Mapping) else None
    if not isinstance(sets, Sequence) or isinstance(sets, (str, bytes)):
        return out
    for ps in sets:
        template = ps.get("template") if isinstance(ps, Mapping) else None
        pod = template.get("spec") if isinstance(template, Mapping) else None
        out.append(pod if isinstance(pod, Mapping) else {})
    return out


def with_adjusted_resources(wl: Workload, obj: Mapping[str, Any], overheads: Overheads,
                            limit_ranges: Sequence[Mapping[str, Any]]) -> Workload:
    """``wl`` (read from Workload ``obj`` by ``workload_from_object``, pending) with its pod
    sets' per-pod requests as Kueue counts them and ``invalid_resources`` set to the check's
    message (``adjusted_pod_sets``). ``wl`` itself when nothing changes. Raises
    ``WorkloadSpecError`` naming the field of an unreadable pod spec or LimitRange."""
    specs = _pod_specs(obj)
    if not limit_ranges and not any(overheads.get(n) for n in runtime_class_names(obj)):
        # Nothing to add: the requests are ``pod_requests``' already (limits stand for
        # missing requests there too); only requests above limits remain to be checked.
        invalid = [e for i, s in enumerate(specs)
                   for e in invalid_requests(s, field=f"spec.podSets[{i}].template.spec")]
        problem = f"{INVALID_RESOURCES}: {_aggregate(invalid)}" if invalid else ""
        return wl if problem == wl.invalid_resources \
            else replace(wl, invalid_resources=problem)
    got = adjusted_pod_sets(specs, overheads, limit_ranges)
    pod_sets = tuple(ps if dict(ps.requests) == req else replace(ps, requests=req)
                     for ps, req in zip(wl.pod_sets, got.requests, strict=True))
    if pod_sets == wl.pod_sets and got.problem == wl.invalid_resources:
        return wl
    return replace(wl, pod_sets=pod_sets, invalid_resources=got.problem)

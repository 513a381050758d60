"""The one reader of a PodTemplateSpec / PodSpec (core/v1): per-pod requests as Kubernetes
computes them, tolerations, required node affinity, and the domain ``PodSet``; and, to compare
two templates' pods, their DRA claims and placement (``template_differences``).

Used by every job kind, the Workload reader, the extender and the simulator. Amounts are exact
integers (milli-CPU, bytes, counts; ``app.core.quantity``). Rules: the Kubernetes pod resource
model (``k8s.io/component-helpers`` ``resource.PodRequests``) and core/v1 Toleration and
NodeSelectorRequirement validation. Raises ``WorkloadSpecError`` naming the field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from app.core.types import ResourceName
from app.core.workload import NodeSelectorRequirement, PodSet, Toleration
from app.wire.fields import WorkloadSpecError, mapping, resource_list, sequence, string

_TOLERATION_OPERATORS = frozenset({"Equal", "Exists"})


_TAINT_EFFECTS = frozenset({"", "NoSchedule", "PreferNoSchedule", "NoExecute"})


_AFFINITY_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})


_POD_LEVEL_RESOURCES = frozenset({"cpu", "memory"})  # plus hugepages-*


def _add(into: dict[ResourceName, int], other: Mapping[ResourceName, int]) -> None:
    for name, amount in other.items():
        into[name] = into.get(name, 0) + amount


def _max(into: dict[ResourceName, int], other: Mapping[ResourceName, int]) -> None:
    for name, amount in other.items():
        if amount > into.get(name, 0):
            into[name] = amount


def container_requests(container: Mapping[str, Any], *, field: str) -> dict[ResourceName, int]:
    """Effective requests of one container: ``resources.requests``, each missing request
    defaulting to its ``resources.limits`` entry (core/v1 API defaulting).

    Returns ``{resource: amount}`` (milli-CPU, bytes, counts). Raises ``WorkloadSpecError``
    naming ``<field>.resources.requests[<name>]`` (or ``limits``) for a bad quantity.
    """
    resources = mapping(container.get("resources"), f"{field}.resources")
    requests = resource_list(resources.get("requests"), f"{field}.resources.requests")
    limits = resource_list(resources.get("limits"), f"{field}.resources.limits")
    for name, amount in limits.items():
        requests.setdefault(name, amount)
    return requests


def pod_requests(pod_spec: Mapping[str, Any], *, field: str = "spec") -> dict[ResourceName, int]:
    """Per-pod effective requests, as Kubernetes computes them (``resource.PodRequests``).

    ``sum(containers) + sum(sidecars)`` versus, for each init container ``i``,
    ``InitUse(i) = request(i) + sum(sidecars declared before i)`` — the larger per resource —
    then pod-level ``resources.requests`` (cpu, memory, hugepages-*) replace the container
    total for those resources, then ``overhead`` is added. A sidecar is an init container whose
    own ``restartPolicy`` is ``Always`` (KQ-04). Resources whose effective request is 0 are
    left out: a request of 0 is no request (KQ-01).

    Returns ``{resource: amount}`` (milli-CPU, bytes, counts). Raises ``WorkloadSpecError``
    naming the field (``<field>.containers[0].resources.requests[cpu]``).
    """
    containers = sequence(pod_spec.get("containers"), f"{field}.containers")
    if not containers:
        raise WorkloadSpecError(f"{field}.containers", "at least one container is required")
    total: dict[ResourceName, int] = {}
    for i, c in enumerate(containers):
        where = f"{field}.containers[{i}]"
        _add(total, container_requests(mapping(c, where, required=True), field=where))
    sidecars: dict[ResourceName, int] = {}
    init_peak: dict[ResourceName, int] = {}
    for i, c in enumerate(sequence(pod_spec.get("initContainers"), f"{field}.initContainers")):
        where = f"{field}.initContainers[{i}]"
        c = mapping(c, where, required=True)
        reqs = container_requests(c, field=where)
        policy = string(c.get("restartPolicy"), f"{where}.restartPolicy")
        if policy == "Always":
            _add(total, reqs)
            _add(sidecars, reqs)
            _max(init_peak, sidecars)
        elif policy == "":
            use = dict(reqs)
            _add(use, sidecars)
            _max(init_peak, use)
        else:
            raise WorkloadSpecError(
                f"{where}.restartPolicy",
                f"only 'Always' is allowed on an init container, got {policy!r}",
            )
    _max(total, init_peak)
    pod_resources = mapping(pod_spec.get("resources"), f"{field}.resources")
    pod_reqs = resource_list(pod_resources.get("requests"), f"{field}.resources.requests")
    for name, amount in resource_list(
        pod_resources.get("limits"), f"{field}.resources.limits"
    ).items():
        pod_reqs.setdefault(name, amount)
    for name, amount in pod_reqs.items():
        if name in _POD_LEVEL_RESOURCES or name.startswith("hugepages-"):
            total[name] = amount
    _add(total, resource_list(pod_spec.get("overhead"), f"{field}.overhead"))
    return {name: amount for name, amount in total.items() if amount > 0}



def template_requests(template: Any) -> dict[ResourceName, int] | str:
    """Per-pod requests (``pod_requests``: milli-CPU, bytes, counts) of a pod template
    (``{"metadata": ..., "spec": <PodSpec>}``, as a Job's or Deployment's
    ``spec.template``), or, instead of raising, why they are unreadable (the
    ``WorkloadSpecError`` message): for comparing two templates' pods."""
    spec = template.get("spec") if isinstance(template, Mapping) else None
    try:
        return dict(pod_requests(spec if isinstance(spec, Mapping) else {},
                                 field="spec.template.spec"))
    except WorkloadSpecError as e:
        return str(e)

def requests_beyond(have: Mapping[ResourceName, int] | str,
                    want: Mapping[ResourceName, int] | str) -> dict[ResourceName, int]:
    """The resources of per-pod requests ``have`` (``template_requests``: milli-CPU, bytes,
    counts) above those of ``want`` (a resource ``want`` lacks counts as 0), with ``have``'s
    amount; for unreadable requests (a message) every resource of the other side, or
    ``{"": 0}`` when ``have`` is unreadable: either way not within ``want``."""
    if isinstance(have, str):
        return {"": 0}
    if isinstance(want, str):
        return dict(have) or {"": 0}
    return {r: n for r, n in have.items() if n > want.get(r, 0)}


def _pruned(value: Any, empty: tuple[Any, ...]) -> Any:
    """``value`` with every list item and object entry equal to one of ``empty`` left out,
    recursively: what the API server's ``omitempty`` drops from a stored object."""
    if isinstance(value, Mapping):
        return {str(k): _pruned(v, empty) for k, v in value.items()
                if not any(v == e and type(v) is type(e) for e in empty)}
    if isinstance(value, list):
        return [_pruned(v, empty) for v in value
                if not any(v == e and type(v) is type(e) for e in empty)]
    return value


def template_claims(template: Any) -> str:
    """The DRA claims of a pod template (``{"metadata": ..., "spec": <PodSpec>}``) as one
    comparable string: the pod's ``spec.resourceClaims`` and each container's (init
    containers first) ``resources.claims``, empty fields left out (``_pruned``). Per-pod
    requests leave them out, and a claim template's devices count in quota through Kueue's
    ``resources.deviceClassMappings``: two templates run the same devices when these
    agree (by ResourceClaimTemplate or ResourceClaim name)."""
    spec = template.get("spec") if isinstance(template, Mapping) else None
    if not isinstance(spec, Mapping):
        return ""
    containers = [c for k in ("initContainers", "containers") for c in spec.get(k) or []
                  if isinstance(c, Mapping)]
    claims = [spec.get("resourceClaims") or [],
              [((c.get("resources") or {}).get("claims") or [])
               if isinstance(c.get("resources"), Mapping) else c.get("resources")
               for c in containers]]
    return json.dumps(_pruned(claims, (None, "", [])), sort_keys=True, default=str)


def _toleration_key(t: Any) -> str:
    """One toleration, comparable: the operator's default (``Equal``) written out, empty
    fields left out."""
    if not isinstance(t, Mapping):
        return json.dumps(t, sort_keys=True, default=str)
    out = _pruned(dict(t), (None, ""))
    out.setdefault("operator", "Equal")
    return json.dumps(out, sort_keys=True, default=str)


_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
# Node affinity operators that only take nodes away.
_EXCLUDING = frozenset({"NotIn", "DoesNotExist"})


def _required_affinity(affinity: Any) -> dict[str, Any]:
    """The required parts of a pod's ``affinity`` (empty lists left out, as the API server
    stores them): ``nodeAffinity``'s terms, ``podAffinity``'s and ``podAntiAffinity``'s.
    The preferred ones only rank the nodes a pod may run on."""
    affinity = affinity if isinstance(affinity, Mapping) else {}
    out: dict[str, Any] = {}
    for kind in ("nodeAffinity", "podAffinity", "podAntiAffinity"):
        part = affinity.get(kind)
        required = part.get(_REQUIRED) if isinstance(part, Mapping) else None
        if required:
            out[kind] = _pruned(required, (None, []))
    return out


def _terms(required: Mapping[str, Any]) -> list[Any]:
    node = required.get("nodeAffinity")
    terms = node.get("nodeSelectorTerms") if isinstance(node, Mapping) else None
    return terms if isinstance(terms, list) else []


def _only_excludes(want: Mapping[str, Any], have: Mapping[str, Any]) -> bool:
    """Whether required affinity ``have`` is ``want``'s, its node terms (one, when ``want``
    has none) given at most added ``NotIn`` or ``DoesNotExist`` expressions, which take
    nodes away and never add one: appwrapper v1.2.0's Autopilot appends such expressions to
    each term of a pod asking a GPU (``injectAntiAffinities``, on by default)."""
    if {k: v for k, v in want.items() if k != "nodeAffinity"} \
            != {k: v for k, v in have.items() if k != "nodeAffinity"}:
        return False
    theirs = _terms(have)
    ours = _terms(want) or ([{}] if theirs else [])
    if len(ours) != len(theirs):
        return False
    for mine, term in zip(ours, theirs, strict=True):
        if not isinstance(mine, Mapping) or not isinstance(term, Mapping) \
                or mine.get("matchFields") != term.get("matchFields"):
            return False
        extra = list(term.get("matchExpressions") or [])
        for expression in mine.get("matchExpressions") or []:
            if expression not in extra:
                return False
            extra.remove(expression)
        if not all(isinstance(e, Mapping) and e.get("operator") in _EXCLUDING for e in extra):
            return False
    return True


def template_placement(template: Any) -> dict[str, Any]:
    """What decides where the pods of a pod template may run, comparable: ``nodeSelector``
    (values as strings: ``true``, ``1``), ``affinity`` (its required parts, ``_required_affinity``),
    ``tolerations`` (each once, sorted: a toleration only widens the nodes, so their order
    and repeats do not matter) and ``nodeName``; a missing field as empty."""
    spec = template.get("spec") if isinstance(template, Mapping) else None
    spec = spec if isinstance(spec, Mapping) else {}
    selector = spec.get("nodeSelector")
    tolerations_ = spec.get("tolerations")
    return {
        # Not a string (a raw template's YAML ``true``): as appwrapper's merge writes it.
        "nodeSelector": {str(k): v if isinstance(v, str) else json.dumps(v)
                         for k, v in selector.items()}
        if isinstance(selector, Mapping) else selector or {},
        "affinity": _required_affinity(spec.get("affinity")),
        "tolerations": sorted({_toleration_key(t) for t in tolerations_})
        if isinstance(tolerations_, list) else tolerations_ or [],
        "nodeName": spec.get("nodeName") or "",
    }


def template_differences(want: Any, have: Any) -> list[tuple[str, Any, Any]]:
    """The fields (under the pod template: ``spec.nodeSelector``, ``spec.affinity``,
    ``spec.tolerations``, ``spec.nodeName``, ``spec.resourceClaims``: the pod's and the
    containers' DRA claims) in which pod template ``have`` would run its pods elsewhere, or
    on other devices, than ``want``: ``(field, want's, have's)`` each, ``[]`` when none.
    Each must be ``want``'s (``template_placement``, ``template_claims``), but for
    required node affinity that only takes nodes away (``_only_excludes``). Per-pod
    requests are ``template_requests``'."""
    out: list[tuple[str, Any, Any]] = []
    placed, placing = template_placement(want), template_placement(have)
    for name, value in placed.items():
        if placing[name] != value and not (
                name == "affinity" and _only_excludes(value, placing[name])):
            out.append((f"spec.{name}", value, placing[name]))
    claims, claiming = template_claims(want), template_claims(have)
    if claims != claiming:
        out.append(("spec.resourceClaims", claims, claiming))
    return out


def tolerations(value: Any, field: str) -> tuple[Toleration, ...]:
    out = []
    for i, t in enumerate(sequence(value, field)):
        where = f"{field}[{i}]"
        t = mapping(t, where, required=True)
        operator = string(t.get("operator"), f"{where}.operator", default="Equal")
        if operator not in _TOLERATION_OPERATORS:
            raise WorkloadSpecError(
                f"{where}.operator", f"must be Equal or Exists, got {operator!r}"
            )
        effect = string(t.get("effect"), f"{where}.effect")
        if effect not in _TAINT_EFFECTS:
            raise WorkloadSpecError(
                f"{where}.effect",
                f"must be NoSchedule, PreferNoSchedule or NoExecute, got {effect!r}",
            )
        key = string(t.get("key"), f"{where}.key")
        value_ = string(t.get("value"), f"{where}.value")
        if not key and operator != "Exists":
            raise WorkloadSpecError(f"{where}.operator", "must be Exists when key is empty")
        if operator == "Exists" and value_:
            raise WorkloadSpecError(f"{where}.value", "must be empty when operator is Exists")
        out.append(Toleration(key=key, operator=operator, value=value_, effect=effect))
    return tuple(out)


def _affinity_terms(
    pod_spec: Mapping[str, Any], field: str
) -> tuple[tuple[NodeSelectorRequirement, ...], ...]:
    where = f"{field}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    affinity = mapping(pod_spec.get("affinity"), f"{field}.affinity")
    node_affinity = mapping(affinity.get("nodeAffinity"), f"{field}.affinity.nodeAffinity")
    required = mapping(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"), where)
    terms = []
    for i, term in enumerate(
        sequence(required.get("nodeSelectorTerms"), f"{where}.nodeSelectorTerms")
    ):
        tw = f"{where}.nodeSelectorTerms[{i}]"
        reqs = []
        for j, expr in enumerate(
            sequence(mapping(term, tw).get("matchExpressions"), f"{tw}.matchExpressions")
        ):
            ew = f"{tw}.matchExpressions[{j}]"
            expr = mapping(expr, ew, required=True)
            key = string(expr.get("key"), f"{ew}.key")
            if not key:
                raise WorkloadSpecError(f"{ew}.key", "required")
            op = string(expr.get("operator"), f"{ew}.operator")
            if op not in _AFFINITY_OPERATORS:
                raise WorkloadSpecError(
                    f"{ew}.operator", f"must be one of {sorted(_AFFINITY_OPERATORS)}, got {op!r}"
                )
            values = tuple(
                string(v, f"{ew}.values[{k}]")
                for k, v in enumerate(sequence(expr.get("values"), f"{ew}.values"))
            )
            reqs.append(NodeSelectorRequirement(key=key, operator=op, values=values))
        terms.append(tuple(reqs))
    return tuple(terms)


def pod_set_from_template(
    name: str, count: int, template: Mapping[str, Any], *, field: str
) -> PodSet:
    """Build a domain ``PodSet`` from a PodTemplateSpec JSON (``{metadata, spec}``).

    Reads per-pod requests (``pod_requests``), ``nodeSelector``, required node-affinity
    ``matchExpressions`` (``matchFields`` name nodes, not flavors, and are ignored) and
    ``tolerations``. ``field`` is the template's JSON path, used in errors.
    Raises ``WorkloadSpecError``.
    """
    spec = mapping(
        mapping(template, field, required=True).get("spec"), f"{field}.spec", required=True
    )
    selector = {
        k: string(v, f"{field}.spec.nodeSelector[{k}]")
        for k, v in mapping(spec.get("nodeSelector"), f"{field}.spec.nodeSelector").items()
    }
    return PodSet(
        name=name,
        count=count,
        requests=pod_requests(spec, field=f"{field}.spec"),
        node_selector=selector,
        affinity_terms=_affinity_terms(spec, f"{field}.spec"),
        tolerations=tolerations(spec.get("tolerations"), f"{field}.spec.tolerations"),
    )

"""The one reader of a PodTemplateSpec / PodSpec (core/v1): per-pod requests as Kubernetes
computes them, tolerations, required node affinity, and the domain ``PodSet``.

Used by every job kind, the Workload reader, the extender and the simulator. Amounts are exact
integers (milli-CPU, bytes, counts; ``app.core.quantity``). Rules: the Kubernetes pod resource
model (``k8s.io/component-helpers`` ``resource.PodRequests``) and core/v1 Toleration and
NodeSelectorRequirement validation. Raises ``WorkloadSpecError`` naming the field.
"""

from __future__ import annotations

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

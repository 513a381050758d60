"""Dynamic Resource Allocation (resource.k8s.io/v1): the devices a pod claims through
ResourceClaimTemplates, counted as quota resources (docs/dra.md).

Rules: Kueue v0.17.1 (``pkg/dra/claims.go``, ``mapper.go``; reference kueue-integrations.md 9):

- counted: each pod ``spec.resourceClaims[]`` entry naming a ``resourceClaimTemplateName``; in
  that template, each ``spec.spec.devices.requests[]`` with ``exactly`` in allocation mode
  ``ExactCount`` (the default) adds ``exactly.count`` (default 1) devices of
  ``exactly.deviceClassName``; the per-class sums are renamed to the quota resource the
  Configuration's ``deviceClassMappings`` map the class to;
- refused (the Workload is inadmissible, ``DraInadmissible`` says why): a direct
  ``resourceClaimName`` (a claim shared by pods: Kueue does not count it), ``firstAvailable``,
  allocation mode ``All``, CEL ``selectors``, ``adminAccess``, claim-level ``constraints`` or
  ``config``, a template that does not exist, a DeviceClass no mapping names, and any claim at
  all when no mapping is configured (never silently 0 devices).

Pure: plain JSON in, ``{resource name: count}`` out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from app.core.types import ResourceName
from app.core.workload import PodSet, Workload
from app.wire.fields import WorkloadSpecError, integer, mapping, sequence, string

# Kueue's QuotaReserved=False / Requeued=False reason for a Workload it cannot count.
INADMISSIBLE = "Inadmissible"

# ``(namespace, name)`` -> the ResourceClaimTemplate's JSON, or None when it does not exist.
TemplateLookup = Callable[[str, str], Mapping[str, Any] | None]


class DraInadmissible(WorkloadSpecError):
    """The pods' resource claims cannot be counted in quota; ``field`` is the JSON path of
    the claim or request, the message says which rule (Kueue: Workload QuotaReserved=False,
    reason ``Inadmissible``)."""


def _refuse(field: str, what: str) -> DraInadmissible:
    return DraInadmissible(field, f"{what} not supported in quota accounting")


def template_device_counts(template: Mapping[str, Any], *,
                           field: str = "ResourceClaimTemplate") -> dict[str, int]:
    """Devices one claim made from ``template`` (a ResourceClaimTemplate's JSON) asks for,
    per DeviceClass: ``{deviceClassName: count}``. ``field`` prefixes the JSON paths in errors.

    Raises ``DraInadmissible`` for the shapes Kueue v0.17.1 refuses (module doc) and
    ``WorkloadSpecError`` for a malformed template.
    """
    spec = mapping(mapping(template.get("spec"), f"{field}.spec").get("spec"),
                   f"{field}.spec.spec")
    where = f"{field}.spec.spec.devices"
    devices = mapping(spec.get("devices"), where)
    for unsupported in ("constraints", "config"):
        if sequence(devices.get(unsupported), f"{where}.{unsupported}"):
            raise _refuse(f"{where}.{unsupported}", f"claim {unsupported} are")
    counts: dict[str, int] = {}
    for i, req in enumerate(sequence(devices.get("requests"), f"{where}.requests")):
        rw = f"{where}.requests[{i}]"
        req = mapping(req, rw, required=True)
        if req.get("firstAvailable"):
            raise _refuse(f"{rw}.firstAvailable", "firstAvailable device requests are")
        ew = f"{rw}.exactly"
        exactly = mapping(req.get("exactly"), ew)
        if not exactly:
            raise _refuse(ew, "device requests without 'exactly' are")
        mode = string(exactly.get("allocationMode"), f"{ew}.allocationMode") or "ExactCount"
        if mode != "ExactCount":
            raise _refuse(f"{ew}.allocationMode", f"allocation mode {mode} is")
        if sequence(exactly.get("selectors"), f"{ew}.selectors"):
            raise _refuse(f"{ew}.selectors", "CEL selectors are")
        if exactly.get("adminAccess"):
            raise _refuse(f"{ew}.adminAccess", "adminAccess requests are")
        cls = string(exactly.get("deviceClassName"), f"{ew}.deviceClassName")
        if not cls:
            raise WorkloadSpecError(f"{ew}.deviceClassName", "required")
        count = integer(exactly.get("count"), f"{ew}.count", default=1, minimum=1)
        counts[cls] = counts.get(cls, 0) + count
    return counts


def pod_claim_requests(pod_spec: Mapping[str, Any], namespace: str, templates: TemplateLookup,
                       device_classes: Mapping[str, str], *,
                       field: str = "spec") -> dict[ResourceName, int]:
    """Per-pod quota requests of a pod spec's ``resourceClaims[]``: ``{resource: devices}``
    (counts), renamed by ``device_classes`` (DeviceClass -> quota resource name, from the
    ``deviceClassMappings`` setting). ``templates`` finds the ResourceClaimTemplates of
    ``namespace``. Empty when the pod claims nothing.

    Raises ``DraInadmissible`` naming the claim (``<field>.resourceClaims[0]...``) for what
    Kueue refuses, a missing template, an unmapped DeviceClass, or any claim when
    ``device_classes`` is empty; ``WorkloadSpecError`` for a malformed claim.
    """
    out: dict[ResourceName, int] = {}
    for i, claim in enumerate(sequence(pod_spec.get("resourceClaims"),
                                       f"{field}.resourceClaims")):
        cw = f"{field}.resourceClaims[{i}]"
        claim = mapping(claim, cw, required=True)
        if not device_classes:
            raise DraInadmissible(cw, "the pods use DRA resource claims, but pykueue has no "
                                      "resources.deviceClassMappings to count them in quota")
        if string(claim.get("resourceClaimName"), f"{cw}.resourceClaimName"):
            raise DraInadmissible(f"{cw}.resourceClaimName",
                                  "quota accounting does not support use of resource claims "
                                  "(resourceClaimName); use a resourceClaimTemplateName")
        name = string(claim.get("resourceClaimTemplateName"), f"{cw}.resourceClaimTemplateName")
        if not name:
            raise WorkloadSpecError(cw, "one of resourceClaimName, resourceClaimTemplateName "
                                        "is required")
        template = templates(namespace, name)
        if template is None:
            raise DraInadmissible(f"{cw}.resourceClaimTemplateName",
                                  f"ResourceClaimTemplate {namespace}/{name} not found")
        where = f"ResourceClaimTemplate {namespace}/{name}"
        for cls, count in template_device_counts(template, field=where).items():
            resource = device_classes.get(cls)
            if resource is None:
                raise DraInadmissible(f"{where}.spec.spec.devices",
                                      f"DeviceClass {cls!r} is not mapped to a quota resource "
                                      "(resources.deviceClassMappings)")
            out[ResourceName(resource)] = out.get(ResourceName(resource), 0) + count
    return out


def claim_template_names(obj: Mapping[str, Any]) -> set[str]:
    """Names of the ResourceClaimTemplates the podSet templates of Workload ``obj`` refer to
    (never raises: a malformed object is the Workload reader's to report)."""
    names: set[str] = set()
    try:
        for ps in sequence(mapping(obj.get("spec"), "spec").get("podSets"), "spec.podSets"):
            spec = mapping(mapping(mapping(ps, "ps").get("template"), "t").get("spec"), "s")
            for claim in sequence(spec.get("resourceClaims"), "c"):
                name = mapping(claim, "c").get("resourceClaimTemplateName")
                if isinstance(name, str) and name:
                    names.add(name)
    except WorkloadSpecError:
        pass
    return names


def with_claim_requests(wl: Workload, obj: Mapping[str, Any], templates: TemplateLookup,
                        device_classes: Mapping[str, str]) -> Workload:
    """``wl`` (read from Workload ``obj`` by ``workload_from_object``) with each podSet's
    per-pod requests plus its pods' claimed devices (``pod_claim_requests``), as Kueue adds
    the DRA quantities of a pending Workload to its podSets before flavor assignment.

    Raises ``DraInadmissible`` / ``WorkloadSpecError`` naming
    ``spec.podSets[i].template.spec.resourceClaims[j]``.
    """
    raw: Sequence[Any] = sequence(mapping(obj.get("spec"), "spec").get("podSets"),
                                  "spec.podSets")
    pod_sets: list[PodSet] = []
    changed = False
    for i, ps in enumerate(wl.pod_sets):
        where = f"spec.podSets[{i}].template.spec"
        spec = mapping(mapping(mapping(raw[i], f"spec.podSets[{i}]").get("template"),
                               f"spec.podSets[{i}].template").get("spec"), where)
        extra = pod_claim_requests(spec, wl.namespace, templates, device_classes, field=where)
        if extra:
            requests = dict(ps.requests)
            for name, count in extra.items():
                requests[name] = requests.get(name, 0) + count
            ps = replace(ps, requests=requests)
            changed = True
        pod_sets.append(ps)
    return replace(wl, pod_sets=tuple(pod_sets)) if changed else wl

"""No field a Kueue user can write is silently ignored (issue 19): every ``spec`` field of
every Kueue CRD pykueue installs is read by the runtime code (its JSON name appears in
``app/``), or it is on one of two documented lists here: refused (the API server rejects it,
naming pykueue's reason) or without effect on queueing (as in Kueue itself). A new CRD field
that no code reads fails this test until it is honoured, refused or listed with the reason.

The check is on names: a field the readers never mention is certainly ignored; one they
mention is honoured by the tests of its reader (test_wire.py, test_kueue_objects.py, ...)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CRDS = sorted((ROOT / "manifests" / "crds").glob("kueue.x-k8s.io_*.yaml"))

# (kind, path) -> why it has no effect on queueing, in Kueue too.
NO_EFFECT = {
    ("ResourceFlavor", "spec.nodeTaints[].timeAdded"):
        "a taint's timestamp; flavor matching reads key, value and effect (Kueue the same)",
    ("Workload", "spec.podSets[].template.spec.containers[].image"):
        "the container image; queueing reads requests, not images (Kueue the same)",
    ("Workload", "spec.podSets[].template.spec.initContainers[].image"):
        "the init container image; see containers[].image",
    ("AdmissionCheck", "spec.controllerName"):
        "names the external controller that runs the check; queueing reads only the check's "
        "Active condition and its state on each Workload (Kueue's scheduler the same)",
    ("AdmissionCheck", "spec.parameters"):
        "the check controller's own parameters object (Kueue's scheduler does not read it)",
    ("AdmissionCheck", "spec.parameters.apiGroup"): "see spec.parameters",
    ("AdmissionCheck", "spec.parameters.kind"): "see spec.parameters",
    ("AdmissionCheck", "spec.parameters.name"): "see spec.parameters",
    ("Workload", "spec.podSets[].topologyRequest"):
        "Kueue's topology request, stored so that a Kueue manager's MultiKueue copy keeps the "
        "spec it compares; pykueue has no Topology Aware Scheduling: the CRD rule on "
        "topologyRequest refuses every constraint (hack/gen_crds.py topology_request)",
    **{("Workload", f"spec.podSets[].topologyRequest.{f}"):
       "index labels Kueue's adapters set on every Job's podSet; with no Topology Aware "
       "Scheduling they place nothing (Kueue without TAS the same)"
       for f in ("podIndexLabel", "subGroupIndexLabel", "subGroupCount")},
    **{("Workload", f"spec.podSets[].topologyRequest.{f}"):
       "a Topology Aware Scheduling constraint: refused by the CRD rule on topologyRequest"
       for f in ("podSetGroupName", "podSetSliceRequiredTopology", "podSetSliceSize",
                 "podsetSliceRequiredTopologyConstraints",
                 "podsetSliceRequiredTopologyConstraints[].topology", "preferred",
                 "unconstrained", "required")},
}

# (kind, path) -> the text of the CRD rule that refuses it.
REFUSED = {
    ("ResourceFlavor", "spec.topologyName"): "does not implement Topology-Aware Scheduling",
}


def _fields(schema: dict[str, Any], path: str) -> list[tuple[str, str]]:
    out = []
    for name, sub in (schema.get("properties") or {}).items():
        out.append((f"{path}.{name}", name))
        out += _fields(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        out += _fields(schema["items"], f"{path}[]")
    return out


def _spec_fields() -> dict[tuple[str, str], str]:
    out = {}
    for f in CRDS:
        crd = yaml.safe_load(f.read_text())
        kind = crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            spec = version["schema"]["openAPIV3Schema"]["properties"].get("spec") or {}
            for path, name in _fields(spec, "spec"):
                out[(kind, path)] = name
    return out


def _runtime_source() -> str:
    return "".join(p.read_text() for p in sorted((ROOT / "app").rglob("*.py")))


def test_every_spec_field_is_read_refused_or_listed_with_a_reason() -> None:
    source = _runtime_source()
    fields = _spec_fields()
    assert len(fields) > 100, "the CRDs were not read"
    ignored = sorted(f"{kind} {path}" for (kind, path), name in fields.items()
                     if f'"{name}"' not in source and (kind, path) not in NO_EFFECT
                     and (kind, path) not in REFUSED)
    assert ignored == [], ("spec fields no runtime code reads: honour them as Kueue does, "
                           f"refuse them with a CRD rule, or list why they have no effect: "
                           f"{ignored}")


@pytest.mark.parametrize(("kind", "path"), sorted({*NO_EFFECT, *REFUSED}))
def test_listed_fields_still_exist(kind: str, path: str) -> None:
    assert (kind, path) in _spec_fields(), f"{kind} {path} is no longer in the CRDs: drop it"


@pytest.mark.parametrize(("kind", "path"), sorted(REFUSED))
def test_refused_fields_have_a_crd_rule_saying_why(kind: str, path: str) -> None:
    field = path.rsplit(".", 1)[1]
    for f in CRDS:
        crd = yaml.safe_load(f.read_text())
        if crd["spec"]["names"]["kind"] != kind:
            continue
        for version in crd["spec"]["versions"]:
            spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
            rules = spec.get("x-kubernetes-validations") or []
            assert any(r["rule"] == f"!has(self.{field})" and REFUSED[(kind, path)]
                       in r["message"] for r in rules), f"no rule refusing {kind} {path}"

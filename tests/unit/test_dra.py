"""DRA counting rules (issue 21; Kueue v0.17.1 ``pkg/dra``, kueue-integrations.md 9): what a
pod's ResourceClaimTemplates add to its per-pod requests, what makes the Workload inadmissible
and why, and the ``resources.deviceClassMappings`` setting that maps DeviceClasses to quota
resources."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from app.config import ResourcesSettings, Settings
from app.wire.dra import (
    DraInadmissible,
    claim_template_names,
    pod_claim_requests,
    template_device_counts,
    with_claim_requests,
)
from app.wire.fields import WorkloadSpecError
from app.wire.workload import workload_from_object
from tests.unit.test_eta_messages import FakeClient, FakeStore

CLASSES = {"gpu.example.com": "example.com/gpu", "a100.example.com": "example.com/gpu",
           "nic.example.com": "example.com/nic"}


def rct(*requests: dict[str, Any], **devices: Any) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "t", "namespace": "ns"},
            "spec": {"spec": {"devices": {"requests": list(requests), **devices}}}}


def exactly(cls: str = "gpu.example.com", **kw: Any) -> dict[str, Any]:
    return {"name": "r", "exactly": {"deviceClassName": cls, **kw}}


COUNTED = [
    ("count-default-1", rct(exactly()), {"gpu.example.com": 1}),
    ("count-2", rct(exactly(count=2)), {"gpu.example.com": 2}),
    ("explicit-ExactCount", rct(exactly(count=3, allocationMode="ExactCount")),
     {"gpu.example.com": 3}),
    ("two-requests-same-class-summed", rct(exactly(count=2), exactly(count=1)),
     {"gpu.example.com": 3}),
    ("two-classes", rct(exactly(count=2), exactly("nic.example.com")),
     {"gpu.example.com": 2, "nic.example.com": 1}),
    ("adminAccess-false-is-no-admin-access", rct(exactly(adminAccess=False)),
     {"gpu.example.com": 1}),
    ("no-requests", rct(), {}),
]


@pytest.mark.parametrize(("template", "want"), [c[1:] for c in COUNTED],
                         ids=[c[0] for c in COUNTED])
def test_template_device_counts(template: dict, want: dict) -> None:
    assert template_device_counts(template) == want


REFUSED = [
    ("allocation-mode-All", rct(exactly(allocationMode="All")), "allocationMode",
     "allocation mode All"),
    ("firstAvailable", rct({"name": "r", "firstAvailable": [
        {"name": "a", "deviceClassName": "gpu.example.com"}]}), "firstAvailable",
     "firstAvailable"),
    ("cel-selectors", rct(exactly(selectors=[{"cel": {"expression": "true"}}])), "selectors",
     "CEL selectors"),
    ("adminAccess", rct(exactly(adminAccess=True)), "adminAccess", "adminAccess"),
    ("constraints", rct(exactly(), constraints=[{"requests": ["r"], "matchAttribute": "x/y"}]),
     "devices.constraints", "constraints"),
    ("config", rct(exactly(), config=[{"opaque": {"driver": "d", "parameters": {}}}]),
     "devices.config", "config"),
    ("neither-exactly-nor-firstAvailable", rct({"name": "r"}), "exactly", "without 'exactly'"),
    ("unknown-mode", rct(exactly(allocationMode="Some")), "allocationMode", "allocation mode Some"),
]


@pytest.mark.parametrize(("template", "field", "why"), [c[1:] for c in REFUSED],
                         ids=[c[0] for c in REFUSED])
def test_template_shapes_kueue_refuses_are_inadmissible(template: dict, field: str,
                                                         why: str) -> None:
    with pytest.raises(DraInadmissible, match=why) as exc:
        template_device_counts(template)
    assert field in exc.value.field


@pytest.mark.parametrize(("request_", "field"), [
    (exactly(count=0), "count"), (exactly(count="2"), "count"), (exactly(""), "deviceClassName"),
], ids=["count-0", "count-string", "no-class"])
def test_malformed_templates_name_the_field(request_: dict, field: str) -> None:
    with pytest.raises(WorkloadSpecError) as exc:
        template_device_counts(rct(request_))
    assert not isinstance(exc.value, DraInadmissible) and exc.value.field.endswith(field)


TEMPLATES = {
    ("ns", "two-gpus"): rct(exactly(count=2)),
    ("ns", "one-a100"): rct(exactly("a100.example.com")),
    ("ns", "nic"): rct(exactly("nic.example.com")),
    ("ns", "unmapped"): rct(exactly("fpga.example.com")),
    ("other", "two-gpus"): rct(exactly(count=5)),
}


def lookup(ns: str, name: str) -> dict | None:
    return TEMPLATES.get((ns, name))


def pod(*claims: dict[str, str]) -> dict[str, Any]:
    return {"containers": [{"name": "c"}], "resourceClaims": list(claims)}


def tmpl(name: str, claim: str = "gpu") -> dict[str, str]:
    return {"name": claim, "resourceClaimTemplateName": name}


POD_COUNTED = [
    ("no-claims", pod(), {}),
    ("one-template", pod(tmpl("two-gpus")), {"example.com/gpu": 2}),
    ("two-classes-one-resource", pod(tmpl("two-gpus"), tmpl("one-a100", "b")),
     {"example.com/gpu": 3}),
    ("same-template-twice-is-two-claims", pod(tmpl("two-gpus"), tmpl("two-gpus", "b")),
     {"example.com/gpu": 4}),
    ("two-resources", pod(tmpl("two-gpus"), tmpl("nic", "n")),
     {"example.com/gpu": 2, "example.com/nic": 1}),
]


@pytest.mark.parametrize(("spec", "want"), [c[1:] for c in POD_COUNTED],
                         ids=[c[0] for c in POD_COUNTED])
def test_pod_claim_requests(spec: dict, want: dict) -> None:
    assert pod_claim_requests(spec, "ns", lookup, CLASSES) == want


def test_templates_are_looked_up_in_the_pods_namespace() -> None:
    assert pod_claim_requests(pod(tmpl("two-gpus")), "other", lookup, CLASSES) == {
        "example.com/gpu": 5}


POD_REFUSED = [
    ("direct-resource-claim", pod({"name": "g", "resourceClaimName": "shared"}), CLASSES,
     "resourceClaims[0].resourceClaimName", "does not support use of resource claims"),
    ("unmapped-device-class", pod(tmpl("unmapped")), CLASSES, "unmapped",
     "DeviceClass 'fpga.example.com' is not mapped"),
    ("missing-template", pod(tmpl("nope")), CLASSES, "resourceClaimTemplateName",
     "ResourceClaimTemplate ns/nope not found"),
    ("no-mappings-configured", pod(tmpl("two-gpus")), {}, "resourceClaims[0]",
     "no resources.deviceClassMappings"),
]


@pytest.mark.parametrize(("spec", "classes", "field", "why"), [c[1:] for c in POD_REFUSED],
                         ids=[c[0] for c in POD_REFUSED])
def test_pod_claims_kueue_cannot_count_are_inadmissible(spec: dict, classes: dict, field: str,
                                                        why: str) -> None:
    with pytest.raises(DraInadmissible, match=why) as exc:
        pod_claim_requests(spec, "ns", lookup, classes)
    assert field in str(exc.value)


def test_a_claim_with_neither_source_is_malformed() -> None:
    with pytest.raises(WorkloadSpecError, match="one of resourceClaimName"):
        pod_claim_requests(pod({"name": "g"}), "ns", lookup, CLASSES)


def workload_obj(count: int, *claims: dict[str, str]) -> dict[str, Any]:
    spec = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
            "resourceClaims": list(claims)}
    return {"metadata": {"name": "w", "namespace": "ns"},
            "spec": {"queueName": "lq", "podSets": [
                {"name": "main", "count": count, "template": {"spec": spec}}]}}


def test_workload_podsets_get_the_claimed_devices_per_pod() -> None:
    obj = workload_obj(3, tmpl("two-gpus"))
    wl = with_claim_requests(workload_from_object(obj), obj, lookup, CLASSES)
    ps = wl.pod_sets[0]
    assert dict(ps.requests) == {"cpu": 1000, "example.com/gpu": 2}
    assert ps.total() == {"cpu": 3000, "example.com/gpu": 6}
    assert claim_template_names(obj) == {"two-gpus"}


def test_a_workload_without_claims_is_unchanged_without_mappings() -> None:
    obj = workload_obj(2)
    wl = workload_from_object(obj)
    assert with_claim_requests(wl, obj, lookup, {}) is wl
    assert claim_template_names(obj) == set()


def test_workload_errors_name_the_podset_path() -> None:
    obj = workload_obj(1, {"name": "g", "resourceClaimName": "shared"})
    with pytest.raises(DraInadmissible) as exc:
        with_claim_requests(workload_from_object(obj), obj, lookup, CLASSES)
    assert exc.value.field == "spec.podSets[0].template.spec.resourceClaims[0].resourceClaimName"


# ------------------------------------------------------------ the deviceClassMappings setting

def mapping(name: str, *classes: str) -> dict[str, Any]:
    return {"name": name, "deviceClassNames": list(classes)}


def test_mappings_map_each_class_to_its_resource() -> None:
    s = ResourcesSettings(deviceClassMappings=[mapping("example.com/gpu", "gpu.example.com",
                                                       "a100.example.com"),
                                               mapping("nic", "nic.example.com")])
    assert s.device_classes() == {"gpu.example.com": "example.com/gpu",
                                  "a100.example.com": "example.com/gpu",
                                  "nic.example.com": "nic"}
    assert ResourcesSettings().device_classes() == {}


BAD_MAPPINGS = [
    ("17-mappings", [mapping(f"r{i}", f"c{i}") for i in range(17)], "at most 16 mappings"),
    ("9-classes", [mapping("r", *(f"c{i}" for i in range(9)))], "1 to 8 DeviceClass"),
    ("no-classes", [mapping("r")], "1 to 8 DeviceClass"),
    ("class-in-two-mappings", [mapping("a", "c"), mapping("b", "c")],
     "DeviceClass 'c' is mapped more than once"),
    ("class-twice-in-one", [mapping("a", "c", "c")], "mapped more than once"),
    ("bad-resource-name", [mapping("-bad", "c")], "not a qualified name"),
    ("bad-prefix", [mapping("Ex_ample/gpu", "c")], "not a qualified name"),
    ("long-name", [mapping("x" * 64, "c")], "not a qualified name"),
    ("bad-class-name", [mapping("r", "GPU_Class")], "not a DeviceClass name"),
]


@pytest.mark.parametrize(("mappings", "why"), [c[1:] for c in BAD_MAPPINGS],
                         ids=[c[0] for c in BAD_MAPPINGS])
def test_bad_mappings_are_refused_with_a_message(mappings: list, why: str) -> None:
    with pytest.raises(ValidationError, match=why):
        ResourcesSettings(deviceClassMappings=mappings)


def test_unknown_mapping_fields_are_refused() -> None:
    with pytest.raises(ValidationError, match="sources"):
        ResourcesSettings(deviceClassMappings=[{**mapping("r", "c"), "sources": []}])


def test_mappings_from_the_environment_and_from_a_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any,
) -> None:
    monkeypatch.setenv("PYKUEUE_RESOURCES__DEVICE_CLASS_MAPPINGS",
                       '[{"name": "example.com/gpu", "deviceClassNames": ["gpu.example.com"]}]')
    assert Settings().resources.device_classes() == {"gpu.example.com": "example.com/gpu"}
    monkeypatch.delenv("PYKUEUE_RESOURCES__DEVICE_CLASS_MAPPINGS")
    f = tmp_path / "pykueue.yaml"
    f.write_text("resources:\n  deviceClassMappings:\n"
                 "  - {name: example.com/gpu, deviceClassNames: [gpu.example.com]}\n"
                 "server: {port: 9555}\n")
    monkeypatch.setenv("PYKUEUE_CONFIG_FILE", str(f))
    s = Settings()
    assert s.resources.device_classes() == {"gpu.example.com": "example.com/gpu"}
    assert s.server.port == 9555
    monkeypatch.setenv("PYKUEUE_SERVER__PORT", "9556")  # the environment wins over the file
    assert Settings().server.port == 9556
    monkeypatch.setenv("PYKUEUE_CONFIG_FILE", str(tmp_path / "missing.yaml"))
    with pytest.raises(ValueError, match="not a readable file"):
        Settings()


# ------------------------------------------------------------ the scheduling loop's feed
# (app/controllers/informer_feed.py and dra_verdicts.py: what the core is given and what is
# written; the API server side is tested on the lab by tests/integration/test_reconciler_dra.py)

class _Store(FakeStore):
    def list(self) -> list[dict[str, Any]]:
        return list(self.objs.values())


def _feed_loop() -> tuple[Any, Any, dict[str, _Store]]:
    from types import SimpleNamespace

    from app.controllers.scheduling_loop import SchedulerLoop
    from app.kube.context import RCT, WL

    stores = {WL: _Store(), RCT: _Store()}
    settings = Settings(controllers_enabled=False, resources=ResourcesSettings(
        deviceClassMappings=[mapping("example.com/gpu", "gpu.example.com")]))
    events: list[str] = []
    ctx = SimpleNamespace(
        settings=settings, client=FakeClient(), store=lambda kind: stores[kind],
        informers=SimpleNamespace(informers=stores), clock=lambda: 1_000_000.0,
        may_write=True, inflight=set(), wake=lambda: None, events=events,
        recorder=SimpleNamespace(emit=lambda obj, etype, reason, msg: events.append(reason)))
    jobs = SimpleNamespace(owner_object=lambda wl: None, notify=lambda wl, key: None,
                           pods_holding=lambda wl, uid: None)
    return SchedulerLoop(ctx, jobs=jobs), ctx, stores  # type: ignore[arg-type]


async def _drain(loop: Any) -> None:
    import asyncio

    while loop.writes.tasks:  # noqa: SLF001 - the loop's write tasks
        await asyncio.gather(*list(loop.writes.tasks))  # noqa: SLF001


def _conds(obj: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in obj["status"]["conditions"]}


async def test_the_loop_keeps_an_uncountable_workload_out_and_takes_it_back_once_countable(
) -> None:
    from app.kube.context import WL

    loop, ctx, stores = _feed_loop()
    obj = workload_obj(3, tmpl("two-gpus"))
    stores[WL].put(obj)
    loop.feed.on_workload("ADDED", None, obj)
    assert loop.cluster.workload("ns/w") is None
    assert "ResourceClaimTemplate ns/two-gpus not found" in loop.dra.inadmissible["ns/w"]
    await _drain(loop)
    assert _conds(ctx.client.writes[-1]) == {"QuotaReserved": ("False", "Inadmissible"),
                                             "Requeued": ("False", "Inadmissible")}
    assert ctx.events == ["Inadmissible"]
    # The template appears: the Workload is read again, 2 devices per pod, Requeued=True.
    stores["rct"].put({**rct(exactly(count=2)), "metadata": {"name": "two-gpus",
                                                             "namespace": "ns"}})
    loop.feed.on_claim_template("ADDED", None, stores["rct"].get("ns/two-gpus"))
    wl = loop.cluster.domain_workload("ns/w")
    assert wl is not None and dict(wl.pod_sets[0].requests) == {"cpu": 1000,
                                                                "example.com/gpu": 2}
    assert "ns/w" not in loop.dra.inadmissible
    await _drain(loop)
    assert _conds(ctx.client.writes[-1])["Requeued"] == ("True", "DRAResourcesResolved")
    assert ctx.events == ["Inadmissible"]  # no second Event

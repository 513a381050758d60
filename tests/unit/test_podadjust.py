"""Kueue's adjustment of a Workload's pod sets before they are counted (Kueue v0.17.1
``pkg/workload/resources.go`` AdjustResources, ValidateResources, ValidateLimitRange;
``pkg/util/limitrange``): RuntimeClass pod overhead, LimitRange defaults, limits as missing
requests, in that order; the checks that leave a Workload pending with Kueue's message; the
core's handling of such a Workload; and the scheduling loop's feed, which applies them to
pending Workloads from the LimitRange and RuntimeClass stores (app.wire.podadjust,
app.controllers.informer_feed). No mocks: plain JSON in, amounts and messages out."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from app.core.decisions import Admit
from app.core.types import ClusterQueueName
from app.wire.fields import WorkloadSpecError
from app.wire.podadjust import (
    LimitSummary,
    adjust_pod_spec,
    adjusted_pod_sets,
    runtime_class_names,
    summarize,
    with_adjusted_resources,
)
from app.wire.workload import workload_from_object
from tests.builders import Sim, cluster_queue, workload

GI = 1024 ** 3
MI = 1024 ** 2


def c(name: str = "c", requests: dict | None = None, limits: dict | None = None,
      **extra: Any) -> dict[str, Any]:
    """A container with ``requests`` / ``limits`` (quantities as written)."""
    res = {k: v for k, v in (("requests", requests), ("limits", limits)) if v is not None}
    return {"name": name, **({"resources": res} if res else {}), **extra}


def lr(name: str, *items: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "LimitRange",
            "metadata": {"name": name, "namespace": "ns"}, "spec": {"limits": list(items)}}


def item(kind: str = "Container", **values: dict[str, str]) -> dict[str, Any]:
    return {"type": kind, **values}


def requests_of(spec: dict[str, Any], overheads: dict | None = None,
                ranges: list | None = None) -> dict[str, int]:
    got = adjusted_pod_sets([spec], overheads or {}, ranges or [])
    return got.requests[0]


def problem_of(spec: dict[str, Any], overheads: dict | None = None,
               ranges: list | None = None) -> str:
    return adjusted_pod_sets([spec], overheads or {}, ranges or []).problem


# ------------------------------------------------------------------ 1. RuntimeClass overhead

VM = {"vm": {"cpu": "3", "memory": "512Mi"}}

OVERHEAD = [
    ("runtime-class-overhead-added",
     {"runtimeClassName": "vm", "containers": [c(requests={"cpu": "1"})]}, VM,
     {"cpu": 4000, "memory": 512 * MI}),
    ("own-overhead-kept-not-the-runtime-class-one",
     {"runtimeClassName": "vm", "overhead": {"cpu": "250m"},
      "containers": [c(requests={"cpu": "1"})]}, VM, {"cpu": 1250}),
    ("empty-overhead-takes-the-runtime-class-one",
     {"runtimeClassName": "vm", "overhead": {}, "containers": [c(requests={"cpu": "1"})]}, VM,
     {"cpu": 4000, "memory": 512 * MI}),
    ("missing-runtime-class-adds-nothing",
     {"runtimeClassName": "gone", "containers": [c(requests={"cpu": "1"})]}, VM, {"cpu": 1000}),
    ("runtime-class-without-overhead-adds-nothing",
     {"runtimeClassName": "plain", "containers": [c(requests={"cpu": "1"})]}, {"plain": None},
     {"cpu": 1000}),
    ("no-runtime-class-no-overhead",
     {"containers": [c(requests={"cpu": "1"})]}, VM, {"cpu": 1000}),
    ("overhead-added-once-per-pod-after-init-containers",
     {"runtimeClassName": "vm", "initContainers": [c("i", requests={"cpu": "2"})],
      "containers": [c(requests={"cpu": "1"})]}, VM, {"cpu": 5000, "memory": 512 * MI}),
]


@pytest.mark.parametrize(("spec", "overheads", "want"), [x[1:] for x in OVERHEAD],
                         ids=[x[0] for x in OVERHEAD])
def test_runtime_class_overhead(spec: dict, overheads: dict, want: dict) -> None:
    assert requests_of(spec, overheads) == want


def test_the_pod_spec_given_is_not_changed() -> None:
    spec = {"runtimeClassName": "vm", "containers": [c(limits={"cpu": "1"})]}
    before = repr(spec)
    adjusted = adjust_pod_spec(spec, VM, summarize([lr("l", item(default={"memory": "1Gi"}))])
                               ["Container"])
    assert repr(spec) == before
    assert adjusted["overhead"] == {"cpu": "3", "memory": "512Mi"}
    assert adjusted["containers"][0]["resources"] == {
        "limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"memory": "1Gi", "cpu": "1"}}


# ------------------------------------------------------------------ 2. LimitRange defaults

DEFAULTS = [
    ("default-request-fills-a-missing-request",
     {"containers": [c()]}, [lr("l", item(defaultRequest={"cpu": "250m"}))], {"cpu": 250}),
    ("default-limit-becomes-the-request",
     {"containers": [c()]}, [lr("l", item(default={"memory": "1Gi"}))], {"memory": GI}),
    ("own-request-kept",
     {"containers": [c(requests={"cpu": "2"})]},
     [lr("l", item(defaultRequest={"cpu": "250m"}, default={"cpu": "4"}))], {"cpu": 2000}),
    ("every-container-and-init-container",
     {"initContainers": [c("i")], "containers": [c("a"), c("b")]},
     [lr("l", item(defaultRequest={"cpu": "500m"}))], {"cpu": 1000}),
    ("sidecars-too",
     {"initContainers": [c("s", restartPolicy="Always")], "containers": [c("a")]},
     [lr("l", item(defaultRequest={"cpu": "500m"}))], {"cpu": 1000}),
    ("pod-type-has-no-defaults",
     {"containers": [c()]}, [lr("l", item("Pod", max={"cpu": "8"}))], {}),
    ("pvc-type-ignored",
     {"containers": [c()]}, [lr("l", item("PersistentVolumeClaim", max={"storage": "1Gi"}))],
     {}),
    ("first-default-by-limitrange-name",
     {"containers": [c()]},
     [lr("b", item(defaultRequest={"cpu": "2"})), lr("a", item(defaultRequest={"cpu": "1"},
                                                               default={"memory": "1Gi"}))],
     {"cpu": 1000, "memory": GI}),
]


@pytest.mark.parametrize(("spec", "ranges", "want"), [x[1:] for x in DEFAULTS],
                         ids=[x[0] for x in DEFAULTS])
def test_limit_range_defaults(spec: dict, ranges: list, want: dict) -> None:
    assert requests_of(spec, ranges=ranges) == want


# ------------------------------------------------------------------ 3. order of the steps

def test_default_request_comes_before_limits_stand_for_requests() -> None:
    # Kueue's order: the LimitRange's defaultRequest fills the missing request first, so a
    # container with only a limit counts the default request, not its limit.
    spec = {"containers": [c(limits={"cpu": "3"})]}
    assert requests_of(spec) == {"cpu": 3000}  # no LimitRange: the limit
    ranges = [lr("l", item(defaultRequest={"cpu": "1"}))]
    assert requests_of(spec, ranges=ranges) == {"cpu": 1000}


def test_default_limit_then_stands_for_the_missing_request() -> None:
    spec = {"containers": [c(requests={"memory": "1Gi"})]}
    ranges = [lr("l", item(default={"cpu": "2", "memory": "4Gi"}))]
    assert requests_of(spec, ranges=ranges) == {"cpu": 2000, "memory": GI}


def test_overhead_defaults_and_limits_together() -> None:
    spec = {"runtimeClassName": "vm",
            "containers": [c("a"), c("b", limits={"nvidia.com/gpu": "1"})]}
    ranges = [lr("l", item(defaultRequest={"cpu": "500m"}, default={"memory": "256Mi"}))]
    assert requests_of(spec, VM, ranges) == {
        "cpu": 4000, "memory": 2 * 256 * MI + 512 * MI, "nvidia.com/gpu": 1}


def test_units_milli_cpu_and_bytes() -> None:
    spec = {"runtimeClassName": "vm", "containers": [c()]}
    got = requests_of(spec, {"vm": {"cpu": "0.1", "memory": "100M", "ephemeral-storage": "1Ki"}},
                      [lr("l", item(defaultRequest={"cpu": "1.5", "memory": "1.5Gi"}))])
    assert got == {"cpu": 1600, "memory": 100_000_000 + 3 * GI // 2, "ephemeral-storage": 1024}


# ------------------------------------------------------------------ summaries

def test_summaries_keep_lowest_max_highest_min_first_defaults() -> None:
    got = summarize([
        lr("b", item(max={"cpu": "2"}, min={"cpu": "100m"}, default={"cpu": "1"}),
           item("Pod", max={"memory": "8Gi"})),
        lr("a", item(max={"cpu": "4", "memory": "2Gi"}, min={"cpu": "200m"},
                     maxLimitRequestRatio={"cpu": "2"}, defaultRequest={"cpu": "300m"}),
           item("Pod", max={"memory": "4Gi"})),
    ])
    assert got == {
        "Container": LimitSummary(max={"cpu": 2000, "memory": 2 * GI}, min={"cpu": 200},
                                  default={"cpu": "1"}, default_request={"cpu": "300m"}),
        "Pod": LimitSummary(max={"memory": 4 * GI}),
    }


def test_an_unreadable_limit_range_quantity_names_its_field() -> None:
    with pytest.raises(WorkloadSpecError) as exc:
        summarize([lr("l", item(max={"cpu": "lots"}))])
    assert exc.value.field == "LimitRange ns/l.spec.limits[0].max[cpu]"


# ------------------------------------------------------------------ the checks

P = "spec.podSets[0].template.spec"
INVALID = "resources validation failed"
UNSATISFIED = "resources didn't satisfy LimitRange constraints"

CHECKS = [
    ("requests-above-limits",
     {"containers": [c(requests={"cpu": "2", "memory": "1Gi"}, limits={"cpu": "1"})]}, [],
     f'{INVALID}: {P}.containers[0]: Invalid value: ["cpu"]: '
     "requests must not exceed its limits"),
    ("requests-above-limits-init-container-first-names-sorted",
     {"initContainers": [c("i", requests={"memory": "2", "cpu": "2"},
                           limits={"cpu": "1", "memory": "1"})],
      "containers": [c(requests={"cpu": "2"}, limits={"cpu": "1"})]}, [],
     f'{INVALID}: [{P}.initContainers[0]: Invalid value: ["cpu","memory"]: requests must not '
     f'exceed its limits, {P}.containers[0]: Invalid value: ["cpu"]: requests must not exceed '
     "its limits]"),
    ("a-default-limit-below-the-request",
     {"containers": [c(requests={"cpu": "2"})]}, [lr("l", item(default={"cpu": "1"}))],
     f'{INVALID}: {P}.containers[0]: Invalid value: ["cpu"]: '
     "requests must not exceed its limits"),
    ("container-limit-above-max",
     {"containers": [c(requests={"cpu": "1"}, limits={"cpu": "3"})]},
     [lr("l", item(max={"cpu": "2"}))],
     f'{UNSATISFIED}: {P}.containers[0]: Invalid value: ["cpu"]: '
     "requests must not be above the limitRange max"),
    ("container-request-below-min",
     {"containers": [c(requests={"memory": "1Mi"}, limits={"memory": "1Gi"})]},
     [lr("l", item(min={"memory": "100Mi"}))],
     f'{UNSATISFIED}: {P}.containers[0]: Invalid value: ["memory"]: '
     "requests must not be below the limitRange min"),
    ("pod-total-with-overhead-above-pod-max",
     {"runtimeClassName": "vm", "containers": [c(requests={"cpu": "1"})]},
     [lr("l", item("Pod", max={"cpu": "2"}))],
     f'{UNSATISFIED}: {P}: Invalid value: ["cpu"]: '
     "requests must not be above the limitRange max"),
    ("pod-total-below-pod-min",
     {"containers": [c("a", requests={"cpu": "100m"}), c("b", requests={"cpu": "100m"})]},
     [lr("l", item("Pod", min={"cpu": "250m"}))],
     f'{UNSATISFIED}: {P}: Invalid value: ["cpu"]: '
     "requests must not be below the limitRange min"),
    ("requests-above-limits-reported-before-limit-ranges",
     {"containers": [c(requests={"cpu": "2"}, limits={"cpu": "1"}),
                     c("b", requests={"cpu": "9"})]},
     [lr("l", item(max={"cpu": "4"}))],
     f'{INVALID}: {P}.containers[0]: Invalid value: ["cpu"]: '
     "requests must not exceed its limits"),
    ("within-bounds", {"containers": [c(requests={"cpu": "1"}, limits={"cpu": "2"})]},
     [lr("l", item(max={"cpu": "2"}, min={"cpu": "1"}), item("Pod", max={"cpu": "2"}))], ""),
    ("a-resource-only-one-side-names-is-not-compared",
     {"containers": [c(requests={"nvidia.com/gpu": "8"})]},
     [lr("l", item(max={"cpu": "1"}, min={"memory": "1Gi"}))], ""),
    ("max-limit-request-ratio-not-checked-as-kueue",
     {"containers": [c(requests={"cpu": "100m"}, limits={"cpu": "4"})]},
     [lr("l", item(maxLimitRequestRatio={"cpu": "2"}))], ""),
]


@pytest.mark.parametrize(("spec", "ranges", "want"), [x[1:] for x in CHECKS],
                         ids=[x[0] for x in CHECKS])
def test_checks_and_kueue_messages(spec: dict, ranges: list, want: str) -> None:
    assert problem_of(spec, VM, ranges) == want


def test_errors_of_several_pod_sets_are_one_aggregate() -> None:
    bad = {"containers": [c(requests={"cpu": "3"})]}
    got = adjusted_pod_sets([bad, bad], {}, [lr("l", item(max={"cpu": "2"}))])
    one = 'Invalid value: ["cpu"]: requests must not be above the limitRange max'
    assert got.problem == (f"{UNSATISFIED}: [spec.podSets[0].template.spec.containers[0]: {one}, "
                           f"spec.podSets[1].template.spec.containers[0]: {one}]")


# ------------------------------------------------------------------ the Workload

def wl_obj(name: str = "w", cpu: str = "1", **pod: Any) -> dict[str, Any]:
    spec = {"containers": [c(requests={"cpu": cpu})], **pod}
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"queueName": "lq-cq", "podSets": [
                {"name": "main", "count": 2, "template": {"spec": spec}}]}}


def test_workload_requests_adjusted_and_total_per_count() -> None:
    obj = wl_obj(runtimeClassName="vm")
    assert runtime_class_names(obj) == {"vm"}
    wl = with_adjusted_resources(workload_from_object(obj), obj, {"vm": {"cpu": "3"}}, [])
    assert dict(wl.pod_sets[0].requests) == {"cpu": 4000}
    assert wl.pod_sets[0].total() == {"cpu": 8000}
    assert wl.invalid_resources == ""


def test_a_workload_with_nothing_to_adjust_is_returned_as_is() -> None:
    obj = wl_obj(runtimeClassName="gone")
    wl = workload_from_object(obj)
    assert with_adjusted_resources(wl, obj, {}, []) is wl
    own = wl_obj(runtimeClassName="vm", overhead={"cpu": "1"})
    assert runtime_class_names(own) == set()


def test_a_workload_failing_a_check_carries_the_message_and_loses_it_when_fixed() -> None:
    obj = wl_obj(cpu="3")
    ranges = [lr("l", item(max={"cpu": "2"}))]
    wl = with_adjusted_resources(workload_from_object(obj), obj, {}, ranges)
    assert wl.invalid_resources.startswith(UNSATISFIED)
    assert with_adjusted_resources(wl, obj, {}, []).invalid_resources == ""


# ------------------------------------------------------------------ the core

BAD = "resources didn't satisfy LimitRange constraints: spec.podSets[0]..."


def _sim(strict: bool) -> Sim:
    cq = cluster_queue("cq").flavor("default-flavor", cpu=4)
    return Sim(cq.strict_fifo() if strict else cq)


def test_core_keeps_an_invalid_workload_pending_with_the_message_and_admits_the_next() -> None:
    s = _sim(strict=False)
    bad = workload("bad").cq("cq").pods(1, cpu=1).priority(5).build(creation=s.tick())
    s.submit(replace(bad, invalid_resources=BAD), workload("ok").cq("cq").pods(1, cpu=1))
    s.settle()
    assert s.pending("bad") and s.admitted("ok") and s.usage("cq") == 1000
    info = s.c.workload(s.key("bad"))
    assert info.inadmissible and info.reason.value == "InvalidResources" \
        and info.message == BAD
    pending = s.c.pending_workloads(ClusterQueueName("cq"))
    assert [(p.workload, p.inadmissible) for p in pending] == [("ns/bad", True)]


def test_core_under_strict_fifo_an_invalid_head_blocks_its_queue_as_kueues() -> None:
    s = _sim(strict=True)
    bad = workload("bad").cq("cq").pods(1, cpu=1).priority(5).build(creation=s.tick())
    s.submit(replace(bad, invalid_resources=BAD), workload("ok").cq("cq").pods(1, cpu=1))
    s.settle()
    assert s.pending("bad") and s.pending("ok")
    # Fixed (a LimitRange changed): the same Workload, re-read, is admitted, then the next.
    s.c.update_workload(bad)
    s.settle()
    assert s.admitted("bad") and s.admitted("ok")


def test_core_a_valid_class_mate_of_an_invalid_workload_is_not_held_behind_it() -> None:
    s = _sim(strict=False)
    s.submit(workload("run").cq("cq").pods(1, cpu=4))
    s.settle()
    same = workload("bad").cq("cq").pods(1, cpu=1).build(creation=s.tick())
    s.submit(replace(same, invalid_resources=BAD), workload("ok").cq("cq").pods(1, cpu=1),
             workload("ok2").cq("cq").pods(1, cpu=1))
    s.settle()
    s.finish("run")
    s.settle()
    assert s.pending("bad") and s.admitted("ok") and s.admitted("ok2")


# ------------------------------------------------------------------ the scheduling loop's feed
# (app/controllers/informer_feed.py: the stores it reads, the re-reads on changes)

def _feed_loop() -> tuple[Any, Sim, dict[str, Any]]:
    from types import SimpleNamespace

    from app.config import Settings
    from app.controllers.scheduling_loop import SchedulerLoop
    from app.kube.client import LIMIT_RANGES, RUNTIME_CLASSES, WORKLOADS
    from app.kube.context import LR, RTC, WL
    from app.kube.informers import Store
    from tests.unit.test_eta_messages import FakeClient

    stores = {WL: Store(WORKLOADS), LR: Store(LIMIT_RANGES), RTC: Store(RUNTIME_CLASSES)}
    ctx = SimpleNamespace(
        settings=Settings(controllers_enabled=False), client=FakeClient(),
        store=lambda kind: stores[kind], informers=SimpleNamespace(informers=stores),
        clock=lambda: 1_000_000.0, may_write=False, inflight=set(), wake=lambda: None,
        recorder=SimpleNamespace(emit=lambda obj, etype, reason, msg: None))
    jobs = SimpleNamespace(owner_object=lambda wl: None, notify=lambda wl, key: None,
                           pods_holding=lambda wl, uid: None)
    sim = _sim(strict=False)
    loop = SchedulerLoop(ctx, jobs=jobs, cluster=sim.c)  # type: ignore[arg-type]
    return loop, sim, stores


def _add(loop: Any, stores: dict[str, Any], kind: str, obj: dict[str, Any]) -> None:
    stores[kind].put(obj)
    handler = {"wl": loop.feed.on_workload, "lr": loop.feed.on_limit_range,
               "rtc": loop.feed.on_runtime_class}[kind]
    handler("ADDED", None, obj)


def _one_pod(obj: dict[str, Any]) -> dict[str, Any]:
    obj["spec"]["podSets"][0]["count"] = 1
    return obj


def test_feed_counts_the_runtime_class_overhead_so_one_of_two_fits() -> None:
    # The lab's M4 case: 4 CPUs of quota, two 1-pod Workloads of 1 CPU with a RuntimeClass of
    # 3 CPUs overhead: 4 CPUs each, one admitted (without the overhead both would be).
    loop, sim, stores = _feed_loop()
    _add(loop, stores, "rtc", {"metadata": {"name": "vm"}, "handler": "vm",
                               "overhead": {"podFixed": {"cpu": "3"}}})
    for name in ("a", "b"):
        _add(loop, stores, "wl", _one_pod(wl_obj(name, runtimeClassName="vm")))
    admitted = [d.workload for d in sim.settle() if isinstance(d, Admit)]
    assert admitted == ["ns/a"] and sim.usage("cq") == 4000 and sim.pending("b")
    assert dict(sim.c.domain_workload("ns/b").pod_sets[0].requests) == {"cpu": 4000}


def test_feed_rereads_pending_workloads_when_a_runtime_class_or_limit_range_changes() -> None:
    loop, sim, stores = _feed_loop()
    obj = _one_pod(wl_obj("w", runtimeClassName="vm", cpu="1"))
    _add(loop, stores, "wl", obj)  # the RuntimeClass is not known yet: 1 CPU
    assert dict(sim.c.domain_workload("ns/w").pod_sets[0].requests) == {"cpu": 1000}
    _add(loop, stores, "rtc", {"metadata": {"name": "vm"}, "overhead": {"podFixed": {"cpu": "5"}}})
    assert dict(sim.c.domain_workload("ns/w").pod_sets[0].requests) == {"cpu": 6000}
    sim.settle()
    assert sim.pending("w")  # 6 CPUs on a quota of 4
    _add(loop, stores, "lr", lr("l", item("Pod", max={"cpu": "2"})))
    assert sim.c.domain_workload("ns/w").invalid_resources.startswith(UNSATISFIED)
    sim.settle()
    assert sim.c.workload(sim.key("w")).reason.value == "InvalidResources"
    # The RuntimeClass loses its overhead and the LimitRange goes: 1 CPU, admitted.
    _add(loop, stores, "rtc", {"metadata": {"name": "vm"}})
    stores["lr"].remove("ns/l")
    loop.feed.on_limit_range("DELETED", lr("l"), None)
    sim.settle()
    assert sim.admitted("w") and sim.usage("cq") == 1000


def test_feed_a_limit_range_default_counts_and_other_namespaces_are_not_touched() -> None:
    loop, sim, stores = _feed_loop()
    _add(loop, stores, "lr", {**lr("l", item(defaultRequest={"memory": "1Gi"})),
                              "metadata": {"name": "l", "namespace": "other"}})
    obj = _one_pod(wl_obj("w"))
    _add(loop, stores, "wl", obj)
    assert dict(sim.c.domain_workload("ns/w").pod_sets[0].requests) == {"cpu": 1000}
    _add(loop, stores, "lr", lr("l", item(defaultRequest={"memory": "1Gi"})))
    assert dict(sim.c.domain_workload("ns/w").pod_sets[0].requests) == {"cpu": 1000,
                                                                        "memory": GI}


def test_feed_an_admitted_workload_keeps_its_admissions_usage() -> None:
    # Kueue counts an admitted Workload by its status.admission: a RuntimeClass or LimitRange
    # that changes later does not change its usage (only pending Workloads are re-adjusted).
    loop, sim, stores = _feed_loop()
    obj = _one_pod(wl_obj("w", runtimeClassName="vm"))
    obj["status"] = {"admission": {"clusterQueue": "cq", "podSetAssignments": [
        {"name": "main", "flavors": {"cpu": "default-flavor"}, "resourceUsage": {"cpu": "1"},
         "count": 1}]}}
    _add(loop, stores, "wl", obj)
    assert sim.admitted("w") and sim.usage("cq") == 1000
    _add(loop, stores, "rtc", {"metadata": {"name": "vm"}, "overhead": {"podFixed": {"cpu": "3"}}})
    _add(loop, stores, "lr", lr("l", item("Pod", max={"cpu": "1"})))
    loop.feed.on_workload("MODIFIED", obj, obj)
    assert sim.admitted("w") and sim.usage("cq") == 1000


@pytest.mark.parametrize(("requests", "limits", "refused"), [
    ({"cpu": "1"}, {"cpu": "1000m"}, False),  # written differently, the same amount
    ({"memory": "2Gi"}, {"memory": "2048Mi"}, False),
    ({"memory": "2Gi", "cpu": "1"}, {"memory": "1Gi"}, True),
    ({"cpu": "1001m"}, {"cpu": "1"}, True),
    ({"cpu": "1"}, {"nvidia.com/gpu": "1"}, False),  # nothing both name
], ids=["milli-alike", "bytes-alike", "memory-above", "cpu-above-by-1m", "disjoint"])
def test_requests_above_limits_without_anything_to_adjust(requests: dict, limits: dict,
                                                          refused: bool) -> None:
    obj = wl_obj()
    obj["spec"]["podSets"][0]["template"]["spec"]["containers"] = [c(requests=requests,
                                                                     limits=limits)]
    wl = with_adjusted_resources(workload_from_object(obj), obj, {}, [])
    assert wl.invalid_resources.startswith(INVALID) is refused, wl.invalid_resources
    assert (wl.invalid_resources == "") is not refused

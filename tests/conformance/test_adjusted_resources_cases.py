"""Kueue's adjustment of a pending Workload's pod sets before they are counted
(``workload.AdjustResources``, ``ValidateResources``, ``ValidateLimitRange``; pykueue:
app/wire/podadjust.py) as conformance scenarios: the same assertions against real Kueue
v0.17.1 (``make conformance-kueue``) and pykueue (``make conformance``). Units: milli-cpu.

RuntimeClass pod overhead and LimitRange defaults count in quota, in Kueue's order; a change
of either re-adjusts the pending Workloads only; requests above limits and a LimitRange's
bounds leave a Workload pending with Kueue's message."""

from __future__ import annotations

import json

from app.core.quantity import parse_quantity
from tests.conformance.support import Target, cond

PAUSE = "registry.k8s.io/pause:3.9"


def _cpu_usage(w: dict) -> int:
    psa = w["status"]["admission"]["podSetAssignments"][0]
    return parse_quantity(psa["resourceUsage"]["cpu"], "cpu")


def _message(w: dict) -> str:
    """The QuotaReserved=False message without pykueue's tail ("; position N ...": the
    status API's position and ETA, docs/status.md)."""
    c = cond(w, "QuotaReserved")
    assert c and c["status"] == "False", w.get("status")
    return c["message"].split("; position ")[0]


def _limit_range(s, name: str, ns: str, *items: dict) -> None:  # noqa: ANN001 - a Scope
    s.lab.apply(json.dumps({"apiVersion": "v1", "kind": "LimitRange",
                            "metadata": {"name": name, "namespace": ns},
                            "spec": {"limits": list(items)}}))


def _container(requests: dict[str, str] | None = None,
               limits: dict[str, str] | None = None) -> dict:
    res = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
    return {"name": "c", "image": PAUSE, **({"resources": res} if res else {})}


def test_runtime_class_overhead_counts_and_a_later_change_readjusts_only_pending(
        target: Target) -> None:
    s = target.scope("adj-rc")
    f = s.flavor("default")
    rc = s.n("vm")
    s.lab.apply(json.dumps({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                            "metadata": {"name": rc}, "handler": "vm",
                            "overhead": {"podFixed": {"cpu": "3"}}}))
    try:
        s.cluster_queue("cq", [(f, {"cpu": {"nominalQuota": "5"}})])
        s.workload("a", "cq", {"cpu": "1"}, pod={"runtimeClassName": rc})
        assert _cpu_usage(s.admitted("a")) == 4000  # 1 + 3 of overhead
        s.workload("b", "cq", {"cpu": "1"}, pod={"runtimeClassName": rc})
        s.stays_pending("b")  # 4 more on 1 left
        s.reserved("cq", f, "cpu", 4000, 0)
        # Its own overhead is kept: the RuntimeClass's is not added.
        s.cluster_queue("own", [(f, {"cpu": {"nominalQuota": "2"}})])
        s.workload("own", "own", {"cpu": "1"},
                   pod={"runtimeClassName": rc, "overhead": {"cpu": "500m"}})
        assert _cpu_usage(s.admitted("own")) == 1500
        # The RuntimeClass goes: b is re-adjusted (1 CPU) and admitted; a keeps its 4.
        s.lab.kubectl("delete", "runtimeclass", rc)
        assert _cpu_usage(s.admitted("b")) == 1000
        assert _cpu_usage(s.wl("a")) == 4000
        s.reserved("cq", f, "cpu", 5000, 0)
    finally:
        s.lab.kubectl("delete", "runtimeclass", rc, "--ignore-not-found", check=False)


def test_limit_range_defaults_count_in_kueues_order(target: Target) -> None:
    s = target.scope("adj-lrdef")
    f = s.flavor("default")
    _limit_range(s, "defaults", s.ns, {"type": "Container", "default": {"cpu": "2"},
                                       "defaultRequest": {"cpu": "500m"}})
    s.cluster_queue("cq", [(f, {"cpu": {"nominalQuota": "10"}})])
    s.workload("bare", "cq", {}, pod={"containers": [_container()]})
    assert _cpu_usage(s.admitted("bare")) == 500
    # A limit of its own and no request: the default request comes first (Kueue's order),
    # not the limit.
    s.workload("limit-only", "cq", {}, pod={"containers": [_container(limits={"cpu": "3"})]})
    assert _cpu_usage(s.admitted("limit-only")) == 500
    s.workload("request-only", "cq", {"cpu": "1500m"})
    assert _cpu_usage(s.admitted("request-only")) == 1500
    s.reserved("cq", f, "cpu", 2500, 0)


def test_requests_above_limits_or_a_limit_range_leave_it_pending_with_kueues_message(
        target: Target) -> None:
    path = "spec.podSets[0].template.spec"  # Kueue's field paths start with it
    s = target.scope("adj-lrmax")
    f = s.flavor("default")
    s.cluster_queue("cq", [(f, {"cpu": {"nominalQuota": "10"}})])
    s.workload("inverted", "cq", {}, pod={"containers": [
        _container({"cpu": "2"}, {"cpu": "1"})]})
    w = s.stays_pending("inverted")
    assert cond(w, "QuotaReserved")["reason"] == "Pending", w["status"]
    assert _message(w) == f'resources validation failed: {path}.containers[0]: Invalid ' \
        'value: ["cpu"]: requests must not exceed its limits'
    ns = s.namespace("lr")
    s.local_queue(ns, "cq")
    _limit_range(s, "bounds", ns, {"type": "Container", "max": {"cpu": "2"},
                                   "default": {"cpu": "1"}, "defaultRequest": {"cpu": "1"}},
                 {"type": "Pod", "max": {"cpu": "3"}})
    s.workload("big", "cq", {}, ns=ns, pod={"containers": [
        _container({"cpu": "3"}, {"cpu": "3"})]})
    w = s.stays_pending("big", ns=ns)
    assert cond(w, "QuotaReserved")["reason"] == "Pending", w["status"]
    lr = "resources didn't satisfy LimitRange constraints"
    assert _message(w) == f'{lr}: {path}.containers[0]: Invalid value: ["cpu"]: requests ' \
        "must not be above the limitRange max"
    two = [_container({"cpu": "2"}, {"cpu": "2"})]  # with limits: the default limit is 1
    s.workload("heavy-pod", "cq", {}, ns=ns, pod={"containers": two,
                                                  "overhead": {"cpu": "2"}})
    w = s.stays_pending("heavy-pod", ns=ns)
    assert _message(w) == f'{lr}: {path}: Invalid value: ["cpu"]: requests must not be ' \
        "above the limitRange max"
    s.workload("fits", "cq", {}, ns=ns, pod={"containers": two})
    assert _cpu_usage(s.admitted("fits", ns=ns)) == 2000
    # The LimitRange goes: the pending Workloads of its namespace are re-read and admitted.
    s.lab.kubectl("delete", "limitrange", "bounds", "-n", ns)
    if target.name == "kueue":
        # Kueue v0.17.1 re-adjusts them, but keeps a parked Workload whose adjusted spec did
        # not change parked (ClusterQueue.PushOrUpdate) until its queue's next requeue, here
        # a change of the ClusterQueue; pykueue looks at it again at once
        # (docs/architecture.md, "Differences from Kueue v0.17.1").
        s.stays_pending("big", ns=ns)
        s.cluster_queue("cq", [(f, {"cpu": {"nominalQuota": "11"}})])
    assert _cpu_usage(s.admitted("big", ns=ns)) == 3000
    assert _cpu_usage(s.admitted("heavy-pod", ns=ns)) == 4000
    s.stays_pending("inverted", 0.5)

"""Kueue's adjustment of pending Workloads (``workload.AdjustResources``;
app/wire/podadjust.py) against the real API server, as it changes: a RuntimeClass's pod
overhead and a LimitRange are read from their watches (pykueue's ServiceAccount must be
allowed to), a change re-reads the pending Workloads (Kueue's workload controller re-adjusts
those without a quota reservation), an admitted Workload keeps its admission's usage, and the
stored Workload is never changed (the adjustment lives in memory, as Kueue's)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration import reconciler_support as rs
from tests.integration.reconciler_support import (  # noqa: F401 - fixtures
    manager_fixture,
    rlab_fixture,
)
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab


def usage(w: dict[str, Any]) -> str:
    return w["status"]["admission"]["podSetAssignments"][0]["resourceUsage"]["cpu"]


def pending_message(w: dict[str, Any]) -> str | None:
    c = rs.cond(w, "QuotaReserved")
    return c["message"] if c and c["status"] == "False" else None


def test_a_runtime_class_change_re_reads_pending_workloads_and_spares_admitted_ones(
        rlab: LabHandle, manager: rs.ManagerThread) -> None:
    ns, cq, rc = rs.namespace(rlab, "rcover"), rs.unique("rcover-cq"), rs.unique("vm")
    rs.apply(rlab, {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                    "metadata": {"name": rc}, "handler": "vm",
                    "overhead": {"podFixed": {"cpu": "3"}}})
    rs.make_queue(rlab, cq, (ns,), cpu="5")
    try:
        objs = [rs.workload_manifest(n, ns, "lq", cpu="1") for n in ("a", "b")]
        for o in objs:
            o["spec"]["podSets"][0]["template"]["spec"]["runtimeClassName"] = rc
        rs.apply(rlab, *objs)
        # 1 CPU + 3 of overhead each: one fits in 5, the other waits for 4.
        first = wait_for(lambda: next((n for n in ("a", "b")
                                       if rs.is_admitted(rs.wl(rlab, ns, n))), None),
                         60, "one Workload admitted")
        other = "b" if first == "a" else "a"
        assert usage(rs.wl(rlab, ns, first)) == "4"
        msg = wait_for(lambda: pending_message(rs.wl(rlab, ns, other)), 30, f"{other} pending")
        assert "4 requested" in msg, msg
        # The RuntimeClass goes: the pending one is counted at 1 CPU and admitted; the
        # admitted one keeps the 4 of its admission (5 of 5 in use).
        rlab.kubectl("delete", "runtimeclass", rc)
        wait_for(lambda: rs.is_admitted(rs.wl(rlab, ns, other)), 60,
                 f"{other} admitted once its RuntimeClass is gone")
        assert usage(rs.wl(rlab, ns, other)) == "1"
        assert usage(rs.wl(rlab, ns, first)) == "4"
        for n in ("a", "b"):  # the stored Workloads are as created
            pod = rs.wl(rlab, ns, n)["spec"]["podSets"][0]["template"]["spec"]
            assert "overhead" not in pod
    finally:
        rlab.kubectl("delete", "namespace", ns, "--wait=false")
        rlab.kubectl("delete", "clusterqueue", cq, "--wait=false")
        rlab.kubectl("delete", "runtimeclass", rc, "--ignore-not-found", "--wait=false")


def test_a_limit_range_refuses_then_its_change_admits(
        rlab: LabHandle, manager: rs.ManagerThread) -> None:
    ns, cq = rs.namespace(rlab, "lrchange"), rs.unique("lrchange-cq")
    rs.make_queue(rlab, cq, (ns,), cpu="4")
    rs.apply(rlab, {"apiVersion": "v1", "kind": "LimitRange",
                    "metadata": {"name": "bounds", "namespace": ns},
                    "spec": {"limits": [{"type": "Container", "max": {"cpu": "1"},
                                         "default": {"cpu": "1"},
                                         "defaultRequest": {"cpu": "1"}}]}})
    try:
        big = rs.workload_manifest("big", ns, "lq", cpu="2")
        big["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"][
            "limits"] = {"cpu": "2"}
        rs.apply(rlab, big)
        msg = wait_for(lambda: pending_message(rs.wl(rlab, ns, "big")), 60, "big pending")
        assert msg.startswith(
            "resources didn't satisfy LimitRange constraints: spec.podSets[0].template.spec."
            'containers[0]: Invalid value: ["cpu"]: requests must not be above the '
            "limitRange max"), msg
        assert rs.cond(rs.wl(rlab, ns, "big"), "QuotaReserved")["reason"] == "Pending"
        # The range allows 2 CPUs now: big is re-read and admitted at once (Kueue v0.17.1
        # waits for its queue's next requeue: docs/architecture.md), and a container
        # without resources counts the new default request.
        rs.apply(rlab, {"apiVersion": "v1", "kind": "LimitRange",
                        "metadata": {"name": "bounds", "namespace": ns},
                        "spec": {"limits": [{"type": "Container", "max": {"cpu": "2"},
                                             "default": {"cpu": "2"},
                                             "defaultRequest": {"cpu": "2"}}]}})
        wait_for(lambda: rs.is_admitted(rs.wl(rlab, ns, "big")), 60, "big admitted")
        assert usage(rs.wl(rlab, ns, "big")) == "2"
        bare = rs.workload_manifest("bare", ns, "lq", cpu="1")
        del bare["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]
        rs.apply(rlab, bare)
        wait_for(lambda: rs.is_admitted(rs.wl(rlab, ns, "bare")), 60, "bare admitted")
        assert usage(rs.wl(rlab, ns, "bare")) == "2"
    finally:
        rlab.kubectl("delete", "namespace", ns, "--wait=false")
        rlab.kubectl("delete", "clusterqueue", cq, "--wait=false")

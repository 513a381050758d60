"""Kueue's adjustment of a Workload's pod sets before they are counted (Kueue v0.17.1
``workload.AdjustResources``; app/wire/podadjust.py), on the lab, with pykueue under its
ServiceAccount (its RBAC must let it watch LimitRanges and RuntimeClasses):

- a RuntimeClass's ``overhead.podFixed`` counts in quota (brk31 M4): two Jobs of one 1-CPU
  pod with a RuntimeClass of 3 CPUs overhead take 4 CPUs each, so a ClusterQueue of 4 CPUs
  admits one of them (before, both: 8 CPUs in use on 4);
- a namespace's LimitRange ``defaultRequest`` counts for a container without a request;
- a Workload outside its namespace's LimitRange stays pending with Kueue's message.

No operator runs."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.e2e.test_job_being_deleted_stopped import QUEUE, condition
from tests.e2e.test_workload_kinds import LONG
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab
WL = "workloads.kueue.x-k8s.io"
FLAVOR = "a100-flavor"  # a flavor the lab has (hack/scenario.py)


@contextmanager
def cpu_queue(lab: LabHandle, prefix: str, cpus: int,
              extra: list[dict[str, Any]] = ()) -> Iterator[str]:  # type: ignore[assignment]
    """A fresh namespace with LocalQueue ``lq`` to a new ClusterQueue of ``cpus`` CPUs, and
    ``extra`` objects (their namespace set to it when namespaced); all deleted after."""
    tag = uuid.uuid4().hex[:6]
    ns, cq = f"{prefix}-{tag}", f"{prefix}-cq-{tag}"
    lab.create_namespace(ns)
    items = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": cq},
         "spec": {"namespaceSelector": {}, "resourceGroups": [
             {"coveredResources": ["cpu"], "flavors": [
                 {"name": FLAVOR, "resources": [{"name": "cpu", "nominalQuota": cpus}]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": "lq", "namespace": ns}, "spec": {"clusterQueue": cq}}]
    for obj in extra:
        if obj["kind"] != "RuntimeClass":
            obj["metadata"]["namespace"] = ns
        items.append(obj)
    lab.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    try:
        yield ns
    finally:
        lab.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        lab.kubectl("delete", "clusterqueue", cq, "--wait=false", check=False)
        for obj in extra:
            if obj["kind"] == "RuntimeClass":
                lab.kubectl("delete", "runtimeclass", obj["metadata"]["name"], "--wait=false",
                            check=False)


def cpu_job(name: str, ns: str, resources: dict[str, Any], **pod: Any) -> str:
    """A queued Job of one pod that runs an hour, its container's ``resources`` as given."""
    return json.dumps({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": {QUEUE: "lq"}},
        "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0, "template": {
            "metadata": LONG, "spec": {"restartPolicy": "Never", **pod, "containers": [
                {"name": "c", "image": "busybox", "resources": resources}]}}}})


def job_workload(lab: LabHandle, ns: str, job: str) -> dict[str, Any] | None:
    return next((w for w in lab.get(WL, "-n", ns)["items"]
                 if any(r["kind"] == "Job" and r["name"] == job
                        for r in w["metadata"].get("ownerReferences") or [])), None)


def admitted(lab: LabHandle, ns: str, jobs: tuple[str, ...]) -> list[str]:
    return [j for j in jobs if (c := condition(job_workload(lab, ns, j), "Admitted"))
            and c["status"] == "True"]


def pending_message(lab: LabHandle, ns: str, job: str) -> str | None:
    c = condition(job_workload(lab, ns, job), "QuotaReserved")
    return c["message"] if c and c["status"] == "False" else None


def cpu_usage(wl: dict[str, Any]) -> str:
    return wl["status"]["admission"]["podSetAssignments"][0]["resourceUsage"]["cpu"]


def test_a_runtime_class_overhead_counts_in_quota(lab: LabHandle, pykueue_in_lab: Any) -> None:
    """brk31 M4: 1 CPU + 3 CPUs of RuntimeClass overhead per pod on a 4-CPU queue: one of
    the two Jobs is admitted, reserving 4 CPUs; the other waits for quota."""
    rc = f"vm-{uuid.uuid4().hex[:6]}"
    runtime_class = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                     "metadata": {"name": rc}, "handler": "vm",
                     "overhead": {"podFixed": {"cpu": "3"}}}
    with cpu_queue(lab, "overhead", 4, [runtime_class]) as ns:
        jobs = ("vm-a", "vm-b")
        for name in jobs:
            lab.apply(cpu_job(name, ns, {"requests": {"cpu": "1"}}, runtimeClassName=rc))
        wait_for(lambda: admitted(lab, ns, jobs), 60, "one of the Jobs admitted")
        first = admitted(lab, ns, jobs)[0]
        other = next(j for j in jobs if j != first)
        message = wait_for(lambda: pending_message(lab, ns, other), 30,
                           f"{other}'s Workload pending with a message")
        time.sleep(5)  # a second admission would come within a cycle or two
        got = admitted(lab, ns, jobs)
        print("admitted:", got, "usage:", cpu_usage(job_workload(lab, ns, first)),
              "other:", message)
        assert got == [first], f"{got} admitted: {4 * len(got)} CPUs on a quota of 4"
        assert cpu_usage(job_workload(lab, ns, first)) == "4"
        assert "cpu" in message and "4 requested" in message, message


def test_a_limit_range_default_request_counts_in_quota(
        lab: LabHandle, pykueue_in_lab: Any) -> None:
    """A LimitRange ``defaultRequest`` of 3 CPUs: a Job whose container asks no CPU reserves
    3 CPUs of a 4-CPU queue; a second such Job waits."""
    limits = {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "defaults"},
              "spec": {"limits": [{"type": "Container", "defaultRequest": {"cpu": "3"},
                                   "default": {"cpu": "3"}}]}}
    with cpu_queue(lab, "lrdefault", 4, [limits]) as ns:
        lab.apply(cpu_job("d-a", ns, {}))
        wait_for(lambda: admitted(lab, ns, ("d-a",)), 60, "d-a admitted")
        assert cpu_usage(job_workload(lab, ns, "d-a")) == "3"
        lab.apply(cpu_job("d-b", ns, {}))
        message = wait_for(lambda: pending_message(lab, ns, "d-b"), 30, "d-b pending")
        time.sleep(3)
        assert admitted(lab, ns, ("d-a", "d-b")) == ["d-a"]
        assert "3 requested" in message, message


def test_a_workload_outside_its_limit_range_stays_pending_with_kueues_message(
        lab: LabHandle, pykueue_in_lab: Any) -> None:
    limits = {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "bounds"},
              "spec": {"limits": [{"type": "Container", "max": {"cpu": "1"}}]}}
    with cpu_queue(lab, "lrmax", 4, [limits]) as ns:
        # With a limit of its own: the API server defaults the LimitRange's default limit
        # to its max (1 CPU), which a container without a limit would get, and its request
        # of 2 above that limit is "resources validation failed" (tests/unit/test_podadjust).
        lab.apply(cpu_job("big", ns, {"requests": {"cpu": "2"}, "limits": {"cpu": "2"}}))
        message = wait_for(lambda: pending_message(lab, ns, "big"), 60, "big pending")
        print("big:", message)
        assert message.startswith(
            "resources didn't satisfy LimitRange constraints: spec.podSets[0].template.spec."
            'containers[0]: Invalid value: ["cpu"]: requests must not be above the '
            "limitRange max")
        assert not admitted(lab, ns, ("big",))

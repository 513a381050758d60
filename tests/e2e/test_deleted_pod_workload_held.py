"""A plain Pod's Workload deleted while the Pod runs keeps its quota until the Pod is gone
(breakdel23; ``jobs.deleted_quota_release: WhenPodsGone``, docs/security.md), on the lab.

Someone allowed to delete Workloads (a platform engineer; a tenant whose role allows it)
deletes a running Pod's Workload: pykueue stops the Pod (deletes it: no Workload), which runs
out the termination grace period its tenant set. The pod's Workload names it only by its
``ownerReferences`` (a Pod carries no job's labels), so before, the core released the quota at
the Workload's deletion and a second Pod was admitted beside the one still being killed. Here
the Pod is kept Terminating, Running, by a finalizer of the test's own, which kwok honours, and
the annotation ``lab.pykueue.dev/stops-slowly`` (a long grace period; killed, Failed, it would
hold no quota: Kueue KEP-10076 ``OnTerminal``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.test_deleted_job_quota_held import (
    SLOWLY,
    cq_gpu_usage,
    pending_on_gpus,
    release,
)
from tests.e2e.test_job_being_deleted_stopped import HOLD, QUEUE, WL, condition
from tests.e2e.test_workload_kinds import LONG, TOLERATION, gpu_container, gpu_queue
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab
QUOTA = 2  # GPUs of the ClusterQueue, all asked by each Pod


def gpu_pod(name: str, ns: str, *, hold: bool = False) -> str:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "labels": {QUEUE: "lq"}, **LONG}
    if hold:  # kept Running while it is being deleted, until the test takes HOLD off
        meta["finalizers"] = [HOLD]
        meta["annotations"] = {**meta.get("annotations", {}), SLOWLY: "true"}
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                       "spec": {"containers": [gpu_container(QUOTA)],
                                "tolerations": [TOLERATION],
                                "terminationGracePeriodSeconds": 0}})


def pod_workload(lab: LabHandle, ns: str, pod: str) -> dict[str, Any] | None:
    return next((w for w in lab.get(WL, "-n", ns)["items"]
                 if any(r["kind"] == "Pod" and r["name"] == pod
                        for r in w["metadata"].get("ownerReferences") or [])), None)


def the_pod(lab: LabHandle, ns: str, name: str) -> dict[str, Any] | None:
    return next((p for p in lab.get("pods", "-n", ns)["items"]
                 if p["metadata"]["name"] == name), None)


def test_a_running_pods_deleted_workload_holds_its_quota_until_the_pod_is_gone(
        lab: LabHandle, pykueue_in_lab: object) -> None:
    """A 2-GPU ClusterQueue: Pod ``a`` (2 GPUs) runs; its Workload is deleted by hand.
    pykueue deletes ``a`` (no Workload), which stays Terminating under the test's finalizer.
    Pod ``b`` (2 GPUs) waits: its Workload pending (QuotaReserved False, naming
    nvidia.com/gpu) on every look while ``a`` exists, the ClusterQueue still showing a's 2
    GPUs. Once ``a`` is gone, ``b`` is admitted and runs. Before: ``b`` was admitted at once
    and ran beside ``a``."""
    ns, cq = gpu_queue(lab, "podhold", QUOTA)
    try:
        lab.apply(gpu_pod("a", ns, hold=True))
        wait_for(lambda: (the_pod(lab, ns, "a") or {}).get("status", {}).get("phase")
                 == "Running" and pod_workload(lab, ns, "a") is not None, 90, "a Running")
        wl = pod_workload(lab, ns, "a")
        assert wl is not None
        lab.kubectl("delete", WL, wl["metadata"]["name"], "-n", ns, "--wait=false")
        wait_for(lambda: (the_pod(lab, ns, "a") or {}).get("metadata", {}).get(
            "deletionTimestamp") is not None, 60, "a deleted by pykueue (its Workload gone)")

        lab.apply(gpu_pod("b", ns))
        looks: list[str] = []

        def b_waits() -> bool:
            assert the_pod(lab, ns, "a") is not None, "a went by itself"
            pending_on_gpus(pod_workload(lab, ns, "b"), looks, "a is still being killed")
            return len(looks) >= 5
        wait_for(b_waits, 60, "b's Workload pending on 5 looks while a exists")
        assert cq_gpu_usage(lab, cq) == (QUOTA, 1), lab.get("clusterqueue", cq).get("status")

        release(lab, [p for p in [the_pod(lab, ns, "a")] if p])
        wait_for(lambda: the_pod(lab, ns, "a") is None, 60, "a gone")

        def b_runs() -> bool:
            qr = condition(pod_workload(lab, ns, "b"), "QuotaReserved")
            b = the_pod(lab, ns, "b") or {}
            return bool(qr and qr["status"] == "True"
                        and b.get("status", {}).get("phase") == "Running")
        wait_for(b_runs, 60, "b admitted and Running once a is gone")
    finally:
        release(lab, [p for p in lab.get("pods", "-n", ns)["items"]
                      if HOLD in (p["metadata"].get("finalizers") or [])], keep_others=False)
        lab.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=90s", check=False)
        lab.kubectl("delete", "clusterqueue", cq, "--wait=false", check=False)

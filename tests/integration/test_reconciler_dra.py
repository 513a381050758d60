"""DRA on the real control plane (issue 21): GPUs requested through ResourceClaimTemplates
count in quota as ``example.com/gpu`` (``resources.deviceClassMappings``: DeviceClass
``gpu.example.com``), the real kube-scheduler allocates the claims from the ResourceSlices the
lab publishes (``hack/lab.py dra``: 8 devices on a100-0, 8 on l4-0) and kwok runs the pods.
What Kueue cannot count (a direct ResourceClaim) leaves the Workload Inadmissible, reason
given, and its Job suspended."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from app.config import ResourcesSettings
from tests.integration.reconciler_support import (
    ManagerThread,
    apply,
    cond,
    is_admitted,
    job_manifest,
    job_obj,
    job_pods,
    namespace,
    rlab_fixture,  # noqa: F401 - fixture
    settings_for,
    unique,
    workload_of,
)
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab

GPU = "example.com/gpu"
CLASS = "gpu.example.com"
A100 = "NVIDIA-A100-SXM4-80GB"
FLAVOR = "dra-a100-flavor"


@pytest.fixture(name="dra_manager")
def dra_manager_fixture(rlab: LabHandle) -> Iterator[ManagerThread]:
    """The lab's DeviceClass and ResourceSlices (idempotent), and a reconciler that maps
    DeviceClass gpu.example.com to example.com/gpu."""
    rlab.lab_cmd("dra")
    settings = settings_for(rlab).model_copy(update={"resources": ResourcesSettings(
        deviceClassMappings=[{"name": GPU, "deviceClassNames": [CLASS]}])})
    mt = ManagerThread(settings).start()
    try:
        yield mt
    finally:
        mt.stop()


@pytest.fixture(name="dra_queue")
def dra_queue_fixture(rlab: LabHandle) -> Iterator[tuple[str, str]]:
    """(namespace, ClusterQueue) of a fresh 4-GPU queue (``queue``), deleted afterwards."""
    ns, cq = namespace(rlab, "dra"), unique("dra-cq")
    queue(rlab, cq, ns, gpus=4)
    try:
        yield ns, cq
    finally:
        rlab.kubectl("delete", "namespace", ns, "--wait=false")
        rlab.kubectl("delete", "clusterqueue", cq, "--wait=false")


def queue(lab: LabHandle, cq: str, ns: str, gpus: int) -> None:
    """Flavor ``dra-a100-flavor`` (the A100 node's label and toleration) and ClusterQueue
    ``cq`` with ``gpus`` of example.com/gpu and 8 CPUs on it; LocalQueue ``lq`` in ``ns``."""
    apply(lab,
          {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
           "metadata": {"name": FLAVOR},
           "spec": {"nodeLabels": {"nvidia.com/gpu.product": A100},
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                     "effect": "NoSchedule"}]}},
          {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
           "metadata": {"name": cq},
           "spec": {"namespaceSelector": {}, "resourceGroups": [{
               "coveredResources": ["cpu", GPU],
               "flavors": [{"name": FLAVOR, "resources": [
                   {"name": "cpu", "nominalQuota": "8"},
                   {"name": GPU, "nominalQuota": str(gpus)}]}]}]}},
          {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
           "metadata": {"name": "lq", "namespace": ns}, "spec": {"clusterQueue": cq}})


def claim_template(ns: str, name: str, count: int) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "gpus", "exactly": {"deviceClassName": CLASS, "count": count}}]}}}}


def dra_job(name: str, ns: str, pods: int, claim: dict[str, str], duration: str) -> dict:
    """A suspended Job of ``pods`` pods (100m CPU each) whose pods claim ``claim``."""
    job = job_manifest(name, ns, "lq", parallelism=pods, cpu="100m", duration=duration)
    spec = job["spec"]["template"]["spec"]
    spec["resourceClaims"] = [{"name": "gpu", **claim}]
    spec["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    return job


def gpu_used(lab: LabHandle, cq: str) -> int | None:
    """example.com/gpu used in ClusterQueue ``cq``'s status (None before it is written)."""
    for f in (lab.get("clusterqueue", cq).get("status") or {}).get("flavorsUsage") or []:
        for r in f.get("resources") or []:
            if f["name"] == FLAVOR and r["name"] == GPU:
                return int(r.get("total", "0"))
    return None


def test_dra_gpus_count_in_quota_and_are_allocated_by_the_scheduler(
        rlab: LabHandle, dra_manager: ManagerThread,
        dra_queue: tuple[str, str]) -> None:
    ns, cq = dra_queue
    apply(rlab, claim_template(ns, "two-gpus", 2))
    # 3 pods x 2 GPUs = 6 > 4: waits whole, no pod.
    apply(rlab, dra_job("three", ns, 3, {"resourceClaimTemplateName": "two-gpus"}, "600s"))
    pending = wait_for(lambda: (c := cond(workload_of(rlab, ns, "three") or {},
                                          "QuotaReserved")) and c["status"] == "False"
                       and GPU in c["message"] and c, 60, "three pending on example.com/gpu")
    assert pending["reason"] != "Inadmissible", pending
    wl3 = workload_of(rlab, ns, "three")
    assert not is_admitted(wl3) and job_obj(rlab, ns, "three")["spec"]["suspend"] is True
    assert not job_pods(rlab, ns, "three")

    # 2 pods x 2 GPUs = 4: admitted, charged 4, runs on a100-0 with allocated claims.
    apply(rlab, dra_job("two", ns, 2, {"resourceClaimTemplateName": "two-gpus"}, "20s"))
    wl2 = wait_for(lambda: (w := workload_of(rlab, ns, "two")) and is_admitted(w) and w,
                   60, "two admitted")
    psa = wl2["status"]["admission"]["podSetAssignments"][0]
    assert psa["flavors"][GPU] == FLAVOR and psa["resourceUsage"][GPU] == "4"
    pods = wait_for(lambda: (ps := job_pods(rlab, ns, "two")) and len(ps) == 2
                    and all(p["status"].get("phase") == "Running" for p in ps) and ps,
                    90, "2 DRA pods running")
    assert {p["spec"]["nodeName"] for p in pods} == {"a100-0"}
    devices = set()
    for p in pods:
        (st,) = p["status"]["resourceClaimStatuses"]
        claim = rlab.get("resourceclaims.resource.k8s.io", st["resourceClaimName"], "-n", ns)
        results = claim["status"]["allocation"]["devices"]["results"]
        assert len(results) == 2 and {r["pool"] for r in results} == {"a100-0"}
        devices |= {r["device"] for r in results}
    assert len(devices) == 4  # four distinct A100 devices
    wait_for(lambda: gpu_used(rlab, cq) == 4, 30, "ClusterQueue status: 4 example.com/gpu")
    assert not is_admitted(workload_of(rlab, ns, "three"))

    # The pods finish: the Workload is Finished and the 4 GPUs are free again; the
    # 6-GPU Job still cannot fit a 4-GPU queue and stays suspended.
    wait_for(lambda: (c := cond(workload_of(rlab, ns, "two") or {}, "Finished"))
             and c["status"] == "True", 120, "two Finished")
    wait_for(lambda: gpu_used(rlab, cq) == 0, 30, "ClusterQueue status: 0 example.com/gpu")
    assert not is_admitted(workload_of(rlab, ns, "three"))
    assert job_obj(rlab, ns, "three")["spec"]["suspend"] is True


def test_claims_kueue_cannot_count_leave_the_workload_inadmissible(
        rlab: LabHandle, dra_manager: ManagerThread,
        dra_queue: tuple[str, str]) -> None:
    ns, cq = dra_queue
    apply(rlab, dra_job("direct", ns, 1, {"resourceClaimName": "shared-gpus"}, "600s"),
          dra_job("later", ns, 1, {"resourceClaimTemplateName": "one-gpu"}, "20s"))
    qr = wait_for(lambda: (c := cond(workload_of(rlab, ns, "direct") or {},
                                     "QuotaReserved")) and c["reason"] == "Inadmissible"
                  and c, 60, "direct: QuotaReserved=False Inadmissible")
    assert qr["status"] == "False"
    assert "resourceClaims[0].resourceClaimName" in qr["message"]
    assert "does not support use of resource claims" in qr["message"]
    rq = cond(workload_of(rlab, ns, "direct") or {}, "Requeued")
    assert rq and (rq["status"], rq["reason"]) == ("False", "Inadmissible")
    assert job_obj(rlab, ns, "direct")["spec"]["suspend"] is True
    assert not job_pods(rlab, ns, "direct")
    # A template that does not exist yet: Inadmissible, naming it; once it is created the
    # Workload is counted (1 GPU) and admitted, Requeued=True DRAResourcesResolved.
    qr = wait_for(lambda: (c := cond(workload_of(rlab, ns, "later") or {},
                                     "QuotaReserved")) and c["reason"] == "Inadmissible"
                  and c, 60, "later: Inadmissible")
    assert f"ResourceClaimTemplate {ns}/one-gpu not found" in qr["message"]
    apply(rlab, claim_template(ns, "one-gpu", 1))
    wl = wait_for(lambda: (w := workload_of(rlab, ns, "later")) and is_admitted(w) and w,
                  60, "later admitted once its template exists")
    assert wl["status"]["admission"]["podSetAssignments"][0]["resourceUsage"][GPU] == "1"
    rq = cond(wl, "Requeued")
    assert rq and (rq["status"], rq["reason"]) == ("True", "DRAResourcesResolved")
    assert not is_admitted(workload_of(rlab, ns, "direct"))

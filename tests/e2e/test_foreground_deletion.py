"""Foreground deletion (``kubectl delete --cascade=foreground``: DeleteOptions
``propagationPolicy: Foreground``, Argo CD's default) of an admitted, running job with
``jobs.workload_finalizer`` on, on the lab with the real operators (JobSet v0.11.1, KubeRay
v1.6.0). The job object waits for its dependents, its Workload among them (ownerReference
``blockOwnerDeletion: true``), and the Workload waits for pykueue to take
``kueue.x-k8s.io/resource-in-use`` off once the job's pods are gone: the job, its Workload
and the ClusterQueue's usage must all go, within a bounded wait (review26: an object whose
status its operator never writes again kept all three forever)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from tests.e2e.conftest import operators_running
from tests.e2e.test_breaker12_findings import JOBSET_GC_PROBE
from tests.e2e.test_jobset import _long_jobset, admitted, drop, owned_workload
from tests.e2e.test_ray import cpu_and_gpu_groups, placed, ray_gc_probes, rayjob
from tests.e2e.test_workload_finalizer import IN_USE, labmod, pykueue_finalizing
from tests.e2e.test_workload_kinds import gpu_queue, live
from tests.labfixture import WORKLOAD_GC_PROBE, LabHandle, wait_for, wait_gc_watches

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def finalizing(lab: LabHandle) -> Iterator[labmod.Lab]:
    """JobSet and KubeRay running, then pykueue with ``jobs.workload_finalizer`` on (a CRD
    installed after pykueue starts is picked up only at its next discovery poll)."""
    with operators_running(lab, "jobset", "kuberay"), pykueue_finalizing(lab) as handle:
        yield handle


def cq_usage(lab: LabHandle, cq: str) -> tuple[list[tuple[str, str, str, str]], int, int]:
    """The ClusterQueue's status: (each (field, flavor, resource, total) not 0 in
    ``flavorsReservation`` and ``flavorsUsage``; reserving Workloads; admitted Workloads)."""
    st = lab.get("clusterqueue", cq).get("status") or {}
    used = [(at, f["name"], r["name"], str(r.get("total", "0")))
            for at in ("flavorsReservation", "flavorsUsage")
            for f in st.get(at) or [] for r in f.get("resources") or []
            if str(r.get("total", "0")) != "0"]
    return used, int(st.get("reservingWorkloads") or 0), int(st.get("admittedWorkloads") or 0)


def delete_foreground(lab: LabHandle, resource: str, name: str, ns: str) -> None:
    """Delete with ``propagationPolicy: Foreground``; the object must then wait for its
    dependents (the API server's ``foregroundDeletion`` finalizer)."""
    lab.kubectl("delete", resource, name, "-n", ns, "--cascade=foreground", "--wait=false")
    obj = json.loads(lab.kubectl("get", resource, name, "-n", ns, "-o", "json").stdout)
    assert "foregroundDeletion" in (obj["metadata"].get("finalizers") or []), obj["metadata"]


def all_gone(lab: LabHandle, resource: str, name: str, ns: str, cq: str) -> None:
    """The object, every Workload of ``ns`` and ``cq``'s usage gone within 120 s."""
    wait_for(lambda: lab.kubectl("get", resource, name, "-n", ns, check=False).returncode != 0,
             120, f"{resource} {name} gone")
    wait_for(lambda: not lab.get("workloads.kueue.x-k8s.io", "-n", ns)["items"], 60,
             f"the Workloads of {ns} gone")
    wait_for(lambda: cq_usage(lab, cq) == ([], 0, 0), 60, f"{cq}'s usage back to 0")


def test_a_running_jobset_deleted_in_the_foreground_goes_with_its_workload_and_quota(
        lab: LabHandle, finalizing: labmod.Lab) -> None:
    ns, cq = gpu_queue(lab, "fgjs", 2)
    try:
        wait_gc_watches(lab.kubectl, ns, WORKLOAD_GC_PROBE, JOBSET_GC_PROBE)
        lab.apply(_long_jobset("train", ns, 2))
        wl = wait_for(lambda: admitted(lab, ns, "JobSet", "train"), 90, "train admitted")
        assert IN_USE in (wl["metadata"].get("finalizers") or []), wl["metadata"]
        wait_for(lambda: len([p for p in live(lab.get("pods", "-n", ns)["items"])
                              if p["status"].get("phase") == "Running"]) == 2,
                 90, "train's 2 pods Running")
        wait_for(lambda: ("flavorsUsage", "a100-flavor", "nvidia.com/gpu", "2")
                 in cq_usage(lab, cq)[0], 30, f"{cq} showing train's 2 GPUs")
        delete_foreground(lab, "jobset", "train", ns)
        all_gone(lab, "jobset", "train", ns, cq)
    finally:
        drop(lab, ns, cq)


def test_a_running_rayjob_deleted_in_the_foreground_goes_with_its_workload_and_quota(
        lab: LabHandle, finalizing: labmod.Lab) -> None:
    ns, cq = f"fgray-{uuid.uuid4().hex[:6]}", f"fgray-cq-{uuid.uuid4().hex[:6]}"
    lab.create_namespace(ns)
    lab.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": cq},
         "spec": {"namespaceSelector": {}, "resourceGroups": cpu_and_gpu_groups(2)}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": "lq", "namespace": ns}, "spec": {"clusterQueue": cq}}]}))
    try:
        wait_gc_watches(lab.kubectl, ns, *ray_gc_probes())
        lab.apply(rayjob("tune", ns, 2))
        wl = wait_for(lambda: admitted(lab, ns, "RayJob", "tune"), 90, "tune admitted")
        assert IN_USE in (wl["metadata"].get("finalizers") or []), wl["metadata"]
        wait_for(lambda: placed(lab, ns, 2), 120, "tune's head and 2 workers Running")
        assert owned_workload(lab, ns, "RayJob", "tune") is not None
        delete_foreground(lab, "rayjob", "tune", ns)
        all_gone(lab, "rayjob", "tune", ns, cq)
    finally:
        drop(lab, ns, cq)

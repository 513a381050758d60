"""kray28 (brk27 H1 on the RayCluster): a tenant's bare pod controlled by its own preempted
RayCluster, made once KubeRay v1.6.0 reports the cluster ``RayClusterSuspended``, does not
hold the evicted Workload's quota for good: pykueue deletes it (brk28: it counts until it is
gone, as KubeRay deletes no pod of a cluster it reports suspended), while the cluster's own
pods still count while they are killed. Setup as ``test_ray.py`` (real KubeRay v1.6.0).

KubeRay deletes every pod labelled ``ray.io/cluster: <name>`` while the cluster is
``RayClusterSuspending`` and reports it ``RayClusterSuspended`` once none is left; from then
on it deletes no pod of it until it is resumed. A decoy made in between KubeRay's report and
pykueue's release (a race a tenant can win by making one every few milliseconds) is set up
here without the race: pykueue is stopped while the cluster's last pods go, and started
again once the decoy is there."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from tests.e2e.test_deleted_job_quota_held import SLOWLY
from tests.e2e.test_jobset import condition, owned_workload, tenant
from tests.e2e.test_ray import (
    kuberay,  # noqa: F401 - fixture
    placed,
    pykueue_with_kuberay,  # noqa: F401 - fixture
    ray_queue,
    rayjob,
)
from tests.labfixture import ROOT, LabHandle, wait_for

sys.path.insert(0, str(ROOT / "hack"))
import lab as labmod  # noqa: E402

pytestmark = pytest.mark.lab

HOLD = "lab.pykueue.dev/hold"  # the test's finalizer: the cluster's pods stay while it waits


def _suspended_by_kuberay(lab: LabHandle, ns: str) -> bool:
    rc = lab.get("raycluster", "c", "-n", ns)
    return any(c["type"] == "RayClusterSuspended" and c["status"] == "True"
               for c in (rc.get("status") or {}).get("conditions") or [])


def _decoy(ns: str, uid: str, name: str) -> str:
    """A pod labelled as worker of group ``gpu`` of cluster ``c`` and controlled by it
    (``uid``), which no node takes."""
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": ns,
        "labels": {"ray.io/cluster": "c", "ray.io/node-type": "worker", "ray.io/group": "gpu"},
        "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "c",
                             "uid": uid, "controller": True}]},
        "spec": {"nodeSelector": {"no-such": "node"},
                 "containers": [{"name": "w", "image": "rayproject/ray:2.46.0"}]}})


def _admission(lab: LabHandle, ns: str) -> Any:
    return ((owned_workload(lab, ns, "RayCluster", "c") or {}).get("status") or {}).get(
        "admission")


def test_a_pod_made_for_a_raycluster_kuberay_reports_suspended_holds_no_quota(
        lab: LabHandle, pykueue_with_kuberay: set[str],  # noqa: F811
        pykueue_in_lab: labmod.Lab) -> None:
    """Before kray28: pykueue counted any Pending pod the cluster controls, KubeRay never
    deletes the decoy, so the evicted Workload kept its quota for good (Event
    ``WaitingForPods``). Now: the cluster's own pods, killed slowly, keep the quota until
    they are gone; the decoy, which KubeRay leaves alone, is deleted by pykueue (Event
    ``DeletedPods``) and the Workload released once it is gone."""
    with ray_queue(lab, "kray-decoy", 1) as ns:
        as_tenant = tenant(lab, ns)
        job = json.loads(rayjob("c", ns, 1))
        spec = job["spec"]["rayClusterSpec"]
        for tpl in (spec["headGroupSpec"]["template"],
                    spec["workerGroupSpecs"][0]["template"]):
            tpl["metadata"] = {"annotations": {SLOWLY: "true"}}
        lab.apply(json.dumps({"apiVersion": "ray.io/v1", "kind": "RayCluster",
                              "metadata": job["metadata"], "spec": spec}), *as_tenant)
        wl = wait_for(lambda: (w := owned_workload(lab, ns, "RayCluster", "c"))
                      and (c := condition(w, "Admitted")) and c["status"] == "True" and w,
                      60, "c's Workload admitted")
        by = wait_for(lambda: placed(lab, ns, 1), 90, "c's head and worker running")
        pods = [p["metadata"]["name"] for p in by["head"] + by["worker"]]
        for name in pods:
            lab.kubectl("patch", "pod", name, "-n", ns, "--type=merge",
                        "-p", json.dumps({"metadata": {"finalizers": [HOLD]}}))
        lab.kubectl("patch", "workloads.kueue.x-k8s.io", wl["metadata"]["name"], "-n", ns,
                    "--type=merge", "-p", '{"spec": {"active": false}}')
        # KubeRay deletes the pods; they run on (a long grace period): they still count.
        wait_for(lambda: all(p["metadata"].get("deletionTimestamp")
                             and p["status"].get("phase") == "Running"
                             for p in lab.get("pods", "-n", ns)["items"])
                 and len(lab.get("pods", "-n", ns)["items"]) == 2, 60,
                 "c suspended and its pods being killed, Running")
        wait_for(lambda: any(e["involvedObject"].get("name") == "c" for e in lab.get(
            "events", "-n", ns, "--field-selector", "reason=WaitingForPods")["items"]),
            60, "pykueue waiting for c's pods")
        assert _admission(lab, ns), "the quota went while c's pods still run"
        labmod.pykueue_down(pykueue_in_lab)
        try:
            for name in pods:
                lab.kubectl("patch", "pod", name, "-n", ns, "--type=json", "-p",
                            '[{"op": "remove", "path": "/metadata/finalizers"}]')
            wait_for(lambda: _suspended_by_kuberay(lab, ns)
                     and not lab.get("pods", "-n", ns)["items"], 60,
                     "KubeRay reports c RayClusterSuspended, its pods gone")
            uid = lab.get("raycluster", "c", "-n", ns)["metadata"]["uid"]
            lab.kubectl("create", "-f", "-", *as_tenant, input=_decoy(ns, uid, "c-gpu-decoy"))
            assert _admission(lab, ns)  # nothing released it meanwhile
        finally:
            labmod.pykueue_up(pykueue_in_lab)
        wait_for(lambda: not _admission(lab, ns), 60, "c's evicted Workload released")
        # KubeRay left the decoy alone all along (it deletes no pod of a cluster it reports
        # suspended): pykueue deleted it, and pykueue's webhook takes such a pod from the
        # tenant too.
        assert not [p["metadata"]["name"] for p in lab.get("pods", "-n", ns)["items"]
                    if not p["metadata"].get("deletionTimestamp")]
        assert any(e["involvedObject"].get("name") == "c" for e in lab.get(
            "events", "-n", ns, "--field-selector", "reason=DeletedPods")["items"])
        assert _suspended_by_kuberay(lab, ns)
        lab.kubectl("create", "-f", "-", "--dry-run=server", *as_tenant,
                    input=_decoy(ns, uid, "c-gpu-decoy-2"))

"""Issue 17 e2e: a Deployment and a plain Pod queued through pykueue's real webhooks and
reconciler on the lab, landing on their flavor's GPU node; what does not fit waits gated."""

from __future__ import annotations

import json
import sys
import uuid

import pytest

from tests.labfixture import ROOT, LabHandle, wait_for

sys.path.insert(0, str(ROOT / "hack"))
import lab as labmod  # noqa: E402

pytestmark = pytest.mark.lab
GATE = "kueue.x-k8s.io/admission"
QUEUE = "kueue.x-k8s.io/queue-name"



def gpu_container(gpus: int = 1) -> dict:
    return {"name": "c", "image": "busybox",
            "resources": {"requests": {"nvidia.com/gpu": str(gpus)},
                          "limits": {"nvidia.com/gpu": str(gpus)}}}


def pods(lab: LabHandle, ns: str, selector: str) -> list[dict]:
    return lab.get("pods", "-n", ns, "-l", selector)["items"]


def live(items: list[dict]) -> list[dict]:
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def gated(p: dict) -> bool:
    return GATE in [g["name"] for g in p["spec"].get("schedulingGates") or []]


def test_a_deployment_and_a_plain_pod_are_queued_on_gpus(
        lab: LabHandle, pykueue_in_lab: labmod.Lab) -> None:
    ns, cq = f"kinds-{uuid.uuid4().hex[:6]}", f"kinds-cq-{uuid.uuid4().hex[:6]}"
    lab.create_namespace(ns)
    lab.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": cq},
         "spec": {"namespaceSelector": {}, "resourceGroups": [
             {"coveredResources": ["nvidia.com/gpu"], "flavors": [
                 {"name": "a100-flavor", "resources": [
                     {"name": "nvidia.com/gpu", "nominalQuota": 2}]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": "lq", "namespace": ns}, "spec": {"clusterQueue": cq}}]}))
    try:
        lab.apply(json.dumps({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "serve", "namespace": ns, "labels": {QUEUE: "lq"}},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "serve"}},
                     "template": {"metadata": {"labels": {"app": "serve"}},
                                  "spec": {"containers": [gpu_container()]}}}}))
        # 2 of 3 fit the 2-GPU queue: they run on the A100 node, the third waits gated.
        wait_for(lambda: len([p for p in live(pods(lab, ns, "app=serve"))
                              if p["spec"].get("nodeName") == "a100-0"
                              and p["status"].get("phase") == "Running"]) == 2, 90,
                 "2 serve pods Running on a100-0")
        (waiting,) = [p for p in live(pods(lab, ns, "app=serve")) if gated(p)]
        wls = lab.get("workloads.kueue.x-k8s.io", "-n", ns)["items"]
        mine = next(w for w in wls if w["metadata"]["ownerReferences"][0]["name"]
                    == waiting["metadata"]["name"])
        qr = next(c for c in mine["status"]["conditions"] if c["type"] == "QuotaReserved")
        assert qr["status"] == "False" and "nvidia.com/gpu" in qr["message"], qr
        # Scale to 1: the waiting pod goes first, then one running; quota frees.
        lab.kubectl("scale", "deployment", "serve", "-n", ns, "--replicas=1")
        wait_for(lambda: len(live(pods(lab, ns, "app=serve"))) == 1
                 and len(lab.get("workloads.kueue.x-k8s.io", "-n", ns)["items"]) == 1, 90,
                 "one serve pod and one Workload left")
        # The freed GPU takes a plain Pod, gated by the webhook and then admitted.
        lab.apply(json.dumps({"apiVersion": "v1", "kind": "Pod",
                              "metadata": {"name": "solo", "namespace": ns,
                                           "labels": {QUEUE: "lq", "app": "solo"}},
                              "spec": {"containers": [gpu_container()]}}))
        wait_for(lambda: (p := lab.get("pod", "solo", "-n", ns))["spec"].get("nodeName")
                 == "a100-0" and not gated(p), 90, "solo admitted onto a100-0")
        solo = lab.get("pod", "solo", "-n", ns)
        assert solo["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    finally:
        lab.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        lab.kubectl("delete", "clusterqueue", cq, "--wait=false", check=False)

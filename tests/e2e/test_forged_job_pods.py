"""A pod a tenant makes under an admitted batch Job's name (a controller ownerReference to the
Job, the Job's own pod spec with the flavor's nodeSelector and toleration copied) gets no node
from the scheduler extender when it asks more GPUs than a pod of the
Job's podSet was admitted with (docs/security.md, "What a namespace admin can still do").
One without those labels is released by the Job controller (its ``ClaimPods`` removes the
ownerReference) and is then a bare Pod (unqueued by default, as in Kueue); until then the
extender gives it no node (unit: ``test_extender_admitted_only.py``)."""

from __future__ import annotations

import copy
import json

import pytest

from tests.e2e.test_job_being_deleted_stopped import JOB_NAME, QUEUE
from tests.e2e.test_workload_kinds import LONG, gpu_container, gpu_queue, long_job
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab


def unschedulable(lab: LabHandle, ns: str, name: str) -> str:
    """The PodScheduled=False message of pod ``name`` ("" while there is none); "gone" once
    it is deleted. Fails when the pod got a node."""
    got = lab.kubectl("get", "pod", name, "-n", ns, "-o", "json", check=False)
    if got.returncode != 0:
        return "gone"
    pod = json.loads(got.stdout)
    assert not pod["spec"].get("nodeName"), f"{name} was placed on {pod['spec']['nodeName']}"
    return next((c.get("message", "") for c in pod.get("status", {}).get("conditions") or []
                 if c["type"] == "PodScheduled" and c["status"] == "False"), "")


def test_pods_made_under_an_admitted_jobs_name_get_no_node(
        lab: LabHandle, pykueue_in_lab: object) -> None:
    ns, cq = gpu_queue(lab, "forged", 4)
    try:
        lab.apply(long_job("j", ns, {QUEUE: "lq"}))
        real = wait_for(lambda: next((p for p in lab.get(
            "pods", "-n", ns, "-l", f"{JOB_NAME}=j")["items"]
            if p["status"].get("phase") == "Running"), None), 90, "j's pod Running")
        job = lab.get("job", "j", "-n", ns)
        ref = {"apiVersion": "batch/v1", "kind": "Job", "name": "j",
               "uid": job["metadata"]["uid"], "controller": True}
        spec = copy.deepcopy(real["spec"])
        for key in ("nodeName", "hostname", "subdomain"):
            spec.pop(key, None)

        def forged(name: str, labels: dict[str, str], gpus: int) -> str:
            body = copy.deepcopy(spec)
            body["containers"][0]["resources"] = gpu_container(gpus)["resources"]
            return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": name, "namespace": ns, "labels": labels,
                "annotations": LONG["annotations"], "ownerReferences": [ref]}, "spec": body})

        # The labels the Job's selector takes (so the Job controller counts it, and deletes
        # one of the two pods for a parallelism of 1) and 4 GPUs where j's pod was admitted
        # with 1: no node, whether or not the Job controller deletes it first.
        lab.kubectl("create", "-f", "-", input=forged("big", real["metadata"]["labels"], 4))
        why = wait_for(lambda: unschedulable(lab, ns, "big"), 60, "big unschedulable or gone")
        assert why == "gone" or "requests 4 GPU(s), more than the 1" in why, why
        running = [p["metadata"]["name"] for p in lab.get("pods", "-n", ns)["items"]
                   if p["status"].get("phase") == "Running"]
        assert running == [real["metadata"]["name"]]
    finally:
        lab.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=90s", check=False)
        lab.kubectl("delete", "clusterqueue", cq, "--wait=false", check=False)

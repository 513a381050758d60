"""A tenant cannot take a running pod of an admitted Job from its Job by rewriting the pod's
controller ownerReference (breakdel23): the Job controller ignores a pod another controller
owns (``ClaimPods``), so it would make a replacement beside the pod still running, more GPU
pods than were admitted, with no label changed (the owner-label webhook's ground)."""

from __future__ import annotations

import json

import pytest

from tests.e2e.test_workload_kinds import QUEUE, gpu_queue, long_job, pods
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab


def decoy_ref(decoy: dict) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "name": "decoy",
            "uid": decoy["metadata"]["uid"], "controller": True}


def running(lab: LabHandle, ns: str) -> list[dict]:
    return [p for p in pods(lab, ns, "batch.kubernetes.io/job-name=j")
            if p["status"].get("phase") == "Running" and not p["metadata"].get(
                "deletionTimestamp")]


def test_a_running_pods_controller_reference_cannot_be_taken_from_its_job(
        lab: LabHandle, pykueue_in_lab: object) -> None:
    """Before: the tenant's patch of the pod's controller reference to its ConfigMap was
    allowed and a second pod of the Job ran within a second (2 GPU pods Running on an
    admission of 1, 20 s sampled). Now refused by the Pod owner webhook."""
    from tests.e2e.test_jobset import tenant

    ns, cq = gpu_queue(lab, "ownref", 2)
    try:
        as_tenant = tenant(lab, ns)
        lab.kubectl(*as_tenant, "apply", "-f", "-", input=long_job("j", ns, {QUEUE: "lq"}))
        wait_for(lambda: len(running(lab, ns)) == 1, 90, "the Job's pod Running")
        (pod,) = running(lab, ns)
        lab.kubectl(*as_tenant, "create", "configmap", "decoy", "-n", ns)
        decoy = lab.get("configmap", "decoy", "-n", ns)
        r = lab.kubectl(*as_tenant, "patch", "pod", pod["metadata"]["name"], "-n", ns,
                        "--type=merge", "-p",
                        json.dumps({"metadata": {"ownerReferences": [decoy_ref(decoy)]}}),
                        check=False)
        assert r.returncode != 0 and "controller ownerReference" in r.stderr, r.stderr
        after = lab.get("pod", pod["metadata"]["name"], "-n", ns)
        assert [o["kind"] for o in after["metadata"]["ownerReferences"]] == ["Job"]
        # Other ownerReferences may still be added.
        lab.kubectl(*as_tenant, "patch", "pod", pod["metadata"]["name"], "-n", ns,
                    "--type=json", "-p", json.dumps([{
                        "op": "add", "path": "/metadata/ownerReferences/-", "value": {
                            "apiVersion": "v1", "kind": "ConfigMap", "name": "decoy",
                            "uid": decoy["metadata"]["uid"]}}]))
        # In two writes, the reference removed first: refused too (brk27 M3; only the
        # garbage collector's identity may, tests/e2e/test_owner_reference_release.py).
        name = pod["metadata"]["name"]
        r = lab.kubectl(*as_tenant, "patch", "pod", name, "-n", ns, "--type=json", "-p",
                        json.dumps([{"op": "remove", "path": "/metadata/ownerReferences/0"}]),
                        check=False)
        assert r.returncode != 0 and "cannot be removed" in r.stderr, r.stderr
        assert [p["metadata"]["name"] for p in running(lab, ns)] == [name]
    finally:
        lab.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        lab.kubectl("delete", "clusterqueue", cq, "--wait=false", check=False)

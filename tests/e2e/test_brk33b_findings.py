"""brk33b on the lab (findings and numbers: tests/unit/test_brk33b_findings.py). Strict
xfails: each passes once its finding is closed. No operator: the API server's defaulting and
LimitRanger (F1) and the Job controller (B1) are what matter.

F1: a Job whose container asks ``limits: {nvidia.com/gpu: 4}`` only, in a namespace whose
LimitRange defaults the GPU to 1 (``max`` 8), admitted on a 4-GPU ClusterQueue: the API
server makes its pod with requests 4, pykueue's extender counts the podSet at 1 and withholds
the pod for ever.

B1: with ``jobs.pod_replacement_policy: Failed`` (the opt-in closing brk32 H4) the tenant
deletes its admitted Job's Running pod (a long grace) and creates the replacement itself: a
pod with the Job's controller ownerReference and its pod's labels (the Job's selector takes
it; the Job controller counts it as its one active pod) and the same 1-GPU spec. The
extender places it beside the terminating pod; twice: 3 GPUs Running on an admission of 1.
"""

from __future__ import annotations

import copy
import json

import pytest

from tests.e2e.test_brk32_findings import _gpus, _running, _slow_job, drop_held_pods
from tests.e2e.test_job_being_deleted_stopped import JOB_NAME, QUEUE
from tests.e2e.test_pod_replacement_policy import replacing_on_failure  # noqa: F401 (fixture)
from tests.e2e.test_workload_kinds import LONG, TOLERATION, gpu_queue
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab


def test_f1_a_limits_only_gpu_job_runs_under_a_gpu_limitrange(
        lab: LabHandle, pykueue_in_lab: object) -> None:
    ns, cq = gpu_queue(lab, "brk33b-f1", 4)
    try:
        lab.apply(json.dumps({
            "apiVersion": "v1", "kind": "LimitRange",
            "metadata": {"name": "gpu", "namespace": ns},
            "spec": {"limits": [{"type": "Container", "default": {"nvidia.com/gpu": "1"},
                                 "max": {"nvidia.com/gpu": "8"}}]}}))
        lab.apply(json.dumps({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "namespace": ns, "labels": {QUEUE: "lq"}},
            "spec": {"parallelism": 1, "completions": 1, "template": {
                "metadata": LONG, "spec": {
                    "restartPolicy": "Never", "tolerations": [TOLERATION],
                    "containers": [{"name": "c", "image": "busybox", "resources": {
                        "limits": {"nvidia.com/gpu": "4"}}}]}}}}))
        pod = wait_for(lambda: next(iter(lab.get(
            "pods", "-n", ns, "-l", f"{JOB_NAME}=j")["items"]), None), 90, "j's pod made")
        assert pod["spec"]["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "4"}
        try:
            wait_for(lambda: _running(lab, ns, f"{JOB_NAME}=j"), 60, "j's pod Running")
        except AssertionError:
            got = lab.get("pods", "-n", ns, "-l", f"{JOB_NAME}=j")["items"]
            why = [c.get("message", "") for p in got
                   for c in p.get("status", {}).get("conditions") or []
                   if c["type"] == "PodScheduled" and c["status"] == "False"]
            raise AssertionError(f"j's 4-GPU pod not Running after 60 s: {why}") from None
    finally:
        lab.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=90s", check=False)
        lab.kubectl("delete", "clusterqueue", cq, "--wait=false", check=False)


def test_b1_a_forged_replacement_runs_no_gpu_beyond_the_admission(
        lab: LabHandle, replacing_on_failure: object) -> None:  # noqa: F811
    ns, cq = gpu_queue(lab, "brk33b-b1", 1)
    selector = f"{JOB_NAME}=j"
    try:
        lab.apply(_slow_job("j", ns))
        first = wait_for(lambda: _running(lab, ns, selector), 90, "j's pod Running")[0]
        job = lab.get("job", "j", "-n", ns)
        assert job["spec"].get("podReplacementPolicy") == "Failed"
        spec = copy.deepcopy(first["spec"])
        for key in ("nodeName", "hostname", "subdomain"):
            spec.pop(key, None)
        ref = {"apiVersion": "batch/v1", "kind": "Job", "name": "j",
               "uid": job["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
        victim = first["metadata"]["name"]
        for round_ in range(2):  # each round: delete the live pod, make its replacement
            lab.kubectl("delete", "pod", victim, "-n", ns, "--wait=false")
            victim = f"j-mine-{round_}"
            lab.kubectl("create", "-f", "-", input=json.dumps({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": victim, "namespace": ns,
                             "labels": first["metadata"]["labels"],
                             "annotations": first["metadata"].get("annotations") or {},
                             "finalizers": first["metadata"].get("finalizers") or [],
                             "ownerReferences": [ref]},
                "spec": spec}))
            try:
                want = round_ + 2
                wait_for(lambda n=want: len(_running(lab, ns, selector)) >= n, 60,
                         f"{want} pods of j Running")
            except AssertionError:
                break  # the forged pod did not run beside the deleted ones
        running = _running(lab, ns, selector)
        gpus = sum(_gpus(p) for p in running)
        names = sorted(p["metadata"]["name"] for p in running)
        assert gpus <= 1, f"{gpus} GPUs Running for j ({names}), admitted for 1"
    finally:
        drop_held_pods(lab, ns, cq)

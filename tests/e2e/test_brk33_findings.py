"""brk33 on the lab (tests/unit/test_brk33_findings.py has the unit reproducers and the rules).

L1: the extender counts a pod's GPUs as ``max(containers, init containers)``; Kubernetes adds
the sidecars (init containers with ``restartPolicy: Always``) to the containers. A 1-GPU
ClusterQueue; the tenant makes Job ``train-workers-0`` (no queue name, suspended, 1 pod: one
container of 1 GPU and 3 sidecars of 1 GPU, 4 GPUs on the node), then JobSet ``train`` (1
Job of one 1-GPU pod); once ``train`` is admitted it gives the Job ``train``'s controller
reference (brk32 H1's adoption, allowed while suspended). jobset resumes it. The reconciler
sees a template asking 4 GPUs and sets the Job to parallelism 0, but the Job controller has
made the pod by then and the extender, counting 1 GPU, places it: a 4-GPU pod is bound and
Running on the admission of 1 until the set-back's deletion (1 s grace). The tenant sets
parallelism 1 again (an unlabelled Job: no webhook sees the update), and again: each time a
4-GPU pod is placed. The finding is closed when no pod of the Job is ever bound: closed in
session 33 (``pod_facts`` counts sidecars as Kubernetes does)."""

from __future__ import annotations

import time

import pytest

from tests.e2e import test_jobset as js
from tests.e2e.test_brk32_findings import adopted_train_workers_0
from tests.e2e.test_job_being_deleted_stopped import JOB_NAME
from tests.e2e.test_jobset import jobset_operator, pykueue_with_jobset  # noqa: F401 (fixtures)
from tests.e2e.test_workload_kinds import LONG, TOLERATION, gpu_container
from tests.labfixture import LabHandle

pytestmark = pytest.mark.lab

GPU = "nvidia.com/gpu"


def _pod_gpus(pod: dict) -> int:
    """GPUs as Kubernetes counts them for this pod shape: containers plus sidecars."""
    spec = pod["spec"]
    return sum(int((c.get("resources") or {}).get("requests", {}).get(GPU, 0))
               for c in spec["containers"] + [i for i in spec.get("initContainers") or []
                                              if i.get("restartPolicy") == "Always"])


def _sample(lab: LabHandle, ns: str, selector: str, seconds: float) -> tuple[int, set[str]]:
    """Over ``seconds``: the most GPUs Running at once among pods matching ``selector`` and
    the names of the pods seen bound to a node."""
    most, bound = 0, set()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pods = lab.get("pods", "-n", ns, "-l", selector)["items"]
        bound |= {p["metadata"]["name"] for p in pods if p["spec"].get("nodeName")}
        most = max(most, sum(_pod_gpus(p) for p in pods
                             if p["status"].get("phase") == "Running"))
        time.sleep(0.3)
    return most, bound


def test_l1_a_child_jobs_pod_with_gpu_sidecars_is_never_placed(
        lab: LabHandle, pykueue_with_jobset) -> None:  # noqa: F811
    with js.queue(lab, "brk33-l1", 1) as ns:
        as_tenant = js.tenant(lab, ns)
        one = {"requests": {GPU: "1"}, "limits": {GPU: "1"}}
        sidecars = [{"name": f"side-{i}", "image": "busybox", "restartPolicy": "Always",
                     "resources": one} for i in range(3)]
        pod = {"metadata": LONG, "spec": {
            "restartPolicy": "Never", "tolerations": [TOLERATION],
            "initContainers": sidecars, "containers": [{**gpu_container(), "resources": one}]}}
        adopted_train_workers_0(lab, as_tenant, ns, pod, backoff_limit=6)
        selector = f"{JOB_NAME}=train-workers-0"
        most, bound = _sample(lab, ns, selector, 20)
        if lab.get("job", "train-workers-0", "-n", ns)["spec"].get("suspend"):
            lab.kubectl(*as_tenant, "patch", "job", "train-workers-0", "-n", ns,
                        "--type=merge", "-p", '{"spec": {"suspend": false}}', check=False)
            m, b = _sample(lab, ns, selector, 10)
            most, bound = max(most, m), bound | b
        raises = 0
        for _ in range(3):  # the tenant undoes the set-back
            par = lab.get("job", "train-workers-0", "-n", ns)["spec"].get("parallelism")
            if par == 0:
                raises += 1
                lab.kubectl(*as_tenant, "patch", "job", "train-workers-0", "-n", ns,
                            "--type=merge", "-p", '{"spec": {"parallelism": 1}}', check=False)
            m, b = _sample(lab, ns, selector, 8)
            most, bound = max(most, m), bound | b
        assert not bound, (f"{len(bound)} pods of 4 GPUs bound (the tenant raised parallelism "
                           f"{raises} times), at most {most} GPUs Running at once, on "
                           "train's admission of 1")

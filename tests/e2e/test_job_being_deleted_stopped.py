"""A batch Job being deleted, kept by a tenant's own finalizer, is stopped for real when it is
preempted (session 21's fix, ``BatchJob._delete_pods``; docs/security.md), on the lab: the
Kubernetes Job controller does nothing for a Job with a ``deletionTimestamp`` (v1.36
``syncJob`` runs ``manageJob`` only without one), so suspending it kills no pod; pykueue
deletes its running pods itself (Event ``DeletedPods``), and the preemptor runs on the quota
only once they are gone."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.test_kinds_preemption import events
from tests.e2e.test_workload_kinds import LONG, TOLERATION, gpu_container, gpu_queue, live
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab
QUEUE = "kueue.x-k8s.io/queue-name"
WL = "workloads.kueue.x-k8s.io"
HOLD = "example.com/hold"
JOB_NAME = "batch.kubernetes.io/job-name"
QUOTA = 2  # GPUs of the ClusterQueue


def two_pod_job(name: str, ns: str, labels: dict[str, str]) -> str:
    """A Job of two 1-GPU pods that run an hour."""
    return json.dumps({"apiVersion": "batch/v1", "kind": "Job",
                       "metadata": {"name": name, "namespace": ns, "labels": labels},
                       "spec": {"parallelism": 2, "completions": 2, "template": {
                           "metadata": LONG, "spec": {
                               "restartPolicy": "Never", "containers": [gpu_container()],
                               "tolerations": [TOLERATION],
                               "terminationGracePeriodSeconds": 0}}}})


def running(pods: list[dict[str, Any]], job: str) -> list[dict[str, Any]]:
    """The pods of Job ``job`` Running on a node, whether being deleted or not (a pod being
    deleted still runs until its kubelet, here kwok, ends it)."""
    return [p for p in pods if (p["metadata"].get("labels") or {}).get(JOB_NAME) == job
            and p["spec"].get("nodeName") and p["status"].get("phase") == "Running"]


def gpus(pods: list[dict[str, Any]]) -> int:
    return sum(int(c["resources"].get("requests", {}).get("nvidia.com/gpu", 0))
               for p in pods for c in p["spec"]["containers"])


def low_workload(lab: LabHandle, ns: str) -> dict[str, Any] | None:
    return next((w for w in lab.get(WL, "-n", ns)["items"]
                 if any(r["kind"] == "Job" and r["name"] == "low"
                        for r in w["metadata"].get("ownerReferences") or [])), None)


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or []
                 if c["type"] == kind), None)


def test_a_preempted_job_being_deleted_under_a_tenants_finalizer_has_its_pods_deleted(
        lab: LabHandle, pykueue_in_lab: object) -> None:
    """A 2-GPU ClusterQueue that preempts lower priorities within it: Job ``low`` (priority 0,
    2 pods of 1 GPU) runs; the tenant puts its own finalizer on it and deletes it
    (background): it stays, being deleted, its pods Running. Job ``high`` (priority 1000, 2
    pods of 1 GPU) preempts it: ``low``'s Workload is Evicted (``Preempted``), pykueue deletes
    ``low``'s pods (Event ``DeletedPods`` on the Job) and ``high``'s 2 pods run; at every
    look, the Running pods ask at most the queue's 2 GPUs. Before the fix ``low``'s pods ran
    on (the Job controller ignores a Job being deleted) and ``high`` waited behind them."""
    ns, cq = gpu_queue(lab, "jdel", QUOTA)
    high = f"{ns}-high"
    lab.kubectl("patch", "clusterqueue", cq, "--type=merge", "-p", json.dumps(
        {"spec": {"preemption": {"withinClusterQueue": "LowerPriority"}}}))
    lab.apply(json.dumps({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
                          "metadata": {"name": high}, "value": 1000}))
    try:
        lab.apply(two_pod_job("low", ns, {QUEUE: "lq"}))
        wait_for(lambda: len(running(lab.get("pods", "-n", ns)["items"], "low")) == 2, 90,
                 "low's 2 pods Running")
        # The tenant's own finalizer, then `kubectl delete` (background propagation).
        lab.kubectl("patch", "job", "low", "-n", ns, "--type=merge", "-p",
                    json.dumps({"metadata": {"finalizers": [HOLD]}}))
        lab.kubectl("delete", "job", "low", "-n", ns, "--wait=false")
        job = lab.get("job", "low", "-n", ns)
        assert job["metadata"].get("deletionTimestamp") and job["metadata"]["finalizers"] == [
            HOLD], job["metadata"]
        assert len(running(lab.get("pods", "-n", ns)["items"], "low")) == 2

        lab.apply(two_pod_job("high", ns, {QUEUE: "lq", "kueue.x-k8s.io/priority-class": high}))
        looks: list[tuple[int, int]] = []

        def high_running() -> bool:
            """Every look: the Running pods of low and high ask at most the quota."""
            pods = lab.get("pods", "-n", ns)["items"]
            low_run, high_run = running(pods, "low"), running(pods, "high")
            looks.append((len(low_run), len(high_run)))
            assert gpus(low_run + high_run) <= QUOTA, (
                f"{len(low_run)} pod(s) of low and {len(high_run)} of high Running on a "
                f"{QUOTA}-GPU quota; looks (low, high) so far: {looks}")
            return len(high_run) == 2
        try:
            wait_for(high_running, 60, "high's 2 pods Running (low's pods deleted by pykueue)")
        except AssertionError as exc:
            wl = low_workload(lab, ns)
            raise AssertionError(f"{exc}; last look (low, high) Running: {looks[-1:]}; low's "
                                 f"Workload Evicted: {condition(wl, 'Evicted')}") from None

        evicted = condition(low_workload(lab, ns), "Evicted")
        assert evicted and evicted["status"] == "True" and evicted["reason"] == "Preempted", \
            evicted
        assert not live([p for p in lab.get("pods", "-n", ns)["items"]
                         if (p["metadata"].get("labels") or {}).get(JOB_NAME) == "low"])
        wait_for(lambda: not lab.get("pods", "-n", ns, "-l", f"{JOB_NAME}=low")["items"], 30,
                 "low's pods gone")
        deleted = [e for e in events(lab, ns, "DeletedPods")
                   if e["involvedObject"].get("kind") == "Job"
                   and e["involvedObject"].get("name") == "low"]
        assert len(deleted) == 1 and deleted[0]["message"].startswith("2 pod(s) deleted"), \
            deleted
        # The Job stays (the tenant's finalizer), suspended, and makes no pod again.
        job = lab.get("job", "low", "-n", ns)
        assert job["spec"]["suspend"] is True and job["metadata"]["finalizers"] == [HOLD]
        reserved = condition(low_workload(lab, ns), "QuotaReserved")
        assert reserved and reserved["status"] == "False", reserved
        assert len(running(lab.get("pods", "-n", ns)["items"], "high")) == 2
    finally:
        lab.kubectl("patch", "job", "low", "-n", ns, "--type=json", "-p",
                    '[{"op": "remove", "path": "/metadata/finalizers"}]', check=False)
        lab.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=90s", check=False)
        lab.kubectl("delete", "clusterqueue", cq, "--wait=false", check=False)
        lab.kubectl("delete", "workloadpriorityclass", high, "--wait=false", check=False)

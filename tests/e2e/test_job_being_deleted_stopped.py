"""A batch Job being deleted, kept by a tenant's own finalizer, is stopped for real when it is
preempted (session 21's fix, ``BatchJob._delete_pods``; docs/security.md), on the lab: the
Kubernetes Job controller does nothing for a Job with a ``deletionTimestamp`` (v1.36
``syncJob`` runs ``manageJob`` only without one), so suspending it kills no pod; pykueue
deletes its running pods itself (Event ``DeletedPods``), and the preemptor runs on the quota
only once they are gone."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_kinds_preemption import events, preempted
from tests.e2e.test_workload_kinds import LONG, TOLERATION, gpu_container, gpu_queue, live
from tests.labfixture import ROOT, LabHandle, wait_for

sys.path.insert(0, str(ROOT / "hack"))
import lab as labmod  # noqa: E402

pytestmark = pytest.mark.lab
QUEUE = "kueue.x-k8s.io/queue-name"
WL = "workloads.kueue.x-k8s.io"
HOLD = "example.com/hold"
JOB_NAME = "batch.kubernetes.io/job-name"
QUOTA = 2  # GPUs of the ClusterQueue
KCM = "kube-controller-manager"
RECORD = "pykueue.dev/original-pod-scheduling"  # pykueue's start record on a started Job


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


def refused_job_updates(lab: LabHandle) -> int:
    """kube-apiserver's count of Job updates (PUT, not a subresource) it refused as invalid
    (422: a pod template restore of a Job whose pods it counts active is "field is
    immutable"), all clients together."""
    total = 0
    for line in lab.kubectl("get", "--raw", "/metrics").stdout.splitlines():
        if line.startswith("apiserver_request_total{") and all(
                f'{k}="{v}"' in line for k, v in (("resource", "jobs"), ("verb", "PUT"),
                                                  ("code", "422"), ("subresource", ""))):
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def low_workload(lab: LabHandle, ns: str) -> dict[str, Any] | None:
    return next((w for w in lab.get(WL, "-n", ns)["items"]
                 if any(r["kind"] == "Job" and r["name"] == "low"
                        for r in w["metadata"].get("ownerReferences") or [])), None)


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or []
                 if c["type"] == kind), None)


def preemptible_queue(lab: LabHandle, prefix: str) -> tuple[str, str, str]:
    """A namespace with LocalQueue ``lq`` to a new 2-GPU ClusterQueue that preempts lower
    priorities within it, and a WorkloadPriorityClass of value 1000; returns (namespace,
    ClusterQueue, class)."""
    ns, cq = gpu_queue(lab, prefix, QUOTA)
    high = f"{ns}-high"
    lab.kubectl("patch", "clusterqueue", cq, "--type=merge", "-p", json.dumps(
        {"spec": {"preemption": {"withinClusterQueue": "LowerPriority"}}}))
    lab.apply(json.dumps({"apiVersion": "kueue.x-k8s.io/v1beta2",
                          "kind": "WorkloadPriorityClass",
                          "metadata": {"name": high}, "value": 1000}))
    return ns, cq, high


def low_running_held(lab: LabHandle, ns: str) -> None:
    """Job ``low`` (priority 0, 2 pods of 1 GPU) Running, with its tenant's own finalizer."""
    lab.apply(two_pod_job("low", ns, {QUEUE: "lq"}))
    wait_for(lambda: len(running(lab.get("pods", "-n", ns)["items"], "low")) == 2, 90,
             "low's 2 pods Running")
    lab.kubectl("patch", "job", "low", "-n", ns, "--type=merge", "-p",
                json.dumps({"metadata": {"finalizers": [HOLD]}}))


def clean_up(lab: LabHandle, ns: str, cq: str, high: str) -> None:
    lab.kubectl("patch", "job", "low", "-n", ns, "--type=json", "-p",
                '[{"op": "remove", "path": "/metadata/finalizers"}]', check=False)
    lab.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=90s", check=False)
    lab.kubectl("delete", "clusterqueue", cq, "--wait=false", check=False)
    lab.kubectl("delete", "workloadpriorityclass", high, "--wait=false", check=False)


@contextmanager
def job_controller_stopped(lab: LabHandle) -> Iterator[None]:
    """The lab's kube-controller-manager stopped for the block and started again after it with
    the same arguments: its first look at every Job is then a fresh list."""
    handle = labmod.from_args(str(lab.state), lab.port_base, str(lab.bin_dir))
    pid = labmod._pid(handle, KCM)
    assert pid, f"{KCM} is not running"
    args = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[1:-1]]
    labmod._stop(handle, KCM)
    try:
        yield
    finally:
        labmod._start(handle, KCM, args)
        wait_for(lambda: labmod._pid(handle, KCM), 30, f"{KCM} running again")


def wait_pykueue_deleted(lab: LabHandle, ns: str, job: str) -> None:
    """Wait until pykueue's ``DeletedPods`` Events on Job ``job`` name at least one pod. Not
    an exact count: one reconcile may see one pod and the next the other (two Events), a
    second DELETE of a pod whose deletion the store has not shown yet succeeds and counts it
    again, an identical Event within the recorder's dedupe window is dropped, and Events are
    written as background traffic, so they may come after the pods are gone. That the pods
    are gone is the caller's check."""
    def named() -> int:
        return sum(int(e["message"].split(" pod(s) deleted", 1)[0])
                   for e in events(lab, ns, "DeletedPods")
                   if e["involvedObject"].get("kind") == "Job"
                   and e["involvedObject"].get("name") == job
                   and " pod(s) deleted" in e["message"])
    wait_for(lambda: named() >= 1, 30, f"pykueue's DeletedPods Event on Job {job}")


def test_a_preempted_job_being_deleted_under_a_tenants_finalizer_has_its_pods_deleted(
        lab: LabHandle, pykueue_in_lab: object) -> None:
    """A 2-GPU ClusterQueue that preempts lower priorities within it: Job ``low`` (priority 0,
    2 pods of 1 GPU) runs; the tenant puts its own finalizer on it and deletes it
    (background): it stays, being deleted, its pods Running. Job ``high`` (priority 1000, 2
    pods of 1 GPU) preempts it: ``low``'s Workload is Evicted (``Preempted``), pykueue deletes
    ``low``'s pods (Event ``DeletedPods`` on the Job) and ``high``'s 2 pods run; at every
    look, the Running pods ask at most the queue's 2 GPUs. Before the fix ``low``'s pods ran
    on (the Job controller ignores a Job being deleted) and ``high`` waited behind them.
    Then (small24) ``low``'s Workload is deleted: a Job being deleted is never started again,
    so its Workload is not left queued to be admitted once ``high`` is done."""
    ns, cq, high = preemptible_queue(lab, "jdel")
    try:
        low_running_held(lab, ns)
        low_wl = low_workload(lab, ns)["metadata"]["name"]  # type: ignore[index]
        # `kubectl delete` (background propagation).
        lab.kubectl("delete", "job", "low", "-n", ns, "--wait=false")
        job = lab.get("job", "low", "-n", ns)
        assert job["metadata"].get("deletionTimestamp") and job["metadata"]["finalizers"] == [
            HOLD], job["metadata"]
        assert len(running(lab.get("pods", "-n", ns)["items"], "low")) == 2

        refused = refused_job_updates(lab)
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

        assert preempted(lab, ns, low_wl)
        assert not live([p for p in lab.get("pods", "-n", ns)["items"]
                         if (p["metadata"].get("labels") or {}).get(JOB_NAME) == "low"])
        wait_for(lambda: not lab.get("pods", "-n", ns, "-l", f"{JOB_NAME}=low")["items"], 30,
                 "low's pods gone")
        wait_pykueue_deleted(lab, ns, "low")
        # The Job stays (the tenant's finalizer), suspended, and makes no pod again.
        job = lab.get("job", "low", "-n", ns)
        assert job["spec"]["suspend"] is True and job["metadata"]["finalizers"] == [HOLD]
        wait_for(lambda: low_workload(lab, ns) is None, 30,
                 "low's Workload deleted (low is being deleted)")
        assert lab.get("job", "low", "-n", ns)["spec"]["suspend"] is True
        assert len(running(lab.get("pods", "-n", ns)["items"], "high")) == 2
        # Its template is not restored: the API server refuses that while the Job controller
        # counts its pods active (2-3 refused updates per stop before, then retried).
        assert refused_job_updates(lab) == refused, "a Job update was refused"
    finally:
        clean_up(lab, ns, cq, high)


def test_a_job_suspended_then_deleted_before_the_job_controller_acted_has_its_pods_deleted(
        lab: LabHandle, pykueue_in_lab: object) -> None:
    """Job ``low`` (2 pods of 1 GPU) runs under its tenant's finalizer; Job ``high``
    preempts it while the Job controller is down (kube-controller-manager stopped):
    pykueue suspends ``low`` and restores its template, and the tenant deletes it before the
    Job controller acted on the suspension. Started again, the Job controller sees a Job
    being deleted and leaves its pods running. Here the restore goes through before the
    deletion as on an API server that lets a suspended Job's template change once its
    ``startTime`` is cleared (Kubernetes <= v1.35, or v1.36 with
    ``MutableSchedulingDirectivesForSuspendedJobs`` off; v1.36 refuses it while the Job
    controller counts pods active), emulated by setting ``low``'s ``status.active`` to 0
    while the Job controller is down. pykueue must delete the pods of that suspended Job
    being deleted (``JobReconciler._to_stop``); before, they ran on (2 of low's pods
    Running, high's 0, for as long as the finalizer held) and ``high`` waited."""
    ns, cq, high = preemptible_queue(lab, "jdelw")
    try:
        low_running_held(lab, ns)
        with job_controller_stopped(lab):
            lab.apply(two_pod_job("high", ns, {QUEUE: "lq",
                                               "kueue.x-k8s.io/priority-class": high}))
            wait_for(lambda: lab.get("job", "low", "-n", ns)["spec"].get("suspend") is True,
                     30, "low suspended by pykueue")
            lab.kubectl("patch", "job", "low", "-n", ns, "--subresource=status",
                        "--type=merge", "-p", json.dumps({"status": {"active": 0, "ready": 0}}))
            wait_for(lambda: RECORD not in (lab.get("job", "low", "-n", ns)["metadata"]
                                            .get("annotations") or {}), 30,
                     "low's template restored (its start record gone)")
            # Suspended and restored, its 2 pods still Running (nothing acted on them).
            assert len(running(lab.get("pods", "-n", ns)["items"], "low")) == 2
            lab.kubectl("delete", "job", "low", "-n", ns, "--wait=false")
        looks: list[tuple[int, int]] = []

        def high_running() -> bool:
            pods = lab.get("pods", "-n", ns)["items"]
            low_run, high_run = running(pods, "low"), running(pods, "high")
            looks.append((len(low_run), len(high_run)))
            assert gpus(low_run + high_run) <= QUOTA, looks
            return len(high_run) == 2
        try:
            wait_for(high_running, 60, "high's 2 pods Running (low's pods deleted by pykueue)")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last look (low, high) Running: {looks[-1:]}") \
                from None
        job = lab.get("job", "low", "-n", ns)
        assert job["metadata"].get("deletionTimestamp") and job["spec"]["suspend"] is True
        wait_for(lambda: not lab.get("pods", "-n", ns, "-l", f"{JOB_NAME}=low")["items"], 30,
                 "low's pods gone")
        wait_pykueue_deleted(lab, ns, "low")
    finally:
        clean_up(lab, ns, cq, high)


def test_a_pending_job_being_deleted_is_not_admitted_when_quota_frees(
        lab: LabHandle, pykueue_in_lab: object) -> None:
    """small24: Job ``low`` (2 pods of 1 GPU) runs on the 2-GPU queue; Job ``waiting`` (the
    same) is pending behind it; the tenant puts its own finalizer on ``waiting`` and deletes
    it (background): it stays, being deleted, suspended. Its Workload is deleted (Event
    ``DeletedWorkload`` on the Job): once ``low`` is deleted and Job ``next`` queued,
    ``next`` gets the quota and runs, and ``waiting`` stays suspended with no pod. Before,
    ``waiting``'s Workload stayed queued: admitted first when ``low`` went (older), it was
    unsuspended, for a Job going away, and ``next`` waited behind it."""
    ns, cq, high = preemptible_queue(lab, "jdelp")
    try:
        low_running_held(lab, ns)
        lab.kubectl("patch", "job", "low", "-n", ns, "--type=json", "-p",
                    '[{"op": "remove", "path": "/metadata/finalizers"}]')
        lab.apply(two_pod_job("waiting", ns, {QUEUE: "lq"}))

        def waiting_workload() -> dict[str, Any] | None:
            return next((w for w in lab.get(WL, "-n", ns)["items"]
                         if any(r["name"] == "waiting"
                                for r in w["metadata"].get("ownerReferences") or [])), None)
        wait_for(lambda: (c := condition(waiting_workload(), "QuotaReserved"))
                 and c["status"] == "False", 30, "waiting's Workload pending")
        lab.kubectl("patch", "job", "waiting", "-n", ns, "--type=merge", "-p",
                    json.dumps({"metadata": {"finalizers": [HOLD]}}))
        lab.kubectl("delete", "job", "waiting", "-n", ns, "--wait=false")
        wait_for(lambda: waiting_workload() is None, 30,
                 "waiting's Workload deleted (waiting is being deleted)")
        deleted = [e for e in events(lab, ns, "DeletedWorkload")
                   if e["involvedObject"].get("name") == "waiting"]
        assert deleted and "being deleted" in deleted[0]["message"], deleted
        lab.kubectl("delete", "job", "low", "-n", ns, "--wait=false")
        lab.apply(two_pod_job("next", ns, {QUEUE: "lq"}))
        wait_for(lambda: len(running(lab.get("pods", "-n", ns)["items"], "next")) == 2, 90,
                 "next's 2 pods Running")
        job = lab.get("job", "waiting", "-n", ns)
        assert job["metadata"].get("deletionTimestamp") and job["spec"]["suspend"] is True
        assert not lab.get("pods", "-n", ns, "-l", f"{JOB_NAME}=waiting")["items"]
        assert waiting_workload() is None
    finally:
        lab.kubectl("patch", "job", "waiting", "-n", ns, "--type=json", "-p",
                    '[{"op": "remove", "path": "/metadata/finalizers"}]', check=False)
        clean_up(lab, ns, cq, high)

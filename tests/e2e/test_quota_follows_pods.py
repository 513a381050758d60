"""Quota follows the pods, on the lab with the real operators (JobSet v0.11.1, training-operator
v1.9.3): a job deleted with ``kubectl delete --cascade=orphan`` leaves its Workload without an
owner; it keeps the quota while the orphaned pods run and is Finished ``OwnerNotFound`` (Kueue
v0.17.1 ``FinishOrphanedWorkloads``) once they are gone, for a Job, a JobSet, a PyTorchJob and
a pod group. A PyTorchJob raised from 1 to 5 workers is stopped and queued again without its
operator declaring it Failed, and its quota is never released while its pods run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.test_jobset import QUEUE, condition, owned_workload, queue
from tests.e2e.test_kinds_preemption import pod_group
from tests.e2e.test_kubeflow import need, pytorchjob, template
from tests.e2e.test_workload_kinds import gpu_container
from tests.integration.test_operators import operators_running
from tests.labfixture import WORKLOAD_GC_PROBE, LabHandle, wait_for, wait_gc_watches

pytestmark = pytest.mark.lab
WL = "workloads.kueue.x-k8s.io"
HOUR = {"lab.pykueue.dev/run-duration": "1h"}  # kwok ends the pods only after an hour


@pytest.fixture(scope="module")
def operators(lab: LabHandle) -> Iterator[tuple[set[str], str]]:
    """JobSet and the training-operator in the lab, before pykueue starts."""
    with operators_running(lab, ["jobset", "training-operator"]) as started:
        yield started


@pytest.fixture(scope="module")
def pykueue_with_operators(operators: tuple[set[str], str], pykueue_in_lab: Any
                           ) -> tuple[set[str], str]:
    return operators


def job(name: str, ns: str, pods: int) -> str:
    tpl = {"metadata": {"annotations": HOUR},
           "spec": {"restartPolicy": "Never", "containers": [gpu_container()],
                    "tolerations": template(1)["spec"]["tolerations"]}}
    return json.dumps({"apiVersion": "batch/v1", "kind": "Job",
                       "metadata": {"name": name, "namespace": ns, "labels": {QUEUE: "lq"}},
                       "spec": {"parallelism": pods, "completions": pods, "template": tpl}})


def jobset(name: str, ns: str, jobs: int) -> str:
    tpl = {"metadata": {"annotations": HOUR},
           "spec": {"restartPolicy": "Never", "containers": [gpu_container()],
                    "tolerations": template(1)["spec"]["tolerations"]}}
    return json.dumps({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                       "metadata": {"name": name, "namespace": ns, "labels": {QUEUE: "lq"}},
                       "spec": {"replicatedJobs": [{"name": "w", "replicas": jobs, "template": {
                           "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0,
                                    "template": tpl}}}]}})


def gpu_pods(lab: LabHandle, ns: str) -> list[dict]:
    """The namespace's GPU pods holding their GPUs (Pending or Running, or being deleted)."""
    return [p for p in lab.get("pods", "-n", ns)["items"]
            if p["status"].get("phase") in ("Pending", "Running", None)
            or p["metadata"].get("deletionTimestamp")]


def running(lab: LabHandle, ns: str) -> int:
    return sum(1 for p in lab.get("pods", "-n", ns)["items"]
               if p["status"].get("phase") == "Running")


def quota_held(wl: dict[str, Any]) -> int:
    """Pods the Workload holds quota for: its admitted podSet counts unless Finished."""
    status = wl.get("status") or {}
    fin = condition(wl, "Finished")
    if not status.get("admission") or (fin and fin["status"] == "True"):
        return 0
    counts = {p["name"]: p["count"] for p in wl["spec"]["podSets"]}
    return sum(int(a.get("count", counts.get(a["name"], 0)))
               for a in status["admission"]["podSetAssignments"])


def cq_admitted(lab: LabHandle, ns: str) -> int:
    lq = lab.get("localqueue", "lq", "-n", ns)
    cq = lab.get("clusterqueue", lq["spec"]["clusterQueue"])
    return int((cq.get("status") or {}).get("reservingWorkloads") or 0)


ORPHANS = {
    # kind: (manifest, resource, pods, how the orphaned pods are removed afterwards)
    "Job": (lambda ns: job("train", ns, 4), "job", 4,
            ["pods", "-l", "batch.kubernetes.io/job-name=train"]),
    "JobSet": (lambda ns: jobset("train", ns, 4), "jobset", 4,
               ["jobs", "-l", "jobset.sigs.k8s.io/jobset-name=train"]),
    "PyTorchJob": (lambda ns: pytorchjob("train", ns, 3), "pytorchjob", 4,
                   ["pods", "-l", "training.kubeflow.org/job-name=train"]),
}


@pytest.mark.parametrize("kind", sorted(ORPHANS))
def test_a_job_deleted_with_cascade_orphan_keeps_its_quota_while_its_pods_run_then_frees_it(
        lab: LabHandle, pykueue_with_operators: tuple[set[str], str], kind: str) -> None:
    """Before: the Workload stayed QuotaReserved/Admitted forever (4 GPUs, 0 pods)."""
    make, resource, n, leftovers = ORPHANS[kind]
    if kind == "JobSet":
        need(pykueue_with_operators, "jobset")
    if kind == "PyTorchJob":
        need(pykueue_with_operators, "training-operator")
    with queue(lab, f"orphan-{resource}", 4) as ns:
        lab.apply(make(ns))
        wl = wait_for(lambda: (w := owned_workload(lab, ns, kind, "train"))
                      and (c := condition(w, "Admitted")) and c["status"] == "True" and w,
                      90, f"{kind} train admitted")
        name = wl["metadata"]["name"]
        wait_for(lambda: running(lab, ns) == n, 90, f"{n} pods of train Running")
        wait_gc_watches(lab.kubectl, ns, WORKLOAD_GC_PROBE)
        lab.kubectl("delete", resource, "train", "-n", ns, "--cascade=orphan")
        orphaned = wait_for(lambda: (w := lab.get(WL, name, "-n", ns))
                            and not w["metadata"].get("ownerReferences") and w, 60,
                            f"{name} without its owner reference")
        assert orphaned["metadata"]["labels"]["kueue.x-k8s.io/job-uid"]
        # Its orphaned pods still run on the GPUs: the Workload keeps accounting for them
        # (read first: a JobSet's orphaned child Jobs are stopped, so their pods may go and
        # the Workload finish between the reads).
        w = lab.get(WL, name, "-n", ns)
        pods_left = gpu_pods(lab, ns)
        assert quota_held(w) == n or not pods_left, (w.get("status"), len(pods_left))
        lab.kubectl("delete", *leftovers, "-n", ns, "--wait=false")
        fin = wait_for(lambda: (c := condition(lab.get(WL, name, "-n", ns), "Finished"))
                       and c["status"] == "True" and c, 60, f"{name} Finished")
        assert fin["reason"] == "OwnerNotFound", fin
        wait_for(lambda: cq_admitted(lab, ns) == 0, 30, "the ClusterQueue's quota released")
        assert not [p for p in gpu_pods(lab, ns) if p["status"].get("phase") == "Running"]


def test_a_pod_group_deleted_with_cascade_orphan_frees_its_quota(
        lab: LabHandle, pykueue_in_lab: Any) -> None:
    with queue(lab, "orphan-group", 4) as ns:
        lab.apply(pod_group(ns, "gang", 2, range(2)))
        wait_for(lambda: running(lab, ns) == 2, 90, "the gang's 2 pods Running")
        assert cq_admitted(lab, ns) == 1
        lab.kubectl("delete", "pods", "-l", "kueue.x-k8s.io/pod-group-name=gang", "-n", ns,
                    "--cascade=orphan", "--wait=false")
        wait_for(lambda: cq_admitted(lab, ns) == 0, 60, "the gang's quota released")
        assert not lab.get("pods", "-n", ns)["items"] or running(lab, ns) == 0


HOLD = "lab.pykueue.dev/hold"  # a finalizer of the test's: the pod stays until it goes


def test_a_raised_pytorchjob_is_requeued_without_failing_and_never_runs_on_released_quota(
        lab: LabHandle, pykueue_with_operators: tuple[set[str], str]) -> None:
    """Worker replicas 1 -> 5 on an admitted PyTorchJob (Master 1 + Worker 1 = 2 GPUs, in a
    6-GPU queue, restartPolicy Never): pykueue stops it (``spec.runPolicy.suspend``); the
    training-operator deletes its pods. The master pod is held (a finalizer, as a slow
    kubelet would) after the kill marked it Failed (exit 137). Killed, it holds no quota
    (Kueue KEP-10076 ``OnTerminal``): the old admission may go, but pykueue makes no new
    Workload while it exists (Event ``WaitingForPods``), so the job is not started again;
    once it is gone the Workload is replaced and the job runs again with 6 pods. Before:
    pykueue restarted the job while the killed master was still there (the operator's status
    said 0 active), the training-operator declared the job Failed, pykueue finished the
    Workload and released the quota: 5 GPU pods Running on none."""
    need(pykueue_with_operators, "training-operator")
    with queue(lab, "raise", 6) as ns:
        # restartPolicy Never: one failed pod fails the job (OnFailure would restart it).
        manifest = json.loads(pytorchjob("ddp", ns, 1))
        for rs in manifest["spec"]["pytorchReplicaSpecs"].values():
            rs["restartPolicy"] = "Never"
        lab.apply(json.dumps(manifest))
        wait_for(lambda: (w := owned_workload(lab, ns, "PyTorchJob", "ddp"))
                 and (c := condition(w, "Admitted")) and c["status"] == "True", 90,
                 "ddp admitted")
        wait_for(lambda: running(lab, ns) == 2, 90, "ddp's 2 pods Running")
        lab.kubectl("patch", "pod", "ddp-master-0", "-n", ns, "--type=merge", "-p",
                    json.dumps({"metadata": {"finalizers": [HOLD]}}))
        try:
            held_master(lab, ns)
        finally:
            lab.kubectl("patch", "pod", "ddp-master-0", "-n", ns, "--type=json", "-p",
                        '[{"op": "remove", "path": "/metadata/finalizers"}]', check=False)
        wait_for(lambda: invariants(lab, ns) == (6, 6), 150,
                 "ddp running again with 6 pods on a 6-pod admission")
        wl = owned_workload(lab, ns, "PyTorchJob", "ddp")
        assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [
            ("master", 1), ("worker", 5)]


def held_master(lab: LabHandle, ns: str) -> None:
    """Raise ddp's workers to 5 and wait for pykueue to wait for the held master pod."""
    lab.kubectl("patch", "pytorchjob", "ddp", "-n", ns, "--type=merge", "-p", json.dumps(
        {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 5}}}}))

    def waiting() -> bool:
        invariants(lab, ns)
        return any(e["involvedObject"].get("name") == "ddp" for e in lab.get(
            "events", "-n", ns, "--field-selector", "reason=WaitingForPods")["items"])
    wait_for(waiting, 90, "pykueue waiting for ddp's killed master pod")
    master = lab.get("pod", "ddp-master-0", "-n", ns)
    assert master["metadata"].get("deletionTimestamp") and master["status"]["phase"] in (
        "Running", "Failed"), master["status"]
    # Not started again while it exists: at most the old admission (2 pods), none for 6.
    assert all(quota_held(w) in (0, 2) for w in lab.get(WL, "-n", ns)["items"])
    assert lab.get("pytorchjob", "ddp", "-n", ns)["spec"]["runPolicy"].get("suspend") is True


SAMPLES: list[tuple[int, int, bool]] = []


def invariants(lab: LabHandle, ns: str) -> tuple[int, int]:
    """(GPU pods Running, pods the namespace's Workloads hold quota for), asserting that ddp
    is not Failed, that no pod runs on released quota, and that more pods than admitted run
    only while the old admission (2 pods) is still there, i.e. during the stop."""
    pj = lab.get("pytorchjob", "ddp", "-n", ns)
    failed = condition(pj, "Failed")
    assert not (failed and failed["status"] == "True"), (failed, SAMPLES[-5:])
    # Workloads read before and after the pods: a change between the reads (the new
    # admission, the old Workload deleted) is never taken for a violation.
    before = lab.get(WL, "-n", ns)["items"]
    n = running(lab, ns)
    after = lab.get(WL, "-n", ns)["items"]
    held = max(sum(quota_held(w) for w in wls) for wls in (before, after))
    stopping = any(quota_held(w) == 2 for w in before + after)
    SAMPLES.append((n, held, stopping))
    assert held > 0 or n == 0, SAMPLES[-5:]
    assert n <= held or stopping, SAMPLES[-5:]
    return n, held

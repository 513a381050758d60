"""A deleted Job's quota is held while its pods are still being killed (docs/security.md,
breaker21; ``jobs.deleted_quota_release: WhenPodsGone``), on the lab: ``kubectl delete job``
lets the garbage collector delete the Job's Workload at once while the pods run out their
termination grace period; pykueue's core keeps the Workload's usage until no pod of the Job
holds resources. Here the pods are kept Terminating by a finalizer of the test's own (in
the pod template), which kwok honours: a pod being deleted is removed only once no finalizer
holds it; it runs out its grace period Running while it carries the annotation
``lab.pykueue.dev/stops-slowly``, else kwok marks it Failed (killed) at once
(hack/lab/stages.yaml). A pod Failed (or Succeeded) holds no quota, even while a finalizer
keeps it (Kueue KEP-10076 ``OnTerminal``; breaker finding F4)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.e2e.test_job_being_deleted_stopped import (
    HOLD,
    JOB_NAME,
    QUEUE,
    WL,
    condition,
    gpus,
    running,
    two_pod_job,
)
from tests.e2e.test_workload_kinds import TOLERATION, gpu_queue
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab
QUOTA = 2  # GPUs of the ClusterQueue
SLOWLY = "lab.pykueue.dev/stops-slowly"  # kwok keeps such a pod Running while it is deleted


def held_job(name: str, ns: str) -> str:
    """``two_pod_job`` whose pods carry the test's finalizer and ``SLOWLY``: they stay
    Running, being deleted (Terminating), after the Job is deleted until the test removes
    the finalizer (or, ``SLOWLY`` taken off, Failed, kept by the finalizer)."""
    job = json.loads(two_pod_job(name, ns, {QUEUE: "lq"}))
    tpl = job["spec"]["template"]["metadata"]
    job["spec"]["template"]["metadata"] = {
        **tpl, "annotations": {**tpl.get("annotations", {}), SLOWLY: "true"},
        "finalizers": [HOLD]}
    return json.dumps(job)


def job_workload(lab: LabHandle, ns: str, job: str) -> dict[str, Any] | None:
    return next((w for w in lab.get(WL, "-n", ns)["items"]
                 if any(r["kind"] == "Job" and r["name"] == job
                        for r in w["metadata"].get("ownerReferences") or [])), None)


def pods_of(lab: LabHandle, ns: str, job: str) -> list[dict[str, Any]]:
    return lab.get("pods", "-n", ns, "-l", f"{JOB_NAME}={job}")["items"]


def pending_on_gpus(wl: dict[str, Any] | None, looks: list[str], why: str) -> None:
    """One look at b's Workload ``wl`` while the held quota should keep it out: it must not
    have reserved quota (``why`` says what still holds it); a QuotaReserved=False message
    must name the GPUs and is appended to ``looks``."""
    qr = condition(wl, "QuotaReserved")
    assert not (qr and qr["status"] == "True"), \
        f"b's Workload reserved quota while {why}: {qr}"
    if qr and qr["status"] == "False":
        assert "nvidia.com/gpu" in qr["message"], qr
        looks.append(qr["message"])


def cq_gpu_usage(lab: LabHandle, cq: str) -> tuple[int, int]:
    """The ClusterQueue's status: (GPUs in use, reserving Workloads)."""
    st = lab.get("clusterqueue", cq).get("status") or {}
    used = sum(int(r.get("total", "0")) for f in st.get("flavorsReservation") or []
               for r in f.get("resources") or [] if r["name"] == "nvidia.com/gpu")
    return used, int(st.get("reservingWorkloads") or 0)


def release(lab: LabHandle, pods: list[dict[str, Any]], keep_others: bool = True) -> None:
    """Take the test's finalizer (with ``keep_others`` False: every finalizer) off ``pods``."""
    for p in pods:
        left = [f for f in p["metadata"].get("finalizers") or [] if keep_others and f != HOLD]
        lab.kubectl("patch", "pod", p["metadata"]["name"], "-n", p["metadata"]["namespace"],
                    "--type=merge", "-p", json.dumps({"metadata": {"finalizers": left or None}}),
                    check=False)


@contextmanager
def a_deleted_b_waiting(lab: LabHandle, prefix: str) -> Iterator[tuple[str, str]]:
    """A 2-GPU ClusterQueue: Job ``a`` (``held_job``: 2 pods of 1 GPU) runs and is deleted
    (background propagation); its Workload goes, its pods stay Running, Terminating, under
    the test's finalizer. Job ``b`` (2 pods of 1 GPU) waits: its Workload is pending
    (QuotaReserved False, naming nvidia.com/gpu) at every look (5) while ``a``'s pods run,
    and the ClusterQueue's status still shows ``a``'s 2 GPUs reserved (1 reserving
    Workload). Yields (namespace, ClusterQueue); both deleted after."""
    ns, cq = gpu_queue(lab, prefix, QUOTA)
    try:
        lab.apply(held_job("a", ns))
        wait_for(lambda: len(running(pods_of(lab, ns, "a"), "a")) == 2, 90, "a's 2 pods Running")
        assert job_workload(lab, ns, "a") is not None
        lab.kubectl("delete", "job", "a", "-n", ns, "--wait=false")
        wait_for(lambda: (w := job_workload(lab, ns, "a")) is None
                 or w["metadata"].get("deletionTimestamp"), 60,
                 "a's Workload deleted by the garbage collector (or being deleted, kept by "
                 "its finalizer: jobs.workload_finalizer)")
        wait_for(lambda: (ps := pods_of(lab, ns, "a")) and len(ps) == 2 and all(
            p["metadata"].get("deletionTimestamp") for p in ps), 60, "a's 2 pods Terminating")

        lab.apply(two_pod_job("b", ns, {QUEUE: "lq"}))
        looks: list[str] = []

        def b_waits() -> bool:
            """Every look: a's pods run, b holds no quota and runs nothing; True after b's
            Workload was seen pending on 5 looks."""
            a_pods = pods_of(lab, ns, "a")
            assert len(running(a_pods, "a")) == 2, f"a's pods stopped by themselves: {a_pods}"
            pending_on_gpus(job_workload(lab, ns, "b"), looks, "a's pods still run")
            assert not running(pods_of(lab, ns, "b"), "b")
            return len(looks) >= 5
        wait_for(b_waits, 60, "b's Workload pending on 5 looks while a's pods run")
        assert cq_gpu_usage(lab, cq) == (QUOTA, 1), lab.get("clusterqueue", cq).get("status")
        yield ns, cq
    finally:
        release(lab, [p for p in lab.get("pods", "-n", ns)["items"]
                      if HOLD in (p["metadata"].get("finalizers") or [])], keep_others=False)
        lab.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=90s", check=False)
        lab.kubectl("delete", "clusterqueue", cq, "--wait=false", check=False)


def b_runs(lab: LabHandle, ns: str, cq: str, a_pods: int, what: str) -> None:
    """Wait for ``b``'s Workload to reserve quota and its 2 pods to run, never more GPUs
    Running than the quota, ``a`` having ``a_pods`` pods at every look (none Running); then
    for the ClusterQueue's status to show b's 2 GPUs, 1 reserving Workload."""
    def runs() -> bool:
        a = pods_of(lab, ns, "a")
        assert len(a) == a_pods and not running(a, "a"), a
        pods = pods_of(lab, ns, "b")
        assert gpus(running(pods, "b")) <= QUOTA
        qr = condition(job_workload(lab, ns, "b"), "QuotaReserved")
        return bool(qr and qr["status"] == "True" and len(running(pods, "b")) == 2)
    wait_for(runs, 60, what)
    wait_for(lambda: cq_gpu_usage(lab, cq) == (QUOTA, 1), 30,
             "the ClusterQueue's status: b's 2 GPUs, 1 reserving Workload")


def test_a_deleted_jobs_quota_is_held_until_its_pods_are_gone(
        lab: LabHandle, pykueue_in_lab: object) -> None:
    """``a_deleted_b_waiting``; once the finalizer is taken off ``a``'s pods and they are
    gone, ``b`` is admitted and its 2 pods run. Before the change (and with ``Immediately``,
    Kueue v0.17.1's) ``b`` was admitted at once and ran beside ``a``'s pods."""
    with a_deleted_b_waiting(lab, "hold") as (ns, cq):
        release(lab, pods_of(lab, ns, "a"))
        wait_for(lambda: not pods_of(lab, ns, "a"), 60, "a's pods gone")
        b_runs(lab, ns, cq, 0, "b admitted and its 2 pods Running once a's pods are gone")


def test_a_deleted_jobs_killed_pods_kept_by_a_finalizer_hold_no_quota(
        lab: LabHandle, pykueue_in_lab: object) -> None:
    """``a_deleted_b_waiting``; then a's pods' grace period runs out (``SLOWLY`` taken off:
    kwok marks them Failed) while the test's finalizer still keeps them: they hold no
    resources any more, so ``b`` is admitted and its 2 pods run beside a's 2 Failed ones
    (Kueue KEP-10076 ``OnTerminal``). Before (breaker finding F4) b waited as long as the
    finalizer stayed: a tenant's own finalizer held the quota of its deleted job."""
    with a_deleted_b_waiting(lab, "killed") as (ns, cq):
        for p in pods_of(lab, ns, "a"):
            lab.kubectl("annotate", "pod", p["metadata"]["name"], "-n", ns, f"{SLOWLY}-")
        wait_for(lambda: (ps := pods_of(lab, ns, "a")) and len(ps) == 2 and all(
            p["status"].get("phase") == "Failed" for p in ps), 60,
            "a's 2 pods Failed (killed), kept by the finalizer")
        b_runs(lab, ns, cq, 2, "b admitted and its 2 pods Running beside a's 2 Failed pods")


def decoy_pod(name: str, ns: str, job: str, uid: str) -> str:
    """A tenant's bare Pod, unqueued, asking nothing, that carries Job ``job``'s two pod
    labels (``uid``: readable on its Workload's ``kueue.x-k8s.io/job-uid`` label) and no
    ownerReference (rev26)."""
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": ns,
        "labels": {JOB_NAME: job, "batch.kubernetes.io/controller-uid": uid}},
        "spec": {"restartPolicy": "Never", "tolerations": [TOLERATION],
                 "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "c", "image": "busybox"}]}})


def test_a_decoy_pod_with_a_deleted_jobs_labels_holds_none_of_its_quota(
        lab: LabHandle, pykueue_in_lab: object) -> None:
    """``a_deleted_b_waiting``; a bare Pod of the tenant's with ``a``'s job-name and
    controller-uid labels and no owner runs; once ``a``'s own pods are gone, ``b`` is admitted
    and its 2 pods run while the decoy still runs. Before (rev26) ``a``'s deleted Workload
    kept its 2 GPUs (the core's hold, and its finalizer) for as long as the decoy ran."""
    with a_deleted_b_waiting(lab, "decoy") as (ns, cq):
        a_pods = pods_of(lab, ns, "a")
        uid = a_pods[0]["metadata"]["labels"]["batch.kubernetes.io/controller-uid"]
        lab.apply(decoy_pod("decoy", ns, "a", uid))
        wait_for(lambda: lab.get("pod", "decoy", "-n", ns)["status"].get("phase") == "Running",
                 60, "the decoy Running")
        release(lab, a_pods)
        wait_for(lambda: [p["metadata"]["name"] for p in pods_of(lab, ns, "a")] == ["decoy"],
                 60, "a's own pods gone, the decoy left")

        def runs() -> bool:
            decoy = lab.get("pod", "decoy", "-n", ns)
            assert decoy["status"].get("phase") == "Running", decoy["status"]
            pods = pods_of(lab, ns, "b")
            assert gpus(running(pods, "b")) <= QUOTA
            qr = condition(job_workload(lab, ns, "b"), "QuotaReserved")
            return bool(qr and qr["status"] == "True" and len(running(pods, "b")) == 2)
        wait_for(runs, 60, "b admitted and its 2 pods Running beside the decoy")
        wait_for(lambda: cq_gpu_usage(lab, cq) == (QUOTA, 1), 30,
                 "the ClusterQueue's status: b's 2 GPUs, 1 reserving Workload")

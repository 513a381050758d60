"""Issue 18, Kubeflow's jobs through pykueue with the real operators: PyTorchJob
(training-operator v1.9.3) and MPIJob v2beta1 (mpi-operator v0.8.0), ``make operators``. A
queued job is created suspended by pykueue's webhook (``spec.runPolicy.suspend``), admitted
whole (one Workload, one podSet per replica type), and its pods land on the flavor's node; one
that does not fit waits whole with no pod. Skipped with the reason when an operator is not
built, or (MPIJob) when another lab holds port 8080, which mpi-operator hard-codes."""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.test_forged_job_pods import unschedulable
from tests.e2e.test_jobset import (
    QUEUE,
    condition,
    landed_on_a100,
    owned_workload,
    queue,
    queue_change_refused,
)
from tests.e2e.test_workload_kinds import gpu_container
from tests.integration.test_operators import operators_running
from tests.labfixture import ROOT, LabHandle, wait_for

sys.path.insert(0, str(ROOT / "hack"))
import lab as labmod  # noqa: E402
import operators as ops  # noqa: E402

pytestmark = pytest.mark.lab
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def kubeflow_operators(lab: LabHandle) -> Iterator[tuple[set[str], str]]:
    """The training-operator and (when port 8080 is free) the mpi-operator in the lab, before
    pykueue starts (a CRD installed later is picked up only at pykueue's next discovery poll,
    up to 2 min later)."""
    with operators_running(lab, ["training-operator", "mpi-operator"]) as started:
        yield started


@pytest.fixture(scope="module")
def pykueue_with_kubeflow(kubeflow_operators: tuple[set[str], str],
                          pykueue_in_lab: labmod.Lab) -> tuple[set[str], str]:
    return kubeflow_operators


def need(operators: tuple[set[str], str], name: str) -> None:
    """Skip with the reason unless operator ``name`` runs."""
    running, busy = operators
    if name in running:
        return
    op = ops.OPERATORS[name]
    if not op.built:
        pytest.skip(f"{name} {op.version} not built ({op.binary} missing): run `make operators`")
    pytest.skip(busy)


def template(gpus: int, *, restart: str = "OnFailure", name: str = "c",
             duration: str = "1h") -> dict[str, Any]:
    """A pod template of one container ``name`` asking ``gpus`` GPUs (none: no request at all,
    so its podSet needs no quota), tolerating the GPU taint, whose pods the lab's kwok ends
    (Succeeded) after ``duration`` (Go duration; whatever owns them)."""
    c = gpu_container(gpus) if gpus else {"name": name, "image": "busybox"}
    c["name"] = name
    return {"metadata": {"annotations": {"lab.pykueue.dev/run-duration": duration}},
            "spec": {"restartPolicy": restart, "containers": [c],
                     "tolerations": [GPU_TOLERATION]}}


def pytorchjob(name: str, ns: str, workers: int) -> str:
    """A PyTorchJob queued in ``lq``: Master 1 + Worker ``workers``, 1 GPU each."""
    def replica(n: int) -> dict[str, Any]:
        return {"replicas": n, "restartPolicy": "OnFailure",
                "template": template(1, name="pytorch")}
    return json.dumps({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                       "metadata": {"name": name, "namespace": ns, "labels": {QUEUE: "lq"}},
                       "spec": {"pytorchReplicaSpecs": {"Master": replica(1),
                                                        "Worker": replica(workers)}}})


def mpijob(name: str, ns: str, workers: int) -> str:
    """An MPIJob v2beta1 queued in ``lq``: a launcher asking no GPU that ends after 2 s (the
    MPIJob then succeeds) + ``workers`` 1-GPU workers lasting an hour, deleted by the
    mpi-operator when the MPIJob succeeds (``cleanPodPolicy: Running``: with ``None`` they
    would keep running, and pykueue keeps the quota while they do)."""
    return json.dumps({
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
        "metadata": {"name": name, "namespace": ns, "labels": {QUEUE: "lq"}},
        "spec": {"slotsPerWorker": 1, "runPolicy": {"cleanPodPolicy": "Running"},
                 "mpiReplicaSpecs": {
                     "Launcher": {"replicas": 1,
                                  "template": template(0, restart="Never", name="launcher",
                                                    duration="2s")},
                     "Worker": {"replicas": workers, "template": template(1, name="worker")}}}})


def admitted(lab: LabHandle, ns: str, kind: str, name: str) -> dict:
    return wait_for(lambda: (w := owned_workload(lab, ns, kind, name))
                    and (c := condition(w, "Admitted")) and c["status"] == "True" and w,
                    60, f"{kind} {name}'s Workload admitted")


def running_pods(lab: LabHandle, ns: str, n: int) -> list[dict]:
    def running() -> list[dict]:
        return [p for p in lab.get("pods", "-n", ns)["items"]
                if p["status"].get("phase") in ("Running", "Succeeded")]
    return wait_for(lambda: len(r := running()) >= n and r, 90, f"{n} pods running in {ns}")


def waits_whole(lab: LabHandle, ns: str, kind: str, name: str, resource: str) -> None:
    """The object's Workload is pending on GPUs, the object suspended, no pod exists."""
    qr = wait_for(lambda: (c := condition(owned_workload(lab, ns, kind, name), "QuotaReserved"))
                  and c["status"] == "False" and c, 60, f"{kind} {name}'s Workload pending")
    assert "nvidia.com/gpu" in qr["message"], qr
    obj = lab.get(resource, name, "-n", ns)
    assert obj["spec"]["runPolicy"]["suspend"] is True  # set by pykueue's webhook at create
    assert lab.get("pods", "-n", ns)["items"] == []


def test_a_pytorchjob_is_admitted_whole_and_its_pods_land_on_the_flavor_node(
        lab: LabHandle, pykueue_with_kubeflow: tuple[set[str], str]) -> None:
    need(pykueue_with_kubeflow, "training-operator")
    with queue(lab, "pytorch", 4) as ns:
        lab.apply(pytorchjob("ddp", ns, 3))  # Master 1 + Worker 3 = the whole 4-GPU queue
        wl = admitted(lab, ns, "PyTorchJob", "ddp")
        assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [
            ("master", 1), ("worker", 3)]
        assert [a["flavors"]["nvidia.com/gpu"] for a in
                wl["status"]["admission"]["podSetAssignments"]] == ["a100-flavor"] * 2
        pods = running_pods(lab, ns, 4)
        assert len(pods) == 4
        landed_on_a100(pods, ["master", "worker", "worker", "worker"])
        queue_change_refused(lab, ns, "PyTorchJob", "ddp")


def test_a_pytorchjob_that_does_not_fit_waits_whole_with_no_pod(
        lab: LabHandle, pykueue_with_kubeflow: tuple[set[str], str]) -> None:
    need(pykueue_with_kubeflow, "training-operator")
    with queue(lab, "pytorch-wait", 3) as ns:
        # Master 1 + Worker 3 = 4 GPUs > 3: nothing may run, not even the master that fits.
        lab.apply(pytorchjob("big", ns, 3))
        waits_whole(lab, ns, "PyTorchJob", "big", "pytorchjob")


def test_an_mpijob_is_admitted_whole_and_runs_to_succeeded(
        lab: LabHandle, pykueue_with_kubeflow: tuple[set[str], str]) -> None:
    need(pykueue_with_kubeflow, "mpi-operator")
    with queue(lab, "mpi", 2) as ns:
        lab.apply(mpijob("pi", ns, 2))
        wl = admitted(lab, ns, "MPIJob", "pi")
        assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [
            ("launcher", 1), ("worker", 2)]
        pods = running_pods(lab, ns, 3)
        workers = [p for p in pods if p["metadata"]["labels"].get(
            "training.kubeflow.org/job-role") == "worker"]
        assert len(workers) == 2
        landed_on_a100(workers, ["worker", "worker"])
        # The launcher's Job pod ends after 2 s: the MPIJob succeeds, its Workload finishes.
        wait_for(lambda: (c := condition(owned_workload(lab, ns, "MPIJob", "pi"), "Finished"))
                 and c["status"] == "True", 90, "pi's Workload Finished")


def test_an_mpijob_that_does_not_fit_waits_whole_with_no_pod(
        lab: LabHandle, pykueue_with_kubeflow: tuple[set[str], str]) -> None:
    need(pykueue_with_kubeflow, "mpi-operator")
    with queue(lab, "mpi-wait", 2) as ns:
        lab.apply(mpijob("big", ns, 3))  # 3 GPU workers > 2
        waits_whole(lab, ns, "MPIJob", "big", "mpijob")


def test_an_evicted_pytorchjob_is_stopped_whole_restored_and_runs_again(
        lab: LabHandle, pykueue_with_kubeflow: tuple[set[str], str]) -> None:
    """Deactivating its Workload evicts it: pykueue suspends it with its templates as
    submitted, the training-operator deletes every pod, the quota is released; active again, it
    is re-admitted and its pods run on a100-0 again."""
    need(pykueue_with_kubeflow, "training-operator")
    with queue(lab, "pytorch-evict", 2) as ns:
        manifest = pytorchjob("ev", ns, 1)
        lab.apply(manifest)
        submitted = json.loads(manifest)["spec"]["pytorchReplicaSpecs"]
        wl = admitted(lab, ns, "PyTorchJob", "ev")
        running_pods(lab, ns, 2)
        name = wl["metadata"]["name"]
        lab.kubectl("patch", "workloads.kueue.x-k8s.io", name, "-n", ns, "--type=merge", "-p",
                    '{"spec": {"active": false}}')
        stopped = wait_for(lambda: (j := lab.get("pytorchjob", "ev", "-n", ns))["spec"][
            "runPolicy"].get("suspend") is True and j, 60, "ev suspended")
        assert stopped["spec"]["pytorchReplicaSpecs"] == submitted
        wait_for(lambda: not lab.get("pods", "-n", ns)["items"], 60, "ev's pods deleted")
        wait_for(lambda: not ((owned_workload(lab, ns, "PyTorchJob", "ev") or {}).get("status")
                              or {}).get("admission"), 60, "ev's quota released")
        ev = condition(owned_workload(lab, ns, "PyTorchJob", "ev"), "Evicted")
        assert ev and ev["status"] == "True" and ev["reason"] == "Deactivated", ev
        lab.kubectl("patch", "workloads.kueue.x-k8s.io", name, "-n", ns, "--type=merge", "-p",
                    '{"spec": {"active": true}}')
        landed_on_a100(running_pods(lab, ns, 2), ["master", "worker"])


def test_an_mpijob_shrunk_while_queued_runs_its_launcher_as_admitted(
        lab: LabHandle, pykueue_with_kubeflow: tuple[set[str], str]) -> None:
    """brk33b F2: mpi-operator v0.8.0 makes the launcher Job at once (``AtStartup``), from the
    launcher template as it is then, and on resume syncs its scheduling fields only. A user
    whose MPIJob does not fit (launcher 1 GPU + 2 workers on 2 GPUs) lowers the launcher to
    no GPU while it is queued: the Workload is sized by the new template and admitted, and
    the launcher that runs is the one made from it (no GPU), so the MPIJob succeeds."""
    need(pykueue_with_kubeflow, "mpi-operator")
    with queue(lab, "mpi-shrunk", 2) as ns:
        manifest = json.loads(mpijob("fit", ns, 2))
        manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"] = template(
            1, restart="Never", name="launcher", duration="2s")
        lab.apply(json.dumps(manifest))
        waits_whole(lab, ns, "MPIJob", "fit", "mpijob")
        stale = wait_for(lambda: next((j for j in lab.get("jobs", "-n", ns)["items"]
                                       if j["metadata"]["name"] == "fit-launcher"), None),
                         60, "the launcher Job made at the MPIJob's creation")
        assert stale["spec"]["suspend"] is True
        lab.kubectl("patch", "mpijob", "fit", "-n", ns, "--type=json", "-p", json.dumps([
            {"op": "replace", "path": "/spec/mpiReplicaSpecs/Launcher/template/spec/containers"
                                      "/0/resources", "value": {}}]))
        wl = admitted(lab, ns, "MPIJob", "fit")
        assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [
            ("launcher", 1), ("worker", 2)]
        wait_for(lambda: (c := condition(owned_workload(lab, ns, "MPIJob", "fit"), "Finished"))
                 and c["status"] == "True", 120, "fit's Workload Finished (its launcher ran)")
        launcher = lab.get("job", "fit-launcher", "-n", ns)
        assert launcher["metadata"]["uid"] != stale["metadata"]["uid"]
        assert launcher["spec"]["template"]["spec"]["containers"][0].get("resources") in (
            None, {})


def test_a_pod_made_under_an_admitted_pytorchjobs_name_gets_no_node_beyond_its_podset(
        lab: LabHandle, pykueue_with_kubeflow: tuple[set[str], str]) -> None:
    """A tenant's pod with the PyTorchJob as its controller (its worker's labels, spec and
    the flavor's placement copied) asking 2 GPUs where a worker was admitted with 1 gets no
    node from the scheduler extender (``_beyond_workload_podset``), or, one worker too many,
    is deleted first by the reconciler (``_delete_excess``); the job's own 2 pods keep
    running. (The default setup: the Pod webhook does not see the unlabelled pod.)"""
    need(pykueue_with_kubeflow, "training-operator")
    with queue(lab, "pytorch-forged", 4) as ns:
        lab.apply(pytorchjob("ddp", ns, 1))
        admitted(lab, ns, "PyTorchJob", "ddp")
        pods = running_pods(lab, ns, 2)
        worker = next(p for p in pods
                      if p["metadata"]["labels"].get("kueue.x-k8s.io/podset") == "worker")
        job = lab.get("pytorchjob", "ddp", "-n", ns)
        spec = copy.deepcopy(worker["spec"])
        for key in ("nodeName", "hostname", "subdomain"):
            spec.pop(key, None)
        spec["containers"][0]["resources"] = gpu_container(2)["resources"]
        lab.kubectl("create", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": "big", "namespace": ns, "labels": worker["metadata"]["labels"],
                "annotations": worker["metadata"].get("annotations") or {},
                "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                                     "name": "ddp", "uid": job["metadata"]["uid"],
                                     "controller": True}]},
            "spec": spec}))
        why = wait_for(lambda: unschedulable(lab, ns, "big"), 60, "big unschedulable or gone")
        if why == "gone":
            # Also one pod beyond podSet worker's count: the reconciler may delete it first
            # (``_delete_excess``), with its Event, before kube-scheduler asks the extender.
            events = [e.get("message", "") for e in lab.get("events", "-n", ns)["items"]
                      if e.get("reason") == "DeletedExcessPods"]
            assert any("big" in m for m in events), events
        else:
            assert "requests 2 nvidia.com/gpu, more than the 1 of a pod of podSet worker" \
                in why, why
        assert sorted(p["metadata"]["name"] for p in lab.get("pods", "-n", ns)["items"]
                      if p["status"].get("phase") == "Running") == sorted(
            p["metadata"]["name"] for p in pods)

"""break24's findings on the lab: a queued job of a kind whose operator ignores an object being
deleted (training-operator v1.9.3's PyTorchJob, JobSet v0.11.1, KubeRay v1.6.0's RayCluster
and RayJob), kept by a tenant's own finalizer after ``kubectl delete``, is preempted. Before
the fix the batch Job alone (``BatchJob._delete_pods``) had its pods stopped: suspending
another kind's object being deleted kills no pod (its operator returns at once) and its
status is never written again, so its pods ran on, its evicted Workload kept the quota and the
preemptor waited for good (a tenant's way to make its job unpreemptible)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.e2e.test_jobset import _long_jobset
from tests.e2e.test_kubeflow import mpijob, pytorchjob, template
from tests.e2e.test_ray import cpu_and_gpu_groups, rayjob
from tests.integration.test_operators import operators_running
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab
PRIORITY = "kueue.x-k8s.io/priority-class"
WL = "workloads.kueue.x-k8s.io"
HOLD = "example.com/hold"
QUOTA = 2  # GPUs of the ClusterQueue


@pytest.fixture(scope="module")
def operators(lab: LabHandle) -> Iterator[set[str]]:
    with operators_running(lab, ["training-operator", "mpi-operator", "jobset",
                                 "kuberay"]) as (running, busy):
        if busy:
            _MPI_BUSY.append(busy)
        yield running


# Why the mpi-operator was left out (its fixed health port taken by another lab), or empty.
_MPI_BUSY: list[str] = []


@pytest.fixture(scope="module")
def pykueue_with_operators(operators: set[str], pykueue_in_lab: object) -> set[str]:
    return operators


def raycluster(name: str, ns: str, workers: int) -> str:
    """A RayCluster queued in ``lq``: a head asking 1 CPU and ``workers`` 1-GPU workers."""
    spec = json.loads(rayjob(name, ns, workers))["spec"]["rayClusterSpec"]
    return json.dumps({"apiVersion": "ray.io/v1", "kind": "RayCluster",
                       "metadata": {"name": name, "namespace": ns,
                                    "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
                       "spec": spec})


def long_mpijob(name: str, ns: str) -> str:
    """An MPIJob queued in ``lq``: a launcher (no GPU, a batch Job's pod) and 2 1-GPU workers,
    all running an hour."""
    body = json.loads(mpijob(name, ns, 2))
    launcher = body["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]
    launcher["metadata"]["annotations"]["lab.pykueue.dev/run-duration"] = "1h"
    return json.dumps(body)


# kind -> (operator, resource, manifest(name, ns), pod label naming the object; a RayJob's
# pods are its RayCluster's, named ``<rayjob>-<suffix>`` by KubeRay)
KINDS: dict[str, tuple[str, str, Callable[[str, str], str], str]] = {
    "PyTorchJob": ("training-operator", "pytorchjob", lambda n, ns: pytorchjob(n, ns, 1),
                   "training.kubeflow.org/job-name"),
    "MPIJob": ("mpi-operator", "mpijob", lambda n, ns: long_mpijob(n, ns),
               "training.kubeflow.org/job-name"),
    "JobSet": ("jobset", "jobset", lambda n, ns: _long_jobset(n, ns, 2),
               "jobset.sigs.k8s.io/jobset-name"),
    "RayCluster": ("kuberay", "raycluster", lambda n, ns: raycluster(n, ns, 2), "ray.io/cluster"),
    "RayJob": ("kuberay", "rayjob", lambda n, ns: rayjob(n, ns, 2), "ray.io/cluster"),
}


def gpu_pods(lab: LabHandle, ns: str, kind: str, name: str) -> list[dict[str, Any]]:
    """The GPU-asking pods of ``kind`` object ``name`` Running on a node (being deleted or
    not)."""
    label = KINDS[kind][3]

    def of(value: str | None) -> bool:
        return value == name or (kind == "RayJob" and bool(value)
                                 and str(value).startswith(f"{name}-"))
    return [p for p in lab.get("pods", "-n", ns)["items"]
            if of((p["metadata"].get("labels") or {}).get(label))
            and p["spec"].get("nodeName") and p["status"].get("phase") == "Running"
            and any("nvidia.com/gpu" in (c.get("resources") or {}).get("requests", {})
                    for c in p["spec"]["containers"])]


def preemptible_queue(lab: LabHandle, prefix: str) -> tuple[str, str, str]:
    """A namespace with LocalQueue ``lq`` to a new ClusterQueue (2 A100s, 4 CPUs) that
    preempts lower priorities within it, and a WorkloadPriorityClass of value 1000."""
    tag = uuid.uuid4().hex[:6]
    ns, cq, high = f"{prefix}-{tag}", f"{prefix}-cq-{tag}", f"{prefix}-high-{tag}"
    lab.create_namespace(ns)
    lab.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": cq},
         "spec": {"namespaceSelector": {}, "resourceGroups": cpu_and_gpu_groups(QUOTA),
                  "preemption": {"withinClusterQueue": "LowerPriority"}}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": "lq", "namespace": ns}, "spec": {"clusterQueue": cq}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
         "metadata": {"name": high}, "value": 1000}]}))
    return ns, cq, high


def workloads(lab: LabHandle, ns: str) -> dict[str, list[tuple[str, str, str]]]:
    return {w["metadata"]["name"]: [(c["type"], c["status"], c.get("reason", "")) for c in
                                    (w.get("status") or {}).get("conditions") or []]
            for w in lab.get(WL, "-n", ns)["items"]}


def high_replaces_low(lab: LabHandle, ns: str, kind: str,
                      what: Callable[[], str] = lambda: "") -> None:
    """Wait up to 90 s for ``high``'s 2 GPU pods Running and ``low``'s gone (``kind``
    objects), the Running GPU pods never asking more than the queue's ``QUOTA``; on timeout
    an AssertionError names the last counts, ``what()`` and the Workloads."""
    seen: list[tuple[int, int]] = []

    def high_runs() -> bool:
        lows = len(gpu_pods(lab, ns, kind, "low"))
        highs = len(gpu_pods(lab, ns, kind, "high"))
        seen.append((lows, highs))
        assert lows + highs <= QUOTA, seen[-5:]
        return highs == 2 and lows == 0

    try:
        wait_for(high_runs, 90, "high's 2 GPU pods Running, low's gone")
    except AssertionError:
        raise AssertionError(f"{kind} after 90 s: (low, high) Running GPU pods {seen[-1]}; "
                             f"{what()}Workloads {workloads(lab, ns)}") from None


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_preempted_job_being_deleted_under_a_tenants_finalizer_frees_its_quota(
        lab: LabHandle, pykueue_with_operators: set[str], kind: str) -> None:
    """A 2-GPU ClusterQueue that preempts lower priorities: ``low`` (2 pods of 1 GPU) runs;
    its tenant puts a finalizer of its own on it and deletes it (background). ``high``
    (priority 1000, same shape) preempts it: ``low``'s GPU pods must go and ``high``'s 2 run
    within 90 s, the Running GPU pods never asking more than the queue's 2 GPUs; then
    ``low``'s Workload is deleted (a suspended job being deleted is never started)."""
    operator, resource, manifest, _ = KINDS[kind]
    if operator == "mpi-operator" and _MPI_BUSY:
        pytest.skip(_MPI_BUSY[0])
    if operator not in pykueue_with_operators:
        pytest.skip(f"{operator} not built: run `make operators`")
    ns, cq, high = preemptible_queue(lab, f"del-{resource}")
    try:
        lab.apply(manifest("low", ns))
        wait_for(lambda: len(gpu_pods(lab, ns, kind, "low")) == 2, 120,
                 "low's 2 GPU pods Running")
        lab.kubectl("patch", resource, "low", "-n", ns, "--type=merge", "-p",
                    json.dumps({"metadata": {"finalizers": [HOLD]}}))
        lab.kubectl("delete", resource, "low", "-n", ns, "--wait=false")
        assert lab.get(resource, "low", "-n", ns)["metadata"].get("deletionTimestamp")
        body = json.loads(manifest("high", ns))
        body["metadata"]["labels"][PRIORITY] = high
        lab.apply(json.dumps(body))
        high_replaces_low(lab, ns, kind)
        wait_for(lambda: not any("-low-" in w for w in workloads(lab, ns)), 60,
                 "low's Workload deleted")
    finally:
        lab.kubectl("patch", resource, "low", "-n", ns, "--type=json", "-p",
                    '[{"op": "remove", "path": "/metadata/finalizers"}]', check=False)
        lab.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=90s", check=False)
        lab.kubectl("delete", "clusterqueue", cq, "--wait=false", check=False)
        lab.kubectl("delete", "workloadpriorityclass", high, "--wait=false", check=False)


def test_a_tenants_batch_job_labelled_as_a_preempted_pytorchjob_holds_none_of_its_quota(
        lab: LabHandle, pykueue_with_operators: set[str]) -> None:
    """review25 F3: the tenant of PyTorchJob ``low`` (2 GPU pods) runs an unqueued batch Job
    ``holder`` whose pod, asking nothing, carries ``training.kubeflow.org/job-name: low``.
    ``high`` (priority 1000) preempts ``low``: ``high``'s 2 GPU pods run within 90 s and the
    holder's pod runs on (it is no pod of ``low``'s). Before, pykueue counted any pod a
    batch Job controls as ``low``'s (the rule meant for an MPIJob's launcher), so ``low``'s
    evicted Workload kept the quota while the holder ran, and ``high`` waited for good."""
    if "training-operator" not in pykueue_with_operators:
        pytest.skip("training-operator not built: run `make operators`")
    ns, cq, high = preemptible_queue(lab, "holder")
    try:
        lab.apply(pytorchjob("low", ns, 1))
        wait_for(lambda: len(gpu_pods(lab, ns, "PyTorchJob", "low")) == 2, 120,
                 "low's 2 GPU pods Running")
        pod = template(0, name="holder")
        pod["metadata"]["labels"] = {"training.kubeflow.org/job-name": "low"}
        lab.apply(json.dumps({"apiVersion": "batch/v1", "kind": "Job",
                              "metadata": {"name": "holder", "namespace": ns},
                              "spec": {"template": pod, "backoffLimit": 0}}))

        def holder_running() -> bool:
            return any(p["status"].get("phase") == "Running" for p in lab.get(
                "pods", "-n", ns, "-l", "batch.kubernetes.io/job-name=holder")["items"])

        wait_for(holder_running, 60, "the holder's pod Running")
        body = json.loads(pytorchjob("high", ns, 1))
        body["metadata"]["labels"][PRIORITY] = high
        lab.apply(json.dumps(body))
        high_replaces_low(lab, ns, "PyTorchJob")
        assert holder_running()
    finally:
        lab.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=90s", check=False)
        lab.kubectl("delete", "clusterqueue", cq, "--wait=false", check=False)
        lab.kubectl("delete", "workloadpriorityclass", high, "--wait=false", check=False)


def test_deleting_a_pytorchjob_leaves_the_pods_of_the_tfjob_of_its_name(
        lab: LabHandle, pykueue_with_operators: set[str]) -> None:
    """review25 F4: TFJob ``train`` (1 GPU worker) and PyTorchJob ``train`` (1 GPU master)
    run in one namespace; both operators label their pods ``training.kubeflow.org/job-name:
    train``. The tenant deletes the PyTorchJob under a finalizer of its own, then its Workload
    is deactivated: its pod is deleted (break24), the TFJob's runs on, the same pod, for the
    20 s watched. Before,
    pykueue took the TFJob's pod (its podset label, another controller) for one the tenant
    had moved away from the PyTorchJob and deleted it on every pass."""
    if "training-operator" not in pykueue_with_operators:
        pytest.skip("training-operator not built: run `make operators`")
    ns, cq, high = preemptible_queue(lab, "kin")

    def running(kind: str) -> list[dict[str, Any]]:
        return [p for p in gpu_pods(lab, ns, "PyTorchJob", "train")
                if not p["metadata"].get("deletionTimestamp")
                and any(r.get("controller") and r.get("kind") == kind
                        for r in p["metadata"].get("ownerReferences") or [])]

    try:
        torch = json.loads(pytorchjob("train", ns, 1))
        del torch["spec"]["pytorchReplicaSpecs"]["Worker"]
        tf = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
              "metadata": {"name": "train", "namespace": ns,
                           "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
              "spec": {"tfReplicaSpecs": {"Worker": {
                  "replicas": 1, "restartPolicy": "OnFailure",
                  "template": template(1, name="tensorflow")}}}}
        lab.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": [torch, tf]}))
        wait_for(lambda: len(running("TFJob")) == 1 and len(running("PyTorchJob")) == 1, 120,
                 "the TFJob's and the PyTorchJob's GPU pods Running")
        tf_pod = running("TFJob")[0]["metadata"]["uid"]
        lab.kubectl("patch", "pytorchjob", "train", "-n", ns, "--type=merge", "-p",
                    json.dumps({"metadata": {"finalizers": [HOLD]}}))
        lab.kubectl("delete", "pytorchjob", "train", "-n", ns, "--wait=false")
        # An admin deactivates its Workload: stopped, its pod is deleted (break24).
        wl = next(w for w in workloads(lab, ns) if w.startswith("pytorchjob-train-"))
        lab.kubectl("patch", WL, wl, "-n", ns, "--type=merge", "-p",
                    json.dumps({"spec": {"active": False}}))
        wait_for(lambda: not running("PyTorchJob"), 60, "the PyTorchJob's pod deleted")
        end = time.monotonic() + 20
        while time.monotonic() < end:
            tfs = [p["metadata"]["uid"] for p in running("TFJob")]
            assert tfs == [tf_pod], f"the TFJob's Running GPU pods: {tfs}, was [{tf_pod}]"
            time.sleep(2)
    finally:
        lab.kubectl("patch", "pytorchjob", "train", "-n", ns, "--type=json", "-p",
                    '[{"op": "remove", "path": "/metadata/finalizers"}]', check=False)
        lab.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=90s", check=False)
        lab.kubectl("delete", "clusterqueue", cq, "--wait=false", check=False)
        lab.kubectl("delete", "workloadpriorityclass", high, "--wait=false", check=False)

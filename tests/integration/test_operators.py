"""Issue 18, without pykueue: the real operators (``make operators``, started by
``hack/lab.py operators-up``) turn a small sample of their kinds into pods that kube-scheduler
places on the lab's kwok nodes and kwok runs.

Each test skips with the reason when its operator's binary is not in the cache (the build is
``make operators``, not part of ``make test``); everything else is a real outcome read from the
lab's API server."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.labfixture import ROOT, LabHandle, wait_for

sys.path.insert(0, str(ROOT / "hack"))
import operators as ops  # noqa: E402

DURATION = "lab.pykueue.dev/run-duration"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
LAB_NODES = {"a100-0", "l4-0", "cpu-0", "cpu-1"}


@contextmanager
def operators_running(lab: LabHandle, names: list[str]) -> Iterator[tuple[set[str], str]]:
    """The built operators among ``names`` running in the lab: (those running, why the
    mpi-operator is left out or ""); the ones started here are stopped again afterwards."""
    names = [n for n in names if ops.OPERATORS[n].built]
    handle = ops.labmod.Lab(state=lab.state, port_base=lab.port_base, bin_dir=lab.bin_dir)
    running = {n for n in names if ops.labmod._pid(handle, n)}
    busy = ""
    if "mpi-operator" in names and "mpi-operator" not in running \
            and not ops._port_free(ops.MPI_HEALTH_PORT):
        # Its health port is fixed: another lab on this machine runs one (see hack/operators.py).
        names.remove("mpi-operator")
        busy = (f"port {ops.MPI_HEALTH_PORT} is taken (mpi-operator v0.8.0 hard-codes its "
                "health port; another lab on this machine runs one)")
    try:  # operators-up may fail half-way (8080 taken meanwhile): stop what it started
        if names:
            r = lab.lab_cmd("operators-up", *names, check=False)
            assert r.returncode == 0, f"operators-up failed:\n{r.stdout}\n{r.stderr}"
        yield set(names), busy
    finally:
        started = [n for n in names if n not in running]
        if started:
            lab.lab_cmd("operators-down", *started, check=False)


@pytest.fixture(scope="module")
def operators(lab: LabHandle) -> Iterator[set[str]]:
    """The built operators, started in the lab (stopped again when this module started them)."""
    with operators_running(lab, ops.built()) as (names, busy):
        if busy:
            MPI_BUSY.append(busy)
        yield names


MPI_BUSY: list[str] = []


def need(operators: set[str], name: str) -> None:
    if name == "mpi-operator" and MPI_BUSY:
        pytest.skip(MPI_BUSY[0])
    if name not in operators:
        op = ops.OPERATORS[name]
        pytest.skip(f"{name} {op.version} not built ({op.binary} missing): run `make operators`")


CREATED: list[str] = []


@pytest.fixture(autouse=True)
def _cleanup(lab: LabHandle) -> Iterator[None]:
    """Each test's namespace goes with its pods before the next test: the samples hold GPUs
    on a100-0 / l4-0 (RayCluster workers run until deleted) that later tests need free."""
    yield
    while CREATED:
        ns = CREATED.pop()
        lab.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        wait_for(lambda ns=ns: not lab.get("pods", "-n", ns)["items"], 120,
                 f"the pods of {ns} gone")


def _namespace(lab: LabHandle, prefix: str) -> str:
    ns = f"{prefix}-{uuid.uuid4().hex[:6]}"
    lab.create_namespace(ns)
    CREATED.append(ns)
    return ns


def _container(name: str, gpu: int = 0) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "busybox", "command": ["true"],
                         "resources": {"requests": {"cpu": "100m"}}}
    if gpu:
        c["resources"] = {"requests": {"cpu": "100m", "nvidia.com/gpu": str(gpu)},
                          "limits": {"nvidia.com/gpu": str(gpu)}}
    return c


def _pod_template(container: str, gpu: int = 0, *, restart: str = "Never",
                  duration: str = "1h") -> dict[str, Any]:
    """One container's pod template; the lab's kwok ends its pods (Succeeded) after
    ``duration``, whatever owns them."""
    spec: dict[str, Any] = {"restartPolicy": restart, "containers": [_container(container, gpu)]}
    if gpu:
        spec["tolerations"] = [GPU_TOLERATION]
    return {"metadata": {"annotations": {DURATION: duration}}, "spec": spec}


def _pods(lab: LabHandle, ns: str) -> list[dict[str, Any]]:
    return lab.get("pods", "-n", ns)["items"]


def _placed(lab: LabHandle, ns: str, label: str, want: dict[str, int],
            phases: tuple[str, ...] = ("Running", "Succeeded")) -> dict[str, list[dict]]:
    """Wait until the namespace holds, per value of ``label``, ``want[value]`` pods bound to a lab
    node in one of ``phases``; returns those pods by value."""
    def ready() -> dict[str, list[dict]] | None:
        by: dict[str, list[dict]] = {}
        for p in _pods(lab, ns):
            if (p["spec"].get("nodeName") in LAB_NODES
                    and p["status"].get("phase") in phases):
                by.setdefault(p["metadata"].get("labels", {}).get(label, ""), []).append(p)
        return by if all(len(by.get(k, [])) >= n for k, n in want.items()) else None

    return wait_for(ready, 120, f"pods {want} by {label} placed and {phases} in {ns}", 0.5)


def _condition(obj: dict[str, Any], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in obj.get("status", {}).get("conditions", []))


def _gpu_nodes(pods: list[dict]) -> set[str]:
    return {p["spec"]["nodeName"] for p in pods}


def test_jobset_runs_its_replicated_jobs_to_completed(lab: LabHandle, operators: set[str]) -> None:
    """JobSet v0.11.1: one Job per replica of each replicatedJob, their pods on kwok nodes (GPU
    workers on a GPU node, the CPU driver on a CPU node); the Jobs complete, the JobSet is
    Completed. Its defaulting webhook ran (called by URL): the Jobs carry its labels."""
    need(operators, "jobset")
    ns = _namespace(lab, "op-jobset")

    def rjob(name: str, replicas: int, parallelism: int, gpu: int) -> dict[str, Any]:
        return {"name": name, "replicas": replicas, "template": {"spec": {
            "parallelism": parallelism, "completions": parallelism, "backoffLimit": 0,
            "template": _pod_template(name, gpu, duration="2s")}}}

    lab.apply(json.dumps({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "train", "namespace": ns},
        "spec": {"replicatedJobs": [rjob("driver", 1, 1, 0), rjob("workers", 2, 2, 1)]},
    }))
    by = _placed(lab, ns, "jobset.sigs.k8s.io/replicatedjob-name", {"driver": 1, "workers": 4})
    assert _gpu_nodes(by["workers"]) <= {"a100-0", "l4-0"}
    assert _gpu_nodes(by["driver"]) <= {"cpu-0", "cpu-1"}
    jobs = lab.get("jobs", "-n", ns)["items"]
    assert sorted(j["metadata"]["name"] for j in jobs) == [
        "train-driver-0", "train-workers-0", "train-workers-1"]
    js = wait_for(lambda: (o := lab.get("jobset", "train", "-n", ns)) and _condition(o, "Completed")
                  and o, 120, "JobSet train Completed", 0.5)
    # Set only by JobSet's defaulting webhook (pkg/webhooks/jobset_webhook.go), called by URL.
    assert js["spec"]["network"]["enableDNSHostnames"] is True
    assert js["spec"]["replicatedJobs"][0]["template"]["spec"]["completionMode"] == "Indexed"


def test_pytorchjob_creates_master_and_workers(lab: LabHandle, operators: set[str]) -> None:
    """training-operator v1.9.3: a PyTorchJob of 1 master + 2 GPU workers gets its 3 pods
    running on kwok nodes and the condition Running; its validating webhook (by URL) refuses
    a PyTorchJob without a Master/Worker container named pytorch."""
    need(operators, "training-operator")
    ns = _namespace(lab, "op-pytorch")

    def replica(n: int, gpu: int) -> dict[str, Any]:
        return {"replicas": n, "restartPolicy": "OnFailure",
                "template": _pod_template("pytorch", gpu, restart="OnFailure")}

    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": "ddp", "namespace": ns},
           "spec": {"pytorchReplicaSpecs": {"Master": replica(1, 1), "Worker": replica(2, 1)}}}
    lab.apply(json.dumps(job))
    by = _placed(lab, ns, "training.kubeflow.org/replica-type", {"master": 1, "worker": 2})
    assert _gpu_nodes(by["master"] + by["worker"]) <= {"a100-0", "l4-0"}
    wait_for(lambda: _condition(lab.get("pytorchjob", "ddp", "-n", ns), "Running"), 60,
             "PyTorchJob ddp Running", 0.5)
    bad = json.loads(json.dumps(job))
    bad["metadata"]["name"] = "bad"
    bad["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "x"
    r = lab.kubectl("apply", "-f", "-", input=json.dumps(bad), check=False)
    assert r.returncode != 0 and "validator.pytorchjob.training-operator.kubeflow.org" in r.stderr


def test_mpijob_v2beta1_runs_launcher_and_workers(lab: LabHandle, operators: set[str]) -> None:
    """mpi-operator v0.8.0 (kubeflow.org/v2beta1, the version Kueue manages; the
    training-operator is kept off MPIJobs): 2 GPU workers run, the launcher Job's pod runs to
    completion, the MPIJob is Succeeded."""
    need(operators, "mpi-operator")
    crd = lab.get("crd", "mpijobs.kubeflow.org")
    assert [v["name"] for v in crd["spec"]["versions"] if v.get("served")] == ["v2beta1"]
    ns = _namespace(lab, "op-mpi")
    lab.apply(json.dumps({
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
        "metadata": {"name": "pi", "namespace": ns},
        "spec": {"slotsPerWorker": 1, "runPolicy": {"cleanPodPolicy": "None"},
                 "mpiReplicaSpecs": {
                     "Launcher": {"replicas": 1,
                                  "template": _pod_template("launcher", duration="3s")},
                     "Worker": {"replicas": 2,
                                "template": _pod_template("worker", 1, restart="OnFailure")}}},
    }))
    by = _placed(lab, ns, "training.kubeflow.org/job-role", {"worker": 2, "launcher": 1})
    assert _gpu_nodes(by["worker"]) <= {"a100-0", "l4-0"}
    assert _gpu_nodes(by["launcher"]) <= {"cpu-0", "cpu-1"}
    wait_for(lambda: _condition(lab.get("mpijob", "pi", "-n", ns), "Succeeded"), 120,
             "MPIJob pi Succeeded", 0.5)


def test_rayjob_brings_up_its_raycluster(lab: LabHandle, operators: set[str]) -> None:
    """KubeRay v1.6.0: a RayJob creates its RayCluster, whose head (CPU) and 2 GPU workers run on
    kwok nodes."""
    need(operators, "kuberay")
    ns = _namespace(lab, "op-ray")

    def group_template(name: str, gpu: int) -> dict[str, Any]:
        t = _pod_template(name, gpu, restart="Always")
        t["spec"]["containers"][0]["image"] = "rayproject/ray:2.46.0"
        del t["spec"]["restartPolicy"]
        return t

    lab.apply(json.dumps({
        "apiVersion": "ray.io/v1", "kind": "RayJob",
        "metadata": {"name": "tune", "namespace": ns},
        "spec": {"entrypoint": "python -c 'print(1)'", "rayClusterSpec": {
            "headGroupSpec": {"rayStartParams": {}, "template": group_template("ray-head", 0)},
            "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "minReplicas": 2,
                                  "maxReplicas": 2, "rayStartParams": {},
                                  "template": group_template("ray-worker", 1)}]}},
    }))
    by = _placed(lab, ns, "ray.io/node-type", {"head": 1, "worker": 2})
    assert _gpu_nodes(by["worker"]) <= {"a100-0", "l4-0"}
    assert _gpu_nodes(by["head"]) <= {"cpu-0", "cpu-1"}
    clusters = lab.get("rayclusters", "-n", ns)["items"]
    assert len(clusters) == 1
    assert clusters[0]["metadata"]["ownerReferences"][0]["kind"] == "RayJob"


def test_operators_down_unregisters_their_webhooks(lab: LabHandle, operators: set[str]) -> None:
    """The webhook configurations the lab registered for the operators carry its label, so
    ``operators-down`` (and a reader) can find exactly them."""
    if not {"jobset", "training-operator"} & operators:
        pytest.skip("neither jobset nor training-operator built: run `make operators`")
    names = {w["metadata"]["name"] for kind in ("mutatingwebhookconfigurations",
                                                "validatingwebhookconfigurations")
             for w in lab.get(kind, "-l", f"app.kubernetes.io/part-of={ops.PART_OF}")["items"]}
    want = {name for op in operators for _kind, name in ops.WEBHOOKS.get(op, [])}
    assert names == want


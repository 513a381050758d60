"""SparkApplication (Kubeflow spark-operator v2.5.0) through pykueue.

Without the operator (its CRD alone, from the operator's cache or the Go module cache): a
queued SparkApplication is created suspended, admitted whole (driver 1 + its executors), started
with the flavor in its roles' fields; one that does not fit waits whole, suspended, with the
shortfall in numbers; raising an admitted one's executors stops it (its fields restored) and
queues it again at its new size, which lets the waiting one start; deleting one lets the next
start. With the real
spark-operator (``make operators``: its controller, which runs a real ``spark-submit`` of
Spark 4.0.1 in cluster mode, and its pod webhook). On the lab (kwok) the driver pod never runs
Spark, so no executor is ever made: what is proven is the driver pod spark-submit creates once
pykueue admits the SparkApplication, on the flavor's node with its nodeSelector and toleration
(through the driver's fields, which the operator's pod webhook applies), the quota reserved for
the driver and every executor, one that does not fit waiting whole with no pod and a reason
with numbers, an edit raising the executors of an admitted one stopping it and queueing it
again at its new size, deleting one letting the next start, and the refusals of Kueue's
webhook. Skipped when the operator is not built."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import operators as ops
import pytest

from tests.e2e.conftest import gpu_queue, operators_running
from tests.e2e.test_jobset import A100, condition, drop, owned_workload
from tests.e2e.test_workload_kinds import LONG, TOLERATION
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab
QUEUE = "kueue.x-k8s.io/queue-name"
APP_LABEL = "sparkoperator.k8s.io/app-name"
FLAVOR_TOLERATION = {"key": "pykueue.dev/spark", "operator": "Exists", "effect": "NoSchedule"}
KIND = "SparkApplication"


def crd_files() -> list[Path]:
    """The spark-operator's CRDs: from its build in the operators' cache, else from the Go
    module cache (``go mod download`` of github.com/kubeflow/spark-operator/v2 v2.5.0, which
    the build does first); [] when neither has them."""
    op = ops.OPERATORS["spark-operator"]
    if op.crds():
        return op.crds()
    try:
        mod = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True,
                             check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return []
    bases = Path(mod) / f"github.com/kubeflow/spark-operator/v2@{op.version}/config/crd/bases"
    return sorted(bases.glob("sparkoperator.k8s.io_*.yaml"))


@pytest.fixture(scope="module")
def spark_crd(lab: LabHandle) -> None:
    """The SparkApplication CRDs served, before pykueue starts (it watches served kinds)."""
    files = crd_files()
    if not files:
        pytest.skip("the spark-operator's CRDs are neither built (make operators) nor in the "
                    "Go module cache")
    lab.kubectl("apply", "--server-side", "--force-conflicts",
                *[a for f in files for a in ("-f", str(f))])
    wait_for(lambda: lab.kubectl("get", "crd", "sparkapplications.sparkoperator.k8s.io", "-o",
                                 "jsonpath={.status.conditions[?(@.type==\"Established\")]"
                                 ".status}", check=False).stdout.strip() == "True",
             60, "the SparkApplication CRD Established")


@pytest.fixture(scope="module")
def crd_queue(lab: LabHandle, spark_crd: None, pykueue_in_lab: object) -> Iterator[str]:
    """As ``spark_queue`` (2 GPUs on the A100 flavor), no operator."""
    suffix = uuid.uuid4().hex[:6]
    ns, cq, rf = f"sparkq-{suffix}", f"sparkq-cq-{suffix}", f"sparkq-rf-{suffix}"
    lab.create_namespace(ns)
    gpu_queue(lab, ns, cq, rf, 2, {"nodeLabels": A100, "tolerations": [FLAVOR_TOLERATION]})
    try:
        yield ns
    finally:
        drop(lab, ns, cq)
        lab.kubectl("delete", "resourceflavor", rf, "--wait=false", check=False)


@contextmanager
def spark_namespace(lab: LabHandle, prefix: str, gpus: int = 2,
                    flavor: dict | None = None) -> Iterator[tuple[str, str]]:
    """(namespace with LocalQueue ``lq``, its ClusterQueue): ``gpus`` GPUs on a flavor of its
    own (default: the A100 node's labels and a toleration of its own) and 64Gi of memory. The
    operator's defaulting webhook gives each role `memory: 1g` (Spark's default), which Kueue
    counts: the ClusterQueue covers memory too (room for every app here). Deleted after."""
    suffix = uuid.uuid4().hex[:6]
    ns, cq, rf = f"{prefix}-{suffix}", f"{prefix}-cq-{suffix}", f"{prefix}-rf-{suffix}"
    lab.create_namespace(ns)
    gpu_queue(lab, ns, cq, rf, gpus,
              flavor or {"nodeLabels": A100, "tolerations": [FLAVOR_TOLERATION]})
    lab.kubectl("patch", "clusterqueue", cq, "--type=json", "-p", json.dumps([
        {"op": "add", "path": "/spec/resourceGroups/0/coveredResources/-", "value": "memory"},
        {"op": "add", "path": "/spec/resourceGroups/0/flavors/0/resources/-",
         "value": {"name": "memory", "nominalQuota": "64Gi"}}]))
    try:
        yield ns, cq
    finally:
        drop(lab, ns, cq)
        lab.kubectl("delete", "resourceflavor", rf, "--wait=false", check=False)


@pytest.fixture(scope="module")
def spark_operator(lab: LabHandle, spark_crd: None) -> Iterator[None]:
    """The spark-operator running (its CRDs served before pykueue starts)."""
    with operators_running(lab, "spark-operator"):
        yield


@pytest.fixture(scope="module")
def spark_queue(lab: LabHandle, spark_operator: None, pykueue_in_lab: object) -> Iterator[str]:
    """The spark-operator running, and a namespace with LocalQueue ``lq`` to a ClusterQueue of
    2 GPUs on a flavor of the A100 node that adds a toleration of its own."""
    with spark_namespace(lab, "spark") as (ns, _):
        yield ns


def sparkapp(name: str, ns: str, executors: int, **spec: object) -> str:
    """A SparkPi SparkApplication queued in ``lq``, created unsuspended (pykueue's webhook
    suspends it): a driver and ``executors`` executors of 1 GPU each."""
    gpu = {"name": "nvidia.com/gpu", "quantity": 1}
    return json.dumps({
        "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": KIND,
        "metadata": {"name": name, "namespace": ns, "labels": {QUEUE: "lq"}},
        "spec": {"type": "Scala", "mode": "cluster", "image": "spark:4.0.1",
                 "sparkVersion": "4.0.1", "mainClass": "org.apache.spark.examples.SparkPi",
                 "mainApplicationFile": "local:///opt/spark/examples/jars/spark-examples.jar",
                 "suspend": False,
                 "driver": {"gpu": gpu, "tolerations": [TOLERATION],
                            "annotations": LONG["annotations"]},
                 "executor": {"instances": executors, "gpu": gpu, "tolerations": [TOLERATION]},
                 **spec}})


def drivers(lab: LabHandle, ns: str, name: str) -> list[dict]:
    """The driver pods of SparkApplication ``name`` that are not finished."""
    return [p for p in lab.get("pods", "-n", ns, "-l", f"{APP_LABEL}={name},spark-role=driver")
            ["items"] if p["status"].get("phase") in ("Pending", "Running")]


def admitted(lab: LabHandle, ns: str, name: str) -> dict | None:
    w = owned_workload(lab, ns, KIND, name)
    c = condition(w, "Admitted")
    return w if c and c["status"] == "True" else None


def pending(lab: LabHandle, ns: str, name: str) -> dict | None:
    """The QuotaReserved=False condition of ``name``'s Workload, or None."""
    c = condition(owned_workload(lab, ns, KIND, name), "QuotaReserved")
    return c if c and c["status"] == "False" else None


def get_app(lab: LabHandle, ns: str, name: str) -> dict:
    return lab.get("sparkapplication", name, "-n", ns)


def test_a_sparkapplication_is_queued_whole_started_with_the_flavor_and_requeued_when_grown(
        lab: LabHandle, crd_queue: str) -> None:
    ns = crd_queue
    lab.apply(sparkapp("pi", ns, 1))
    assert get_app(lab, ns, "pi")["spec"]["suspend"] is True or admitted(lab, ns, "pi")
    wl = wait_for(lambda: admitted(lab, ns, "pi"), 60, "pi's Workload admitted")
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("driver", 1),
                                                                       ("executor", 1)]
    usage = {a["name"]: a["resourceUsage"]["nvidia.com/gpu"]
             for a in wl["status"]["admission"]["podSetAssignments"]}
    assert usage == {"driver": "1", "executor": "1"}, usage
    app = wait_for(lambda: (a := get_app(lab, ns, "pi"))["spec"]["suspend"] is False and a,
                   60, "pi started")
    for role in ("driver", "executor"):
        spec = app["spec"][role]
        assert spec["nodeSelector"] == A100, spec
        assert FLAVOR_TOLERATION in spec["tolerations"] and TOLERATION in spec["tolerations"]
        assert spec["labels"] == {"kueue.x-k8s.io/podset": role}

    lab.apply(sparkapp("next", ns, 1))
    qr = wait_for(lambda: pending(lab, ns, "next"), 60, "next's Workload pending")
    assert "nvidia.com/gpu" in qr["message"] and "2" in qr["message"], qr
    assert get_app(lab, ns, "next")["spec"]["suspend"] is True

    lab.kubectl("patch", "sparkapplication", "pi", "-n", ns, "--type=merge",
                "-p", '{"spec":{"executor":{"instances":3}}}')
    stopped = wait_for(lambda: (a := get_app(lab, ns, "pi"))["spec"]["suspend"] is True and a,
                       60, "pi stopped")
    assert "nodeSelector" not in stopped["spec"]["driver"]
    assert stopped["spec"]["executor"]["tolerations"] == [TOLERATION]
    big = wait_for(lambda: (w := owned_workload(lab, ns, KIND, "pi"))
                   and [p["count"] for p in w["spec"]["podSets"]] == [1, 3]
                   and (c := condition(w, "QuotaReserved")) and c["status"] == "False" and c,
                   90, "pi's new Workload (4 GPUs) pending")
    # The driver takes 1 of the 2 GPUs; the 3 executors do not fit the other.
    assert "nvidia.com/gpu" in big["message"] and "3 requested > maximum capacity 1" \
        in big["message"], big
    wait_for(lambda: admitted(lab, ns, "next"), 60, "next admitted in the freed quota")

    lab.apply(sparkapp("last", ns, 1))
    wait_for(lambda: pending(lab, ns, "last"), 60, "last's Workload pending behind next")
    lab.kubectl("delete", "sparkapplication", "next", "-n", ns, "--wait=false")
    wait_for(lambda: admitted(lab, ns, "last"), 60, "last admitted once next is deleted")
    assert pending(lab, ns, "pi")
    lab.kubectl("delete", "sparkapplication", "--all", "-n", ns, "--wait=true")


def test_a_sparkapplication_is_queued_whole_and_its_driver_lands_on_the_flavor(
        lab: LabHandle, spark_queue: str) -> None:
    ns = spark_queue
    # driver 1 + executor 1 = the whole 2-GPU queue.
    lab.apply(sparkapp("pi", ns, 1))
    wl = wait_for(lambda: admitted(lab, ns, "pi"), 60, "pi's Workload admitted")
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("driver", 1),
                                                                       ("executor", 1)]
    usage = {a["name"]: a["resourceUsage"]["nvidia.com/gpu"]
             for a in wl["status"]["admission"]["podSetAssignments"]}
    assert usage == {"driver": "1", "executor": "1"}, usage
    # spark-submit (through the operator) creates the driver pod, on the flavor's node.
    pod = wait_for(lambda: (d := drivers(lab, ns, "pi")) and d[0]["spec"].get("nodeName")
                   and d[0]["status"].get("phase") == "Running" and d[0],
                   180, "pi's driver pod running")
    assert pod["spec"]["nodeName"] == "a100-0"
    assert pod["spec"]["nodeSelector"] == A100
    assert FLAVOR_TOLERATION in pod["spec"]["tolerations"]
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "driver"
    assert [r["kind"] for r in pod["metadata"]["ownerReferences"]] == [KIND]
    wait_for(lambda: lab.get("sparkapplication", "pi", "-n", ns).get("status", {})
             .get("applicationState", {}).get("state") == "RUNNING", 60, "pi RUNNING")

    # "next" (2 GPUs) waits whole behind pi: suspended, no driver, a reason with numbers.
    lab.apply(sparkapp("next", ns, 1))
    qr = wait_for(lambda: pending(lab, ns, "next"), 60, "next's Workload pending")
    assert "nvidia.com/gpu" in qr["message"] and "2" in qr["message"], qr
    assert lab.get("sparkapplication", "next", "-n", ns)["spec"]["suspend"] is True
    assert not drivers(lab, ns, "next")

    # Raising pi's executors after its admission: pi no longer matches its Workload; it is
    # stopped (driver gone) and queued again at 1 + 3 GPUs, which never fit the 2-GPU queue,
    # and "next" takes the freed quota.
    lab.kubectl("patch", "sparkapplication", "pi", "-n", ns, "--type=merge",
                "-p", '{"spec":{"executor":{"instances":3}}}')
    wait_for(lambda: lab.get("sparkapplication", "pi", "-n", ns)["spec"]["suspend"] is True,
             60, "pi suspended")
    wait_for(lambda: not drivers(lab, ns, "pi"), 90, "pi's driver pod gone")
    big = wait_for(lambda: (w := owned_workload(lab, ns, KIND, "pi"))
                   and [p["count"] for p in w["spec"]["podSets"]] == [1, 3]
                   and (c := condition(w, "QuotaReserved")) and c["status"] == "False" and c,
                   90, "pi's new Workload (4 GPUs) pending")
    # The driver takes 1 of the 2 GPUs; the 3 executors do not fit the other.
    assert "nvidia.com/gpu" in big["message"] and "3 requested > maximum capacity 1" \
        in big["message"], big
    wait_for(lambda: (d := drivers(lab, ns, "next")) and d[0]["spec"].get("nodeName")
             == "a100-0", 180, "next's driver pod placed")

    # Deleting next frees its quota: "last" starts; pi still waits.
    lab.apply(sparkapp("last", ns, 1))
    wait_for(lambda: pending(lab, ns, "last"), 60, "last's Workload pending behind next")
    lab.kubectl("delete", "sparkapplication", "next", "-n", ns, "--wait=false")
    wait_for(lambda: (d := drivers(lab, ns, "last")) and d[0]["spec"].get("nodeName")
             == "a100-0", 180, "last's driver pod placed")
    assert pending(lab, ns, "pi") and not drivers(lab, ns, "pi")
    for name in ("pi", "last"):
        lab.kubectl("delete", "sparkapplication", name, "-n", ns, "--wait=false")


def test_kueues_refusals_of_a_queued_sparkapplication(lab: LabHandle, crd_queue: str) -> None:
    ns = crd_queue
    client = lab.kubectl("apply", "-f", "-", input=sparkapp("client", ns, 1, mode="client"),
                         check=False)
    assert client.returncode != 0 and "only Cluster mode" in client.stderr, client
    dyn = lab.kubectl("apply", "-f", "-", input=sparkapp(
        "dyn", ns, 1, dynamicAllocation={"enabled": True, "maxExecutors": 4}), check=False)
    assert dyn.returncode != 0 and "dynamicAllocation" in dyn.stderr, dyn


def test_a_higher_priority_job_preempts_an_admitted_sparkapplication_whole(
        lab: LabHandle, spark_operator: None, pykueue_in_lab: object) -> None:
    """An admitted SparkApplication (driver 1 + executor 1 GPU, priority 0) fills its 2-GPU
    ClusterQueue; a batch Job of a WorkloadPriorityClass of 1000 asking 1 GPU preempts it
    (Kueue v0.17.1 ``withinClusterQueue: LowerPriority``): its Workload is Evicted
    (``Preempted``) and pending again, the SparkApplication suspended with its roles' fields
    as written, its driver pod gone; the Job's pod runs; once the Job is deleted the
    SparkApplication is admitted again and a new driver runs."""
    high = f"spark-high-{uuid.uuid4().hex[:6]}"
    lab.apply(json.dumps({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
                          "metadata": {"name": high}, "value": 1000}))
    try:
        with spark_namespace(lab, "sparkp") as (ns, cq):
            lab.kubectl("patch", "clusterqueue", cq, "--type=merge", "-p", json.dumps(
                {"spec": {"preemption": {"withinClusterQueue": "LowerPriority"}}}))
            lab.apply(sparkapp("low", ns, 1))
            first = wait_for(lambda: (d := drivers(lab, ns, "low"))
                             and d[0]["status"].get("phase") == "Running" and d[0],
                             180, "low's driver pod running")
            gpu = {"nvidia.com/gpu": "1"}
            lab.apply(json.dumps({"apiVersion": "batch/v1", "kind": "Job", "metadata": {
                "name": "urgent", "namespace": ns,
                "labels": {QUEUE: "lq", "kueue.x-k8s.io/priority-class": high}},
                "spec": {"template": {"metadata": LONG, "spec": {
                    "restartPolicy": "Never", "tolerations": [TOLERATION],
                    "containers": [{"name": "c", "image": "busybox",
                                    "resources": {"requests": gpu, "limits": gpu}}]}}}}))
            evicted = wait_for(lambda: (c := condition(owned_workload(lab, ns, KIND, "low"),
                                                       "Evicted")) and c["status"] == "True"
                               and c, 60, "low's Workload evicted")
            assert evicted["reason"] == "Preempted", evicted
            app = wait_for(lambda: (a := get_app(lab, ns, "low"))["spec"]["suspend"] is True
                           and a, 30, "low suspended")
            assert "nodeSelector" not in app["spec"]["driver"], app["spec"]["driver"]
            assert app["spec"]["executor"]["tolerations"] == [TOLERATION]
            wait_for(lambda: not drivers(lab, ns, "low"), 90, "low's driver pod gone")
            wait_for(lambda: [p["status"].get("phase") for p in lab.get(
                "pods", "-n", ns, "-l", "job-name=urgent")["items"]] == ["Running"], 90,
                "urgent's pod running")
            wl = owned_workload(lab, ns, KIND, "low")
            assert condition(wl, "QuotaReserved")["status"] == "False", wl["status"]
            assert not wl["status"].get("admission"), wl["status"]
            assert not drivers(lab, ns, "low")
            # The preemptor gone, low is admitted again whole and spark-submit runs a new driver.
            lab.kubectl("delete", "job", "urgent", "-n", ns, "--wait=false")
            again = wait_for(lambda: (d := drivers(lab, ns, "low"))
                             and d[0]["status"].get("phase") == "Running" and d[0],
                             180, "low's new driver pod running")
            assert again["metadata"]["uid"] != first["metadata"]["uid"]
            assert admitted(lab, ns, "low")
    finally:
        lab.kubectl("delete", "workloadpriorityclass", high, "--wait=false", check=False)

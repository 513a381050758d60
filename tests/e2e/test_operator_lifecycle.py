"""Issue 18, the queueing lifecycle of the operators' kinds with the real operators on the lab
(``make operators``: JobSet v0.11.1, training-operator v1.9.3, mpi-operator v0.8.0, KubeRay
v1.6.0, trainer v2.2.0), parametrized over PyTorchJob, TFJob, MPIJob, JobSet, RayCluster,
RayJob, RayService and TrainJob, each object asking 2 GPUs in all (Kueue's "Run a JobSet /
Kubeflow Jobs / MPIJob / RayJob / RayCluster" pages):

- started by itself when quota frees: A fills the queue, B (another namespace, same
  ClusterQueue) waits whole, suspended with no pod; A deleted, B is admitted and its pods run;
- preempted whole by reclaim and re-admitted: two ClusterQueues in a cohort, the borrower's
  object borrows all the lender's GPUs, the lender (``reclaimWithinCohort: Any``) submits, the
  borrower is evicted whole (suspended, every pod gone, its pod templates as submitted) and is
  re-admitted when the lender's object is deleted;
- finishing frees the quota, for the kinds whose operator finishes under kwok: PyTorchJob,
  TFJob, MPIJob and JobSet. The lab's kwok stage ends every pod carrying
  ``lab.pykueue.dev/run-duration`` (Succeeded) after that duration, whatever owns it, so the
  operator itself decides the job succeeded (its own condition), pykueue marks the Workload
  Finished and the waiting object starts by itself. A RayJob cannot finish under kwok: KubeRay
  reads the job's status from the Ray head's dashboard, which kwok's pods do not serve; a
  RayCluster never finishes (stopping it frees the quota: the started-by-itself case).

The pods of A and of the borrower last an hour (``run-duration: 1h``) so that only the step
under test frees their quota. Each case skips with the reason when its operator is not built,
or (MPIJob) when another lab holds port 8080, which mpi-operator hard-codes.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from tests.e2e.test_breaker12_findings import training_runtime, trainjob
from tests.e2e.test_jobset import A100, QUEUE, condition, drop, jobset, owned_workload
from tests.e2e.test_kubeflow import admitted, mpijob, need, pytorchjob, template
from tests.e2e.test_ray import cpu_and_gpu_groups, rayjob, rayservice
from tests.integration.test_operators import operators_running
from tests.labfixture import ROOT, LabHandle, wait_for

sys.path.insert(0, str(ROOT / "hack"))
import lab as labmod  # noqa: E402

pytestmark = pytest.mark.lab
DURATION = "lab.pykueue.dev/run-duration"


def lasting(obj: Any, duration: str) -> Any:
    """``obj`` with every ``lab.pykueue.dev/run-duration`` annotation set to ``duration``."""
    if isinstance(obj, dict):
        return {k: (duration if k == DURATION else lasting(v, duration)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [lasting(v, duration) for v in obj]
    return obj


def tfjob(name: str, ns: str) -> dict[str, Any]:
    """A TFJob queued in ``lq``: Worker 2 x 1 GPU (container ``tensorflow``, as the
    training-operator requires)."""
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
            "metadata": {"name": name, "namespace": ns, "labels": {QUEUE: "lq"}},
            "spec": {"tfReplicaSpecs": {"Worker": {
                "replicas": 2, "restartPolicy": "OnFailure",
                "template": template(1, name="tensorflow")}}}}


def raycluster(name: str, ns: str) -> dict[str, Any]:
    """A RayCluster queued on its own in ``lq``: a 1-CPU head and 2 x 1 GPU workers."""
    job = json.loads(rayjob(name, ns, 2))
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": job["metadata"],
            "spec": job["spec"]["rayClusterSpec"]}


def rayjob_lasting(name: str, ns: str) -> dict[str, Any]:
    """``test_ray.rayjob`` with 2 GPU workers and a submitter template of its own (KubeRay's
    default requests, 500m / 200Mi) carrying the run-duration annotation: the submitter pod
    belongs to a Job, which kwok would otherwise end after 3 s."""
    job = json.loads(rayjob(name, ns, 2))
    job["spec"]["submitterPodTemplate"] = {
        "metadata": {"annotations": {DURATION: "2s"}},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "ray-job-submitter", "image": "rayproject/ray:2.46.0",
            "resources": {"requests": {"cpu": "500m", "memory": "200Mi"}}}]}}
    return job


@dataclass(frozen=True)
class Case:
    """One kind: ``make(name, ns)`` a queued object asking 2 GPUs in all that runs ``pods``
    pods; ``lever``: the path of its suspend field; ``operator``: hack/operators.py's name;
    ``done``: the condition its operator sets when it succeeds (none: it cannot on the lab)."""

    kind: str
    resource: str
    operator: str
    lever: tuple[str, ...]
    make: Callable[[str, str], dict[str, Any]]
    pods: int
    done: str = ""

    def manifest(self, name: str, ns: str, duration: str) -> str:
        return json.dumps(lasting(self.make(name, ns), duration))

    def suspended(self, obj: dict[str, Any]) -> bool:
        cur: Any = obj
        for key in self.lever:
            cur = (cur or {}).get(key)
        return cur is True


RUN_POLICY, SPEC = ("spec", "runPolicy", "suspend"), ("spec", "suspend")
CASES = [
    Case("PyTorchJob", "pytorchjob", "training-operator", RUN_POLICY,
         lambda n, ns: json.loads(pytorchjob(n, ns, 1)), 2, "Succeeded"),  # Master 1 + Worker 1
    Case("TFJob", "tfjob", "training-operator", RUN_POLICY, tfjob, 2, "Succeeded"),
    Case("MPIJob", "mpijob", "mpi-operator", RUN_POLICY,  # launcher (no GPU) + 2 workers
         lambda n, ns: json.loads(mpijob(n, ns, 2)), 3, "Succeeded"),
    Case("JobSet", "jobset", "jobset", SPEC,  # 1 Job of 2 pods
         lambda n, ns: json.loads(jobset(n, ns, ("w", 1, 2))), 2, "Completed"),
    Case("RayCluster", "raycluster", "kuberay", SPEC, raycluster, 3),  # head + 2 workers
    Case("RayJob", "rayjob", "kuberay", SPEC, rayjob_lasting, 3),  # head + 2 (+ submitter)
    # Its lever is its cluster config's; KubeRay copies it onto the RayCluster it makes.
    Case("RayService", "rayservice", "kuberay", ("spec", "rayClusterConfig", "suspend"),
         lambda n, ns: json.loads(rayservice(n, ns, 2)), 3),  # head + 2 workers
    # Sent with its own TrainingRuntime (2 nodes of 1 GPU); the trainer makes a JobSet.
    Case("TrainJob", "trainjob", "trainer", SPEC, lambda n, ns: {
        "apiVersion": "v1", "kind": "List",
        "items": [json.loads(training_runtime(ns, 2, 1)), json.loads(trainjob(n, ns))]}, 2),
]
BY_KIND = {c.kind: c for c in CASES}
FINISHING = [c for c in CASES if c.done]


def ids(case: Case) -> str:
    return case.kind


@pytest.fixture(scope="module")
def lifecycle_operators(lab: LabHandle) -> Iterator[tuple[set[str], str]]:
    """Every built operator in the lab, before pykueue starts (a CRD installed later is
    picked up only at pykueue's next discovery poll); mpi-operator left out when port 8080 is
    taken."""
    with operators_running(lab, ["jobset", "training-operator", "mpi-operator",
                                 "kuberay", "trainer"]) as started:
        yield started


@pytest.fixture(scope="module")
def pykueue_with_operators(lifecycle_operators: tuple[set[str], str],
                           pykueue_in_lab: Any) -> tuple[set[str], str]:
    return lifecycle_operators


@contextmanager
def queues(lab: LabHandle, prefix: str, *, cohort: bool) -> Iterator[tuple[str, str]]:
    """Namespaces (a, b), each with LocalQueue ``lq``, deleted afterwards with their pods.
    Not ``cohort``: both to one ClusterQueue of 2 A100s. ``cohort``: a's ClusterQueue has no
    GPU of its own (its objects borrow), b's lends 2 A100s and reclaims them
    (``reclaimWithinCohort: Any``). Every ClusterQueue also has 4 CPUs / 8Gi on default-flavor
    (Ray heads and submitters)."""
    tag = uuid.uuid4().hex[:6]
    names = [(f"{prefix}-a-{tag}", f"{prefix}-a-cq-{tag}"),
             (f"{prefix}-b-{tag}", f"{prefix}-a-cq-{tag}" if not cohort else
              f"{prefix}-b-cq-{tag}")]
    items: list[dict[str, Any]] = []
    for i, (ns, cq) in enumerate(names):
        lab.create_namespace(ns)
        items.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                      "metadata": {"name": "lq", "namespace": ns}, "spec": {"clusterQueue": cq}})
        if i == 1 and not cohort:
            continue  # b shares a's ClusterQueue
        spec: dict[str, Any] = {"namespaceSelector": {}, "resourceGroups": cpu_and_gpu_groups(
            0 if cohort and i == 0 else 2)}
        if cohort:
            spec["cohortName"] = f"{prefix}-co-{tag}"
            if i == 1:
                spec["preemption"] = {"reclaimWithinCohort": "Any"}
        items.insert(0, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
                         "metadata": {"name": cq}, "spec": spec})
    lab.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    try:
        yield names[0][0], names[1][0]
    finally:
        for ns, cq in names:
            drop(lab, ns, cq)


def runs(lab: LabHandle, ns: str, case: Case) -> None:
    """``case.pods`` pods of the object in ``ns`` run; those asking GPUs on a100-0 with the
    A100 flavor's nodeSelector."""
    def running() -> list[dict]:
        return [p for p in lab.get("pods", "-n", ns)["items"]
                if p["spec"].get("nodeName") and p["status"].get("phase") == "Running"
                and not p["metadata"].get("deletionTimestamp")]
    pods = wait_for(lambda: len(r := running()) >= case.pods and r, 90,
                    f"{case.pods} pods of the {case.kind} in {ns} running")
    gpu = [p for p in pods if any("nvidia.com/gpu" in ((c.get("resources") or {}).get(
        "requests") or {}) for c in p["spec"]["containers"])]
    assert len(gpu) == 2, [p["metadata"]["name"] for p in pods]
    assert {p["spec"]["nodeName"] for p in gpu} == {"a100-0"}
    assert all(p["spec"]["nodeSelector"] == A100 for p in gpu)


def waits_whole(lab: LabHandle, ns: str, case: Case, name: str) -> None:
    """The object's Workload is pending on GPUs, the object suspended, no pod in ``ns``."""
    qr = wait_for(lambda: (c := condition(owned_workload(lab, ns, case.kind, name),
                                          "QuotaReserved")) and c["status"] == "False" and c,
                  60, f"{case.kind} {name}'s Workload pending")
    assert "nvidia.com/gpu" in qr["message"], qr
    assert case.suspended(lab.get(case.resource, name, "-n", ns))
    assert lab.get("pods", "-n", ns)["items"] == []


def pod_templates(obj: Any) -> list[str]:
    """What pykueue writes into and restores in each pod template of ``obj``: its metadata,
    nodeSelector and tolerations, as sorted JSON (the API server may reorder keys)."""
    if isinstance(obj, list):
        return sorted(t for v in obj for t in pod_templates(v))
    if not isinstance(obj, dict):
        return []
    spec = obj.get("spec")
    if isinstance(spec, dict) and "containers" in spec:
        return [json.dumps([obj.get("metadata"), spec.get("nodeSelector"),
                            spec.get("tolerations")], sort_keys=True)]
    return sorted(t for v in obj.values() for t in pod_templates(v))


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_started_by_itself_when_the_quota_frees(
        lab: LabHandle, pykueue_with_operators: tuple[set[str], str], case: Case) -> None:
    need(pykueue_with_operators, case.operator)
    with queues(lab, "lc-free", cohort=False) as (ns_a, ns_b):
        lab.apply(case.manifest("a", ns_a, "1h"))
        admitted(lab, ns_a, case.kind, "a")
        runs(lab, ns_a, case)
        lab.apply(case.manifest("b", ns_b, "1h"))
        waits_whole(lab, ns_b, case, "b")
        lab.kubectl("delete", case.resource, "a", "-n", ns_a, "--wait=false")
        admitted(lab, ns_b, case.kind, "b")
        runs(lab, ns_b, case)


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_preempted_whole_by_reclaim_and_readmitted(
        lab: LabHandle, pykueue_with_operators: tuple[set[str], str], case: Case) -> None:
    need(pykueue_with_operators, case.operator)
    with queues(lab, "lc-reclaim", cohort=True) as (borrower, lender):
        sent = case.manifest("x", borrower, "1h")
        lab.apply(sent)
        wl = admitted(lab, borrower, case.kind, "x")  # on the lender's 2 GPUs
        runs(lab, borrower, case)
        lab.apply(case.manifest("y", lender, "1h"))
        preempted = wait_for(
            lambda: (c := condition(owned_workload(lab, borrower, case.kind, "x"),
                                    "Preempted")) and c["status"] == "True" and c,
            60, "x's Workload preempted")
        assert preempted["reason"] == "InCohortReclamation", preempted
        stopped = wait_for(lambda: case.suspended(o := lab.get(case.resource, "x", "-n",
                                                               borrower)) and o,
                           60, "x suspended")
        obj = json.loads(sent)
        obj = next(i for i in obj.get("items", [obj]) if i["kind"] == case.kind)
        assert pod_templates(stopped["spec"]) == pod_templates(obj["spec"])
        wait_for(lambda: not lab.get("pods", "-n", borrower)["items"], 90, "x's pods gone")
        admitted(lab, lender, case.kind, "y")
        runs(lab, lender, case)
        lab.kubectl("delete", case.resource, "y", "-n", lender, "--wait=false")
        again = admitted(lab, borrower, case.kind, "x")
        assert again["metadata"]["uid"] == wl["metadata"]["uid"]  # the same Workload
        runs(lab, borrower, case)


@pytest.mark.parametrize("case", FINISHING, ids=ids)
def test_finishing_frees_the_quota(
        lab: LabHandle, pykueue_with_operators: tuple[set[str], str], case: Case) -> None:
    need(pykueue_with_operators, case.operator)
    with queues(lab, "lc-finish", cohort=False) as (ns_a, ns_b):
        # A's pods end 10 s after they start: time enough to see B wait whole behind it.
        lab.apply(case.manifest("a", ns_a, "10s"))
        admitted(lab, ns_a, case.kind, "a")
        lab.apply(case.manifest("b", ns_b, "1h"))
        waits_whole(lab, ns_b, case, "b")
        finished = wait_for(lambda: (c := condition(owned_workload(lab, ns_a, case.kind, "a"),
                                                    "Finished")) and c["status"] == "True"
                            and c, 90, "a's Workload Finished")
        assert finished["reason"] == "Succeeded", finished
        # The operator decided it, from its pods' phases: its own success condition is True.
        assert condition(lab.get(case.resource, "a", "-n", ns_a), case.done)["status"] == "True"
        b = admitted(lab, ns_b, case.kind, "b")
        # B fits only once A's quota is back: admitted no earlier than A finished.
        assert condition(b, "Admitted")["lastTransitionTime"] >= finished["lastTransitionTime"]
        runs(lab, ns_b, case)


def test_a_kind_left_out_of_integrations_frameworks_runs_unqueued(
        lab: LabHandle, pykueue_with_operators: tuple[set[str], str]) -> None:
    """pykueue restarted with ``integrations.frameworks`` naming batch/job, pod and JobSet only
    (Kueue's Configuration): a labelled PyTorchJob passes the webhooks unchanged (not
    suspended), gets no Workload and its pods run at once; a labelled JobSet is still queued.
    Last in the module: it restarts pykueue as the other tests had it afterwards."""
    need(pykueue_with_operators, "training-operator")
    need(pykueue_with_operators, "jobset")
    handle = labmod.from_args(str(lab.state), lab.port_base, str(lab.bin_dir))
    labmod.pykueue_down(handle)
    try:
        labmod.pykueue_up(handle, extra_env={"PYKUEUE_INTEGRATIONS__FRAMEWORKS": json.dumps(
            ["batch/job", "pod", "jobset.x-k8s.io/jobset"])})
        with queues(lab, "lc-off", cohort=False) as (ns_a, ns_b):
            lab.apply(json.dumps(lasting(json.loads(pytorchjob("free", ns_a, 1)), "1h")))
            running = wait_for(lambda: len(r := [
                p for p in lab.get("pods", "-n", ns_a)["items"]
                if p["status"].get("phase") == "Running"]) == 2 and r, 90,
                "free's 2 pods running")
            assert all("nodeSelector" not in p["spec"] for p in running)  # no flavor injected
            assert not BY_KIND["PyTorchJob"].suspended(lab.get("pytorchjob", "free", "-n", ns_a))
            assert lab.get("workloads.kueue.x-k8s.io", "-n", ns_a)["items"] == []
            lab.apply(json.dumps(lasting(BY_KIND["JobSet"].make("queued", ns_b), "1h")))
            admitted(lab, ns_b, "JobSet", "queued")
            runs(lab, ns_b, BY_KIND["JobSet"])
    finally:
        labmod.pykueue_down(handle)
        labmod.pykueue_up(handle)

"""Issue 31, "Unqueued pods on flavor GPUs" for the operators' kinds, with the real JobSet
operator, training-operator and KubeRay and the setup docs/security.md describes ("Keeping
every unqueued pod off flavor GPUs": ``jobs.manage_jobs_without_queue_name`` on, every job
kind's webhooks seeing unlabelled objects). Before: an unlabelled JobSet, PyTorchJob or RayJob
of a managed namespace was not suspended and its operator ran its GPU pods outside any
quota. Now each is created suspended, its operator makes no pod, its Workload waits for a
LocalQueue and a tenant's unsuspend is refused; in a namespace outside
``managed_jobs_namespace_selector`` the same objects run as before."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.test_jobset import owned_workload
from tests.e2e.test_workload_kinds import gpu_container, gpu_queue
from tests.integration.test_operators import operators_running
from tests.labfixture import ROOT, LabHandle, wait_for

sys.path.insert(0, str(ROOT / "hack"))
import lab as labmod  # noqa: E402
import scenario  # noqa: E402

pytestmark = pytest.mark.lab
FREE = f"unmanaged-{uuid.uuid4().hex[:6]}"
TOLERATE = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
OPERATORS = ["jobset", "training-operator", "kuberay"]


@pytest.fixture(scope="module")
def strict_operators(lab: LabHandle) -> Iterator[set[str]]:
    """The three operators, then pykueue (so it sees their CRDs at start) managing unlabelled
    objects everywhere but the system namespaces and ``FREE``, its webhooks seeing them."""
    with operators_running(lab, OPERATORS) as (running, _):
        missing = set(OPERATORS) - running
        if missing:
            pytest.skip(f"{', '.join(sorted(missing))} not built: run `make operators`")
        handle = labmod.from_args(str(lab.state), lab.port_base, str(lab.bin_dir))
        labmod.pykueue_down(handle)
        scenario.prepare(handle)
        labmod.pykueue_up(handle, unlabelled=True, extra_env={
            "PYKUEUE_JOBS__MANAGE_JOBS_WITHOUT_QUEUE_NAME": "true",
            "PYKUEUE_JOBS__MANAGED_JOBS_NAMESPACE_SELECTOR": json.dumps({"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                 "values": ["kube-system", "pykueue-system", FREE]}]})})
        try:
            yield running
        finally:
            labmod.pykueue_down(handle)


def _pod_template() -> dict[str, Any]:
    return {"spec": {"restartPolicy": "Never", "tolerations": TOLERATE,
                     "containers": [gpu_container(1)]}}


def objects(ns: str) -> list[dict[str, Any]]:
    """An unlabelled JobSet (1 Job of 1 GPU pod), PyTorchJob (Master 1 GPU) and RayJob (head
    without GPU, 1 GPU worker), none suspended."""
    image = "rayproject/ray:2.46.0"
    return [
        {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
         "metadata": {"name": "js", "namespace": ns},
         "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {
             "parallelism": 1, "completions": 1, "backoffLimit": 0,
             "template": _pod_template()}}}]}},
        {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
         "metadata": {"name": "pt", "namespace": ns},
         "spec": {"pytorchReplicaSpecs": {"Master": {
             "replicas": 1, "restartPolicy": "OnFailure",
             "template": {"spec": {"tolerations": TOLERATE, "containers": [
                 {**gpu_container(1), "name": "pytorch"}]}}}}}},
        {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "rj", "namespace": ns},
         "spec": {"entrypoint": "python -c 'print(1)'", "shutdownAfterJobFinishes": True,
                  "rayClusterSpec": {
                      "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {
                          "containers": [{"name": "ray-head", "image": image,
                                          "resources": {"requests": {"cpu": "1"}}}]}}},
                      "workerGroupSpecs": [{"groupName": "gpu", "replicas": 1, "minReplicas": 0,
                                            "maxReplicas": 1, "rayStartParams": {},
                                            "template": {"spec": {
                                                "tolerations": TOLERATE, "containers": [
                                                    {**gpu_container(1), "name": "ray-worker",
                                                     "image": image}]}}}]}}},
    ]


RESUME = {"JobSet": ("jobset", {"spec": {"suspend": False}}),
          "PyTorchJob": ("pytorchjob", {"spec": {"runPolicy": {"suspend": False}}}),
          "RayJob": ("rayjob", {"spec": {"suspend": False}})}


def suspended(obj: dict[str, Any]) -> bool:
    spec = obj.get("spec") or {}
    return (spec.get("runPolicy") or {}).get("suspend") is True \
        if obj["kind"] == "PyTorchJob" else spec.get("suspend") is True


def test_unlabelled_operator_objects_wait_for_a_local_queue(
        lab: LabHandle, strict_operators: set[str]) -> None:
    ns, cq = gpu_queue(lab, "unq-ops", 4)
    lab.create_namespace(FREE)
    try:
        for where in (FREE, ns):
            lab.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects(where)}))
        # Outside the selector: as before, each operator makes its pods.
        wait_for(lambda: len(lab.get("pods", "-n", FREE)["items"]) >= 3, 90,
                 f"the JobSet's, PyTorchJob's and RayJob's pods in {FREE}")
        for obj in objects(FREE):
            assert not suspended(lab.get(RESUME[obj["kind"]][0], obj["metadata"]["name"],
                                         "-n", FREE))
        # In the managed namespace: stored suspended, a Workload without a LocalQueue each.
        for obj in objects(ns):
            plural, resume = RESUME[obj["kind"]]
            name = obj["metadata"]["name"]
            assert suspended(lab.get(plural, name, "-n", ns)), obj["kind"]
            wl = wait_for(lambda k=obj["kind"], n=name: owned_workload(lab, ns, k, n), 30,
                          f"the {obj['kind']}'s Workload")
            assert not wl["spec"].get("queueName") and not wl.get("status", {}).get("admission")
            # The tenant (anyone but pykueue) cannot resume it.
            r = lab.kubectl("patch", plural, name, "-n", ns, "--type", "merge", "-p",
                            json.dumps(resume), check=False)
            assert r.returncode != 0 and "only pykueue" in r.stderr, r.stderr
        # The operators, which made pods in FREE meanwhile, made none here.
        assert lab.get("pods", "-n", ns)["items"] == []
        # JobSet makes its child Job suspended; KubeRay no submitter and no cluster.
        assert [(j["metadata"]["name"], j["spec"].get("suspend")) for j in lab.get(
            "jobs", "-n", ns)["items"]] in ([], [("js-w-0", True)])
        assert lab.get("rayclusters", "-n", ns)["items"] == []
    finally:
        lab.kubectl("delete", "namespace", ns, FREE, "--wait=false")
        lab.kubectl("delete", "clusterqueue", cq, "--wait=false")


def test_admitted_operator_objects_run_every_pod_they_were_admitted_for(
        lab: LabHandle, strict_operators: set[str]) -> None:
    """Under the same setup the Pod webhook sees every pod the operators make, and holds
    those under a queued object to its admission (``app.controllers.pod_create_check``:
    podSet label, count, DRA claims). It lets each operator make all of them: a PyTorchJob
    of Master 1 + Worker 2 (training-operator), a RayCluster of a head and 2 workers
    (KubeRay), a JobSet's Job of 1 pod: 7 pods Running, 6 GPUs of a queue of 6."""
    ns, cq = gpu_queue(lab, "unq-adm", 6)
    queue = {"kueue.x-k8s.io/queue-name": "lq"}
    gpu_pod = {"spec": {"tolerations": TOLERATE, "containers": [
        {**gpu_container(1), "name": "pytorch"}]}}
    image = "rayproject/ray:2.46.0"
    items = [
        {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
         "metadata": {"name": "pt", "namespace": ns, "labels": queue},
         "spec": {"pytorchReplicaSpecs": {
             "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": gpu_pod},
             "Worker": {"replicas": 2, "restartPolicy": "OnFailure", "template": gpu_pod}}}},
        {"apiVersion": "ray.io/v1", "kind": "RayCluster",
         "metadata": {"name": "rc", "namespace": ns, "labels": queue},
         "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": {
             "containers": [{"name": "ray-head", "image": image}]}}},
             "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "minReplicas": 0,
                                   "maxReplicas": 2, "rayStartParams": {},
                                   "template": {"spec": {"tolerations": TOLERATE, "containers": [
                                       {**gpu_container(1), "name": "ray-worker",
                                        "image": image}]}}}]}},
        {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
         "metadata": {"name": "js", "namespace": ns, "labels": queue},
         "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {
             "parallelism": 1, "completions": 1, "backoffLimit": 0,
             "template": {"spec": {"restartPolicy": "Never", "tolerations": TOLERATE,
                                   "containers": [gpu_container(1)]}}}}}]}},
    ]
    try:
        lab.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))

        def running() -> list[str]:
            return sorted(p["metadata"]["name"] for p in lab.get("pods", "-n", ns)["items"]
                          if p["status"].get("phase") == "Running")
        names = wait_for(lambda: len(r := running()) >= 7 and r, 120,
                         "the PyTorchJob's 3, the RayCluster's 3 and the JobSet's pod Running")
        assert len(names) == 7, names
        events = lab.get("events", "-n", ns)["items"]
        refused = [e.get("message", "") for e in events if "pykueue" in e.get("message", "")
                   and "denied" in e.get("message", "")]
        assert refused == [], refused  # no operator's create was turned away on the way
    finally:
        lab.kubectl("delete", "namespace", ns, "--wait=false")
        lab.kubectl("delete", "clusterqueue", cq, "--wait=false")

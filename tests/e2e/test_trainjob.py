"""TrainJob (Kubeflow Trainer v2.2.0) through pykueue with the real trainer controller manager
and JobSet operator (``make operators``): a TrainJob of 2 nodes (1 GPU each) on a
ClusterTrainingRuntime is admitted whole, the JobSet the trainer makes runs its pods on the
flavor's node with the flavor's nodeSelector and toleration and the runtime's own toleration
kept (kueue#15162), the ClusterQueue's usage counts them; one that does not fit waits whole with
no pod; deleting the running one frees its quota for it. Skipped when an operator is not built."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.test_jobset import A100, condition, drop, owned_workload
from tests.e2e.test_workload_kinds import LONG, TOLERATION
from tests.labfixture import ROOT, LabHandle, wait_for

sys.path.insert(0, str(ROOT / "hack"))
import lab as labmod  # noqa: E402
import operators as ops  # noqa: E402

pytestmark = pytest.mark.lab
QUEUE = "kueue.x-k8s.io/queue-name"
FLAVOR_TOLERATION = {"key": "pykueue.dev/trainjob", "operator": "Exists",
                     "effect": "NoSchedule"}
# The runtime's own toleration: not the GPU one, which the API server's
# ExtendedResourceToleration admission adds to every GPU pod anyway.
RUNTIME_TOLERATION = {"key": "pykueue.dev/runtime", "operator": "Exists", "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def trainer_operator(lab: LabHandle) -> Iterator[None]:
    """JobSet and the trainer (CRDs and controllers) in the lab, before pykueue starts."""
    for name in ("jobset", "trainer"):
        op = ops.OPERATORS[name]
        if not op.built:
            pytest.skip(f"{name} {op.version} not built ({op.binary} missing): "
                        "run `make operators`")
    handle = labmod.from_args(str(lab.state), lab.port_base, str(lab.bin_dir))
    running = [n for n in ("jobset", "trainer") if labmod._pid(handle, n)]
    r = lab.lab_cmd("operators-up", "jobset", "trainer", check=False)
    assert r.returncode == 0, f"operators-up jobset trainer failed:\n{r.stdout}\n{r.stderr}"
    try:
        yield
    finally:
        for n in ("trainer", "jobset"):
            if n not in running:
                lab.lab_cmd("operators-down", n, check=False)


@pytest.fixture(scope="module")
def trainjob_queue(lab: LabHandle, trainer_operator: None, pykueue_in_lab: labmod.Lab
                   ) -> Iterator[tuple[str, str]]:
    """A namespace with LocalQueue ``lq`` to a ClusterQueue of 2 GPUs on a flavor of the A100
    node that adds a toleration of its own, and a ClusterTrainingRuntime whose node template
    carries tolerations of its own."""
    suffix = uuid.uuid4().hex[:6]
    ns, cq, rf, rt = (f"trainjob-{suffix}", f"trainjob-cq-{suffix}", f"trainjob-rf-{suffix}",
                      f"trainjob-rt-{suffix}")
    lab.create_namespace(ns)
    node = {"restartPolicy": "Never", "tolerations": [TOLERATION, RUNTIME_TOLERATION],
            "containers": [{"name": "node", "image": "busybox"}]}
    lab.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
         "metadata": {"name": rf},
         "spec": {"nodeLabels": A100, "tolerations": [FLAVOR_TOLERATION]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": cq},
         "spec": {"namespaceSelector": {}, "resourceGroups": [
             {"coveredResources": ["nvidia.com/gpu"], "flavors": [
                 {"name": rf, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 2}]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": "lq", "namespace": ns}, "spec": {"clusterQueue": cq}},
        {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
         "metadata": {"name": rt},
         "spec": {"mlPolicy": {"numNodes": 1}, "template": {"spec": {"replicatedJobs": [
             {"name": "node", "template": {
                 "metadata": {"labels": {
                     "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                 "spec": {"backoffLimit": 0,
                          "template": {"metadata": LONG, "spec": node}}}}]}}}},
    ]}))
    try:
        yield ns, rt
    finally:
        drop(lab, ns, cq)
        lab.kubectl("delete", "clustertrainingruntime", rt, "--wait=false", check=False)
        lab.kubectl("delete", "resourceflavor", rf, "--wait=false", check=False)


def trainjob(name: str, ns: str, runtime: str, nodes: int) -> str:
    """A TrainJob queued in ``lq``, created unsuspended (pykueue's webhook suspends it), of
    ``nodes`` nodes with 1 GPU each."""
    gpu: dict[str, Any] = {"nvidia.com/gpu": "1"}
    return json.dumps({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                       "metadata": {"name": name, "namespace": ns, "labels": {QUEUE: "lq"}},
                       "spec": {"runtimeRef": {"name": runtime}, "suspend": False,
                                "trainer": {"numNodes": nodes, "resourcesPerNode": {
                                    "requests": gpu, "limits": gpu}}}})


def workload(lab: LabHandle, ns: str, name: str) -> dict | None:
    return owned_workload(lab, ns, "TrainJob", name)


def gpus_used(lab: LabHandle, ns: str) -> int:
    """GPUs the LocalQueue ``lq`` reports in use (``status.flavorsUsage``)."""
    lq = lab.get("localqueue", "lq", "-n", ns)
    return sum(int(r["total"]) for f in (lq.get("status") or {}).get("flavorsUsage") or []
               for r in f["resources"] if r["name"] == "nvidia.com/gpu")


def test_a_trainjob_runs_whole_on_the_flavor_and_one_too_big_waits_until_quota_frees(
        lab: LabHandle, trainjob_queue: tuple[str, str]) -> None:
    ns, rt = trainjob_queue
    lab.apply(trainjob("train", ns, rt, 2))
    wl = wait_for(lambda: (w := workload(lab, ns, "train"))
                  and (c := condition(w, "Admitted")) and c["status"] == "True" and w,
                  60, "train's Workload admitted")
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("node", 2)]

    def running(prefix: str) -> list[dict]:
        return [p for p in lab.get("pods", "-n", ns)["items"]
                if p["metadata"]["name"].startswith(prefix)
                and p["status"].get("phase") == "Running"]

    pods = wait_for(lambda: len(r := running("train-")) == 2 and r, 120,
                    "the 2 node pods of train running")
    for p in pods:
        assert p["spec"]["nodeName"] == "a100-0"
        assert p["spec"]["nodeSelector"] == A100
        assert p["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "node"
        # The runtime's own tolerations are kept next to the flavor's (kueue#15162).
        assert TOLERATION in p["spec"]["tolerations"]
        assert RUNTIME_TOLERATION in p["spec"]["tolerations"]
        assert FLAVOR_TOLERATION in p["spec"]["tolerations"]
    # ... and in the JobSet the trainer made from Kueue's runtime patch (the trainer replaces
    # the runtime's tolerations with a patch's; pykueue's pod webhook would mend the pods).
    js = lab.get("jobset", "train", "-n", ns)
    template = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert [RUNTIME_TOLERATION, FLAVOR_TOLERATION] == [
        t for t in template["tolerations"] if t != TOLERATION]
    assert template["nodeSelector"] == A100
    wls = lab.get("workloads.kueue.x-k8s.io", "-n", ns)["items"]
    assert [r["kind"] for w in wls for r in w["metadata"]["ownerReferences"]] == ["TrainJob"]
    wait_for(lambda: gpus_used(lab, ns) == 2, 30, "the LocalQueue counting 2 GPUs in use")

    # 3 nodes x 1 GPU > the 2-GPU queue: it waits whole, no JobSet, no pod.
    lab.apply(trainjob("big", ns, rt, 3))
    qr = wait_for(lambda: (c := condition(workload(lab, ns, "big"), "QuotaReserved"))
                  and c["status"] == "False" and c, 60, "big's Workload pending")
    assert "nvidia.com/gpu" in qr["message"] and "3" in qr["message"], qr
    assert lab.get("trainjob", "big", "-n", ns)["spec"]["suspend"] is True
    assert not [p for p in lab.get("pods", "-n", ns)["items"]
                if p["metadata"]["name"].startswith("big-")]

    # Deleting train frees its 2 GPUs; a 2-node TrainJob then fits.
    lab.kubectl("delete", "trainjob", "train", "-n", ns)
    wait_for(lambda: not running("train-"), 90, "train's pods gone")
    wait_for(lambda: gpus_used(lab, ns) == 0, 60, "the LocalQueue's GPUs freed")
    lab.apply(trainjob("next", ns, rt, 2))
    wait_for(lambda: len(running("next-")) == 2, 120, "the 2 node pods of next running")

"""A pod a batch Job runs counts for a JobSet or a TrainJob only through a Job the stores hold
(or, for a TrainJob, a Job gone while the pod runs out its grace period), on the lab with the
real JobSet v0.11.1 and Trainer v2.2.0 (break26 F1 and the lead's Low finding of session 26):

- with ``integrations.frameworks`` leaving out ``batch/job``, and with a Job labelled
  ``kueue.x-k8s.io/queue-name: ""`` (stored while no webhook ran), a tenant's unqueued Job
  whose pod carries a deleted JobSet's name and uid labels kept the JobSet's Workload (its
  ``resource-in-use`` finalizer) and its quota for as long as the pod ran: no store held the
  Job, so it was taken for a gone child of the JobSet;
- a TrainJob deleted in the background whose pod still runs out its grace period (kept
  Running being deleted) after its Job went: the Workload's quota went at once;
- a JobSet's child Job labelled ``kueue.x-k8s.io/queue-name: ""`` was never reconciled (read
  only), so not held to the JobSet's admission (session 27's note, finding A)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.e2e.conftest import operators_running
from tests.e2e.test_breaker12_findings import JOBSET_GC_PROBE
from tests.e2e.test_deleted_job_quota_held import SLOWLY
from tests.e2e.test_foreground_deletion import cq_usage
from tests.e2e.test_jobset import _long_jobset, admitted, drop, owned_workload
from tests.e2e.test_kubeflow import template
from tests.e2e.test_workload_kinds import LONG, TOLERATION, gpu_queue, live
from tests.labfixture import ROOT, WORKLOAD_GC_PROBE, LabHandle, wait_for, wait_gc_watches

sys.path.insert(0, str(ROOT / "hack"))
import lab as labmod  # noqa: E402
import scenario  # noqa: E402

pytestmark = pytest.mark.lab
WL = "workloads.kueue.x-k8s.io"
IN_USE = "kueue.x-k8s.io/resource-in-use"
HOLD = "example.com/hold"


@pytest.fixture(scope="module")
def operators(lab: LabHandle) -> Iterator[labmod.Lab]:
    """JobSet and the trainer running; pykueue (re)started by each test, stopped after."""
    with operators_running(lab, "jobset", "trainer"):
        handle = labmod.from_args(str(lab.state), lab.port_base, str(lab.bin_dir))
        labmod.pykueue_down(handle)
        scenario.prepare(handle)
        try:
            yield handle
        finally:
            labmod.pykueue_down(handle)


@contextmanager
def pykueue(handle: labmod.Lab, frameworks: list[str] | None = None) -> Iterator[None]:
    """pykueue restarted (with ``integrations.frameworks`` when given) for the block, and
    stopped after it (as conftest's ``pykueue_in_lab``): a failing case leaves no pykueue of
    its own settings serving the next one."""
    labmod.pykueue_down(handle)
    labmod.pykueue_up(handle, extra_env={"PYKUEUE_INTEGRATIONS__FRAMEWORKS": json.dumps(
        frameworks)} if frameworks is not None else None)
    try:
        yield
    finally:
        labmod.pykueue_down(handle)


def tenant_job(ns: str, name: str, js: dict[str, Any], labels: dict[str, str]) -> str:
    """An unqueued batch Job (labels ``labels``) whose pod, asking nothing, carries JobSet
    ``js``'s name and uid labels and runs an hour."""
    pod = template(0, name="c")
    pod["metadata"]["labels"] = {"jobset.sigs.k8s.io/jobset-name": js["metadata"]["name"],
                                 "jobset.sigs.k8s.io/jobset-uid": js["metadata"]["uid"]}
    return json.dumps({"apiVersion": "batch/v1", "kind": "Job",
                       "metadata": {"name": name, "namespace": ns, "labels": labels},
                       "spec": {"template": pod, "backoffLimit": 0}})


def running(lab: LabHandle, ns: str, selector: str) -> list[dict[str, Any]]:
    return [p for p in lab.get("pods", "-n", ns, "-l", selector)["items"]
            if p["status"].get("phase") == "Running"]


@pytest.mark.parametrize("case", ["batch-job-not-listed",
                                  "a-job-labelled-with-an-empty-queue-name"])
def test_a_tenants_job_in_no_store_holds_none_of_a_deleted_jobsets_quota(
        lab: LabHandle, operators: labmod.Lab, case: str) -> None:
    """JobSet ``ts`` (1 GPU pod) runs; the tenant's unqueued Job ``mine`` runs a pod with
    ts's name and uid labels. ``ts`` is deleted: its Workload goes with its own pod, and the
    ClusterQueue's usage returns to 0, while ``mine``'s pod runs on. Before, the Workload
    stayed (``resource-in-use``), holding the GPU, as long as ``mine`` ran."""
    empty = case != "batch-job-not-listed"
    with pykueue(operators, None if empty else ["jobset.x-k8s.io/jobset"]):
        ns, cq = gpu_queue(lab, "f1js", 1)
        try:
            wait_gc_watches(lab.kubectl, ns, WORKLOAD_GC_PROBE, JOBSET_GC_PROBE)
            lab.apply(_long_jobset("ts", ns, 1))
            wl = wait_for(lambda: admitted(lab, ns, "JobSet", "ts"), 90, "ts admitted")
            assert IN_USE in (wl["metadata"].get("finalizers") or []), wl["metadata"]
            wait_for(lambda: running(lab, ns, "jobset.sigs.k8s.io/jobset-name=ts"), 90,
                     "ts's pod Running")
            js = lab.get("jobset", "ts", "-n", ns)
            if empty:
                # Only with no webhook running (pykueue down) can a Job be stored so.
                labmod.pykueue_down(operators)
                lab.apply(tenant_job(ns, "mine", js, {"kueue.x-k8s.io/queue-name": ""}))
                labmod.pykueue_up(operators)
            else:
                lab.apply(tenant_job(ns, "mine", js, {}))
            wait_for(lambda: running(lab, ns, "batch.kubernetes.io/job-name=mine"), 60,
                     "mine's pod Running")
            wait_for(lambda: ("flavorsUsage", "a100-flavor", "nvidia.com/gpu", "1")
                     in cq_usage(lab, cq)[0], 60, f"{cq} showing ts's GPU")
            lab.kubectl("delete", "jobset", "ts", "-n", ns, "--wait=false")
            wait_for(lambda: not lab.get(WL, "-n", ns)["items"], 120,
                     "ts's Workload gone (its finalizer taken off)")
            wait_for(lambda: cq_usage(lab, cq) == ([], 0, 0), 60, f"{cq}'s usage back to 0")
            assert running(lab, ns, "batch.kubernetes.io/job-name=mine")  # the decoy runs on
        finally:
            drop(lab, ns, cq)


def test_a_jobsets_child_labelled_with_an_empty_queue_name_keeps_to_its_share(
        lab: LabHandle, operators: labmod.Lab) -> None:
    """JobSet ``ts`` (1 Job of one 1-GPU pod) whose Job template carries
    ``kueue.x-k8s.io/queue-name: ""``, created while no webhook ran: the JobSet operator makes
    its Job ``ts-workers-0`` with that label. Admitted and running, the Job raised to 3 pods
    (while pykueue is down: its webhook refuses the raise) is set back to its share, 1, as an
    unlabelled child is (``ExceedsAncestorAdmission``). Before, such a child was in a read
    only store, never reconciled, and its 3 pods ran on the JobSet's 1-GPU admission."""
    with pykueue(operators):
        ns, cq = gpu_queue(lab, "f1ec", 1)
        try:
            js = json.loads(_long_jobset("ts", ns, 1))
            js["spec"]["suspend"] = True  # what the webhook would have done
            js["spec"]["replicatedJobs"][0]["template"]["metadata"] = {
                "labels": {"kueue.x-k8s.io/queue-name": ""}}
            labmod.pykueue_down(operators)
            lab.apply(json.dumps(js))
            child = wait_for(lambda: lab.kubectl("get", "job", "ts-workers-0", "-n", ns,
                                                 check=False).returncode == 0
                             and lab.get("job", "ts-workers-0", "-n", ns), 60,
                             "the JobSet operator's Job ts-workers-0")
            assert child["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == ""
            labmod.pykueue_up(operators)
            wait_for(lambda: admitted(lab, ns, "JobSet", "ts"), 90, "ts admitted")
            wait_for(lambda: running(lab, ns, "batch.kubernetes.io/job-name=ts-workers-0"),
                     90, "ts-workers-0's pod Running")
            labmod.pykueue_down(operators)
            lab.kubectl("patch", "job", "ts-workers-0", "-n", ns, "--type=merge", "-p",
                        '{"spec": {"parallelism": 3, "completions": 3}}')
            labmod.pykueue_up(operators)
            wait_for(lambda: lab.get("job", "ts-workers-0", "-n", ns)["spec"]["parallelism"]
                     == 1, 60, "ts-workers-0's parallelism set back to its share (1)")
            assert lab.get("events", "-n", ns, "--field-selector",
                           "reason=ExceedsAncestorAdmission")["items"]
        finally:
            drop(lab, ns, cq)


def _trainjob_queue(lab: LabHandle) -> tuple[str, str, str]:
    """A 1-GPU queue and a ClusterTrainingRuntime whose node pods carry ``SLOWLY`` and the
    test's finalizer: once deleted they stay Running (Terminating) until the test removes
    the finalizer."""
    ns, cq = gpu_queue(lab, "f1tj", 1)
    rt = f"{ns}-rt"
    meta = {**LONG, "annotations": {**LONG["annotations"], SLOWLY: "true"},
            "finalizers": [HOLD]}
    lab.apply(json.dumps({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
        "metadata": {"name": rt},
        "spec": {"mlPolicy": {"numNodes": 1}, "template": {"spec": {"replicatedJobs": [
            {"name": "node", "template": {
                "metadata": {"labels": {
                    "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                "spec": {"backoffLimit": 0, "template": {"metadata": meta, "spec": {
                    "restartPolicy": "Never", "tolerations": [TOLERATION],
                    "containers": [{"name": "node", "image": "busybox"}]}}}}}]}}}}))
    return ns, cq, rt


def test_a_trainjob_deleted_in_the_background_holds_its_quota_while_its_pod_runs(
        lab: LabHandle, operators: labmod.Lab) -> None:
    """TrainJob ``tj`` (1 node, 1 GPU) runs. ``kubectl delete trainjob tj``: the garbage
    collector deletes its JobSet, the JobSet's Job, then the pod, which runs on, being
    deleted, after its Job went. The Workload (being deleted) keeps ``resource-in-use`` and
    the ClusterQueue keeps the GPU while the pod runs (sampled for 20 s); once the pod is
    gone, the Workload goes and the usage returns to 0. Before, the pod counted only while
    its Job was stored, and the quota went at once."""
    gpu = {"nvidia.com/gpu": "1"}
    with pykueue(operators):
        ns, cq, rt = _trainjob_queue(lab)
        try:
            wait_gc_watches(lab.kubectl, ns, WORKLOAD_GC_PROBE, JOBSET_GC_PROBE, {
                "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "spec": {"runtimeRef": {"name": rt}, "suspend": True}})
            lab.apply(json.dumps({
                "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "metadata": {"name": "tj", "namespace": ns,
                             "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
                "spec": {"runtimeRef": {"name": rt}, "suspend": False, "trainer": {
                    "numNodes": 1, "resourcesPerNode": {"requests": gpu, "limits": gpu}}}}))
            wl = wait_for(lambda: admitted(lab, ns, "TrainJob", "tj"), 90, "tj admitted")
            name = wl["metadata"]["name"]
            pod = wait_for(lambda: next(iter(running(
                lab, ns, "jobset.sigs.k8s.io/jobset-name=tj")), None), 90, "tj's pod Running")
            job = pod["metadata"]["ownerReferences"][0]["name"]
            lab.kubectl("delete", "trainjob", "tj", "-n", ns, "--wait=false")
            wait_for(lambda: lab.kubectl("get", "job", job, "-n", ns, check=False).returncode,
                     90, f"Job {job} gone")
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                p = lab.get("pods", pod["metadata"]["name"], "-n", ns)
                assert p["metadata"].get("deletionTimestamp") \
                    and p["status"].get("phase") == "Running", p["status"]
                w = lab.get(WL, name, "-n", ns)  # fails once the Workload is gone
                assert IN_USE in (w["metadata"].get("finalizers") or []), w["metadata"]
                assert ("flavorsUsage", "a100-flavor", "nvidia.com/gpu", "1") \
                    in cq_usage(lab, cq)[0], cq_usage(lab, cq)
                time.sleep(2)
            lab.kubectl("patch", "pod", pod["metadata"]["name"], "-n", ns, "--type=json",
                        "-p", json.dumps([{"op": "remove", "path": "/metadata/finalizers"}]))
            wait_for(lambda: not live(lab.get(WL, "-n", ns)["items"])
                     and not lab.get(WL, "-n", ns)["items"], 90, "tj's Workload gone")
            wait_for(lambda: cq_usage(lab, cq) == ([], 0, 0), 60, f"{cq}'s usage back to 0")
            assert owned_workload(lab, ns, "TrainJob", "tj") is None
        finally:
            for p in lab.get("pods", "-n", ns)["items"]:
                if p["metadata"].get("finalizers"):
                    lab.kubectl("patch", "pod", p["metadata"]["name"], "-n", ns,
                                "--type=json", "-p", json.dumps(
                                    [{"op": "remove", "path": "/metadata/finalizers"}]),
                                check=False)
            drop(lab, ns, cq)
            lab.kubectl("delete", "clustertrainingruntime", rt, "--wait=false", check=False)

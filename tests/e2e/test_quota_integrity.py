"""Quota integrity in the lab: what a tenant with ``edit`` rights and full rights on the
operator kinds tried, each now held to its admission (pods Running vs admitted):

- RayCluster in-tree autoscaling turned on by UPDATE: refused; done behind the webhook's back
  together with a raise of the workers, the RayCluster is stopped (its reconcile used to fail
  on the unreadable object and leave the raised workers running);
- a JobSet's child Job scaled directly: set back to its share of the JobSet's admission;
- a running Job suspended with its queue label removed in one write: refused while it carries
  the scheduling its admission injected;
- ``kueue.x-k8s.io/queue-name: ""``: refused at create.

The operator tests skip with the reason when JobSet or KubeRay is not built."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.e2e.test_jobset import QUEUE, condition, owned_workload, queue
from tests.e2e.test_ray import placed, ray_queue, rayjob
from tests.e2e.test_workload_kinds import gpu_container, gpu_queue, live
from tests.integration.test_operators import operators_running
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
# The lab's pods of a Job succeed after 3 s unless they say how long they run (hack/lab).
LONG = {"annotations": {"lab.pykueue.dev/run-duration": "1h"}}
VALIDATING = "pykueue-validating-webhook-configuration"


@pytest.fixture(scope="module")
def operators(lab: LabHandle) -> Iterator[set[str]]:
    """JobSet and KubeRay in the lab, before pykueue starts (it discovers their CRDs then)."""
    with operators_running(lab, ["jobset", "kuberay"]) as (running, _):
        yield running


@pytest.fixture(scope="module")
def pykueue(operators: set[str], pykueue_in_lab: Any) -> set[str]:
    return operators


def _need(running: set[str], name: str) -> None:
    if name not in running:
        pytest.skip(f"{name} not built: run `make operators`")


def _admitted(lab: LabHandle, ns: str, kind: str, name: str) -> dict | None:
    w = owned_workload(lab, ns, kind, name)
    c = condition(w, "Admitted")
    return w if c and c["status"] == "True" else None


@contextmanager
def _webhook_removed(lab: LabHandle, name: str) -> Iterator[None]:
    """pykueue's validating webhook ``name`` unregistered for the block (a webhook bypassed
    or down), then registered again as it was."""
    config = lab.get("validatingwebhookconfiguration", VALIDATING)
    index = next(i for i, w in enumerate(config["webhooks"]) if w["name"] == name)
    entry = config["webhooks"][index]
    lab.kubectl("patch", "validatingwebhookconfiguration", VALIDATING, "--type=json", "-p",
                json.dumps([{"op": "remove", "path": f"/webhooks/{index}"}]))
    try:
        yield
    finally:
        lab.kubectl("patch", "validatingwebhookconfiguration", VALIDATING, "--type=json", "-p",
                    json.dumps([{"op": "add", "path": f"/webhooks/{index}", "value": entry}]))


def test_raycluster_autoscaling_on_update_is_refused_and_an_unreadable_one_is_stopped(
        lab: LabHandle, pykueue: set[str]) -> None:
    """Before: the UPDATE was accepted, every reconcile then failed ("in-tree autoscaling
    needs elastic Workload slices") and a raise to 4 workers ran 4 GPU pods on an admission
    of 2. After: refused; behind the webhook's back, the RayCluster is stopped."""
    _need(pykueue, "kuberay")
    with ray_queue(lab, "rc-auto", 2) as ns:
        job = json.loads(rayjob("c", ns, 2))
        lab.apply(json.dumps({"apiVersion": "ray.io/v1", "kind": "RayCluster",
                              "metadata": job["metadata"], "spec": job["spec"]["rayClusterSpec"]}))
        wait_for(lambda: _admitted(lab, ns, "RayCluster", "c"), 60, "c admitted")
        wait_for(lambda: placed(lab, ns, 2), 90, "c's head and 2 workers running")
        r = lab.kubectl("patch", "raycluster", "c", "-n", ns, "--type=merge", "-p",
                        '{"spec": {"enableInTreeAutoscaling": true}}', check=False)
        assert r.returncode != 0 and "spec.enableInTreeAutoscaling" in r.stderr, r.stderr
        with _webhook_removed(lab, "vraycluster.pykueue.io"):
            lab.kubectl("patch", "raycluster", "c", "-n", ns, "--type=json", "-p", json.dumps([
                {"op": "add", "path": "/spec/enableInTreeAutoscaling", "value": True},
                {"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": 4},
                {"op": "replace", "path": "/spec/workerGroupSpecs/0/maxReplicas", "value": 4}]))
            wait_for(lambda: lab.get("raycluster", "c", "-n", ns)["spec"].get("suspend"), 60,
                     "c suspended by pykueue")
        wait_for(lambda: not [p for p in live(lab.get("pods", "-n", ns)["items"])
                              if p["metadata"]["labels"].get("ray.io/node-type") == "worker"],
                 90, "c's workers gone")
        wait_for(lambda: not _admitted(lab, ns, "RayCluster", "c"), 60,
                 "c's admission for 2 workers released")


def _long_jobset(name: str, ns: str, replicas: int) -> str:
    """A JobSet queued in ``lq``: replicatedJob ``workers`` of ``replicas`` Jobs of one 1-GPU
    pod that runs an hour."""
    pod = {"metadata": LONG, "spec": {"restartPolicy": "Never",
                                      "containers": [gpu_container()],
                                      "tolerations": [TOLERATION]}}
    return json.dumps({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                       "metadata": {"name": name, "namespace": ns, "labels": {QUEUE: "lq"}},
                       "spec": {"replicatedJobs": [{"name": "workers", "replicas": replicas,
                                                    "template": {"spec": {
                                                        "parallelism": 1, "completions": 1,
                                                        "backoffLimit": 0, "template": pod}}}]}})


def _running_pods(lab: LabHandle, ns: str, job: str) -> int:
    return len([p for p in live(lab.get("pods", "-n", ns, "-l",
                                        f"batch.kubernetes.io/job-name={job}")["items"])
                if p["status"].get("phase") in ("Pending", "Running")])


def test_a_jobset_child_job_scaled_directly_is_set_back_to_its_share(
        lab: LabHandle, pykueue: set[str]) -> None:
    """Before: child ``train-workers-0`` patched to parallelism/completions 6 ran 6 GPU pods
    (7 for the JobSet) on an admission of 2. After: its parallelism is set back to 1."""
    _need(pykueue, "jobset")
    with queue(lab, "js-scale", 2) as ns:
        lab.apply(_long_jobset("train", ns, 2))
        wait_for(lambda: _admitted(lab, ns, "JobSet", "train"), 60, "train admitted")
        wait_for(lambda: _running_pods(lab, ns, "train-workers-0") == 1, 90,
                 "train-workers-0's pod")
        lab.kubectl("patch", "job", "train-workers-0", "-n", ns, "--type=merge", "-p",
                    '{"spec": {"parallelism": 6, "completions": 6}}')
        wait_for(lambda: lab.get("job", "train-workers-0", "-n", ns)["spec"]["parallelism"] == 1,
                 30, "train-workers-0's parallelism set back to its share (1)")
        wait_for(lambda: _running_pods(lab, ns, "train-workers-0") == 1, 60,
                 "train-workers-0 back to one pod")
        events = lab.get("events", "-n", ns, "--field-selector",
                         "involvedObject.name=train-workers-0")["items"]
        assert any(e["reason"] == "ExceedsAncestorAdmission" for e in events), events


def _job(name: str, ns: str, labels: dict[str, str]) -> str:
    return json.dumps({"apiVersion": "batch/v1", "kind": "Job",
                       "metadata": {"name": name, "namespace": ns, "labels": labels},
                       "spec": {"template": {"metadata": LONG, "spec": {
                           "restartPolicy": "Never", "containers": [gpu_container()],
                           "tolerations": [TOLERATION]}}}})


def test_the_queue_label_of_a_job_carrying_its_admissions_scheduling_stays(
        lab: LabHandle, pykueue_in_lab: Any) -> None:
    """Before: ``suspend: true`` + label removed in one write, then ``suspend: false``: the
    Job ran with the A100 nodeSelector and toleration pykueue had injected, usage 0. After:
    the first write is refused; the Job keeps running admitted."""
    ns, cq = gpu_queue(lab, "escape", 1)
    try:
        lab.apply(_job("run", ns, {QUEUE: "lq"}))
        wait_for(lambda: _running_pods(lab, ns, "run") == 1
                 and lab.get("job", "run", "-n", ns)["spec"].get("suspend") is False, 60,
                 "run admitted and running")
        r = lab.kubectl("patch", "job", "run", "-n", ns, "--type=merge", "-p", json.dumps(
            {"metadata": {"labels": {QUEUE: None}}, "spec": {"suspend": True}}), check=False)
        assert r.returncode != 0 and "pykueue injected" in r.stderr, r.stderr
        job = lab.get("job", "run", "-n", ns)
        assert job["metadata"]["labels"][QUEUE] == "lq" and job["spec"]["suspend"] is False
    finally:
        lab.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        lab.kubectl("delete", "clusterqueue", cq, "--wait=false", check=False)


def test_an_empty_queue_name_is_refused_at_create(lab: LabHandle, pykueue_in_lab: Any) -> None:
    """Before: a Job labelled ``queue-name: ""`` was created and ran unqueued. After: refused
    (Kueue: the label's value must be a DNS-1123 subdomain)."""
    ns = "empty-queue"
    lab.create_namespace(ns)
    try:
        r = lab.kubectl("create", "-f", "-", input=_job("e", ns, {QUEUE: ""}), check=False)
        assert r.returncode != 0 and "must not be empty" in r.stderr, r.stderr
        assert lab.get("jobs", "-n", ns)["items"] == []
    finally:
        lab.kubectl("delete", "namespace", ns, "--wait=false", check=False)

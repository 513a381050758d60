"""Issue 18, JobSet through pykueue with the real JobSet operator (v0.11.1, ``make operators``):
a queued JobSet is created suspended by pykueue's webhook, admitted whole (one Workload, one
podSet per replicatedJob), its pods land on the flavor's node; one that does not fit waits whole
with no Job and no pod. Skipped with the reason when the operator is not built."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.e2e.test_workload_kinds import (
    LONG,
    TOLERATION,
    gpu_container,
    gpu_queue,
    running_pods,
)
from tests.labfixture import ROOT, WORKLOAD_GC_PROBE, LabHandle, wait_for, wait_gc_watches

sys.path.insert(0, str(ROOT / "hack"))
import lab as labmod  # noqa: E402
import operators as ops  # noqa: E402

pytestmark = pytest.mark.lab
QUEUE = "kueue.x-k8s.io/queue-name"
A100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}


@pytest.fixture(scope="module")
def jobset_operator(lab: LabHandle) -> Iterator[None]:
    """JobSet's CRD and controller in the lab, before pykueue starts (a CRD installed later is
    picked up only at pykueue's next discovery poll, up to 2 min later)."""
    op = ops.OPERATORS["jobset"]
    if not op.built:
        pytest.skip(f"jobset {op.version} not built ({op.binary} missing): run `make operators`")
    handle = labmod.from_args(str(lab.state), lab.port_base, str(lab.bin_dir))
    running = bool(labmod._pid(handle, "jobset"))
    r = lab.lab_cmd("operators-up", "jobset", check=False)
    assert r.returncode == 0, f"operators-up jobset failed:\n{r.stdout}\n{r.stderr}"
    try:
        yield
    finally:
        if not running:
            lab.lab_cmd("operators-down", "jobset", check=False)


@pytest.fixture(scope="module")
def pykueue_with_jobset(jobset_operator: None, pykueue_in_lab: labmod.Lab) -> labmod.Lab:
    return pykueue_in_lab


def jobset(name: str, ns: str, *shape: tuple[str, int, int]) -> str:
    """A JobSet queued in ``lq``: per (replicatedJob, replicas, pods per Job), Jobs of 1-GPU
    pods that tolerate the GPU taint and run 2 s."""
    def rjob(rj: str, replicas: int, pods: int) -> dict[str, Any]:
        pod = {"metadata": {"annotations": {"lab.pykueue.dev/run-duration": "2s"}},
               "spec": {"restartPolicy": "Never", "containers": [gpu_container()],
                        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                         "effect": "NoSchedule"}]}}
        return {"name": rj, "replicas": replicas, "template": {"spec": {
            "parallelism": pods, "completions": pods, "backoffLimit": 0, "template": pod}}}
    return json.dumps({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                       "metadata": {"name": name, "namespace": ns, "labels": {QUEUE: "lq"}},
                       "spec": {"replicatedJobs": [rjob(*s) for s in shape]}})


@contextmanager
def queue(lab: LabHandle, prefix: str, gpus: int) -> Iterator[str]:
    """A fresh namespace with LocalQueue ``lq`` to a new ClusterQueue of ``gpus`` A100s
    (``gpu_queue``), both deleted afterwards (``drop``)."""
    ns, cq = gpu_queue(lab, prefix, gpus)
    try:
        yield ns
    finally:
        drop(lab, ns, cq)


def drop(lab: LabHandle, ns: str, cq: str) -> None:
    """Delete namespace ``ns`` and ClusterQueue ``cq``, and wait for the namespace's pods to
    go: operator pods (PyTorchJob replicas, Ray workers) run until deleted and hold a100-0's
    GPUs that later tests need."""
    lab.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    lab.kubectl("delete", "clusterqueue", cq, "--wait=false", check=False)
    wait_for(lambda: not lab.get("pods", "-n", ns)["items"], 120, f"the pods of {ns} gone")


def owned_workload(lab: LabHandle, ns: str, kind: str, name: str) -> dict | None:
    """The Workload in ``ns`` owned by the ``kind`` object ``name``, or None."""
    for w in lab.get("workloads.kueue.x-k8s.io", "-n", ns)["items"]:
        if any(r["kind"] == kind and r["name"] == name
               for r in w["metadata"].get("ownerReferences") or []):
            return w
    return None


def workload(lab: LabHandle, ns: str, name: str) -> dict | None:
    return owned_workload(lab, ns, "JobSet", name)


def landed_on_a100(pods: list[dict], podsets: list[str]) -> None:
    """Every pod on a100-0 with the A100 flavor's nodeSelector; their podset labels, sorted,
    are ``podsets``."""
    assert {p["spec"]["nodeName"] for p in pods} == {"a100-0"}
    assert all(p["spec"]["nodeSelector"] == A100 for p in pods)
    assert sorted(p["metadata"]["labels"]["kueue.x-k8s.io/podset"] for p in pods) == podsets


def queue_change_refused(lab: LabHandle, ns: str, kind: str, name: str) -> None:
    """pykueue's webhook refuses to move the running ``kind`` object ``name`` to another
    queue."""
    r = lab.kubectl("label", kind.lower(), name, "-n", ns, "--overwrite", f"{QUEUE}=other",
                    check=False)
    assert r.returncode != 0 and f"while the {kind} is not suspended" in r.stderr, r.stderr


def condition(obj: dict | None, kind: str) -> dict | None:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or []
                 if c["type"] == kind), None)


def test_a_jobset_is_admitted_whole_and_its_pods_land_on_the_flavor_node(
        lab: LabHandle, pykueue_with_jobset: labmod.Lab) -> None:
    with queue(lab, "jobset", 4) as ns:
        # 1 Job of 2 pods + 2 Jobs of 1 pod = 4 GPUs: the whole 4-GPU queue.
        lab.apply(jobset("train", ns, ("leader", 1, 2), ("workers", 2, 1)))
        wl = wait_for(lambda: (w := workload(lab, ns, "train"))
                      and (c := condition(w, "Admitted")) and c["status"] == "True" and w,
                      60, "train's Workload admitted")
        assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [
            ("leader", 2), ("workers", 2)]
        assert [a["flavors"]["nvidia.com/gpu"] for a in
                wl["status"]["admission"]["podSetAssignments"]] == ["a100-flavor"] * 2

        def running() -> list[dict]:
            return [p for p in lab.get("pods", "-n", ns)["items"]
                    if p["status"].get("phase") in ("Running", "Succeeded")]

        pods = wait_for(lambda: len(r := running()) == 4 and r, 90, "4 pods of train running")
        landed_on_a100(pods, ["leader", "leader", "workers", "workers"])
        queue_change_refused(lab, ns, "JobSet", "train")
        js = lab.get("jobset", "train", "-n", ns)
        for rj in js["spec"]["replicatedJobs"]:
            assert rj["template"]["spec"]["template"]["spec"]["nodeSelector"] == A100
        # JobSet completes (kwok ends Job pods after 2 s); its Workload finishes.
        wait_for(lambda: (c := condition(workload(lab, ns, "train"), "Finished"))
                 and c["status"] == "True", 90, "train's Workload Finished")


def test_a_jobset_that_does_not_fit_waits_whole_with_no_pod(
        lab: LabHandle, pykueue_with_jobset: labmod.Lab) -> None:
    with queue(lab, "jobset-wait", 4) as ns:
        # 2 x 2 + 1 x 2 = 6 GPUs > 4: nothing may run, not even the replicatedJob that fits.
        lab.apply(jobset("big", ns, ("leader", 2, 2), ("workers", 1, 2)))
        qr = wait_for(lambda: (c := condition(workload(lab, ns, "big"), "QuotaReserved"))
                      and c["status"] == "False" and c, 60, "big's Workload pending")
        assert "nvidia.com/gpu" in qr["message"], qr
        js = lab.get("jobset", "big", "-n", ns)
        assert js["spec"]["suspend"] is True  # set by pykueue's webhook at create
        assert lab.get("jobs", "-n", ns)["items"] == [] or all(
            j["spec"].get("suspend") for j in lab.get("jobs", "-n", ns)["items"])
        assert lab.get("pods", "-n", ns)["items"] == []
        # Moving a waiting (suspended) JobSet to another queue is allowed.
        r = lab.kubectl("label", "jobset", "big", "-n", ns, "--overwrite", f"{QUEUE}=other",
                        check=False)
        assert r.returncode == 0, r.stderr


def test_a_jobset_whose_job_template_carries_the_queue_label_is_queued_once(
        lab: LabHandle, pykueue_with_jobset: labmod.Lab) -> None:
    """Breaker finding N2, Kueue's managed-ancestor rule (v0.17 FindAncestorJobManagedByKueue):
    a queued JobSet whose replicatedJob template also carries the queue label makes child
    Jobs with that label; they are the JobSet's business: pykueue neither suspends nor queues
    them (one Workload, the JobSet's), the JobSet controller resumes them once the JobSet is
    admitted, and the JobSet completes."""
    with queue(lab, "jobset-label", 2) as ns:
        sent = json.loads(jobset("tagged", ns, ("w", 1, 2)))
        sent["spec"]["replicatedJobs"][0]["template"]["metadata"] = {"labels": {QUEUE: "lq"}}
        sent["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"][
            "annotations"]["lab.pykueue.dev/run-duration"] = "5s"
        lab.apply(json.dumps(sent))
        wait_for(lambda: (c := condition(workload(lab, ns, "tagged"), "Admitted"))
                 and c["status"] == "True", 60, "tagged's Workload admitted")
        pods = wait_for(lambda: len(r := [p for p in lab.get("pods", "-n", ns)["items"]
                                          if p["status"].get("phase") == "Running"]) == 2
                        and r, 90, "the 2 pods of tagged running")
        landed_on_a100(pods, ["w", "w"])
        jobs = lab.get("jobs", "-n", ns)["items"]
        assert [j["metadata"]["labels"].get(QUEUE) for j in jobs] == ["lq"]  # the case
        assert jobs[0]["spec"]["suspend"] is False  # resumed by the JobSet controller
        # pykueue never stopped it (its stop leaves this annotation) nor queued it.
        assert "kueue.x-k8s.io/stopping" not in (jobs[0]["metadata"].get("annotations") or {})
        wls = lab.get("workloads.kueue.x-k8s.io", "-n", ns)["items"]
        assert [r["kind"] for w in wls for r in w["metadata"]["ownerReferences"]] == ["JobSet"]
        wait_for(lambda: (c := condition(workload(lab, ns, "tagged"), "Finished"))
                 and c["status"] == "True", 90, "tagged's Workload Finished")
        assert len(lab.get("workloads.kueue.x-k8s.io", "-n", ns)["items"]) == 1


def admitted(lab: LabHandle, ns: str, kind: str, name: str) -> dict | None:
    """The Workload of the ``kind`` object ``name`` once Admitted, else None."""
    w = owned_workload(lab, ns, kind, name)
    c = condition(w, "Admitted")
    return w if c and c["status"] == "True" else None


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


def test_a_jobset_child_job_scaled_directly_is_set_back_to_its_share(
        lab: LabHandle, pykueue_with_jobset: labmod.Lab) -> None:
    """Before: child ``train-workers-0`` patched to parallelism/completions 6 ran 6 GPU pods
    (7 for the JobSet) on an admission of 2. After: its parallelism is set back to 1."""
    with queue(lab, "js-scale", 2) as ns:
        lab.apply(_long_jobset("train", ns, 2))
        wait_for(lambda: admitted(lab, ns, "JobSet", "train"), 60, "train admitted")
        wait_for(lambda: running_pods(lab, ns, "train-workers-0") == 1, 90,
                 "train-workers-0's pod")
        lab.kubectl("patch", "job", "train-workers-0", "-n", ns, "--type=merge", "-p",
                    '{"spec": {"parallelism": 6, "completions": 6}}')
        wait_for(lambda: lab.get("job", "train-workers-0", "-n", ns)["spec"]["parallelism"] == 1,
                 30, "train-workers-0's parallelism set back to its share (1)")
        wait_for(lambda: running_pods(lab, ns, "train-workers-0") == 1, 60,
                 "train-workers-0 back to one pod")
        events = lab.get("events", "-n", ns, "--field-selector",
                         "involvedObject.name=train-workers-0")["items"]
        assert any(e["reason"] == "ExceedsAncestorAdmission" for e in events), events


def tenant(lab: LabHandle, ns: str) -> tuple[str, ...]:
    """kubectl arguments acting as ServiceAccount ``tenant`` of ``ns``, which has the
    ClusterRole ``edit`` in ``ns`` and every right on the operator kinds (JobSet, RayJob,
    RayCluster): the attacker of docs/security.md, read-only on Workloads."""
    lab.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": "tenant", "namespace": ns}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "tenant-operator-kinds", "namespace": ns},
         "rules": [{"apiGroups": ["jobset.x-k8s.io", "ray.io"], "resources": ["*"],
                    "verbs": ["*"]},
                   {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"],
                    "verbs": ["get", "list", "watch"]}]},
        *({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
           "metadata": {"name": f"tenant-{role}", "namespace": ns},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
           "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": ns}]}
          for kind, role in (("ClusterRole", "edit"), ("Role", "tenant-operator-kinds")))]}))
    return ("--as", f"system:serviceaccount:{ns}:tenant")


def test_an_orphaned_jobset_child_job_is_stopped_and_cannot_be_raised(
        lab: LabHandle, pykueue_with_jobset: labmod.Lab) -> None:
    """A tenant deletes its admitted JobSet with ``--cascade=orphan`` and raises the orphaned
    child ``train-workers-0`` to parallelism/completions 6. Before: 6 GPU pods Running on
    a100-0 with the injected nodeSelector and toleration, on an admission of 1. After: the
    child is suspended with the admission's scheduling taken out (Event ``AncestorGone``);
    its pod goes and the JobSet's orphaned Workload is Finished ``OwnerNotFound``."""
    with queue(lab, "js-orphan", 2) as ns:
        as_tenant = tenant(lab, ns)
        lab.kubectl(*as_tenant, "apply", "-f", "-", input=_long_jobset("train", ns, 1))
        wl = wait_for(lambda: admitted(lab, ns, "JobSet", "train"), 60, "train admitted")
        wait_for(lambda: running_pods(lab, ns, "train-workers-0") == 1, 90,
                 "train-workers-0's pod")
        wait_gc_watches(lab.kubectl, ns, WORKLOAD_GC_PROBE)
        lab.kubectl(*as_tenant, "delete", "jobset", "train", "-n", ns, "--cascade=orphan")
        wait_for(lambda: not lab.get("jobsets", "-n", ns)["items"], 30, "train deleted")
        lab.kubectl(*as_tenant, "patch", "job", "train-workers-0", "-n", ns, "--type=merge",
                    "-p", '{"spec": {"parallelism": 6, "completions": 6}}', check=False)

        seen = [1]

        def stopped() -> dict | None:
            seen.append(running_pods(lab, ns, "train-workers-0"))
            job = lab.get("job", "train-workers-0", "-n", ns)
            tpl = job["spec"]["template"]
            return job if job["spec"].get("suspend") and "kueue.x-k8s.io/podset" not in (
                tpl["metadata"].get("labels") or {}) else None
        try:
            job = wait_for(stopped, 30, "the orphaned train-workers-0 stopped")
        finally:
            print(f"\norphaned train-workers-0: at most {max(seen)} pods, admission of 1")
        assert job["spec"]["template"]["spec"].get("nodeSelector") != A100
        wait_for(lambda: running_pods(lab, ns, "train-workers-0") == 0, 60,
                 "train-workers-0's pods gone")
        name = wl["metadata"]["name"]
        fin = wait_for(lambda: condition(lab.get("workloads.kueue.x-k8s.io", name, "-n", ns),
                                         "Finished"), 60, f"{name} Finished")
        assert fin["reason"] == "OwnerNotFound", fin
        events = lab.get("events", "-n", ns, "--field-selector",
                         "involvedObject.name=train-workers-0")["items"]
        assert any(e["reason"] == "AncestorGone" for e in events), events


def test_the_jobset_operator_killed_and_restarted_keeps_the_quota(
        lab: LabHandle, pykueue_with_jobset: labmod.Lab) -> None:
    """A fault of the fault suite (tests/integration/test_faults.py) that needs a real
    operator: JobSet A runs on the queue's 2 GPUs and B waits; the JobSet operator is killed
    with ``kill -9`` and A deleted meanwhile, so pykueue admits B with no operator to make its
    Jobs; once the operator is back B runs to completion. The GPUs of bound pods never exceed
    the quota (sampled every 100 ms)."""
    import os
    import signal
    import time

    from tests.integration.test_faults import PodSampler

    handle = labmod.from_args(str(lab.state), lab.port_base, str(lab.bin_dir))
    with queue(lab, "jsfault", 2) as ns:
        lab.apply(jobset("a", ns, ("w", 1, 2)).replace('"2s"', '"1h"'))
        wait_for(lambda: running_pods(lab, ns, "a-w-0") == 2, 90, "A's 2 pods")
        lab.apply(jobset("b", ns, ("w", 1, 2)))
        wait_for(lambda: condition(workload(lab, ns, "b"), "QuotaReserved") is not None, 60,
                 "B's Workload pending")
        with PodSampler(lab, ns, 2, resource="nvidia.com/gpu", jobs_gate=False) as sampler:
            pid = labmod._pid(handle, "jobset")
            assert pid is not None, "the JobSet operator is not running"
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: labmod._pid(handle, "jobset") is None, 30, "the operator gone")
            lab.kubectl("delete", "jobset", "a", "-n", ns, "--wait=false")
            wait_for(lambda: (condition(workload(lab, ns, "b"), "Admitted") or {})
                     .get("status") == "True", 90, "B admitted while the operator is down")
            assert running_pods(lab, ns, "b-w-0") == 0  # nobody makes B's Jobs yet
            t0 = time.monotonic()
            r = lab.lab_cmd("operators-up", "jobset", check=False)
            assert r.returncode == 0, r.stdout + r.stderr
            wait_for(lambda: (condition(lab.get("jobset", "b", "-n", ns), "Completed") or {})
                     .get("status") == "True", 120, "B completed after the restart")
            recovery = time.monotonic() - t0
        assert sampler.samples > 10, "the sampler did not run"
        assert not sampler.violations, sampler.violations[:5]
        assert sampler.peak <= 2
        print(f"\njobset operator kill -9 + restart: B completed {recovery:.1f} s after the "
              f"restart; {sampler.samples} samples, peak {sampler.peak} GPUs")

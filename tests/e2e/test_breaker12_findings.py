"""An attacker's pass over the kinds added last: LeaderWorkerSet, TrainJob (Kubeflow Trainer
v2.2.0) and RayService (KubeRay v1.6.0). The tenant is ServiceAccount ``tenant`` with
``edit`` in its namespace, every right on the operator kinds (JobSet, Ray, Trainer: its
TrainingRuntimes included) and read-only Workloads; its ClusterQueue of 4 A100s shares a
cohort with team-b's (4 A100s, a100-0 has 8), where an admitted Job runs 4 one-GPU pods that
must stay placeable. Measured: GPUs Running against the tenant's admission. Findings still
open are strict xfails. Skipped when an operator is not built."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.e2e.conftest import operators_running
from tests.e2e.test_jobset import condition, drop, owned_workload
from tests.e2e.test_ray import cpu_and_gpu_groups, rayservice
from tests.e2e.test_workload_kinds import LONG, TOLERATION, gpu_container
from tests.labfixture import ROOT, WORKLOAD_GC_PROBE, LabHandle, wait_for, wait_gc_watches

sys.path.insert(0, str(ROOT / "hack"))
import lab as labmod  # noqa: E402

pytestmark = pytest.mark.lab
QUEUE = "kueue.x-k8s.io/queue-name"
NEEDED = ("jobset", "trainer", "kuberay")
JOBSET_GC_PROBE: dict[str, Any] = {
    "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "spec": {
        "suspend": True, "replicatedJobs": [{"name": "w", "replicas": 1, "template": {
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "c", "image": "busybox"}]}}}}}]}}
"""A ``wait_gc_watches`` probe: a suspended JobSet without a queue (the JobSet controller
makes no Job of it, pykueue does not queue it)."""


@pytest.fixture(scope="module")
def operators(lab: LabHandle) -> Iterator[None]:
    """JobSet, the trainer and KubeRay in the lab, before pykueue starts."""
    with operators_running(lab, *NEEDED):
        yield


@pytest.fixture(scope="module")
def pykueue_with_operators(operators: None, pykueue_in_lab: labmod.Lab) -> labmod.Lab:
    return pykueue_in_lab


def live(pods: list[dict]) -> list[dict]:
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def gpus_running(lab: LabHandle, ns: str) -> int:
    """nvidia.com/gpu requested by the namespace's Running pods."""
    return sum(int((c.get("resources") or {}).get("requests", {}).get("nvidia.com/gpu", 0))
               for p in live(lab.get("pods", "-n", ns)["items"])
               if p["status"].get("phase") == "Running" for c in p["spec"]["containers"])


def b_job() -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "b-job", "labels": {QUEUE: "lq"}},
            "spec": {"parallelism": 4, "completions": 4, "template": {
                "metadata": LONG, "spec": {"restartPolicy": "Never",
                                           "tolerations": [TOLERATION],
                                           "containers": [gpu_container()]}}}}


@contextmanager
def two_teams(lab: LabHandle, prefix: str) -> Iterator[tuple[str, str, tuple[str, ...]]]:
    """(team-a's namespace, team-b's, kubectl arguments acting as team-a's tenant): each
    with LocalQueue ``lq`` to a ClusterQueue of 4 A100s (and CPU for Ray heads) in one
    cohort; team-b's Job ``b-job`` (4 one-GPU pods) admitted and Running."""
    suffix = uuid.uuid4().hex[:6]
    cohort = f"{prefix}-{suffix}"
    names = [(f"{prefix}-a-{suffix}", f"{prefix}-cqa-{suffix}"),
             (f"{prefix}-b-{suffix}", f"{prefix}-cqb-{suffix}")]
    items: list[dict[str, Any]] = []
    for ns, cq in names:
        lab.create_namespace(ns)
        items += [
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
             "metadata": {"name": cq}, "spec": {"cohortName": cohort, "namespaceSelector": {},
                                                "resourceGroups": cpu_and_gpu_groups(4)}},
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
             "metadata": {"name": "lq", "namespace": ns}, "spec": {"clusterQueue": cq}}]
    ns_a, ns_b = names[0][0], names[1][0]
    items += [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": "tenant", "namespace": ns_a}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "tenant-operator-kinds", "namespace": ns_a},
         "rules": [{"apiGroups": ["jobset.x-k8s.io", "ray.io", "trainer.kubeflow.org",
                                  "leaderworkerset.x-k8s.io"],
                    "resources": ["*"], "verbs": ["*"]},
                   {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"],
                    "verbs": ["get", "list", "watch"]}]},
        *({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
           "metadata": {"name": f"tenant-{role}", "namespace": ns_a},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
           "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": ns_a}]}
          for kind, role in (("ClusterRole", "edit"), ("Role", "tenant-operator-kinds"))),
        {**b_job(), "metadata": {**b_job()["metadata"], "namespace": ns_b}}]
    lab.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    try:
        wait_for(lambda: gpus_running(lab, ns_b) == 4, 90, "team-b's 4 GPU pods running")
        yield ns_a, ns_b, ("--as", f"system:serviceaccount:{ns_a}:tenant")
    finally:
        drop(lab, ns_a, names[0][1])
        drop(lab, ns_b, names[1][1])


def team_b_still_placeable(lab: LabHandle, ns_b: str) -> None:
    """One of team-b's pods deleted: the Job's replacement runs (a GPU is free for it)."""
    victim = live(lab.get("pods", "-n", ns_b)["items"])[0]["metadata"]["name"]
    lab.kubectl("delete", "pod", victim, "-n", ns_b, "--wait=false")
    wait_for(lambda: gpus_running(lab, ns_b) == 4 and victim not in {
        p["metadata"]["name"] for p in live(lab.get("pods", "-n", ns_b)["items"])}, 60,
        "team-b's replacement pod running")


# ---------------------------------------------------------------------------------- RayService


def test_rayclusters_forged_under_an_admitted_rayservice_run_no_worker(
        lab: LabHandle, pykueue_with_operators: labmod.Lab) -> None:
    """The tenant's RayService (head + 1 one-GPU worker) is admitted; the tenant creates
    three RayClusters, copies of its cluster (the flavor's nodeSelector and toleration
    included), without the queue label, each with a controller ownerReference to the
    RayService's real uid. Before: 4 GPU workers Running on an admission of 1 (each held
    to the whole admission, as a RayJob's were before), team-a at 4 of its 4 GPUs on
    usage 1, a100-0 full: team-b's replaced pod Pending. After: each suspended with its
    workers at 0 (Event ``NotTheRayServicesCluster``), at most the admitted worker
    Running."""
    with two_teams(lab, "b12-rsvc") as (ns, ns_b, as_tenant):
        lab.kubectl(*as_tenant, "apply", "-f", "-", input=rayservice("serve", ns, 1))
        wait_for(lambda: (w := owned_workload(lab, ns, "RayService", "serve"))
                 and (c := condition(w, "Admitted")) and c["status"] == "True", 60,
                 "serve admitted")
        wait_for(lambda: gpus_running(lab, ns) == 1, 90, "serve's GPU worker running")
        svc = lab.get("rayservice", "serve", "-n", ns)
        (rc,) = lab.get("rayclusters", "-n", ns)["items"]
        owner = {"apiVersion": "ray.io/v1", "kind": "RayService", "name": "serve",
                 "uid": svc["metadata"]["uid"], "controller": True}
        extras = ("extra-a", "extra-b", "extra-c")
        for extra in extras:
            lab.kubectl(*as_tenant, "create", "-f", "-", input=json.dumps({
                "apiVersion": "ray.io/v1", "kind": "RayCluster",
                "metadata": {"name": extra, "namespace": ns, "ownerReferences": [owner]},
                "spec": rc["spec"]}))
        seen = [1]

        def held() -> bool:
            seen.append(gpus_running(lab, ns))
            stored = {c["metadata"]["name"]: c for c in
                      lab.get("rayclusters", "-n", ns)["items"]}
            return seen[-1] >= 4 or all(
                e not in stored or stored[e]["spec"].get("suspend") is True for e in extras)
        try:
            wait_for(held, 90, "4 GPU workers running or the forged clusters held")
            assert max(seen) <= 1, f"{max(seen)} GPU workers Running on an admission of 1"
            team_b_still_placeable(lab, ns_b)
        finally:
            print(f"\nforged RayService clusters: at most {max(seen)} GPUs Running in "
                  "team-a, admission of 1")


# ------------------------------------------------------------------------------------ TrainJob


def training_runtime(ns: str, nodes: int, gpus: int) -> str:
    """TrainingRuntime ``rt`` in ``ns``: ``nodes`` nodes (``mlPolicy.numNodes``) of one
    ``node`` container asking ``gpus`` GPUs, running an hour."""
    gpu = {"nvidia.com/gpu": str(gpus)}
    node = {"restartPolicy": "Never", "tolerations": [TOLERATION],
            "containers": [{"name": "node", "image": "busybox",
                            "resources": {"requests": gpu, "limits": gpu}}]}
    return json.dumps({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
        "metadata": {"name": "rt", "namespace": ns},
        "spec": {"mlPolicy": {"numNodes": nodes}, "template": {"spec": {"replicatedJobs": [
            {"name": "node", "template": {
                "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step":
                                        "trainer"}},
                "spec": {"backoffLimit": 0, "template": {"metadata": LONG, "spec": node}}}}]}}}})


def trainjob(name: str, ns: str) -> str:
    """A TrainJob queued in ``lq`` on TrainingRuntime ``rt`` (its nodes and GPUs)."""
    return json.dumps({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                       "metadata": {"name": name, "namespace": ns, "labels": {QUEUE: "lq"}},
                       "spec": {"runtimeRef": {"name": "rt", "kind": "TrainingRuntime"}}})


def admitted(lab: LabHandle, ns: str, name: str) -> dict | None:
    w = owned_workload(lab, ns, "TrainJob", name)
    return w if (c := condition(w, "Admitted")) and c["status"] == "True" else None


def test_a_trainjobs_child_job_raised_directly_is_set_back_to_its_share(
        lab: LabHandle, pykueue_with_operators: labmod.Lab) -> None:
    """The tenant's TrainJob (1 node x 1 GPU) is admitted and runs; the tenant patches the
    batch Job the JobSet made for it, ``tj-node-0``, to parallelism/completions 6. Before: 6
    pods, 4 Running (4 GPUs on an admission of 1, a100-0 full: team-b's replaced pod
    Pending), pykueue never looked (the trainer's JobSet is unlabelled, outside the JobSet
    informer, so the Job had no stored ancestor). After: set back to 1 (Event
    ``ExceedsAncestorAdmission``), as a JobSet's own child Job."""
    with two_teams(lab, "b12-tjob") as (ns, ns_b, as_tenant):
        lab.kubectl(*as_tenant, "apply", "-f", "-", input=training_runtime(ns, 1, 1))
        lab.kubectl(*as_tenant, "apply", "-f", "-", input=trainjob("tj", ns))
        wait_for(lambda: admitted(lab, ns, "tj"), 60, "tj admitted")
        wait_for(lambda: gpus_running(lab, ns) == 1, 90, "tj's node pod running")
        lab.kubectl(*as_tenant, "patch", "job", "tj-node-0", "-n", ns, "--type=merge",
                    "-p", '{"spec": {"parallelism": 6, "completions": 6}}')
        seen = [1]

        def set_back_or_four() -> bool:
            seen.append(gpus_running(lab, ns))
            return seen[-1] >= 4 or lab.get("job", "tj-node-0", "-n", ns)["spec"][
                "parallelism"] == 1
        try:
            wait_for(set_back_or_four, 60, "tj-node-0 set back or 4 GPUs running")
            wait_for(lambda: seen.append(gpus_running(lab, ns)) or len(
                live(lab.get("pods", "-n", ns)["items"])) == 1, 60, "tj-node-0's one pod left")
            assert lab.get("job", "tj-node-0", "-n", ns)["spec"]["parallelism"] == 1
            assert gpus_running(lab, ns) <= 1
            team_b_still_placeable(lab, ns_b)
        finally:
            print(f"\nTrainJob child Job raised to 6: at most {max(seen)} GPUs Running, "
                  "admission of 1")


def test_a_stale_jobset_of_a_trainjob_runs_no_more_gpus_than_admitted(
        lab: LabHandle, pykueue_with_operators: labmod.Lab) -> None:
    """Team-a's quota is full (a 4-GPU Job). The tenant's TrainingRuntime asks 2 nodes x 3
    GPUs; its TrainJob waits, and the trainer makes its JobSet (suspended) at that shape.
    The tenant sets the runtime to 1 x 1 GPU and touches the TrainJob: its Workload follows
    the runtime (1 GPU) and is admitted once the blocker is deleted, while the JobSet keeps
    2 x 3 (the JobSet webhook refuses the trainer's update: it stays suspended, the
    admission held with no pod). The tenant unsuspends the JobSet itself. Seen: 6 GPUs
    Running on an admission of 1 (2 pods of 3 GPUs); with the child Job held to its share,
    1 pod of 3 GPUs. Expected: no more GPUs Running than admitted; pykueue suspends the
    JobSet again (it exceeds the TrainJob's admission: Warning ``ExceedsAncestorAdmission``)."""
    with two_teams(lab, "b12-stale") as (ns, ns_b, as_tenant):
        blocker = b_job()
        blocker["metadata"].update(name="blocker", namespace=ns)
        lab.kubectl(*as_tenant, "apply", "-f", "-", input=json.dumps(blocker))
        wait_for(lambda: gpus_running(lab, ns) == 4, 90, "team-a's blocker running")
        lab.kubectl(*as_tenant, "apply", "-f", "-", input=training_runtime(ns, 2, 3))
        lab.kubectl(*as_tenant, "apply", "-f", "-", input=trainjob("tj", ns))
        wait_for(lambda: lab.get("jobsets", "-n", ns)["items"], 60, "tj's JobSet made")
        lab.kubectl(*as_tenant, "apply", "-f", "-", input=training_runtime(ns, 1, 1))
        lab.kubectl(*as_tenant, "annotate", "trainjob", "tj", "-n", ns, "touched=1")
        wait_for(lambda: (w := owned_workload(lab, ns, "TrainJob", "tj"))
                 and [p["count"] for p in w["spec"]["podSets"]] == [1], 30,
                 "tj's Workload at the runtime's new shape (1 node)")
        lab.kubectl(*as_tenant, "delete", "job", "blocker", "-n", ns, "--wait=false")
        wait_for(lambda: admitted(lab, ns, "tj"), 90, "tj admitted for 1 GPU")
        wait_for(lambda: gpus_running(lab, ns) == 0, 90, "the blocker's pods gone")
        lab.kubectl(*as_tenant, "patch", "jobset", "tj", "-n", ns, "--type=merge",
                    "-p", '{"spec": {"suspend": false}}')
        seen = [0]

        def beyond_or_stopped() -> bool:
            seen.append(gpus_running(lab, ns))
            return seen[-1] > 1 or lab.get("jobset", "tj", "-n", ns)["spec"].get(
                "suspend") is True
        try:
            wait_for(beyond_or_stopped, 60, "more than 1 GPU running or the JobSet stopped")
            assert max(seen) <= 1, f"{max(seen)} GPUs Running on an admission of 1"
            wait_for(lambda: not live(lab.get("pods", "-n", ns)["items"]), 60,
                     "the stale JobSet's pods gone")
            assert lab.get("jobset", "tj", "-n", ns)["spec"]["suspend"] is True
            assert any(e.get("reason") == "ExceedsAncestorAdmission" for e in lab.get(
                "events", "-n", ns, "--field-selector", "involvedObject.kind=JobSet")["items"])
        finally:
            print(f"\nstale TrainJob JobSet unsuspended: at most {max(seen)} GPUs Running, "
                  "admission of 1")


def test_an_orphaned_trainjobs_jobset_is_stopped_and_its_job_cannot_be_raised(
        lab: LabHandle, pykueue_with_operators: labmod.Lab) -> None:
    """The tenant's TrainJob (1 node x 1 GPU) runs; the tenant deletes it with
    ``--cascade=orphan`` (its JobSet and Workload lose their owner) and raises the JobSet's
    Job ``tj-node-0`` to parallelism/completions 6. Before: the Job stopped and resumed over
    and over (pykueue's ``AncestorGone`` stop against jobset's ``resumeJobsIfNecessary``,
    which puts the admission's podset label and scheduling back), 2-4 GPUs Running at a
    time, a100-0 full at times, the TrainJob's Workload admitted for 1 (``WaitingForPods``)
    for as long as watched. After: the orphaned JobSet is stopped with its Job and their pods
    go (the raised pods may start before the stop: a window)."""
    with two_teams(lab, "b12-orph") as (ns, _, as_tenant):
        lab.kubectl(*as_tenant, "apply", "-f", "-", input=training_runtime(ns, 1, 1))
        lab.kubectl(*as_tenant, "apply", "-f", "-", input=trainjob("tj", ns))
        wait_for(lambda: admitted(lab, ns, "tj"), 60, "tj admitted")
        wait_for(lambda: gpus_running(lab, ns) == 1, 90, "tj's node pod running")
        wait_gc_watches(lab.kubectl, ns, WORKLOAD_GC_PROBE, JOBSET_GC_PROBE)
        lab.kubectl(*as_tenant, "delete", "trainjob", "tj", "-n", ns, "--cascade=orphan")
        wait_for(lambda: not lab.get("trainjobs", "-n", ns)["items"], 30, "tj deleted")
        lab.kubectl(*as_tenant, "patch", "job", "tj-node-0", "-n", ns, "--type=merge",
                    "-p", '{"spec": {"parallelism": 6, "completions": 6}}')
        seen = [1]

        def stopped() -> bool:
            seen.append(gpus_running(lab, ns))
            return lab.get("jobset", "tj", "-n", ns)["spec"].get("suspend") is True \
                and not live(lab.get("pods", "-n", ns)["items"])
        try:
            wait_for(stopped, 60, "the orphaned JobSet stopped and its pods gone")
            assert lab.get("job", "tj-node-0", "-n", ns)["spec"]["suspend"] is True
        finally:
            # The Job controller starts the raised pods before pykueue's stop (a window).
            print(f"\norphaned TrainJob's JobSet, Job raised to 6: at most {max(seen)} GPUs "
                  "Running before it was stopped, admission of 1")

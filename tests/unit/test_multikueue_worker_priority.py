"""A MultiKueue worker's Job whose WorkloadPriorityClass exists on the manager only: Kueue
v0.17.1's ``EquivalentToWorkload`` compares the pod sets of a job and its prebuilt Workload,
not their priority, so the copy stays the Job's. pykueue's worker read the Job's priority
class to compare, found none, took the Job for unreadable and deleted the copy ("Deleted not
matching Workload"; found by `make multikueue-interop`, direction b, a priority-1000 Job on
Kueue's manager)."""

from __future__ import annotations

from app.integrations.batchjob.job import KIND as JOB
from app.integrations.reconciler import _with_own_class
from app.kube.client import PRIORITY_CLASSES, WORKLOAD_PRIORITY_CLASSES
from app.kube.context import PC, WPC
from tests.unit.fake_ctx import StoreOnly
from tests.unit.test_orphaned_workloads import reconciler

NS = "team-a"


def _job() -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "urgent", "namespace": NS, "uid": "u1", "labels": {
                "kueue.x-k8s.io/queue-name": "lq",
                "kueue.x-k8s.io/priority-class": "manager-only",
                "kueue.x-k8s.io/prebuilt-workload-name": "job-urgent-1"}},
            "spec": {"parallelism": 1, "completions": 1, "suspend": True, "template": {
                "spec": {"restartPolicy": "Never", "containers": [{
                    "name": "c", "image": "busybox",
                    "resources": {"requests": {"cpu": "4"}}}]}}}}


def _copy() -> dict:
    """The manager's copy: priority 1000 of class ``manager-only``, admitted here."""
    pod_set = {"name": "main", "count": 1, "template": {"spec": {"containers": [{
        "name": "c", "image": "busybox", "resources": {"requests": {"cpu": "4"}}}]}}}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": "job-urgent-1", "namespace": NS, "uid": "w1",
                         "labels": {"kueue.x-k8s.io/multikueue-origin": "multikueue"}},
            "spec": {"queueName": "lq", "priority": 1000, "podSets": [pod_set],
                     "priorityClassRef": {"group": "kueue.x-k8s.io",
                                          "kind": "WorkloadPriorityClass",
                                          "name": "manager-only"}},
            "status": {"admission": {"clusterQueue": "cq", "podSetAssignments": [
                {"name": "main", "count": 1, "flavors": {"cpu": "f"},
                 "resourceUsage": {"cpu": "4"}}]},
                "conditions": [{"type": "QuotaReserved", "status": "True"},
                               {"type": "Admitted", "status": "True"}]}}


def test_a_priority_class_missing_on_the_worker_does_not_unmatch_the_copy():
    rec, ctx = reconciler()
    ctx.informers.add(WPC, StoreOnly(WORKLOAD_PRIORITY_CLASSES))  # type: ignore[arg-type]
    ctx.informers.add(PC, StoreOnly(PRIORITY_CLASSES))  # type: ignore[arg-type]
    assert rec._admission_mismatch(JOB, _job(), _copy()) is None
    # The pod sets still count: a Job asking for more than its copy does not match.
    bigger = _job()
    bigger["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "5"
    assert "differ from the admitted ones" in (rec._admission_mismatch(JOB, bigger, _copy())
                                               or "")


def test_the_workloads_own_class_stands_in_only_when_missing():
    wl = _copy()
    assert _with_own_class(wl, {}, {}) == ({"manager-only": 1000}, {})
    assert _with_own_class(wl, {"manager-only": 7}, {}) == ({"manager-only": 7}, {})
    wl["spec"]["priorityClassRef"] = {"group": "scheduling.k8s.io", "kind": "PriorityClass",
                                      "name": "high"}
    assert _with_own_class(wl, {}, {}) == ({}, {"high": 1000})
    wl["spec"].pop("priorityClassRef")
    assert _with_own_class(wl, {"a": 1}, {}) == ({"a": 1}, {})

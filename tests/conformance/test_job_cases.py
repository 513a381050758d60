"""The acceptance cases that need a Job (../shared/acceptance/core-cases.md: KQ-21, KQ-22,
KQ-24, KQ-25) as conformance scenarios: batch/v1 Jobs created through the API, the webhooks and
Job controller of the target (pykueue, or Kueue v0.17.1 with its batch/job integration) acting
on them. The expected values are the case's and Kueue v0.17.1's.

Not here: KQ-23 and KQ-24's step 3 need a default LocalQueue with ``manageJobsWithoutQueueName``
and ``managedJobsNamespaceSelector`` configured (the conformance labs run both systems with
their shipped configuration; tests/unit/test_webhook.py and
tests/integration/test_reconciler_lifecycle.py cover them for pykueue), and KQ-21's step 2
needs a controller restart.
"""

from __future__ import annotations

import json

import pytest

from tests.conformance.support import (
    QUEUE_LABEL,
    Scope,
    Target,
    create_job,
    get_job,
    is_true,
    set_active,
    workload_of_job,
)
from tests.labfixture import wait_for


def _tolerations(pod_spec: dict) -> list[tuple]:
    """Tolerations as comparable tuples: an unset operator is ``Equal`` (Kubernetes)."""
    return sorted((t.get("key", ""), t.get("operator") or "Equal", t.get("value", ""),
                   t.get("effect", "")) for t in pod_spec.get("tolerations") or [])


def _pod_spec(job: dict) -> dict:
    return job["spec"]["template"]["spec"]


def _running(s: Scope, job: str) -> dict:
    return wait_for(lambda: (lambda j: j if j["spec"].get("suspend") is False else None)(
        get_job(s, job)), 30, f"{s.ns}/{job} unsuspended")


def _suspended(s: Scope, job: str) -> dict:
    return wait_for(lambda: (lambda j: j if j["spec"].get("suspend") is True else None)(
        get_job(s, job)), 30, f"{s.ns}/{job} suspended")


def _pods(s: Scope, job: str) -> list[dict]:
    return s.lab.get("pods", "-n", s.ns, "-l", f"batch.kubernetes.io/job-name={job}")["items"]


@pytest.mark.make_test
def test_kq21_flavor_tolerations_injected_once_and_restored_exactly(target: Target) -> None:
    s = target.scope("kq21")
    gpu = "nvidia.com/gpu"
    pool = {"pool": f"{s.ns}-gpu"}
    tol_exists = {"key": gpu, "operator": "Exists", "effect": "NoSchedule"}
    f = s.flavor("gpu", pool, tolerations=[tol_exists,
                                           {"key": "t0", "value": "v0", "effect": "NoSchedule"}])
    s.cluster_queue("cq", [(f, {gpu: {"nominalQuota": "8"}})])
    own = [tol_exists, {"key": "t0", "operator": "Equal", "value": "v0", "effect": "NoSchedule"}]
    create_job(s, "j", {gpu: "1"}, queue="lq-cq", pod={"tolerations": own, "nodeSelector": {}})
    wl = workload_of_job(s, "j")
    s.admitted(wl)
    job = _running(s, "j")
    assert _pod_spec(job).get("nodeSelector") == pool, _pod_spec(job)
    got, want = _tolerations(_pod_spec(job)), _tolerations({"tolerations": own})
    if target.name == "kueue":
        # Target-specific: Kueue v0.17.1 predates kueue#11147 (an unset operator is Equal)
        # and adds the flavor's {t0=v0} next to the Job's identical one, a duplicate (the
        # bug the case describes); pykueue follows the fix (docs/architecture.md).
        assert len(got) == 3 and sorted(set(got)) == want, _pod_spec(job)["tolerations"]
    else:
        assert got == want, _pod_spec(job)["tolerations"]  # two: unset operator == Equal
    set_active(s, wl, False)  # evict it
    job = _suspended(s, "j")
    job = wait_for(lambda: (lambda j: j if not _pod_spec(j).get("nodeSelector") else None)(
        get_job(s, "j")), 30, "nodeSelector restored")
    assert _tolerations(_pod_spec(job)) == _tolerations({"tolerations": own})
    assert len(_pod_spec(job)["tolerations"]) == 2

    # A flavor's own tolerations cover its taints (kueue#3721); a tainted flavor with no
    # toleration is skipped for a Job that does not tolerate the taint.
    taint = [{"key": gpu, "effect": "NoSchedule"}]
    bare = s.flavor("tainted", {"pool": f"{s.ns}-tainted"}, nodeTaints=taint)
    covered = s.flavor("covered", {"pool": f"{s.ns}-covered"}, nodeTaints=taint,
                       tolerations=[tol_exists])
    s.cluster_queue("taints", [(bare, {gpu: {"nominalQuota": "8"}}),
                               (covered, {gpu: {"nominalQuota": "8"}})])
    create_job(s, "plain", {gpu: "1"}, queue="lq-taints")
    wl = workload_of_job(s, "plain")
    s.admitted(wl)
    assert s.flavors_of(wl) == {gpu: covered}
    job = _running(s, "plain")
    assert _tolerations(_pod_spec(job)) == _tolerations({"tolerations": [tol_exists]})


@pytest.mark.make_test
def test_kq22_a_queued_job_is_stored_suspended_and_never_starts_early(
        target: Target) -> None:
    s = target.scope("kq22")
    f = s.flavor("default", {"pool": "kq22"})
    s.cluster_queue("cq", [(f, {"cpu": {"nominalQuota": "1"}})])
    stored = create_job(s, "j1", {"cpu": "2"}, queue="lq-cq")  # suspend omitted
    assert stored["spec"]["suspend"] is True
    s.stays_pending(workload_of_job(s, "j1"))
    assert get_job(s, "j1")["spec"]["suspend"] is True
    assert _pods(s, "j1") == []
    stored = create_job(s, "j2", {"cpu": "1"}, queue="lq-cq", suspend=False)
    assert stored["spec"]["suspend"] is True
    s.admitted(workload_of_job(s, "j2"))
    job = _running(s, "j2")
    assert _pod_spec(job).get("nodeSelector") == {"pool": "kq22"}
    assert _pods(s, "j1") == []
    # Control: a Job without the label is not touched (manageJobsWithoutQueueName off).
    stored = create_job(s, "free", {"cpu": "1"}, suspend=False)
    assert stored["spec"]["suspend"] is False
    wait_for(lambda: _pods(s, "free"), 30, "pods of the unqueued Job")


def test_kq24_the_queue_label_changes_only_while_suspended(target: Target) -> None:
    s = target.scope("kq24")
    f = s.flavor("default")
    for cq, cpu in (("cq1", "4"), ("cq2", "8")):
        s.cluster_queue(cq, [(f, {"cpu": {"nominalQuota": cpu}})])
    create_job(s, "run", {"cpu": "1"}, queue="lq-cq1")
    s.admitted(workload_of_job(s, "run"))
    _running(s, "run")
    for change in ({QUEUE_LABEL: "lq-cq2"}, {QUEUE_LABEL: None}):
        r = s.lab.kubectl("patch", "jobs.batch", "run", "-n", s.ns, "--type=merge", "-p",
                          json.dumps({"metadata": {"labels": change}}), check=False)
        assert r.returncode != 0, f"{change} accepted on a running Job"
        assert get_job(s, "run")["metadata"]["labels"][QUEUE_LABEL] == "lq-cq1"
    # A suspended Job moves: its Workload is evaluated in cq2 (5 cpu never fit cq1's 4, and
    # "run" may complete meanwhile: kwok runs its pod to completion).
    create_job(s, "wait", {"cpu": "5"}, queue="lq-cq1")
    s.stays_pending(workload_of_job(s, "wait"))
    s.lab.kubectl("patch", "jobs.batch", "wait", "-n", s.ns, "--type=merge", "-p",
                  json.dumps({"metadata": {"labels": {QUEUE_LABEL: "lq-cq2"}}}))

    def moved() -> dict | None:
        w = s.wl(workload_of_job(s, "wait"))
        adm = (w.get("status") or {}).get("admission") or {}
        return w if adm.get("clusterQueue") == s.n("cq2") and is_true(w, "Admitted") else None
    wait_for(moved, 30, "the Workload admitted by cq2")
    s.reserved("cq2", f, "cpu", 5000, 0)
    # An unqueued running Job is queued only together with suspend: true.
    create_job(s, "free", {"cpu": "1"}, suspend=False)
    r = s.lab.kubectl("patch", "jobs.batch", "free", "-n", s.ns, "--type=merge", "-p",
                      json.dumps({"metadata": {"labels": {QUEUE_LABEL: "lq-cq1"}}}),
                      check=False)
    assert r.returncode != 0, "queue label added to a running Job"
    s.lab.kubectl("patch", "jobs.batch", "free", "-n", s.ns, "--type=merge", "-p",
                  json.dumps({"metadata": {"labels": {QUEUE_LABEL: "lq-cq1"}},
                              "spec": {"suspend": True}}))
    s.admitted(workload_of_job(s, "free"))


@pytest.mark.make_test
def test_kq25_partial_admission_sets_and_restores_parallelism(target: Target) -> None:
    s = target.scope("kq25")
    f = s.flavor("default")
    minp = "kueue.x-k8s.io/job-min-parallelism"
    for case, min_count in (("a", "9"), ("b", "8")):
        s.cluster_queue(case, [(f, {"cpu": {"nominalQuota": "9"},
                                    "memory": {"nominalQuota": "36Gi"}})])
        create_job(s, case, {"cpu": "1"}, queue=f"lq-{case}", parallelism=10, indexed=True,
                   annotations={minp: min_count})
    for case in ("a", "b"):
        w = s.admitted(workload_of_job(s, case))
        assert w["status"]["admission"]["podSetAssignments"][0]["count"] == 9
        job = _running(s, case)  # parallelism and suspend in one accepted update
        assert job["spec"]["parallelism"] == 9
        s.reserved(case, f, "cpu", 9000, 0)
    # Case B: evicted, the Job gets its parallelism back and asks for 10 (min 8) again.
    wl = workload_of_job(s, "b")
    set_active(s, wl, False)
    job = _suspended(s, "b")
    wait_for(lambda: get_job(s, "b")["spec"]["parallelism"] == 10, 30, "parallelism 10 again")
    s.pending(wl)
    assert s.wl(wl)["spec"]["podSets"][0]["count"] == 10
    set_active(s, wl, True)
    w = s.admitted(wl)
    assert w["status"]["admission"]["podSetAssignments"][0]["count"] == 9
    _running(s, "b")
    s.reserved("b", f, "cpu", 9000, 0)

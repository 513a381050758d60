"""Workload lifecycle rules on the real API server with real Jobs and an in-process
reconciler (issue 19): stop policies (Kueue ClusterQueue and LocalQueue ``spec.stopPolicy``)
and ``maximumExecutionTimeSeconds``."""

from __future__ import annotations

import json

import pytest

from app.config import JobsSettings
from tests.integration.reconciler_support import (
    ManagerThread,
    apply,
    cond,
    is_admitted,
    job_manifest,
    job_obj,
    job_pods,
    make_queue,
    manager_fixture,  # noqa: F401 - fixture
    namespace,
    rlab_fixture,  # noqa: F401 - fixture
    settings_for,
    unique,
    workload_of,
)
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab


def _status(c: dict | None) -> tuple[str, str] | None:
    return None if c is None else (c["status"], c["reason"])


def _stop(lab: LabHandle, kind: str, name: str, policy: str, ns: str | None = None) -> None:
    args = ["patch", kind, name, "--type=merge", "-p",
            json.dumps({"spec": {"stopPolicy": policy}})]
    lab.kubectl(*args, *(["-n", ns] if ns else []))


def _pods_created(lab: LabHandle, ns: str, job: str) -> int:
    """Pods the Job controller created for ``job`` (its SuccessfulCreate Events): they
    outlive the pods, which a short time limit may already have removed when polled."""
    return sum(e["reason"] == "SuccessfulCreate" for e in lab.get(
        "events", "-n", ns, "--field-selector", f"involvedObject.name={job}")["items"])


def _suspended_and_podless(lab: LabHandle, ns: str, job: str) -> bool:
    return bool(job_obj(lab, ns, job)["spec"].get("suspend")) and not [
        p for p in job_pods(lab, ns, job) if not p["metadata"].get("deletionTimestamp")]


def test_cluster_queue_hold_and_drain_evicts_and_restart_requeues(rlab: LabHandle,
                                                                  manager) -> None:
    ns = namespace(rlab, "stop")
    cq = unique("stop-cq")
    make_queue(rlab, cq, (ns,), cpu="4")
    try:
        apply(rlab, job_manifest("run", ns, "lq", parallelism=2, duration="600s"))
        wait_for(lambda: is_admitted(workload_of(rlab, ns, "run")), 30, "run admitted")
        wait_for(lambda: len(job_pods(rlab, ns, "run")) == 2, 30, "run's 2 pods")
        # Hold: the running Job keeps running, a new one waits with the reason.
        _stop(rlab, "clusterqueue", cq, "Hold")
        apply(rlab, job_manifest("new", ns, "lq", parallelism=1, duration="600s"))
        w = wait_for(lambda: (x := workload_of(rlab, ns, "new")) and _status(
            cond(x, "QuotaReserved")) == ("False", "Inadmissible") and x, 30, "new held")
        assert "stopPolicy" in cond(w, "QuotaReserved")["message"]
        active = cond(rlab.get("clusterqueue", cq), "Active")
        wait_for(lambda: _status(cond(rlab.get("clusterqueue", cq), "Active"))
                 == ("False", "Stopped"), 30, "ClusterQueue Active=False Stopped")
        assert is_admitted(workload_of(rlab, ns, "run")) and active is not None
        # HoldAndDrain: the running Job is stopped, its Workload evicted and not requeued.
        _stop(rlab, "clusterqueue", cq, "HoldAndDrain")
        wait_for(lambda: _suspended_and_podless(rlab, ns, "run"), 60, "run suspended, no pods")
        w = wait_for(lambda: (x := workload_of(rlab, ns, "run")) and not is_admitted(x)
                     and _status(cond(x, "Requeued")) is not None and x, 60, "run released")
        assert _status(cond(w, "Evicted")) == ("True", "ClusterQueueStopped")
        assert _status(cond(w, "Requeued")) == ("False", "ClusterQueueStopped")
        # Restart: both are admitted again, the drained one Requeued=True.
        _stop(rlab, "clusterqueue", cq, "None")
        wait_for(lambda: is_admitted(workload_of(rlab, ns, "run"))
                 and is_admitted(workload_of(rlab, ns, "new")), 60, "both admitted again")
        assert _status(cond(workload_of(rlab, ns, "run"), "Requeued"))[0] == "True"
    finally:
        rlab.kubectl("delete", "namespace", ns, "--wait=false")
        rlab.kubectl("delete", "clusterqueue", cq, "--wait=false")


def test_local_queue_hold_and_drain_stops_only_its_own_jobs(rlab: LabHandle, manager) -> None:
    ns = namespace(rlab, "lqstop")
    cq = unique("lqstop-cq")
    make_queue(rlab, cq, (ns,), cpu="4")
    apply(rlab, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                 "metadata": {"name": "other", "namespace": ns}, "spec": {"clusterQueue": cq}})
    try:
        apply(rlab, job_manifest("mine", ns, "lq", duration="600s"),
              job_manifest("theirs", ns, "other", duration="600s"))
        wait_for(lambda: is_admitted(workload_of(rlab, ns, "mine"))
                 and is_admitted(workload_of(rlab, ns, "theirs")), 30, "both admitted")
        _stop(rlab, "localqueue", "other", "HoldAndDrain", ns)
        wait_for(lambda: _suspended_and_podless(rlab, ns, "theirs"), 60, "theirs stopped")
        w = wait_for(lambda: (x := workload_of(rlab, ns, "theirs")) and not is_admitted(x)
                     and cond(x, "Requeued") and x, 60, "theirs released")
        assert _status(cond(w, "Evicted")) == ("True", "LocalQueueStopped")
        wait_for(lambda: _status(cond(workload_of(rlab, ns, "theirs"), "QuotaReserved"))
                 == ("False", "Inadmissible"), 30, "theirs waits: its LocalQueue is stopped")
        assert is_admitted(workload_of(rlab, ns, "mine"))
        wait_for(lambda: _status(cond(rlab.get("localqueue", "other", "-n", ns), "Active"))
                 == ("False", "Stopped"), 30, "LocalQueue Active=False Stopped")
        _stop(rlab, "localqueue", "other", "None", ns)
        wait_for(lambda: is_admitted(workload_of(rlab, ns, "theirs")), 60, "theirs again")
    finally:
        rlab.kubectl("delete", "namespace", ns, "--wait=false")
        rlab.kubectl("delete", "clusterqueue", cq, "--wait=false")


def test_maximum_execution_time_deactivates_the_workload_and_stops_its_job(
        rlab: LabHandle, manager) -> None:
    ns = namespace(rlab, "maxexec")
    cq = unique("maxexec-cq")
    make_queue(rlab, cq, (ns,), cpu="4")
    try:
        apply(rlab, job_manifest("limited", ns, "lq", parallelism=2, duration="600s",
                                 labels={"kueue.x-k8s.io/max-exec-time-seconds": "3"}))
        w = wait_for(lambda: (x := workload_of(rlab, ns, "limited")) and is_admitted(x) and x,
                     30, "limited admitted")
        assert w["spec"]["maximumExecutionTimeSeconds"] == 3
        # The pods ran (created), whether or not they are still there 3 s after admission.
        wait_for(lambda: _pods_created(rlab, ns, "limited") == 2, 30, "limited's pods")
        w = wait_for(lambda: (x := workload_of(rlab, ns, "limited"))
                     and x["spec"].get("active") is False and not is_admitted(x)
                     and cond(x, "Requeued") and x, 60, "deactivated and released")
        assert _status(cond(w, "Evicted")) == (
            "True", "DeactivatedDueToMaximumExecutionTimeExceeded")
        assert cond(w, "DeactivationTarget") is None  # carried out, then dropped
        assert w["status"]["accumulatedPastExecutionTimeSeconds"] >= 3
        wait_for(lambda: _suspended_and_podless(rlab, ns, "limited"), 60, "its Job stopped")
        # Another Job takes the quota; the deactivated one is never admitted again.
        apply(rlab, job_manifest("next", ns, "lq", parallelism=4, duration="600s"))
        wait_for(lambda: is_admitted(workload_of(rlab, ns, "next")), 30, "next admitted")
        assert not is_admitted(workload_of(rlab, ns, "limited"))
    finally:
        rlab.kubectl("delete", "namespace", ns, "--wait=false")
        rlab.kubectl("delete", "clusterqueue", cq, "--wait=false")


@pytest.mark.parametrize("synced", [False, True], ids=["parallelism", "completions-too"])
def test_KQ_25_partial_admission_runs_fewer_pods_and_restores_parallelism_on_eviction(
        rlab: LabHandle, manager, synced: bool) -> None:
    """With ``job-completions-equal-parallelism`` (an Indexed Job) the API server must take
    completions changed with parallelism at the start and back at the stop."""
    ns = namespace(rlab, "partial")
    cq = unique("partial-cq")
    make_queue(rlab, cq, (ns,), cpu="4")
    try:
        j = job_manifest("wide", ns, "lq", parallelism=6, duration="600s")
        j["metadata"]["annotations"] = {"kueue.x-k8s.io/job-min-parallelism": "3"}
        if synced:
            j["metadata"]["annotations"][
                "kueue.x-k8s.io/job-completions-equal-parallelism"] = "true"
            j["spec"]["completionMode"] = "Indexed"
        apply(rlab, j)
        w = wait_for(lambda: (x := workload_of(rlab, ns, "wide")) and is_admitted(x) and x,
                     30, "wide admitted partially")
        assert (w["spec"]["podSets"][0]["count"], w["spec"]["podSets"][0]["minCount"]) == (6, 3)
        psa = w["status"]["admission"]["podSetAssignments"][0]
        assert (psa["count"], psa["resourceUsage"]["cpu"]) == (4, "4")
        wait_for(lambda: len(job_pods(rlab, ns, "wide")) == 4, 30, "4 pods, not 6")
        spec = job_obj(rlab, ns, "wide")["spec"]
        assert (spec["parallelism"], spec["completions"]) == (4, 4 if synced else 6)
        # Evicted (the queue drained): suspended with the user's parallelism back.
        _stop(rlab, "clusterqueue", cq, "HoldAndDrain")
        wait_for(lambda: _suspended_and_podless(rlab, ns, "wide"), 60, "wide stopped")
        wait_for(lambda: job_obj(rlab, ns, "wide")["spec"]["parallelism"] == 6, 30,
                 "parallelism 6 restored")
        assert job_obj(rlab, ns, "wide")["spec"]["completions"] == 6
        _stop(rlab, "clusterqueue", cq, "None")
        w = wait_for(lambda: (x := workload_of(rlab, ns, "wide")) and is_admitted(x) and x,
                     60, "wide admitted again")
        assert w["status"]["admission"]["podSetAssignments"][0]["count"] == 4
        assert w["spec"]["podSets"][0]["count"] == 6  # the same Workload, not rebuilt
    finally:
        rlab.kubectl("delete", "namespace", ns, "--wait=false")
        rlab.kubectl("delete", "clusterqueue", cq, "--wait=false")


def test_manage_jobs_without_queue_name_queues_unlabelled_jobs_of_managed_namespaces(
        rlab: LabHandle) -> None:
    """Kueue manageJobsWithoutQueueName + managedJobsNamespaceSelector: an unlabelled Job in
    a managed namespace gets a Workload that waits for a LocalQueue; one elsewhere none."""
    settings = settings_for(rlab)
    settings.jobs = JobsSettings(manage_jobs_without_queue_name=True,
                                 managed_jobs_namespace_selector={
                                     "matchLabels": {"pykueue-test/managed": "yes"}})
    managed, other = namespace(rlab, "managed"), namespace(rlab, "unmanaged")
    rlab.kubectl("label", "namespace", managed, "pykueue-test/managed=yes")
    cq = unique("unlabelled-cq")
    make_queue(rlab, cq, (managed,), cpu="4")
    mt = ManagerThread(settings).start()
    try:
        for ns in (managed, other):
            j = job_manifest("plain", ns, "x", duration="600s")
            del j["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
            apply(rlab, j)
        w = wait_for(lambda: (x := workload_of(rlab, managed, "plain")) and cond(
            x, "QuotaReserved") and x, 30, "a Workload for the unlabelled Job")
        assert w["spec"].get("queueName", "") == ""
        assert "doesn't exist" in cond(w, "QuotaReserved")["message"]
        # Labelled while suspended: it moves to the LocalQueue and is admitted.
        rlab.kubectl("label", "job", "plain", "-n", managed, "kueue.x-k8s.io/queue-name=lq")
        wait_for(lambda: is_admitted(workload_of(rlab, managed, "plain")), 30, "admitted")
        wait_for(lambda: len(job_pods(rlab, managed, "plain")) == 1, 30, "its pod runs")
        assert workload_of(rlab, other, "plain") is None  # not a managed namespace
        assert job_obj(rlab, other, "plain")["spec"]["suspend"] is True  # left as created
    finally:
        mt.stop()
        rlab.kubectl("delete", "namespace", managed, other, "--wait=false")
        rlab.kubectl("delete", "clusterqueue", cq, "--wait=false")


@pytest.mark.parametrize("record", ["not-json", "[1]", '{"tolerations": 5}',
                                    '{"parallelism": "9"}',
                                    '{"tolerations": [{"operator": "Bogus"}]}'])
def test_a_tampered_start_record_does_not_keep_the_quota_past_the_time_limit(
        rlab: LabHandle, manager, record: str) -> None:
    """The tenant owns the Job, so it can overwrite pykueue's start record
    (``pykueue.dev/original-pod-scheduling``) while the Job runs. The time limit still stops
    the Job and its quota still returns (an unreadable record is ignored, not a stuck stop
    that keeps the quota, and so another namespace's Workload, forever)."""
    ns = namespace(rlab, "tamper")
    other = namespace(rlab, "tamper-next")
    cq = unique("tamper-cq")
    make_queue(rlab, cq, (ns, other), cpu="2")
    try:
        apply(rlab, job_manifest("limited", ns, "lq", parallelism=2, duration="600s",
                                 labels={"kueue.x-k8s.io/max-exec-time-seconds": "4"}))
        wait_for(lambda: is_admitted(workload_of(rlab, ns, "limited")), 30, "limited admitted")
        wait_for(lambda: _pods_created(rlab, ns, "limited") == 2, 30, "limited's pods")
        rlab.kubectl("annotate", "job", "limited", "-n", ns, "--overwrite",
                     f"pykueue.dev/original-pod-scheduling={record}")
        apply(rlab, job_manifest("next", other, "lq", parallelism=2, duration="600s"))
        wait_for(lambda: _suspended_and_podless(rlab, ns, "limited"), 60, "limited stopped")
        wait_for(lambda: is_admitted(workload_of(rlab, other, "next")), 60,
                 "the other namespace's Job admitted on the returned quota")
        assert not is_admitted(workload_of(rlab, ns, "limited"))
    finally:
        rlab.kubectl("delete", "namespace", ns, other, "--wait=false")
        rlab.kubectl("delete", "clusterqueue", cq, "--wait=false")


def test_a_refused_deactivation_is_retried_until_the_time_limit_holds(
        rlab: LabHandle, manager) -> None:
    """The write of ``spec.active: false`` fails (here an admission policy refuses it for a
    while; in life an API server hiccup or three conflicts): the limit is tried again, not
    forgotten, so the Job does not run unbounded once writes succeed again."""
    ns = namespace(rlab, "maxexec-retry")
    cq = unique("maxexec-retry-cq")
    policy = unique("deny-deactivate")
    make_queue(rlab, cq, (ns,), cpu="4")
    vap = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
           "metadata": {"name": policy}, "spec": {
               "failurePolicy": "Fail",
               "matchConstraints": {"resourceRules": [{
                   "apiGroups": ["kueue.x-k8s.io"], "apiVersions": ["*"],
                   "operations": ["UPDATE"], "resources": ["workloads"]}]},
               "validations": [{"expression": "!has(object.spec.active) || object.spec.active",
                                "message": "lab: deactivation refused"}]}}
    binding = {"apiVersion": "admissionregistration.k8s.io/v1",
               "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": policy},
               "spec": {"policyName": policy, "validationActions": ["Deny"],
                        "matchResources": {"namespaceSelector": {"matchLabels": {
                            "kubernetes.io/metadata.name": ns}}}}}

    def refused(name: str) -> bool:
        return rlab.kubectl("patch", "workloads.kueue.x-k8s.io", name, "-n", ns,
                            "--dry-run=server", "--type=merge", "-p",
                            '{"spec": {"active": false}}', check=False).returncode != 0

    try:
        apply(rlab, vap, binding)
        apply(rlab, job_manifest("limited", ns, "lq", duration="600s",
                                 labels={"kueue.x-k8s.io/max-exec-time-seconds": "6"}))
        w = wait_for(lambda: (x := workload_of(rlab, ns, "limited")) and is_admitted(x) and x,
                     30, "limited admitted")
        name = w["metadata"]["name"]
        wait_for(lambda: refused(name), 30, "the policy refuses deactivation")
        wait_for(lambda: _status(cond(workload_of(rlab, ns, "limited"), "DeactivationTarget"))
                 == ("True", "MaximumExecutionTimeExceeded"), 60, "deactivation attempted")
        assert workload_of(rlab, ns, "limited")["spec"].get("active") is not False
        rlab.kubectl("delete", "validatingadmissionpolicybinding", policy)
        rlab.kubectl("delete", "validatingadmissionpolicy", policy)
        wait_for(lambda: workload_of(rlab, ns, "limited")["spec"].get("active") is False, 60,
                 "deactivated once the write is allowed again")
        wait_for(lambda: _suspended_and_podless(rlab, ns, "limited"), 60, "its Job stopped")
    finally:
        rlab.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy",
                     policy, "--ignore-not-found", check=False)
        rlab.kubectl("delete", "namespace", ns, "--wait=false")
        rlab.kubectl("delete", "clusterqueue", cq, "--wait=false")


def test_a_job_suspended_and_unlabelled_in_one_write_gives_its_quota_back(
        rlab: LabHandle, manager) -> None:
    """A tenant suspends its running Job and removes its queue name in the same update (the
    webhook allows that: the Job is suspended). The Job is no longer queued, so its admitted
    Workload must not keep the quota once the pods are gone: it would be held forever (the
    Job's events no longer reach pykueue), and a preemptor could never get it back."""
    ns = namespace(rlab, "unlabel")
    other = namespace(rlab, "unlabel-next")
    cq = unique("unlabel-cq")
    make_queue(rlab, cq, (ns, other), cpu="2")
    try:
        apply(rlab, job_manifest("hog", ns, "lq", parallelism=2, duration="600s"))
        wait_for(lambda: is_admitted(workload_of(rlab, ns, "hog")), 30, "hog admitted")
        wait_for(lambda: len(job_pods(rlab, ns, "hog")) == 2, 30, "hog's pods")
        rlab.kubectl("patch", "job", "hog", "-n", ns, "--type=merge", "-p", json.dumps(
            {"metadata": {"labels": {"kueue.x-k8s.io/queue-name": None}},
             "spec": {"suspend": True}}))
        apply(rlab, job_manifest("next", other, "lq", parallelism=2, duration="600s"))
        wait_for(lambda: is_admitted(workload_of(rlab, other, "next")), 60,
                 "the other namespace's Job admitted on the returned quota")
        assert workload_of(rlab, ns, "hog") is None
    finally:
        rlab.kubectl("delete", "namespace", ns, other, "--wait=false")
        rlab.kubectl("delete", "clusterqueue", cq, "--wait=false")

"""MultiKueue's pure decisions (app.core.multikueue) against Kueue v0.17.1's rules."""

from __future__ import annotations

import pytest

from app.core.multikueue import (
    BATCH_JOB,
    JOBSET,
    ORIGIN_LABEL,
    Verdict,
    adapter_for,
    check_active,
    cluster_source_problem,
    first_with,
    gc_keeps,
    gc_orphans,
    job_status_to_mirror,
    kubeconfig_problem,
    merge_patch,
    next_nominees,
    no_worker_condition,
    parameters_problem,
    placed_copies,
    remote_job,
    remote_workload,
    round_due,
    worker_lost,
)


def test_check_active_as_kueue_acreconciler():
    assert check_active(None, ["a", "b"], {"a": True, "b": True}) == Verdict(
        True, "Active", "The admission check is active")
    assert check_active(None, ["a", "b"], {"a": True, "b": False}) == Verdict(
        True, "SomeActiveClusters", "Inactive clusters: [b]")
    assert check_active(None, ["a", "b", "c"], {"b": False}) == Verdict(
        False, "NoUsableClusters", "Missing clusters: [a c], Inactive clusters: [b]")
    v = check_active('multikueueconfigs.kueue.x-k8s.io "x" not found', [], {})
    assert (v.active, v.reason) == (False, "BadConfig")
    assert v.message.startswith("Cannot load the AdmissionChecks parameters: ")


@pytest.mark.parametrize(("params", "problem"), [
    (None, "missing parameters reference"),
    ({"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": ""},
     "empty name: bad parameters reference"),
    ({"apiGroup": "x.io", "kind": "MultiKueueConfig", "name": "c"},
     'wrong group "x.io", expecting "kueue.x-k8s.io": bad parameters reference'),
    ({"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": "c"},
     'wrong kind "ProvisioningRequestConfig", expecting "MultiKueueConfig": bad parameters '
     "reference"),
    ({"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "c"}, None),
])
def test_parameters_reference(params, problem):
    assert parameters_problem(params) == problem


def test_path_refused_unless_enabled_and_cluster_profile_unsupported():
    path = {"clusterSource": {"kubeConfig": {"location": "/k", "locationType": "Path"}}}
    assert cluster_source_problem(path, allow_path=False)[0] == "BadKubeConfig"
    assert cluster_source_problem(path, allow_path=True) is None
    secret = {"clusterSource": {"kubeConfig": {"location": "s"}}}
    assert cluster_source_problem(secret, allow_path=False) is None
    profile = {"clusterSource": {"clusterProfileRef": {"name": "p"}}}
    assert cluster_source_problem(profile, False)[0] == "MultiKueueClusterProfileFeatureDisabled"


@pytest.mark.parametrize("location", ["../../team-b/secrets/creds", "a/b", "UPPER", "x" * 254])
def test_a_secret_location_must_be_a_secret_name(location):
    """A Secret location is put into the URL path: anything but a Secret's name (a DNS-1123
    subdomain) could reach another namespace's Secret ("../" is normalised away)."""
    ref = {"clusterSource": {"kubeConfig": {"location": location}}}
    reason, message = cluster_source_problem(ref, allow_path=False)
    assert reason == "BadKubeConfig" and "is not a Secret name" in message


def _kubeconfig(cluster=None, user=None):
    return {"clusters": [{"name": "w", "cluster": {"server": "https://10.0.0.1:6443",
                                                   "certificate-authority-data": "Q0E=",
                                                   **(cluster or {})}}],
            "users": [{"name": "u", "user": {"token": "t", **(user or {})}}],
            "contexts": [{"name": "c", "context": {"cluster": "w", "user": "u"}}],
            "current-context": "c"}


@pytest.mark.parametrize(("cluster", "user", "problem"), [
    ({}, {}, None),
    ({"server": "https://worker.example.com"}, {}, None),
    ({"insecure-skip-tls-verify": True}, {},
     "insecure TLS verification is not allowed for cluster w"),
    ({"certificate-authority": "/ca.crt"}, {}, "certificate-authority file paths are not "
     "allowed, use certificate-authority-data for cluster w"),
    ({"server": ""}, {}, "server URL is required for cluster w"),
    ({"server": "https://Bad_Host:1"}, {}, "untrusted server endpoint"),
    ({}, {"tokenFile": "/t"}, "tokenFile is not allowed"),
    ({}, {"username": "a", "password": "b"}, "basic auth is not allowed"),
    ({}, {"exec": {"command": "x"}}, "exec plugins are not allowed"),
    ({}, {"auth-provider": {"name": "gcp"}}, "auth providers are not allowed"),
    ({}, {"client-key": "/key"},
     "client certificate and key file paths are not allowed, use the -data fields"),
])
def test_kubeconfig_rules(cluster, user, problem):
    assert kubeconfig_problem(_kubeconfig(cluster, user)) == problem


def test_kubeconfig_not_a_mapping():
    assert kubeconfig_problem("{[") is not None


def _wl(ctype, status, t):
    return {"status": {"conditions": [{"type": ctype, "status": status,
                                       "lastTransitionTime": t}]}}


def test_first_reservation_wins():
    remotes = {"w1": _wl("QuotaReserved", "True", "2026-01-01T00:00:05Z"),
               "w2": _wl("QuotaReserved", "True", "2026-01-01T00:00:03Z"),
               "w3": _wl("QuotaReserved", "False", "2026-01-01T00:00:01Z"), "w4": None}
    assert first_with(remotes, "QuotaReserved") == "w2"
    assert first_with({"w1": None}, "QuotaReserved") is None


def test_once_placed_only_the_placed_workers_copy_decides():
    # worker1 was lost with its copy reserved; the Workload moved to worker2; worker1 is back.
    remotes = {"worker1": _wl("QuotaReserved", "True", "2026-01-01T00:00:01Z"),
               "worker2": _wl("QuotaReserved", "True", "2026-01-01T00:00:09Z")}
    assert first_with(placed_copies(remotes, None), "QuotaReserved") == "worker1"
    assert first_with(placed_copies(remotes, "worker2"), "QuotaReserved") == "worker2"
    # The placed worker's copy gone: no other worker's copy wins (workerLostTimeout runs).
    assert first_with(placed_copies({"worker1": remotes["worker1"]}, "worker2"),
                      "QuotaReserved") is None


def test_remote_job_copy():
    local = {"metadata": {"name": "j", "namespace": "n", "uid": "u", "resourceVersion": "9",
                          "labels": {"kueue.x-k8s.io/queue-name": "q"},
                          "ownerReferences": [{"name": "x"}]},
             "spec": {"managedBy": "kueue.x-k8s.io/multikueue", "suspend": False,
                      "selector": {"matchLabels": {"controller-uid": "u"}},
                      "template": {"metadata": {"labels": {"controller-uid": "u", "job-name": "j",
                                                           "app": "a"}}}},
             "status": {"active": 1}}
    out = remote_job(local, "origin-1", "job-j-abcde")
    assert out["metadata"] == {"name": "j", "namespace": "n", "labels": {
        "kueue.x-k8s.io/queue-name": "q", ORIGIN_LABEL: "origin-1",
        "kueue.x-k8s.io/prebuilt-workload-name": "job-j-abcde"}}
    assert "managedBy" not in out["spec"] and "selector" not in out["spec"]
    assert out["spec"]["suspend"] is True
    assert out["spec"]["template"]["metadata"]["labels"] == {"app": "a"}
    assert "status" not in out
    assert local["spec"]["managedBy"] == "kueue.x-k8s.io/multikueue"  # not mutated


def test_remote_workload_copy():
    local = {"metadata": {"name": "job-j-abcde", "namespace": "n", "uid": "u",
                          "resourceVersion": "3", "ownerReferences": [{"name": "j"}],
                          "labels": {"kueue.x-k8s.io/job-uid": "u", "team": "a"},
                          "annotations": {"x": "y"}},
             "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1}]},
             "status": {"admission": {"clusterQueue": "cq"}}}
    out = remote_workload(local, "origin-1")
    assert out["metadata"] == {"name": "job-j-abcde", "namespace": "n",
                               "labels": {"team": "a", ORIGIN_LABEL: "origin-1"},
                               "annotations": {"x": "y"}}
    assert out["spec"] == local["spec"] and out["spec"] is not local["spec"]
    assert "status" not in out


def test_job_status_mirror():
    remote = {"status": {"succeeded": 1, "conditions": [{"type": "Complete"}]}}
    suspended = {"spec": {"suspend": True}, "status": {}}
    assert job_status_to_mirror(suspended, remote) is None
    running = {"spec": {"suspend": False}, "status": {"active": 1, "startTime": "t"}}
    assert job_status_to_mirror(running, remote) == {
        "succeeded": 1, "conditions": [{"type": "Complete"}], "active": None}
    # The worker's copy suspended (waiting for quota there, or evicted): nothing mirrored,
    # the manager's running Job keeps its startTime (the API server refuses removing it).
    waiting = {"spec": {"suspend": True}, "status": {"conditions": [{"type": "Suspended"}]}}
    assert job_status_to_mirror(running, waiting) is None
    same = {"spec": {}, "status": {"succeeded": 1, "conditions": [{"type": "Complete"}]}}
    assert job_status_to_mirror(same, remote) is None


def test_merge_patch_clears_nested_keys():
    old = {"uncountedTerminatedPods": {"succeeded": ["u1"]}, "ready": 1, "active": 1}
    new = {"uncountedTerminatedPods": {}, "ready": 0}
    assert merge_patch(old, new) == {"uncountedTerminatedPods": {"succeeded": None},
                                     "ready": 0, "active": None}
    assert merge_patch(new, new) == {}


def test_worker_lost_after_the_timeout():
    assert worker_lost(100.0, 1000.0, 900.0) is True
    assert worker_lost(100.0, 999.0, 900.0) is False
    assert worker_lost(None, 1e9, 900.0) is False


def test_adapters_by_api_version_and_kind():
    assert adapter_for("batch/v1", "Job") is BATCH_JOB
    assert adapter_for("jobset.x-k8s.io/v1alpha2", "JobSet") is JOBSET
    assert adapter_for("jobset.x-k8s.io/v1alpha2", "Job") is None
    assert adapter_for("v1", "Pod") is None
    assert adapter_for("JobSet", "JobSet") is None


def test_jobset_copy_and_managed_by_rules():
    """Kueue v0.17.1 JobSet adapter: ``SyncJob`` clones metadata, adds the prebuilt and origin
    labels, copies the spec with ``managedBy`` cleared (pykueue also suspends it);
    ``IsJobManagedByKueue`` and ``CanDefaultManagedBy``."""
    local = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
             "metadata": {"name": "js", "namespace": "n", "uid": "u", "generation": 2,
                          "labels": {"kueue.x-k8s.io/queue-name": "q"}},
             "spec": {"managedBy": "kueue.x-k8s.io/multikueue", "suspend": False,
                      "replicatedJobs": [{"name": "w"}]},
             "status": {"replicatedJobsStatus": [{"name": "w", "active": 1}]}}
    out = JOBSET.remote(local, "o", "jobset-js-1")
    assert out == {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                   "metadata": {"name": "js", "namespace": "n", "labels": {
                       "kueue.x-k8s.io/queue-name": "q", ORIGIN_LABEL: "o",
                       "kueue.x-k8s.io/prebuilt-workload-name": "jobset-js-1"}},
                   "spec": {"suspend": True, "replicatedJobs": [{"name": "w"}]}}
    assert local["spec"]["managedBy"] == "kueue.x-k8s.io/multikueue"
    assert JOBSET.not_managed_message(local) is None
    other = {"spec": {"managedBy": "example.com/x"}}
    assert JOBSET.not_managed_message(other) == (
        'The owner is not managed by Kueue: Expecting spec.managedBy to be '
        '"kueue.x-k8s.io/multikueue" not "example.com/x"')
    assert JOBSET.can_default_managed_by({"spec": {}})
    assert JOBSET.can_default_managed_by(
        {"spec": {"managedBy": "jobset.sigs.k8s.io/jobset-controller"}})
    assert not JOBSET.can_default_managed_by(other)


def test_jobset_status_mirrored_whole_even_while_suspended():
    local = {"spec": {"suspend": True}, "status": {"restarts": 0, "old": 1}}
    remote = {"status": {"restarts": 0, "conditions": [{"type": "Completed"}]}}
    assert JOBSET.status_to_mirror(local, remote) == {"conditions": [{"type": "Completed"}],
                                                      "old": None}
    assert JOBSET.status_to_mirror(remote, remote) is None
    # batch/v1 Job keeps its own rule: nothing while the manager's Job is suspended.
    assert BATCH_JOB.status_to_mirror({"spec": {"suspend": True}}, remote) is None


def test_incremental_nominees_three_at_a_time_in_name_order():
    """Kueue v0.17.1 ``getNextNominatedWorkers``: up to 3 not yet nominated, sorted."""
    clusters = ["w5", "w1", "w4", "w2", "w3"]
    assert next_nominees(clusters, []) == ["w1", "w2", "w3"]
    assert next_nominees(clusters, ["w1", "w2", "w3"]) == ["w4", "w5"]
    assert next_nominees(clusters, clusters) == []
    assert next_nominees(clusters, ["w2"], batch=1) == ["w1"]
    assert round_due(None, 0.0, 300)
    assert not round_due(100.0, 400.0, 300)  # exactly the timeout: still the same round
    assert round_due(100.0, 400.5, 300)


def test_gc_orphans_as_kueue_rungc():
    def wl(name, origin="mk", owner=None):
        meta = {"name": name, "namespace": "n", "labels": {ORIGIN_LABEL: origin} if origin
                else {}}
        if owner:
            meta["ownerReferences"] = [{**owner, "controller": True}]
        return {"metadata": meta}
    js = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "js"}
    pod = {"apiVersion": "v1", "kind": "Pod", "name": "p"}
    remote = [wl("kept"), wl("gone", owner=js), wl("podowned", owner=pod),
              wl("other-origin", origin="x"), wl("unlabelled", origin=None)]
    out = gc_orphans(remote, "mk", lambda key: key == "n/kept")
    assert out == [("n", "gone", (JOBSET, "js")), ("n", "podowned", None)]


def test_gc_deletes_the_copies_of_a_finished_workload():
    """A worker down when its Workload was requeued onto another worker and finished there
    kept its admitted copies, and their quota, once back (follow16: ``make run-multikueue``'s
    worker1 after ``make multikueue-lab-up``); Kueue's reconciler deletes them on reconnect."""
    def local(*conds, deleting=False):
        meta = {"name": "w", "namespace": "n"}
        if deleting:
            meta["deletionTimestamp"] = "2026-12-04T21:00:00Z"
        return {"metadata": meta, "status": {"conditions": [
            {"type": t, "status": st} for t, st in conds]}}
    assert not gc_keeps(None)
    assert not gc_keeps(local(deleting=True))
    assert not gc_keeps(local(("QuotaReserved", "True"), ("Finished", "True")))
    assert gc_keeps(local(("QuotaReserved", "True"), ("Finished", "False")))
    assert gc_keeps(local(("QuotaReserved", "True")))
    store = {"n/done": local(("Finished", "True")), "n/running": local(("QuotaReserved", "True"))}
    remote = [{"metadata": {"name": n, "namespace": "n", "labels": {ORIGIN_LABEL: "mk"}}}
              for n in ("done", "running")]
    assert gc_orphans(remote, "mk", lambda key: gc_keeps(store.get(key))) == [
        ("n", "done", None)]


def test_no_worker_condition_only_with_a_limit_and_after_it():
    assert no_worker_condition(100.0, 10_000.0, None, ["w1"]) is None  # Kueue: waits, silent
    assert no_worker_condition(100.0, 105.0, 10, ["w1"]) is None
    assert no_worker_condition(None, 105.0, 10, ["w1"]) is None
    reason, message = no_worker_condition(100.0, 110.0, 10, ["w1", "w2"])
    assert reason == "NoWorkerReserved"
    assert "within 10s" in message and "w1, w2" in message and "keeps waiting" in message


def test_dispatcher_and_no_worker_settings():
    from pydantic import ValidationError

    from app.config import MultiKueueSettings
    s = MultiKueueSettings(dispatcher_name="kueue.x-k8s.io/multikueue-dispatcher-incremental")
    assert (s.incremental_batch_size, s.incremental_round_seconds, s.gc_interval_seconds) == (
        3, 300.0, 60.0)  # Kueue's 3 workers per 5 min round, gcInterval 1 min
    assert s.no_worker_timeout_seconds == {}  # Kueue: wait, silently
    with pytest.raises(ValidationError, match="external dispatcher"):
        MultiKueueSettings(dispatcher_name="example.com/mine")
    with pytest.raises(ValidationError, match="must be > 0"):
        MultiKueueSettings(no_worker_timeout_seconds={"cq": 0})


def test_kubeflow_adapters_use_run_policy():
    """Kueue v0.17.1 kubeflowjob adapter: ``spec.runPolicy.managedBy`` cleared on the copy;
    training-operator's and mpi-operator's own controller names may be defaulted over."""
    pt = adapter_for("kubeflow.org/v1", "PyTorchJob")
    mpi = adapter_for("kubeflow.org/v2beta1", "MPIJob")
    assert pt is not None and mpi is not None
    assert adapter_for("kubeflow.org/v1", "MPIJob") is None  # Kueue manages v2beta1 only
    local = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
             "metadata": {"name": "p", "namespace": "n"},
             "spec": {"runPolicy": {"managedBy": "kueue.x-k8s.io/multikueue",
                                    "suspend": False}, "pytorchReplicaSpecs": {}}}
    out = pt.remote(local, "o", "pytorchjob-p-1")
    assert out["spec"]["runPolicy"] == {"suspend": True}
    assert pt.not_managed_message(local) is None
    assert pt.can_default_managed_by({"spec": {"runPolicy": {
        "managedBy": "kubeflow.org/training-operator"}}})
    assert mpi.can_default_managed_by({"spec": {"runPolicy": {
        "managedBy": "kubeflow.org/mpi-operator"}}})
    assert not mpi.can_default_managed_by({"spec": {"runPolicy": {
        "managedBy": "kubeflow.org/training-operator"}}})


def test_the_worker_job_does_not_carry_the_managers_start_record():
    """The manager's pykueue starts its own Job once the check is Ready; a worker Job made
    from it after that (re-created) must not look started there with the manager's template."""
    from app.core.multikueue import START_RECORD, remote_job
    from app.wire.names import ORIGINAL_ANNOTATION

    assert START_RECORD == ORIGINAL_ANNOTATION
    local = {"metadata": {"name": "j", "namespace": "ns", "annotations": {
        START_RECORD: '{"labels":{"controller-uid":"manager-uid"}}', "team": "a"}},
        "spec": {"template": {"spec": {}}}}
    out = remote_job(local, "multikueue", "job-j-1")
    assert out["metadata"]["annotations"] == {"team": "a"}
    assert START_RECORD in local["metadata"]["annotations"]


async def test_a_secret_read_error_makes_only_that_cluster_inactive():
    """A Secret read that fails with another error than NotFound (403, a 500, a timeout)
    gives that MultiKueueCluster BadKubeConfig naming the error, and raises nothing: the
    other clusters are still synced in the same pass (``asyncio.gather``)."""
    from types import SimpleNamespace

    from app.config import Settings
    from app.controllers.multikueue import MultiKueueController, Verdict
    from app.kube.errors import ApiError

    class Client:
        async def get(self, resource, name, namespace):
            if name == "forbidden":
                raise ApiError(403, "Forbidden", "secrets is forbidden")
            raise TimeoutError()

    ctrl = MultiKueueController(SimpleNamespace(settings=Settings(), client=Client()))

    def cluster(location):
        return {"metadata": {"name": location},
                "spec": {"clusterSource": {"kubeConfig": {"location": location,
                                                          "locationType": "Secret"}}}}
    for location, fragment in (("forbidden", "HTTP 403 Forbidden"), ("slow", "TimeoutError")):
        got = await ctrl._kubeconfig(cluster(location))
        assert isinstance(got, Verdict) and not got.active and got.reason == "BadKubeConfig"
        assert got.message.startswith(f'load client config failed: secrets "{location}"')
        assert fragment in got.message

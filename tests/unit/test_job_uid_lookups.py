"""Issue 14.8: the webhook's and the extender's Workload lookups go by the Job's UID, so a Job
deleted and created again under the same name cannot borrow its predecessor's admission (the
Job store may still hold the old Job when the new one's update or pods arrive)."""

from __future__ import annotations

from types import SimpleNamespace

from app.controllers.admission_lookup import StoreAdmissionLookup, StoreExtenderState
from app.extender.nodestore import NodeStore
from app.extender.placement import pod_facts
from app.kube.client import JOBS, WORKLOADS
from app.kube.context import JOB, WL
from app.kube.informers import Store
from app.wire.workload import workload_name_for_job

NS = "research"


def _ctx(job_uid: str, *, admitted: bool = True) -> SimpleNamespace:
    jobs, wls = Store(JOBS), Store(WORKLOADS)
    jobs.put({"metadata": {"namespace": NS, "name": "train", "uid": job_uid,
                           "resourceVersion": "1",
                           "labels": {"kueue.x-k8s.io/queue-name": "lq"}}})
    status = {}
    if admitted:
        status = {"admission": {"clusterQueue": "cq", "podSetAssignments": [
            {"name": "main", "count": 1, "flavors": {"nvidia.com/gpu": "a100"},
             "resourceUsage": {"nvidia.com/gpu": "1"}}]},
                  "conditions": [{"type": "QuotaReserved", "status": "True"},
                                 {"type": "Admitted", "status": "True"}]}
    wls.put({"metadata": {"namespace": NS, "name": workload_name_for_job("train", job_uid),
                          "resourceVersion": "1"},
             "spec": {"queueName": "lq", "podSets": [
                 {"name": "main", "count": 1, "template": {"spec": {"containers": [
                     {"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}}}]},
             "status": status})
    stores = {JOB: jobs, WL: wls}
    return SimpleNamespace(store=lambda k: stores.get(k) or Store(JOBS), synced=True)


def test_the_webhook_lookup_answers_for_the_job_with_that_uid():
    lookup = StoreAdmissionLookup(_ctx("old-uid"))  # type: ignore[arg-type]
    assert lookup.is_admitted(NS, "train", "old-uid") is True
    # The same name, another Job: its Workload does not exist yet, so it is not admitted.
    assert lookup.is_admitted(NS, "train", "new-uid") is None
    assert lookup.is_admitted(NS, "train") is True  # no uid: the stored Job's


def _pod(uid: str) -> dict:
    return {"metadata": {"namespace": NS, "name": "train-abc", "ownerReferences": [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": uid,
         "controller": True}]},
            "spec": {"containers": [{"name": "c", "resources": {
                "requests": {"nvidia.com/gpu": "1"}}}]}}


def test_the_extender_refuses_a_pod_of_another_job_of_the_same_name():
    state = StoreExtenderState(_ctx("old-uid"), NodeStore("nvidia.com/gpu"))  # type: ignore[arg-type]
    state.flavors = lambda: ()  # type: ignore[method-assign]
    old = pod_facts(_pod("old-uid"), "nvidia.com/gpu")
    new = pod_facts(_pod("new-uid"), "nvidia.com/gpu")
    assert old.job_uid == "old-uid" and new.job_uid == "new-uid"
    view_old = state.workload_for_pod(NS, "train", old.job_uid)
    view_new = state.workload_for_pod(NS, "train", new.job_uid)
    assert view_old is not None and view_old.admitted
    assert view_new is not None and not view_new.admitted and "new-uid" in view_new.pending_reason


def test_the_job_uid_label_stands_in_for_a_missing_owner_reference():
    pod = _pod("x")
    del pod["metadata"]["ownerReferences"]
    pod["metadata"]["labels"] = {"batch.kubernetes.io/job-name": "train",
                                 "batch.kubernetes.io/controller-uid": "label-uid"}
    facts = pod_facts(pod, "nvidia.com/gpu")
    assert (facts.job_name, facts.job_uid) == ("train", "label-uid")


def test_an_empty_queue_name_is_no_queue_in_the_extender_as_in_the_webhook():
    """Issue 14.8: one rule for ``kueue.x-k8s.io/queue-name: ""`` (unmanaged) everywhere."""
    from app.integrations.batchjob.job import MANAGED_JOBS
    from app.integrations.webhook_toolkit import read_queue_name

    pod = _pod("x")
    pod["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": ""}
    assert pod_facts(pod, "nvidia.com/gpu").queue_name is None
    assert read_queue_name({"metadata": {"labels": {"kueue.x-k8s.io/queue-name": ""}}}) == ""
    assert MANAGED_JOBS == "kueue.x-k8s.io/queue-name,kueue.x-k8s.io/queue-name!="


def test_a_multikueue_workers_job_is_looked_up_by_its_prebuilt_workload_name():
    """On a MultiKueue worker the Job runs under the Workload copy its
    ``kueue.x-k8s.io/prebuilt-workload-name`` label names (the manager's Workload name), not
    under Kueue's name for it: the extender and the webhook find that one (a GPU pod of such a
    Job was withheld from every GPU node: "its Workload has not been created yet")."""
    ctx = _ctx("worker-uid")
    wls = ctx.store(WL)  # the copy is named after the manager's Workload
    wl = wls.get(f"{NS}/{workload_name_for_job('train', 'worker-uid')}")
    wls.put({**wl, "metadata": {**wl["metadata"], "name": "job-train-manager"}})
    wls.remove(f"{NS}/{wl['metadata']['name']}")
    job = ctx.store(JOB).get(f"{NS}/train")
    job["metadata"]["labels"]["kueue.x-k8s.io/prebuilt-workload-name"] = "job-train-manager"
    state = StoreExtenderState(ctx, NodeStore("nvidia.com/gpu"))  # type: ignore[arg-type]
    state.flavors = lambda: ()  # type: ignore[method-assign]
    view = state.workload_for_pod(NS, "train", "worker-uid")
    assert view is not None and view.admitted, view
    assert StoreAdmissionLookup(ctx).is_admitted(NS, "train", "worker-uid") is True  # type: ignore[arg-type]
    assert StoreAdmissionLookup(ctx).is_admitted(NS, "train") is True  # type: ignore[arg-type]

"""The Job webhook defaults ``spec.managedBy: kueue.x-k8s.io/multikueue`` on a queued Job whose
LocalQueue's ClusterQueue has a MultiKueue AdmissionCheck (Kueue ``ApplyDefaultForManagedBy``
with ``CanDefaultManagedBy``)."""

from __future__ import annotations

import pytest

from tests.unit.test_webhook import (
    MUTATE,
    Lookups,
    answer,
    decoded_patch,
    job,
    make_app,
    post,
    review,
)

MK = "kueue.x-k8s.io/multikueue"


class MultiKueueLookups(Lookups):
    def __init__(self, uses: bool | None) -> None:
        super().__init__()
        self.uses = uses
        self.asked_mk: list[tuple[str, str]] = []

    def uses_multikueue(self, namespace: str, queue: str) -> bool | None:
        self.asked_mk.append((namespace, queue))
        return self.uses


def _ops(response: dict) -> list[dict]:
    return decoded_patch(response) if response.get("patch") else []


@pytest.mark.parametrize(("uses", "managed_by", "want"), [
    (True, None, MK),
    (True, "kubernetes.io/job-controller", MK),
    (True, "example.com/other", None),  # another controller's Job is left alone
    (False, None, None),
    (None, None, None),  # unknown (not synced): no defaulting
])
async def test_managed_by_defaulted_for_multikueue_queues(uses, managed_by, want):
    lookups = MultiKueueLookups(uses)
    obj = job(queue="lq1")
    if managed_by:
        obj["spec"]["managedBy"] = managed_by
    sent = review("CREATE", obj)
    response = answer(await post(make_app(admission=lookups), MUTATE, sent), sent)
    ops = [o for o in _ops(response) if o["path"] == "/spec/managedBy"]
    assert [o["value"] for o in ops] == ([want] if want else [])
    if managed_by is None or managed_by == "kubernetes.io/job-controller":
        assert lookups.asked_mk == [("ns", "lq1")]


async def test_unqueued_job_is_not_asked_about():
    lookups = MultiKueueLookups(True)
    sent = review("CREATE", job(queue=None))
    answer(await post(make_app(admission=lookups), MUTATE, sent), sent)
    assert lookups.asked_mk == []


def _jobset(managed_by: str | None) -> dict:
    spec: dict = {"replicatedJobs": [{"name": "w", "template": {"spec": {"template": {
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}}]}
    if managed_by:
        spec["managedBy"] = managed_by
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "js", "namespace": "ns",
                         "labels": {"kueue.x-k8s.io/queue-name": "lq1"}}, "spec": spec}


@pytest.mark.parametrize(("uses", "managed_by", "want"), [
    (True, None, MK),
    (True, "jobset.sigs.k8s.io/jobset-controller", MK),
    (True, "example.com/other", None),  # another controller's JobSet is left alone
    (False, None, None),
    (None, None, None),
])
async def test_jobset_managed_by_defaulted_for_multikueue_queues(uses, managed_by, want):
    """Kueue v0.17.1 JobSet webhook ``Default``: ``ApplyDefaultForManagedBy`` with JobSet's
    ``CanDefaultManagedBy`` (unset or JobSet's own controller)."""
    lookups = MultiKueueLookups(uses)
    sent = review("CREATE", _jobset(managed_by),
                  kind={"group": "jobset.x-k8s.io", "version": "v1alpha2", "kind": "JobSet"})
    sent["request"]["resource"] = {"group": "jobset.x-k8s.io", "version": "v1alpha2",
                                   "resource": "jobsets"}
    response = answer(await post(make_app(admission=lookups),
                                 "/mutate-jobset-x-k8s-io-v1alpha2-jobset", sent), sent)
    ops = [o for o in _ops(response) if o["path"] == "/spec/managedBy"]
    assert [o["value"] for o in ops] == ([want] if want else [])
    assert response["allowed"]


@pytest.mark.parametrize("run_policy", [{"suspend": True}, None])
async def test_pytorchjob_run_policy_managed_by_defaulted(run_policy):
    """Kueue v0.17.1 Kubeflow webhooks: ``spec.runPolicy.managedBy`` defaulted the same way;
    without a runPolicy, managedBy goes into the one the suspend lever's op adds."""
    lookups = MultiKueueLookups(True)
    obj = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": "p", "namespace": "ns",
                        "labels": {"kueue.x-k8s.io/queue-name": "lq1"}},
           "spec": {"pytorchReplicaSpecs": {"Master": {
               "replicas": 1, "template": {"spec": {"containers": [
                   {"name": "c", "image": "busybox"}]}}}}}}
    if run_policy:
        obj["spec"]["runPolicy"] = run_policy
    sent = review("CREATE", obj,
                  kind={"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"})
    sent["request"]["resource"] = {"group": "kubeflow.org", "version": "v1",
                                   "resource": "pytorchjobs"}
    response = answer(await post(make_app(admission=lookups),
                                 "/mutate-kubeflow-org-v1-pytorchjob", sent), sent)
    ops = _ops(response)
    if run_policy:
        assert [o["value"] for o in ops if o["path"] == "/spec/runPolicy/managedBy"] == [MK]
    else:  # the lever's op adds runPolicy; managedBy's goes into it (does not replace it)
        assert [(o["path"], o["value"]) for o in ops if "runPolicy" in o["path"]] == [
            ("/spec/runPolicy", {"suspend": True}), ("/spec/runPolicy/managedBy", MK)]

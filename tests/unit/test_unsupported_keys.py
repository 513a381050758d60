"""Kueue labels and annotations pykueue does not implement are refused with a message, never
accepted and ignored (``app.integrations.unsupported``): AdmissionReviews over the real ASGI
app for a Job (mutating and validating), a JobSet's nested pod template and a Pod."""

from __future__ import annotations

import copy
from typing import Any

import httpx
import pytest

from app.integrations.unsupported import (
    ELASTIC_JOB_ANNOTATION,
    PREBUILT_WORKLOAD_LABEL,
    TAS_ANNOTATIONS,
    unsupported_errors,
)
from tests.unit.test_webhook import MUTATE, VALIDATE, answer, job, make_app, review

TAS = TAS_ANNOTATIONS[0]  # kueue.x-k8s.io/podset-required-topology


def with_template_annotation(obj: dict[str, Any], key: str, value: str) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["spec"]["template"].setdefault("metadata", {}).setdefault("annotations", {})[key] = value
    return out


def with_template_label(obj: dict[str, Any], key: str, value: str) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["spec"]["template"].setdefault("metadata", {}).setdefault("labels", {})[key] = value
    return out


def with_meta(obj: dict[str, Any], where: str, key: str, value: str) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"].setdefault(where, {})[key] = value
    return out


@pytest.fixture
async def client():
    transport = httpx.ASGITransport(app=make_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://webhook") as c:
        yield c


async def _decide(client: httpx.AsyncClient, path: str, sent: dict[str, Any]) -> dict[str, Any]:
    return answer(await client.post(path, json=sent), sent)


@pytest.mark.parametrize(("obj", "field", "why"), [
    (with_template_annotation(job(), TAS, "cloud.provider.com/rack"),
     f"spec.template.metadata.annotations[{TAS}]", "Topology Aware Scheduling"),
    (with_template_label(job(), PREBUILT_WORKLOAD_LABEL, "wl-1"),
     f"spec.template.metadata.labels[{PREBUILT_WORKLOAD_LABEL}]", "prebuilt Workloads"),
    (with_meta(job(), "annotations", ELASTIC_JOB_ANNOTATION, "true"),
     f"metadata.annotations[{ELASTIC_JOB_ANNOTATION}]", "elastic jobs"),
])
async def test_a_queued_job_with_an_unsupported_key_is_refused_naming_it(
        client, obj: dict[str, Any], field: str, why: str) -> None:
    for path in (MUTATE, VALIDATE):
        response = await _decide(client, path, review("CREATE", obj))
        assert response["allowed"] is False
        assert response["status"]["code"] == 403
        assert field in response["status"]["message"] and why in response["status"]["message"]


async def test_a_jobs_own_prebuilt_workload_label_is_allowed(client) -> None:
    """A kind MultiKueue dispatches (a batch/v1 Job, a JobSet...) adopts the Workload its own
    label names (the MultiKueue worker protocol); other kinds, and pod templates, are still
    refused (above, below)."""
    obj = with_meta(job(suspend=True), "labels", PREBUILT_WORKLOAD_LABEL, "wl-1")
    for path in (MUTATE, VALIDATE):
        assert (await _decide(client, path, review("CREATE", obj)))["allowed"] is True
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"labels": {"kueue.x-k8s.io/queue-name": "q",
                                      PREBUILT_WORKLOAD_LABEL: "wl-1"}}}
    assert unsupported_errors(None, jobset) == []
    trainjob = {**jobset, "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob"}
    assert unsupported_errors(None, trainjob) == []
    lws = {**jobset, "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet"}
    assert unsupported_errors(None, lws)  # no MultiKueue adapter (yet)
    in_template = {**jobset, "spec": {"replicatedJobs": [{"template": {"metadata": {
        "labels": {PREBUILT_WORKLOAD_LABEL: "wl-1"}}}}]}}
    assert unsupported_errors(None, in_template)
    # Set on CREATE only: adding or changing it later is refused.
    added = review("UPDATE", obj, old=job(suspend=True))
    assert (await _decide(client, VALIDATE, added))["allowed"] is False
    kept = review("UPDATE", with_meta(obj, "labels", "team", "a"), old=obj)
    assert (await _decide(client, VALIDATE, kept))["allowed"] is True
    other = review("UPDATE", with_meta(obj, "labels", PREBUILT_WORKLOAD_LABEL, "wl-2"), old=obj)
    assert (await _decide(client, VALIDATE, other))["allowed"] is False
    bad = with_meta(job(suspend=True), "labels", PREBUILT_WORKLOAD_LABEL, "Not_A_Name")
    assert (await _decide(client, VALIDATE, review("CREATE", bad)))["allowed"] is False


async def test_the_prebuilt_label_must_be_a_workload_name_on_unqueued_objects_too(client) -> None:
    """Kueue v0.17.1 checks the label's format (``ValidateLabelAsCRDName``) on every object
    its webhooks see, queued or not; pykueue's see an unqueued one under the unlabelled-jobs
    overlay (``jobs.manage_jobs_without_queue_name``: its Workload adopted the same way) and
    one an UPDATE unqueues. Before, only a queued object's was checked."""
    bad = with_meta(job(queue=None, suspend=True), "labels", PREBUILT_WORKLOAD_LABEL,
                    "Not_A_Name")
    for path in (MUTATE, VALIDATE):
        response = await _decide(client, path, review("CREATE", bad))
        assert response["allowed"] is False, path
        assert f"metadata.labels[{PREBUILT_WORKLOAD_LABEL}]" in response["status"]["message"]
        assert "DNS-1123 subdomain" in response["status"]["message"]
    queued = with_meta(job(suspend=True), "labels", PREBUILT_WORKLOAD_LABEL, "Not_A_Name")
    unqueued = review("UPDATE", bad, old=queued)
    assert (await _decide(client, VALIDATE, unqueued))["allowed"] is False
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"labels": {PREBUILT_WORKLOAD_LABEL: "-wl"}}}
    assert unsupported_errors(None, jobset)
    # A good name passes unqueued, and the label on a kind that does not adopt it is ignored
    # there (pykueue acts on it only to refuse it on a queued object).
    good = with_meta(job(queue=None, suspend=True), "labels", PREBUILT_WORKLOAD_LABEL, "wl-1")
    assert (await _decide(client, VALIDATE, review("CREATE", good)))["allowed"] is True
    lws = {**jobset, "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet"}
    assert unsupported_errors(None, lws) == []


async def test_unqueued_objects_elastic_false_and_keys_already_stored_are_allowed(client) -> None:
    tas = with_template_annotation(job(suspend=True), TAS, "rack")
    unqueued = with_template_annotation(job(queue=None), TAS, "rack")
    assert (await _decide(client, VALIDATE, review("CREATE", unqueued)))["allowed"] is True
    off = with_meta(job(suspend=True), "annotations", ELASTIC_JOB_ANNOTATION, "false")
    assert (await _decide(client, VALIDATE, review("CREATE", off)))["allowed"] is True
    # Stored before pykueue ran: an update that keeps the key passes (other rules apply).
    relabelled = with_meta(tas, "labels", "team", "a")
    sent = review("UPDATE", relabelled, old=tas)
    assert (await _decide(client, VALIDATE, sent))["allowed"] is True
    # ... one that adds it does not.
    sent = review("UPDATE", tas, old=job(suspend=True))
    assert (await _decide(client, VALIDATE, sent))["allowed"] is False


def _jobset(annotations: dict[str, str]) -> dict[str, Any]:
    pod_template = {"metadata": {"annotations": annotations}, "spec": {
        "restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "js", "namespace": "ns",
                         "labels": {"kueue.x-k8s.io/queue-name": "lq1"}},
            "spec": {"suspend": True, "replicatedJobs": [
                {"name": "workers", "replicas": 1,
                 "template": {"spec": {"template": pod_template}}}]}}


async def test_a_jobset_with_a_topology_annotation_deep_in_a_template_is_refused(client) -> None:
    sent = review("CREATE", _jobset({TAS_ANNOTATIONS[1]: "rack"}),
                  kind={"group": "jobset.x-k8s.io", "version": "v1alpha2", "kind": "JobSet"})
    response = await _decide(client, "/validate-jobset-x-k8s-io-v1alpha2-jobset", sent)
    assert response["allowed"] is False
    assert ("spec.replicatedJobs[0].template.spec.template.metadata.annotations"
            f"[{TAS_ANNOTATIONS[1]}]") in response["status"]["message"]
    fine = review("CREATE", _jobset({"team": "a"}),
                  kind={"group": "jobset.x-k8s.io", "version": "v1alpha2", "kind": "JobSet"})
    assert (await _decide(client, "/validate-jobset-x-k8s-io-v1alpha2-jobset", fine))[
        "allowed"] is True


async def test_a_queued_pod_with_a_topology_annotation_is_refused(client) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "ns",
                        "labels": {"kueue.x-k8s.io/queue-name": "lq1"},
                        "annotations": {TAS_ANNOTATIONS[2]: "true"}},
           "spec": {"containers": [{"name": "c", "image": "x"}]}}
    sent = review("CREATE", pod, kind={"group": "", "version": "v1", "kind": "Pod"})
    response = await _decide(client, "/mutate--v1-pod", sent)
    assert response["allowed"] is False
    assert f"metadata.annotations[{TAS_ANNOTATIONS[2]}]" in response["status"]["message"]


def test_the_walk_is_bounded_on_a_deeply_nested_body() -> None:
    deep: dict[str, Any] = {"metadata": {"annotations": {TAS: "x"}}}
    for _ in range(200):
        deep = {"a": [deep]}
    obj = {"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "lq"}}, "spec": deep}
    assert unsupported_errors(None, obj) == []  # beyond any pod template: not walked


async def test_a_key_stored_unqueued_is_refused_when_the_object_becomes_queued(client) -> None:
    """breaker5: the 'already stored' exemption is for keys a queued object carried; created
    unqueued (allowed: not pykueue's) and then given a queue name in a later UPDATE, the
    object would be queued with the key ignored."""
    unqueued = with_template_annotation(job(queue=None, suspend=True), TAS, "rack")
    assert (await _decide(client, VALIDATE, review("CREATE", unqueued)))["allowed"] is True
    queued = with_template_annotation(job(suspend=True), TAS, "rack")
    for path in (MUTATE, VALIDATE):
        response = await _decide(client, path, review("UPDATE", queued, old=unqueued))
        assert response["allowed"] is False, path
        assert f"spec.template.metadata.annotations[{TAS}]" in response["status"]["message"]
    # An object queued when stored keeps its exemption.
    relabelled = with_meta(queued, "labels", "team", "a")
    assert (await _decide(client, VALIDATE, review("UPDATE", relabelled, old=queued)))[
        "allowed"] is True


def test_a_job_adopts_only_a_multikueue_copy_its_own_label_names() -> None:
    """A tenant's new Job naming an orphaned Workload of its namespace (its pods may still
    run) in ``prebuilt-workload-name`` must not take over that admission: only a MultiKueue
    copy (origin label) is adopted, and only by a batch Job whose own label names it."""
    from app.core.multikueue import ORIGIN_LABEL
    from app.integrations.unsupported import adoptable_copy

    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "j", "labels": {PREBUILT_WORKLOAD_LABEL: "job-old-1a2b3"}}}
    orphaned = {"metadata": {"name": "job-old-1a2b3", "labels": {}}}
    copy_ = {"metadata": {"name": "job-old-1a2b3", "labels": {ORIGIN_LABEL: "manager"}}}
    assert not adoptable_copy(job, orphaned)
    assert adoptable_copy(job, copy_)
    assert adoptable_copy({**job, "kind": "JobSet", "apiVersion": "jobset.x-k8s.io/v1alpha2"},
                          copy_)
    assert adoptable_copy({**job, "kind": "RayJob", "apiVersion": "ray.io/v1"}, copy_)
    assert adoptable_copy({**job, "kind": "TrainJob",
                           "apiVersion": "trainer.kubeflow.org/v1alpha1"}, copy_)
    assert not adoptable_copy({**job, "kind": "LeaderWorkerSet",
                               "apiVersion": "leaderworkerset.x-k8s.io/v1"}, copy_)
    other = {"metadata": {"name": "job-other-9z8y7", "labels": {ORIGIN_LABEL: "manager"}}}
    assert not adoptable_copy(job, other)


def test_a_copy_adopted_once_is_adopted_again_by_that_job_only() -> None:
    """A worker's Job deleted with ``--cascade=orphan`` leaves its adopted copy ownerless
    (its pods still run); the Job the manager re-creates must not adopt it again."""
    from app.core.multikueue import ORIGIN_LABEL
    from app.integrations.unsupported import adoptable_copy

    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "j", "uid": "new", "labels": {PREBUILT_WORKLOAD_LABEL: "wl"}}}
    adopted = {"metadata": {"name": "wl", "labels": {ORIGIN_LABEL: "manager"},
                            "annotations": {"pykueue.dev/adopted-by": "old"}}}
    assert not adoptable_copy(job, adopted)
    same = {**job, "metadata": {**job["metadata"], "uid": "old"}}
    assert adoptable_copy(same, adopted)
    # The Job that adopted it, being deleted with --cascade=orphan (the garbage collector
    # stripped its owner reference from the copy first), does not take it back.
    deleting = {**same, "metadata": {**same["metadata"], "deletionTimestamp": "t"}}
    assert not adoptable_copy(deleting, adopted)

"""Partial admission of a batch/v1 Job (Kueue ``kueue.x-k8s.io/job-min-parallelism``,
kueue-semantics.md 4.2-4.7, acceptance KQ-25): the annotation becomes the podSet's
``minCount``, the webhook refuses a bad one at create and a parallelism change while it runs,
the Job starts with the admitted count and gets the user's parallelism back when stopped."""

from __future__ import annotations

import copy
import json

import pytest

from app.integrations.batchjob.job import KIND, injected_job, partial_count, restored_job
from app.integrations.batchjob.webhook_rules import mutate_update, validate_create, validate_update
from app.integrations.webhook_toolkit import WebhookPolicy
from app.wire.fields import WorkloadSpecError
from app.wire.names import (
    COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION,
    MIN_PARALLELISM_ANNOTATION,
    QUEUE_NAME_LABEL,
)
from app.wire.workload import workload_from_job, workload_from_object, workload_object_for_job

POLICY = WebhookPolicy(controller_usernames=frozenset({"pykueue"}))


def job(parallelism: int = 10, minimum: str | None = "9", suspend: bool = True) -> dict:
    anns = {MIN_PARALLELISM_ANNOTATION: minimum} if minimum is not None else {}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "ns", "uid": "u1",
                         "labels": {QUEUE_NAME_LABEL: "lq"}, "annotations": anns},
            "spec": {"suspend": suspend, "parallelism": parallelism, "completions": parallelism,
                     "template": {"spec": {"restartPolicy": "Never", "containers": [
                         {"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}}}


def test_annotation_becomes_the_podset_min_count_both_ways() -> None:
    obj = workload_object_for_job(job())
    assert obj["spec"]["podSets"][0]["count"] == 10
    assert obj["spec"]["podSets"][0]["minCount"] == 9
    assert workload_from_object(obj).pod_sets[0].min_count == 9
    assert workload_from_job(job(minimum=None)).pod_sets[0].min_count is None


@pytest.mark.parametrize("bad", ["0", "-1", "x", "10", "11"])
def test_webhook_refuses_a_minimum_outside_zero_and_the_pod_count(bad: str) -> None:
    errors = validate_create(job(minimum=bad), "alice", POLICY)
    assert any(MIN_PARALLELISM_ANNOTATION in e for e in errors), errors


def test_a_minimum_no_longer_below_the_count_after_a_resize_means_all_or_nothing() -> None:
    assert workload_from_job(job(parallelism=4, minimum="9")).pod_sets[0].min_count is None
    with pytest.raises(WorkloadSpecError, match=MIN_PARALLELISM_ANNOTATION):
        workload_from_job(job(minimum="zero"))


def test_parallelism_is_immutable_while_a_partially_admitted_job_runs() -> None:
    old, new = job(suspend=False), job(suspend=False)
    new["spec"]["parallelism"] = 12
    assert mutate_update(old, new, "alice", POLICY) == []  # not suspended behind its back
    errors = validate_update(old, new, "alice", True, POLICY)
    assert any("spec.parallelism" in e for e in errors)
    assert validate_update(old, new, "pykueue", True, POLICY) == []  # its own start/stop


def _admitted(count: int) -> dict:
    wl = workload_object_for_job(job())
    wl["status"] = {"admission": {"clusterQueue": "cq", "podSetAssignments": [
        {"name": "main", "flavors": {"cpu": "f"}, "resourceUsage": {"cpu": str(count)},
         "count": count}]}}
    return wl


def test_start_sets_the_admitted_count_and_stop_restores_the_users() -> None:
    assert partial_count(_admitted(9)) == 9
    assert partial_count(_admitted(10)) is None  # admitted whole: nothing to change
    original = job()
    started = injected_job(original, "main", {}, [], parallelism=9)
    assert started["spec"]["parallelism"] == 9 and started["spec"]["suspend"] is False
    assert injected_job(started, "main", {}, [], parallelism=9) == started  # idempotent
    record = json.loads(started["metadata"]["annotations"]["pykueue.dev/original-pod-scheduling"])
    assert record["parallelism"] == 10
    stopped = restored_job(started)
    assert stopped["spec"]["parallelism"] == 10 and stopped["spec"]["suspend"] is True
    assert "pykueue.dev/original-pod-scheduling" not in stopped["metadata"]["annotations"]


def test_a_running_partial_job_desires_its_running_pods_with_the_users_shape() -> None:
    started = injected_job(copy.deepcopy(job()), "main", {}, [], parallelism=9)
    desired = KIND.desired(started, priority_classes={}, pod_priority_classes={})
    assert desired.pod_sets[0].count == 9  # what runs, matched against the admission
    assert desired.pod_sets[0].min_count == 9  # read from the user's Job (10 pods)


# ---- kueue.x-k8s.io/job-completions-equal-parallelism (Kueue v0.17 job_controller.go and
# job_webhook.go validateSyncCompletionCreate / validatePartialAdmissionUpdate)


def synced_job(value: str = "true", mode: str | None = "Indexed", **kw) -> dict:
    j = job(**kw)
    j["metadata"]["annotations"][COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION] = value
    if mode is not None:
        j["spec"]["completionMode"] = mode
    return j


def test_partial_start_sets_completions_with_parallelism_and_stop_restores_both() -> None:
    started = injected_job(synced_job(), "main", {}, [], parallelism=9)
    assert (started["spec"]["parallelism"], started["spec"]["completions"]) == (9, 9)
    desired = KIND.desired(started, priority_classes={}, pod_priority_classes={})
    assert (desired.pod_sets[0].count, desired.pod_sets[0].min_count) == (9, 9)
    stopped = restored_job(started)
    assert (stopped["spec"]["parallelism"], stopped["spec"]["completions"]) == (10, 10)
    # Without the annotation (or "false") completions stay the user's.
    plain = injected_job(synced_job("false"), "main", {}, [], parallelism=9)
    assert (plain["spec"]["parallelism"], plain["spec"]["completions"]) == (9, 10)


@pytest.mark.parametrize(("value", "mode", "parallelism", "completions", "expect"), [
    ("true", "Indexed", 10, 10, None),
    ("T", "Indexed", 10, 10, None),
    ("false", None, 10, 3, None),
    ("yes", "Indexed", 10, 10, "must be a boolean"),
    ("true", None, 10, 10, "NonIndexed"),
    ("true", "NonIndexed", 10, 10, "NonIndexed"),
    ("true", "Indexed", 10, 3, "spec.completions: should be equal to parallelism"),
])
def test_webhook_validates_the_completions_sync_annotation(value, mode, parallelism, completions,
                                                           expect) -> None:
    j = synced_job(value, mode)
    j["spec"]["parallelism"], j["spec"]["completions"] = parallelism, completions
    errors = [e for e in validate_create(j, "alice", POLICY)
              if COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION in e or "spec.completions" in e]
    if expect is None:
        assert errors == []
    else:
        assert any(expect in e for e in errors), errors


def test_completions_sync_is_immutable_while_the_job_runs() -> None:
    old, new = synced_job(suspend=False), synced_job("false", suspend=False)
    errors = validate_update(old, new, "alice", True, POLICY)
    assert any(COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION in e and "immutable" in e
               for e in errors), errors
    old["spec"]["suspend"] = new["spec"]["suspend"] = True
    assert validate_update(old, new, "alice", False, POLICY) == []


@pytest.mark.parametrize(("value", "mode", "expect"), [
    ("true", "NonIndexed", "NonIndexed"),
    ("yes", "Indexed", "must be a boolean"),
])
def test_completions_sync_added_to_a_suspended_job_is_validated_as_at_create(
        value, mode, expect) -> None:
    """breaker5: the annotation was validated at CREATE only; added later to a suspended
    NonIndexed Job, its partial start (completions set with parallelism) was refused by the API
    server (completions immutable) and the Workload finished, instead of a 4xx naming it."""
    old = job(minimum="2")
    new = copy.deepcopy(old)
    new["metadata"]["annotations"][COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION] = value
    new["spec"]["completionMode"] = mode
    errors = validate_update(old, new, "alice", False, POLICY)
    assert any(expect in e for e in errors), errors
    # pykueue's own start and stop writes of a valid one pass.
    ok = synced_job(minimum="2")
    started = injected_job(ok, "main", {}, [], parallelism=5)
    assert validate_update(ok, started, "pykueue", True, POLICY) == []
    assert validate_update(started, restored_job(started), "pykueue", True, POLICY) == []

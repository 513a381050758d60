"""``jobs.pod_replacement_policy`` (brk32 H4): with ``Failed`` (pykueue's opt-in) every queued
batch Job gets ``spec.podReplacementPolicy: Failed`` from the Job webhook, and a change away
from it is refused; the default (``AsSubmitted``, Kueue v0.17.1's) leaves the field alone."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.config import JobsSettings
from tests.unit.test_webhook import CONTROLLER, answer, decoded_patch, job, make_app, post, review

FAILED = JobsSettings(pod_replacement_policy="Failed")
OP = {"op": "add", "path": "/spec/podReplacementPolicy", "value": "Failed"}


def _job(queue: str | None = "lq1", policy: str = "TerminatingOrFailed",
         suspend: bool = True) -> dict[str, Any]:
    """A Job as the API server sends it: ``podReplacementPolicy`` already defaulted."""
    out = job(queue=queue, suspend=suspend)
    out["spec"]["podReplacementPolicy"] = policy
    return out


async def _answer(jobs: JobsSettings, path: str, operation: str, obj: dict[str, Any],
                  old: dict[str, Any] | None = None, user: str = "alice") -> dict[str, Any]:
    sent = review(operation, obj, old, user=user)
    return answer(await post(make_app(jobs=jobs), path, sent), sent)


def _ops(resp: dict[str, Any]) -> list[dict[str, Any]]:
    return decoded_patch(resp) if resp.get("patch") else []


@pytest.mark.parametrize(("jobs", "queue", "want"), [
    (JobsSettings(), "lq1", False), (FAILED, "lq1", True), (FAILED, None, False)],
    ids=["default-queued", "failed-queued", "failed-unqueued"])
async def test_a_queued_job_is_created_with_failed_only_with_the_setting(
        jobs: JobsSettings, queue: str | None, want: bool) -> None:
    resp = await _answer(jobs, "/mutate-batch-v1-job", "CREATE", _job(queue=queue))
    assert resp["allowed"]
    assert (OP in _ops(resp)) is want
    already = await _answer(jobs, "/mutate-batch-v1-job", "CREATE",
                            _job(queue=queue, policy="Failed"))
    assert OP not in _ops(already)


async def test_a_job_queued_by_an_update_gets_failed() -> None:
    old = _job(queue=None)
    new = copy.deepcopy(old)
    new["metadata"].setdefault("labels", {})["kueue.x-k8s.io/queue-name"] = "lq1"
    resp = await _answer(FAILED, "/mutate-batch-v1-job", "UPDATE", new, old)
    assert OP in _ops(resp)
    relabelled = await _answer(FAILED, "/mutate-batch-v1-job", "UPDATE", _job(), _job())
    assert OP not in _ops(relabelled)  # queued before: not this update's to change


@pytest.mark.parametrize(("jobs", "user", "allowed"), [
    (FAILED, "alice", False), (FAILED, CONTROLLER, True), (JobsSettings(), "alice", True)],
    ids=["failed-tenant", "failed-pykueue", "default-tenant"])
async def test_a_queued_job_cannot_leave_failed_with_the_setting(
        jobs: JobsSettings, user: str, allowed: bool) -> None:
    old = _job(policy="Failed")
    new = _job(policy="TerminatingOrFailed")
    resp = await _answer(jobs, "/validate-batch-v1-job", "UPDATE", new, old, user=user)
    assert resp["allowed"] is allowed
    if not allowed:
        assert "spec.podReplacementPolicy" in resp["status"]["message"]
        assert "jobs.pod_replacement_policy" in resp["status"]["message"]
    back = await _answer(jobs, "/validate-batch-v1-job", "UPDATE", old, new, user=user)
    assert back["allowed"]  # to Failed is always fine

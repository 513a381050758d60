"""A queued Job in a namespace being deleted: the API server refuses every create there (the
NamespaceLifecycle admission plugin, 403 Forbidden with the cause ``NamespaceTerminating``),
so the job framework creates no Workload for it and treats that refusal as final (no retry
loop, no warning per retry), whether the Namespace store shows the deletion yet or not."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from app.integrations import default_registry
from app.integrations.batchjob.job import KIND as JOB_KIND
from app.integrations.reconciler import JobReconciler
from app.kube.client import JOBS, NAMESPACES, PODS, WORKLOADS
from app.kube.context import NS, PC, POD, WL, WPC
from app.kube.errors import Permanent, from_status, namespace_terminating
from tests.unit.fake_ctx import FakeCtx

# The API server's answer (kube-apiserver v1.36, lifecycle admission plugin) to a create in a
# namespace being deleted.
REFUSAL = json.dumps({
    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
    "message": 'workloads.kueue.x-k8s.io "job-train-1a2b3" is forbidden: unable to create '
               "new content in namespace gone because it is being terminated",
    "reason": "Forbidden",
    "details": {"name": "job-train-1a2b3", "group": "kueue.x-k8s.io", "kind": "workloads",
                "causes": [{"reason": "NamespaceTerminating",
                            "message": "namespace gone is being terminated",
                            "field": "metadata.namespace"}]},
    "code": 403})


def test_the_namespace_terminating_refusal_is_told_from_other_refusals() -> None:
    assert namespace_terminating(from_status(403, REFUSAL))
    # A webhook's or RBAC's 403, even one quoting the same words, has no such cause.
    body = json.loads(REFUSAL)
    del body["details"]["causes"]
    assert not namespace_terminating(from_status(403, json.dumps(body)))
    body["details"]["causes"] = [{"reason": "FieldValueForbidden", "field": "spec"}]
    assert not namespace_terminating(from_status(403, json.dumps(body)))
    assert not namespace_terminating(from_status(422, REFUSAL))
    assert not namespace_terminating(from_status(409, REFUSAL))
    assert not namespace_terminating(ValueError("403"))


def _ctx(refuse: Exception | None = None) -> FakeCtx:
    """The stores ``JobReconciler.reconcile_object`` reads for a suspended Job without a
    Workload; ``refuse``: what the Workload's create raises."""
    return FakeCtx({WL: WORKLOADS, WPC: WORKLOADS, PC: WORKLOADS, JOB_KIND.key: JOBS,
                    POD: PODS, NS: NAMESPACES}, refuse_create=refuse)


def _queued_job() -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "gone", "uid": "j-1",
                         "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
            "spec": {"suspend": True, "parallelism": 1, "completions": 1, "template": {
                "spec": {"restartPolicy": "Never", "containers": [
                    {"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}}},
            "status": {}}


def _reconcile(ctx: FakeCtx) -> float | None:
    ctx.store(JOB_KIND.key).put(_queued_job())
    rec = JobReconciler.__new__(JobReconciler)
    rec.ctx, rec.registry = ctx, default_registry()  # type: ignore[assignment]
    return asyncio.run(rec.reconcile_object(JOB_KIND, "gone", "train"))


def _namespace(**meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "gone", **meta}, "status": {"phase": "Active"}}


def test_a_job_in_a_namespace_being_deleted_gets_no_workload() -> None:
    """The Namespace store shows the deletion: no create is even tried."""
    ctx = _ctx()
    ctx.store(NS).put(_namespace(deletionTimestamp="2026-12-05T22:00:00Z"))
    assert _reconcile(ctx) is None
    assert ctx.created == []
    # Active, the same Job gets its Workload.
    ctx = _ctx()
    ctx.store(NS).put(_namespace())
    assert _reconcile(ctx) is None
    assert [b["metadata"]["namespace"] for b in ctx.created] == ["gone"]


def test_a_create_refused_as_namespace_terminating_is_final(
        caplog: pytest.LogCaptureFixture) -> None:
    """The store has not shown the deletion yet: the create is refused (403
    NamespaceTerminating), which ends the pass quietly (one info line, no exception for the
    work queue to retry and log as a warning each time); any other 403 still raises."""
    ctx = _ctx(refuse=from_status(403, REFUSAL))
    ctx.store(NS).put(_namespace())
    with caplog.at_level(logging.DEBUG, logger="app.integrations.reconciler"):
        assert _reconcile(ctx) is None
    assert len(ctx.created) == 1
    lines = [r for r in caplog.records if r.name == "app.integrations.reconciler"]
    assert [r.levelno for r in lines] == [logging.INFO], caplog.text
    assert "namespace is being deleted" in lines[0].getMessage()
    body = json.loads(REFUSAL)
    del body["details"]["causes"]
    ctx = _ctx(refuse=from_status(403, json.dumps(body)))
    with pytest.raises(Permanent):
        _reconcile(ctx)

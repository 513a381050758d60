"""breaker16's attack on a MultiKueue worker (issue 29): the tenant removes or changes the
``kueue.x-k8s.io/prebuilt-workload-name`` label of the worker's running copy of its Job. The
worker's pykueue then made the Job a Workload of its own beside the manager's copy, still
admitted: one pod held the worker's quota twice (measured in the lab: 2 admitted Workloads,
2 CPUs, for 1 Running pod). Kueue v0.17.1 (``validateUpdateForPrebuiltWorkload``) keeps the
label immutable unless the updated job is suspended."""

from __future__ import annotations

import asyncio
import copy
from types import SimpleNamespace
from typing import Any

import pytest

from app.integrations import default_registry
from app.integrations.batchjob.job import KIND as JOB_KIND
from app.integrations.batchjob.webhook_rules import validate_update
from app.integrations.kubeflow.kubeflow import MPIJOB
from app.integrations.reconciler import JobReconciler
from app.integrations.webhook_toolkit import WebhookPolicy
from app.kube.context import WL
from tests.unit.test_multikueue_breaker15 import _mpijob
from tests.unit.test_quota_release_on_terminal import _admitted_workload, _stopped_job, _stores

POLICY = WebhookPolicy(controller_usernames=frozenset({"system:serviceaccount:p:p"}))
PREBUILT = "kueue.x-k8s.io/prebuilt-workload-name"


def _copy_job(suspend: bool, prebuilt: str | None = "job-x-1a2b3") -> dict[str, Any]:
    """A worker's copy of a manager's Job: queued, prebuilt, origin-labelled."""
    labels = {"kueue.x-k8s.io/queue-name": "lq", "kueue.x-k8s.io/multikueue-origin": "m"}
    if prebuilt is not None:
        labels[PREBUILT] = prebuilt
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "x", "namespace": "t", "labels": labels},
            "spec": {"suspend": suspend, "parallelism": 1, "template": {"spec": {
                "containers": [{"name": "c", "image": "i"}]}}}}


@pytest.mark.parametrize("to", [None, "other"])
def test_a_running_jobs_prebuilt_workload_name_cannot_be_removed_or_changed(
        to: str | None) -> None:
    errors = validate_update(_copy_job(False), _copy_job(False, to), "tenant", True, POLICY)
    assert any(PREBUILT in e and "immutable" in e for e in errors), errors


def test_a_prebuilt_workload_name_cannot_be_added_to_a_running_job() -> None:
    errors = validate_update(_copy_job(False, None), _copy_job(False), "tenant", True, POLICY)
    assert any(PREBUILT in e for e in errors), errors


def test_a_suspended_job_may_change_it_and_other_updates_pass() -> None:
    """Kueue: the rule holds while the updated job is not suspended; the label kept, nothing
    is refused."""
    assert validate_update(_copy_job(True), _copy_job(True, None), "tenant", None,
                           POLICY) == []
    same = _copy_job(False)
    touched = copy.deepcopy(same)
    touched["metadata"]["annotations"] = {"a": "b"}
    assert validate_update(same, touched, "tenant", True, POLICY) == []


def test_the_same_rule_holds_for_the_other_kinds() -> None:
    """The kinds of ``CrdRules`` (here MPIJob, ``spec.runPolicy.suspend``)."""
    old = _mpijob("kubeflow.org/mpi-operator")
    old["metadata"]["labels"][PREBUILT] = "wl"
    new = copy.deepcopy(old)
    del new["metadata"]["labels"][PREBUILT]
    assert any(PREBUILT in e for e in MPIJOB.rules.validate(old, new, "tenant", POLICY))
    for obj in (old, new):
        obj["spec"]["runPolicy"]["suspend"] = True
    assert not [e for e in MPIJOB.rules.validate(old, new, "tenant", POLICY) if PREBUILT in e]


def _reconciled(job: dict[str, Any], wl: dict[str, Any]) -> tuple[Any, float | None]:
    """One pass of the reconciler over Job ``ns/train`` with Workload ``wl`` stored."""
    ctx = _stores([])
    ctx.recorder = SimpleNamespace(emit=lambda *a: None)
    ctx.store(JOB_KIND.key).put(job)
    ctx.store(WL).put(wl)
    rec = JobReconciler.__new__(JobReconciler)
    rec.ctx, rec.registry = ctx, default_registry()  # type: ignore[assignment]
    return ctx, asyncio.run(rec.reconcile_object(JOB_KIND, "ns", "train"))


def test_a_suspended_job_that_gains_the_label_is_reconciled_with_that_workload_only() -> None:
    """rev26: the label added while suspended (allowed, as Kueue v0.17.1: its webhook
    validates a suspended job's label as at creation). From then on the job goes with the
    Workload its label names only (Kueue ``ensureOneWorkload`` lists no Workload by owner
    for it): its own one, admitted, neither starts it (one pod set would run on two
    admissions once the named one is admitted) nor is changed or deleted; it keeps its quota
    until the job is deleted or the label is removed while still suspended, which makes it
    the job's Workload again."""
    job = _stopped_job()
    own = _admitted_workload(job)
    job["metadata"]["labels"][PREBUILT] = "job-train-manager"
    ctx, again = _reconciled(job, own)
    # Waits for its named Workload, whose creation queues it (tests/unit/test_prebuilt_wait.py).
    assert ctx.writes == [] and again is None
    del job["metadata"]["labels"][PREBUILT]
    ctx, _ = _reconciled(job, own)
    assert ("replace", "jobs", "train") in ctx.writes  # started on its own admission

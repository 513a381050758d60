"""Relabelling ``kueue.x-k8s.io/priority-class`` on a queued Job re-resolves its Workload's
priority, pending or admitted (before: an admitted Workload kept its old priority). Kueue
v0.17.1 ``UpdateWorkloadPriority``: a Workload without a class, or with a
WorkloadPriorityClass, follows the job's label; one whose priority came from a pod
PriorityClass keeps it."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from app.integrations import default_registry
from app.integrations.batchjob.job import KIND as JOB_KIND
from app.kube.client import JOBS, WORKLOAD_PRIORITY_CLASSES, WORKLOADS
from tests.recording_client import OBJECTS, RecordingClient
from tests.unit.test_job_framework import leading_manager
from tests.unit.test_webhook import Lookups, answer, make_app, post, review

LABEL = "kueue.x-k8s.io/priority-class"
WPCS = [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
         "metadata": {"name": n, "resourceVersion": "1"}, "value": v}
        for n, v in (("low", 10), ("high", 1000))]


def _job(label: str | None) -> dict[str, Any]:
    job = copy.deepcopy(OBJECTS[JOBS.plural][0])
    if label:
        job["metadata"]["labels"][LABEL] = label
    return job


def _workload(label: str | None, *, admitted: bool) -> dict[str, Any]:
    wpc = {w["metadata"]["name"]: w["value"] for w in WPCS}
    wl = JOB_KIND.workload_object(_job(label), priority_classes=wpc, pod_priority_classes={})
    wl["metadata"].update(uid="w1", resourceVersion="5")
    if admitted:
        wl["status"] = {"admission": {"clusterQueue": "cq", "podSetAssignments": [
            {"name": "main", "count": 1, "flavors": {"cpu": "default-flavor"},
             "resourceUsage": {"cpu": "1"}}]},
            "conditions": [{"type": t, "status": "True", "reason": t, "message": "",
                            "lastTransitionTime": "2026-01-01T00:00:00Z"}
                           for t in ("QuotaReserved", "Admitted")]}
    return wl


async def _priority_writes(monkeypatch: pytest.MonkeyPatch, job: dict[str, Any],
                           wl: dict[str, Any]) -> list[dict[str, Any]]:
    client = RecordingClient({**OBJECTS, JOBS.plural: [job], WORKLOADS.plural: [wl],
                              WORKLOAD_PRIORITY_CLASSES.plural: WPCS})
    m = leading_manager(monkeypatch, client, default_registry(["batch/job"]))
    await m.start()
    try:
        await m.wait_ready(10)
        for _ in range(60):
            writes = [b["spec"] for v, r, b in client.bodies
                      if (v, r) == ("replace", "workloads") and "spec" in b
                      and b["spec"].get("priority") != wl["spec"].get("priority")]
            if writes:
                return writes
            await asyncio.sleep(0.05)
        return []
    finally:
        await m.stop()


@pytest.mark.parametrize("admitted", [False, True], ids=["pending", "admitted"])
async def test_a_relabelled_job_moves_its_workload_to_the_new_class(
        monkeypatch: pytest.MonkeyPatch, admitted: bool) -> None:
    writes = await _priority_writes(monkeypatch, _job("high"),
                                    _workload("low", admitted=admitted))
    assert writes and writes[0]["priority"] == 1000
    assert writes[0]["priorityClassRef"] == {"group": "kueue.x-k8s.io",
                                             "kind": "WorkloadPriorityClass", "name": "high"}


async def test_a_class_added_to_a_pending_job_gives_its_workload_a_priority(
        monkeypatch: pytest.MonkeyPatch) -> None:
    writes = await _priority_writes(monkeypatch, _job("high"), _workload(None, admitted=False))
    assert writes and writes[0]["priority"] == 1000


def _labelled(label: str | None, *, suspend: bool) -> dict[str, Any]:
    job = _job(label)
    job["spec"]["suspend"] = suspend
    return job


@pytest.mark.parametrize(("before", "after", "suspend", "allowed"), [
    (None, "high", True, True),  # added while suspended
    ("low", "high", False, True),  # changed while running: the Workload follows
    (None, "high", False, False),  # added to a running Job
    ("low", None, True, False),  # removed
])
async def test_the_priority_class_label_rules_of_kueue(
        before: str | None, after: str | None, suspend: bool, allowed: bool) -> None:
    """Kueue v0.17.1 ``ValidateUpdateForWorkloadPriorityClassName`` on the Job webhook."""
    app = make_app(admission=Lookups(admitted=not suspend))
    sent = review("UPDATE", _labelled(after, suspend=suspend), _labelled(before, suspend=suspend))
    response = answer(await post(app, "/validate-batch-v1-job", sent), sent)
    assert response["allowed"] is allowed, response
    if not allowed:
        assert LABEL in response["status"]["message"]

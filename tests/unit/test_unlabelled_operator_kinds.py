"""``jobs.manage_jobs_without_queue_name`` for the operators' kinds (Kueue v0.17.1
``BaseWebhook.Default``: ``ApplyDefaultLocalQueue`` then ``WorkloadShouldBeSuspended`` for every
integrated kind; kueue-integrations.md 1.6): an unlabelled JobSet, Kubeflow job, MPIJob, RayJob
or RayCluster of a managed namespace is created suspended and gets a Workload that waits for a
LocalQueue; only pykueue unsuspends it; an object a managed kind controls (a RayJob's
RayCluster) is left to its owner. One framework rule (``WebhookEnv.unqueued_defaults``,
``KindDefaults.manages_unlabelled``), not one per kind. The lab test is
``tests/e2e/test_unqueued_pods.py::test_unlabelled_operator_objects_wait_for_a_local_queue``."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from app.config import JobsSettings
from app.integrations import batchjob, jobset, kubeflow
from app.integrations.crdrules import read_lever
from app.integrations.framework import Registry
from app.integrations.kubeflow.kubeflow import MPIJOB, PYTORCHJOB, TFJOB
from app.integrations.ray.ray import RAYCLUSTER, RAYJOB
from app.wire.names import QUEUE_NAME_LABEL
from tests.recording_client import OBJECTS
from tests.unit.test_jobset import jobset as make_jobset
from tests.unit.test_jobset import rjob
from tests.unit.test_quota_integrity import _child_job, _leading, _review, _ServesJobSets
from tests.unit.test_ray import group, raycluster, rayjob
from tests.unit.test_webhook import (
    CONTROLLER,
    Lookups,
    answer,
    apply_patch,
    decoded_patch,
    make_app,
    post,
)

ON = JobsSettings(manage_jobs_without_queue_name=True)


def _unlabelled(obj: dict[str, Any], *, suspend: bool = False) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["labels"] = {}
    kind = {"PyTorchJob": PYTORCHJOB, "TFJob": TFJOB, "MPIJob": MPIJOB, "JobSet": jobset.KIND,
            "RayJob": RAYJOB, "RayCluster": RAYCLUSTER}[out["kind"]]
    node: Any = out
    for key in kind.suspend[:-1]:
        node = node.setdefault(key, {})
    node[kind.suspend[-1]] = suspend
    return out


def _kubeflow(kind: str, version: str, field: str, *types: str) -> dict[str, Any]:
    tpl = {"spec": {"containers": [{"name": "c", "image": "x", "resources": {
        "requests": {"nvidia.com/gpu": "1"}}}]}}
    return {"apiVersion": f"kubeflow.org/{version}", "kind": kind,
            "metadata": {"name": "k", "namespace": "ns", "uid": "k-1", "labels": {}},
            "spec": {"runPolicy": {}, field: {t: {"replicas": 1, "template": tpl}
                                              for t in types}}}


OBJECTS_BY_KIND = {
    "JobSet": (jobset.KIND, lambda: _unlabelled(make_jobset(rjob("workers", 2, 1)))),
    "PyTorchJob": (PYTORCHJOB, lambda: _kubeflow("PyTorchJob", "v1", "pytorchReplicaSpecs",
                                                 "Master", "Worker")),
    "TFJob": (TFJOB, lambda: _kubeflow("TFJob", "v1", "tfReplicaSpecs", "Worker")),
    "MPIJob": (MPIJOB, lambda: _kubeflow("MPIJob", "v2beta1", "mpiReplicaSpecs", "Launcher",
                                         "Worker")),
    "RayJob": (RAYJOB, lambda: _unlabelled(rayjob(group("gpu", 1)))),
    "RayCluster": (RAYCLUSTER, lambda: _unlabelled(raycluster(group("gpu", 1)))),
}


async def _admit(obj: dict[str, Any], *, managed: bool | None = True,
                 jobs: JobsSettings = ON, default_queue: bool = False, op: str = "CREATE",
                 old: dict[str, Any] | None = None, user: str = "alice",
                 admitted: bool | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(mutating answer applied to ``obj``, validating answer) for ``obj``'s kind."""
    kind = OBJECTS_BY_KIND[obj["kind"]][0]
    lookups = Lookups(default_queue=default_queue, managed=managed)
    lookups.workload_admitted = lambda ns, name: admitted  # type: ignore[attr-defined]
    app = make_app(admission=lookups, default_queue=lookups, jobs=jobs)
    sent = _review(kind.rules, op, obj, old, user=user)
    got = answer(await post(app, kind.rules.mutate_path, sent), sent)
    mutated = apply_patch(obj, decoded_patch(got)) if "patch" in got else obj
    sent = _review(kind.rules, op, mutated, old, user=user)
    return mutated, answer(await post(app, kind.rules.validate_path, sent), sent)


@pytest.mark.parametrize("kind", sorted(OBJECTS_BY_KIND))
async def test_an_unlabelled_operator_object_of_a_managed_namespace_is_created_suspended(
        kind: str) -> None:
    rules_kind, make = OBJECTS_BY_KIND[kind]
    created, verdict = await _admit(make())
    assert read_lever(created, rules_kind.suspend) is True and verdict["allowed"] is True
    assert QUEUE_NAME_LABEL not in (created["metadata"].get("labels") or {})
    # Outside the selector, or with the setting off: as before, not suspended.
    for managed, jobs in ((False, ON), (True, JobsSettings())):
        left, _ = await _admit(make(), managed=managed, jobs=jobs)
        assert read_lever(left, rules_kind.suspend) is False
    # LocalQueue defaulting labels it with ``default``, as for a batch Job.
    defaulted, _ = await _admit(make(), default_queue=True,
                                jobs=JobsSettings(manage_jobs_without_queue_name=True,
                                                  local_queue_defaulting=True))
    assert defaulted["metadata"]["labels"][QUEUE_NAME_LABEL] == "default"
    assert read_lever(defaulted, rules_kind.suspend) is True


@pytest.mark.parametrize("kind", sorted(OBJECTS_BY_KIND))
async def test_only_pykueue_unsuspends_an_unlabelled_operator_object(kind: str) -> None:
    rules_kind, make = OBJECTS_BY_KIND[kind]
    stored = make()
    stored = _unlabelled(stored, suspend=True) if kind in ("JobSet", "RayJob", "RayCluster") \
        else {**stored, "spec": {**stored["spec"], "runPolicy": {"suspend": True}}}
    resumed = copy.deepcopy(stored)
    node: Any = resumed
    for key in rules_kind.suspend[:-1]:
        node = node[key]
    node[rules_kind.suspend[-1]] = False
    _, refused = await _admit(resumed, op="UPDATE", old=stored, admitted=False)
    assert refused["allowed"] is False
    assert f"{rules_kind.rules.lever}: only pykueue" in refused["status"]["message"]
    assert "manageJobsWithoutQueueName" in refused["status"]["message"]
    for allowed in (await _admit(resumed, op="UPDATE", old=stored, user=CONTROLLER),
                    await _admit(resumed, op="UPDATE", old=stored, admitted=True),
                    await _admit(resumed, op="UPDATE", old=stored, managed=False)):
        assert allowed[1]["allowed"] is True
    # A labelled one likewise: the reconciler would stop it, after its pods started.
    labelled = copy.deepcopy(stored)
    labelled["metadata"]["labels"] = {QUEUE_NAME_LABEL: "lq"}
    raised = copy.deepcopy(resumed)
    raised["metadata"]["labels"] = {QUEUE_NAME_LABEL: "lq"}
    _, refused = await _admit(raised, op="UPDATE", old=labelled, jobs=JobsSettings())
    assert refused["allowed"] is False and "LocalQueue 'lq'" in refused["status"]["message"]


async def test_what_a_managed_kind_controls_or_never_queues_is_left_alone() -> None:
    # KubeRay's RayCluster of a RayJob: the RayJob's business.
    owned = _unlabelled(raycluster(group("gpu", 1), owner="RayJob"))
    left, verdict = await _admit(owned)
    assert left["spec"]["suspend"] is False and verdict["allowed"] is True
    # A RayJob on an existing cluster: Kueue skips it (RayJob.Skip).
    selector = _unlabelled(rayjob(group("gpu", 1)))
    del selector["spec"]["rayClusterSpec"]
    selector["spec"]["clusterSelector"] = {"ray.io/cluster": "shared"}
    left, verdict = await _admit(selector)
    assert left["spec"]["suspend"] is False and verdict["allowed"] is True


async def test_an_unlabelled_object_that_could_not_have_a_workload_is_refused_at_create() -> None:
    """Queued without a name it needs a Workload all the same: Kueue v0.17.1's Ray webhooks
    check it under manageJobsWithoutQueueName (a cluster that outlives its RayJob)."""
    lingering = _unlabelled(rayjob(group("gpu", 1), shutdownAfterJobFinishes=False))
    _, verdict = await _admit(lingering)
    assert verdict["allowed"] is False
    assert "spec.shutdownAfterJobFinishes" in verdict["status"]["message"]
    _, verdict = await _admit(lingering, managed=False)
    assert verdict["allowed"] is True


async def test_an_unlabelled_jobset_of_a_managed_namespace_gets_a_workload_without_a_queue(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The reconciler side: the JobSet informer lists unlabelled JobSets and the JobSet's
    Workload is created with no queue name (it waits, inadmissible, for a LocalQueue)."""
    js = _unlabelled(make_jobset(rjob("workers", 2, 1)), suspend=True)
    js["metadata"]["namespace"] = OBJECTS["namespaces"][0]["metadata"]["name"]
    client = _ServesJobSets({**OBJECTS, "jobsets": [js], "jobs": []})
    m = _leading(monkeypatch, client, jobs=ON)
    await m.start()
    try:
        await m.wait_ready(10)
        for _ in range(100):
            made = [b for v, r, b in client.bodies if (v, r) == ("create", "workloads")]
            if made:
                break
            await asyncio.sleep(0.05)
    finally:
        await m.stop()
    assert [w["metadata"]["name"] for w in made] == [jobset.KIND.workload_name(js)]
    assert not made[0]["spec"].get("queueName")
    assert [ps["count"] for ps in made[0]["spec"]["podSets"]] == [2]


def test_every_kind_takes_part_in_manage_jobs_without_queue_name() -> None:
    """The framework's default, not a per-kind flag (``KindDefaults.manages_unlabelled``)."""
    kinds = Registry([batchjob.KIND, jobset.KIND, *kubeflow.KINDS, RAYJOB, RAYCLUSTER]).kinds()
    assert all(k.manages_unlabelled for k in kinds)  # type: ignore[attr-defined]


async def test_outside_the_selector_an_unlabelled_jobset_is_nobodys_ancestor(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """In a namespace ``managed_jobs_namespace_selector`` leaves out, an unlabelled JobSet
    gets no Workload and its running child Job is left alone, not stopped as the child of a
    managed ancestor (``manages_unlabelled_in``; Kueue reconciles no job there:
    ``ManagedJobsNamespaceSelectorAlwaysRespected``). The lab test shows it with the real
    JobSet operator."""
    ns = OBJECTS["namespaces"][0]["metadata"]["name"]
    js = _unlabelled(make_jobset(rjob("workers", 1, 1)), suspend=False)
    js["metadata"]["namespace"] = ns
    child = _child_job("train-workers-0", 1, js)
    outside = JobsSettings(manage_jobs_without_queue_name=True, managed_jobs_namespace_selector={
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                              "values": ["kube-system", "pykueue-system", ns]}]})
    namespace = {"metadata": {"name": ns, "resourceVersion": "1",
                              "labels": {"kubernetes.io/metadata.name": ns}}}
    client = _ServesJobSets({**OBJECTS, "namespaces": [namespace], "jobsets": [js],
                             "jobs": [child]})
    m = _leading(monkeypatch, client, jobs=outside)
    await m.start()
    try:
        await m.wait_ready(10)
        assert m.jobs is not None
        # Both stores hold both objects now: a pass over each writes nothing.
        await m.jobs.reconcile_object(batchjob.KIND, ns, "train-workers-0")
        await m.jobs.reconcile_object(jobset.KIND, ns, "train")
        writes = [(v, r) for v, r, _ in client.bodies if r in ("jobs", "jobsets", "workloads")]
    finally:
        await m.stop()
    assert writes == []

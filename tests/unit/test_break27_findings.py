"""brk27's findings on the RayJob (session 27): what holds an evicted or deleted RayJob's
quota for good, with nothing of it running."""

from __future__ import annotations

import asyncio
from typing import Any

from app.integrations import default_registry
from app.integrations.ray.ray import ORIGIN_KIND_LABEL, ORIGIN_NAME_LABEL, RAYCLUSTER, RAYJOB
from app.integrations.reconciler import JobReconciler
from app.kube.client import NAMESPACES, PODS, RESOURCE_FLAVORS, WORKLOADS
from app.kube.context import NS, PC, POD, RF, WL, WPC
from tests.unit.fake_ctx import FakeCtx
from tests.unit.test_kinds_being_deleted import admitted_rayjob_workload
from tests.unit.test_ray import group, raycluster, rayjob

DELETING = "2026-12-06T01:00:00Z"


def _look(rj: dict[str, Any], *, wl_deleted: bool, clusters: tuple[dict[str, Any], ...] = (),
          pods: tuple[dict[str, Any], ...] = ()) -> tuple[FakeCtx, float | None]:
    """One reconcile of RayJob ``rj`` with its admitted Workload, preempted (Evicted) or
    deleted (``wl_deleted``: ``kubectl delete --cascade=foreground``)."""
    wl = admitted_rayjob_workload(rj, wl_deleted=wl_deleted)
    ctx = FakeCtx({WL: WORKLOADS, WPC: WORKLOADS, PC: WORKLOADS, RAYJOB.key: RAYJOB.resource,
                   RAYCLUSTER.key: RAYCLUSTER.resource, POD: PODS, NS: NAMESPACES,
                   RF: RESOURCE_FLAVORS},
                  {POD: list(pods), RAYJOB.key: [rj], RAYCLUSTER.key: list(clusters), WL: [wl]})
    ctx.clock = lambda: 1e9  # type: ignore[attr-defined]
    rec = JobReconciler.__new__(JobReconciler)
    rec.ctx, rec.registry = ctx, default_registry()  # type: ignore[assignment]
    rec.queue = type("Q", (), {"add": staticmethod(lambda *_, **__: None)})()  # type: ignore[assignment]
    return ctx, asyncio.run(rec.reconcile_object(RAYJOB, "ns", rj["metadata"]["name"]))


def _decoy() -> tuple[dict[str, Any], dict[str, Any]]:
    """The tenant's own unqueued CPU RayCluster labelled as made by KubeRay for RayJob
    ``tune`` (no owner), and its head pod, which no node takes (Pending for good)."""
    rc = raycluster(group("cpu", 1, gpu=0))
    rc["metadata"].update(name="decoy", uid="decoy-uid",
                          labels={ORIGIN_KIND_LABEL: "RayJob", ORIGIN_NAME_LABEL: "tune"})
    rc["spec"]["suspend"] = False
    pod = {"metadata": {"name": "decoy-head", "namespace": "ns", "uid": "p-h",
                        "labels": {"ray.io/cluster": "decoy"},
                        "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster",
                                             "name": "decoy", "uid": "decoy-uid",
                                             "controller": True}]},
           "spec": {"nodeSelector": {"no-such": "node"}}, "status": {"phase": "Pending"}}
    return rc, pod


def test_a_tenants_cluster_with_a_rayjobs_origin_labels_holds_none_of_its_quota() -> None:
    """brk27: a RayJob deleted (the tenant's finalizer keeping it) before its cluster was
    recorded on its Workload was counted through every stored RayCluster carrying its
    origin labels, whatever controlled it: the tenant's own unqueued cluster, whose one pod
    never gets a node, kept the preempted (or deleted) Workload's quota for good. Only a
    cluster the RayJob controls (its uid) counts while the Workload names its owner."""
    rc, pod = _decoy()
    for wl_deleted in (False, True):
        rj = rayjob(group("gpu", 4), suspend=not wl_deleted)
        rj["metadata"].update(deletionTimestamp=DELETING, finalizers=["example.com/keep"])
        rj["status"] = {"jobDeploymentStatus": "New", "jobStatus": "NEW"}
        ctx, again = _look(rj, wl_deleted=wl_deleted, clusters=(rc,), pods=(pod,))
        assert again is None and [w for w in ctx.writes if w[1] == "workloads"], (
            wl_deleted, ctx.writes)


def test_a_rayjob_kuberay_refused_is_finished_and_its_evicted_quota_released() -> None:
    """brk27 (Kueue v0.17.1's exposure; Kueue v0.18.5 kueue#13415): KubeRay v1.6.0 marks a
    RayJob it refuses (a name of 48 characters) ``ValidationFailed`` before it makes any
    cluster, and keeps it so. It counted as active for good, so once preempted its Workload
    never released the quota, nothing of it running; it is Finished now."""
    rj = rayjob(group("gpu", 4), suspend=True)
    rj["metadata"]["name"] = "a" * 48
    rj["status"] = {"jobDeploymentStatus": "ValidationFailed", "reason": "ValidationFailed",
                    "message": "RayJob name should be no more than 47 characters"}
    assert RAYJOB.finished(rj)[:2] == (True, "Failed")
    ctx, again = _look(rj, wl_deleted=False)
    assert again is None and [w for w in ctx.writes if w[1] == "workloads"], ctx.writes
    named = {**rj, "status": {**rj["status"], "rayClusterName": "x-raycluster-abcde"}}
    assert not RAYJOB.finished(named)[0]  # a cluster was made: Kueue's rule leaves it

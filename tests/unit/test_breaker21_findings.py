"""breaker21: today's changes (a Job being deleted makes no Workload, the orphaned RayJob's
deleted clusters, Events' own token bucket, the lab's garbage-collector probes) tried from a
tenant's side and against Kueue v0.17.1's semantics."""

from __future__ import annotations

import asyncio
from typing import Any

from app.integrations import default_registry, ray
from app.integrations.pod.group import KIND as GROUP_KIND
from app.integrations.pod.pod import KIND as POD_KIND
from app.integrations.ray.ray import RAYJOB, RAYSERVICE
from app.integrations.reconciler import JobReconciler
from app.kube.client import PODS, WORKLOADS
from app.kube.context import PC, WL, WPC
from app.kube.informers import Store
from tests.unit.test_pod_group import member
from tests.unit.test_quota_integrity import NS, ray_stores


def _cluster_pod(name: str, uid: str | None) -> dict[str, Any]:
    """A running worker pod of RayCluster ``name``: controlled by the cluster of ``uid``, or
    ownerless (``None``: the cluster was deleted with ``--cascade=orphan``)."""
    meta: dict[str, Any] = {"name": f"{name}-w", "namespace": NS,
                            "labels": {"ray.io/cluster": name}}
    if uid is not None:
        meta["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": "RayCluster",
                                    "name": name, "uid": uid, "controller": True}]
    return {"metadata": meta, "status": {"phase": "Running"}}


def test_an_orphaned_rayjobs_cluster_deleted_with_orphan_still_counts_its_pods() -> None:
    """``kubectl delete rayjob --cascade=orphan``, then ``kubectl delete raycluster
    --cascade=orphan`` of the cluster it ran on: the cluster leaves the store and its pods
    lose their owner reference but run on (with the admission's nodeSelector and
    tolerations). The RayJob's orphaned Workload, which records the cluster by name and uid,
    must keep counting them (as the cluster's own orphaned Workload would:
    ``pods_of_workload`` counts ownerless pods of a gone owner), not be Finished and release
    the GPUs while they run. Pods controlled by another cluster of that name still do not
    count."""
    wl: dict[str, Any] = {"metadata": {"name": "rayjob-tune-x", "namespace": NS,
                                       "annotations": {ray.ray.CLUSTERS_ANNOTATION: "rc/u-2"}}}
    ctx = ray_stores()()  # the cluster is gone from the store
    assert RAYJOB.made_pods(ctx, wl, "u-1", [_cluster_pod("rc", None)]) == 1  # type: ignore[arg-type]
    assert RAYJOB.made_pods(ctx, wl, "u-1", [_cluster_pod("rc", "u-9")]) == 0  # type: ignore[arg-type]
    assert RAYJOB.made_pods(ctx, wl, "u-1", [_cluster_pod("other", None)]) == 0  # type: ignore[arg-type]


def test_a_rayjobs_record_is_counted_by_the_rayjob_kind_only() -> None:
    """The record ``pykueue.dev/ray-clusters`` is a RayJob's (only ``RayJob.settle`` writes
    it); ``_finish_orphan`` sums ``made_pods`` over every kind, so RayService must not count
    the same clusters again (the Event ``WaitingForPods`` said 2 pods for 1) nor stop them a
    second time."""
    wl: dict[str, Any] = {"metadata": {"name": "rayjob-tune-x", "namespace": NS,
                                       "annotations": {ray.ray.CLUSTERS_ANNOTATION: "rc/u-2"}}}
    pods = [_cluster_pod("rc", "u-2")]
    ctx = ray_stores()()
    assert RAYJOB.made_pods(ctx, wl, "u-1", pods) == 1  # type: ignore[arg-type]
    assert RAYSERVICE.made_pods(ctx, wl, "u-1", pods) == 0  # type: ignore[arg-type]


class _Informers:
    def __init__(self, keys: dict[str, Any]) -> None:
        self.informers = {k: type("I", (), {"store": Store(r)})() for k, r in keys.items()}

    def store(self, key: str) -> Store:
        return self.informers[key].store


class _GroupCtx:
    """The stores and writes ``JobReconciler.reconcile_object`` uses for a pod group."""

    def __init__(self) -> None:
        self.informers = _Informers({WL: WORKLOADS, WPC: WORKLOADS, PC: WORKLOADS,
                                     POD_KIND.key: PODS})
        self.created: list[dict[str, Any]] = []
        self.inflight: set[str] = set()
        self.recorder = type("R", (), {"emit": staticmethod(lambda *_: True)})()
        self.client = self

    def store(self, key: str) -> Store:
        return self.informers.store(key)

    def wake(self) -> None:
        pass

    async def create(self, res: Any, body: dict[str, Any]) -> dict[str, Any]:
        self.created.append(body)
        return {**body, "metadata": {**body["metadata"], "uid": "w-1",
                                     "resourceVersion": "1"}}


def test_a_pod_group_gets_its_workload_while_one_member_is_being_deleted() -> None:
    """A pod group is composed from its members, with the first one's (by name) metadata:
    that member being deleted (a replaced pod a finalizer keeps, here a Failed one) says
    nothing about the group, whose other members are all there and gated. Kueue v0.17.1
    drops a group's finalizers only when none of its pods is found (``Pod.Load``) and
    creates its Workload; pykueue must too, not leave the group gated until that one pod is
    gone."""
    ctx = _GroupCtx()
    gone = member("a", phase="Failed")
    gone["metadata"]["deletionTimestamp"] = "2026-12-05T15:00:00Z"
    gone["metadata"]["finalizers"] = ["example.com/keep"]
    for p in (gone, member("b"), member("c"), member("d")):
        ctx.store(POD_KIND.key).put(p)
    rec = JobReconciler.__new__(JobReconciler)
    rec.ctx, rec.registry = ctx, default_registry()  # type: ignore[assignment]
    asyncio.run(rec.reconcile_object(GROUP_KIND, "ns", "g"))
    assert [b["metadata"]["name"] for b in ctx.created] == ["g"]
    # A plain Pod being deleted still gets none (Kueue: a single pod being deleted only
    # loses its finalizers).
    single = {**member("solo"), "metadata": {**member("solo")["metadata"], "labels": {
        "kueue.x-k8s.io/queue-name": "lq", "kueue.x-k8s.io/managed": "true"},
        "deletionTimestamp": "2026-12-05T15:00:00Z"}}
    ctx.store(POD_KIND.key).put(single)
    asyncio.run(rec.reconcile_object(POD_KIND, "ns", "solo"))
    assert len(ctx.created) == 1

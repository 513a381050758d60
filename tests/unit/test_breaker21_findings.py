"""breaker21: today's changes (a Job being deleted makes no Workload, the orphaned RayJob's
deleted clusters, Events' own token bucket, the lab's garbage-collector probes) tried from a
tenant's side and against Kueue v0.17.1's semantics."""

from __future__ import annotations

from typing import Any

from app.integrations import ray
from app.integrations.ray.ray import RAYJOB, RAYSERVICE
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

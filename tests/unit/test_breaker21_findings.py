"""breaker21: today's changes (a Job being deleted makes no Workload, the orphaned RayJob's
deleted clusters, Events' own token bucket, the lab's garbage-collector probes) tried from a
tenant's side and against Kueue v0.17.1's semantics."""

from __future__ import annotations

import asyncio
import subprocess
from typing import Any

from app.integrations import default_registry, ray
from app.integrations.batchjob.job import KIND as JOB_KIND
from app.integrations.pod.group import KIND as GROUP_KIND
from app.integrations.pod.pod import KIND as POD_KIND
from app.integrations.ray.ray import RAYJOB, RAYSERVICE
from app.integrations.reconciler import JobReconciler
from app.kube.client import JOBS, PODS, WORKLOADS
from app.kube.context import PC, POD, WL, WPC
from tests.labfixture import WORKLOAD_GC_PROBE, wait_gc_watches
from tests.unit.fake_ctx import FakeCtx
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


def test_a_pod_group_gets_its_workload_while_one_member_is_being_deleted() -> None:
    """A pod group is composed from its members, with the first one's (by name) metadata:
    that member being deleted (a replaced pod a finalizer keeps, here a Failed one) says
    nothing about the group, whose other members are all there and gated. Kueue v0.17.1
    drops a group's finalizers only when none of its pods is found (``Pod.Load``) and
    creates its Workload; pykueue must too, not leave the group gated until that one pod is
    gone."""
    ctx = FakeCtx({WL: WORKLOADS, WPC: WORKLOADS, PC: WORKLOADS, POD_KIND.key: PODS})
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


def test_the_gc_probe_is_not_collected_by_a_failed_get() -> None:
    """``wait_gc_watches``: a ``kubectl get`` of the probe that fails for any other reason
    than NotFound (the API server restarting, a timeout) proves nothing about the garbage
    collector; only NotFound or a deletionTimestamp does. Here the probe is never collected
    (the collector does not watch its kind): the wait must time out, not pass on the first
    failed get."""
    gets: list[tuple[str, ...]] = []

    def kubectl(*args: str, input: str | None = None, check: bool = True
                ) -> subprocess.CompletedProcess[str]:
        if args[0] != "get":
            return subprocess.CompletedProcess(args, 0, "u-1" if args[1] == "configmap" else "",
                                               "")
        gets.append(args)
        if len(gets) == 1:
            return subprocess.CompletedProcess(
                args, 1, "", "The connection to the server 127.0.0.1:20003 was refused")
        return subprocess.CompletedProcess(args, 0, '{"metadata": {"name": "p"}}', "")

    try:
        wait_gc_watches(kubectl, "ns", WORKLOAD_GC_PROBE, timeout=0.6)
    except AssertionError as exc:
        assert "workload.kueue.x-k8s.io" in str(exc)
    else:
        raise AssertionError("a failed get counted as the probe collected")
    assert len(gets) >= 2 and gets[0][1] == "workload.kueue.x-k8s.io"

    def not_found(*args: str, input: str | None = None, check: bool = True
                  ) -> subprocess.CompletedProcess[str]:
        if args[0] != "get":
            return kubectl(*args, input=input, check=check)
        return subprocess.CompletedProcess(args, 1, "", 'Error from server (NotFound): '
                                           'workloads.kueue.x-k8s.io "p" not found')

    wait_gc_watches(not_found, "ns", WORKLOAD_GC_PROBE, timeout=5)


def _job_pod(name: str, uid: str, **meta: Any) -> dict[str, Any]:
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": uid,
             "controller": True}
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"p-{name}",
                         "ownerReferences": [owner], **meta,
                         "labels": {"batch.kubernetes.io/job-name": "train",
                                    "batch.kubernetes.io/controller-uid": uid}},
            "spec": {"nodeName": "a100-0"}, "status": {"phase": "Running"}}


def test_a_job_being_deleted_is_stopped_by_deleting_its_pods() -> None:
    """A tenant puts a finalizer of its own on its running Job and deletes it (background):
    the Job stays, being deleted, and the garbage collector leaves its pods (their owner is
    still there). The Job controller does nothing for a Job being deleted (Kubernetes v1.36
    ``syncJob`` calls ``manageJob`` only when ``DeletionTimestamp == nil``), so suspending it
    kills no pod: on a preemption (a team reclaiming the quota this one borrowed), an
    eviction or ``maximumExecutionTimeSeconds`` its Workload keeps the quota (its pods
    run) for as long as the tenant likes. The stop deletes the Job's pods itself then; a
    Job not being deleted is left to the Job controller, and another Job's pods and pods
    already going are not touched."""
    running = _job_pod("train-a", "j-1")
    pods = [running, _job_pod("train-b", "j-1", deletionTimestamp="t"),
            _job_pod("other", "j-9")]
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "train", "namespace": "ns", "uid": "j-1",
                        "deletionTimestamp": "2026-12-05T15:00:00Z",
                        "finalizers": ["example.com/keep"],
                        "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
           "spec": {"suspend": False, "parallelism": 2,
                    "template": {"spec": {"containers": [{"name": "c"}]}}},
           "status": {"active": 2}}
    ctx = FakeCtx({JOB_KIND.key: JOBS, POD: PODS}, {POD: pods})
    asyncio.run(JOB_KIND.stop(ctx, job, "Preempted"))  # type: ignore[arg-type]
    assert [w for w in ctx.writes if w[0] == "delete"] == [("delete", "pods", "train-a")]
    ctx = FakeCtx({JOB_KIND.key: JOBS, POD: PODS}, {POD: pods})
    alive = {**job, "metadata": {k: v for k, v in job["metadata"].items()
                                 if k not in ("deletionTimestamp", "finalizers")}}
    asyncio.run(JOB_KIND.stop(ctx, alive, "Preempted"))  # type: ignore[arg-type]
    assert not [w for w in ctx.writes if w[0] == "delete"]

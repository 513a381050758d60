"""A SparkApplication's executors count for its Workload's quota (break26 F4).

Spark 4.0 makes the driver pod the controller of each executor (``ExecutorPodsAllocator``);
spark-operator v2.5.0 labels both with ``sparkoperator.k8s.io/app-name``. A release that
waits on the Pod store alone (the application deleted in the foreground, whose status
spark-operator leaves ``RUNNING``; an orphaned Workload) counted the driver only, so the
Workload was released once the driver was terminal while the executors still ran out the
grace period the tenant set (``spec.executor.terminationGracePeriodSeconds``). The executors
now count through their driver (``framework.pod_of``, ``pods_make_pods``), never through their
labels alone: a tenant's bare pod carrying them holds nothing (the decoy rule of session 26)."""

from __future__ import annotations

import asyncio
from typing import Any

from app.integrations.framework import pod_of
from app.integrations.reconciler import OWNER_NOT_FOUND, PODS_POLL
from app.integrations.sparkapplication.sparkapplication import APP_NAME_LABEL
from app.integrations.sparkapplication.sparkapplication import KIND as SPARK
from app.kube.context import POD, WL
from app.wire.names import JOB_UID_LABEL, PODSET_LABEL
from tests.unit.test_foreground_deletion import (
    GONE,
    _admitted,
    _reconciler,
    _spark,
    _workload_writes,
)
from tests.unit.test_sparkapplication import app

SPARK_GVK = "sparkoperator.k8s.io/sparkapplication"
DRIVER = {"apiVersion": "v1", "kind": "Pod", "name": "pi-driver", "uid": "pod-0"}
EXECUTOR_LABELS = {APP_NAME_LABEL: "pi", "spark-role": "executor",
                   "spark-app-selector": "spark-123",
                   "sparkoperator.k8s.io/launched-by-spark-operator": "true",
                   PODSET_LABEL: "executor"}


def executor(i: int, *, controller: dict[str, str] | None = DRIVER, deleting: bool = False,
             labels: dict[str, str] | None = None) -> dict[str, Any]:
    """Executor ``i`` of application ``pi`` as Spark 4.0 makes it: the driver pod its
    controller (no ``blockOwnerDeletion``), Running on a node."""
    meta: dict[str, Any] = {"name": f"pi-exec-{i}", "namespace": "ns", "uid": f"ex-{i}",
                            "labels": dict(EXECUTOR_LABELS if labels is None else labels)}
    if controller is not None:
        meta["ownerReferences"] = [{**controller, "controller": True}]
    if deleting:
        meta["deletionTimestamp"] = GONE
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"nodeName": "gpu-1", "terminationGracePeriodSeconds": 3600},
            "status": {"phase": "Running"}}


def _driver_terminal(ctx: Any) -> None:
    driver = ctx.store(POD).get("ns/pi-driver")
    driver["status"]["phase"] = "Failed"
    driver["metadata"]["deletionTimestamp"] = GONE


def test_a_foreground_deletion_waits_for_the_executors_of_a_terminal_driver() -> None:
    rec, ctx, name = _spark(suspended=True, wl_deleting=True)
    _driver_terminal(ctx)
    for i in range(2):
        ctx.store(POD).put(executor(i, deleting=True))
    wl = ctx.store(WL).get(f"ns/{name}")
    assert rec.pods_holding(wl, "u-1") == 2
    assert asyncio.run(rec.reconcile_object(SPARK, "ns", "pi")) == PODS_POLL
    assert _workload_writes(ctx) == []  # the executors still run: the quota stays
    for i in range(2):
        ctx.store(POD).remove(f"ns/pi-exec-{i}")
    assert asyncio.run(rec.reconcile_object(SPARK, "ns", "pi")) is None
    assert _workload_writes(ctx) == [("replace", "workloads", name)]  # the finalizer goes


def test_executors_of_a_driver_already_gone_count_while_being_deleted() -> None:
    """The driver removed first (the garbage collector then deletes its executors, which run
    out their grace period): those being deleted count, one not yet deleted does not (a
    reference to a pod no store holds is all it has)."""
    rec, ctx, name = _spark(suspended=True, wl_deleting=True)
    ctx.store(POD).remove("ns/pi-driver")
    ctx.store(POD).put(executor(0, deleting=True))
    ctx.store(POD).put(executor(1))
    wl = ctx.store(WL).get(f"ns/{name}")
    assert rec.pods_holding(wl, "u-1") == 1
    assert asyncio.run(rec.reconcile_object(SPARK, "ns", "pi")) == PODS_POLL
    assert _workload_writes(ctx) == []


def test_pods_carrying_an_executors_labels_count_only_through_the_applications_driver(
        ) -> None:
    rec, ctx, name = _spark(suspended=True, wl_deleting=True)
    _driver_terminal(ctx)
    pods = ctx.store(POD)
    # A tenant's bare pod with every label an executor carries.
    pods.put(executor(0, controller=None))
    # One whose controller is a tenant's own pod, and one made by such a made pod.
    tenant = executor(1, controller=None, labels={"app": "mine"})
    pods.put(tenant)
    pods.put(executor(2, controller={"apiVersion": "v1", "kind": "Pod", "name": "pi-exec-1",
                                     "uid": "ex-1"}))
    pods.put(executor(3, controller={"apiVersion": "v1", "kind": "Pod", "name": "pi-exec-4",
                                     "uid": "ex-4"}))
    pods.put(executor(4))  # the driver's: it counts, so executor 3 is two hops away
    # The driver of another application of the same name (another uid).
    other = executor(5, controller={"apiVersion": "sparkoperator.k8s.io/v1beta2",
                                    "kind": "SparkApplication", "name": "pi", "uid": "u-2"})
    pods.put(other)
    pods.put(executor(6, controller={"apiVersion": "v1", "kind": "Pod", "name": "pi-exec-5",
                                     "uid": "ex-5"}))
    counted = {p["metadata"]["name"] for p in pods.list()
               if pod_of(SPARK, p, "pi", "u-1", ctx=ctx)}  # type: ignore[arg-type]
    assert counted == {"pi-driver", "pi-exec-4"}
    pods.remove("ns/pi-exec-4")
    wl = ctx.store(WL).get(f"ns/{name}")
    assert rec.pods_holding(wl, "u-1") == 0
    assert asyncio.run(rec.reconcile_object(SPARK, "ns", "pi")) is None
    assert _workload_writes(ctx) == [("replace", "workloads", name)]


def _orphaned_spark() -> tuple[Any, Any, str]:
    """``kubectl delete sparkapplication pi --cascade=orphan``: the application and the
    Workload's ownerReference gone, the driver Running without its controller, two executors
    still controlled by it."""
    wl = _admitted(SPARK.workload_object(app()), deleting=False)
    wl["metadata"].pop("ownerReferences", None)
    wl["metadata"]["labels"] = {**(wl["metadata"].get("labels") or {}), JOB_UID_LABEL: "u-1"}
    driver = {"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": "pi-driver", "namespace": "ns", "uid": "pod-0",
                           "labels": {APP_NAME_LABEL: "pi", "spark-role": "driver",
                                      PODSET_LABEL: "driver"}},
              "spec": {"nodeName": "gpu-0"}, "status": {"phase": "Running"}}
    rec, ctx = _reconciler(SPARK, SPARK_GVK,
                           {POD: [driver, executor(0), executor(1)], WL: [wl]})
    return rec, ctx, wl["metadata"]["name"]


def _finished_reason(ctx: Any, name: str) -> str | None:
    for cond in (ctx.store(WL).get(f"ns/{name}").get("status") or {}).get("conditions") or []:
        if cond["type"] == "Finished" and cond["status"] == "True":
            return str(cond.get("reason"))
    return None


def test_an_orphaned_spark_workload_waits_for_the_executors_of_a_finished_driver() -> None:
    rec, ctx, name = _orphaned_spark()
    ctx.store(POD).get("ns/pi-driver")["status"]["phase"] = "Succeeded"
    assert asyncio.run(rec.reconcile_workload("ns", name)) == PODS_POLL
    assert _finished_reason(ctx, name) is None  # the executors still run
    for i in range(2):
        ctx.store(POD).remove(f"ns/pi-exec-{i}")
    assert asyncio.run(rec.reconcile_workload("ns", name)) is None
    assert _finished_reason(ctx, name) == OWNER_NOT_FOUND


def test_an_evicted_orphaned_spark_workload_has_its_driver_and_executors_deleted() -> None:
    rec, ctx, name = _orphaned_spark()
    wl = ctx.store(WL).get(f"ns/{name}")
    wl["status"]["conditions"].append({"type": "Evicted", "status": "True",
                                       "reason": "Preempted", "message": "Preempted"})
    # A pod with an executor's labels made by a tenant's pod, not the driver: not deleted.
    ctx.store(POD).put(executor(8, controller=None, labels={"app": "mine"}))
    ctx.store(POD).put(executor(7, controller={"apiVersion": "v1", "kind": "Pod",
                                               "name": "pi-exec-8", "uid": "ex-8"}))
    assert asyncio.run(rec.reconcile_workload("ns", name)) == PODS_POLL
    assert sorted(w for w in ctx.writes if w[1] == "pods") == [
        ("delete", "pods", "pi-driver"), ("delete", "pods", "pi-exec-0"),
        ("delete", "pods", "pi-exec-1")]


def test_an_evicted_application_being_deleted_keeps_its_workload_while_executors_run() -> None:
    """Deleted in the background (a tenant's finalizer keeps it; its Workload not deleted),
    evicted: spark-operator v2.5.0 deletes the driver of a deleted application
    (``deleteSparkResources``) without writing its status again, and the Workload is deleted
    (``_never_to_start``) once the Pod store shows no pod of it, executors included."""
    rec, ctx, name = _spark(suspended=True, wl_deleting=False)  # stopped already
    ctx.store(SPARK.key).get("ns/pi")["metadata"]["finalizers"] = ["example.com/keep"]
    wl = ctx.store(WL).get(f"ns/{name}")
    wl["status"]["conditions"].append({"type": "Evicted", "status": "True",
                                       "reason": "Preempted", "message": "Preempted"})
    ctx.store(POD).remove("ns/pi-driver")
    ctx.store(POD).put(executor(0, deleting=True))
    assert asyncio.run(rec.reconcile_object(SPARK, "ns", "pi")) == PODS_POLL
    assert _workload_writes(ctx) == []
    ctx.store(POD).remove("ns/pi-exec-0")
    assert asyncio.run(rec.reconcile_object(SPARK, "ns", "pi")) is None
    assert _workload_writes(ctx) == [("delete", "workloads", name)]

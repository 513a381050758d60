"""break26's findings F3 and F4 on the lab (session 27).

F4: a SparkApplication's executors are controlled by its driver pod (Spark 4.0), so a release
that waits on the Pod store alone did not count them. Deleted in the foreground (Argo CD's
default), the application's Workload lost its finalizer once the driver was terminal while
the executors still ran out the grace period the tenant set. On kwok the driver never runs
Spark, so the test makes the executor as Spark would (labels of spark-operator v2.5.0 and
Spark, the driver pod its controller, no ``blockOwnerDeletion``), kept Running while it is
deleted by a finalizer of the test's own and ``lab.pykueue.dev/stops-slowly``.

F3: ``kubectl delete job --cascade=orphan`` left pods no controller stops, and the orphaned
Workload, preempted, waited for them for as long as they ran: the reclaiming queue waited
for good. pykueue now deletes the pods of an evicted orphaned Workload."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.e2e.test_foreground_deletion import all_gone, cq_usage, delete_foreground
from tests.e2e.test_jobset import condition
from tests.e2e.test_kinds_preemption import cohort, events
from tests.e2e.test_quota_follows_pods import job
from tests.e2e.test_sparkapplication import (  # noqa: F401 - the CRDs' and operator's fixtures
    APP_LABEL,
    admitted,
    spark_crd,
    spark_namespace,
    spark_operator,
    sparkapp,
)
from tests.e2e.test_sparkbreak_findings import running_driver
from tests.e2e.test_workload_finalizer import IN_USE
from tests.labfixture import WORKLOAD_GC_PROBE, LabHandle, wait_for, wait_gc_watches

pytestmark = pytest.mark.lab
WL = "workloads.kueue.x-k8s.io"
HOLD = "e2e.pykueue.dev/hold"  # the test's own finalizer on the executor
SLOWLY = "lab.pykueue.dev/stops-slowly"  # kwok keeps such a pod Running while it is deleted


def executor(driver: dict[str, Any], name: str) -> str:
    """An executor pod of the driver's application as Spark 4.0 makes it through
    spark-operator v2.5.0: the operator's ``app-name`` and ``launched-by-spark-operator``
    labels, Spark's ``spark-role``, ``spark-app-selector`` and ``spark-exec-id``, the driver
    pod its controller; bound to the driver's node."""
    meta = driver["metadata"]
    labels = {APP_LABEL: meta["labels"][APP_LABEL], "spark-role": "executor",
              "spark-exec-id": "1",
              "spark-app-selector": meta["labels"].get("spark-app-selector", "spark-e2e"),
              "sparkoperator.k8s.io/launched-by-spark-operator": "true"}
    return json.dumps({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": meta["namespace"], "labels": labels,
                     "annotations": {SLOWLY: "true"}, "finalizers": [HOLD],
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Pod",
                                          "name": meta["name"], "uid": meta["uid"],
                                          "controller": True}]},
        "spec": {"nodeName": driver["spec"]["nodeName"],
                 "tolerations": driver["spec"].get("tolerations") or [],
                 "containers": [{"name": "spark-kubernetes-executor", "image": "spark:4.0.1"}]}})


def pod_or_none(lab: LabHandle, ns: str, name: str) -> dict[str, Any] | None:
    r = lab.kubectl("get", "pod", name, "-n", ns, "-o", "json", check=False)
    return json.loads(r.stdout) if r.returncode == 0 else None


def test_a_spark_applications_executor_holds_its_quota_through_a_foreground_deletion(
        lab: LabHandle, spark_operator: None, pykueue_in_lab: object) -> None:  # noqa: F811
    """Before: the Workload and the application were gone once the driver was, the
    executor still Running on the node. Now they wait for it."""
    with spark_namespace(lab, "sparkex") as (ns, cq):
        wait_gc_watches(lab.kubectl, ns, WORKLOAD_GC_PROBE)
        lab.apply(sparkapp("pi", ns, 1))
        driver = running_driver(lab, ns, "pi")
        wl = wait_for(lambda: admitted(lab, ns, "pi"), 60, "pi admitted")
        assert IN_USE in (wl["metadata"].get("finalizers") or []), wl["metadata"]
        lab.apply(executor(driver, "pi-exec-1"))
        try:
            wait_for(lambda: (pod_or_none(lab, ns, "pi-exec-1") or {}).get(
                "status", {}).get("phase") == "Running", 60, "the executor Running")
            delete_foreground(lab, "sparkapplication", "pi", ns)
            wait_for(lambda: pod_or_none(lab, ns, driver["metadata"]["name"]) is None, 90,
                     "the driver pod gone")
            ex = wait_for(lambda: (p := pod_or_none(lab, ns, "pi-exec-1"))
                          and p["metadata"].get("deletionTimestamp") and p, 60,
                          "the executor being deleted by the garbage collector")
            assert ex["status"].get("phase") == "Running", ex["status"]
            # The executor runs out its grace period: the Workload, and the quota, stay.
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                held = lab.get(WL, wl["metadata"]["name"], "-n", ns)
                assert held["status"].get("admission"), held.get("status")
                assert cq_usage(lab, cq)[1] == 1, cq_usage(lab, cq)
                time.sleep(1)
        finally:
            lab.kubectl("patch", "pod", "pi-exec-1", "-n", ns, "--type=json", "-p",
                        json.dumps([{"op": "remove", "path": "/metadata/finalizers"}]),
                        check=False)
        all_gone(lab, "sparkapplication", "pi", ns, cq)


def test_an_orphaned_jobs_pods_are_deleted_when_its_workload_is_preempted(
        lab: LabHandle, pykueue_in_lab: object) -> None:
    """A's ClusterQueue (4 A100s, may borrow 4) runs Job ``low`` on 6 GPUs; ``low`` is
    deleted with ``--cascade=orphan``; B (4 A100s, reclaims) submits Job ``high`` of 4 GPUs.
    Before: ``low``'s Workload was evicted, its 6 pods ran on (an hour on kwok) and ``high``
    stayed pending. Now pykueue deletes them, ``low``'s Workload is Finished
    (``OwnerNotFound``) and ``high`` runs."""
    with cohort(lab, "orphpre") as (ns_a, ns_b):
        lab.apply(job("low", ns_a, 6))
        wl = wait_for(lambda: next((w for w in lab.get(WL, "-n", ns_a)["items"]
                                    if (c := condition(w, "Admitted"))
                                    and c["status"] == "True"), None), 90, "low admitted")
        name = wl["metadata"]["name"]
        wait_for(lambda: sum(1 for p in lab.get("pods", "-n", ns_a)["items"]
                             if p["status"].get("phase") == "Running") == 6, 90,
                 "low's 6 pods Running")
        wait_gc_watches(lab.kubectl, ns_a, WORKLOAD_GC_PROBE)
        lab.kubectl("delete", "job", "low", "-n", ns_a, "--cascade=orphan")
        wait_for(lambda: not lab.get(WL, name, "-n", ns_a)["metadata"].get("ownerReferences"),
                 60, f"{name} without its owner reference")
        lab.apply(job("high", ns_b, 4))
        wait_for(lambda: sum(1 for p in lab.get("pods", "-n", ns_b)["items"]
                             if p["status"].get("phase") == "Running") == 4, 120,
                 "high's 4 pods Running")
        fin = condition(lab.get(WL, name, "-n", ns_a), "Finished")
        assert fin and fin["status"] == "True" and fin["reason"] == "OwnerNotFound", fin
        assert not [p for p in lab.get("pods", "-n", ns_a)["items"]
                    if p["status"].get("phase") == "Running"
                    and not p["metadata"].get("deletionTimestamp")]
        assert any(e["involvedObject"].get("name") == name
                   for e in events(lab, ns_a, "DeletedPods")), events(lab, ns_a, "DeletedPods")

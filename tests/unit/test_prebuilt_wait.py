"""A MultiKueue worker's job labelled ``kueue.x-k8s.io/prebuilt-workload-name`` whose Workload
is not there yet waits without looking again: the Workload's creation (the Workload informer's
event) queues it, and it adopts the copy then. Before, it was looked at every 5 s until the
copy came (Kueue v0.17.1 retries with its controller's backoff instead:
``ErrPrebuiltWorkloadNotFound``)."""

from __future__ import annotations

import asyncio
from typing import Any

from app.core.multikueue import ORIGIN_LABEL
from app.integrations import default_registry
from app.integrations.batchjob.job import KIND as JOB
from app.integrations.jobset.jobset import JOBSETS
from app.integrations.jobset.jobset import KIND as JOBSET
from app.integrations.reconciler import JobReconciler
from app.kube.client import JOBS, PRIORITY_CLASSES, WORKLOAD_PRIORITY_CLASSES, WORKLOADS
from app.kube.context import PC, WL, WPC
from app.kube.informers import ADDED, MODIFIED
from app.wire.names import PREBUILT_WORKLOAD_LABEL, QUEUE_NAME_LABEL
from tests.unit.fake_ctx import FakeCtx

NS = "team-a"


def _job(name: str, prebuilt: str, *, ns: str = NS, kind: str = "Job",
         api_version: str = "batch/v1") -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "namespace": ns, "uid": f"{name}-uid",
                         "resourceVersion": "1",
                         "labels": {QUEUE_NAME_LABEL: "lq", PREBUILT_WORKLOAD_LABEL: prebuilt}},
            "spec": {"suspend": True, "parallelism": 1, "template": {"spec": {
                "restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}}


def _copy(name: str, *, ns: str = NS) -> dict[str, Any]:
    """The manager's copy of a Workload on the worker: ownerless, with the origin label."""
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": name, "namespace": ns, "uid": f"{name}-uid",
                         "resourceVersion": "1", "labels": {ORIGIN_LABEL: "manager"}},
            "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": 1, "template": {
                "spec": {"containers": [{"name": "c", "image": "x"}]}}}]}}


def _queued(rec: JobReconciler) -> set[str]:
    keys = set()
    while (key := rec.queue.get_nowait()) is not None:
        keys.add(key)
        rec.queue.done(key)
    return keys


def test_a_job_waiting_for_its_prebuilt_workload_is_woken_by_its_creation() -> None:
    ctx = FakeCtx({WL: WORKLOADS, WPC: WORKLOAD_PRIORITY_CLASSES, PC: PRIORITY_CLASSES,
                   JOB.key: JOBS, JOBSET.key: JOBSETS}, {
        JOB.key: [_job("train", "train-copy"), _job("other", "other-copy"),
                  _job("train", "train-copy", ns="team-b")],
        JOBSET.key: [_job("js", "train-copy", kind="JobSet",
                          api_version="jobset.x-k8s.io/v1alpha2")]})
    rec = JobReconciler(ctx, default_registry())  # type: ignore[arg-type]

    async def run() -> None:
        # No Workload of that name: none created, and no look again (before: 5 s).
        assert await rec.reconcile_object(JOB, NS, "train") is None
        assert ctx.created == [] and ctx.writes == []
        assert _queued(rec) == set()
        copy_ = _copy("train-copy")
        ctx.store(WL).put(copy_)
        rec.on_workload(ADDED, None, copy_)
        # The objects of this namespace whose own label names it, of any kind that adopts.
        assert _queued(rec) == {f"wl:{NS}/train-copy", f"{JOB.key}:{NS}/train",
                                f"{JOBSET.key}:{NS}/js"}
        # A change of an ownerless copy wakes them too; an owned Workload is its owner's.
        rec.on_workload(MODIFIED, copy_, copy_)
        assert f"{JOB.key}:{NS}/train" in _queued(rec)
        assert await rec.reconcile_object(JOB, NS, "train") is None
        assert ("replace", "workloads", "train-copy") in ctx.writes  # adopted
        adopted = ctx.store(WL).get(f"{NS}/train-copy")
        assert adopted is not None and adopted["metadata"]["ownerReferences"][0]["name"] \
            == "train"
        _queued(rec)
        rec.on_workload(MODIFIED, copy_, adopted)
        assert _queued(rec) == {f"{JOB.key}:{NS}/train"}

    asyncio.run(run())


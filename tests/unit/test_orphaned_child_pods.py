"""brk28 (H): a pod whose owner between it and a queued object (a JobSet's child Job, an
MPIJob's launcher Job, a Spark driver, a TrainJob's or AppWrapper's JobSet's Job) was deleted
with ``--cascade=orphan`` while the object lives: the garbage collector (one of
``webhook.owner_reference_releasers``) removes its controller reference, the operator makes
the owner again (a new uid) and its replacement a new pod, while the old one, carrying the
object's labels and ``kueue.x-k8s.io/podset`` but no controller, ran on uncounted (``pod_of``
counted a pod without a controller only once the object was gone). Such a stray now counts
for the object (``framework.stray_pod``) and the reconciler deletes it
(``JobReconciler._delete_strays``, woken by ``on_pod``). Nothing a controller takes back, nor
a pod another Workload counts, is deleted. Kueue v0.17.1 counts no pods (the same gap).
Lab: tests/e2e/test_child_job_orphaned.py."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from app.integrations import default_registry
from app.integrations.appwrapper.appwrapper import APPWRAPPERS
from app.integrations.appwrapper.appwrapper import KIND as APPWRAPPER
from app.integrations.framework import KindDefaults, pod_of, stray_pod
from app.integrations.jobset.jobset import JOBSETS
from app.integrations.jobset.jobset import KIND as JOBSET
from app.integrations.kubeflow.kubeflow import MPIJOB, PYTORCHJOB
from app.integrations.ray.ray import RAYCLUSTER
from app.integrations.reconciler import PODS_POLL, JobReconciler, OwnerIndex
from app.integrations.sparkapplication.sparkapplication import KIND as SPARK
from app.integrations.sparkapplication.sparkapplication import SPARKAPPLICATIONS
from app.integrations.trainjob.trainjob import KIND as TRAINJOB
from app.integrations.trainjob.trainjob import TRAINJOBS
from app.kube.client import JOBS, PODS, WORKLOADS
from app.kube.context import CHILD_JOBS, CHILD_JOBSETS, POD, WL
from app.kube.informers import Store
from app.wire.names import PODSET_LABEL
from tests.unit.fake_ctx import Informers

NS = "ns"
MADE = "2026-12-06T10:00:00Z"  # the objects' creation
LATER = "2026-12-06T10:00:05Z"  # their pods'
EARLIER = "2026-12-06T09:59:00Z"


class _Ctx:
    """The stores of every kind these tests use, a client recording pod deletions (by
    ``name/uid``) and a recorder keeping the Events."""

    def __init__(self) -> None:
        self.informers = Informers({
            POD: PODS, WL: WORKLOADS, "job": JOBS, CHILD_JOBS: JOBS, "jobset": JOBSETS,
            CHILD_JOBSETS: JOBSETS, "trainjob": TRAINJOBS, "mpijob": MPIJOB.resource,
            "pytorchjob": PYTORCHJOB.resource, "raycluster": RAYCLUSTER.resource,
            "sparkapplication": SPARKAPPLICATIONS, "appwrapper": APPWRAPPERS})
        self.deleted: list[str] = []
        self.events: list[tuple[str, str, str]] = []
        self.client = self
        self.recorder = self
        self.clock = lambda: 1_000_000.0

    def store(self, key: str) -> Store:
        return self.informers.store(key)

    def wake(self) -> None:
        pass

    async def delete(self, res: Any, name: str, namespace: str = "", **kw: Any) -> None:
        assert res is PODS
        self.deleted.append(f"{name}/{kw.get('uid')}")

    def emit(self, obj: Any, etype: str, reason: str, message: str) -> bool:
        self.events.append((obj["metadata"]["name"], reason, message))
        return True


class _Queue:
    def __init__(self) -> None:
        self.keys: list[str] = []

    def add(self, key: str, **_: Any) -> None:
        self.keys.append(key)


def _reconciler() -> tuple[JobReconciler, _Ctx]:
    ctx = _Ctx()
    rec = JobReconciler.__new__(JobReconciler)
    rec.ctx, rec.registry = ctx, default_registry()  # type: ignore[assignment]
    rec.queue = _Queue()  # type: ignore[assignment]
    rec.owners = OwnerIndex()
    rec.adoption_waits = {}
    return rec, ctx


def _obj(kind: Any, name: str, uid: str, *, deleting: bool = False,
         owner: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": uid,
                            "creationTimestamp": MADE}
    if deleting:
        meta["deletionTimestamp"] = LATER
        meta["finalizers"] = ["orphan"]
    if owner is not None:
        meta["ownerReferences"] = [{**owner, "controller": True}]
    return {"apiVersion": kind.api_version if hasattr(kind, "api_version")
            else kind.resource.api_version, "kind": kind.kind, "metadata": meta}


def _ref(kind: Any, name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": kind.resource.api_version, "kind": kind.kind, "name": name,
            "uid": uid}


def _job(name: str, uid: str, *, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": uid}
    if deleting:
        meta["deletionTimestamp"] = LATER
        meta["finalizers"] = ["orphan"]
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta}


def _pod(name: str, labels: dict[str, str], *, created: str = LATER,
         controller: dict[str, Any] | None = None, podset: str = "workers",
         phase: str = "Running") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"uid-{name}",
                            "creationTimestamp": created,
                            "labels": {**labels, PODSET_LABEL: podset}}
    if controller is not None:
        meta["ownerReferences"] = [{**controller, "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"nodeName": "a100-0"}, "status": {"phase": phase}}


def _one_pod(kind: Any, store: str, name: str, pod: dict[str, Any]
             ) -> tuple[JobReconciler, _Ctx, dict[str, Any]]:
    """A reconciler whose stores hold ``kind``'s object ``name`` (uid ``<name>-uid``, in
    ``store``) and ``pod``."""
    rec, ctx = _reconciler()
    obj = _obj(kind, name, f"{name}-uid")
    ctx.store(store).put(obj)
    ctx.store(POD).put(pod)
    return rec, ctx, obj


def _jobset_pod(name: str = "train-workers-0-0-abcde", *, js_uid: str = "js-uid",
                job_uid: str = "old-job-uid", **kw: Any) -> dict[str, Any]:
    return _pod(name, {"jobset.sigs.k8s.io/jobset-name": "train",
                       "jobset.sigs.k8s.io/jobset-uid": js_uid,
                       "batch.kubernetes.io/job-name": "train-workers-0",
                       "batch.kubernetes.io/controller-uid": job_uid}, **kw)


def _with_jobset(ctx: _Ctx, **kw: Any) -> dict[str, Any]:
    js = _obj(JOBSET, "train", "js-uid", **kw)
    ctx.store("jobset").put(js)
    # The Job made again by the JobSet operator: another uid.
    ctx.store(CHILD_JOBS).put(_job("train-workers-0", "new-job-uid"))
    return js


def test_an_orphaned_child_jobs_running_pod_counts_for_its_jobset_and_is_deleted() -> None:
    """The brk28 reproducer: the JobSet lives, its child Job was made again (another uid),
    the old pod has no controller: it counts for the JobSet and is deleted once, with its
    uid, and one Event on the JobSet says why. On main it counted for nothing."""
    rec, ctx = _reconciler()
    js = _with_jobset(ctx)
    stray = _jobset_pod()
    ctx.store(POD).put(stray)
    ctx.store(POD).put(_jobset_pod("train-workers-0-0-fghij", job_uid="new-job-uid",
                                   controller={**_job("train-workers-0", "new-job-uid"),
                                               "apiVersion": "batch/v1", "kind": "Job",
                                               "name": "train-workers-0",
                                               "uid": "new-job-uid"}))
    assert pod_of(JOBSET, stray, "train", "js-uid", ctx=ctx)  # type: ignore[arg-type]
    assert asyncio.run(rec._delete_strays(JOBSET, js)) is None
    assert ctx.deleted == ["train-workers-0-0-abcde/uid-train-workers-0-0-abcde"]
    assert [(n, r) for n, r, _ in ctx.events] == [("train", "DeletedOrphanedPods")]
    assert "1 pod(s)" in ctx.events[0][2] and "--cascade=orphan" in ctx.events[0][2]


def test_the_pod_event_of_the_garbage_collectors_update_queues_the_jobset() -> None:
    """``on_pod``: the update removing the controller reference wakes the JobSet (and only
    for a pod without a controller that carries the podset label)."""
    rec, ctx = _reconciler()
    _with_jobset(ctx)
    owned = _jobset_pod(controller={"apiVersion": "batch/v1", "kind": "Job",
                                    "name": "train-workers-0", "uid": "old-job-uid"})
    rec.on_pod("MODIFIED", None, owned)
    unlabelled = _jobset_pod()
    del unlabelled["metadata"]["labels"][PODSET_LABEL]
    rec.on_pod("MODIFIED", owned, unlabelled)
    assert rec.queue.keys == []  # type: ignore[attr-defined]
    rec.on_pod("MODIFIED", owned, _jobset_pod())
    assert rec.queue.keys == ["jobset:ns/train"]  # type: ignore[attr-defined]


def test_a_child_job_being_deleted_with_the_orphan_finalizer_adopts_nothing() -> None:
    """The garbage collector removes the references while the ``orphan`` finalizer keeps
    the Job: a Job being deleted adopts no pod, so the pod is a stray at once (the identity
    stores keep ``deletionTimestamp`` for this)."""
    rec, ctx = _reconciler()
    js = _with_jobset(ctx)
    ctx.store(CHILD_JOBS).put(_job("train-workers-0", "old-job-uid", deleting=True))
    ctx.store(POD).put(_jobset_pod())
    assert asyncio.run(rec._delete_strays(JOBSET, js)) is None
    assert len(ctx.deleted) == 1


def test_a_pod_its_job_is_adopting_is_left_and_looked_at_again() -> None:
    """The Job controller's adoption window: the Job the pod's ``controller-uid`` names is
    stored and not being deleted, so it takes the pod back (Kubernetes v1.36
    ``ClaimPods``): not a stray, nothing deleted, the JobSet looked at again shortly."""
    rec, ctx = _reconciler()
    js = _obj(JOBSET, "train", "js-uid")
    ctx.store("jobset").put(js)
    ctx.store(CHILD_JOBS).put(_job("train-workers-0", "old-job-uid"))
    pod = _jobset_pod()
    ctx.store(POD).put(pod)
    assert not pod_of(JOBSET, pod, "train", "js-uid", ctx=ctx)  # type: ignore[arg-type]
    assert asyncio.run(rec._delete_strays(JOBSET, js)) == PODS_POLL
    assert ctx.deleted == [] and ctx.events == []


def test_a_multikueue_workers_jobset_deletes_its_stray_counted_by_the_copy_it_adopted() -> None:
    """On a MultiKueue worker the JobSet adopted the manager's copy (named after the
    manager's object, annotation ``pykueue.dev/adopted-by``): that Workload is its own, so
    the stray it counts is still deleted (no other Workload's)."""
    rec, ctx = _reconciler()
    js = _with_jobset(ctx)
    copy_ = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {
        "name": "jobset-train-manager1", "namespace": NS, "uid": "wl-copy",
        "labels": {"kueue.x-k8s.io/multikueue-origin": "manager",
                   "kueue.x-k8s.io/job-uid": "js-uid"},
        "annotations": {"pykueue.dev/adopted-by": "js-uid"},
        "ownerReferences": [{**_ref(JOBSET, "train", "js-uid"), "controller": True}]},
        "spec": {"podSets": [{"name": "workers", "count": 1}]}}
    ctx.store(WL).put(copy_)
    rec.owners.update(f"{NS}/jobset-train-manager1", rec.registry.owner_of(copy_))
    ctx.store(POD).put(_jobset_pod())
    assert asyncio.run(rec._delete_strays(JOBSET, js)) is None
    assert len(ctx.deleted) == 1


def test_a_jobset_deleted_with_cascade_orphan_leaves_its_pods_to_its_orphaned_workload() -> None:
    """A top-level ``kubectl delete jobset --cascade=orphan``: the JobSet is being deleted
    (its Workload becomes orphaned, ``owner_gone``; break26 F3): no stray, nothing deleted
    here."""
    rec, ctx = _reconciler()
    js = _with_jobset(ctx, deleting=True)
    pod = _jobset_pod()
    ctx.store(POD).put(pod)
    assert not stray_pod(ctx, JOBSET, pod, "train", "js-uid")  # type: ignore[arg-type]
    assert asyncio.run(rec._delete_strays(JOBSET, js)) is None
    assert ctx.deleted == []


def test_a_jobset_created_again_under_the_name_takes_no_pod_of_its_predecessor() -> None:
    """The tenant deleted JobSet ``train`` with ``--cascade=orphan`` and made it again: the
    old pods name the old uid (its orphaned Workload's), so they are not the new one's."""
    rec, ctx = _reconciler()
    js = _obj(JOBSET, "train", "new-js-uid")
    ctx.store("jobset").put(js)
    pod = _jobset_pod()
    ctx.store(POD).put(pod)
    assert not pod_of(JOBSET, pod, "train", "new-js-uid", ctx=ctx)  # type: ignore[arg-type]
    assert asyncio.run(rec._delete_strays(JOBSET, js)) is None
    assert ctx.deleted == []


def _mpijob_pod(name: str, role: str, **kw: Any) -> dict[str, Any]:
    return _pod(name, {"training.kubeflow.org/job-name": "pi",
                       "training.kubeflow.org/job-role": role,
                       "training.kubeflow.org/operator-name": "mpi-operator",
                       "batch.kubernetes.io/job-name": "pi-launcher",
                       "batch.kubernetes.io/controller-uid": "old-launcher-uid"}, **kw)


def test_an_mpijobs_orphaned_launcher_pod_is_a_stray_but_not_a_predecessors() -> None:
    """mpi-operator v0.8.0 makes ``<name>-launcher`` again once it is gone: the old launcher
    pod is a stray. One created before this MPIJob is a predecessor's (the MPIJob made
    again under the name after an orphaning delete): not this one's."""
    rec, ctx = _reconciler()
    mpi = _obj(MPIJOB, "pi", "mpi-uid")
    ctx.store("mpijob").put(mpi)
    ctx.store(CHILD_JOBS).put(_job("pi-launcher", "new-launcher-uid"))
    stray = _mpijob_pod("pi-launcher-abcde", "launcher", podset="launcher")
    old = _mpijob_pod("pi-launcher-zzzzz", "launcher", podset="launcher", created=EARLIER)
    for p in (stray, old):
        ctx.store(POD).put(p)
    assert stray_pod(ctx, MPIJOB, stray, "pi", "mpi-uid")  # type: ignore[arg-type]
    assert not stray_pod(ctx, MPIJOB, old, "pi", "mpi-uid")  # type: ignore[arg-type]
    assert asyncio.run(rec._delete_strays(MPIJOB, mpi)) is None
    assert ctx.deleted == ["pi-launcher-abcde/uid-pi-launcher-abcde"]



def test_a_queued_plain_pod_labelled_as_a_stray_is_its_own_workloads() -> None:
    """A tenant's queued plain Pod carrying a living SparkApplication's executor labels and
    a podset label, no controller: its own Workload (owned by the Pod) counts it, so it is
    not deleted as the application's stray (``_others_pods``)."""
    rec, ctx, app = _one_pod(SPARK, "sparkapplication", "pi", _pod(
        "decoy", {"sparkoperator.k8s.io/app-name": "pi", "spark-role": "executor"},
        podset="main"))
    ctx.store(WL).put({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                       "metadata": {"name": "pod-decoy-1234", "namespace": NS, "uid": "wl",
                                    "ownerReferences": [{
                                        "apiVersion": "v1", "kind": "Pod", "name": "decoy",
                                        "uid": "uid-decoy", "controller": True}]},
                       "spec": {"podSets": [{"name": "main", "count": 1}]}})
    assert asyncio.run(rec._delete_strays(SPARK, app)) is None
    assert ctx.deleted == []


def test_an_mpijobs_worker_and_a_training_operator_jobs_pod_are_not_strays() -> None:
    """Only the launcher runs through a Job mpi-operator makes again; training-operator
    v1.9.3 adopts the pods its selector takes while the job lives (``ClaimPods``)."""
    _, ctx = _reconciler()
    ctx.store("mpijob").put(_obj(MPIJOB, "pi", "mpi-uid"))
    worker = _mpijob_pod("pi-worker-0", "worker", podset="worker")
    assert not stray_pod(ctx, MPIJOB, worker, "pi", "mpi-uid")  # type: ignore[arg-type]
    rec, ctx = _reconciler()
    pt = _obj(PYTORCHJOB, "pi", "pt-uid")
    ctx.store("pytorchjob").put(pt)
    pod = _pod("pi-worker-0", {"training.kubeflow.org/job-name": "pi",
                               "training.kubeflow.org/operator-name": "pytorchjob-controller",
                               "training.kubeflow.org/replica-type": "worker"})
    ctx.store(POD).put(pod)
    assert not stray_pod(ctx, PYTORCHJOB, pod, "pi", "pt-uid")  # type: ignore[arg-type]
    assert asyncio.run(rec._delete_strays(PYTORCHJOB, pt)) is None
    assert ctx.deleted == []


def _over_a_jobset(kind: Any, store: str, name: str, uid: str
                   ) -> tuple[JobReconciler, _Ctx, dict[str, Any]]:
    """``kind``'s object ``name`` controlling JobSet ``train`` (uid ``js-uid``), whose Job
    ``train-workers-0`` was made again (``new-job-uid``)."""
    rec, ctx = _reconciler()
    obj = _obj(kind, name, uid)
    ctx.store(store).put(obj)
    ctx.store(CHILD_JOBSETS).put(_obj(JOBSET, "train", "js-uid", owner=_ref(kind, name, uid)))
    ctx.store(CHILD_JOBS).put(_job("train-workers-0", "new-job-uid"))
    return rec, ctx, obj


def test_a_trainjobs_jobset_child_jobs_orphaned_pod_is_its_stray() -> None:
    """TrainJob -> JobSet (the trainer's, controlled by it) -> Job -> pod: the Job deleted
    with ``--cascade=orphan`` is made again by JobSet v0.11.1. A pod of another JobSet of
    the name (another uid) is not the TrainJob's."""
    rec, ctx, tj = _over_a_jobset(TRAINJOB, "trainjob", "train", "tj-uid")
    stray, other = _jobset_pod(), _jobset_pod("train-workers-0-0-other", js_uid="other-js")
    for p in (stray, other):
        ctx.store(POD).put(p)
    assert pod_of(TRAINJOB, stray, "train", "tj-uid", ctx=ctx)  # type: ignore[arg-type]
    assert not pod_of(TRAINJOB, other, "train", "tj-uid", ctx=ctx)  # type: ignore[arg-type]
    assert asyncio.run(rec._delete_strays(TRAINJOB, tj)) is None
    assert ctx.deleted == ["train-workers-0-0-abcde/uid-train-workers-0-0-abcde"]


def test_an_appwrappers_jobset_child_jobs_orphaned_pod_is_its_stray_a_wrapped_jobs_not() -> None:
    """An AppWrapper-wrapped JobSet makes its orphaned Job again while appwrapper v1.2.0,
    its component still there, runs on: a stray. A directly wrapped Job deleted with
    ``--cascade=orphan`` is a missing component: appwrapper fails the AppWrapper and keeps
    ``ResourcesDeployed`` (its status counts) until no pod with its label is left, so that
    pod is its operator's, not deleted here."""
    rec, ctx, aw = _over_a_jobset(APPWRAPPER, "appwrapper", "aw", "aw-uid")
    in_jobset = _jobset_pod()
    in_jobset["metadata"]["labels"]["workload.codeflare.dev/appwrapper"] = "aw"
    wrapped_job = _pod("wrapped-abcde", {"workload.codeflare.dev/appwrapper": "aw",
                                         "batch.kubernetes.io/job-name": "wrapped",
                                         "batch.kubernetes.io/controller-uid": "gone-uid"})
    for p in (in_jobset, wrapped_job):
        ctx.store(POD).put(p)
    assert pod_of(APPWRAPPER, in_jobset, "aw", "aw-uid", ctx=ctx)  # type: ignore[arg-type]
    assert not stray_pod(ctx, APPWRAPPER, wrapped_job, "aw", "aw-uid")  # type: ignore[arg-type]
    assert asyncio.run(rec._delete_strays(APPWRAPPER, aw)) is None
    assert ctx.deleted == ["train-workers-0-0-abcde/uid-train-workers-0-0-abcde"]


def test_a_spark_drivers_orphaned_executors_are_strays_of_the_living_application() -> None:
    """brk27 M3's "Left": ``kubectl delete pod <driver> --cascade=orphan`` frees the
    executors (the garbage collector removes the driver's reference) while the
    SparkApplication lives: they are its strays and are deleted. A driver-role pod without
    a controller is not (its controller is the application, orphaned only with it)."""
    rec, ctx = _reconciler()
    app = _obj(SPARK, "pi", "app-uid")
    ctx.store("sparkapplication").put(app)
    labels = {"sparkoperator.k8s.io/app-name": "pi", "spark-app-selector": "spark-123"}
    execs = [_pod(f"pi-exec-{i}", {**labels, "spark-role": "executor"}, podset="executor")
             for i in (1, 2)]
    driver = _pod("pi-driver", {**labels, "spark-role": "driver"}, podset="driver")
    for p in (*execs, driver):
        ctx.store(POD).put(p)
    assert all(pod_of(SPARK, p, "pi", "app-uid", ctx=ctx) for p in execs)  # type: ignore[arg-type]
    assert not stray_pod(ctx, SPARK, driver, "pi", "app-uid")  # type: ignore[arg-type]
    assert asyncio.run(rec._delete_strays(SPARK, app)) is None
    assert sorted(ctx.deleted) == ["pi-exec-1/uid-pi-exec-1", "pi-exec-2/uid-pi-exec-2"]
    assert "2 pod(s)" in ctx.events[0][2]


def test_a_ray_pod_without_a_controller_is_kuberays() -> None:
    """KubeRay v1.6.0 selects a cluster's pods by ``ray.io/cluster`` alone (it counts and
    deletes them whatever their owner): never a stray."""
    pod = _pod("rc-head-x", {"ray.io/cluster": "rc", "ray.io/node-type": "head"},
               podset="head")
    rec, ctx, rc = _one_pod(RAYCLUSTER, "raycluster", "rc", pod)
    assert not stray_pod(ctx, RAYCLUSTER, pod, "rc", "rc-uid")  # type: ignore[arg-type]
    assert asyncio.run(rec._delete_strays(RAYCLUSTER, rc)) is None
    assert ctx.deleted == []


def test_only_kinds_whose_operator_makes_the_owner_again_leave_strays() -> None:
    """The kinds that may say a pod is a stray (``leaves_orphans`` overridden): the plain
    Pod, pod group (Deployment, StatefulSet, LeaderWorkerSet pods), batch Job and Ray kinds
    keep the default (never); a pod of theirs without a controller is never deleted."""
    overriding = {k.key for k in default_registry().kinds()
                  if type(k).leaves_orphans is not KindDefaults.leaves_orphans}
    assert overriding == {"jobset", "trainjob", "appwrapper", "sparkapplication",
                          "pytorchjob", "tfjob", "xgboostjob", "paddlejob", "jaxjob",
                          "mpijob"}
    _, ctx = _reconciler()
    for kind in default_registry().kinds():
        if kind.key in ("mpijob", "jobset", "trainjob", "appwrapper", "sparkapplication"):
            continue
        pod = _pod("p", {"app": "x"})
        assert not kind.leaves_orphans(ctx, pod, "x", "u")  # type: ignore[attr-defined]


@pytest.mark.parametrize("change", ["terminal", "being deleted long", "another controller"])
def test_a_pod_that_holds_nothing_or_has_a_controller_is_no_stray(change: str) -> None:
    """A Succeeded pod holds no quota (nothing to delete), one being deleted with a grace
    period beyond its Workload's counts for nothing (``killed_in_grace``), and one with a
    controller is that controller's."""
    rec, ctx = _reconciler()
    js = _with_jobset(ctx)
    pod = _jobset_pod()
    if change == "terminal":
        pod["status"]["phase"] = "Succeeded"
    elif change == "being deleted long":
        pod["metadata"]["deletionTimestamp"] = LATER
        pod["metadata"]["deletionGracePeriodSeconds"] = 10**8
    else:
        pod["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap",
                                               "name": "x", "uid": "cm", "controller": True}]
    ctx.store(POD).put(pod)
    if change != "terminal":
        assert not pod_of(JOBSET, copy.deepcopy(pod), "train", "js-uid",  # type: ignore[arg-type]
                          ctx=ctx)
    assert asyncio.run(rec._delete_strays(JOBSET, js)) is None
    assert ctx.deleted == []

"""break24: a queued job of a kind whose operator ignores an object being deleted
(training-operator v1.9.3, mpi-operator v0.8.0, KubeRay v1.6.0, JobSet v0.11.1: each returns at
once for an object with a ``deletionTimestamp``), kept by a tenant's own finalizer, is
preempted. Suspending it kills no pod and its status is never written again, so before, its
pods ran on and its evicted Workload kept the quota for good (status ``active`` stale): a
tenant's way to make a job unpreemptible. Now the pods it controls are deleted
(``framework.delete_own_pods``), its pods are counted from the Pod store alone, and the
children its operator no longer stops (a JobSet's Jobs, a RayJob's RayCluster) are stopped
by the child rule. tests/e2e/test_break24_findings.py shows it on the lab."""

from __future__ import annotations

import asyncio
from typing import Any

from app.integrations import default_registry
from app.integrations.appwrapper.appwrapper import KIND as APPWRAPPER
from app.integrations.batchjob.job import KIND as JOB_KIND
from app.integrations.framework import own_running_pods, pods_of, pods_once_ignored
from app.integrations.jobset.jobset import JOBSETS
from app.integrations.jobset.jobset import KIND as JOBSET
from app.integrations.kubeflow.kubeflow import MPIJOB, PYTORCHJOB, TFJOB
from app.integrations.ray.ray import ORIGIN_KIND_LABEL, ORIGIN_NAME_LABEL, RAYCLUSTER, RAYJOB
from app.integrations.reconciler import JobReconciler
from app.integrations.trainjob.trainjob import KIND as TRAINJOB
from app.kube.client import JOBS, NAMESPACES, PODS, RESOURCE_FLAVORS, WORKLOADS
from app.kube.context import CHILD_JOBS, CHILD_JOBSETS, JOB, NS, PC, POD, RF, WL, WPC
from app.kube.informers import Store
from tests.unit.fake_ctx import FakeCtx
from tests.unit.test_ray import group, raycluster, rayjob

UID = "pt-1"
DELETING = "2026-12-06T01:00:00Z"
NAME_LABEL = "training.kubeflow.org/job-name"
OPERATOR_LABEL = "training.kubeflow.org/operator-name"


def _pod(name: str, ref: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    ref = ref or {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "train",
                  "uid": UID, "controller": True}
    operator = "mpi-operator" if ref["kind"] == "MPIJob" else f"{ref['kind'].lower()}-controller"
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"p-{name}", **meta,
                         "labels": {NAME_LABEL: "train", OPERATOR_LABEL: operator},
                         "ownerReferences": [ref]},
            "spec": {"nodeName": "a100-0"}, "status": {"phase": "Running"}}


def _replica(n: int) -> dict[str, Any]:
    return {"replicas": n, "restartPolicy": "OnFailure", "template": {"spec": {
        "containers": [{"name": "pytorch", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}}}


def _pytorchjob(*, deleting: bool) -> dict[str, Any]:
    """Suspended by pykueue's stop (its templates restored, no start record); the operator's
    last status says 2 pods active (it writes none for a job being deleted)."""
    meta: dict[str, Any] = {"name": "train", "namespace": "ns", "uid": UID,
                            "resourceVersion": "7",
                            "labels": {"kueue.x-k8s.io/queue-name": "lq"}}
    if deleting:
        meta.update(deletionTimestamp=DELETING, finalizers=["example.com/keep"])
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta,
            "spec": {"runPolicy": {"suspend": True},
                     "pytorchReplicaSpecs": {"Master": _replica(1), "Worker": _replica(1)}},
            "status": {"replicaStatuses": {"Master": {"active": 1}, "Worker": {"active": 1}}}}


def _workload(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj``'s Workload, preempted (Evicted) and still holding its quota."""
    wl = PYTORCHJOB.workload_object(obj)
    wl["metadata"].update(namespace="ns", uid="w-1")
    wl["status"] = {"admission": {"clusterQueue": "cq", "podSetAssignments": [
        {"name": ps["name"], "count": ps["count"], "flavors": {"nvidia.com/gpu": "a100"}}
        for ps in wl["spec"]["podSets"]]}, "conditions": [
        {"type": t, "status": "True", "reason": r, "message": ""}
        for t, r in (("QuotaReserved", "QuotaReserved"), ("Admitted", "Admitted"),
                     ("Evicted", "Preempted"))]}
    return wl


def _look(obj: dict[str, Any], pods: list[dict[str, Any]],
          more: dict[str, tuple[Any, list[dict[str, Any]]]] | None = None
          ) -> tuple[FakeCtx, float | None]:
    """One reconcile of the PyTorchJob ``obj`` with its Workload (``_workload``) and
    ``pods``; ``more``: other stores (key: (resource, objects))."""
    more = more or {}
    ctx = FakeCtx({WL: WORKLOADS, WPC: WORKLOADS, PC: WORKLOADS, PYTORCHJOB.key:
                   PYTORCHJOB.resource, POD: PODS, NS: NAMESPACES, RF: RESOURCE_FLAVORS,
                   **{k: r for k, (r, _) in more.items()}},
                  {POD: pods, PYTORCHJOB.key: [obj], WL: [_workload(obj)],
                   **{k: objs for k, (_, objs) in more.items()}})
    ctx.clock = lambda: 1e9  # type: ignore[attr-defined]
    rec = JobReconciler.__new__(JobReconciler)
    rec.ctx, rec.registry = ctx, default_registry()  # type: ignore[assignment]
    rec.queue = type("Q", (), {"add": staticmethod(lambda *_, **__: None)})()  # type: ignore[assignment]
    return ctx, asyncio.run(rec.reconcile_object(PYTORCHJOB, "ns", "train"))


def test_a_preempted_pytorchjob_being_deleted_has_its_own_running_pods_deleted() -> None:
    """Its two running pods are deleted (the training-operator ignores it); one already
    going, and a pod of its name label another object controls (a launcher's Job: the child
    rule's), are left; the Workload keeps its quota meanwhile. Not being deleted, the pods
    are the operator's to stop: nothing written."""
    launcher = _pod("train-launcher", {"apiVersion": "batch/v1", "kind": "Job",
                                       "name": "train-launcher", "uid": "j-9",
                                       "controller": True})
    pods = [_pod("train-master-0"), _pod("train-worker-0"),
            _pod("train-worker-1", deletionTimestamp=DELETING), launcher]
    ctx, again = _look(_pytorchjob(deleting=True), pods)
    assert sorted(ctx.writes) == [("delete", "pods", "train-master-0"),
                                  ("delete", "pods", "train-worker-0")]
    assert again is not None
    ctx, _ = _look(_pytorchjob(deleting=False), pods)
    assert not [w for w in ctx.writes if w[1] == "pods"], ctx.writes


def test_once_its_pods_are_gone_its_workload_goes_whatever_its_stale_status_says() -> None:
    """Its status still says 2 active (never written again): the Pod store is the count, so
    once no pod of it holds resources the Workload is deleted (the quota returns). While one
    still does (being deleted), it waits."""
    ctx, again = _look(_pytorchjob(deleting=True), [])
    assert ctx.writes == [("delete", "workloads",
                           PYTORCHJOB.workload_name(_pytorchjob(deleting=True)))]
    assert again is None
    ctx, again = _look(_pytorchjob(deleting=True),
                       [_pod("train-master-0", deletionTimestamp=DELETING)])
    assert ctx.writes == [] and again is not None


def _jobset(*, deleting: bool) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "js", "namespace": "ns", "uid": "js-1",
                            "labels": {"kueue.x-k8s.io/queue-name": "lq"}}
    if deleting:
        meta.update(deletionTimestamp=DELETING, finalizers=["example.com/keep"])
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta,
            "spec": {"suspend": True, "replicatedJobs": [{"name": "w", "replicas": 1,
                                                          "template": {"spec": {
                                                              "parallelism": 1, "template": {
                                                                  "spec": {"containers": [
                                                                      {"name": "c"}]}}}}}]}}


def test_the_running_child_job_of_a_suspended_jobset_being_deleted_is_stopped() -> None:
    """JobSet v0.11.1 does nothing for a JobSet being deleted, so suspending it does not
    suspend its child Jobs: the child rule does, though its Workload still says Admitted
    (preempted, its quota not released yet). A JobSet not being deleted: its operator's."""
    child = {"apiVersion": "batch/v1", "kind": "Job",
             "metadata": {"name": "js-w-0", "namespace": "ns", "uid": "c-1", "ownerReferences": [
                 {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "js",
                  "uid": "js-1", "controller": True}]},
             "spec": {"suspend": False, "parallelism": 1, "template": {"spec": {
                 "containers": [{"name": "c"}]}}}}
    for deleting, stopped in ((True, True), (False, False)):
        js = _jobset(deleting=deleting)
        wl = JOBSET.workload_object(js)
        wl["metadata"].update(namespace="ns", uid="w-2")
        wl["status"] = {"conditions": [{"type": t, "status": "True", "reason": t, "message": ""}
                                       for t in ("QuotaReserved", "Admitted", "Evicted")]}
        ctx = FakeCtx({WL: WORKLOADS, JOBSET.key: JOBSET.resource, JOB_KIND.key: JOBS},
                      {WL: [wl], JOBSET.key: [js], JOB_KIND.key: [child]})
        rec = JobReconciler.__new__(JobReconciler)
        rec.ctx, rec.registry = ctx, default_registry()  # type: ignore[assignment]
        asyncio.run(rec._child(JOB_KIND, child, JOBSET, js))
        assert (("replace", "jobs", "js-w-0") in ctx.writes) is stopped, (deleting, ctx.writes)


def test_pods_a_tenant_orphaned_or_gave_another_controller_are_deleted_and_counted() -> None:
    """The pod webhook lets a tenant remove a pod's controller ownerReference, then give the
    pod (now without one) any other: an operator ignoring the job being deleted adopts
    neither back, and ``pods_of`` (which wants the job or a batch Job as controller) no
    longer counts them, so the Workload would go while they run. They are deleted and
    counted; a pod of another PyTorchJob of that name (another uid) is neither."""
    orphan = _pod("train-master-0")
    orphan["metadata"]["ownerReferences"] = []
    moved = _pod("train-worker-0", {"apiVersion": "v1", "kind": "ConfigMap", "name": "mine",
                                    "uid": "cm-1", "controller": True})
    moved["metadata"]["labels"]["kueue.x-k8s.io/podset"] = "worker"
    other = _pod("train-worker-9", {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                                    "name": "train", "uid": "pt-old", "controller": True})
    ctx, again = _look(_pytorchjob(deleting=True), [orphan, moved, other])
    assert sorted(ctx.writes) == [("delete", "pods", "train-master-0"),
                                  ("delete", "pods", "train-worker-0")]
    assert again is not None
    going = [{**p, "metadata": {**p["metadata"], "deletionTimestamp": DELETING}}
             for p in (orphan, moved)]
    ctx, again = _look(_pytorchjob(deleting=True), [*going, other])
    assert ctx.writes == [] and again is not None  # the Workload waits for them



def test_pods_stamped_out_after_the_deletion_with_the_jobs_labels_hold_none_of_its_quota(
        ) -> None:
    """break26: a tenant's ReplicaSet (or a bare pod) making pods with the preempted
    PyTorchJob's name and podset labels after the job's deletion: the training-operator
    makes no pod for a job it ignores, so they are not the job's. Before, each was counted
    and deleted and the next one made at once, and the evicted Workload kept its quota for
    good. The Workload goes; nothing is deleted. A pod moved off the job before the
    deletion (created earlier) still counts."""
    after = "2026-12-06T01:00:05Z"
    stamped = _pod("decoy-1", {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                               "name": "decoy-rs", "uid": "rs-1", "controller": True},
                   creationTimestamp=after)
    stamped["metadata"]["labels"]["kueue.x-k8s.io/podset"] = "master"
    bare = _pod("bare-1", creationTimestamp=after)
    bare["metadata"]["ownerReferences"] = []
    obj = _pytorchjob(deleting=True)
    ctx, again = _look(obj, [stamped, bare])
    assert not [w for w in ctx.writes if w[1] == "pods"], ctx.writes
    assert ("delete", "workloads", PYTORCHJOB.workload_name(obj)) in ctx.writes \
        or ("replace", "workloads", PYTORCHJOB.workload_name(obj)) in ctx.writes, ctx.writes
    moved = _pod("train-worker-0", {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                    "name": "decoy-rs", "uid": "rs-1", "controller": True},
                 creationTimestamp="2026-12-06T00:59:00Z")
    moved["metadata"]["labels"]["kueue.x-k8s.io/podset"] = "worker"
    ctx, again = _look(_pytorchjob(deleting=True), [moved, stamped])
    assert ctx.writes == [("delete", "pods", "train-worker-0")] and again is not None


# review25: a batch Job is a Kubeflow job's (or a RayCluster's) only when its operator made it.

def _batch_job(name: str, uid: str, controller: dict[str, Any] | None = None,
               **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": name, "namespace": "ns", "uid": uid, **meta,
        "ownerReferences": [{**controller, "controller": True}] if controller else []},
        "spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}}


def _job_ref(job: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"],
            "uid": job["metadata"]["uid"], "controller": True}


def _stores(*jobs: dict[str, Any], **kinds: list[dict[str, Any]]) -> FakeCtx:
    """A context whose unlabelled batch Job store holds ``jobs`` and whose store of each
    kind key in ``kinds`` holds its objects."""
    reg = default_registry()
    return FakeCtx({CHILD_JOBS: JOBS, JOB: JOBS, POD: PODS,
                    **{k: reg.get(k).resource for k in kinds}},  # type: ignore[union-attr]
                   {CHILD_JOBS: list(jobs), **kinds})


def test_a_tenants_batch_job_with_a_pytorchjobs_name_label_holds_none_of_its_quota() -> None:
    """A tenant's unqueued batch Job whose pods carry ``training.kubeflow.org/job-name:
    train``: the preempted PyTorchJob ``train`` (not being deleted, its operator's status
    says no pod) gives its quota back at once; before, the Job's pods held it for as long as
    they ran."""
    holder = _batch_job("holder", "h-1")
    pod = _pod("holder-x", _job_ref(holder))
    obj = _pytorchjob(deleting=False)
    obj["status"] = {}
    ctx, again = _look(obj, [pod], {CHILD_JOBS: (JOBS, [holder])})
    assert ctx.writes == [("replace", "workloads", PYTORCHJOB.workload_name(obj))]
    assert again is None


def test_a_batch_jobs_pods_are_no_rayclusters_and_no_pytorchjobs() -> None:
    """Whatever its name label names, and whether or not any store holds the Job (a Job can
    keep out of both batch Job stores with an empty queue-name label): KubeRay and the
    training-operator run their pods themselves."""
    holder = _batch_job("holder", "h-1")
    rc = {"metadata": {"name": "rc", "namespace": "ns", "uid": "rc-1"}}
    ray_pod = {"metadata": {"name": "h", "namespace": "ns", "uid": "p-h",
                            "labels": {"ray.io/cluster": "rc"},
                            "ownerReferences": [_job_ref(holder)]},
               "status": {"phase": "Running"}}
    torch_pod = _pod("holder-y", _job_ref(holder))
    for ctx in (_stores(holder), _stores(), None):
        assert pods_of(RAYCLUSTER, [ray_pod], rc, ctx=ctx) == []  # type: ignore[arg-type]
        assert pods_of(PYTORCHJOB, [torch_pod], _pytorchjob(deleting=False),
                       ctx=ctx) == []  # type: ignore[arg-type]


def _mpijob(*, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "train", "namespace": "ns", "uid": "mpi-1",
                            "labels": {"kueue.x-k8s.io/queue-name": "lq"}}
    if deleting:
        meta.update(deletionTimestamp=DELETING, finalizers=["example.com/keep"])
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": meta,
            "spec": {"runPolicy": {"suspend": True}, "mpiReplicaSpecs": {
                "Launcher": _replica(1), "Worker": _replica(1)}}}


MPI_REF = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "train",
           "uid": "mpi-1"}


def _launcher_pod(job: dict[str, Any], role: str = "launcher") -> dict[str, Any]:
    pod = _pod("train-launcher-abc", _job_ref(job))
    pod["metadata"]["labels"].update({"training.kubeflow.org/job-role": role,
                                      "kueue.x-k8s.io/podset": "launcher"})
    return pod


def test_an_mpijobs_launcher_pod_is_still_its_own() -> None:
    """mpi-operator v0.8.0 runs the launcher as the batch Job ``<name>-launcher`` controlled
    by the MPIJob, its pods labelled ``job-role: launcher``: it counts (and, the MPIJob being
    deleted, is left to the child rule, not deleted). A Job of that name another object
    controls, one of another name, or a pod without the role: not. A Job no store holds is
    gone (every batch Job is stored while the MPIJob kind is served): its launcher pod counts
    until the collector has deleted it."""
    launcher = _batch_job("train-launcher", "l-1", MPI_REF)
    pod = _launcher_pod(launcher)
    ctx = _stores(launcher)
    assert pods_of(MPIJOB, [pod], _mpijob(), ctx=ctx) == [pod]  # type: ignore[arg-type]
    deleting = _mpijob(deleting=True)
    assert pods_once_ignored(MPIJOB, [pod], deleting, ctx=ctx) == [pod]  # type: ignore[arg-type]
    assert own_running_pods(MPIJOB, [pod], deleting, ctx=ctx) == []  # type: ignore[arg-type]
    forged = _batch_job("train-launcher", "l-2", {**MPI_REF, "uid": "mpi-old"})
    renamed = _batch_job("holder", "l-3", MPI_REF)
    for job, p in ((forged, _launcher_pod(forged)), (renamed, _launcher_pod(renamed)),
                   (launcher, _launcher_pod(launcher, role="worker"))):
        assert pods_of(MPIJOB, [p], _mpijob(), ctx=_stores(job)) == []  # type: ignore[arg-type]
    assert pods_of(MPIJOB, [pod], _mpijob(), ctx=_stores()) == [pod]  # type: ignore[arg-type]


def _tfjob() -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {
        "name": "train", "namespace": "ns", "uid": "tf-1",
        "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
        "spec": {"runPolicy": {"suspend": False}, "tfReplicaSpecs": {"Worker": _replica(1)}}}


def test_a_pytorchjob_being_deleted_leaves_the_pods_of_the_tfjob_and_mpijob_of_its_name() -> None:
    """Every Kubeflow kind labels its pods ``training.kubeflow.org/job-name``: the running,
    admitted TFJob ``train`` and MPIJob ``train`` (its launcher too) beside the preempted
    PyTorchJob ``train`` held being deleted by a finalizer keep their pods, which hold none
    of the PyTorchJob's quota; its Workload goes (before, their pods were deleted on every
    pass)."""
    tf_pod = _pod("train-worker-0-tf", {"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
                                        "name": "train", "uid": "tf-1", "controller": True})
    tf_pod["metadata"]["labels"]["kueue.x-k8s.io/podset"] = "worker"
    mpi_pod = _pod("train-worker-0", {**MPI_REF, "controller": True})
    mpi_pod["metadata"]["labels"]["kueue.x-k8s.io/podset"] = "worker"
    launcher = _batch_job("train-launcher", "l-1", MPI_REF)
    obj = _pytorchjob(deleting=True)
    ctx, again = _look(obj, [tf_pod, mpi_pod, _launcher_pod(launcher)], {
        TFJOB.key: (TFJOB.resource, [_tfjob()]), MPIJOB.key: (MPIJOB.resource, [_mpijob()]),
        CHILD_JOBS: (JOBS, [launcher])})
    assert ctx.writes == [("delete", "workloads", PYTORCHJOB.workload_name(obj))]
    assert again is None


def test_pods_a_tenant_gave_to_a_batch_job_of_its_own_are_deleted_and_counted() -> None:
    """break24 again through a batch Job: the tenant moves the pods of its PyTorchJob being
    deleted to a batch Job of its own that a finalizer keeps being deleted (the Job
    controller then neither deletes nor releases them), or to one no batch Job store holds
    (labelled ``kueue.x-k8s.io/queue-name: ""``). They are deleted and hold the quota until
    they are gone; before, they were counted and never deleted, so the evicted Workload kept
    the quota for good."""
    anchor = _batch_job("anchor", "a-1", deletionTimestamp=DELETING,
                        finalizers=["example.com/keep"])
    moved = _pod("train-worker-0", _job_ref(anchor))
    moved["metadata"]["labels"]["kueue.x-k8s.io/podset"] = "worker"
    for jobs in ([anchor], []):
        ctx, again = _look(_pytorchjob(deleting=True), [moved], {CHILD_JOBS: (JOBS, jobs)})
        assert ctx.writes == [("delete", "pods", "train-worker-0")], jobs
        assert again is not None


def test_a_trainjobs_and_an_appwrappers_pods_run_by_their_jobs_are_theirs_alone() -> None:
    """The trainer's JobSet (named as the TrainJob, controlled by it) controls the Jobs that
    run a TrainJob's pods; an AppWrapper controls the Job it wraps. A Job of the same pod
    labels that neither made is not theirs."""
    tj = {"metadata": {"name": "tj", "namespace": "ns", "uid": "tj-1"}}
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {
        "name": "tj", "namespace": "ns", "uid": "js-1", "ownerReferences": [
            {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "tj",
             "uid": "tj-1", "controller": True}]}}
    node = _batch_job("tj-node-0", "j-1", {"apiVersion": "jobset.x-k8s.io/v1alpha2",
                                           "kind": "JobSet", "name": "tj", "uid": "js-1"})
    holder = _batch_job("holder", "h-1")
    label = {"jobset.sigs.k8s.io/jobset-name": "tj"}
    mine, forged = ({"metadata": {"name": f"p-{j['metadata']['name']}", "namespace": "ns",
                                  "labels": label, "ownerReferences": [_job_ref(j)]},
                     "status": {"phase": "Running"}} for j in (node, holder))
    ctx = FakeCtx({CHILD_JOBS: JOBS, CHILD_JOBSETS: JOBSETS},
                  {CHILD_JOBS: [node, holder], CHILD_JOBSETS: [jobset]})
    assert pods_of(TRAINJOB, [mine, forged], tj, ctx=ctx) == [mine]  # type: ignore[arg-type]
    aw = {"metadata": {"name": "aw", "namespace": "ns", "uid": "aw-1"}}
    wrapped = _batch_job("aw-job", "j-2", {"apiVersion": "workload.codeflare.dev/v1beta2",
                                           "kind": "AppWrapper", "name": "aw", "uid": "aw-1"})
    label = {"workload.codeflare.dev/appwrapper": "aw"}
    mine, forged = ({"metadata": {"name": f"p-{j['metadata']['name']}", "namespace": "ns",
                                  "labels": label, "ownerReferences": [_job_ref(j)]},
                     "status": {"phase": "Running"}} for j in (wrapped, holder))
    ctx = _stores(wrapped, holder)
    assert pods_of(APPWRAPPER, [mine, forged], aw, ctx=ctx) == [mine]  # type: ignore[arg-type]
def _child_job(*, suspended: bool, deleting: bool) -> dict[str, Any]:
    """JobSet ``js``'s child Job ``js-w-0`` (one 1-GPU pod); ``deleting``: the tenant put a
    finalizer of its own on it and deleted it."""
    meta: dict[str, Any] = {"name": "js-w-0", "namespace": "ns", "uid": "c-1",
                            "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2",
                                                 "kind": "JobSet", "name": "js", "uid": "js-1",
                                                 "controller": True}]}
    if deleting:
        meta.update(deletionTimestamp=DELETING, finalizers=["example.com/keep"])
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
            "spec": {"suspend": suspended, "parallelism": 1,
                     "template": {"spec": {"containers": [{"name": "c"}]}}},
            "status": {"active": 1}}


def _child_pod() -> dict[str, Any]:
    return {"metadata": {"name": "js-w-0-abcde", "namespace": "ns", "uid": "p-c",
                         "labels": {"batch.kubernetes.io/job-name": "js-w-0",
                                    "job-name": "js-w-0",
                                    "jobset.sigs.k8s.io/jobset-name": "js",
                                    "jobset.sigs.k8s.io/jobset-uid": "js-1",
                                    "batch.kubernetes.io/controller-uid": "c-1"},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                              "name": "js-w-0", "uid": "c-1",
                                              "controller": True}]},
            "spec": {"nodeName": "a100-0"}, "status": {"phase": "Running"}}


def _jobset_workload(js: dict[str, Any], *conditions: str) -> dict[str, Any]:
    wl = JOBSET.workload_object(js)
    wl["metadata"].update(namespace="ns", uid="w-2")
    wl["status"] = {"admission": {"clusterQueue": "cq", "podSetAssignments": [
        {"name": "w", "count": 1, "flavors": {"nvidia.com/gpu": "a100"}}]},
        "conditions": [{"type": t, "status": "True", "reason": t, "message": ""}
                       for t in conditions]}
    return wl


def _child_look(child: dict[str, Any], *conditions: str) -> FakeCtx:
    """``_child`` for ``child`` of JobSet ``js`` (not being deleted, suspended as pykueue's
    stop and the JobSet operator leave it) whose Workload has ``conditions``."""
    js = _jobset(deleting=False)
    ctx = FakeCtx({WL: WORKLOADS, JOBSET.key: JOBSET.resource, JOB_KIND.key: JOBS, POD: PODS},
                  {WL: [_jobset_workload(js, *conditions)], JOBSET.key: [js],
                   JOB_KIND.key: [child], POD: [_child_pod()]})
    rec = JobReconciler.__new__(JobReconciler)
    rec.ctx, rec.registry = ctx, default_registry()  # type: ignore[assignment]
    asyncio.run(rec._child(JOB_KIND, child, JOBSET, js))
    return ctx


PREEMPTED = ("QuotaReserved", "Admitted", "Evicted")


def test_a_child_job_being_deleted_of_a_preempted_jobset_has_its_pods_deleted() -> None:
    """review25 F5: the JobSet is not being deleted, its child Job is (a tenant's finalizer
    keeps it). The JobSet's Workload is preempted (Evicted, still Admitted until its quota
    is released): the child, running or already suspended by the JobSet operator (which
    kills no pod of a Job being deleted), has its running pod deleted, so the JobSet's pods
    are gone and its quota can be released. Before, ``_child`` left it (Admitted, or
    suspended) and the pod ran on, the preemptor waiting for good."""
    for suspended in (False, True):
        ctx = _child_look(_child_job(suspended=suspended, deleting=True), *PREEMPTED)
        assert ("delete", "pods", "js-w-0-abcde") in ctx.writes, (suspended, ctx.writes)
        assert (("replace", "jobs", "js-w-0") in ctx.writes) is not suspended, ctx.writes


def test_a_child_job_being_deleted_of_an_admitted_jobset_runs_on() -> None:
    """Admitted and not evicted, the child being deleted runs on the JobSet's admission
    (its pods are the JobSet's operator's and the garbage collector's): nothing written.
    Not being deleted, a preempted JobSet's child is its operator's to stop (Kueue v0.17.1
    ``shouldSuspendChildJob``: Admitted is still True), and one already suspended is left."""
    for suspended in (False, True):
        ctx = _child_look(_child_job(suspended=suspended, deleting=True), "QuotaReserved",
                          "Admitted")
        assert ctx.writes == [], (suspended, ctx.writes)
    for suspended in (False, True):
        ctx = _child_look(_child_job(suspended=suspended, deleting=False), *PREEMPTED)
        assert ctx.writes == [], (suspended, ctx.writes)


def test_an_evicted_jobsets_children_are_reconciled_while_its_quota_waits() -> None:
    """``_stop_then_release`` enqueues the children of the evicted JobSet (its Jobs) on
    every pass: a child being deleted gets no event of its own from the eviction."""
    js = _jobset(deleting=False)
    child = _child_job(suspended=True, deleting=True)
    ctx = FakeCtx({WL: WORKLOADS, WPC: WORKLOADS, PC: WORKLOADS, JOBSET.key: JOBSET.resource,
                   JOB_KIND.key: JOBS, POD: PODS, NS: NAMESPACES},
                  {WL: [_jobset_workload(js, *PREEMPTED)], JOBSET.key: [js],
                   JOB_KIND.key: [child], POD: [_child_pod()]})
    ctx.clock = lambda: 1e9  # type: ignore[attr-defined]
    added: list[str] = []
    rec = JobReconciler.__new__(JobReconciler)
    rec.ctx, rec.registry = ctx, default_registry()  # type: ignore[assignment]
    rec.queue = type("Q", (), {"add": staticmethod(lambda key, **_: added.append(key))})()  # type: ignore[assignment]
    again = asyncio.run(rec.reconcile_object(JOBSET, "ns", "js"))
    assert again is not None  # its child's pod still holds the quota
    assert f"{JOB_KIND.key}:ns/js-w-0" in added, added


class _NoScan(Store):
    """A Store that refuses a scan of its whole content (``__iter__``, ``list``)."""

    def __iter__(self) -> Any:
        raise AssertionError(f"scanned the {self.resource.plural} store")

    def list(self) -> Any:
        raise AssertionError(f"listed the {self.resource.plural} store")


def _owned(name: str, owner_uid: str | None, ns: str = "ns") -> dict[str, Any]:
    refs = [] if owner_uid is None else [{"apiVersion": "jobset.x-k8s.io/v1alpha2",
                                          "kind": "JobSet", "name": "js", "uid": owner_uid,
                                          "controller": True}]
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": ns, "uid": f"u-{name}",
                         "ownerReferences": refs},
            "spec": {"suspend": True, "template": {"spec": {"containers": [{"name": "c"}]}}}}


def test_children_are_found_through_the_controller_uid_index_kept_by_store_events() -> None:
    """``_enqueue_children`` (every ``PODS_POLL`` while a stopped object's pods go) reads
    each store's controller-uid index, never scans a store (review25 F6: before, every
    store of every kind was scanned on each poll). The index follows the store's changes:
    a child added is found, one re-parented to another JobSet (another uid) is that one's,
    one deleted is no one's; another namespace's object naming the same uid, an object
    without a controller and another JobSet's children are never its."""
    keys = {WL: WORKLOADS, JOBSET.key: JOBSET.resource, JOB_KIND.key: JOBS,
            CHILD_JOBS: JOBS, POD: PODS}
    ctx = FakeCtx(keys)
    for key, res in keys.items():
        ctx.informers.informers[key].store = _NoScan(res)
    added: list[str] = []
    rec = JobReconciler.__new__(JobReconciler)
    rec.ctx, rec.registry = ctx, default_registry()  # type: ignore[assignment]
    rec.queue = type("Q", (), {"add": staticmethod(lambda key, **_: added.append(key))})()  # type: ignore[assignment]
    js, other = _jobset(deleting=False), {"metadata": {"namespace": "ns", "uid": "js-2"}}
    jobs = ctx.store(CHILD_JOBS)

    def children_of(parent: dict[str, Any]) -> list[str]:
        added.clear()
        rec._enqueue_children(parent)
        return sorted(added)

    jobs.put(_owned("js-w-0", "js-1"))
    jobs.put(_owned("js-w-1", "js-1"))
    jobs.put(_owned("elsewhere", "js-1", ns="other"))
    jobs.put(_owned("loose", None))
    jobs.put(_owned("theirs", "js-2"))
    assert children_of(js) == [f"{CHILD_JOBS}:ns/js-w-0", f"{CHILD_JOBS}:ns/js-w-1"]
    jobs.put({**_owned("js-w-1", "js-2"), "metadata": {
        **_owned("js-w-1", "js-2")["metadata"], "resourceVersion": "2"}})  # re-parented
    assert children_of(js) == [f"{CHILD_JOBS}:ns/js-w-0"]
    assert children_of(other) == [f"{CHILD_JOBS}:ns/js-w-1", f"{CHILD_JOBS}:ns/theirs"]
    jobs.remove("ns/js-w-0")  # deleted
    assert children_of(js) == []
    ctx.store(JOB_KIND.key).put({**_owned("labelled", "js-1"), "metadata": {
        **_owned("labelled", "js-1")["metadata"],
        "labels": {"kueue.x-k8s.io/queue-name": "lq"}}})
    assert children_of(js) == [f"{JOB_KIND.key}:ns/labelled"]
    jobs.replace_all([_owned("js-w-0", "js-1")])  # a relist
    assert children_of(js) == sorted([f"{CHILD_JOBS}:ns/js-w-0", f"{JOB_KIND.key}:ns/labelled"])


def admitted_rayjob_workload(rj: dict[str, Any], *, wl_deleted: bool) -> dict[str, Any]:
    """RayJob ``rj``'s (uid ``u-1``) Workload admitted on the a100 flavor with the
    resource-in-use finalizer: preempted (Evicted) or, ``wl_deleted``, being deleted."""
    wl = RAYJOB.workload_object(rj)
    wl["metadata"].update(namespace="ns", uid="w-1", resourceVersion="3",
                          finalizers=["kueue.x-k8s.io/resource-in-use"],
                          ownerReferences=[{"apiVersion": "ray.io/v1", "kind": "RayJob",
                                            "name": rj["metadata"]["name"], "uid": "u-1",
                                            "controller": True}])
    done = ("QuotaReserved", "Admitted") + (() if wl_deleted else ("Evicted",))
    if wl_deleted:
        wl["metadata"]["deletionTimestamp"] = DELETING
    wl["status"] = {"admission": {"clusterQueue": "cq", "podSetAssignments": [
        {"name": ps["name"], "count": ps["count"], "flavors": {"nvidia.com/gpu": "a100"}}
        for ps in wl["spec"]["podSets"]]}, "conditions": [
        {"type": t, "status": "True", "reason": t, "message": ""} for t in done]}
    return wl


def _rayjob_look(status: dict[str, Any], *, running_cluster: bool, wl_deleted: bool = False
                 ) -> tuple[FakeCtx, float | None]:
    """One reconcile of RayJob ``ns/tune`` held being deleted by a tenant's finalizer, with
    ``status`` as KubeRay v1.6.0 last wrote it (it writes none for a RayJob being deleted),
    and its admitted Workload, on which no cluster was recorded yet (``settle``: the RayJob
    was deleted right after it started): preempted and the RayJob stopped (suspended), or
    (``wl_deleted``) the Workload deleted by the garbage collector (``kubectl delete
    --cascade=foreground``, the RayJob not stopped yet). ``running_cluster``: the RayCluster
    KubeRay made for it (its origin labels) is stored with a Running pod; else none is left
    (KubeRay made none yet, or it went with the deletion)."""
    rj = rayjob(group("gpu", 1), suspend=not wl_deleted)
    rj["metadata"].update(deletionTimestamp=DELETING, finalizers=["example.com/keep"])
    rj["status"] = status
    wl = admitted_rayjob_workload(rj, wl_deleted=wl_deleted)
    clusters, pods = [], []
    if running_cluster:
        rc = raycluster(group("gpu", 1), owner="RayJob")
        rc["metadata"].update(name="tune-raycluster-x", labels={
            ORIGIN_KIND_LABEL: "RayJob", ORIGIN_NAME_LABEL: "tune"})
        clusters.append(rc)
        name = rc["metadata"]["name"]
        pods.append({"metadata": {"name": f"{name}-head", "namespace": "ns", "uid": "p-h",
                                  "labels": {"ray.io/cluster": name},
                                  "ownerReferences": [{"apiVersion": "ray.io/v1",
                                                       "kind": "RayCluster", "name": name,
                                                       "uid": "u-2", "controller": True}]},
                     "spec": {"nodeName": "a100-0"}, "status": {"phase": "Running"}})
    ctx = FakeCtx({WL: WORKLOADS, WPC: WORKLOADS, PC: WORKLOADS, RAYJOB.key: RAYJOB.resource,
                   RAYCLUSTER.key: RAYCLUSTER.resource, POD: PODS, NS: NAMESPACES,
                   RF: RESOURCE_FLAVORS},
                  {POD: pods, RAYJOB.key: [rj], RAYCLUSTER.key: clusters, WL: [wl]})
    ctx.clock = lambda: 1e9  # type: ignore[attr-defined]
    rec = JobReconciler.__new__(JobReconciler)
    rec.ctx, rec.registry = ctx, default_registry()  # type: ignore[assignment]
    rec.queue = type("Q", (), {"add": staticmethod(lambda *_, **__: None)})()  # type: ignore[assignment]
    return ctx, asyncio.run(rec.reconcile_object(RAYJOB, "ns", "tune"))


def test_a_rayjob_deleted_before_its_cluster_was_recorded_is_counted_from_the_pod_store(
        ) -> None:
    """rev26: a RayJob being deleted whose Workload recorded no cluster was counted from its
    status (``active_pods``: 1 for any deployment status but new and ``Suspended``), which
    KubeRay v1.6.0 never writes again for a RayJob being deleted: its preempted Workload,
    or its Workload deleted with it in the foreground, held the quota for good (the
    RayJob too, waiting for the Workload). Now the pods of the clusters KubeRay made for it
    (their origin labels) are the count: none left, the quota is released (the preempted
    one's Workload deleted, the deleted one's finalizer taken off); a cluster still running
    keeps it."""
    made = {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING",
            "rayClusterName": "tune-raycluster-x"}
    for status in ({"jobDeploymentStatus": "New", "jobStatus": "NEW"}, made):
        ctx, again = _rayjob_look(status, running_cluster=False)
        assert ("delete", "workloads", RAYJOB.workload_name(rayjob())) in ctx.writes, (
            status, ctx.writes, again)
        ctx, again = _rayjob_look(status, running_cluster=False, wl_deleted=True)
        assert ("replace", "workloads", RAYJOB.workload_name(rayjob())) in ctx.writes, (
            status, ctx.writes, again)
    for wl_deleted in (False, True):
        ctx, again = _rayjob_look(made, running_cluster=True, wl_deleted=wl_deleted)
        assert again is not None and not [w for w in ctx.writes if w[1] == "workloads"], (
            wl_deleted, ctx.writes)

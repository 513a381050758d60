"""Every batch Job is in some store while a served kind runs pods through batch Jobs (a JobSet,
a TrainJob, an AppWrapper, an MPIJob's launcher), so a pod whose Job no store holds is one
whose Job is gone (``framework.pod_of``; break26 F1):

- with ``integrations.frameworks`` not listing ``batch/job`` the Job kind's informers do not
  run, and a tenant's unqueued Job whose pods carry an evicted or deleted JobSet's name and
  uid labels held that JobSet's quota (and its Workload's finalizer), while a TrainJob's own
  pods never counted from the Pod store (deleted in the foreground, its quota went at once);
- a Job labelled ``kueue.x-k8s.io/queue-name: ""`` (stored before the webhook refused that)
  is in neither of the Job kind's informers (labelled, unlabelled) and did the same.

And the pods of a TrainJob's, an AppWrapper's or an MPIJob launcher's Job that went (deleted
in the background) while they run out their grace period still count, as a JobSet's do; a
pod not being deleted whose Job no store holds still counts for none of them."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from app.config import JobsSettings, LeaderElectionSettings, Settings
from app.controllers.manager import Manager
from app.integrations import default_registry
from app.integrations.appwrapper.appwrapper import KIND as APPWRAPPER
from app.integrations.framework import pod_of, pods_of
from app.integrations.jobset.jobset import JOBSETS
from app.integrations.jobset.jobset import KIND as JOBSET
from app.integrations.kubeflow.kubeflow import MPIJOB, PYTORCHJOB
from app.integrations.reconciler import PODS_POLL
from app.integrations.trainjob.trainjob import KIND as TRAINJOB
from app.kube.client import JOBS, PODS
from app.kube.context import CHILD_JOB_STORES, CHILD_JOBS, CHILD_JOBSETS, OTHER_JOBS, POD
from app.kube.informers import identity_only
from app.kube.leader import LeaderElector
from app.wire.names import JOB_UID_LABEL, QUEUE_NAME_LABEL
from tests.recording_client import OBJECTS, RecordingClient
from tests.unit.fake_ctx import FakeCtx
from tests.unit.test_foreground_deletion import GONE, _workload_writes, trainjob_being_deleted

NS = "research"
JOBSET_LABELS = {"jobset.sigs.k8s.io/jobset-name": "ts", "jobset.sigs.k8s.io/jobset-uid": "js-1"}


def _job(name: str, uid: str, labels: dict[str, str] | None = None,
         controller: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": uid, "resourceVersion": "1",
                            "labels": labels or {}}
    if controller:
        meta["ownerReferences"] = [{**controller, "controller": True}]
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
            "spec": {"suspend": False, "parallelism": 1, "template": {"spec": {
                "restartPolicy": "Never", "containers": [{"name": "c"}]}}}}


def _pod(name: str, job: dict[str, Any], labels: dict[str, str],
         deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"p-{name}",
                            "resourceVersion": "1", "labels": labels,
                            "ownerReferences": [{
                                "apiVersion": "batch/v1", "kind": "Job",
                                "name": job["metadata"]["name"],
                                "uid": job["metadata"]["uid"], "controller": True}]}
    if deleting:
        meta["deletionTimestamp"] = GONE
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"nodeName": "gpu-0"}, "status": {"phase": "Running"}}


def _matches(selector: str | None, labels: dict[str, str]) -> bool:
    """The API server's reading of the selectors the Manager asks for: ``k``, ``!k``,
    ``k!=v`` (also true without ``k``) and ``k=v`` (``v`` may be empty), comma-joined."""
    for req in (selector or "").split(","):
        if not req:
            continue
        if req.startswith("!"):
            ok = req[1:] not in labels
        elif "!=" in req:
            key, value = req.split("!=", 1)
            ok = labels.get(key) != value
        elif "=" in req:
            key, value = req.split("=", 1)
            ok = key in labels and labels[key] == value
        else:
            ok = req in labels
        if not ok:
            return False
    return True


class _Cluster(RecordingClient):
    """Serves the CRDs of ``served`` (API group/version paths) and lists by label selector."""

    def __init__(self, objects: dict[str, list[dict[str, Any]]], served: dict[str, str]
                 ) -> None:
        super().__init__(objects)
        self.served = served

    async def list(self, res: Any, namespace: str | None = None, **kw: Any):
        items = [copy.deepcopy(o) for o in self.objects.get(res.plural, [])]
        return [o for o in items if _matches(kw.get("label_selector"),
                                             o["metadata"].get("labels") or {})], "1"

    async def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        if path in self.served:
            return {"resources": [{"name": self.served[path]}]}
        return await super().request(method, path)


def _manager(monkeypatch: pytest.MonkeyPatch, client: RecordingClient, frameworks: list[str],
             *, unlabelled: bool = False) -> Manager:
    async def lead(self: LeaderElector) -> None:
        self._set(True)
        await asyncio.Event().wait()

    monkeypatch.setattr(LeaderElector, "run", lead)
    settings = Settings(leader_election=LeaderElectionSettings(enabled=True),
                        jobs=JobsSettings(manage_jobs_without_queue_name=unlabelled))
    return Manager(settings, client=client, watch_nodes=True,  # type: ignore[arg-type]
                   registry=default_registry(frameworks))


def _decoy_cluster(decoy_labels: dict[str, str]) -> tuple[_Cluster, dict[str, Any]]:
    """JobSet ``ts`` (uid ``js-1``) was deleted; a tenant's Job ``mine`` (labels
    ``decoy_labels``) runs a pod carrying the JobSet's name and uid labels."""
    mine = _job("mine", "u-mine", decoy_labels)
    decoy = _pod("mine-abcde", mine, JOBSET_LABELS)
    return _Cluster({**OBJECTS, JOBS.plural: [*OBJECTS[JOBS.plural], mine],
                     PODS.plural: [decoy]},
                    {"/apis/jobset.x-k8s.io/v1alpha2": JOBSETS.plural}), decoy


def _jobset_workload() -> dict[str, Any]:
    """The deleted JobSet ``ts``'s Workload, still naming it (deleted in the background)."""
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {
        "name": JOBSET.workload_name({"metadata": {"name": "ts", "uid": "js-1"}}),
        "namespace": NS, "uid": "w-1", "labels": {JOB_UID_LABEL: "js-1"},
        "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                             "name": "ts", "uid": "js-1", "controller": True}]},
        "spec": {"queueName": "lq", "podSets": []}}


@pytest.mark.parametrize(("frameworks", "decoy_labels"), [
    pytest.param(["jobset.x-k8s.io/jobset"], {}, id="batch-job-not-listed"),
    pytest.param(["batch/job", "jobset.x-k8s.io/jobset"], {QUEUE_NAME_LABEL: ""},
                 id="a-job-labelled-with-an-empty-queue-name"),
])
async def test_a_tenants_job_in_no_batch_job_kind_store_holds_no_jobsets_quota(
        monkeypatch: pytest.MonkeyPatch, frameworks: list[str],
        decoy_labels: dict[str, str]) -> None:
    """break26 F1 (a) and (c): the tenant's Job is read from a store, is not the JobSet's,
    and its pod holds none of the deleted JobSet's quota. Before, no store held it: taken
    for a gone child Job of the JobSet, its pod held the quota for as long as it ran."""
    client, decoy = _decoy_cluster(decoy_labels)
    m = _manager(monkeypatch, client, frameworks)
    await m.start()
    try:
        await m.wait_ready(10)
        assert m.ctx is not None and m.jobs is not None
        assert not pod_of(JOBSET, decoy, "ts", "js-1", ctx=m.ctx)  # type: ignore[arg-type]
        assert m.jobs.pods_holding(_jobset_workload(), "js-1") == 0
    finally:
        await m.stop()


async def test_without_batch_job_a_jobs_pods_are_placed_as_any_others(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``batch/job`` not listed: the scheduler extender and the webhooks' admission lookup
    find no Job of pykueue's for a Job's pod (a JobSet's) and answer as for any other pod.
    Before, they read the Job kind's store, which is not watched then: KeyError on every
    filter request, so no JobSet pod was ever given a node (lab: ``ts``'s pod Pending)."""
    client, _ = _decoy_cluster({})
    m = _manager(monkeypatch, client, ["jobset.x-k8s.io/jobset"])
    await m.start()
    try:
        await m.wait_ready(10)
        assert m.extender_state is not None and m.admission_lookup is not None
        assert m.extender_state.workload_for_pod(NS, "mine", "u-mine") is None
        assert m.admission_lookup.is_admitted(NS, "mine", "u-mine") is None
    finally:
        await m.stop()


async def test_a_trainjobs_running_pods_count_without_batch_job_listed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """break26 F1 (b): the trainer's JobSet's Job is read from the store of every batch Job,
    so the TrainJob's running pod is its own (what a TrainJob deleted in the foreground
    waits for). Before, no store held the Job and the pod was nobody's."""
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {
        "name": "tj", "namespace": NS, "uid": "js-1", "resourceVersion": "1",
        "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1",
                             "kind": "TrainJob", "name": "tj", "uid": "u-1",
                             "controller": True}]}}
    node = _job("tj-node-0", "j-1", controller={
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "tj",
        "uid": "js-1"})
    pod = _pod("tj-node-0-abcde", node, {"jobset.sigs.k8s.io/jobset-name": "tj"})
    client = _Cluster({**OBJECTS, JOBS.plural: [node], JOBSETS.plural: [jobset],
                       PODS.plural: [pod]},
                      {f"/apis/{TRAINJOB.resource.group}/{TRAINJOB.resource.version}":
                       TRAINJOB.resource.plural})
    m = _manager(monkeypatch, client, ["trainer.kubeflow.org/trainjob"])
    await m.start()
    try:
        await m.wait_ready(10)
        assert [k.key for k in m.registry.kinds()] == [TRAINJOB.key]
        assert pod_of(TRAINJOB, pod, "tj", "u-1", ctx=m.ctx)  # type: ignore[arg-type]
    finally:
        await m.stop()


async def test_a_jobset_crd_installed_later_brings_the_batch_job_store_with_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """JobSet's CRD served only after pykueue started (``Manager._add_kind``), ``batch/job``
    not listed: the store of every batch Job joins with the kind."""
    from app.controllers import manager as manager_mod
    monkeypatch.setattr(manager_mod, "CRD_POLL_SECONDS", 0.05)
    client, decoy = _decoy_cluster({})
    served, client.served = client.served, {}
    m = _manager(monkeypatch, client, ["jobset.x-k8s.io/jobset"])
    await m.start()
    try:
        await m.wait_ready(10)
        assert not m.registry.kinds()
        client.served = served
        for _ in range(100):
            await asyncio.sleep(0.05)
            if m.registry.kinds():
                break
        assert [k.key for k in m.registry.kinds()] == ["jobset"]
        assert m.ctx is not None and m.jobs is not None
        assert not pod_of(JOBSET, decoy, "ts", "js-1", ctx=m.ctx)  # type: ignore[arg-type]
        assert m.jobs.pods_holding(_jobset_workload(), "js-1") == 0
    finally:
        await m.stop()


@pytest.mark.parametrize(("frameworks", "unlabelled", "watch_nodes"), [
    pytest.param(["batch/job", "jobset.x-k8s.io/jobset"], True, True,
                 id="the-job-kind-lists-every-job"),
    pytest.param(["batch/job"], False, True, id="no-kind-runs-pods-through-jobs"),
    pytest.param(["pytorchjob"], False, True, id="the-training-operators-kinds-run-none"),
    pytest.param(["jobset.x-k8s.io/jobset"], False, False, id="no-pod-store"),
])
async def test_no_more_batch_jobs_are_watched_when_none_is_needed(
        monkeypatch: pytest.MonkeyPatch, frameworks: list[str], unlabelled: bool,
        watch_nodes: bool) -> None:
    client, _ = _decoy_cluster({})
    m = _manager(monkeypatch, client, [f"kubeflow.org/{f}" if f == "pytorchjob" else f
                                       for f in frameworks], unlabelled=unlabelled)
    m.watch_nodes = watch_nodes
    await m.start()
    try:
        await m.wait_ready(10)
        assert m.ctx is not None
        job_stores = [k for k, inf in m.ctx.informers.informers.items()
                      if inf.resource.plural == JOBS.plural]
        assert job_stores == (["job"] if "batch/job" in frameworks and unlabelled
                              else ["job", *CHILD_JOB_STORES] if "batch/job" in frameworks
                              else [])
    finally:
        await m.stop()


# --- a Job gone (background deletion) while its pods run out their grace period ---------

def _launcher_pod(*, deleting: bool, role: str = "launcher",
                  job_name: str = "train-launcher") -> dict[str, Any]:
    gone = _job(job_name, "l-1")
    return _pod(f"{job_name}-abcde", gone, {"training.kubeflow.org/job-name": "train",
                                            "training.kubeflow.org/job-role": role},
                deleting=deleting)


def _ctx() -> FakeCtx:
    return FakeCtx({CHILD_JOBS: JOBS, "job": JOBS, POD: PODS})


def test_an_mpijobs_launcher_pod_being_deleted_counts_after_its_job_went() -> None:
    """mpi-operator v0.8.0's launcher Job ``<name>-launcher`` gone, its pod still running
    out its grace period, or not marked for deletion yet (the collector deletes a gone Job's
    pods after it): the MPIJob's. Not the launcher's role, another Job's name, or a
    PyTorchJob's (the training-operator runs no Job): not."""
    mpijob = {"metadata": {"name": "train", "namespace": NS, "uid": "mpi-1"}}
    ctx = _ctx()
    for p in (_launcher_pod(deleting=True), _launcher_pod(deleting=False)):
        assert pods_of(MPIJOB, [p], mpijob, ctx=ctx) == [p]  # type: ignore[arg-type]
    killed = _launcher_pod(deleting=True)
    for p in (_launcher_pod(deleting=True, role="worker"),
              _launcher_pod(deleting=True, job_name="holder")):
        assert pods_of(MPIJOB, [p], mpijob, ctx=ctx) == []  # type: ignore[arg-type]
    assert pods_of(PYTORCHJOB, [killed], mpijob, ctx=ctx) == []  # type: ignore[arg-type]


def test_an_appwrappers_pod_being_deleted_counts_after_its_wrapped_job_went() -> None:
    aw = {"metadata": {"name": "aw", "namespace": NS, "uid": "aw-1"}}
    gone = _job("aw-job", "j-2")
    label = {"workload.codeflare.dev/appwrapper": "aw"}
    killed, running = (_pod(f"p-{d}", gone, label, deleting=d) for d in (True, False))
    # Not marked yet counts too: the collector deletes a gone Job's pods after it.
    assert pods_of(APPWRAPPER, [killed, running], aw,  # type: ignore[arg-type]
                   ctx=_ctx()) == [killed, running]


def test_a_trainjobs_pod_counts_while_its_jobset_is_gone_before_its_job() -> None:
    """TrainJob ``tj`` deleted in the background: the garbage collector removes its JobSet
    before it marks the JobSet's Job and the Job's pod, so for a moment the Job is stored and
    its JobSet is in no store. The pod is still ``tj``'s: on the lab the Workload lost its
    finalizer in that moment, for good, while the pod ran on. A Job whose controller is a
    JobSet of another name is not the TrainJob's, its JobSet stored or not."""
    jobset_ref = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet"}
    node = _job("tj-node-0", "j-1", controller={**jobset_ref, "name": "tj", "uid": "js-1"})
    other = _job("x-node-0", "j-2", controller={**jobset_ref, "name": "x", "uid": "js-2"})
    label = {"jobset.sigs.k8s.io/jobset-name": "tj"}
    pod, decoy = _pod("tj-node-0-a", node, label), _pod("x-node-0-a", other, label)
    ctx = FakeCtx({CHILD_JOBS: JOBS, "job": JOBS, CHILD_JOBSETS: JOBSETS, POD: PODS},
                  {CHILD_JOBS: [node, other]})
    trainjob = {"metadata": {"name": "tj", "namespace": NS, "uid": "u-1"}}
    assert pods_of(TRAINJOB, [pod, decoy], trainjob,  # type: ignore[arg-type]
                   ctx=ctx) == [pod]


def _trainer_pod(job_name: str) -> dict[str, Any]:
    pod = _pod(f"{job_name}-0", _job(job_name, "j-1"),
               {"jobset.sigs.k8s.io/jobset-name": "tj"}, deleting=True)
    pod["metadata"]["namespace"] = "ns"
    return pod


def test_a_trainjob_deleted_in_the_foreground_holds_while_its_pods_outlive_their_job() -> None:
    """The lead's Low finding: the trainer pod still runs out its grace period after its Job
    went: the Workload keeps its finalizer (and the quota) until the pod is gone. Before,
    the pod counted only while its Job was stored, and the quota went at once."""
    rec, ctx, name = trainjob_being_deleted(_trainer_pod("tj-node-0"), [])
    assert asyncio.run(rec.reconcile_object(TRAINJOB, "ns", "tj")) == PODS_POLL
    assert _workload_writes(ctx) == []
    ctx.store(POD).remove("ns/tj-node-0-0")
    assert asyncio.run(rec.reconcile_object(TRAINJOB, "ns", "tj")) is None
    assert _workload_writes(ctx) == [("replace", "workloads", name)]


def test_a_pod_being_deleted_of_a_job_the_trainer_would_not_make_holds_nothing() -> None:
    """Its Job's name is not one of the TrainJob's JobSet's (``<trainjob>-...``)."""
    rec, ctx, name = trainjob_being_deleted(_trainer_pod("holder"), [])
    assert asyncio.run(rec.reconcile_object(TRAINJOB, "ns", "tj")) is None
    assert _workload_writes(ctx) == [("replace", "workloads", name)]


# --- a queued JobSet's child Job labelled with an empty queue name ----------------------

def _jobset_and_child(admitted_: bool, child_labels: dict[str, str], parallelism: int
                      ) -> tuple[_Cluster, dict[str, Any]]:
    """JobSet ``ts`` (queued in ``lq``, one replicatedJob ``w`` of 1 Job x 1 pod), its
    Workload admitted (``admitted_``) or none yet, and its running child Job ``ts-w-0``
    (labels ``child_labels``, ``parallelism`` pods)."""
    js = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {
        "name": "ts", "namespace": NS, "uid": "js-1", "resourceVersion": "1",
        "creationTimestamp": "2026-12-01T06:00:00Z", "labels": {QUEUE_NAME_LABEL: "lq"}},
        "spec": {"suspend": not admitted_, "replicatedJobs": [{
            "name": "w", "replicas": 1, "template": {"spec": {
                "parallelism": 1, "completions": 1, "template": {"spec": {
                    "restartPolicy": "Never", "containers": [{"name": "c"}]}}}}}]}}
    child = _job("ts-w-0", "j-1", child_labels, controller={
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "ts",
        "uid": "js-1"})
    child["spec"]["parallelism"] = parallelism
    if admitted_:  # started as pykueue starts it (so no write of its own follows)
        js = JOBSET.injected(js, {"w": ({}, [])})
    objects = {**OBJECTS, JOBS.plural: [child], JOBSETS.plural: [js]}
    if admitted_:
        wl = _jobset_workload()
        wl["metadata"]["resourceVersion"] = "1"
        wl["spec"]["podSets"] = [{"name": "w", "count": 1, "template": {"spec": {
            "containers": [{"name": "c"}]}}}]
        wl["status"] = {"admission": {"clusterQueue": "cq", "podSetAssignments": [
            {"name": "w", "count": 1, "flavors": {"cpu": "default-flavor"}}]},
            "conditions": [{"type": t, "status": "True", "reason": t, "message": "",
                            "lastTransitionTime": "2026-12-01T06:00:00Z"}
                           for t in ("QuotaReserved", "Admitted", "PodsReady")]}
        objects["workloads"] = [wl]
    return _Cluster(objects, {"/apis/jobset.x-k8s.io/v1alpha2": JOBSETS.plural}), child


async def _child_writes(monkeypatch: pytest.MonkeyPatch, client: _Cluster,
                        watch_nodes: bool = True) -> list[dict[str, Any]]:
    """The bodies of the replaces of Job ``ts-w-0`` pykueue (``batch/job`` and JobSet, the
    Pod store watched or not) makes: once one is made (5 s at most)."""
    m = _manager(monkeypatch, client, ["batch/job", "jobset.x-k8s.io/jobset"])
    m.watch_nodes = watch_nodes
    await m.start()
    try:
        await m.wait_ready(10)
        for _ in range(100):
            got = [b for v, r, b in client.bodies
                   if (v, r) == ("replace", JOBS.plural) and b["metadata"]["name"] == "ts-w-0"]
            if got:
                break
            await asyncio.sleep(0.05)
    finally:
        await m.stop()
    return got


@pytest.mark.parametrize("child_labels", [
    pytest.param({}, id="unlabelled"),
    pytest.param({QUEUE_NAME_LABEL: ""}, id="labelled-with-an-empty-queue-name")])
@pytest.mark.parametrize("watch_nodes", [True, False], ids=["pod-store", "no-pod-store"])
async def test_a_queued_jobsets_running_child_is_suspended_until_it_is_admitted(
        monkeypatch: pytest.MonkeyPatch, child_labels: dict[str, str],
        watch_nodes: bool) -> None:
    """JobSet ``ts`` is queued, not admitted; its child Job runs: it is suspended (Kueue
    v0.17.1 ``shouldSuspendChildJob``, whose ``QueueName`` reads an empty label as none).
    Before, a child labelled ``kueue.x-k8s.io/queue-name: ""`` was in no reconciled store
    (read only in the store of the other Jobs with the Pod store, else in none) and ran on."""
    client, _ = _jobset_and_child(False, child_labels, 1)
    written = await _child_writes(monkeypatch, client, watch_nodes)
    assert written and written[0]["spec"]["suspend"] is True, client.bodies


async def test_an_admitted_jobsets_child_labelled_with_an_empty_queue_name_keeps_its_share(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """JobSet ``ts`` is admitted for 1 pod in its Job ``ts-w-0``, labelled with an empty
    queue name and raised to 6 pods: set back to 1 (``ExceedsAncestorAdmission``), as an
    unlabelled child is. Before, nothing reconciled it and its 6 pods ran on 1 pod's quota."""
    client, _ = _jobset_and_child(True, {QUEUE_NAME_LABEL: ""}, 6)
    written = await _child_writes(monkeypatch, client)
    assert [b["spec"]["parallelism"] for b in written] == [1], client.bodies


# --- the store of every batch Job keeps only what its readers read ----------------------

def test_a_job_is_kept_as_its_identity_and_its_controller() -> None:
    """``identity_only``: name, namespace, uid, resourceVersion and the controller
    ownerReference; labels, annotations, spec, status and other references dropped."""
    job = _job("ts-w-0", "j-1", JOBSET_LABELS, controller={
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "ts",
        "uid": "js-1", "blockOwnerDeletion": True})
    job["metadata"]["ownerReferences"].append(
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "uid": "cm-1"})
    job["metadata"]["annotations"] = {"a": "b"}
    job["status"] = {"active": 1}
    assert identity_only(job) == {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": "ts-w-0", "namespace": NS, "uid": "j-1", "resourceVersion": "1",
        "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                             "name": "ts", "uid": "js-1", "controller": True}]}}
    del job["metadata"]["ownerReferences"]
    assert "ownerReferences" not in identity_only(job)["metadata"]


async def test_without_batch_job_every_job_is_stored_as_its_identity(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``batch/job`` not listed: the store of every batch Job (``OTHER_JOBS``) keeps each
    listed or watched Job as ``identity_only`` (its template, what makes a Job large, not
    kept), and still tells a tenant's Job from a JobSet's gone child. Before, whole Jobs."""
    client, decoy = _decoy_cluster({})
    m = _manager(monkeypatch, client, ["jobset.x-k8s.io/jobset"])
    await m.start()
    try:
        await m.wait_ready(10)
        assert m.ctx is not None
        inf = m.ctx.informers[OTHER_JOBS]
        listed = inf.store.get(f"{NS}/mine")
        assert listed is not None and listed == identity_only(listed) \
            and "spec" not in listed, listed
        inf._apply({"type": "ADDED", "object": _job("late", "u-late")})  # noqa: SLF001
        assert inf.store.get(f"{NS}/late") == identity_only(_job("late", "u-late"))
        assert not pod_of(JOBSET, decoy, "ts", "js-1", ctx=m.ctx)  # type: ignore[arg-type]
        assert m.jobs is not None and m.jobs.pods_holding(_jobset_workload(), "js-1") == 0
    finally:
        await m.stop()

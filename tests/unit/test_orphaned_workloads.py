"""Quota follows the pods (job framework): a Workload whose object went with its owner
reference (``kubectl delete --cascade=orphan``) is Finished ``OwnerNotFound`` (Kueue v0.18
``isOrphanedWorkload``) once its object is gone and its orphaned pods are gone or terminal, and
has them deleted when it is evicted or deactivated (break26 F3); one created without an owner
(Kueue's performance runner) is left alone; a finished job's Workload keeps its quota while its
pods still run.

The property: whatever the mix of Workloads, owners and pods, one reconcile pass finishes
exactly the orphaned Workloads with nothing left running, and once the pods are gone the next
pass (one resync) finishes the rest."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.config import Settings
from app.integrations import default_registry
from app.integrations.batchjob.job import KIND as JOB
from app.integrations.framework import pod_of, pods_of, pods_of_workload
from app.integrations.jobset.jobset import JOBSETS
from app.integrations.jobset.jobset import KIND as JOBSET
from app.integrations.kubeflow.kubeflow import PYTORCHJOB, TFJOB
from app.integrations.reconciler import OWNER_NOT_FOUND, JobReconciler
from app.kube.client import JOBS, PODS, WORKLOADS
from app.kube.context import POD, WL
from app.kube.informers import Store
from app.wire.names import JOB_UID_LABEL, PODSET_LABEL
from tests.unit.fake_ctx import Informers

NS = "team-a"
KINDS = {"job": (JOB, JOBS), "jobset": (JOBSET, JOBSETS),
         "pytorchjob": (PYTORCHJOB, PYTORCHJOB.resource)}


class _Client:
    def __init__(self) -> None:
        self.status_writes: list[dict[str, Any]] = []

    async def replace(self, res: Any, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.status_writes.append(body)
        out = copy.deepcopy(body)
        meta = out["metadata"]
        meta["resourceVersion"] = str(int(meta.get("resourceVersion", "1")) + 1)
        return out


class _Recorder:
    def emit(self, *_: Any) -> bool:
        return True


class _Ctx:
    """``pods``: whether the Pod store is there (False: pods not watched)."""

    def __init__(self, *, pods: bool = True) -> None:
        keys = {WL: WORKLOADS, **({POD: PODS} if pods else {}),
                **{k: r for k, (_, r) in KINDS.items()}}
        self.informers = Informers(keys)
        self.client = _Client()
        self.recorder = _Recorder()
        self.clock = lambda: 1_000_000.0

    def store(self, key: str) -> Store:
        return self.informers.store(key)

    def wake(self) -> None:
        pass


def reconciler(*, pods: bool = True) -> tuple[JobReconciler, _Ctx]:
    ctx = _Ctx(pods=pods)
    rec = JobReconciler.__new__(JobReconciler)
    rec.ctx, rec.registry = ctx, default_registry()  # type: ignore[assignment]
    return rec, ctx


def owner(kind_key: str, name: str, uid: str, *, deleting: bool = False) -> dict[str, Any]:
    kind = KINDS[kind_key][0]
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": uid, "resourceVersion": "1"}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-03T14:00:00Z"
        meta["finalizers"] = ["orphan"]
    return {"apiVersion": kind.resource.api_version, "kind": kind.kind, "metadata": meta}


def workload(kind_key: str, name: str, uid: str, *, owned: bool, labelled: bool
             ) -> dict[str, Any]:
    kind = KINDS[kind_key][0]
    meta: dict[str, Any] = {
        "name": kind.workload_name({"metadata": {"name": name, "uid": uid}}),
        "namespace": NS, "uid": f"wl-{uid}", "resourceVersion": "1"}
    if labelled:
        meta["labels"] = {JOB_UID_LABEL: uid}
    if owned:
        meta["ownerReferences"] = [{"apiVersion": kind.resource.api_version,
                                    "kind": kind.kind, "name": name, "uid": uid,
                                    "controller": True}]
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": meta,
            "spec": {"queueName": "lq", "podSets": []},
            "status": {"admission": {"clusterQueue": "cq", "podSetAssignments": []},
                       "conditions": [{"type": "QuotaReserved", "status": "True"},
                                      {"type": "Admitted", "status": "True"}]}}


def pod(kind_key: str, name: str, uid: str, i: int, *, phase: str, deleting: bool = False,
        owner_ref: bool = False) -> dict[str, Any]:
    """A pod of ``kind_key``'s object as its operator labels it (an orphaned pod has no
    ownerReference any more)."""
    labels = {"job": {"batch.kubernetes.io/job-name": name,
                      "batch.kubernetes.io/controller-uid": uid},
              "jobset": {"jobset.sigs.k8s.io/jobset-name": name,
                         "jobset.sigs.k8s.io/jobset-uid": uid},
              "pytorchjob": {"training.kubeflow.org/job-name": name,
                             "training.kubeflow.org/operator-name": "pytorchjob-controller"},
              }[kind_key]
    meta: dict[str, Any] = {"name": f"{name}-{uid}-{i}", "namespace": NS, "labels": labels,
                            "uid": f"pod-{uid}-{i}", "resourceVersion": "1"}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-03T14:00:00Z"
    if owner_ref:
        kind = KINDS[kind_key][0]
        meta["ownerReferences"] = [{"apiVersion": kind.resource.api_version,
                                    "kind": kind.kind, "name": name, "uid": uid,
                                    "controller": True}]
    # A pod past Pending was bound to a node.
    spec = {"nodeName": "a100-0"} if phase != "Pending" else {}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
            "status": {"phase": phase}}


def finished_reason(ctx: _Ctx, wl_name: str) -> str | None:
    for body in ctx.client.status_writes:
        if body["metadata"]["name"] == wl_name:
            for c in body["status"]["conditions"]:
                if c["type"] == "Finished" and c["status"] == "True":
                    return str(c["reason"])
    return None


def test_an_orphan_is_finished_once_its_pods_are_gone() -> None:
    rec, ctx = reconciler()
    wl = workload("job", "train", "u1", owned=False, labelled=True)
    ctx.store(WL).put(wl)
    running = pod("job", "train", "u1", 0, phase="Running")
    ctx.store(POD).put(running)
    assert asyncio.run(rec.reconcile_workload(NS, wl["metadata"]["name"])) is not None
    assert finished_reason(ctx, wl["metadata"]["name"]) is None  # the pod holds the GPUs
    ctx.store(POD).put({**running, "status": {"phase": "Failed"},
                        "metadata": {**running["metadata"], "resourceVersion": "2"}})
    assert asyncio.run(rec.reconcile_workload(NS, wl["metadata"]["name"])) is None
    assert finished_reason(ctx, wl["metadata"]["name"]) == OWNER_NOT_FOUND


def test_a_workload_created_without_owner_or_job_uid_is_left_alone() -> None:
    rec, ctx = reconciler()
    wl = workload("job", "perf", "u2", owned=False, labelled=False)
    ctx.store(WL).put(wl)
    assert asyncio.run(rec.reconcile_workload(NS, wl["metadata"]["name"])) is None
    assert ctx.client.status_writes == []


def test_a_multikueue_copy_from_a_kueue_manager_is_not_an_orphan() -> None:
    """Kueue v0.17.1's manager copies every label of its Workload to the worker (its
    ``cloneForCreate``), ``kueue.x-k8s.io/job-uid`` included: that uid names the manager's Job,
    so the ownerless copy waiting for its Job on a pykueue worker is not orphaned (it was
    Finished OwnerNotFound at once, and Kueue's manager mirrored that Finished back:
    hack/multikueue_interop.py direction b)."""
    rec, ctx = reconciler()
    wl = workload("job", "interop-b-1", "manager-job-uid", owned=False, labelled=True)
    wl["metadata"]["labels"]["kueue.x-k8s.io/multikueue-origin"] = "multikueue"
    ctx.store(WL).put(wl)
    assert asyncio.run(rec.reconcile_workload(NS, wl["metadata"]["name"])) is None
    assert finished_reason(ctx, wl["metadata"]["name"]) is None
    assert ctx.client.status_writes == []


def test_pods_of_matches_by_name_and_uid_not_by_name_alone() -> None:
    other = pod("pytorchjob", "ddp", "old", 0, phase="Running", owner_ref=True)
    mine = pod("pytorchjob", "ddp", "new", 1, phase="Running", owner_ref=True)
    orphan = pod("pytorchjob", "ddp", "old", 2, phase="Running")
    obj = owner("pytorchjob", "ddp", "new")
    assert [p["metadata"]["name"] for p in pods_of(PYTORCHJOB, [other, mine], obj)] == [
        mine["metadata"]["name"]]
    old_wl = workload("pytorchjob", "ddp", "old", owned=False, labelled=True)
    assert [p["metadata"]["name"] for p in pods_of_workload(
        [JOB, JOBSET, PYTORCHJOB], [other, mine, orphan], old_wl, "old")] == [
        other["metadata"]["name"], orphan["metadata"]["name"]]


PHASES = st.sampled_from(["Pending", "Running", "Succeeded", "Failed"])
SCENARIO = st.fixed_dictionaries({
    "kind": st.sampled_from(sorted(KINDS)),
    "owned": st.booleans(),
    "labelled": st.booleans(),
    "owner": st.sampled_from(["gone", "deleting", "other-uid"]),
    "pods": st.lists(st.tuples(PHASES, st.booleans(), st.booleans()), max_size=3),
})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(SCENARIO, min_size=1, max_size=4))
def test_no_workload_whose_owner_is_gone_holds_quota_past_one_resync_after_its_pods(
        scenarios: list[dict[str, Any]]) -> None:
    rec, ctx = reconciler()
    expect: dict[str, bool] = {}
    for i, sc in enumerate(scenarios):
        name, uid = f"j{i}", f"uid-{i}"
        wl = workload(sc["kind"], name, uid, owned=sc["owned"], labelled=sc["labelled"])
        ctx.store(WL).put(wl)
        if sc["owner"] == "deleting":
            ctx.store(sc["kind"]).put(owner(sc["kind"], name, uid, deleting=True))
        elif sc["owner"] == "other-uid":  # same name, created again
            ctx.store(sc["kind"]).put(owner(sc["kind"], name, f"new-{uid}"))
        holding = False
        for j, (phase, deleting, other) in enumerate(sc["pods"]):
            p = pod(sc["kind"], name, f"new-{uid}" if other else uid, j, phase=phase,
                    deleting=deleting, owner_ref=other)
            ctx.store(POD).put(p)
            # A terminal pod holds no quota, even while being deleted (KEP-10076 OnTerminal),
            # nor a Pending one being deleted (never bound to a node: it never runs).
            holding |= not other and (phase == "Running"
                                      or (phase == "Pending" and not deleting))
        orphan = not sc["owned"] and sc["labelled"] and sc["owner"] != "deleting"
        expect[wl["metadata"]["name"]] = orphan
        again = asyncio.run(rec.reconcile_workload(NS, wl["metadata"]["name"]))
        got = finished_reason(ctx, wl["metadata"]["name"])
        assert got == (OWNER_NOT_FOUND if orphan and not holding else None), sc
        if orphan and holding:
            assert again is not None, sc  # looked at again: the quota is not forgotten
    # Every pod and deleting owner gone: one more pass (one resync) finishes every orphan.
    for key in [POD, *KINDS]:
        for obj_key in ctx.store(key).keys():
            ctx.store(key).remove(obj_key)
    for i, sc in enumerate(scenarios):
        wl_name = KINDS[sc["kind"]][0].workload_name({"metadata": {"name": f"j{i}",
                                                                   "uid": f"uid-{i}"}})
        asyncio.run(rec.reconcile_workload(NS, wl_name))
        orphaned = not sc["owned"] and sc["labelled"]
        assert (finished_reason(ctx, wl_name) == OWNER_NOT_FOUND) == orphaned, sc


def test_a_failed_pytorchjob_keeps_its_quota_while_its_pods_run() -> None:
    """Failed with ``cleanPodPolicy: None``: its pods run on, so its Workload is not Finished
    (its quota kept) until they end; the kind's status saying 0 active does not count."""
    rec, ctx = reconciler()
    ctx.settings = Settings()  # type: ignore[attr-defined]
    obj = owner("pytorchjob", "ddp", "u9")
    obj["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "lq"}
    obj["spec"] = {"runPolicy": {"suspend": False}, "pytorchReplicaSpecs": {}}
    obj["status"] = {"conditions": [{"type": "Failed", "status": "True", "message": "x"}],
                     "replicaStatuses": {"Worker": {"active": 0}}}
    ctx.store("pytorchjob").put(obj)
    wl = workload("pytorchjob", "ddp", "u9", owned=True, labelled=True)
    ctx.store(WL).put(wl)
    running = pod("pytorchjob", "ddp", "u9", 0, phase="Running", owner_ref=True)
    ctx.store(POD).put(running)
    assert asyncio.run(rec.reconcile_object(PYTORCHJOB, NS, "ddp")) is not None
    assert finished_reason(ctx, wl["metadata"]["name"]) is None
    ctx.store(POD).remove(f"{NS}/{running['metadata']['name']}")
    assert asyncio.run(rec.reconcile_object(PYTORCHJOB, NS, "ddp")) is None
    assert finished_reason(ctx, wl["metadata"]["name"]) == "Failed"


def _pod(labels: dict[str, str], controller: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "ns", "labels": labels}
    if controller is not None:
        meta["ownerReferences"] = [{**controller, "controller": True, "name": "x"}]
    return {"metadata": meta, "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Running"}}


def test_a_pod_with_a_jobs_name_label_and_no_owner_is_not_the_jobs() -> None:
    """A pod a tenant creates with a job's name label and no controller holds none of that
    job's quota while the job exists (else one 10m-CPU pod keeps an evicted job's GPUs
    reserved and stops a reclaim), nor does one a batch Job controls (the training-operator
    makes none: ``tests/unit/test_kinds_being_deleted.py``); the job's own pods do, and so do
    pods of a job deleted with ``--cascade=orphan`` (their ownerReference went with it)."""
    job = {"metadata": {"name": "hog", "uid": "u1", "namespace": "ns"}}
    fake = _pod({"batch.kubernetes.io/job-name": "hog"})
    real = _pod({"batch.kubernetes.io/job-name": "hog", "batch.kubernetes.io/controller-uid": "u1"},
                {"apiVersion": "batch/v1", "kind": "Job", "uid": "u1"})
    assert pods_of(JOB, [fake, real], job) == [real]
    torch = {"metadata": {"name": "ddp", "uid": "u2", "namespace": "ns"}}
    name = {"training.kubeflow.org/job-name": "ddp",
            "training.kubeflow.org/operator-name": "pytorchjob-controller"}
    fake = _pod(name)
    forged = _pod(name, {"apiVersion": "v1", "kind": "ConfigMap", "uid": "u9"})
    own = _pod(name, {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "uid": "u2"})
    other = _pod(name, {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "uid": "u3"})
    by_a_job = _pod(name, {"apiVersion": "batch/v1", "kind": "Job", "uid": "u4"})
    assert pods_of(PYTORCHJOB, [fake, forged, own, other, by_a_job], torch) == [own]
    assert pod_of(PYTORCHJOB, fake, "ddp", "u2", owner_gone=True)


def test_the_pods_of_an_orphaned_multikueue_copy_hold_its_quota() -> None:
    """A worker's Job deleted with ``--cascade=orphan``: the copy it adopted is named after the
    manager's Job (another uid), so its pods are found by the uid it was adopted for
    (``pykueue.dev/adopted-by``), not by the name Kueue would give the worker's Job."""
    running = pod("job", "train", "worker-uid", 0, phase="Running")
    copy_ = workload("job", "train", "manager-uid", owned=False, labelled=True)
    copy_["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] = "worker-uid"
    assert pods_of_workload([JOB], [running], copy_, "worker-uid") == []
    copy_["metadata"]["annotations"] = {"pykueue.dev/adopted-by": "worker-uid"}
    assert pods_of_workload([JOB], [running], copy_, "worker-uid") == [running]


def _deleting_client(ctx: _Ctx) -> list[str]:
    """Give ``ctx`` a client ``delete`` that marks the pod being deleted in the Pod store (as
    the watch then shows it); returns the list of ``name/uid`` deleted."""
    deleted: list[str] = []

    async def delete(res: Any, name: str, namespace: str = "", **kw: Any) -> None:
        assert res is PODS
        deleted.append(f"{name}/{kw.get('uid')}")
        pod_ = copy.deepcopy(ctx.store(POD).get(f"{namespace}/{name}"))
        pod_["metadata"]["deletionTimestamp"] = "2026-12-03T15:00:00Z"
        ctx.store(POD).put(pod_)

    ctx.client.delete = delete  # type: ignore[attr-defined]
    return deleted


def _orphan_with_pods(*, evicted: bool = False, active: bool = True
                      ) -> tuple[JobReconciler, _Ctx, str, list[str]]:
    rec, ctx = reconciler()
    deleted = _deleting_client(ctx)
    wl = workload("job", "low", "u1", owned=False, labelled=True)
    if evicted:
        wl["status"]["conditions"].append({"type": "Evicted", "status": "True",
                                           "reason": "Preempted", "message": "Preempted"})
    if not active:
        wl["spec"]["active"] = False
    wl["spec"]["podSets"] = [{"name": "main", "count": 2}]
    ctx.store(WL).put(wl)
    for i in range(2):
        run = pod("job", "low", "u1", i, phase="Running")
        run["metadata"]["labels"][PODSET_LABEL] = "main"  # as the admission's start set it
        ctx.store(POD).put(run)
    # Not the orphaned Job's: another Job's pod of the same name, and a bare pod without
    # the uid label.
    ctx.store(POD).put(pod("job", "low", "u2", 0, phase="Running", owner_ref=True))
    bare = pod("job", "low", "u1", 9, phase="Running")
    del bare["metadata"]["labels"]["batch.kubernetes.io/controller-uid"]
    ctx.store(POD).put(bare)
    return rec, ctx, wl["metadata"]["name"], deleted


def test_an_evicted_orphan_has_its_pods_deleted_and_is_finished_once_they_are_gone() -> None:
    """break26 F3: ``kubectl delete job --cascade=orphan`` left pods no controller stops; the
    orphaned Workload, preempted, waited for them for as long as they ran."""
    rec, ctx, name, deleted = _orphan_with_pods(evicted=True)
    assert asyncio.run(rec.reconcile_workload(NS, name)) is not None
    assert sorted(deleted) == ["low-u1-0/pod-u1-0", "low-u1-1/pod-u1-1"]
    assert finished_reason(ctx, name) is None  # killed, not yet gone: the quota stays
    assert asyncio.run(rec.reconcile_workload(NS, name)) is not None
    assert len(deleted) == 2  # already being deleted: not deleted again
    for i in range(2):
        ctx.store(POD).remove(f"{NS}/low-u1-{i}")
    assert asyncio.run(rec.reconcile_workload(NS, name)) is None
    assert finished_reason(ctx, name) == OWNER_NOT_FOUND


def test_a_deactivated_orphan_has_its_pods_deleted() -> None:
    rec, _, name, deleted = _orphan_with_pods(active=False)
    asyncio.run(rec.reconcile_workload(NS, name))
    assert sorted(deleted) == ["low-u1-0/pod-u1-0", "low-u1-1/pod-u1-1"]


def test_an_admitted_orphans_pods_run_on() -> None:
    rec, ctx, name, deleted = _orphan_with_pods()
    assert asyncio.run(rec.reconcile_workload(NS, name)) is not None
    assert deleted == []
    assert finished_reason(ctx, name) is None


def _evicted_pytorchjob_orphan() -> tuple[JobReconciler, _Ctx, str, list[str]]:
    """The orphaned PyTorchJob ``train``'s Workload (podSets ``master``, ``worker``),
    preempted, with one of its own running pods."""
    rec, ctx = reconciler()
    deleted = _deleting_client(ctx)
    wl = workload("pytorchjob", "train", "pt-1", owned=False, labelled=True)
    wl["spec"]["podSets"] = [{"name": "master", "count": 1}, {"name": "worker", "count": 1}]
    wl["status"]["conditions"].append({"type": "Evicted", "status": "True",
                                       "reason": "Preempted", "message": "Preempted"})
    ctx.store(WL).put(wl)
    own = pod("pytorchjob", "train", "pt-1", 0, phase="Running")
    own["metadata"]["labels"][PODSET_LABEL] = "master"
    ctx.store(POD).put(own)
    return rec, ctx, wl["metadata"]["name"], deleted


def test_an_evicted_orphan_deletes_no_pod_another_workload_owns_or_counts() -> None:
    """brk27 L1: every Kubeflow kind labels its pods ``training.kubeflow.org/job-name``, so
    the evicted orphaned PyTorchJob ``train`` deleted the running pods of the orphaned (and
    still admitted) TFJob ``train``, and a queued plain Pod carrying that label: now only
    its own pod (its podset label naming one of its podSets) is deleted."""
    rec, ctx, name, deleted = _evicted_pytorchjob_orphan()
    KINDS["tfjob"] = (TFJOB, TFJOB.resource)
    try:
        tf_wl = workload("tfjob", "train", "tf-1", owned=False, labelled=True)
        ctx.store(WL).put(tf_wl)
    finally:
        del KINDS["tfjob"]
    tf_pod = pod("pytorchjob", "train", "tf-1", 0, phase="Running")
    tf_pod["metadata"]["labels"].update({PODSET_LABEL: "worker",
                                         "training.kubeflow.org/operator-name": "tfjob-controller"})
    bare = pod("pytorchjob", "train", "bare", 0, phase="Running")
    bare["metadata"]["labels"][PODSET_LABEL] = "worker"
    ctx.store(WL).put({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {
        "name": "pod-bare", "namespace": NS, "uid": "wl-bare", "ownerReferences": [
            {"apiVersion": "v1", "kind": "Pod", "name": bare["metadata"]["name"],
             "uid": bare["metadata"]["uid"], "controller": True}]},
        "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": 1}]}})
    unlabelled = pod("pytorchjob", "train", "x-1", 1, phase="Running")
    for p in (tf_pod, bare, unlabelled):
        ctx.store(POD).put(p)
    asyncio.run(rec.reconcile_workload(NS, name))
    assert deleted == ["train-pt-1-0/pod-pt-1-0"]

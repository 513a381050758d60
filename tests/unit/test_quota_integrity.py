"""Quota integrity (a tenant with ``edit`` rights and full rights on the operator kinds):
in-tree autoscaling turned on by UPDATE is refused as at create, and an object whose
templates pykueue can no longer read is stopped all the same; a managed ancestor's child Job
runs no more pods than the ancestor was admitted for; the queue label cannot be removed while
the admission's scheduling is injected; an empty queue name is refused at create by every
kind's webhooks (Kueue v0.17.1 ``ValidateQueueName``)."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest

from app.config import JobsSettings, LeaderElectionSettings, Settings
from app.controllers.manager import Manager
from app.integrations import CRD_RULES, batchjob, jobset, kubeflow, ray
from app.integrations.batchjob.webhook_rules import validate_update
from app.integrations.framework import Registry
from app.integrations.kubeflow.kubeflow import PYTORCHJOB
from app.integrations.ray.ray import RAYCLUSTER, RAYJOB, RAYSERVICE
from app.kube.client import JOBS, RESOURCE_FLAVORS, WORKLOADS
from app.kube.context import CHILD_JOBS, UNLABELLED
from app.kube.informers import Store
from app.kube.leader import LeaderElector
from app.wire.names import ORIGINAL_ANNOTATION, PODSET_LABEL
from tests.recording_client import OBJECTS, RecordingClient
from tests.unit.test_jobset import A100, QUEUE, rjob
from tests.unit.test_jobset import jobset as make_jobset
from tests.unit.test_ray import group, raycluster, rayjob
from tests.unit.test_webhook import CONTROLLER, POLICY, answer, job, make_app, post, review

NS = "ns"


def _review(rules: Any, operation: str, obj: dict[str, Any], old: dict[str, Any] | None = None,
            user: str = "alice") -> dict[str, Any]:
    group_, _, version = obj["apiVersion"].rpartition("/")
    sent = review(operation, obj, old, user=user,
                  kind={"group": group_, "version": version, "kind": obj["kind"]})
    sent["request"]["resource"] = {"group": group_, "version": version,
                                   "resource": rules.plural}
    return sent


def _started(kind: Any, obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` as pykueue starts it on A100s: every podSet gets the flavor."""
    names = [t.name for t in kind.templates(obj)]
    return kind.injected(obj, {n: A100 for n in names})


# ----------------------------------------------------------------- 1. Ray autoscaling


async def test_in_tree_autoscaling_turned_on_by_update_is_refused_as_at_create() -> None:
    app = make_app()
    running = _started(RAYCLUSTER, raycluster(group("gpu", 5)))
    scaled = copy.deepcopy(running)
    scaled["spec"]["enableInTreeAutoscaling"] = True
    sent = _review(RAYCLUSTER.rules, "UPDATE", scaled, running)
    got = answer(await post(app, RAYCLUSTER.rules.validate_path, sent), sent)
    assert got["allowed"] is False
    assert "spec.enableInTreeAutoscaling" in got["status"]["message"]
    # Unqueued, or already so when stored (pykueue's rule then does not lock it): allowed.
    for old, new in ((_unqueued(running), _unqueued(scaled)), (scaled, scaled)):
        sent = _review(RAYCLUSTER.rules, "UPDATE", new, old)
        assert answer(await post(app, RAYCLUSTER.rules.validate_path, sent), sent)["allowed"]
    # The same rule for a RayJob's cluster spec.
    job_ = _started(RAYJOB, rayjob(group("gpu", 2), suspend=False))
    auto = copy.deepcopy(job_)
    auto["spec"]["rayClusterSpec"]["enableInTreeAutoscaling"] = True
    sent = _review(RAYJOB.rules, "UPDATE", auto, job_)
    got = answer(await post(app, RAYJOB.rules.validate_path, sent), sent)
    assert got["allowed"] is False and "enableInTreeAutoscaling" in got["status"]["message"]


def _unqueued(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["labels"] = {}
    out["metadata"].get("annotations", {}).pop(ORIGINAL_ANNOTATION, None)
    return out


def test_an_object_changed_into_one_pykueue_cannot_read_is_stopped_all_the_same() -> None:
    """The stop read the templates through the same refusal as the Workload
    (``enableInTreeAutoscaling``), so it raised like the mismatch it was to answer, every
    reconcile failed and the RayCluster kept running 8 workers on an admission of 5."""
    running = _started(RAYCLUSTER, raycluster(group("gpu", 5)))
    running["spec"]["suspend"] = False
    tampered = copy.deepcopy(running)
    tampered["spec"]["enableInTreeAutoscaling"] = True
    tampered["spec"]["workerGroupSpecs"][0]["replicas"] = 8
    stopped = RAYCLUSTER.restored(tampered)
    assert stopped["spec"]["suspend"] is True
    sent = raycluster(group("gpu", 5))
    assert stopped["spec"]["workerGroupSpecs"][0]["template"] == \
        sent["spec"]["workerGroupSpecs"][0]["template"]
    assert ORIGINAL_ANNOTATION not in (stopped["metadata"].get("annotations") or {})
    # A shape no kind can locate any more: suspended, its record kept for a later stop.
    torch = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
             "metadata": {"name": "ddp", "namespace": NS, "uid": "t1",
                          "labels": {QUEUE: "lq"}},
             "spec": {"runPolicy": {"suspend": True}, "pytorchReplicaSpecs": {
                 "Worker": {"replicas": 2, "template": group("w")["template"]}}}}
    started = _started(PYTORCHJOB, torch)
    started["spec"]["pytorchReplicaSpecs"]["Sidecar"] = {"replicas": 4}
    stopped = PYTORCHJOB.restored(started)
    assert stopped["spec"]["runPolicy"]["suspend"] is True
    assert ORIGINAL_ANNOTATION in stopped["metadata"]["annotations"]


# ----------------------------------------------------------------- 2. managed ancestors


def test_each_ancestor_kind_names_the_jobs_its_operator_makes_and_their_share() -> None:
    js = make_jobset(rjob("driver", None, None), rjob("workers", 2, 3, completions=2))
    assert jobset.KIND.child_jobs(js) == {"train-driver-0": 1, "train-workers-0": 2,
                                          "train-workers-1": 2}
    mpi = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
           "metadata": {"name": "pi", "namespace": NS, "uid": "m1", "labels": {QUEUE: "lq"}},
           "spec": {"mpiReplicaSpecs": {"Launcher": {"replicas": 1, "template": {}},
                                        "Worker": {"replicas": 4, "template": {}}}}}
    assert kubeflow.MPIJOB.child_jobs(mpi) == {"pi-launcher": 1}
    assert RAYJOB.child_jobs(rayjob(group("gpu"))) == {"tune": 1}
    assert RAYJOB.child_jobs(rayjob(group("gpu"), submissionMode="HTTPMode")) == {}
    assert PYTORCHJOB.child_jobs({}) == {} and RAYCLUSTER.child_jobs({}) == {}
    assert ray.KINDS and batchjob.KIND


def test_each_ancestor_kind_names_the_template_its_jobs_pods_were_sized_by() -> None:
    """``child_job_sized_by``: the pod template whose per-pod requests a child Job's share
    was admitted for, by the Job's name only (brk32 H1, H3); None for a Job no share is."""
    def named(name: str) -> dict[str, Any]:
        return {"metadata": {"name": name}}
    js = make_jobset(rjob("driver", None, None, gpu=4), rjob("workers", 2, 3, completions=2))
    gpus = [(n, jobset.KIND.child_job_sized_by(js, named(n))) for n in (
        "train-driver-0", "train-workers-1", "train-workers-2", "train-workers-01", "other")]
    assert [(n, t and t["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"])
            for n, t in gpus] == [("train-driver-0", "4"), ("train-workers-1", "1"),
                                  ("train-workers-2", None), ("train-workers-01", None),
                                  ("other", None)]
    launcher = {"spec": {"containers": [{"name": "l", "resources": {"requests": {"cpu": "1"}}}]}}
    mpi = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
           "metadata": {"name": "pi", "namespace": NS, "uid": "m1", "labels": {QUEUE: "lq"}},
           "spec": {"mpiReplicaSpecs": {"Launcher": {"replicas": 1, "template": launcher},
                                        "Worker": {"replicas": 4, "template": {}}}}}
    assert kubeflow.MPIJOB.child_job_sized_by(mpi, named("pi-launcher")) == launcher
    assert kubeflow.MPIJOB.child_job_sized_by(mpi, named("pi-worker")) is None
    assert PYTORCHJOB.child_job_sized_by({}, named("x")) is None
    submitter = RAYJOB.child_job_sized_by(rayjob(group("gpu")), named("tune"))
    assert submitter is not None and submitter["spec"]["containers"], "KubeRay's default"
    assert RAYJOB.child_job_sized_by(rayjob(group("gpu")), named("tune-x")) is None


def _admitted_workload(owner: dict[str, Any], name: str) -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {
        "name": name, "namespace": NS, "uid": "w1", "resourceVersion": "1",
        "ownerReferences": [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                             "name": owner["metadata"]["name"],
                             "uid": owner["metadata"]["uid"], "controller": True}]},
        "spec": {"queueName": "lq", "podSets": [{"name": "workers", "count": 2, "template": {
            "spec": {"containers": [{"name": "c"}]}}}]},
        "status": {"admission": {"clusterQueue": "cq", "podSetAssignments": [
            {"name": "workers", "count": 2, "flavors": {"cpu": "default-flavor"}}]},
            "conditions": [{"type": t, "status": "True", "reason": t, "message": "",
                            "lastTransitionTime": "2026-12-01T06:00:00Z"}
                           for t in ("QuotaReserved", "Admitted")]}}


def _child_job(name: str, parallelism: int, owner: dict[str, Any],
               labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": name, "namespace": NS, "uid": f"c-{name}", "resourceVersion": "1",
        "labels": labels or {}, "ownerReferences": [
            {"apiVersion": owner["apiVersion"], "kind": owner["kind"],
             "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
             "controller": True}]},
        "spec": {"suspend": False, "parallelism": parallelism, "completions": parallelism,
                 "completionMode": "Indexed", "template": {"spec": {
                     "restartPolicy": "Never", "containers": [{"name": "c"}]}}}}


class _ServesJobSets(RecordingClient):
    """Discovery answers for JobSets (an optional kind is left out unless served)."""

    async def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        res = jobset.KIND.resource
        if path == f"/apis/{res.api_version}":
            return {"resources": [{"name": res.plural}]}
        return await super().request(method, path)


def _leading(monkeypatch: pytest.MonkeyPatch, client: RecordingClient,
             jobs: JobsSettings | None = None, registry: Registry | None = None) -> Manager:
    async def lead(self: LeaderElector) -> None:
        self._set(True)
        await asyncio.Event().wait()

    monkeypatch.setattr(LeaderElector, "run", lead)
    settings = Settings(leader_election=LeaderElectionSettings(enabled=True),
                        jobs=jobs or JobsSettings())
    return Manager(settings, client=client, watch_nodes=False,  # type: ignore[arg-type]
                   registry=registry or Registry([batchjob.KIND, jobset.KIND]))


async def test_a_child_job_scaled_beyond_its_ancestors_admission_is_set_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """JobSet ``train`` admitted for 2 Jobs of 1 pod: its child ``train-workers-0`` raised to
    parallelism 6 is set back to 1; a Job hung under it that its operator does not make
    gets 0; a child within its share is left alone."""
    js = make_jobset(rjob("workers", 2, 1), suspend=False)
    js["metadata"]["namespace"] = NS
    wl = _admitted_workload(js, jobset.KIND.workload_name(js))
    scaled = _child_job("train-workers-0", 6, js)
    forged = _child_job("train-extra", 2, js, labels={QUEUE: "lq"})
    fine = _child_job("train-workers-1", 1, js)
    client = _ServesJobSets({**OBJECTS, "jobsets": [js], "workloads": [wl],
                              JOBS.plural: [scaled, forged, fine]})
    m = _leading(monkeypatch, client)
    await m.start()
    try:
        await m.wait_ready(10)
        assert m.ctx is not None
        assert m.ctx.informers.informers[CHILD_JOBS].label_selector == UNLABELLED
        for _ in range(100):
            written = {b["metadata"]["name"]: b["spec"]["parallelism"]
                       for v, r, b in client.bodies if (v, r) == ("replace", "jobs")}
            if len(written) >= 2:
                break
            await asyncio.sleep(0.05)
    finally:
        await m.stop()
    assert written == {"train-workers-0": 1, "train-extra": 0}, client.bodies


A100_FLAVOR = {"metadata": {"name": "a100-flavor", "resourceVersion": "1"},
               "spec": {"nodeLabels": dict(A100[0]), "tolerations": list(A100[1])}}


def _orphan(name: str, podset: bool) -> dict[str, Any]:
    """An unlabelled running Job without an owner; with ``podset``, its template as a started
    JobSet's replicatedJob left it: the podset label, A100's nodeSelector and toleration."""
    out = _child_job(name, 6, {"apiVersion": "v1", "kind": "X", "metadata": {
        "name": "gone", "uid": "gone"}})
    del out["metadata"]["ownerReferences"]
    if podset:
        tpl = out["spec"]["template"]
        tpl["metadata"] = {"labels": {PODSET_LABEL: "workers", "app": "a"}}
        tpl["spec"]["nodeSelector"] = {**A100[0], "zone": "z"}
        tpl["spec"]["tolerations"] = [*A100[1], {"key": "k", "operator": "Exists"}]
    return out


async def test_an_orphaned_child_job_carrying_its_ancestors_admission_is_stopped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A JobSet deleted with ``--cascade=orphan`` leaves ``train-workers-0`` without owner,
    its template still started (raised to 6 pods): it is suspended with the podset label,
    the flavor's nodeSelector entry and toleration taken out (what the user wrote stays);
    an unlabelled Job that never carried an admission is left alone."""
    orphan, plain = _orphan("train-workers-0", True), _orphan("mine", False)
    forged = _orphan("forged", True)  # a controller of a kind pykueue does not queue
    forged["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap",
                                              "name": "cm", "uid": "cm", "controller": True}]
    client = _ServesJobSets({**OBJECTS, "resourceflavors": [A100_FLAVOR],
                              JOBS.plural: [orphan, plain, forged]})
    m = _leading(monkeypatch, client)
    await m.start()
    try:
        await m.wait_ready(10)
        for _ in range(100):
            written = [b for v, r, b in client.bodies if (v, r) == ("replace", "jobs")]
            if len({b["metadata"]["name"] for b in written}) >= 2 and len(written) >= 4:
                break
            await asyncio.sleep(0.05)
    finally:
        await m.stop()
    assert {b["metadata"]["name"] for b in written} == {"train-workers-0", "forged"}, \
        client.bodies
    last = [b for b in written if b["metadata"]["name"] == "train-workers-0"][-1]
    assert last["spec"]["suspend"] is True
    tpl = last["spec"]["template"]
    assert tpl["metadata"]["labels"] == {"app": "a"}
    assert tpl["spec"]["nodeSelector"] == {"zone": "z"}
    assert tpl["spec"]["tolerations"] == [{"key": "k", "operator": "Exists"}]


async def test_a_running_jobset_whose_orphaned_job_carries_an_admission_is_stopped_too(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A TrainJob deleted with ``--cascade=orphan`` leaves its JobSet (unlabelled, no owner)
    running a Job whose template carries the admission: the Job is stopped and so is the
    JobSet, which would otherwise resume it with the admission's scheduling
    (jobset's ``resumeJobsIfNecessary``)."""
    js = make_jobset(rjob("workers", 1, 1), suspend=False)
    js["metadata"]["namespace"] = NS
    js["metadata"].pop("labels", None)
    job = _orphan("train-workers-0", True)
    job["metadata"]["ownerReferences"] = _child_job("x", 1, js)["metadata"]["ownerReferences"]
    client = _ServesJobSets({**OBJECTS, "resourceflavors": [A100_FLAVOR], "jobsets": [js],
                              JOBS.plural: [job]})
    m = _leading(monkeypatch, client)
    await m.start()
    try:
        await m.wait_ready(10)
        for _ in range(100):
            stopped = [b for v, r, b in client.bodies if (v, r) == ("replace", "jobsets")]
            if stopped:
                break
            await asyncio.sleep(0.05)
    finally:
        await m.stop()
    assert [b["spec"]["suspend"] for v, r, b in client.bodies
            if (v, r) == ("replace", "jobs")][-1:] == [True], client.bodies
    assert [b["spec"]["suspend"] for b in stopped] == [True], client.bodies


def test_a_rayjobs_cluster_raised_beyond_the_admission_is_held_to_it() -> None:
    """``held_to``: a worker group above its admitted count gets replicas (and a higher
    minReplicas) lowered to it, over numOfHosts; a group within it, or absent from the
    admission with no pod, is unchanged."""
    rc = raycluster(group("gpu", 4, minReplicas=4, maxReplicas=8), group("tpu", 2, numOfHosts=2),
                    group("idle", 0))
    held = ray.ray.held_to(rc, {"head": 1, "gpu": 1, "tpu": 4})
    assert held is not None
    assert [(g["replicas"], g.get("minReplicas")) for g in held["spec"]["workerGroupSpecs"]] == [
        (1, 1), (2, None), (0, None)]
    assert ray.ray.held_to(held, {"head": 1, "gpu": 1, "tpu": 4}) is None
    assert ray.ray.held_to(rc, {"gpu": 1})["spec"]["workerGroupSpecs"][1]["replicas"] == 0


class _Store(dict):  # type: ignore[type-arg]
    def put(self, obj: dict[str, Any]) -> None:
        self[obj["metadata"]["name"]] = obj

    def __iter__(self) -> Any:
        return iter(list(self.values()))


class _Ctx:
    """What ``RayCluster.settle`` reads: a clock, a client that records replaces, a store."""

    def __init__(self, now: float) -> None:
        self.now, self.replaced, self.stored = now, [], _Store()

        class Client:
            async def replace(_, res: Any, body: dict[str, Any]) -> dict[str, Any]:
                self.replaced.append(body)
                return body
        self.client = Client()

    def clock(self) -> float:
        return self.now

    def store(self, key: str) -> _Store:
        return self.stored


async def test_a_started_raycluster_lacking_pods_is_resynced_every_ten_seconds() -> None:
    """``RayCluster.settle``: a started cluster (head + 2 workers) not ``ready`` with 1 pod
    gets the resync annotation, again only 10 s later; a ready one, one with its pods, or a
    suspended one, none."""
    rc = raycluster(group("gpu", 2))
    rc["spec"]["suspend"] = False
    ctx = _Ctx(1000.0)
    assert await RAYCLUSTER.settle(ctx, rc, 1) == 10.0
    (body,) = ctx.replaced
    assert body["metadata"]["annotations"][ray.ray.RESYNC_ANNOTATION] == "1000"
    ctx.now = 1005.0
    assert await RAYCLUSTER.settle(ctx, body, 1) == 10.0 and len(ctx.replaced) == 1
    ctx.now = 1010.0
    assert await RAYCLUSTER.settle(ctx, body, 1) == 10.0 and len(ctx.replaced) == 2
    assert await RAYCLUSTER.settle(ctx, rc, 3) is None
    assert await RAYCLUSTER.settle(ctx, {**rc, "status": {"state": "ready"}}, 1) is None
    assert await RAYCLUSTER.settle(ctx, raycluster(group("gpu", 2)), 0) is None
    quiet = raycluster(group("gpu", 2, suspend=True))
    quiet["spec"]["suspend"] = False
    assert await RAYCLUSTER.settle(ctx, quiet, 1) is None  # its one group suspended
    assert len(ctx.replaced) == 2


def test_raising_the_workers_of_a_queued_rayjobs_cluster_is_refused_but_to_pykueue() -> None:
    """The RayCluster a queued RayJob made (its queue label copied): a worker group raised,
    or a group added, is refused to a tenant, allowed to pykueue; lowering it, or the same
    on a RayJob's cluster without a queue label (not queued), is allowed."""
    old = raycluster(group("gpu", 1), owner="RayJob")
    old["spec"]["suspend"] = False
    raised = copy.deepcopy(old)
    raised["spec"]["workerGroupSpecs"][0]["replicas"] = 4
    added = copy.deepcopy(old)
    added["spec"]["workerGroupSpecs"].append(group("more", 1))
    rules = RAYCLUSTER.rules
    for new in (raised, added):
        (err,) = rules.validate(old, new, "alice", POLICY)
        assert "spec.workerGroupSpecs[" in err and "belongs to a queued RayJob" in err, err
        assert rules.validate(old, new, CONTROLLER, POLICY) == []
    assert rules.validate(raised, old, "alice", POLICY) == []
    unqueued = copy.deepcopy(old)
    del unqueued["metadata"]["labels"]
    assert rules.validate(unqueued, raised, "alice", POLICY) == []
    standalone = raycluster(group("gpu", 1))
    standalone["spec"]["suspend"] = False
    grown = copy.deepcopy(standalone)
    grown["spec"]["workerGroupSpecs"][0]["replicas"] = 4
    assert rules.validate(standalone, grown, "alice", POLICY) == []


def test_the_unlabelled_jobs_informer_is_not_needed_when_every_job_is_listed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    m = _leading(monkeypatch, RecordingClient(), JobsSettings(manage_jobs_without_queue_name=True))
    assert m._selector(batchjob.KIND) is None  # the Job informer lists every Job then


# ----------------------------------------------------------------- 3. queue-label escape


def _running_started_job() -> dict[str, Any]:
    started = job("train", queue="lq", suspend=False)
    started["metadata"]["annotations"] = {ORIGINAL_ANNOTATION: "{}"}
    started["spec"]["template"].setdefault("metadata", {})["labels"] = {PODSET_LABEL: "main"}
    started["spec"]["template"]["spec"]["nodeSelector"] = dict(A100[0])
    return started


@pytest.mark.parametrize("drop_record", [False, True], ids=["record kept", "record dropped"])
def test_removing_the_queue_label_of_a_job_carrying_its_admissions_scheduling_is_refused(
        drop_record: bool) -> None:
    old = _running_started_job()
    if drop_record:  # a first write took the record off; the template still says podset
        old["metadata"]["annotations"] = {}
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {}
    new["spec"]["suspend"] = True
    errors = validate_update(old, new, "alice", True, POLICY)
    assert errors and "cannot be removed" in errors[0] and "injected" in errors[0], errors
    assert validate_update(old, new, CONTROLLER, True, POLICY) == []
    # Once pykueue stopped it (template restored, record gone), the label may go.
    stopped = job("train", queue="lq", suspend=True)
    unlabelled = job("train", queue=None, suspend=True)
    assert validate_update(stopped, unlabelled, "alice", None, POLICY) == []


async def test_removing_the_queue_label_of_a_started_operator_object_is_refused() -> None:
    app = make_app()
    running = _started(RAYCLUSTER, raycluster(group("gpu", 2)))
    running["spec"]["suspend"] = False
    escaped = copy.deepcopy(running)
    escaped["metadata"]["labels"] = {}
    escaped["spec"]["suspend"] = True
    sent = _review(RAYCLUSTER.rules, "UPDATE", escaped, running)
    got = answer(await post(app, RAYCLUSTER.rules.validate_path, sent), sent)
    assert got["allowed"] is False and ORIGINAL_ANNOTATION in got["status"]["message"]


# ----------------------------------------------------------------- 4. empty queue name


def _empty(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["labels"] = {QUEUE: ""}
    return out


def _kind_cases() -> list[tuple[str, dict[str, Any], dict[str, str]]]:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": NS},
           "spec": {"containers": [{"name": "c"}]}}
    dep = {"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "d", "namespace": NS},
           "spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}}
    sts = {**copy.deepcopy(dep), "kind": "StatefulSet"}
    cases = [("/mutate-batch-v1-job", job("j", queue=None), {"group": "batch", "version": "v1"}),
             ("/validate-batch-v1-job", job("j", queue=None), {"group": "batch", "version": "v1"}),
             ("/mutate--v1-pod", pod, {"group": "", "version": "v1"}),
             ("/validate--v1-pod", pod, {"group": "", "version": "v1"}),
             ("/mutate-apps-v1-deployment", dep, {"group": "apps", "version": "v1"}),
             ("/mutate-apps-v1-statefulset", sts, {"group": "apps", "version": "v1"})]
    for rules in CRD_RULES:
        obj = {"apiVersion": f"{rules.group}/{rules.version}", "kind": rules.kind,
               "metadata": {"name": "x", "namespace": NS}, "spec": {}}
        for path in (rules.mutate_path, rules.validate_path):
            cases.append((path, obj, {"group": rules.group, "version": rules.version}))
    return cases


async def test_an_empty_queue_name_is_refused_at_create_by_every_kinds_webhooks() -> None:
    app = make_app()
    for path, obj, gv in _kind_cases():
        sent = review("CREATE", _empty(obj), user="alice", kind={**gv, "kind": obj["kind"]})
        got = answer(await post(app, path, sent), sent)
        assert got["allowed"] is False, path
        assert f"metadata.labels[{QUEUE}]: must not be empty" in got["status"]["message"], path
        # Without the label: not refused for it.
        sent = review("CREATE", obj, user="alice", kind={**gv, "kind": obj["kind"]})
        got = answer(await post(app, path, sent), sent)
        assert "must not be empty" not in json.dumps(got), path


async def test_an_update_that_empties_the_queue_name_is_refused_one_stored_so_is_not() -> None:
    app = make_app()
    old = job("j", queue="lq", suspend=True)
    sent = review("UPDATE", _empty(old), old)
    got = answer(await post(app, "/validate-batch-v1-job", sent), sent)
    assert got["allowed"] is False and "must not be empty" in got["status"]["message"]
    stored = _empty(old)
    changed = copy.deepcopy(stored)
    changed["metadata"]["annotations"] = {"note": "x"}
    sent = review("UPDATE", changed, stored)
    assert answer(await post(app, "/validate-batch-v1-job", sent), sent)["allowed"] is True


async def test_the_job_webhook_refuses_raising_a_labelled_child_beyond_its_share() -> None:
    from tests.unit.test_managed_ancestor import _lookup, owned

    js = make_jobset(rjob("workers", 2, 1), suspend=False)
    js["metadata"].update(namespace=NS, uid="p1")
    app = make_app(admission=_lookup(js))
    running = owned(job("train-workers-0", queue="lq", suspend=False),
                    "jobset.x-k8s.io/v1alpha2", "JobSet", "train", uid="p1")
    running["spec"]["parallelism"] = running["spec"]["completions"] = 1
    raised = copy.deepcopy(running)
    raised["spec"]["parallelism"] = raised["spec"]["completions"] = 6
    sent = review("UPDATE", raised, old=running, user="alice")
    got = answer(await post(app, "/validate-batch-v1-job", sent), sent)
    assert got["allowed"] is False
    assert "at most 1 pod(s)" in got["status"]["message"], got
    for old, new, user in ((running, raised, CONTROLLER), (raised, running, "alice")):
        sent = review("UPDATE", new, old=old, user=user)
        assert answer(await post(app, "/validate-batch-v1-job", sent), sent)["allowed"] is True


# ----------------------------------------------------------------- a RayJob's RayCluster


def _rayjob_and_cluster(*groups: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any],
                                                           dict[str, Any]]:
    """A started RayJob (head + ``groups``), the RayCluster KubeRay made from it (running,
    queue label removed) and the RayJob's admitted Workload (head, groups, submitter)."""
    rj = RAYJOB.injected(rayjob(*groups), {g["groupName"]: A100 for g in groups})
    rc = raycluster(owner="RayJob")
    rc["spec"] = {**copy.deepcopy(rj["spec"]["rayClusterSpec"]), "suspend": False}
    del rc["metadata"]["labels"]
    body = RAYJOB.workload_object(rayjob(*groups), priority_classes={},
                                  pod_priority_classes={})
    wl = {**body, "status": {"admission": {"clusterQueue": "cq", "podSetAssignments": [
        {"name": p["name"], "count": p["count"], "flavors": {}}
        for p in body["spec"]["podSets"]]}}}
    return rj, rc, wl


def test_worker_groups_are_held_to_worker_podsets_only() -> None:
    """``held_to``: worker groups named ``head`` or ``submitter`` (the RayJob's other
    podSets) are held to 0; two groups sharing one podSet's name share its count."""
    rc = raycluster(group("gpu", 1), group("head", 1), group("submitter", 1), group("GPU", 1))
    held = ray.ray.held_to(rc, {"gpu": 1})
    assert held is not None
    assert [g["replicas"] for g in held["spec"]["workerGroupSpecs"]] == [1, 0, 0, 0]


def test_a_template_asking_other_requests_is_set_back_and_the_cluster_stopped() -> None:
    """``with_admitted_templates``: a worker template raised to 6 GPUs is set back whole to
    the RayJob's (with its injected scheduling) and the cluster suspended; the head's too;
    an unchanged cluster, or a group the admission does not know, is left alone."""
    rj, rc, wl = _rayjob_and_cluster(group("gpu", 1))
    same, fields = ray.ray.with_admitted_templates(rc, rj, wl)
    assert (same, fields) == (rc, [])
    raised = copy.deepcopy(rc)
    raised["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {"nvidia.com/gpu": "6"}}
    raised["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"] = {}
    raised["spec"]["workerGroupSpecs"].append(group("other", 1, gpu=8))
    out, fields = ray.ray.with_admitted_templates(raised, rj, wl)
    assert fields == ["spec.headGroupSpec.template", "spec.workerGroupSpecs[0].template"]
    assert out["spec"]["suspend"] is True
    assert out["spec"]["workerGroupSpecs"][0]["template"] == \
        rj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]
    assert out["spec"]["workerGroupSpecs"][1] == group("other", 1, gpu=8)


class _Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def emit(self, obj: Any, etype: str, reason: str, message: str) -> None:
        self.events.append((reason, message))


async def test_a_rayjobs_cluster_is_held_to_the_rayjobs_admission() -> None:
    """``hold_to_ancestor``: the unlabelled cluster of an admitted RayJob with groups added
    named ``head`` and ``submitter`` gets them at 0 replicas; one whose worker asks 6 GPUs is
    set back and stopped; Event ``ExceedsAncestorAdmission``; a matching one is not
    written."""
    rj, rc, wl = _rayjob_and_cluster(group("gpu", 1))
    ctx = _Ctx(0.0)
    ctx.recorder = _Recorder()  # type: ignore[attr-defined]
    await RAYCLUSTER.hold_to_ancestor(ctx, rc, RAYJOB, rj, wl)
    assert ctx.replaced == []
    aliased = copy.deepcopy(rc)
    aliased["spec"]["workerGroupSpecs"] += [
        {**copy.deepcopy(rc["spec"]["workerGroupSpecs"][0]), "groupName": g}
        for g in ("head", "submitter")]
    await RAYCLUSTER.hold_to_ancestor(ctx, aliased, RAYJOB, rj, wl)
    (body,) = ctx.replaced
    assert [g["replicas"] for g in body["spec"]["workerGroupSpecs"]] == [1, 0, 0]
    assert body["spec"]["suspend"] is False
    raised = copy.deepcopy(rc)
    raised["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"nvidia.com/gpu": "6"}}
    await RAYCLUSTER.hold_to_ancestor(ctx, raised, RAYJOB, rj, wl)
    assert ctx.replaced[-1]["spec"]["suspend"] is True
    assert ctx.replaced[-1]["spec"]["workerGroupSpecs"][0]["template"] == \
        rc["spec"]["workerGroupSpecs"][0]["template"]
    assert [r for r, _ in ctx.recorder.events] == ["ExceedsAncestorAdmission"] * 2


def _cluster_and_a_copy(rc: dict[str, Any]) -> tuple[_Ctx, dict[str, Any]]:
    """A context storing RayCluster ``rc`` (renamed ``rc``, the older) and a copy of it
    named ``extra`` (created a day later), with an Event recorder; returns it and the
    copy."""
    rc["metadata"].update(name="rc", creationTimestamp="2026-01-01T00:00:00Z")
    extra = copy.deepcopy(rc)
    extra["metadata"].update(name="extra", creationTimestamp="2026-01-02T00:00:00Z")
    ctx = _Ctx(0.0)
    ctx.recorder = _Recorder()  # type: ignore[attr-defined]
    ctx.stored.put(rc)
    ctx.stored.put(extra)
    return ctx, extra


async def test_only_the_cluster_a_rayjob_runs_on_is_held_to_its_admission() -> None:
    """A second RayCluster claiming the admitted RayJob as controller, not the one its
    ``status.rayClusterName`` names (nor, before that is set, the oldest), is suspended with
    its workers at 0 (Event ``NotTheRayJobsCluster``); the RayJob's own is left alone."""
    rj, rc, wl = _rayjob_and_cluster(group("gpu", 1))
    ctx, extra = _cluster_and_a_copy(rc)
    for status in ({}, {"rayClusterName": "rc"}):
        rj["status"] = status
        await RAYCLUSTER.hold_to_ancestor(ctx, rc, RAYJOB, rj, wl)
        assert ctx.replaced == []
        await RAYCLUSTER.hold_to_ancestor(ctx, extra, RAYJOB, rj, wl)
        body = ctx.replaced.pop()
        assert body["spec"]["suspend"] is True
        assert [g["replicas"] for g in body["spec"]["workerGroupSpecs"]] == [0]
    assert [r for r, _ in ctx.recorder.events] == ["NotTheRayJobsCluster"] * 2


async def test_only_the_clusters_a_rayservice_runs_on_are_held_to_its_admission() -> None:
    """A RayCluster a tenant creates with a controller ownerReference to an admitted
    RayService (a copy of its cluster) is suspended with its workers at 0 (Event
    ``NotTheRayServicesCluster``); the clusters its status names (active and pending: an
    upgrade runs both), or before any is named the oldest, are left alone."""
    rj, rc, wl = _rayjob_and_cluster(group("gpu", 1))
    svc = {"apiVersion": "ray.io/v1", "kind": "RayService",
           "metadata": {"name": "tune", "namespace": "ns", "uid": "u-1"},
           "spec": {"rayClusterConfig": copy.deepcopy(rj["spec"]["rayClusterSpec"])}}
    wl = {**RAYSERVICE.workload_object(svc, priority_classes={}, pod_priority_classes={}),
          "status": wl["status"]}
    wl["status"]["admission"]["podSetAssignments"] = [
        p for p in wl["status"]["admission"]["podSetAssignments"] if p["name"] != "submitter"]
    rc["metadata"]["ownerReferences"][0]["kind"] = "RayService"
    ctx, extra = _cluster_and_a_copy(rc)
    for status in ({}, {"pendingServiceStatus": {"rayClusterName": "rc"}},
                   {"activeServiceStatus": {"rayClusterName": "rc"}}):
        svc["status"] = status
        await RAYCLUSTER.hold_to_ancestor(ctx, rc, RAYSERVICE, svc, wl)
        assert ctx.replaced == []
        await RAYCLUSTER.hold_to_ancestor(ctx, extra, RAYSERVICE, svc, wl)
        body = ctx.replaced.pop()
        assert body["spec"]["suspend"] is True
        assert [g["replicas"] for g in body["spec"]["workerGroupSpecs"]] == [0]
    svc["status"] = {"activeServiceStatus": {"rayClusterName": "rc"},
                     "pendingServiceStatus": {"rayClusterName": "extra"}}
    await RAYCLUSTER.hold_to_ancestor(ctx, extra, RAYSERVICE, svc, wl)
    assert ctx.replaced == []
    assert [r for r, _ in ctx.recorder.events] == ["NotTheRayServicesCluster"] * 3


def test_a_queued_rayjobs_cluster_refuses_other_requests_and_reserved_group_names() -> None:
    """The RayCluster a queued RayJob made (queue label copied): a template's requests
    changed, or a worker group named ``head`` or ``submitter`` added (even with 0 replicas),
    is refused to a tenant, allowed to pykueue; without the label, allowed (the reconciler
    holds it)."""
    old = raycluster(group("gpu", 1), owner="RayJob")
    old["spec"]["suspend"] = False
    more = copy.deepcopy(old)
    more["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"nvidia.com/gpu": "6"}}
    head = copy.deepcopy(old)
    head["spec"]["workerGroupSpecs"].append(group("Head", 0))
    rules = RAYCLUSTER.rules
    (err,) = rules.validate(old, more, "alice", POLICY)
    assert "spec.workerGroupSpecs[0].template" in err and "requests" in err, err
    (err,) = rules.validate(old, head, "alice", POLICY)
    assert "spec.workerGroupSpecs[1].groupName" in err, err
    for new in (more, head):
        assert rules.validate(old, new, CONTROLLER, POLICY) == []
        unqueued = copy.deepcopy(old)
        del unqueued["metadata"]["labels"]
        assert rules.validate(unqueued, new, "alice", POLICY) == []


class _ServesRay(RecordingClient):
    """Discovery answers for RayJobs and RayClusters."""

    async def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        if path == f"/apis/{RAYJOB.resource.api_version}":
            return {"resources": [{"name": "rayjobs"}, {"name": "rayclusters"}]}
        return await super().request(method, path)


async def test_an_orphaned_raycluster_carrying_its_rayjobs_admission_is_stopped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A RayJob deleted with ``--cascade=orphan`` leaves its unlabelled RayCluster without
    owner, its templates still started: it is suspended, the RayJob's start record applied
    and the flavor's scheduling and podset label taken out (Event ``AncestorGone``); an
    unlabelled cluster that never carried an admission is left alone."""
    _, rc, _ = _rayjob_and_cluster(group("gpu", 4))
    del rc["metadata"]["ownerReferences"]
    rc["metadata"]["resourceVersion"] = "1"
    plain = raycluster(group("gpu", 4))
    plain["metadata"].update(name="mine", uid="u-3", resourceVersion="1")
    del plain["metadata"]["labels"]
    plain["spec"]["suspend"] = False
    client = _ServesRay({**OBJECTS, "resourceflavors": [A100_FLAVOR],
                         "rayclusters": [rc, plain]})
    m = _leading(monkeypatch, client, registry=Registry([batchjob.KIND, RAYJOB, RAYCLUSTER]))
    await m.start()
    try:
        await m.wait_ready(10)
        for _ in range(100):
            written = [b for v, r, b in client.bodies if (v, r) == ("replace", "rayclusters")]
            if written:
                break
            await asyncio.sleep(0.05)
    finally:
        await m.stop()
    assert {b["metadata"]["name"] for b in written} == {"rc"}, client.bodies
    body = written[-1]
    assert body["spec"]["suspend"] is True
    assert ORIGINAL_ANNOTATION not in (body["metadata"].get("annotations") or {})
    tpl = body["spec"]["workerGroupSpecs"][0]["template"]
    assert PODSET_LABEL not in (tpl.get("metadata") or {}).get("labels", {})
    assert "nodeSelector" not in tpl["spec"] and "tolerations" not in tpl["spec"], tpl


def ray_stores(*clusters: dict[str, Any], workloads: list[dict[str, Any]] = (),  # type: ignore[assignment]
               events: list[tuple[str, str]] | None = None, client: Any = None) -> type:
    """A ``Context`` stand-in whose RayCluster store holds ``clusters`` and whose Workload
    store holds ``workloads`` (no ResourceFlavor); Events' (name, reason) go to ``events``,
    writes to ``client``."""
    stores = {RAYCLUSTER.key: Store(RAYCLUSTER.resource), "wl": Store(WORKLOADS),
              "rf": Store(RESOURCE_FLAVORS)}
    for obj in clusters:
        stores[RAYCLUSTER.key].put(obj)
    for obj in workloads:
        stores["wl"].put(obj)
    seen = [] if events is None else events

    class Ctx:
        class informers:  # noqa: N801
            informers = {RAYCLUSTER.key: None}

        class recorder:  # noqa: N801
            @staticmethod
            def emit(obj: dict[str, Any], kind: str, reason: str, message: str) -> None:
                seen.append((obj["metadata"]["name"], reason))

        def store(self, key: str) -> Store:
            return stores[key]

    Ctx.client = client  # type: ignore[attr-defined]
    return Ctx


def own_workload(cluster: dict[str, Any]) -> dict[str, Any]:
    """The Workload pykueue creates for RayCluster ``cluster`` queued on its own."""
    meta = cluster["metadata"]
    return {"metadata": {"name": RAYCLUSTER.workload_name(cluster), "namespace": NS,
                         "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster",
                                              "name": meta["name"], "uid": meta["uid"],
                                              "controller": True}]}}


async def test_an_orphaned_rayjobs_workload_counts_the_pods_of_its_orphaned_cluster() -> None:
    """``RayJob.made_pods``: after ``delete rayjob --cascade=orphan`` the RayJob's Workload
    counts the running pods of the RayCluster KubeRay made for it (its origin labels, the
    Workload's name hash of name and uid), not those of another cluster or RayJob uid."""
    rj = rayjob(group("gpu", 1))
    wl_name = RAYJOB.workload_name(rj)
    rc = raycluster(group("gpu", 1))
    rc["metadata"]["labels"] = {ray.ray.ORIGIN_KIND_LABEL: "RayJob",
                                ray.ray.ORIGIN_NAME_LABEL: "tune"}

    def pod(cluster: str, uid: str) -> dict[str, Any]:
        return {"metadata": {"name": f"{cluster}-p", "namespace": NS,
                             "labels": {"ray.io/cluster": cluster}, "ownerReferences": [
                                 {"apiVersion": "ray.io/v1", "kind": "RayCluster",
                                  "name": cluster, "uid": uid, "controller": True}]},
                "status": {"phase": "Running"}}

    Ctx = ray_stores(rc)
    wl = {"metadata": {"name": wl_name, "namespace": NS}}
    pods = [pod("rc", "u-2"), pod("rc", "u-9"), pod("other", "u-2")]
    assert RAYJOB.made_pods(Ctx(), wl, "u-1", pods) == 1  # type: ignore[arg-type]
    assert RAYJOB.made_pods(Ctx(), wl, "u-0", pods) == 0  # type: ignore[arg-type]
    assert RAYJOB.made_pods(Ctx(), wl, "u-1", pods[1:]) == 0  # type: ignore[arg-type]
    # The Workload records the cluster the RayJob ran on: a cluster labelled so by someone
    # else (not recorded) does not count.
    wl["metadata"]["annotations"] = {ray.ray.CLUSTERS_ANNOTATION: "rj-abcde"}
    assert RAYJOB.made_pods(Ctx(), wl, "u-1", pods) == 0  # type: ignore[arg-type]
    wl["metadata"]["annotations"] = {ray.ray.CLUSTERS_ANNOTATION: "rj-abcde,rc"}
    assert RAYJOB.made_pods(Ctx(), wl, "u-1", pods) == 1  # type: ignore[arg-type]
    # Recorded with its uid: another cluster of that name does not count ...
    wl["metadata"]["annotations"] = {ray.ray.CLUSTERS_ANNOTATION: "rc/u-7"}
    assert RAYJOB.made_pods(Ctx(), wl, "u-1", pods) == 0  # type: ignore[arg-type]
    # ... and the recorded one counts whatever labels it lost (its origin labels stripped).
    wl["metadata"]["annotations"] = {ray.ray.CLUSTERS_ANNOTATION: "rj-abcde/u-5,rc/u-2"}
    rc["metadata"]["labels"] = {}
    assert RAYJOB.made_pods(Ctx(), wl, "u-1", pods) == 1  # type: ignore[arg-type]
    # Queued on its own (the queue label KubeRay copied kept): pykueue made its Workload
    # once its pods were gone, so the pods it runs now are that Workload's.
    Ctx = ray_stores(rc, workloads=[own_workload(rc)])
    assert RAYJOB.made_pods(Ctx(), wl, "u-1", pods) == 0  # type: ignore[arg-type]
    del wl["metadata"]["annotations"]
    rc["metadata"]["labels"] = {ray.ray.ORIGIN_KIND_LABEL: "RayJob",
                                ray.ray.ORIGIN_NAME_LABEL: "tune"}
    assert RAYJOB.made_pods(Ctx(), wl, "u-1", pods) == 0  # type: ignore[arg-type]


async def test_an_orphaned_rayjobs_deleted_cluster_counts_its_pods_until_they_are_gone(
        ) -> None:
    """``RayJob.made_pods``: a recorded cluster (name and uid) already gone from the store
    (deleted in the background: its pods are killed after it, with their grace period) still
    counts its pods that hold resources (its ownerReference's uid), not another uid's nor a
    terminal one not being deleted, and not while a Workload of its own (kept while its pods
    run) accounts for them; a record without the uid does not reach gone clusters."""
    rc = raycluster(group("gpu", 1))
    wl: dict[str, Any] = {"metadata": {"name": "rayjob-tune-x", "namespace": NS,
                                       "annotations": {ray.ray.CLUSTERS_ANNOTATION: "rc/u-2"}}}

    def pod(uid: str, phase: str = "Running") -> dict[str, Any]:
        return {"metadata": {"name": f"rc-{uid}", "namespace": NS, "deletionTimestamp": "t",
                             "labels": {"ray.io/cluster": "rc"}, "ownerReferences": [
                                 {"apiVersion": "ray.io/v1", "kind": "RayCluster",
                                  "name": "rc", "uid": uid, "controller": True}]},
                "spec": {"nodeName": "a100-0"}, "status": {"phase": phase}}

    done = pod("u-2", "Succeeded")
    del done["metadata"]["deletionTimestamp"]
    pods = [pod("u-2"), pod("u-9"), done]
    assert RAYJOB.made_pods(ray_stores()(), wl, "u-1", pods) == 1  # type: ignore[arg-type]
    assert RAYJOB.made_pods(ray_stores()(), wl, "u-1", pods[1:]) == 0  # type: ignore[arg-type]
    # Its own Workload (queued on its own) still accounts for them.
    own = ray_stores(workloads=[own_workload(rc)])()
    assert RAYJOB.made_pods(own, wl, "u-1", pods) == 0  # type: ignore[arg-type]
    wl["metadata"]["annotations"] = {ray.ray.CLUSTERS_ANNOTATION: "rc"}
    assert RAYJOB.made_pods(ray_stores()(), wl, "u-1", pods) == 0  # type: ignore[arg-type]


async def test_an_orphaned_rayjobs_recorded_cluster_is_stopped_whatever_marks_it_lost(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``RayJob.stop_made``: the RayClusters the orphaned Workload records (by name and uid)
    are stopped as orphans (``RayCluster.stop_orphaned``, Warning ``AncestorGone``), also
    when a tenant stripped their queue and origin labels, start record and podset labels
    before deleting the RayJob with ``--cascade=orphan``; another cluster of that name (a
    new uid) is not, nor anything without a record."""
    rc = raycluster(group("gpu", 1))
    rc["metadata"]["labels"] = {}
    twin = copy.deepcopy(rc)
    twin["metadata"].update(name="rc2", uid="u-8")
    stopped: list[str] = []
    events: list[tuple[str, str]] = []

    async def stop_orphaned(ctx: Any, obj: dict[str, Any], why: str) -> dict[str, Any]:
        stopped.append(obj["metadata"]["name"])
        return {**obj, "spec": {**obj["spec"], "suspend": True}}

    monkeypatch.setattr(RAYCLUSTER, "stop_orphaned", stop_orphaned)

    Ctx = ray_stores(rc, twin, events=events)
    wl: dict[str, Any] = {"metadata": {"name": "rayjob-tune-x", "namespace": NS}}
    await RAYJOB.stop_made(Ctx(), wl, "u-1")  # type: ignore[arg-type]
    assert stopped == []  # no record: the orphaned-child rule finds clusters by their marks
    wl["metadata"]["annotations"] = {ray.ray.CLUSTERS_ANNOTATION: "rc/u-2,rc2/u-9"}
    await RAYJOB.stop_made(Ctx(), wl, "u-1")  # type: ignore[arg-type]
    assert stopped == ["rc"] and events == [("rc", "AncestorGone")]


async def test_an_orphaned_rayjobs_cluster_is_stopped_once_and_left_to_its_own_workload(
        ) -> None:
    """``RayJob.stop_made`` is called on each look at the orphaned Workload: the recorded
    cluster is written once (suspended, the admission's podset label taken out), later
    looks write nothing; a recorded cluster queued on its own (a Workload of its own,
    started on it) is not stopped."""
    rc = raycluster(group("gpu", 1))
    rc["spec"]["suspend"] = False
    rc["spec"]["workerGroupSpecs"][0]["template"]["metadata"] = {
        "labels": {PODSET_LABEL: "gpu"}}
    rc["metadata"]["labels"] = {}
    writes: list[dict[str, Any]] = []

    class Client:
        @staticmethod
        async def replace(resource: Any, body: dict[str, Any]) -> dict[str, Any]:
            writes.append(body)
            return body

    Ctx = ray_stores(rc, client=Client)
    wl = {"metadata": {"name": "rayjob-tune-x", "namespace": NS,
                       "annotations": {ray.ray.CLUSTERS_ANNOTATION: "rc/u-2"}}}
    for _ in range(3):
        await RAYJOB.stop_made(Ctx(), wl, "u-1")  # type: ignore[arg-type]
    assert len(writes) == 1 and writes[0]["spec"]["suspend"] is True
    assert PODSET_LABEL not in writes[0]["spec"]["workerGroupSpecs"][0]["template"][
        "metadata"]["labels"]
    writes.clear()
    started = copy.deepcopy(rc)
    Ctx = ray_stores(started, workloads=[own_workload(started)], client=Client)
    await RAYJOB.stop_made(Ctx(), wl, "u-1")  # type: ignore[arg-type]
    assert writes == []


async def test_a_running_rayjob_records_its_cluster_on_its_workload() -> None:
    """``RayJob.settle`` merges ``status.rayClusterName`` into the Workload's
    ``CLUSTERS_ANNOTATION`` once."""
    rj = rayjob(group("gpu", 1))
    rj["status"] = {"rayClusterName": "tune-x1"}
    wl = {"metadata": {"name": RAYJOB.workload_name(rj), "namespace": NS,
                       "annotations": {ray.ray.CLUSTERS_ANNOTATION: "tune-x0"}}}
    cluster = {"metadata": {"name": "tune-x1", "namespace": NS, "uid": "u-x1"}}
    patches: list[Any] = []

    class Store(dict):  # type: ignore[type-arg]
        def put(self, obj: dict[str, Any]) -> None:
            self[f"{NS}/{obj['metadata']['name']}"] = obj

    class Ctx:
        stored = Store({f"{NS}/{wl['metadata']['name']}": wl})
        clusters = Store()

        class informers:  # noqa: N801
            informers = {RAYCLUSTER.key: None}

        class client:  # noqa: N801
            @staticmethod
            async def replace(res: Any, body: dict[str, Any]) -> dict[str, Any]:
                patches.append(body["metadata"]["annotations"])
                return body

        def store(self, key: str) -> Store:
            return self.clusters if key == RAYCLUSTER.key else self.stored

    ctx = Ctx()
    await RAYJOB.settle(ctx, rj, 0)  # type: ignore[arg-type]
    await RAYJOB.settle(ctx, rj, 0)  # type: ignore[arg-type]
    assert patches == [{ray.ray.CLUSTERS_ANNOTATION: "tune-x0,tune-x1"}]
    # Once the store shows the cluster, its uid is recorded with it, once.
    ctx.clusters.put(cluster)
    await RAYJOB.settle(ctx, rj, 0)  # type: ignore[arg-type]
    await RAYJOB.settle(ctx, rj, 0)  # type: ignore[arg-type]
    assert patches[1:] == [{ray.ray.CLUSTERS_ANNOTATION: "tune-x0,tune-x1/u-x1"}]

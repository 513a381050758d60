"""Kueue's managed-ancestor rule (v0.17 ``FindAncestorJobManagedByKueue``,
``IsOwnerManagedByKueueForObject``; breaker finding N2): a job whose controller is an object of
an enabled kind that is queued (queue name, or ``manageJobsWithoutQueueName``) is that
ancestor's business. The Job webhook neither suspends nor refuses it, the reconciler gives it
no Workload and suspends it only while the ancestor's Workload is not admitted; a kind left
out of ``integrations.frameworks`` is no managed owner, for Jobs and Pods alike."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from app.config import (
    IntegrationsSettings,
    ServerSettings,
    Settings,
    WebhookSettings,
)
from app.controllers.admission_lookup import StoreAdmissionLookup, StoreExtenderState
from app.extender.nodestore import NodeStore
from app.integrations import BUILTIN_KINDS, batchjob, default_registry, jobset, managed_kinds
from app.integrations.framework import Registry
from app.kube.client import JOBS, WORKLOADS
from app.kube.context import JOB, WL
from app.kube.informers import Store
from app.main import create_app
from tests.recording_client import OBJECTS, RecordingClient
from tests.unit.test_job_framework import SLEEPER_OBJ, SLEEPERS, Sleeper, leading_manager
from tests.unit.test_webhook import CONTROLLER, answer, job, make_app, post, review

QUEUE = "kueue.x-k8s.io/queue-name"
NS = "ns"


def owned(obj: dict[str, Any], api_version: str, kind: str, name: str,
          uid: str = "p1") -> dict[str, Any]:
    """``obj`` with a controller ownerReference to ``kind`` ``name``."""
    obj["metadata"]["ownerReferences"] = [{"apiVersion": api_version, "kind": kind,
                                           "name": name, "uid": uid, "controller": True}]
    return obj


def js(name: str = "train", queue: str | None = "lq", uid: str = "p1") -> dict[str, Any]:
    labels = {QUEUE: queue} if queue else {}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": NS, "uid": uid, "labels": labels}}


def child(queue: str | None = "lq", suspend: Any = "absent") -> dict[str, Any]:
    """A JobSet's child Job carrying (``queue``) the queue label of its template."""
    return owned(job("train-w-0", queue=queue, suspend=suspend), "jobset.x-k8s.io/v1alpha2",
                 "JobSet", "train")


def getter(*objs: dict[str, Any]) -> Any:
    by = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objs}
    return lambda kind, ns, name: by.get((ns, name))


# ------------------------------------------------------------------------------ the walk


def test_a_queued_enabled_owner_is_the_managed_ancestor() -> None:
    reg = default_registry()
    found = reg.managed_ancestor(child(), getter(js()))
    assert found is not None and found[0] is jobset.KIND and found[1]["metadata"]["uid"] == "p1"


def test_an_owner_without_a_queue_counts_only_with_manage_jobs_without_queue_name() -> None:
    reg = default_registry()
    assert reg.managed_ancestor(child(), getter(js(queue=None))) is None  # queued on its own
    found = reg.managed_ancestor(child(), getter(js(queue=None)), manage_unlabelled=True)
    assert found is not None and found[1]["metadata"]["name"] == "train"


def test_an_owner_of_a_disabled_kind_is_no_managed_ancestor() -> None:
    reg = default_registry(["batch/job", "pod"])  # JobSet not listed
    assert reg.managed_ancestor(child(), getter(js())) is None
    assert reg.kind_of_controller(child()) is None


def test_the_top_most_queued_ancestor_wins_and_unknown_or_cyclic_owners_stop_the_walk() -> None:
    reg = default_registry()
    sleeper_reg = Registry([*BUILTIN_KINDS, Sleeper()])
    top = owned(dict(SLEEPER_OBJ, metadata={**SLEEPER_OBJ["metadata"], "namespace": NS,
                                            "name": "top", "uid": "s1"}), "x/v1", "X", "n")
    mid = owned(js(), "example.com/v1", "Sleeper", "top", "s1")
    found = sleeper_reg.managed_ancestor(child(), getter(mid, top))
    assert found is not None and found[1]["metadata"]["name"] == "top"
    # Job -> JobSet (no queue) -> Sleeper (queue): the Sleeper, as Kueue's "Job -> JobSet ->
    # AppWrapper (queue-name) => AppWrapper".
    unqueued_mid = owned(js(queue=None), "example.com/v1", "Sleeper", "top", "s1")
    found = sleeper_reg.managed_ancestor(child(), getter(unqueued_mid, top))
    assert found is not None and found[1]["metadata"]["name"] == "top"
    assert reg.managed_ancestor(child(), getter()) is None  # owner not seen: no ancestor
    cyclic = owned(js(), "jobset.x-k8s.io/v1alpha2", "JobSet", "train", "p1")  # owns itself
    found = reg.managed_ancestor(child(), getter(cyclic))
    assert found is not None and found[1]["metadata"]["name"] == "train"  # once, no loop
    not_controller = child()
    not_controller["metadata"]["ownerReferences"][0]["controller"] = False
    assert reg.managed_ancestor(not_controller, getter(js())) is None


# --------------------------------------------------------------------------- the webhooks


def _lookup(*parents: dict[str, Any], frameworks: list[str] | None = None,
            synced: bool = True) -> StoreAdmissionLookup:
    jobsets = Store(JOBS)
    for p in parents:
        jobsets.put({**p, "metadata": {**p["metadata"], "resourceVersion": "1"}})
    stores = {jobset.KIND.key: jobsets, JOB: Store(JOBS), WL: Store(WORKLOADS)}
    ctx = SimpleNamespace(store=lambda k: stores[k] if k in stores else Store(JOBS),
                          synced=synced,
                          settings=Settings())
    return StoreAdmissionLookup(ctx, default_registry(frameworks))  # type: ignore[arg-type]


def test_the_extender_places_a_queued_jobsets_childs_pods_as_the_jobset_was_admitted() -> None:
    """The pods of a JobSet's labelled Job are not held for a Workload of the Job's own
    (there is none): the extender leaves them to the JobSet's admission (None: not a queued
    Job's pod)."""
    lookup = _lookup(js())
    lookup.ctx.store(JOB).put({**child(), "metadata": {**child()["metadata"], "uid": "c1",
                                                       "resourceVersion": "1"}})
    with_rule = StoreExtenderState(lookup.ctx, NodeStore("nvidia.com/gpu"), lookup.registry)
    assert with_rule.workload_for_pod(NS, "train-w-0", "c1") is None
    without = StoreExtenderState(lookup.ctx, NodeStore("nvidia.com/gpu"))  # the Job's own
    view = without.workload_for_pod(NS, "train-w-0", "c1")
    assert view is not None and not view.admitted


async def test_the_job_webhook_leaves_a_queued_jobsets_child_alone() -> None:
    app = make_app(admission=_lookup(js()))
    sent = review("CREATE", child())
    got = answer(await post(app, "/mutate-batch-v1-job", sent), sent)
    assert got["allowed"] is True and "patch" not in got  # not suspended by pykueue
    running = review("CREATE", child(suspend=False), user="system:serviceaccount:js:jobset")
    assert answer(await post(app, "/validate-batch-v1-job", running), running)["allowed"]
    # The JobSet resumes its Jobs once admitted: not pykueue's to refuse.
    resumed = review("UPDATE", child(suspend=False), child(suspend=True), user="jobset")
    assert answer(await post(app, "/validate-batch-v1-job", resumed), resumed)["allowed"]
    bad = review("CREATE", child(queue="Not_A_Queue"))
    got = answer(await post(app, "/validate-batch-v1-job", bad), bad)
    assert got["allowed"] is False and "not a valid LocalQueue name" in got["status"]["message"]


@pytest.mark.parametrize("why", ["jobset without queue", "jobset disabled", "not synced"])
async def test_the_job_webhook_queues_a_child_without_a_managed_ancestor(why: str) -> None:
    lookup = {"jobset without queue": lambda: _lookup(js(queue=None)),
              "jobset disabled": lambda: _lookup(js(), frameworks=["batch/job", "pod"]),
              "not synced": lambda: _lookup(js(), synced=False)}[why]()
    app = make_app(admission=lookup)
    sent = review("CREATE", child())
    got = answer(await post(app, "/mutate-batch-v1-job", sent), sent)
    assert got["patchType"] == "JSONPatch"  # suspended: queued as its own job
    running = review("CREATE", child(suspend=False))
    got = answer(await post(app, "/validate-batch-v1-job", running), running)
    assert got["allowed"] is False and "spec.suspend" in got["status"]["message"]


def _pod(controller_kind: str = "JobSet") -> dict[str, Any]:
    return owned({"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": "p", "namespace": NS, "labels": {QUEUE: "lq"}},
                  "spec": {"containers": [{"name": "c", "image": "busybox"}]}},
                 "jobset.x-k8s.io/v1alpha2", controller_kind, "train")


def _pod_review(pod: dict[str, Any]) -> dict[str, Any]:
    sent = review("CREATE", pod, kind={"group": "", "version": "v1", "kind": "Pod"})
    sent["request"]["resource"] = {"group": "", "version": "v1", "resource": "pods"}
    return sent


@pytest.mark.parametrize(("frameworks", "queued"), [
    (None, False),  # JobSet enabled: its Pod is its own business
    (["batch/job", "pod"], True),  # JobSet not enabled: a queued plain Pod
])
async def test_the_pod_webhook_counts_only_enabled_kinds_as_managed_owners(
        frameworks: list[str] | None, queued: bool) -> None:
    app = create_app(Settings(
        controllers_enabled=False, server=ServerSettings(metrics_auth=False),
        webhook=WebhookSettings(controller_usernames=[CONTROLLER]),
        integrations=IntegrationsSettings(**({"frameworks": frameworks} if frameworks else {}))))
    sent = _pod_review(_pod())
    got = answer(await post(app, "/mutate--v1-pod", sent), sent)
    assert ("patch" in got) is queued
    # The reconciler's registry, when there is one, is the answer (enabled and served).
    app.state.admission_lookup = _lookup(frameworks=frameworks)
    got = answer(await post(app, "/mutate--v1-pod", sent), sent)
    assert ("patch" in got) is queued
    assert (("jobset.x-k8s.io", "JobSet") in managed_kinds(frameworks)) is not queued


# ------------------------------------------------------------------------- the reconciler


def _child_of_sleeper(parent_labels: dict[str, str], *, suspend: bool) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": "nap-0", "namespace": "research", "uid": "c1", "resourceVersion": "1",
        "labels": {QUEUE: "lq"}, "ownerReferences": [
            {"apiVersion": "example.com/v1", "kind": "Sleeper", "name": "nap", "uid": "s1",
             "controller": True}]},
        "spec": {"suspend": suspend, "parallelism": 1, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}}}


async def _writes(monkeypatch: pytest.MonkeyPatch, parent_labels: dict[str, str],
                  *, suspend: bool) -> list[tuple[str, str, Any]]:
    parent = {**SLEEPER_OBJ, "metadata": {**SLEEPER_OBJ["metadata"], "labels": parent_labels}}
    client = RecordingClient({**OBJECTS, SLEEPERS.plural: [parent] if parent_labels else [],
                              JOBS.plural: [_child_of_sleeper(parent_labels, suspend=suspend)]})
    if not parent_labels:
        async def get(res: Any, name: str, *_: Any, **__: Any) -> dict[str, Any]:
            assert (res.plural, name) == (SLEEPERS.plural, "nap")
            return parent  # unlabelled: not in the store, read once from the API
        client.get = get  # type: ignore[method-assign]
    m = leading_manager(monkeypatch, client, Registry([batchjob.KIND, Sleeper()]))
    await m.start()
    try:
        await m.wait_ready(10)
        for _ in range(60):
            await asyncio.sleep(0.05)
            if any(v == "create" for v, _, _ in client.bodies) and len(client.bodies) > 1:
                break
    finally:
        await m.stop()
    return client.bodies


async def test_the_reconciler_gives_a_queued_owners_child_no_workload_and_suspends_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    bodies = await _writes(monkeypatch, {QUEUE: "lq"}, suspend=False)
    created = [b["metadata"]["name"] for v, r, b in bodies if (v, r) == ("create", "workloads")]
    assert created == ["sleeper-nap"], bodies  # the ancestor's only
    # Running while its ancestor's Workload is not admitted: suspended (Kueue
    # shouldSuspendChildJob).
    suspended = [b for v, r, b in bodies if (v, r) == ("replace", "jobs")]
    assert suspended and suspended[0]["spec"]["suspend"] is True


async def test_the_reconciler_queues_the_child_of_an_unqueued_owner_as_its_own(
        monkeypatch: pytest.MonkeyPatch) -> None:
    bodies = await _writes(monkeypatch, {}, suspend=True)
    created = [b["metadata"]["name"] for v, r, b in bodies if (v, r) == ("create", "workloads")]
    assert len(created) == 1 and created[0].startswith("job-nap-0-"), bodies


def test_an_owner_reference_whose_uid_is_not_the_owners_is_no_managed_ancestor() -> None:
    """breaker5: the walk read the owner by name only; a Job naming an admitted JobSet with
    any uid was taken for its child (not suspended, no Workload, pods not held)."""
    reg = default_registry()
    forged = owned(job("evil", queue="lq", suspend=False), "jobset.x-k8s.io/v1alpha2",
                   "JobSet", "train", uid="not-the-jobsets")
    assert reg.managed_ancestor(forged, getter(js(uid="p1"))) is None
    assert reg.managed_ancestor(child(), getter(js(uid="p1"))) is not None  # uid p1: its own


def _guarded_app(lookup: StoreAdmissionLookup, creators: list[str]):
    """The webhook app with ``webhook.child_job_creators`` = ``creators``."""
    app = create_app(Settings(
        controllers_enabled=False, server=ServerSettings(metrics_auth=False),
        webhook=WebhookSettings(controller_usernames=[CONTROLLER],
                                child_job_creators=creators)))
    app.state.admission_lookup = lookup
    return app


JOBSET_CONTROLLER = "system:serviceaccount:jobset-system:jobset-controller-manager"


async def test_a_tenant_cannot_run_an_unadmitted_job_under_its_admitted_jobsets_name() -> None:
    """breaker5: a tenant names its own admitted JobSet (real uid) as the controller of any
    Job; Kueue's rule trusts the ownerReference, so the Job runs with no admission of its own.
    With ``webhook.child_job_creators`` listing the JobSet controller, only it may create such
    a Job running, resume it or resize it; the default stays Kueue's (anyone)."""
    evil = owned(job("evil", queue="lq", suspend=False), "jobset.x-k8s.io/v1alpha2",
                 "JobSet", "train", uid="p1")
    evil["spec"]["parallelism"] = evil["spec"]["completions"] = 100
    guarded = _guarded_app(_lookup(js()), [JOBSET_CONTROLLER])
    sent = review("CREATE", evil, user="alice")  # the tenant, not the JobSet controller
    got = answer(await post(guarded, "/validate-batch-v1-job", sent), sent)
    assert got["allowed"] is False
    assert "child_job_creators" in got["status"]["message"]
    assert "JobSet 'train'" in got["status"]["message"]
    by_operator = review("CREATE", evil, user=JOBSET_CONTROLLER)
    assert answer(await post(guarded, "/validate-batch-v1-job", by_operator),
                  by_operator)["allowed"] is True
    # Resumed or resized by the tenant: refused; a label change of a running child: fine.
    suspended = {**evil, "spec": {**evil["spec"], "suspend": True}}
    for old, new in ((suspended, evil),
                     (evil, {**evil, "spec": {**evil["spec"], "parallelism": 200,
                                              "completions": 200}})):
        sent = review("UPDATE", new, old=old, user="alice")
        assert answer(await post(guarded, "/validate-batch-v1-job", sent),
                      sent)["allowed"] is False
    relabelled = {**evil, "metadata": {**evil["metadata"],
                                       "labels": {**evil["metadata"]["labels"], "x": "y"}}}
    sent = review("UPDATE", relabelled, old=evil, user="alice")
    assert answer(await post(guarded, "/validate-batch-v1-job", sent), sent)["allowed"] is True
    # Unset (the default): Kueue's behaviour, the Job is its ancestor's.
    open_app = make_app(admission=_lookup(js()))
    sent = review("CREATE", evil, user="alice")
    assert answer(await post(open_app, "/validate-batch-v1-job", sent), sent)["allowed"] is True


def test_two_jobs_that_control_each_other_are_each_their_own() -> None:
    """breaker5: Job a controlled by Job b and b by a (a tenant's ownerReferences edit) made
    each the other's child: neither had a Workload and each was suspended for ever because
    the other's Workload did not exist. A walk that comes back to the object itself finds no
    ancestor (Kueue: cyclic ownership is an error, the Job is not a child)."""
    reg = default_registry()
    a = owned(job("a", queue="lq"), "batch/v1", "Job", "b", uid="ub")
    a["metadata"]["uid"] = "ua"
    b = owned(job("b", queue="lq"), "batch/v1", "Job", "a", uid="ua")
    b["metadata"]["uid"] = "ub"
    assert reg.managed_ancestor(a, getter(a, b)) is None
    assert reg.managed_ancestor(b, getter(a, b)) is None

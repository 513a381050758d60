"""MultiKueue on the manager against Kueue v0.17.1's two beta gates, on by default since v0.16
(``pkg/features/kube_features.go``): ``MultiKueueWaitForWorkloadAdmitted`` (the worker whose
copy is Admitted wins, not the first to reserve quota) and
``MultiKueueRedoAdmissionOnEvictionInWorker`` (a copy evicted on its worker sends the check to
Retry at once: the manager evicts, removes the copies and dispatches again). The pure
decisions (``admitted_worker``, ``evicted_on_worker``) and the controller's passes over fake
API servers."""

from __future__ import annotations

import asyncio
import copy
import json
from types import SimpleNamespace

from app.controllers.multikueue import JobRef
from app.core.multikueue import (
    ALL_AT_ONCE,
    BATCH_JOB,
    ORIGIN_LABEL,
    PREBUILT_LABEL,
    WorkerEta,
    admitted_worker,
    evicted_on_worker,
)
from app.kube.context import AC, MKC, MKCFG
from app.kube.errors import Permanent
from tests.unit.test_multikueue_soonest import _controller

T0, T1, T2 = "2026-12-04T14:00:01Z", "2026-12-04T14:00:05Z", "2026-12-04T14:00:09Z"
REDO = ('Workload evicted on worker cluster: "worker1", resetting for re-admission. '
        'Previously: "Ready"')


def _copy(*conds: tuple[str, str, str], checks: list[dict] | None = None) -> dict:
    """A worker's copy of Workload ns/wl with conditions (type, status, since)."""
    status: dict = {"conditions": [{"type": t, "status": s, "lastTransitionTime": at}
                                   for t, s, at in conds]}
    if checks is not None:
        status["admissionChecks"] = checks
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": "wl", "namespace": "ns"}, "spec": {"queueName": "q"},
            "status": status}


# A copy holding quota on its worker while the worker's own check (a ProvisioningRequest,
# say) is still Pending: QuotaReserved, not Admitted.
RESERVED_ONLY = _copy(("QuotaReserved", "True", T0), ("Admitted", "False", T0),
                      checks=[{"name": "prov", "state": "Pending"}])
ADMITTED = _copy(("QuotaReserved", "True", T1), ("Admitted", "True", T1))
# The manager's Job ``j`` of ``_controller``, as its Workload's controller reference names it.
J = JobRef(BATCH_JOB, "j", "j-uid")
PREEMPTED = _copy(("QuotaReserved", "True", T0), ("Admitted", "True", T0),
                  ("Evicted", "True", T2), ("Preempted", "True", T2))


# ------------------------------------------------------------------ the pure decisions


def test_the_admitted_copy_wins_not_the_first_to_reserve():
    remotes = {"worker1": RESERVED_ONLY, "worker2": ADMITTED, "worker3": None}
    assert admitted_worker(remotes, None) == "worker2"  # the old rule took worker1
    assert admitted_worker({"worker1": RESERVED_ONLY}, None) is None
    assert admitted_worker({"worker1": ADMITTED, "worker2": _copy(
        ("QuotaReserved", "True", T0), ("Admitted", "True", T0))}, None) == "worker2"
    # Placed on worker1: only its copy holds it; worker2's admitted copy is a loser.
    assert admitted_worker(remotes, "worker1") is None
    assert admitted_worker({"worker1": ADMITTED, "worker2": ADMITTED}, "worker1") == "worker1"


def test_a_copy_evicted_on_its_worker_redoes_the_admission_only_while_ready():
    evicted = {"worker1": PREEMPTED, "worker2": None}
    assert evicted_on_worker("Ready", "worker1", evicted) == REDO
    deactivated = {"worker1": _copy(("QuotaReserved", "False", T2),
                                    ("Evicted", "True", T2))}
    assert evicted_on_worker("Ready", "worker1", deactivated) == REDO
    # Not Ready (still dispatching, or already Retry): nothing to redo (Kueue's acs.State).
    for state in ("Pending", "Retry", "Rejected", None):
        assert evicted_on_worker(state, "worker1", evicted) is None
    # An eviction since undone (re-admitted there: Evicted False), or no eviction.
    again = _copy(("QuotaReserved", "True", T2), ("Evicted", "False", T2))
    assert evicted_on_worker("Ready", "worker1", {"worker1": again}) is None
    assert evicted_on_worker("Ready", "worker1", {"worker1": ADMITTED}) is None
    assert evicted_on_worker("Ready", "worker1", {"worker1": None}) is None
    # A stale evicted copy on another worker is not the running one's eviction.
    assert evicted_on_worker("Ready", "worker2", {"worker1": PREEMPTED,
                                                  "worker2": ADMITTED}) is None


# ------------------------------------------------------------------ the controller


def _all_at_once(events: list | None = None):
    mk, store, workers = _controller({"worker1": WorkerEta(None, "x"),
                                      "worker2": WorkerEta(None, "x")},
                                     dispatcher_name=ALL_AT_ONCE,
                                     worker_lost_timeout_seconds=900)
    if events is not None:
        mk.ctx.recorder = SimpleNamespace(emit=lambda *a: events.append(a))
    return mk, store, workers


def _job_copy(mk) -> dict:
    """The manager's Job ``j`` as created on a worker (with this manager's origin label: the
    manager deletes no job of that name without it)."""
    return {"metadata": {"name": "j", "uid": "u", "labels": {ORIGIN_LABEL: mk.s.origin}}}


def _put_copy(worker, copy: dict) -> None:
    worker.objs[("workloads", "ns", "wl")] = copy


async def _pass(mk, store) -> dict:
    wl = store["ns/wl"]
    await mk._sync_workload(wl, wl["status"]["admissionChecks"][0], sorted(mk.workers))
    return store["ns/wl"]


def _ready_on(store, worker: str, since: str) -> None:
    """The manager's Workload placed on ``worker``, its check Ready since ``since``."""
    wl = store["ns/wl"]
    wl["status"]["clusterName"] = worker
    wl["status"]["admissionChecks"][0].update(
        state="Ready", lastTransitionTime=since,
        message=f'The workload got reservation on "{worker}"')


def test_a_copy_reserved_but_not_admitted_on_its_worker_does_not_win():
    mk, store, workers = _all_at_once()

    async def run() -> None:
        wl = await _pass(mk, store)  # copies to both workers
        assert workers["worker1"].created == ["wl"] and workers["worker2"].created == ["wl"]
        _put_copy(workers["worker1"], RESERVED_ONLY)
        wl = await _pass(mk, store)
        assert wl["status"]["admissionChecks"][0]["state"] == "Pending"
        assert "clusterName" not in wl["status"]
        assert ("jobs", "ns", "j") not in workers["worker1"].objs  # no job before Admitted
        assert not workers["worker2"].deleted
        _put_copy(workers["worker2"], ADMITTED)  # admitted later than worker1 reserved
        wl = await _pass(mk, store)
        check = wl["status"]["admissionChecks"][0]
        assert (check["state"], check["message"]) == (
            "Ready", 'The workload got reservation on "worker2"')
        assert wl["status"]["clusterName"] == "worker2"
        assert ("jobs", "ns", "j") in workers["worker2"].objs
        assert workers["worker1"].deleted == ["wl"]  # the loser's copy
    asyncio.run(run())


def test_worker_lost_once_its_copy_is_no_longer_admitted():
    mk, store, workers = _all_at_once()
    _ready_on(store, "worker1", "2001-09-09T01:00:00Z")  # the clock is 1e9: 46 min ago
    # Still holding quota on worker1, but its own check there went back to Pending.
    _put_copy(workers["worker1"], RESERVED_ONLY)

    async def run() -> None:
        wl = await _pass(mk, store)
        assert wl["status"]["admissionChecks"][0]["state"] == "Retry"
        assert wl["status"]["admissionChecks"][0]["message"] == "Reserving remote lost"
    asyncio.run(run())


def test_an_eviction_on_the_worker_redoes_the_admission_at_once():
    events: list = []
    mk, store, workers = _all_at_once(events)
    _ready_on(store, "worker1", "2001-09-09T01:46:39Z")  # Ready 1 s ago: far from 900 s
    _put_copy(workers["worker1"], PREEMPTED)
    mk.dispatched["ns/wl"] = (J, {"worker1"})
    workers["worker1"].objs[("jobs", "ns", "j")] = _job_copy(mk)

    async def run() -> None:
        wl = await _pass(mk, store)
        check = wl["status"]["admissionChecks"][0]
        assert (check["state"], check["message"]) == ("Retry", REDO)
        assert check["lastTransitionTime"] != "2001-09-09T01:46:39Z"
        assert events and events[-1][1:] == ("Normal", "MultiKueue", REDO)
        assert wl["status"]["clusterName"] == "worker1"  # reset with the eviction
        # Until the manager evicts, nothing else is done (no second Retry, copies kept).
        await _pass(mk, store)
        assert len(events) == 1 and not workers["worker1"].deleted
        # The manager's lifecycle evicts (AdmissionCheck in Retry state): copies removed.
        wl = store["ns/wl"]
        wl["status"]["conditions"].append({"type": "Evicted", "status": "True",
                                           "reason": "AdmissionCheck",
                                           "lastTransitionTime": T2})
        wl["status"]["admissionChecks"][0]["state"] = "Pending"
        await _pass(mk, store)
        assert sorted(workers["worker1"].deleted) == ["j", "wl"]
        # Released, then admitted again on the manager: placement forgotten, dispatched anew.
        await mk._forget_placement(store["ns/wl"])
        wl = store["ns/wl"]
        assert "clusterName" not in wl["status"]
        wl["status"]["conditions"] = [{"type": "QuotaReserved", "status": "True",
                                       "lastTransitionTime": T2}]
        wl = await _pass(mk, store)
        assert wl["status"]["nominatedClusterNames"] == ["worker1", "worker2"]
        assert workers["worker1"].created == ["wl"] and workers["worker2"].created == ["wl"]
    asyncio.run(run())


def test_a_copy_evicted_before_its_worker_won_changes_nothing():
    mk, store, workers = _all_at_once()
    # Preempted on worker1 and requeued there while the check is still Pending here.
    _put_copy(workers["worker1"], _copy(("QuotaReserved", "False", T2),
                                        ("Admitted", "False", T2), ("Evicted", "True", T2)))

    async def run() -> None:
        wl = await _pass(mk, store)
        assert wl["status"]["admissionChecks"][0]["state"] == "Pending"
        assert "clusterName" not in wl["status"]
        assert workers["worker2"].created == ["wl"]  # worker2 still gets its copy
    asyncio.run(run())


def test_evicted_and_given_quota_again_between_two_passes_the_old_copies_go():
    """The manager's Workload evicted after the redo, its quota released and reserved again
    before the next pass (its worker's Job had stopped: nothing held the quota): the check is
    Pending with the old ``clusterName``. Its copy and Job on worker1 are stale and deleted,
    even when the copy is still admitted there, and it is dispatched afresh (found by
    `make multikueue-interop` with a Kueue worker: the evicted copy stayed, no new one was
    sent)."""
    mk, store, workers = _all_at_once()
    _ready_on(store, "worker1", T0)
    store["ns/wl"]["status"]["admissionChecks"][0].update(
        state="Pending", message="Reset to Pending after eviction. Previously: Retry")
    _put_copy(workers["worker1"], ADMITTED)
    workers["worker1"].objs[("jobs", "ns", "j")] = _job_copy(mk)
    mk.dispatched["ns/wl"] = (J, {"worker1"})

    async def run() -> None:
        wl = await _pass(mk, store)
        assert sorted(workers["worker1"].deleted) == ["j", "wl"]
        assert "clusterName" not in wl["status"]
        assert wl["status"]["admissionChecks"][0]["state"] == "Pending"
        wl = await _pass(mk, store)
        assert wl["status"]["nominatedClusterNames"] == ["worker1", "worker2"]
        assert workers["worker1"].created == ["wl"] and workers["worker2"].created == ["wl"]
    asyncio.run(run())


def test_a_worker_down_when_another_won_has_its_copies_removed_once_it_answers():
    """worker1 held the Workload's copy and went away; the Workload was placed on worker2.
    The manager's record keeps worker1 (it could not delete there): once worker1 answers
    again, its copies go (when the Workload finishes at the latest). Before: the record
    named worker2 only, so worker1's old copy and Job, admitted again there, ran on beside
    the winner's until the garbage collection (follow16)."""
    mk, store, workers = _all_at_once()
    w1 = mk.workers.pop("worker1")  # worker1 unreachable: no client
    mk.dispatched["ns/wl"] = (J, {"worker1", "worker2"})
    workers["worker1"].objs[("jobs", "ns", "j")] = _job_copy(mk)
    _put_copy(workers["worker1"], ADMITTED)
    _put_copy(workers["worker2"], ADMITTED)

    async def run() -> None:
        wl = await _pass(mk, store)
        assert wl["status"]["clusterName"] == "worker2"
        assert mk.dispatched["ns/wl"][1] == {"worker1", "worker2"}
        assert not workers["worker1"].deleted
        # The Workload finishes on worker2 while worker1 is still away: worker2's copies go,
        # worker1 stays recorded.
        wl = store["ns/wl"]
        wl["status"]["conditions"].append({"type": "Finished", "status": "True",
                                           "reason": "Succeeded", "lastTransitionTime": T2})
        await _pass(mk, store)
        assert "wl" in workers["worker2"].deleted
        assert mk.dispatched["ns/wl"][1] == {"worker1"}
        mk.workers["worker1"] = w1  # worker1 answers again
        await _pass(mk, store)
        assert sorted(workers["worker1"].deleted) == ["j", "wl"]
        assert "ns/wl" not in mk.dispatched
    asyncio.run(run())


def test_one_workload_failing_its_pass_does_not_stop_the_others():
    """A Workload whose pass raises something other than an API error (a malformed object,
    a bug) is logged and skipped: the Workloads after it are still dispatched in the same
    pass (breaker16: the exception ended the whole pass, every pass)."""
    mk, store, workers = _all_at_once()
    second = json.loads(json.dumps(store["ns/wl"]))
    second["metadata"]["name"] = "wl2"
    store.put(second)
    seen: list[str] = []

    async def sync(wl, st, clusters) -> None:
        seen.append(wl["metadata"]["name"])
        if wl["metadata"]["name"] == "wl":
            raise KeyError("spec")

    async def nothing(*a) -> list[str]:
        return ["worker1", "worker2"]

    async def listed(res):
        return [], None

    mk._sync_workload = sync
    mk._sync_clusters = nothing
    mk._sync_check = nothing
    mk.ctx.client.list = listed
    check = {"spec": {"controllerName": "kueue.x-k8s.io/multikueue"},
             "metadata": {"name": "mk"}}
    mk.ctx.store = lambda kind: [check] if kind is AC else list(store.values())

    asyncio.run(mk.sync_once())
    assert sorted(seen) == ["wl", "wl2"]


def test_the_clusters_and_configs_come_from_the_stores_without_a_request():
    """MultiKueueClusters and MultiKueueConfigs are read from the informers' stores (MKC,
    MKCFG), as Kueue's reconcilers read their cache: a pass lists nothing from the API server,
    so keeping the clusters' status takes no token from the admission writes (issue 33: the
    periodic lists took ~0.18 of the 50 tokens a second on the large run)."""
    mk, _, _ = _all_at_once()
    cluster = {"metadata": {"name": "worker9"}, "spec": {}}
    config = {"metadata": {"name": "cfg"}, "spec": {"clusters": ["worker9"]}}
    check = {"spec": {"controllerName": "kueue.x-k8s.io/multikueue",
                      "parameters": {"apiGroup": "kueue.x-k8s.io",
                                     "kind": "MultiKueueConfig", "name": "cfg"}},
             "metadata": {"name": "mk"}}
    synced: list[list[str]] = []
    configs_seen: list[list[str]] = []

    async def refuse_list(*a, **k):
        raise AssertionError(f"listed from the API server: {a}")

    async def clusters(cs) -> None:
        synced.append([c["metadata"]["name"] for c in cs])

    async def sync_check(ac, by_name) -> list[str]:
        configs_seen.append(sorted(by_name))
        return []

    mk._sync_clusters = clusters
    mk._sync_check = sync_check
    mk.ctx.client.list = refuse_list
    mk.dispatched.clear()
    stores = {AC: [check], MKC: [cluster], MKCFG: [config]}
    mk.ctx.store = lambda kind: stores.get(kind, [])
    asyncio.run(mk.sync_once())
    assert synced == [["worker9"]]
    assert configs_seen == [["cfg"]]


def _patched(manager) -> list:
    """Make the manager's fake API server apply status patches as kube-apiserver does: a
    JSON merge patch (null removes), or a JSON Patch whose ``test`` operations are checked
    against the stored object first (a mismatch answers 422, nothing written). Returns the
    list of patches sent (name, body)."""
    patches: list = []

    async def patch(res, name, body, namespace=None, **kw):
        patches.append((name, body))
        obj = manager.objs[(res.plural, namespace, name)]
        status = obj.setdefault("status", {})
        if isinstance(body, list):
            for op in body:
                if op["op"] == "test" and obj["metadata"].get("uid") != op["value"]:
                    raise Permanent(422, "", f"testing value {op['path']} failed")
            for op in body:
                if op["op"] == "remove":
                    del status[op["path"].removeprefix("/status/")]
        else:
            for k, v in body["status"].items():
                if v is None:
                    status.pop(k, None)
                else:
                    status[k] = v
        return obj
    manager.patch = patch
    return patches


CLEAR_J = [{"op": "test", "path": "/metadata/uid", "value": "j-uid"},
           {"op": "remove", "path": "/status/active"}, {"op": "remove", "path": "/status/ready"}]


def _running_job_deleted(mk, store, workers, *, finished: bool) -> list:
    """The manager's Workload placed on worker1, its Job ``j`` counting the worker's pod
    (``status.active`` 1, mirrored), then deleted by hand (``finished``: after it Finished);
    returns the manager's status patches (name, patch)."""
    _ready_on(store, "worker1", "2001-09-09T01:46:39Z")
    _put_copy(workers["worker1"], ADMITTED)
    mk.dispatched["ns/wl"] = (J, {"worker1"})
    workers["worker1"].objs[("jobs", "ns", "j")] = _job_copy(mk)
    manager = mk.ctx.client
    manager.objs[("jobs", "ns", "j")]["status"] = {"active": 1, "ready": 1}
    patches = _patched(manager)
    wl = store["ns/wl"]
    wl["metadata"]["deletionTimestamp"] = T2
    if finished:
        wl["status"]["conditions"].append({"type": "Finished", "status": "True",
                                           "lastTransitionTime": T2})
    return patches


def test_a_deleted_workloads_copies_go_then_its_jobs_mirrored_pods_are_cleared():
    """review25 MK: a manager Workload deleted by hand (being deleted, or gone): its copies
    are deleted on the worker, then the pod counts mirrored on its Job are cleared (nothing
    writes them again once the copy is gone: before, the Job's stop, whose template restore
    Kubernetes v1.36 refuses while ``status.active`` is not 0, and its new Workload waited
    for good). Not a Finished Workload's: its job's status says how it ended."""
    for finished in (False, True):
        mk, store, workers = _all_at_once()
        patches = _running_job_deleted(mk, store, workers, finished=finished)
        asyncio.run(_pass(mk, store))
        assert sorted(workers["worker1"].deleted) == ["j", "wl"]
        assert patches == ([] if finished else [("j", CLEAR_J)]), (finished, patches)
    for finished in (False, True):  # gone from the store (no finalizer), its copies recorded
        mk, store, workers = _all_at_once()
        patches = _running_job_deleted(mk, store, workers, finished=False)
        if finished:
            mk.finished.add("ns/wl")
        del store["ns/wl"]
        asyncio.run(mk._workload_gone("ns/wl"))
        assert sorted(workers["worker1"].deleted) == ["j", "wl"] and not mk.dispatched
        assert patches == ([] if finished else [("j", CLEAR_J)]), (finished, patches)


def _job_of_the_same_name_created_again(mk, store, workers) -> dict:
    """The manager's Workload placed on worker1 (its copy admitted there, its Job ``j``
    counting the worker's pod: ``status.active`` 1, mirrored) and dispatched by a pass; then
    ``j`` deleted and created again (another uid) and, like any new MultiKueue Job, counting
    its own copy's pod, mirrored by its own Workload. Returns the new Job."""
    _ready_on(store, "worker1", "2001-09-09T01:46:39Z")
    _put_copy(workers["worker1"], ADMITTED)
    workers["worker1"].objs[("jobs", "ns", "j")] = {
        **_job_copy(mk), "status": {"active": 1, "ready": 1}}
    manager = mk.ctx.client
    manager.objs[("jobs", "ns", "j")]["status"] = {"active": 1, "ready": 1}
    asyncio.run(_pass(mk, store))
    assert "ns/wl" in mk.dispatched  # the old Workload's copies recorded
    new = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "j", "namespace": "ns", "uid": "j-uid-2"},
           "spec": {"managedBy": "kueue.x-k8s.io/multikueue"},
           "status": {"active": 1, "ready": 1}}
    manager.objs[("jobs", "ns", "j")] = new
    return new


def test_the_workload_of_an_earlier_job_of_the_same_name_leaves_the_new_jobs_counts():
    """break26: the Workload of a Job deleted and created again under the same name, then
    deleted (being deleted, or gone from the store) after the new Job started, cleared the
    new Job's mirrored ``status.active`` (patched by name) until its own Workload's next
    mirror. The job of that name is now another (its uid): its counts are left alone."""
    for gone in (False, True):
        mk, store, workers = _all_at_once()
        new = _job_of_the_same_name_created_again(mk, store, workers)
        patches = _patched(mk.ctx.client)
        if gone:
            del store["ns/wl"]
            asyncio.run(mk._workload_gone("ns/wl"))
        else:
            store["ns/wl"]["metadata"]["deletionTimestamp"] = T2
            asyncio.run(_pass(mk, store))
        assert new["status"] == {"active": 1, "ready": 1}, (gone, patches)
        assert patches == [], (gone, patches)


def test_a_stale_copy_of_the_earlier_job_is_caught_by_the_api_servers_uid_test():
    """The manager's read of ``j`` (its informer's copy) is still the earlier Job when the
    new one is stored: the patch's ``test`` of ``/metadata/uid`` fails on the API server
    (422) and nothing is written; the pass goes on (no error raised, nothing retried in a
    loop: the next pass reads the new Job and sends nothing)."""
    mk, store, workers = _all_at_once()
    old = copy.deepcopy(mk.ctx.client.objs[("jobs", "ns", "j")])
    new = _job_of_the_same_name_created_again(mk, store, workers)
    old["status"] = {"active": 1, "ready": 1}
    patches = _patched(mk.ctx.client)
    mk._stored = lambda adapter, ns, name: old
    store["ns/wl"]["metadata"]["deletionTimestamp"] = T2
    asyncio.run(_pass(mk, store))
    assert new["status"] == {"active": 1, "ready": 1}
    assert len(patches) == 1
    del mk._stored  # the informer has the new Job now
    asyncio.run(_pass(mk, store))
    assert new["status"] == {"active": 1, "ready": 1} and len(patches) == 1


def test_a_workload_still_holding_quota_does_not_mirror_onto_a_new_job_of_its_name():
    """Until the garbage collector deletes the Workload of the deleted Job, its passes read
    the manager's Job by name: the new Job of that name (another uid) neither gets the old
    copy's status mirrored onto it nor is sent to a worker as the old Workload's."""
    mk, store, workers = _all_at_once()
    new = _job_of_the_same_name_created_again(mk, store, workers)
    new["status"] = {}
    patches = _patched(mk.ctx.client)
    asyncio.run(_pass(mk, store))
    assert new["status"] == {} and patches == []
    del workers["worker1"].objs[("jobs", "ns", "j")]  # the old copy's Job gone on worker1
    asyncio.run(_pass(mk, store))
    assert ("jobs", "ns", "j") not in workers["worker1"].objs


def test_the_workload_of_an_earlier_job_leaves_the_new_jobs_copy_on_a_worker():
    """The Workload of a Job deleted and created again under the same name is removed while
    the new Job's copy (same name, labelled ``kueue.x-k8s.io/prebuilt-workload-name`` with
    the new Workload's name) runs on a worker it was sent to (that worker was away at the
    deletion, say): only its own Workload copy goes there; the job of that name, the new
    Workload's, is left running. Before, it was deleted by name."""
    mk, store, workers = _all_at_once()
    new_copy = {**_job_copy(mk), "metadata": {
        **_job_copy(mk)["metadata"], "uid": "u-2",
        "labels": {ORIGIN_LABEL: mk.s.origin, PREBUILT_LABEL: "job-j-new"}}}
    workers["worker1"].objs[("jobs", "ns", "j")] = new_copy
    _put_copy(workers["worker1"], ADMITTED)
    _ready_on(store, "worker1", T0)
    asyncio.run(mk._remove_remotes("ns/wl", store["ns/wl"]))
    assert workers["worker1"].deleted == ["wl"]
    assert ("jobs", "ns", "j") in workers["worker1"].objs
    # Its own copy (labelled with its name) goes, as before.
    mk, store, workers = _all_at_once()
    own = {**_job_copy(mk), "metadata": {**_job_copy(mk)["metadata"], "labels": {
        ORIGIN_LABEL: mk.s.origin, PREBUILT_LABEL: "wl"}}}
    workers["worker1"].objs[("jobs", "ns", "j")] = own
    _put_copy(workers["worker1"], ADMITTED)
    _ready_on(store, "worker1", T0)
    asyncio.run(mk._remove_remotes("ns/wl", store["ns/wl"]))
    assert sorted(workers["worker1"].deleted) == ["j", "wl"]

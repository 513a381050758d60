"""A deleted job's quota is held while its pods are still being killed (docs/security.md,
breaker21): ``kubectl delete job`` lets the garbage collector delete the Workload at once,
while the pods run out their termination grace period. ``InformerFeed`` keeps a deleted
admitted Workload's usage in the core (``Scheduler.hold_deleted``) until no pod of its owner
holds resources (the reconciler's count for orphaned Workloads, ``pods_holding``), re-counted
on each Pod event; ``jobs.deleted_quota_release: Immediately`` (Kueue v0.17.1) releases it
at the deletion.

Each scenario: ClusterQueue ``cq`` with 2 GPUs, Job ``train`` (2 pods of 1 GPU) admitted,
its Workload deleted, then Workload ``b`` (2 GPUs) queued."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

from app.config import Settings
from app.controllers.scheduling_loop import SchedulerLoop
from app.core.decisions import PendingReason, Preempt
from app.core.types import WorkloadKey
from app.integrations.batchjob.job import KIND as JOB
from app.kube.context import POD
from app.kube.informers import DELETED
from tests.builders import Sim, cluster_queue, workload
from tests.unit.test_eta_messages import FakeStore
from tests.unit.test_orphaned_workloads import NS, pod, reconciler
from tests.unit.test_orphaned_workloads import workload as workload_object

UID = "uid-train"
WL_NAME = JOB.workload_name({"metadata": {"name": "train", "uid": UID, "namespace": NS}})
KEY = WorkloadKey(f"{NS}/{WL_NAME}")


def _setup(release: str = "WhenPodsGone", *, pods_watched: bool = True
           ) -> tuple[Sim, SchedulerLoop, Any, list[dict[str, Any]]]:
    """The scenario's start: ``train``'s Workload admitted with its 2 pods Running (the
    ClusterQueue preempts lower priorities within it)."""
    cq = cluster_queue("cq").flavor("default-flavor", gpu=2).preemption(within="LowerPriority")
    sim = Sim(cq, namespaces={NS: {}})
    sim.add_cq(cq, namespaces=(NS,))
    sim.submit(workload(f"{NS}/{WL_NAME}").cq("cq").pods(2, gpu=1))
    assert sim.admits(sim.cycle()) == [KEY]
    sim.c.update_workload(sim.c.domain_workload(KEY))  # its admission written (not assumed)
    jobs, jctx = reconciler(pods=pods_watched)
    pods = [pod("job", "train", UID, i, phase="Running", owner_ref=True) for i in range(2)]
    for p in pods:
        if pods_watched:
            jctx.store(POD).put(p)
    ctx = SimpleNamespace(
        settings=Settings(controllers_enabled=False, jobs={"deleted_quota_release": release}),
        client=None, store=lambda kind: FakeStore(), clock=lambda: sim.now, may_write=True,
        inflight=set(), informers=SimpleNamespace(informers={}),
        leader=SimpleNamespace(is_leader=True), wake=lambda: None,
        recorder=SimpleNamespace(emit=lambda *a: None))
    loop = SchedulerLoop(ctx, jobs=jobs, cluster=sim.c)  # type: ignore[arg-type]
    return sim, loop, jctx, pods


def _delete_train(loop: SchedulerLoop, *, finished: bool = False) -> None:
    """The garbage collector deletes ``train``'s Workload (owned by the Job, admitted)."""
    obj = workload_object("job", "train", UID, owned=True, labelled=True)
    if finished:
        obj["status"]["conditions"].append({"type": "Finished", "status": "True",
                                            "reason": "Succeeded"})
    loop.feed.on_workload(DELETED, obj, None)


def _queue_b(sim: Sim) -> list[WorkloadKey]:
    """Queue ``b`` (2 GPUs) and run a cycle: the keys admitted."""
    sim.submit(workload(f"{NS}/b").cq("cq").pods(1, gpu=2))
    return sim.admits(sim.cycle())


def _pod_event(loop: SchedulerLoop, jctx: Any, p: dict[str, Any], *, gone: bool = False,
               phase: str | None = None, deleting: bool = False) -> None:
    if gone:
        jctx.store(POD).remove(f"{NS}/{p['metadata']['name']}")
        loop.feed.on_pod(DELETED, p, None)
        return
    new = copy.deepcopy(p)
    if phase is not None:
        new["status"]["phase"] = phase
    if deleting:
        new["metadata"]["deletionTimestamp"] = "2026-12-05T22:00:00Z"
    jctx.store(POD).put(new)
    loop.feed.on_pod("MODIFIED", p, new)


def test_a_deleted_admitted_workload_holds_its_quota_until_no_pod_of_it_runs() -> None:
    sim, loop, jctx, pods = _setup()
    _delete_train(loop)
    assert sim.usage("cq", resource="gpu") == 2
    assert sim.state(KEY) == "evicting"  # held, shown as being evicted: no victim to pick
    assert _queue_b(sim) == []
    assert sim.pending(f"{NS}/b")
    # Both pods are being killed (Terminating): still held.
    for p in pods:
        _pod_event(loop, jctx, p, deleting=True)
    _pod_event(loop, jctx, pods[0], gone=True)
    assert sim.admits(sim.cycle()) == [] and sim.usage("cq", resource="gpu") == 2
    # Killed, it shows Failed; a finalizer (a tenant's own) keeps the object: it holds no
    # resources any more (Kueue KEP-10076 OnTerminal), so the quota goes.
    killed = copy.deepcopy(pods[1])
    killed["metadata"]["deletionTimestamp"] = "2026-12-05T22:00:00Z"
    killed["metadata"]["finalizers"] = ["example.com/keep"]
    _pod_event(loop, jctx, killed, phase="Failed")
    assert sim.c.workload(KEY) is None and loop.feed.held == {}
    assert sim.admits(sim.cycle()) == [WorkloadKey(f"{NS}/b")]
    assert sim.usage("cq", resource="gpu") == 2  # b's alone


def test_terminal_pods_release_the_held_quota() -> None:
    sim, loop, jctx, pods = _setup()
    _delete_train(loop)
    _pod_event(loop, jctx, pods[0], phase="Succeeded")
    assert _queue_b(sim) == []
    _pod_event(loop, jctx, pods[1], phase="Failed")
    assert sim.admits(sim.cycle()) == [WorkloadKey(f"{NS}/b")]


def test_a_finished_workload_deleted_releases_its_quota_at_once() -> None:
    sim, loop, _, _ = _setup()
    _delete_train(loop, finished=True)
    assert sim.c.workload(KEY) is None and loop.feed.held == {}
    assert _queue_b(sim) == [WorkloadKey(f"{NS}/b")]


def test_a_pending_workload_deleted_is_forgotten_at_once() -> None:
    sim, loop, _, _ = _setup()
    sim.submit(workload(f"{NS}/c").cq("cq").pods(1, gpu=2))
    assert sim.admits(sim.cycle()) == [] and sim.pending(f"{NS}/c")
    obj = workload_object("job", "c", "uid-c", owned=True, labelled=True)
    obj["metadata"]["name"] = "c"
    obj["status"] = {}
    loop.feed.on_workload(DELETED, obj, None)
    assert sim.c.workload(WorkloadKey(f"{NS}/c")) is None and loop.feed.held == {}


def test_kueues_value_releases_a_deleted_workloads_quota_at_once() -> None:
    sim, loop, _, _ = _setup(release="Immediately")
    _delete_train(loop)
    assert sim.c.workload(KEY) is None and sim.usage("cq", resource="gpu") == 0
    assert _queue_b(sim) == [WorkloadKey(f"{NS}/b")]  # beside train's pods still running


def test_without_a_pod_watch_the_quota_is_released_at_once() -> None:
    sim, loop, _, _ = _setup(pods_watched=False)
    _delete_train(loop)
    assert _queue_b(sim) == [WorkloadKey(f"{NS}/b")]


def test_a_new_workload_of_a_held_key_replaces_the_hold() -> None:
    """A Workload deleted by hand while its Job runs: the reconciler stops the Job and,
    once its pods are gone, creates the Workload again under the same name; should that
    arrive first, the new object is the truth."""
    sim, loop, _, _ = _setup()
    _delete_train(loop)
    assert sim.usage("cq", resource="gpu") == 2
    sim.submit(workload(f"{NS}/{WL_NAME}").cq("cq").pods(2, gpu=1))
    assert sim.pending(KEY) and sim.usage("cq", resource="gpu") == 0


def test_a_held_workload_is_no_victim_to_evict_again() -> None:
    """A higher-priority Workload that needs the held GPUs waits for them as for a victim
    being evicted: no Preempt written (the Workload is gone), none else evicted."""
    sim, loop, jctx, pods = _setup()
    _delete_train(loop)
    sim.submit(workload(f"{NS}/p").cq("cq").pods(1, gpu=2).priority(10))
    ds = sim.cycle()
    assert not [d for d in ds if isinstance(d, Preempt)] and sim.admits(ds) == []
    assert sim.reason(f"{NS}/p") == PendingReason.WAITING_FOR_PREEMPTION
    # Its message names the held Workload, which `kubectl get workload` no longer finds: it
    # says why (breakdel23).
    message = sim.c.workload(WorkloadKey(f"{NS}/p")).message  # type: ignore[union-attr]
    assert f"{KEY} (deleted, its pods still hold resources)" in message, message
    for p in pods:
        _pod_event(loop, jctx, p, gone=True)
    assert sim.admits(sim.cycle()) == [WorkloadKey(f"{NS}/p")]


def _plain_pod(name: str, uid: str) -> dict[str, Any]:
    """A running managed Pod (single, or a pod group's member): no job labels, no owner."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "uid": uid, "resourceVersion": "1",
                         "labels": {"kueue.x-k8s.io/managed": "true",
                                    "kueue.x-k8s.io/podset": "main"}},
            "spec": {"nodeName": "a100-0"}, "status": {"phase": "Running"}}


def _pods_workload(owners: list[dict[str, Any]], *, controller: bool) -> dict[str, Any]:
    """``train``'s Workload (admitted) owned by ``owners``: a single Pod's (its controller)
    or a pod group's (every member, none the controller)."""
    obj = workload_object("job", "train", UID, owned=False, labelled=False)
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": p["metadata"]["name"],
         "uid": p["metadata"]["uid"], "controller": controller} for p in owners]
    if controller:
        obj["metadata"]["labels"] = {"kueue.x-k8s.io/job-uid": owners[0]["metadata"]["uid"]}
    return obj


def test_a_deleted_pod_workload_holds_its_quota_while_its_pod_runs() -> None:
    """A tenant allowed to delete Workloads deletes a running plain Pod's (or a pod group's)
    Workload: the reconciler then deletes the pods (no Workload), which run out the grace
    period their tenant set; the quota stays held until they are gone."""
    for controller, count in ((True, 1), (False, 2)):
        sim, loop, jctx, _ = _setup()
        owners = [_plain_pod(f"p{i}", f"uid-p{i}") for i in range(count)]
        for p in owners:
            jctx.store(POD).put(p)
        loop.feed.on_workload(DELETED, _pods_workload(owners, controller=controller), None)
        assert sim.usage("cq", resource="gpu") == 2, controller
        assert _queue_b(sim) == []
        for p in owners:
            _pod_event(loop, jctx, p, deleting=True)
        assert sim.admits(sim.cycle()) == [] and sim.usage("cq", resource="gpu") == 2
        for p in owners:
            _pod_event(loop, jctx, p, gone=True)
        assert sim.c.workload(KEY) is None and loop.feed.held == {}
        assert sim.admits(sim.cycle()) == [WorkloadKey(f"{NS}/b")]


def test_the_release_is_told_to_the_queue_status_and_the_finalizer() -> None:
    """The queue status writer and the ClusterQueue finalizer saw the Workload's deletion while
    its quota was still held; at the release they are told again (``on_release``), else the
    ClusterQueue's status kept the held usage until its next change (seen in `make run`:
    research-cq showed 2 l4 GPUs and 1 reserving Workload after its TrainJob's pods were
    gone)."""
    from app.controllers.queue_status import StatusWriter

    sim, loop, jctx, pods = _setup()
    told: list[tuple[str, Any, Any]] = []
    status = StatusWriter.__new__(StatusWriter)
    status.dirty_cqs, status.dirty_lqs = set(), set()
    loop.feed.on_release.extend((status.on_workload, lambda *a: told.append(a)))
    _delete_train(loop)
    assert told == [] and status.dirty_cqs == set()  # held: nothing to tell yet
    for p in pods:
        _pod_event(loop, jctx, p, gone=True)
    assert sim.c.workload(KEY) is None
    assert [(etype, obj["metadata"]["name"], new) for etype, obj, new in told] == [
        (DELETED, WL_NAME, None)]
    assert status.dirty_cqs == {"cq"} and status.dirty_lqs == {f"{NS}/lq"}

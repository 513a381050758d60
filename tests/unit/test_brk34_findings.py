"""brk34: a breaker's findings against f0c2dbd (brk33b F2 closed: an MPIJob's launcher Job
made from an earlier, larger launcher template is deleted once it holds no pod, for
mpi-operator v0.8.0 to make it again from the current template: ``_remake_stale_child``).
Both closed in session 34: L1 (the DELETE carries the Job's resourceVersion as read: one
resumed since is left to ``_hold_to_share``), L2 (``_hold_to_share`` and the extender size
a launcher by the admitted Workload's ``launcher`` podSet: ``child_job_podset``,
``child_sized_by(workload=)``).

L1 (Low: non-GPU requests beyond the admission for the tenant's grace, under store lag).
``_remake_stale_child`` decides on the Job as pykueue's store shows it (suspended, no pod
counted in its status or the Pod store) and deletes it with a uid precondition only,
propagation Background. At admission the MPIJob's start (pykueue's own write, a new
generation) re-queues its children while mpi-operator resumes the same launcher
(``syncLauncherSchedulingDirectives``, ``suspend: false``) and the Job controller makes its
pod. When pykueue's Job and Pod stores have not shown that yet, the DELETE still matches the
uid, and the garbage collector deletes the pod with the pod's own
``terminationGracePeriodSeconds`` (the tenant's: 3600 here), where every other path that
removes a pod beyond its share uses ``BEYOND_SHARE_GRACE_SECONDS`` (1 s,
``_cut_grace_beyond_share``), which needs the Job to exist. The stale launcher a tenant keeps
until admission is easy to have: a suspended Job that never started takes new container
resources on this lab's v1.36 API server (the tenant patches mpi-operator's own launcher to
cpu 8; pykueue deletes it once per MPIJob generation, the patched remake is kept until the
generation changes, which is at admission). The extender withholds a pod asking more GPUs
than the launcher template, so the gap is in cpu and memory (quota'd resources a
ClusterQueue covers). A ``resourceVersion`` precondition (409 when the Job changed since it
was read) or pods deleted with a 1-s grace first would close it. Lab: 5 of 5 admissions
pykueue deleted the kept 8-cpu launcher before mpi-operator resumed it (no pod made): the
window is the store lag, not reproduced on an idle lab; this test plays it with a fake API
server that applies DELETE preconditions as the real one does.

L2 (Low, false positive of sorts: a graceful stop lost). A running MPIJob's launcher template
lowered by its user (the MPIJob webhook allows it; pykueue then stops the MPIJob for the
mismatch, and mpi-operator's suspension lets the launcher pod run out its own grace) is first
compared by ``_hold_to_share`` with the lowered template (``child_sized_by``: the MPIJob as it
is now), not with the podSet its Workload was admitted for: the launcher, which asks exactly
what was admitted, is set to parallelism 0 and its pod deleted with a 1-s grace, the Event
saying "1 pod(s) beyond the 0 pod(s) of its MPIJob's admission". Lab (this session, f0c2dbd,
MPIJob ``m`` in a 2-GPU queue, launcher 1 GPU with ``terminationGracePeriodSeconds: 600`` + 1
worker of 1 GPU, launcher lowered to no GPU while running; the stop alone would allow 600 s,
``grace_allowed``): ``ExceedsAncestorAdmission`` "spec.parallelism 1 set to 0", ``DeletedPods`` "1
pod(s) beyond the 0 pod(s) of its MPIJob's admission deleted with a grace period of 1 s",
then ``DeletedStaleChildJob`` and the mismatch stop; the MPIJob re-queued and succeeded.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

from app.integrations.batchjob.job import KIND as BATCH_JOB
from app.integrations.kubeflow.kubeflow import MPIJOB
from app.integrations.reconciler import BEYOND_SHARE_GRACE_SECONDS
from app.kube.client import PODS, WORKLOADS
from app.kube.context import POD, WL
from app.kube.errors import Conflict, NotFound
from app.kube.informers import Store
from tests.unit.test_brk30b_findings import _Client, _Reconciler
from tests.unit.test_brk33b_findings import _launcher_job as brk33b_launcher
from tests.unit.test_brk33b_findings import _mpijob as brk33b_mpijob

NS = "t"  # test_brk33b_findings.NS


def _mpijob(*, generation: int) -> dict[str, Any]:
    """MPIJob t/mj just started by pykueue (``suspend: false``, a new generation): a launcher
    of cpu 100m, 2 GPU workers (``test_brk33b_findings._mpijob``)."""
    return brk33b_mpijob("100m", generation=generation)


def _launcher(*, suspended: bool, rv: str) -> dict[str, Any]:
    """``mj-launcher`` as mpi-operator made it (``test_brk33b_findings._launcher_job``), its
    container patched by the tenant to cpu 8 while it was suspended and had never started
    (allowed on v1.36), grace 3600 s."""
    job = brk33b_launcher("8", suspended=suspended)
    job["metadata"]["resourceVersion"] = rv
    job["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 3600
    return job


class _Server:
    """The API server's side: the Job as it is now and its pods; a Job DELETE checks the
    preconditions given (uid, resourceVersion: 409 on a mismatch, as the API server) and,
    propagation Background, has the garbage collector delete the Job's pods with their own
    grace."""

    def __init__(self, job: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        self.job: dict[str, Any] | None = job
        self.pods = pods
        self.pod_graces: dict[str, int] = {}

    async def delete(self, resource: Any, name: str, namespace: str, *, uid: Any = None,
                     resource_version: Any = None, propagation: Any = "Background",
                     grace_period_seconds: int | None = None) -> None:
        job = self.job
        if job is None or job["metadata"]["name"] != name:
            raise NotFound(404, "NotFound")
        meta = job["metadata"]
        if uid and uid != meta["uid"] or resource_version and \
                resource_version != meta["resourceVersion"]:
            raise Conflict(409, "Conflict", "Precondition failed")
        self.job = None
        for pod in self.pods:  # the garbage collector, the pod's own grace
            grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
            self.pod_graces[pod["metadata"]["name"]] = int(grace)


_Rec = _Reconciler  # JobReconciler's child-Job methods over a ctx alone


async def test_l1_a_launcher_resumed_since_it_was_read_is_not_deleted_with_its_pods_grace(
        ) -> None:
    """pykueue's stores: ``mj-launcher`` suspended (resourceVersion 7), no pod. The API
    server: mpi-operator has resumed it (resourceVersion 8) and the Job controller made its
    pod (cpu 8 on an admission of 100m, grace 3600 s). Whatever pykueue does, that pod must
    not be left running out a grace beyond ``BEYOND_SHARE_GRACE_SECONDS``."""
    seen = _launcher(suspended=True, rv="7")
    live = _launcher(suspended=False, rv="8")
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "mj-launcher-x7k2p", "namespace": NS, "uid": "p-uid",
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                             "name": "mj-launcher", "uid": "l-uid",
                                             "controller": True}]},
           "spec": copy.deepcopy(live["spec"]["template"]["spec"]),
           "status": {"phase": "Running"}}
    server = _Server(live, [pod])
    store = Store(PODS)  # pykueue's Pod store has not shown the pod yet
    events: list[tuple[Any, ...]] = []
    ctx = SimpleNamespace(client=server, informers=SimpleNamespace(informers={POD: None}),
                          store=lambda key: store,
                          recorder=SimpleNamespace(emit=lambda *a: events.append(a)))
    rec = _Rec(ctx)
    await rec._remake_stale_child(BATCH_JOB, seen, MPIJOB, _mpijob(generation=3))
    assert all(g <= BEYOND_SHARE_GRACE_SECONDS for g in server.pod_graces.values()), (
        f"the launcher Job was deleted while its pod ran; the garbage collector gives "
        f"{server.pod_graces} s of grace to a pod asking cpu 8 on an admission of 100m")


async def test_l1_control_a_launcher_as_read_is_deleted() -> None:
    """The control: the same Job, unchanged on the server since it was read (suspended, no
    pod), is deleted for mpi-operator to make again, as f0c2dbd intends."""
    seen = _launcher(suspended=True, rv="7")
    server = _Server(copy.deepcopy(seen), [])
    store = Store(PODS)
    events: list[tuple[Any, ...]] = []
    ctx = SimpleNamespace(client=server, informers=SimpleNamespace(informers={POD: None}),
                          store=lambda key: store,
                          recorder=SimpleNamespace(emit=lambda *a: events.append(a)))
    assert await _Rec(ctx)._remake_stale_child(BATCH_JOB, seen, MPIJOB, _mpijob(generation=3))
    assert server.job is None and server.pod_graces == {}


# -------------------------------- L2: a running launcher lowered is killed in 1 s, not stopped


def _store_ctx(client: Any, pods: list[dict[str, Any]], workloads: list[dict[str, Any]]) -> Any:
    """A ctx whose Pod and Workload stores hold ``pods`` and ``workloads`` (any other store
    empty), with ``client`` and a recorder."""
    stores: dict[str, Store] = {POD: Store(PODS), WL: Store(WORKLOADS)}
    for pod in pods:
        stores[POD].put(pod)
    for wl in workloads:
        stores[WL].put(wl)
    events: list[tuple[Any, ...]] = []
    return SimpleNamespace(client=client, events=events,
                           informers=SimpleNamespace(informers={POD: None, WL: None}),
                           store=lambda key: stores.setdefault(key, Store(PODS)),
                           recorder=SimpleNamespace(emit=lambda *a: events.append(a)))


async def test_l2_a_running_launcher_within_its_admission_is_not_cut_when_the_template_is_lowered(
        ) -> None:
    """MPIJob t/mj admitted with its launcher at cpu 2 (its Workload's podSet), running: its
    launcher Job (cpu 2, as admitted) runs its pod (grace 600 s). The user lowers the
    launcher template to cpu 1 (a new generation; the MPIJob webhook allows it, and pykueue
    then stops the MPIJob for the mismatch: mpi-operator suspends the launcher and the Job
    controller deletes its pod with the pod's grace). Lab (this session, test A): before that
    stop, ``_hold_to_share`` compares the launcher with the lowered template, not with the
    admission, sets it to parallelism 0 (``ExceedsAncestorAdmission``) and deletes its pod
    with a grace of 1 s ("1 pod(s) beyond the 0 pod(s) of its MPIJob's admission"), though it
    asks exactly what its Workload was admitted for."""
    parent = brk33b_mpijob("1", generation=4)
    running = brk33b_launcher("2")
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "mj-launcher-q9z8w", "namespace": NS, "uid": "p-uid",
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                             "name": "mj-launcher", "uid": "l-uid",
                                             "controller": True}]},
           "spec": {"terminationGracePeriodSeconds": 600, "containers": copy.deepcopy(
               running["spec"]["template"]["spec"]["containers"])},
           "status": {"phase": "Running"}}
    admitted_launcher = brk33b_mpijob("2")["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]
    worker = parent["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    wl = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
          "metadata": {"name": MPIJOB.workload_name(parent), "namespace": NS,
                       "ownerReferences": [{"apiVersion": "kubeflow.org/v2beta1",
                                            "kind": "MPIJob", "name": "mj", "uid": "mj-uid",
                                            "controller": True}]},
          "spec": {"queueName": "lq", "podSets": [
              {"name": "launcher", "count": 1, "template": copy.deepcopy(admitted_launcher)},
              {"name": "worker", "count": 2, "template": copy.deepcopy(worker)}]},
          "status": {"admission": {"clusterQueue": "cq", "podSetAssignments": [
              {"name": "launcher", "flavors": {"cpu": "default"},
               "resourceUsage": {"cpu": "2"}, "count": 1},
              {"name": "worker", "flavors": {"nvidia.com/gpu": "a100"},
               "resourceUsage": {"nvidia.com/gpu": "2"}, "count": 2}]},
              "conditions": [{"type": "QuotaReserved", "status": "True"},
                             {"type": "Admitted", "status": "True"}]}}
    client = _Client()
    rec = _Rec(_store_ctx(client, [pod], [wl]))
    await rec._hold_to_share(running, MPIJOB, parent)
    assert client.replaced == [] and client.deleted == [], (
        f"held: {[j['spec']['parallelism'] for j in client.replaced]}, pods deleted "
        f"(name, grace s): {client.deleted}")

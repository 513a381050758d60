"""brk33b: a breaker's findings against 4e6f5fc (brk33 closed: the extender asks ``withheld``
for every pod, ``_selects``, ``pod_set_gpus`` with LimitRange defaults, ``_beyond_podset``;
the reconciler's ``_hold_to_share`` compares a child Job's template with its sized-by one;
``jobs.pod_replacement_policy: Failed``). Default settings unless a test says. Strict xfails:
each passes once its finding is closed. Closed in session 33: F1 (``_pod_gpus`` copies limits
into missing requests before the LimitRange defaults, as the API server makes a pod:
``podadjust.with_limits_as_requests``), B1 (with ``jobs.pod_replacement_policy: Failed`` the
extender places no pod of a Job that has as many GPU pods bound and not terminal as its
admission: ``NodeStore.bound_pods``, ``_decide(count_bound=)``), B2 (a pod naming a Job by
label or a non-controller ownerReference that the Job's selector does not take gets no node:
``_unselected_by_name``). Closed in session 34: F2 (a stale launcher is deleted for
mpi-operator to make again from the current template: ``_remake_stale_child``).

F1 (Medium, false positive: pods withheld for ever). The extender's admitted GPU count of a
pod (``StoreExtenderState._pod_gpus``: a Workload's podSet template, or a child Job's sized-by
template) gives the template the namespace's LimitRange defaults in Kueue's order
(``podadjust.adjust_pod_spec``: ``defaultRequest`` first, then limits as missing requests).
The API server does the opposite for a Pod: its defaulting (``SetDefaults_Pod``, at decode,
before admission) copies every limit to a missing request, and only then does the LimitRanger
add ``defaultRequest`` where a request is still missing. So a container that asks its GPUs as
a limit only (NVIDIA's documented form, ``limits: {nvidia.com/gpu: 4}``) in a namespace whose
LimitRange gives ``nvidia.com/gpu`` a ``default`` (or a ``min``) below it is counted at the
default by pykueue and runs at the limit. Lab (4e6f5fc, this machine's v1.36.3 API server):
LimitRange ``{type: Container, default: {gpu: 1}, max: {gpu: 8}}`` is stored with
``defaultRequest: {gpu: 1}``; a Pod with ``limits: {gpu: 4}`` is stored with ``requests:
{gpu: 4}``. pykueue: ``pod_set_gpus`` 1, the pod 4, "requests 4 GPU(s), more than the 1":
every node unresolvable, the Job (or JobSet child) admitted and never running (lab: the
pod Pending 60 s, "0/4 nodes are available: 1 node(s) withheld by pykueue: ... requests 4
GPU(s), more than the 1 ..."). Before this
session the pod ran, 4 GPUs on an admission of 1 (Kueue v0.17.1 counts 1 too): whichever way
it is closed, the count has to be the pod's (4).

F2 (Low, false positive: an MPIJob's launcher set to parallelism 0 for good). mpi-operator
v0.8.0 creates the launcher Job at once (``launcherCreationPolicy: AtStartup``, the default),
suspended while the MPIJob is, from the launcher template as it then is; on resume it syncs
only labels, annotations, nodeSelector, tolerations and scheduling gates
(``syncLauncherSchedulingDirectives``). A tenant who lowers the queued MPIJob's launcher
requests (say cpu 2 -> 1 to fit) gets a new Workload sized by the new template (Kueue's
rule), but the launcher Job keeps cpu 2; once admitted, ``_hold_to_share`` finds it asking
more than its sized-by template (``requests_beyond``: any resource, cpu included) and sets it
to parallelism 0. The workers run (holding their GPUs) and the launcher never does: the
MPIJob hangs until someone deletes it. Lowering is the direction a user takes to get
admitted; raising leaves the stale Job smaller (no hold).

B1 (Medium, bypass of the opt-in ``jobs.pod_replacement_policy: Failed``, brk32 H4's
closure). With ``Failed`` the Job controller starts no replacement while a deleted pod runs
out its grace, but the tenant can make the replacement itself: a pod with the Job's controller
ownerReference and the pod labels the Job's ``spec.selector`` takes (copied from its own
pod). The Job controller counts active pods only (a terminating one is not active), so it
counts the forged pod as the one it wants and deletes nothing; the extender checks its
owner, its admission, its selector and its size, all of which pass. Deleting the forged pod
in turn and forging another repeats it: one more pod of the admitted size per round, for as
long as the grace period the tenant set. Lab (``tests/e2e/test_brk33b_findings.py``, a
1-GPU ClusterQueue, Job ``j`` of one 1-GPU pod, two rounds): 3 GPUs Running on an admission
of 1 (``j-8xsk8`` terminating, ``j-mine-0`` terminating, ``j-mine-1``).

B2 (Low, bypass of ``extender.flavor_nodes_for_admitted_only`` without pod gating). A pod
with no controller but the label ``batch.kubernetes.io/job-name: <an admitted Job>`` (or a
non-controller ownerReference to it), and no ``controller-uid`` label, is not selected by
the Job (the Job controller neither adopts, counts nor deletes it); ``_decide`` finds the
Job's Workload view through the label (``job_name_of``) and places it on the flavor's nodes
when it asks no more than a pod of the podSet: any number of such pods, outside every quota,
where the setting promises "every flavor node is unresolvable" for a pod no admitted Workload
covers. ``_selects`` is asked only of a pod naming the Job as its controller. With
``jobs.manage_jobs_without_queue_name`` and the unlabelled webhooks (the full setup) such a
pod is gated at create in a managed namespace; the gap is the setting alone, or an unmanaged
namespace with a queued Job.

Looked at and not found: TrainJob sizing on the stock runtimes against trainer v2.2.0
(``newRuntimeInfo``, the torch, mpi, jax, xgboost, flux and plainml ``EnforceMLPolicy``,
``jobset/builder.go`` ``Trainer``/``Initializer``): counts and resourcesPerNode agree for
torch-distributed, deepspeed-distributed, mlx-distributed, jax-distributed and
xgboost-distributed, without ``numNodes`` and without an mlPolicy; flux's ``flux-installer``
init container asks no resources; ``runtimePatches`` cannot carry container resources
(``ContainerPatch``: env, volumeMounts, securityContext). mpi-operator v0.8.0's
``newLauncherPodTemplate`` adds env, volumes and mounts only. jobset v0.11.1's webhook refuses
a replicatedJob resource change even while suspended (no stale child Jobs). ``_selects``
reads matchExpressions as Kubernetes does; a MultiKueue worker's Job gets a new selector.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import pytest

from app.api.extender import _decide, _Parsed
from app.config import Settings
from app.controllers.admission_lookup import StoreExtenderState
from app.extender.nodestore import NodeStore
from app.extender.placement import FlavorView, NodeFacts, NodeIndex, filter_pod, pod_facts
from app.integrations import default_registry
from app.integrations.batchjob.job import KIND as BATCH_JOB
from app.integrations.kubeflow.kubeflow import MPIJOB
from app.integrations.reconciler import JobReconciler
from app.kube.client import JOBS
from app.kube.context import CHILD_JOBS, JOB, LR, WL
from app.kube.informers import Store
from app.wire.workload import workload_name_for_job
from tests.unit.test_brk30b_findings import _reconciler
from tests.unit.test_brk32_findings import _extender_state, _operators_train_w_0
from tests.unit.test_brk33_findings import _pod_with_sidecars

GPU = "nvidia.com/gpu"
NS = "t"
A100 = FlavorView.of("a100", {"pool": "a100"})
LIMIT_RANGE = {"apiVersion": "v1", "kind": "LimitRange",
               "metadata": {"name": "gpu", "namespace": NS},
               # As the API server stores {default: {gpu: 1}, max: {gpu: 8}}
               # (SetDefaults_LimitRangeItem: defaultRequest from default).
               "spec": {"limits": [{"type": "Container", "default": {GPU: "1"},
                                    "defaultRequest": {GPU: "1"}, "max": {GPU: "8"}}]}}
LIMITS_ONLY = {"limits": {GPU: "4"}}
# The pod the API server makes of a container with LIMITS_ONLY (SetDefaults_Pod copies the
# limit to the missing request before the LimitRanger runs; measured on the lab).
AS_STORED = {"limits": {GPU: "4"}, "requests": {GPU: "4"}}


def _with_limit_range(state: StoreExtenderState) -> StoreExtenderState:
    ranges = Store(JOBS)
    ranges.put(copy.deepcopy(LIMIT_RANGE))
    stores = state.ctx.store
    state.ctx = SimpleNamespace(store=lambda k: ranges if k == LR else stores(k), synced=True,
                                settings=state.ctx.settings)
    return state


# -------------------------------------------------- F1: limits-only GPUs under a LimitRange


def _queued_job_state(resources: dict[str, Any], *, parallelism: int = 1) -> StoreExtenderState:
    """Job t/j (labelled, uid ``j-uid``, 1 pod whose container has ``resources``) admitted
    to flavor a100, its Workload's podSet template the Job's."""
    template = {"spec": {"containers": [{"name": "c", "resources": resources}]}}
    jobs, wls = Store(JOBS), Store(JOBS)
    jobs.put({"apiVersion": "batch/v1", "kind": "Job",
              "metadata": {"namespace": NS, "name": "j", "uid": "j-uid",
                           "resourceVersion": "1", "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
              "spec": {"parallelism": parallelism, "completions": parallelism,
                       "selector": {"matchLabels": {
                           "batch.kubernetes.io/controller-uid": "j-uid"}},
                       "template": template}})
    wls.put({"metadata": {"namespace": NS, "name": workload_name_for_job("j", "j-uid"),
                          "resourceVersion": "1"},
             "spec": {"queueName": "lq", "podSets": [
                 {"name": "main", "count": parallelism, "template": template}]},
             "status": {"admission": {"clusterQueue": "cq", "podSetAssignments": [
                 {"name": "main", "count": parallelism, "flavors": {GPU: "a100"}}]},
                        "conditions": [{"type": "QuotaReserved", "status": "True"},
                                       {"type": "Admitted", "status": "True"}]}})
    stores = {JOB: jobs, WL: wls}
    ctx = SimpleNamespace(store=lambda k: stores.get(k) or Store(JOBS), synced=True,
                          settings=Settings())
    state = StoreExtenderState(ctx, NodeStore(GPU), default_registry())  # type: ignore[arg-type]
    state.flavors = lambda: (A100,)  # type: ignore[method-assign]
    return state


def _job_pod(resources: dict[str, Any], *, name: str = "j-abcde",
             controller: bool = True, selected: bool = True) -> dict[str, Any]:
    labels = {"batch.kubernetes.io/job-name": "j", "kueue.x-k8s.io/podset": "main"}
    if selected:
        labels["batch.kubernetes.io/controller-uid"] = "j-uid"
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"{name}-uid",
                            "labels": labels}
    if controller:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j",
                                    "uid": "j-uid", "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "c", "resources": resources}]}}


def test_f1_a_jobs_limits_only_gpu_pod_is_placed_under_a_gpu_limitrange() -> None:
    state = _with_limit_range(_queued_job_state(LIMITS_ONLY))
    facts = pod_facts(_job_pod(AS_STORED), GPU)
    assert facts.gpus == 4
    assert state.withheld(facts) == ""
    view = state.workload_for_pod(NS, "j", "j-uid")
    assert view is not None and view.admitted
    index = NodeIndex([NodeFacts("a100-0", {"pool": "a100"}, gpus=8)])
    decision = filter_pod(facts, view, ["a100-0"], index, (A100,))
    assert decision.passing == ["a100-0"], decision.unresolvable


def test_f1_a_child_jobs_limits_only_gpu_pod_is_placed_under_a_gpu_limitrange() -> None:
    child = _operators_train_w_0("1")
    child["spec"]["template"]["spec"]["containers"][0]["resources"] = copy.deepcopy(LIMITS_ONLY)
    child["spec"]["suspend"] = False
    state = _extender_state(child, CHILD_JOBS)
    train = state.ctx.store("jobset").get("t/train")
    train["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"][0]["resources"] = copy.deepcopy(LIMITS_ONLY)
    state = _with_limit_range(state)
    pod = _pod_with_sidecars(child, 0)
    pod["spec"]["containers"][0]["resources"] = copy.deepcopy(AS_STORED)
    assert state.withheld(pod_facts(pod, GPU)) == ""


def test_f1_without_the_limitrange_the_same_pod_is_placed() -> None:
    """Passes (the control): no LimitRange, template and pod both count 4."""
    state = _queued_job_state(LIMITS_ONLY)
    facts = pod_facts(_job_pod(AS_STORED), GPU)
    view = state.workload_for_pod(NS, "j", "j-uid")
    assert view is not None and view.pod_set_gpus == {"main": 4}
    index = NodeIndex([NodeFacts("a100-0", {"pool": "a100"}, gpus=8)])
    assert filter_pod(facts, view, ["a100-0"], index, (A100,)).passing == ["a100-0"]


# ---------------------------------------------- F2: an MPIJob's launcher made before an edit


def _mpijob(launcher_cpu: str, *, generation: int = 2) -> dict[str, Any]:
    """MPIJob t/mj (admitted, running), launcher cpu ``launcher_cpu``, 2 workers of 1 GPU."""
    def replica(n: int, resources: dict[str, Any]) -> dict[str, Any]:
        return {"replicas": n, "template": {"spec": {"containers": [
            {"name": "c", "image": "mpi", "resources": resources}]}}}
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
            "metadata": {"name": "mj", "namespace": NS, "uid": "mj-uid",
                         "generation": generation,
                         "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
            "spec": {"runPolicy": {"suspend": False}, "slotsPerWorker": 1,
                     "mpiReplicaSpecs": {
                         "Launcher": replica(1, {"requests": {"cpu": launcher_cpu}}),
                         "Worker": replica(2, {"limits": {GPU: "1"}})}}}


def _launcher_job(launcher_cpu: str, *, suspended: bool = False, uid: str = "l-uid"
                  ) -> dict[str, Any]:
    """``mj-launcher`` as mpi-operator v0.8.0 made it when ``mj`` was created (launcher cpu
    ``launcher_cpu`` then): suspended (no pod), or resumed (scheduling directives synced,
    resources not) with its pod active."""
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "mj-launcher", "namespace": NS, "uid": uid,
                         "labels": {"training.kubeflow.org/job-name": "mj",
                                    "training.kubeflow.org/job-role": "launcher"},
                         "ownerReferences": [{"apiVersion": "kubeflow.org/v2beta1",
                                              "kind": "MPIJob", "name": "mj", "uid": "mj-uid",
                                              "controller": True}]},
            "spec": {"suspend": suspended, "parallelism": 1, "completions": 1,
                     "template": {"spec": {"containers": [
                         {"name": "c", "image": "mpi",
                          "resources": {"requests": {"cpu": launcher_cpu}}}]}}},
            "status": {} if suspended else {"active": 1}}


async def test_f2_a_suspended_launcher_made_before_the_edit_is_deleted_for_the_operator_to_remake(
        ) -> None:
    """The MPIJob's launcher cpu lowered 2 -> 1 while queued: the launcher Job mpi-operator
    made at creation (cpu 2), still suspended, is deleted (its uid as precondition), and
    mpi-operator makes it again from the current template; an Event on the MPIJob says
    why."""
    assert MPIJOB.remakes_deleted_child_jobs
    rec = _reconciler()
    assert await JobReconciler._remake_stale_child(  # type: ignore[arg-type]
        rec, BATCH_JOB, _launcher_job("2", suspended=True), MPIJOB, _mpijob("1"))
    assert rec.ctx.client.deleted == [("mj-launcher", None)]
    assert rec.ctx.client.replaced == []
    (obj, _, reason, message), = rec.ctx.events
    assert obj["kind"] == "MPIJob" and reason == "DeletedStaleChildJob"
    assert "{'cpu': 2000}, beyond the {'cpu': 1000}" in message, message


async def test_f2_a_running_stale_launcher_is_held_to_no_pod_then_deleted() -> None:
    """Resumed before pykueue saw it (its pod active): set to parallelism 0 first, as any
    child Job asking beyond its podSet (its pod goes with a 1-s grace), and deleted for
    its operator once it holds no pod."""
    rec = _reconciler()
    running = _launcher_job("2")
    assert not await JobReconciler._remake_stale_child(  # type: ignore[arg-type]
        rec, BATCH_JOB, running, MPIJOB, _mpijob("1"))
    assert rec.ctx.client.deleted == []
    await JobReconciler._hold_to_share(rec, running, MPIJOB, _mpijob("1"))  # type: ignore[arg-type]
    held = rec.ctx.client.replaced[-1]
    assert held["spec"]["parallelism"] == 0
    assert not await JobReconciler._remake_stale_child(  # type: ignore[arg-type]
        rec, BATCH_JOB, held, MPIJOB, _mpijob("1"))  # its pod still active
    held["status"] = {"active": 0, "terminating": 0}
    assert await JobReconciler._remake_stale_child(  # type: ignore[arg-type]
        rec, BATCH_JOB, held, MPIJOB, _mpijob("1"))
    assert rec.ctx.client.deleted == [("mj-launcher", None)]


async def test_f2_a_remade_launcher_still_beyond_is_deleted_once_per_edit() -> None:
    """A Job made again that still asks beyond (an operator that does not make it from the
    current template) is not deleted again for the same MPIJob generation: it stays held;
    a new edit of the MPIJob may delete it once more."""
    rec = _reconciler()
    assert await JobReconciler._remake_stale_child(  # type: ignore[arg-type]
        rec, BATCH_JOB, _launcher_job("2", suspended=True), MPIJOB, _mpijob("1"))
    again = _launcher_job("2", suspended=True, uid="l-uid-2")
    assert not await JobReconciler._remake_stale_child(  # type: ignore[arg-type]
        rec, BATCH_JOB, again, MPIJOB, _mpijob("1"))
    assert await JobReconciler._remake_stale_child(  # type: ignore[arg-type]
        rec, BATCH_JOB, again, MPIJOB, _mpijob("1", generation=3))
    assert len(rec.ctx.client.deleted) == 2


async def test_f2_an_unedited_or_raised_launcher_is_kept() -> None:
    """The controls: a launcher made from the current template, or from a smaller one (the
    template raised while queued: the old Job asks less than admitted, as Kueue runs it), is
    neither deleted nor held."""
    rec = _reconciler()
    for made, now in (("1", "1"), ("1", "2")):
        for suspended in (True, False):
            assert not await JobReconciler._remake_stale_child(  # type: ignore[arg-type]
                rec, BATCH_JOB, _launcher_job(made, suspended=suspended), MPIJOB, _mpijob(now))
    await JobReconciler._hold_to_share(  # type: ignore[arg-type]
        rec, _launcher_job("1"), MPIJOB, _mpijob("1"))
    assert rec.ctx.client.deleted == [] and rec.ctx.client.replaced == []


# --------------------------------------- B1: the tenant's own replacement under Failed


def test_b1_a_forged_replacement_beside_a_terminating_pod_gets_no_node() -> None:
    state = _queued_job_state({"limits": {GPU: "1"}})
    state.nodes.update({"metadata": {"name": "a100-0", "labels": {"pool": "a100"}},
                        "status": {"allocatable": {GPU: "8"}}})
    deleted = _job_pod({"limits": {GPU: "1"}, "requests": {GPU: "1"}}, name="j-first")
    deleted["metadata"]["deletionTimestamp"] = "2026-12-07T08:00:00Z"
    deleted["spec"]["nodeName"] = "a100-0"
    deleted["status"] = {"phase": "Running"}
    state.on_pod("ADDED", None, deleted)
    forged = pod_facts(_job_pod({"limits": {GPU: "1"}, "requests": {GPU: "1"}},
                                name="j-forged"), GPU)
    assert state.gpu_used("a100-0") == 1  # the deleted pod still holds its GPU
    decision = _decide(_Parsed(forged, ["a100-0"]), state, count_bound=True)
    assert decision.passing == [], "a second 1-GPU pod of j placed on an admission of 1"
    assert "has 1 pod(s) bound and not terminal" in decision.unresolvable["a100-0"]
    # Without the setting (Kueue's default) the replacement runs beside it, as the Job
    # controller's own would (brk32 H4).
    assert _decide(_Parsed(forged, ["a100-0"]), state).passing == ["a100-0"]
    # Once the deleted pod is gone, the replacement is placed.
    state.on_pod("DELETED", deleted, None)
    assert _decide(_Parsed(forged, ["a100-0"]), state, count_bound=True).passing == ["a100-0"]


# ------------------------------------ B2: a job-name label under flavor_nodes_for_admitted_only


@pytest.mark.parametrize("how", ["label", "non-controller-reference"])
def test_b2_a_pod_only_labelled_with_an_admitted_jobs_name_gets_no_flavor_node(
        how: str) -> None:
    state = _queued_job_state({"limits": {GPU: "1"}})
    state.nodes.update({"metadata": {"name": "a100-0", "labels": {"pool": "a100"}},
                        "status": {"allocatable": {GPU: "8"}}})
    pod = _job_pod({"limits": {GPU: "1"}}, name="stray", controller=False, selected=False)
    if how == "non-controller-reference":
        pod["metadata"]["labels"] = {}
        pod["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job",
                                               "name": "j", "uid": "j-uid"}]
    facts = pod_facts(pod, GPU)
    assert facts.job_name == "j" and facts.controller is None
    decision = _decide(_Parsed(facts, ["a100-0"]), state, admitted_only=True)
    assert decision.passing == [], "a pod j does not select placed on j's admission"


def test_b2_the_same_pod_without_the_label_gets_no_flavor_node() -> None:
    """Passes (the control): the setting keeps an unlabelled bare GPU pod off a100-0."""
    state = _queued_job_state({"limits": {GPU: "1"}})
    state.nodes.update({"metadata": {"name": "a100-0", "labels": {"pool": "a100"}},
                        "status": {"allocatable": {GPU: "8"}}})
    pod = _job_pod({"limits": {GPU: "1"}}, name="stray", controller=False, selected=False)
    pod["metadata"]["labels"] = {}
    decision = _decide(_Parsed(pod_facts(pod, GPU), ["a100-0"]), state, admitted_only=True)
    assert decision.passing == []

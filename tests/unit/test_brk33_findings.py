"""brk33: a breaker's findings against 3f70921 (brk32 H1 and H3 closed: a child Job of a
queued ancestor is held to the pod template its share was sized by, ``child_job_sized_by``,
in the extender ``StoreExtenderState._beyond_podset``, the reconciler
``JobReconciler._hold_to_share`` and the Job webhook ``_child_requests_errors``). Default
settings unless a test says. Strict xfails: each passes once its finding is closed.
All four closed in session 33: M1 (``child_jobset`` counts as trainer v2.2.0, MPI's
``node`` replicatedJob and ``runLauncherAsNode`` included), M2 (the Job webhook and the
reconciler compare DRA claims, ``template_claims``), L1 (``pod_facts`` counts sidecars), L2
(the extender gives the sized-by template, and a Workload's podSets, the namespace's
LimitRange defaults before comparing GPUs, ``StoreExtenderState._pod_gpus``). Open: M1's
other half, the trainer merging every ``runtimePatches`` entry (pykueue reads its own).

M1 (false positive; a stock Kubeflow Trainer runtime cannot run its worker pods): pykueue's
model of the JobSet the trainer (v2.2.0) builds for a TrainJob (``trainjob.child_jobset``)
gives ``spec.trainer.resourcesPerNode`` to the trainer step's replicatedJob only and runs it
``numNodes`` pods. For an MPI runtime with ``mlPolicy.mpi.runLauncherAsNode: true`` (the
stock ClusterTrainingRuntimes ``deepspeed-distributed`` and ``mlx-distributed``) the trainer
builds ``launcher`` (the trainer step) with the runtime's ``mlPolicy.numNodes`` pods (1) and
``node`` with ``max(numNodes - 1, 1)`` pods, and gives ``resourcesPerNode`` to the ``node``
container of *both* (trainer v2.2.0 ``jobset/builder.go`` ``Trainer``: ``ancestor ==
trainer || isRunLauncherAsNode && name == node``; ``mpi.go`` ``EnforceMLPolicy``). Steps:
TrainJob ``tj`` on ``deepspeed-distributed``, ``numNodes: 3``, ``resourcesPerNode`` 4 GPUs.
pykueue's Workload: ``launcher`` 3 x 4 GPUs, ``node`` 1 x 0 (12 GPUs); the trainer's JobSet:
``launcher`` 1 x 4, ``node`` 2 x 4 (12 GPUs, the same total, otherwise spread). Admitted for
12, the trainer's Job ``tj-node-0`` (2 pods of 4 GPUs) is set to parallelism 0 by
``_hold_to_share`` (its share's template asks 0 GPUs), the extender withholds its pods
("requests 4 nvidia.com/gpu, more than the 0"), and ``JobSet.hold_to_ancestor`` (already
before 3f70921) suspends the JobSet (``node``: 2 pods of 4 GPUs beyond 1 of 0), which the
trainer unsuspends again (its ``jobset.go`` Build re-applies a suspended JobSet of a running
TrainJob). Running: at most the launcher's 4 GPUs of the 12 admitted, the training never
completes. With ``numNodes: 1`` the trainer runs 8 GPUs (launcher 4 + node 4) where
pykueue admitted 4: there the holds are right, and pykueue's sizing is what is wrong. The
same class: the trainer strategically merges *every* ``spec.runtimePatches`` entry (any
manager, the tenant's too) into the runtime template before building
(``trainingruntime.go`` ``mergeRuntimePatches``), containers' resources included; pykueue
reads only its own patch, so a legitimate patch that adds a sidecar or resources makes the
JobSet and its Jobs "bigger than admitted" (held), where Kueue sizes from the trainer's
``runtime.Info`` (patches merged). Unit only: the trainer is not built on this machine yet.

M2 (DRA claims are not part of the sized-by comparison): with
``resources.deviceClassMappings`` (DRA devices counted as quota), a child Job of a JobSet
(TrainJob, MPIJob launcher, RayJob submitter) is compared with its sized-by template by
``template_requests`` only: ``spec.template.spec.resourceClaims`` (a ResourceClaimTemplate
of the tenant's namespace asking 8 devices) is not compared (the AppWrapper path,
``_child_template_errors``, compares claims: ``template_differences``). brk32 H1's CREATE
route (a Job created running under the admitted ``train`` with its Job's name) with the
replicatedJob's 1 GPU and a claim of 8 DRA GPUs: allowed by the webhook, left running by
``_hold_to_share``; the extender counts the extended resource only. A child Job is in no
Workload, so its claims are counted nowhere: 8 devices on an admission of none.

L1 (the extender's GPU count of a pod misses sidecars): ``placement.pod_facts`` counts
``max(sum(containers), max(initContainers))``; Kubernetes (``resource.PodRequests``, which
``podtemplate.pod_requests`` follows) adds every init container with ``restartPolicy:
Always`` (a sidecar, GA in v1.33) to the containers' sum. A pod of ``train-w-0`` (the admitted
JobSet ``train``: 1 pod of 1 GPU) with one container of 1 GPU and 7 sidecars of 1 GPU each
takes 8 GPUs on its node; ``_beyond_podset`` sees 1 and places it. The reconciler and the
webhook read the Job's template with ``pod_requests`` (8) and catch a Job so made, after its
pod was placed (the Job controller creates it at the resume; the set-back then deletes it
with a 1 s grace); a pod the tenant creates under ``train-w-0`` (its controller reference:
the forged-pod gap, whose count is known open) gets 8 GPUs in one pod past the per-pod check
that was to close the size. The extender's prioritize scores use the same count. Lab
(tests/e2e/test_brk33_findings.py: brk32 H1's adoption with a Job of 1 GPU and 3 one-GPU
sidecars, a 1-GPU ClusterQueue): 2 pods of 4 GPUs bound in 47 s (the tenant raised
parallelism 3 times), none seen Running at a 0.3 s sampling: each was deleted by the
set-back within about a second (Low: the reconciler catches the template).

L2 (false positive; a GPU LimitRange default): the extender compares the pod (defaulted by
the API server's LimitRanger) with the template (not defaulted). A namespace whose
LimitRange defaults ``nvidia.com/gpu`` (``defaultRequest``/``default``: an extended resource
is allowed there) gives a JobSet's pod of a replicatedJob that asks no GPU 1 GPU; pykueue's
Workload counts it (``with_adjusted_resources``, Kueue's AdjustResources) and admits it, and
``_beyond_podset`` withholds the pod for ever ("requests 1 nvidia.com/gpu, more than the 0").
The docstring's premise ("the API server adds LimitRange defaults ... to a pod, not to its
template", so the GPU is safe to compare) does not hold for a GPU default.

Looked at and not found: Job names that alias another replicatedJob (``child_job_pod_template``
takes the replicatedJob whose ``<js>-<rj>-`` prefix leaves an all-digit index below its
replicas: ``js-a-1-0`` is ``a-1``'s, never ``a``'s; no two replicatedJobs make the same name);
KubeRay v1.6.0's submitter (``GetDefaultSubmitterTemplate`` resources equal pykueue's default,
``configureSubmitterContainer`` changes command and env only); quantities (``"1000m"`` CPU,
limits without requests) are read alike on both sides; pod-level ``spec.resources`` is cpu,
memory and hugepages only; a pod's GPU request cannot be resized in place (cpu and memory
only).
"""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

from app.core.workload import admission_excess
from app.extender.placement import pod_facts
from app.integrations.framework import child_share, child_sized_by
from app.integrations.jobset.jobset import KIND as JOBSET
from app.integrations.reconciler import JobReconciler
from app.integrations.trainjob.trainjob import CHILD_FIELD, child_jobset
from app.integrations.trainjob.trainjob import KIND as TRAINJOB
from app.kube.client import JOBS
from app.kube.context import CHILD_JOBS, LR
from app.kube.informers import Store
from app.wire.podtemplate import pod_requests, template_requests
from app.wire.workload import workload_from_object
from tests.unit.test_brk30b_findings import _job_review, _reconciler
from tests.unit.test_brk32_findings import (
    _adopted,
    _extender_state,
    _operators_train_w_0,
    _tenants_train_w_0,
    _train,
    _train_app,
)

GPU = "nvidia.com/gpu"
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"

# ------------------------------------------------------------------ M1: TrainJob on MPI runtimes


def _deepspeed_runtime() -> dict[str, Any]:
    """Trainer v2.2.0's stock ClusterTrainingRuntime ``deepspeed-distributed``
    (manifests/base/runtimes/deepspeed_distributed.yaml), podSet-relevant fields."""
    return {"metadata": {"name": "deepspeed-distributed"}, "spec": {
        "mlPolicy": {"numNodes": 1, "mpi": {
            "numProcPerNode": 1, "mpiImplementation": "OpenMPI",
            "sshAuthMountPath": "/home/mpiuser/.ssh", "runLauncherAsNode": True}},
        "template": {"spec": {"replicatedJobs": [
            {"name": "launcher", "template": {
                "metadata": {"labels": {ANCESTOR: "trainer"}},
                "spec": {"template": {"spec": {"containers": [
                    {"name": "node", "image": "ghcr.io/kubeflow/trainer/deepspeed-runtime"}]}}}}},
            {"name": "node", "template": {"spec": {"template": {"spec": {"containers": [
                {"name": "node", "image": "ghcr.io/kubeflow/trainer/deepspeed-runtime",
                 "command": ["/usr/sbin/sshd"]}]}}}}}]}}}}


def _deepspeed_trainjob(num_nodes: int = 3, gpus: str = "4") -> dict[str, Any]:
    """TrainJob ns/tj on ``deepspeed-distributed`` (numNodes, resourcesPerNode ``gpus``),
    as ``lookup`` composes it (its child JobSet under ``CHILD_FIELD``)."""
    tj = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
          "metadata": {"name": "tj", "namespace": "ns", "uid": "u-1",
                       "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
          "spec": {"runtimeRef": {"name": "deepspeed-distributed"}, "suspend": False,
                   "trainer": {"numNodes": num_nodes,
                               "resourcesPerNode": {"limits": {GPU: gpus}}}}}
    return {**tj, CHILD_FIELD: child_jobset(tj, _deepspeed_runtime())}


def _trainers_jobset(num_nodes: int = 3, gpus: str = "4") -> dict[str, Any]:
    """The JobSet ``tj`` trainer v2.2.0 builds for ``_deepspeed_trainjob``: ``launcher`` with
    the runtime's numNodes (1) pods, ``node`` with ``max(numNodes - 1, 1)``, the ``node``
    container of both given resourcesPerNode (running: admitted)."""
    def rj(name: str, count: int, labels: dict[str, str]) -> dict[str, Any]:
        return {"name": name, "replicas": 1, "template": {
            "metadata": {"labels": labels},
            "spec": {"parallelism": count, "completions": count, "template": {"spec": {
                "containers": [{"name": "node", "image": "x",
                                "resources": {"limits": {GPU: gpus}}}]}}}}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "tj", "namespace": "ns", "uid": "js-uid", "ownerReferences": [
                {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                 "name": "tj", "uid": "u-1", "controller": True}]},
            "spec": {"suspend": False, "replicatedJobs": [
                rj("launcher", 1, {ANCESTOR: "trainer"}), rj("node", max(num_nodes - 1, 1), {})]}}


def _trainers_job(js: dict[str, Any], rj_name: str) -> dict[str, Any]:
    """Job ``tj-<rj>-0`` as jobset v0.11.1 makes it from ``js`` (running)."""
    rj = next(r for r in js["spec"]["replicatedJobs"] if r["name"] == rj_name)
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"tj-{rj_name}-0", "namespace": "ns", "uid": f"uid-{rj_name}",
                         "labels": {"jobset.sigs.k8s.io/jobset-name": "tj",
                                    "jobset.sigs.k8s.io/replicatedjob-name": rj_name},
                         "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2",
                                              "kind": "JobSet", "name": "tj", "uid": "js-uid",
                                              "controller": True}]},
            "spec": {**copy.deepcopy(rj["template"]["spec"]), "suspend": False},
            "status": {"active": rj["template"]["spec"]["parallelism"]}}


def test_m1_a_deepspeed_trainjobs_podsets_are_the_jobset_the_trainer_builds() -> None:
    """pykueue's Workload for ``tj`` (numNodes 3, 4 GPUs a node) against the trainer's JobSet:
    the trainer's podSets exceed nothing that was admitted."""
    wl = TRAINJOB.desired(_deepspeed_trainjob())
    got = [(p.name, p.count, dict(p.requests)) for p in wl.pod_sets]
    built = JOBSET.desired(_trainers_jobset()).pod_sets
    want = [(p.name, p.count, dict(p.requests)) for p in built]
    assert got == want, f"pykueue sizes {got}; trainer v2.2.0 builds {want}"


def test_m1_the_trainers_node_job_is_not_set_to_no_pods() -> None:
    """``tj`` admitted (as pykueue sizes it, 12 GPUs); the trainer's Job ``tj-node-0`` (2 pods
    of 4 GPUs, as trainer v2.2.0 and jobset v0.11.1 make it): ``_hold_to_share`` leaves it
    alone and its share's template asks the 4 GPUs its pods ask (so the extender places
    them)."""
    parent = _deepspeed_trainjob()
    node_job = _trainers_job(_trainers_jobset(), "node")
    sized = child_sized_by(TRAINJOB, parent, node_job)
    assert isinstance(sized, dict)
    assert template_requests(sized).get(GPU) == 4, template_requests(sized)  # type: ignore[union-attr]
    assert child_share(TRAINJOB, parent, node_job) == 2


async def test_m1_the_reconciler_leaves_the_trainers_node_job_its_pods() -> None:
    """The same through the reconciler: ``_hold_to_share`` writes nothing for ``tj-node-0``
    (today: parallelism 0, Warning ``ExceedsAncestorAdmission``)."""
    parent = _deepspeed_trainjob()
    rec = _reconciler()
    await JobReconciler._hold_to_share(  # type: ignore[arg-type]
        rec, _trainers_job(_trainers_jobset(), "node"), TRAINJOB, parent)
    assert [j["spec"]["parallelism"] for j in rec.ctx.client.replaced] == []


def test_m1_with_one_node_pykueue_admits_what_the_trainer_runs() -> None:
    """numNodes 1, 4 GPUs a node: the trainer builds launcher 1 x 4 and node ``max(0, 1)``
    x 4, 8 GPUs; pykueue now admits those 8 (it admitted 4 before: launcher 1 x 4, node
    1 x 0), so ``JobSet.hold_to_ancestor``'s ``admission_excess`` finds nothing beyond."""
    wl = TRAINJOB.desired(_deepspeed_trainjob(num_nodes=1))
    assert sum(p.count * p.requests.get(GPU, 0) for p in wl.pod_sets) == 8
    built = JOBSET.desired(_trainers_jobset(num_nodes=1)).pod_sets
    assert sum(p.count * p.requests.get(GPU, 0) for p in built) == 8
    admitted = {"metadata": {"name": "w", "namespace": "ns"},
                "spec": {"queueName": "lq", "podSets": [
                    {"name": p.name, "count": p.count, "template": {"spec": {"containers": [
                        {"name": "c", "resources": {"requests": {
                            k: str(v) for k, v in p.requests.items()}}}]}}}
                    for p in wl.pod_sets]}}
    assert admission_excess(built, workload_from_object(admitted)) is None


# -------------------------------------------------------------- L1: sidecars in the extender


def _pod_with_sidecars(job: dict[str, Any], sidecars: int) -> dict[str, Any]:
    """A pod of ``job`` (its controller reference): one container of 1 GPU and ``sidecars``
    init containers with ``restartPolicy: Always`` of 1 GPU each."""
    meta = job["metadata"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{meta['name']}-abcde", "namespace": "t", "uid": "pod-uid",
                         "labels": {"batch.kubernetes.io/job-name": meta["name"]},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                              "name": meta["name"], "uid": meta["uid"],
                                              "controller": True}]},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {GPU: "1"},
                                                                "limits": {GPU: "1"}}}],
                     "initContainers": [
                         {"name": f"side-{i}", "restartPolicy": "Always",
                          "resources": {"requests": {GPU: "1"}, "limits": {GPU: "1"}}}
                         for i in range(sidecars)]}}


def test_l1_kubernetes_counts_the_sidecars_gpus() -> None:
    """Passes (the premise): the pod takes 8 GPUs as Kubernetes counts them
    (``pod_requests`` follows ``resource.PodRequests``)."""
    child = _operators_train_w_0("1")
    assert pod_requests(_pod_with_sidecars(child, 7)["spec"])[GPU] == 8


def test_l1_the_extender_places_no_child_pod_whose_sidecars_take_more_gpus() -> None:
    """``train`` admitted for 1 GPU a pod; a pod of its Job ``train-w-0`` with one 1-GPU
    container and seven 1-GPU sidecars (8 GPUs) gets no node."""
    child = _operators_train_w_0("1")
    child["spec"]["suspend"] = False
    state = _extender_state(child, CHILD_JOBS)
    facts = pod_facts(_pod_with_sidecars(child, 7), GPU)
    assert facts.gpus == 8, f"the extender counts {facts.gpus} GPUs of 8"
    assert state.withheld(facts), "8-GPU pod placed on train's admission of 1 GPU a pod"


# --------------------------------------------------------------------- M2: DRA claims


def _with_claim(job: dict[str, Any]) -> dict[str, Any]:
    """``job`` whose pods also claim the devices of ResourceClaimTemplate ``eight-gpus``
    (the tenant's: 8 devices of a DeviceClass ``resources.deviceClassMappings`` maps)."""
    out = copy.deepcopy(job)
    spec = out["spec"]["template"]["spec"]
    spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "eight-gpus"}]
    spec["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    return out


async def test_m2_a_job_created_under_a_jobset_with_claims_it_lacks_is_refused() -> None:
    """brk32 H1's CREATE route, the replicatedJob's 1 GPU kept, a claim of 8 DRA devices
    added: the Job webhook allows it."""
    made = _with_claim(_adopted(_tenants_train_w_0()))
    made["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] = {GPU: "1"}
    made["spec"]["suspend"] = False
    out = await _job_review(_train_app(), "CREATE", made)
    assert not out["allowed"], "train-w-0 created running with 8 DRA devices under train"


async def test_m2_the_reconciler_holds_a_child_job_with_claims_it_lacks() -> None:
    """Whatever made it (no webhook sees an unlabelled Job): ``train-w-0`` running with the
    replicatedJob's 1 GPU and a claim of 8 devices is not set to parallelism 0."""
    child = _with_claim(_operators_train_w_0("1"))
    child["spec"]["suspend"] = False
    rec = _reconciler()
    await JobReconciler._hold_to_share(rec, child, JOBSET, _train())  # type: ignore[arg-type]
    assert [j["spec"]["parallelism"] for j in rec.ctx.client.replaced] == [0]


# ------------------------------------------------------------- L2: a GPU LimitRange default


def test_l2_a_pod_given_its_gpu_by_a_limitrange_default_is_placed() -> None:
    """``train``'s replicatedJob asks no GPU (a CPU-only coordinator); the namespace's
    LimitRange defaults ``nvidia.com/gpu: 1`` (pykueue's Workload counts it, Kueue's
    AdjustResources): the pod the API server made (1 GPU) is placed."""
    child = _operators_train_w_0("1")
    child["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "1"}}
    child["spec"]["suspend"] = False
    state = _extender_state(child, CHILD_JOBS)
    train = state.ctx.store(JOBSET.key).get("t/train")
    train["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    pod = _pod_with_sidecars(child, 0)
    pod["metadata"]["uid"] = "pod-uid"
    pod["spec"]["containers"][0]["resources"] = {  # LimitRanger's defaults
        "requests": {"cpu": "1", GPU: "1"}, "limits": {GPU: "1"}}
    # Without the LimitRange the GPU came from nowhere the admission saw: no node.
    assert "requests 1 nvidia.com/gpu, more than the 0" in state.withheld(pod_facts(pod, GPU))
    ranges = Store(JOBS)
    ranges.put({"apiVersion": "v1", "kind": "LimitRange",
                "metadata": {"name": "gpu-default", "namespace": "t"},
                "spec": {"limits": [{"type": "Container", "default": {GPU: "1"},
                                     "defaultRequest": {GPU: "1"}}]}})
    stores = state.ctx.store
    state.ctx = SimpleNamespace(store=lambda k: ranges if k == LR else stores(k), synced=True,
                                settings=state.ctx.settings)
    assert state.withheld(pod_facts(pod, GPU)) == ""

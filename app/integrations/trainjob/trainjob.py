"""trainer.kubeflow.org/v1alpha1 TrainJob (Kubeflow Trainer v2) as a job kind (Kueue
``pkg/controller/jobs/trainjob``, kueue-integrations.md 6.3), on the shared base of the
operators' kinds (``app.integrations.templated``).

PodSets: those of the child JobSet the trainer (v2.2.0) would build from the runtime the
TrainJob references (``spec.runtimeRef``: a ClusterTrainingRuntime by default, or a
TrainingRuntime in the TrainJob's namespace), read as a JobSet's
(``app.integrations.jobsetspec``, kueue-integrations.md 5): the runtime's
``spec.template.spec`` with, on each replicatedJob, ``parallelism = completions = count``,
as trainer v2.2.0 counts (``trainingruntime.go`` and each ML policy's ``EnforceMLPolicy``):
its ``parallelism`` (default 1); for the trainer step (job template label
``trainer.kubeflow.org/trainjob-ancestor-step: trainer``) of a runtime with an
``mlPolicy``, the runtime's ``mlPolicy.numNodes`` (default 1); then, where the TrainJob sets
``spec.trainer.numNodes``, under an MPI policy the replicatedJob named ``node`` that many
(one fewer, at least 1, with ``mpi.runLauncherAsNode``: the launcher is a node), under any
other the trainer step. The steps (trainer, dataset- and model-initializer) run 1 replica;
``spec.trainer.resourcesPerNode`` goes to the ``node`` container of the trainer step and,
with ``runLauncherAsNode``, of the ``node`` replicatedJob (``jobset/builder.go``
``Trainer``). Other runtime patches are not read (their scheduling fields are the flavor's
business).

The runtime is read from the stores (``side_stores``): ``lookup`` returns the TrainJob with the
child JobSet it would make under ``CHILD_FIELD`` (never written back). A TrainJob whose runtime
is not there yet has no Workload (``WorkloadSpecError`` naming ``spec.runtimeRef``).

Suspend lever: ``spec.suspend``. Start: the flavor's nodeSelector and tolerations and the
``kueue.x-k8s.io/podset`` label go into the runtime patch of manager ``kueue.x-k8s.io/manager``
(``spec.runtimePatches``, trainer v2.2.0), one entry per replicatedJob, written while the
TrainJob is still suspended (the trainer refuses a patch change otherwise), then
``spec.suspend=false``. The trainer merges a patch's tolerations by replacing the runtime's
(strategic merge of a list without a merge key), so the patch carries the runtime's own
tolerations followed by the flavor's (the runtime's were lost in Kueue before kueue#15162).
Stop: ``spec.suspend=true``; Kueue's patch stays until the next start rewrites it (the trainer
refuses a patch change while the JobSet still has active Jobs). Finished: condition
``Complete`` or ``Failed``. Active: ``status.jobsStatus[].active``; ready when every step's
Jobs are ready or succeeded. The JobSet the trainer makes (named as the TrainJob, controlled
by it) is a managed-ancestor child, not queued again; its batch Jobs run the podSets' pods
(``child_via``).

That JobSet is held to the TrainJob's admission, labelled or not (every JobSet is watched:
``made_store``; held by the JobSet kind when it is served): unsuspended while the TrainJob's
Workload is not admitted it is suspended again (Kueue v0.17.1 ``shouldSuspendChildJob``),
and unsuspended with more pods, or bigger ones, than the admission gives (a JobSet the
trainer made before the runtime changed keeps its old shape, JobSet's webhook refusing the
trainer's update, while the Workload follows the runtime) it is suspended with a Warning
Event ``ExceedsAncestorAdmission`` (``JobSet.hold_to_ancestor``). The podSets stay the
runtime's, as Kueue's; holding the stale JobSet goes beyond Kueue, which leaves a JobSet its
tenant resumes running.

MultiKueue (Kueue v0.17.1's TrainJob adapter, ``app.core.multikueue.TRAINJOB``): on a queued
TrainJob whose ClusterQueue has a MultiKueue AdmissionCheck the webhook sets ``spec.managedBy:
kueue.x-k8s.io/multikueue`` (unset or the trainer's own before; its CRD defaults it to the
trainer's); on a worker, a TrainJob labelled ``kueue.x-k8s.io/prebuilt-workload-name`` adopts
that Workload copy (``TemplatedKind.workload_name``). The trainer's JobSet does not carry the
TrainJob's labels (trainer v2.2.0 takes them from the runtime).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from app.core.multikueue import TRAINJOB, TRAINJOB_PATCH_MANAGER
from app.integrations.crdrules import CrdRules
from app.integrations.framework import controlled_by, job_finished, stored_controller
from app.integrations.jobsetspec import child_job_pod_template, jobset_templates
from app.integrations.podsets import (
    admitted_scheduling,
    inject_template,
    mark_started,
    template_record,
    write_start,
)
from app.integrations.templated import Obj, Template, TemplatedKind, get_in
from app.kube.client import Resource
from app.kube.context import CHILD_JOBSETS
from app.kube.events import NORMAL
from app.wire.fields import WorkloadSpecError, integer, mapping, string
from app.wire.names import JOBSET_NAME_LABEL, JOBSET_UID_LABEL
from app.wire.owners import controller_of_object

if TYPE_CHECKING:
    from app.kube.context import Context

GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
TRAINJOBS = Resource(GROUP, VERSION, "trainjobs", "TrainJob")
TRAINING_RUNTIMES = Resource(GROUP, VERSION, "trainingruntimes", "TrainingRuntime")
CLUSTER_TRAINING_RUNTIMES = Resource(GROUP, VERSION, "clustertrainingruntimes",
                                     "ClusterTrainingRuntime", namespaced=False)
RUNTIMES, CLUSTER_RUNTIMES = "trainingruntime", "clustertrainingruntime"  # store keys
# The trainer's JobSets (every JobSet: the trainer's are unlabelled), held to the admission.
JOBSETS = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet")

KUEUE_MANAGER = TRAINJOB_PATCH_MANAGER  # Kueue's runtimePatches manager (trainer v2.2.0)
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER_STEP = "trainer"
STEPS = frozenset({"trainer", "dataset-initializer", "model-initializer"})
NODE_CONTAINER = "node"
# Where lookup puts the child JobSet (shape only: metadata + spec) in the TrainJob it returns.
CHILD_FIELD = "pykueue.child-jobset"

RULES = CrdRules(GROUP, VERSION, "trainjobs", "TrainJob", ("spec", "suspend"),
                 multikueue=TRAINJOB)


def runtime_ref(tj: Mapping[str, Any]) -> tuple[str, str]:
    """(kind, name) of the runtime ``tj`` references: ``spec.runtimeRef.kind`` (default
    ``ClusterTrainingRuntime``, the CRD's) and ``.name``. Raises ``WorkloadSpecError`` for a
    missing name, another API group or kind."""
    spec = mapping(tj.get("spec"), "spec", required=True)
    ref = mapping(spec.get("runtimeRef"), "spec.runtimeRef", required=True)
    name = string(ref.get("name"), "spec.runtimeRef.name")
    if not name:
        raise WorkloadSpecError("spec.runtimeRef.name", "required")
    group = string(ref.get("apiGroup"), "spec.runtimeRef.apiGroup") or GROUP
    kind = string(ref.get("kind"), "spec.runtimeRef.kind") or "ClusterTrainingRuntime"
    if group != GROUP or kind not in ("ClusterTrainingRuntime", "TrainingRuntime"):
        raise WorkloadSpecError("spec.runtimeRef", f"{group}/{kind}: only {GROUP} "
                                "TrainingRuntime or ClusterTrainingRuntime")
    return kind, name


def child_jobset(tj: Mapping[str, Any], runtime: Mapping[str, Any]) -> Obj:
    """The JobSet (metadata name and namespace, spec) the trainer would build for ``tj`` from
    ``runtime`` (a TrainingRuntime or ClusterTrainingRuntime), as far as podSets go (module
    doc). Raises ``WorkloadSpecError`` naming the field."""
    rspec = mapping(runtime.get("spec"), "runtime spec", required=True)
    template = mapping(rspec.get("template"), "runtime spec.template", required=True)
    spec = copy.deepcopy(dict(mapping(template.get("spec"), "runtime spec.template.spec",
                                      required=True)))
    trainer = mapping(mapping(tj.get("spec"), "spec").get("trainer"), "spec.trainer")
    has_ml = rspec.get("mlPolicy") is not None
    ml = mapping(rspec.get("mlPolicy"), "runtime spec.mlPolicy")
    asked = integer(trainer.get("numNodes"), "spec.trainer.numNodes", default=0, minimum=1) \
        if trainer.get("numNodes") is not None else None
    runtime_nodes = integer(ml.get("numNodes"), "runtime spec.mlPolicy.numNodes", default=1,
                            minimum=1)
    mpi = mapping(ml.get("mpi"), "runtime spec.mlPolicy.mpi") if ml.get("mpi") is not None \
        else None
    launcher_as_node = mpi is not None and mpi.get("runLauncherAsNode") is True
    resources = trainer.get("resourcesPerNode")
    for i, rj in enumerate(spec.get("replicatedJobs") or []):
        if not isinstance(rj, dict) or not isinstance(rj.get("template"), dict):
            continue  # jobset_templates names the field
        job = rj["template"]
        job_spec = job.setdefault("spec", {})
        step = ((job.get("metadata") or {}).get("labels") or {}).get(ANCESTOR_LABEL)
        count = integer(job_spec.get("parallelism"), f"runtime spec.template.spec."
                        f"replicatedJobs[{i}].template.spec.parallelism", default=1, minimum=0)
        if step == TRAINER_STEP and has_ml:
            count = runtime_nodes
        if asked is not None:
            # The ML policy's EnforceMLPolicy: MPI counts the "node" replicatedJob (one node
            # less when the launcher runs as a node, at least 1); the others the trainer step.
            if mpi is not None:
                if rj.get("name") == NODE_CONTAINER:
                    count = max(asked - 1, 1) if launcher_as_node else asked
            elif step == TRAINER_STEP:
                count = asked
        if resources and (step == TRAINER_STEP
                          or launcher_as_node and rj.get("name") == NODE_CONTAINER):
            pod_spec = ((job_spec.get("template") or {}).get("spec")) or {}
            for c in pod_spec.get("containers") or []:
                if isinstance(c, dict) and c.get("name") == NODE_CONTAINER:
                    c["resources"] = copy.deepcopy(resources)
        job_spec["parallelism"] = job_spec["completions"] = count
        if step in STEPS:
            rj["replicas"] = 1
    meta = tj.get("metadata") or {}
    return {"metadata": {"name": meta.get("name", ""), "namespace": meta.get("namespace", "")},
            "spec": spec}


def kueue_patch(tj: Mapping[str, Any]) -> Obj | None:
    """``tj``'s runtime patch of manager ``KUEUE_MANAGER``, or None."""
    for p in (tj.get("spec") or {}).get("runtimePatches") or []:
        if isinstance(p, Mapping) and p.get("manager") == KUEUE_MANAGER:
            return dict(p)
    return None


def with_kueue_patch(tj: Mapping[str, Any], patch: Obj | None) -> Obj:
    """A copy of ``tj`` whose Kueue runtime patch is ``patch`` (None: removed), other managers'
    patches kept in place."""
    out = copy.deepcopy(dict(tj))
    spec = out.setdefault("spec", {})
    patches = [p for p in spec.get("runtimePatches") or []
               if not (isinstance(p, Mapping) and p.get("manager") == KUEUE_MANAGER)]
    if patch is not None:
        patches.append(patch)
    if patches:
        spec["runtimePatches"] = patches
    else:
        spec.pop("runtimePatches", None)
    return out


def start_patch(obj: Mapping[str, Any], templates: list[Template],
                scheduling: Mapping[str, tuple[Mapping[str, str], list[Obj]]], *,
                inject_node_selector: bool = True) -> Obj:
    """Kueue's runtime patch starting ``obj`` (composed by ``lookup``): per replicatedJob the
    podset label, the flavor's nodeSelector merged over the runtime's and the runtime's
    tolerations followed by the flavor's (module doc). Raises ``InjectionConflict``."""
    rjobs = []
    for t in templates:
        selector, tolerations = scheduling.get(t.name, ({}, []))
        template = copy.deepcopy(dict(get_in(obj, t.path)))
        template.setdefault("spec", {})
        inject_template(template, template_record(template), t.name, selector, tolerations,
                        inject_node_selector=inject_node_selector)
        pod_spec = {k: template["spec"][k] for k in ("nodeSelector", "tolerations")
                    if template["spec"].get(k)}
        labels = {"kueue.x-k8s.io/podset": t.name}
        rjobs.append({"name": t.key, "template": {"spec": {"template": {
            "metadata": {"labels": labels}, "spec": pod_spec}}}})
    return {"manager": KUEUE_MANAGER,
            "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": rjobs}}}}


def _without_time(patch: Mapping[str, Any] | None) -> Obj | None:
    """``patch`` without ``time`` (the trainer's webhook stamps it on every write)."""
    return None if patch is None else {k: v for k, v in patch.items() if k != "time"}


def trainjob_pods_ready(tj: Mapping[str, Any]) -> bool:
    """Every step's child Jobs ready or succeeded (``status.jobsStatus[]``: ``ready +
    succeeded`` at least 1, each step running 1 Job), and at least one step reported."""
    steps = [s for s in ((tj.get("status") or {}).get("jobsStatus")) or []
             if isinstance(s, Mapping)]
    return bool(steps) and all(int(s.get("ready") or 0) + int(s.get("succeeded") or 0) >= 1
                               for s in steps)


class TrainJob(TemplatedKind):
    """trainer.kubeflow.org/v1alpha1 TrainJob (``JobKind``; module doc). ``optional``: its CRD
    may be absent; the manager then leaves the kind out at start-up."""

    key = "trainjob"
    resource = TRAINJOBS
    api_group = GROUP
    kind = "TrainJob"
    suspend = ("spec", "suspend")
    rules = RULES
    side_stores = ((RUNTIMES, TRAINING_RUNTIMES), (CLUSTER_RUNTIMES, CLUSTER_TRAINING_RUNTIMES),
                   (CHILD_JOBSETS, JOBSETS))
    child_via = "JobSet"
    # The trainer's JobSet, unlabelled, is held to the TrainJob's admission (module doc).
    made_store = CHILD_JOBSETS
    made_kind = "jobset"
    # The trainer's JobSet labels its pods with the JobSet's name (the TrainJob's); the uid
    # label is the JobSet's, so pods are matched through their batch Job owner.
    pod_labels = (JOBSET_NAME_LABEL, "")
    # Its JobSet's Jobs run its pods; it controls none itself.
    runs_batch_jobs = True
    controls_pods_directly = False

    def lookup(self, ctx: Context, ns: str, name: str) -> Obj | None:
        """The stored TrainJob with its child JobSet under ``CHILD_FIELD`` when its runtime is
        in the stores (module doc)."""
        tj = ctx.store(self.key).get(f"{ns}/{name}")
        if tj is None:
            return None
        try:
            kind, ref = runtime_ref(tj)
        except WorkloadSpecError:
            return tj  # type: ignore[no-any-return]
        runtime = ctx.store(RUNTIMES).get(f"{ns}/{ref}") if kind == "TrainingRuntime" \
            else ctx.store(CLUSTER_RUNTIMES).get(ref)
        if runtime is None:
            return tj  # type: ignore[no-any-return]
        out = dict(tj)
        try:
            out[CHILD_FIELD] = child_jobset(tj, runtime)
        except WorkloadSpecError:
            out[CHILD_FIELD] = {"runtime": runtime}  # jobset_templates names the field
        return out

    def templates(self, obj: Mapping[str, Any]) -> list[Template]:
        """The child JobSet's podSets (module doc). Raises ``WorkloadSpecError``, naming
        ``spec.runtimeRef`` when the runtime is not in the stores."""
        kind, name = runtime_ref(obj)
        child = obj.get(CHILD_FIELD)
        if not isinstance(child, Mapping):
            raise WorkloadSpecError("spec.runtimeRef", f"{kind} {name!r} not found")
        return jobset_templates(child, (CHILD_FIELD,), "runtime spec.template.spec")

    def spec_errors(self, obj: Mapping[str, Any]) -> list[str]:
        """At admission only the reference is checked: the runtime may come later (the
        trainer's own webhook checks it exists)."""
        try:
            runtime_ref(obj)
        except WorkloadSpecError as exc:
            return [str(exc)]
        return []

    def finished(self, obj: Mapping[str, Any]) -> tuple[bool, str, str]:
        """(finished, ``Succeeded``/``Failed``, message) from the conditions ``Complete`` /
        ``Failed`` (Kueue ``TrainJob.Finished``)."""
        return job_finished(obj, complete="Complete", kind="TrainJob")

    def pods_ready(self, obj: Mapping[str, Any]) -> bool:
        return trainjob_pods_ready(obj)

    def active_pods(self, obj: Mapping[str, Any]) -> int:
        """Active child Jobs over all steps (``status.jobsStatus[].active``)."""
        return sum(int(s.get("active") or 0)
                   for s in ((obj.get("status") or {}).get("jobsStatus")) or []
                   if isinstance(s, Mapping))

    def runs_pods_through(self, ctx: Context, job: Mapping[str, Any] | None,
                          pod: Mapping[str, Any], name: str, uid: str, *,
                          owner_gone: bool = False) -> bool:
        """A Job of the trainer's JobSet: controlled by the JobSet named as the TrainJob
        (``made_via``), which the stores hold controlled by the TrainJob; gone (``job``
        None), a Job named as that JobSet's are (``<trainjob>-<replicatedJob>-<index>``,
        jobset ``GenJobName``), by the pod's controller reference. A Job whose JobSet no
        store holds is that JobSet's too: a background deletion of the TrainJob removes the
        JobSet before the garbage collector marks its Jobs and their pods, and a release
        in between would be for good (the collector deletes a Job whose owner is gone, so a
        forged reference does not keep one)."""
        if job is None:
            ref = controller_of_object(pod)
            return ref is not None and ref.name.startswith(f"{name}-")
        refs = (job.get("metadata") or {}).get("ownerReferences") or []
        if not any(isinstance(r, Mapping) and r.get("controller") is True
                   and self.made_via({"metadata": {"name": name}}, r) for r in refs):
            return False
        jobset = stored_controller(ctx, job)
        return jobset is None or controlled_by(jobset, self, name, uid, owner_gone=owner_gone)

    def leaves_orphans(self, ctx: Context, pod: Mapping[str, Any], name: str,
                       uid: str) -> bool:
        """A pod of a Job of the trainer's JobSet: its ``jobset-uid`` label names the JobSet
        ``name`` that the stores (``made_store``) hold controlled by the TrainJob with
        ``uid``. JobSet v0.11.1 makes a child Job deleted with ``--cascade=orphan`` again and
        adopts no pod (``JobSet.leaves_orphans``); a pod of an earlier JobSet of the name
        (another uid) is not this run's."""
        if self.made_store not in ctx.informers.informers:
            return False
        labels = (pod.get("metadata") or {}).get("labels") or {}
        ns = str((pod.get("metadata") or {}).get("namespace", ""))
        jobset = ctx.store(self.made_store).get(f"{ns}/{name}")
        return jobset is not None \
            and (jobset.get("metadata") or {}).get("uid") == labels.get(JOBSET_UID_LABEL) \
            and controlled_by(jobset, self, name, uid)

    def child_jobs(self, obj: Mapping[str, Any]) -> dict[str, int]:
        """``<trainjob>-<replicatedJob>-<index>`` (the JobSet's Jobs, jobset ``GenJobName``),
        each with its podSet's pods per Job. Raises ``WorkloadSpecError``."""
        child = obj.get(CHILD_FIELD)
        if not isinstance(child, Mapping):
            return {}
        name = str((obj.get("metadata") or {}).get("name", ""))
        out: dict[str, int] = {}
        for rj in (child.get("spec") or {}).get("replicatedJobs") or []:
            replicas = int(rj.get("replicas") if rj.get("replicas") is not None else 1)
            per_job = int(rj["template"]["spec"]["parallelism"])
            for index in range(replicas):
                out[f"{name}-{rj['name']}-{index}"] = per_job
        return out

    def child_job_sized_by(self, obj: Mapping[str, Any], job: Mapping[str, Any]) -> Any:
        """The pod template of the JobSet's replicatedJob whose Job ``job`` is
        (``child_job_pod_template``; ``child_jobs`` gives its share), None for any other Job
        or without the JobSet's shape. Raises ``WorkloadSpecError``."""
        child = obj.get(CHILD_FIELD)
        if not isinstance(child, Mapping):
            return None
        return child_job_pod_template(child, str((obj.get("metadata") or {}).get("name", "")),
                                      job, where=CHILD_FIELD)

    # ---------------------------------------------------------------- the writes

    def injected(self, obj: Mapping[str, Any], scheduling: Mapping[str, tuple[Mapping[str, str],
                 list[Obj]]], *, inject_node_selector: bool = True) -> Obj:
        """``obj`` started: Kueue's runtime patch (``start_patch``), the start record, the
        lever false (module doc). Raises ``InjectionConflict``."""
        patch = start_patch(obj, self.checked_templates(obj), scheduling,
                            inject_node_selector=inject_node_selector)
        out = with_kueue_patch(self._stored(obj), patch)
        mark_started(out, True)
        out["spec"]["suspend"] = False
        return out

    def restored(self, obj: Mapping[str, Any]) -> Obj:
        """``obj`` suspended, its start record removed (Kueue's patch stays: module doc)."""
        out = self._stored(obj)
        out.setdefault("spec", {})["suspend"] = True
        mark_started(out, False)
        return out

    @staticmethod
    def _stored(obj: Mapping[str, Any]) -> Obj:
        """A copy of ``obj`` as the API server holds it (without ``CHILD_FIELD``)."""
        return copy.deepcopy({k: v for k, v in obj.items() if k != CHILD_FIELD})

    async def _put(self, ctx: Context, obj: Obj) -> Obj:
        out = await ctx.client.replace(self.resource, self._stored(obj))
        ctx.store(self.key).put(out)
        return out  # type: ignore[no-any-return]

    async def start(self, ctx: Context, obj: Obj, workload: Mapping[str, Any]) -> bool:
        """Write Kueue's runtime patch while suspended, then unsuspend (two updates: the
        trainer refuses a patch change on a running TrainJob). Idempotent. Raises
        ``InjectionConflict`` (a ``StartError``)."""
        desired = self.injected(obj, admitted_scheduling(ctx, workload),
                                inject_node_selector=ctx.settings.scheduling.inject_node_selector)
        current = self._stored(obj)
        have = kueue_patch(current)
        if _without_time(have) == _without_time(kueue_patch(desired)):
            desired = with_kueue_patch(desired, have)  # keep the trainer's time stamp
        if desired == current:
            return False
        if have is None or _without_time(have) != _without_time(kueue_patch(desired)):
            first = copy.deepcopy(desired)
            first["spec"]["suspend"] = True
            desired = copy.deepcopy(await self._put(ctx, first))
            desired["spec"]["suspend"] = False
        await write_start(ctx, obj, desired, workload, self._put)
        return True

    async def stop(self, ctx: Context, obj: Obj, why: str) -> Obj:
        """Suspend and drop the start record in one update (module doc)."""
        out = self.restored(obj)
        if out == self._stored(obj):
            return obj
        written = await self._put(ctx, out)
        if not self.is_suspended(obj):
            ctx.recorder.emit(written, NORMAL, "Stopped", why)
        return written


KIND = TrainJob()

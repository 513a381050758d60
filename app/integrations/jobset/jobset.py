"""jobset.x-k8s.io/v1alpha2 JobSet as a job kind (Kueue ``pkg/controller/jobs/jobset``,
kueue-integrations.md 0 and 5), on the shared base of the operators' kinds
(``app.integrations.templated``).

PodSets: one per replicatedJob (``app.integrations.jobsetspec``). Suspend lever:
``spec.suspend``. Finished: the JobSet condition ``Completed`` (reason ``Succeeded``) or
``Failed``. Active: any replicatedJob with active child Jobs (Kueue ``IsActive``). Priority: the
``kueue.x-k8s.io/priority-class`` label, else the first replicatedJob whose pod template names a
``priorityClassName`` (Kueue ``JobSet.PriorityClass``).

Start (``RunWithPodSetsInfo``): each podSet's flavor nodeSelector and tolerations go into its
own replicatedJob's pod template, with the pod label ``kueue.x-k8s.io/podset``, and
``spec.suspend=false``, in one update; what the user wrote is kept in the JobSet's annotation
``ORIGINAL_ANNOTATION`` as JSON by replicatedJob name. Stop sets ``spec.suspend=true`` and
restores those fields in one update. JobSet's own webhook allows exactly these pod template
fields to change while the JobSet is, or becomes, suspended (jobset v0.11.1 ``ValidateUpdate``),
and JobSet suspends its child Jobs itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from app.core.workload import Workload, admission_excess
from app.integrations.framework import job_finished
from app.integrations.jobset.webhook_rules import RULES
from app.integrations.jobsetspec import (
    child_job_pod_template,
    jobset_templates,
    replicated_job_pods,
    replicated_jobs,
)
from app.integrations.templated import Obj, Template, TemplatedKind
from app.kube.client import Resource
from app.kube.context import CHILD_JOBSETS
from app.kube.events import WARNING
from app.wire.fields import WorkloadSpecError, integer
from app.wire.names import JOBSET_NAME_LABEL, JOBSET_UID_LABEL
from app.wire.workload import workload_from_object

if TYPE_CHECKING:
    from app.kube.context import Context

GROUP, VERSION = "jobset.x-k8s.io", "v1alpha2"
JOBSETS = Resource(GROUP, VERSION, "jobsets", "JobSet")


def active_jobs(js: Mapping[str, Any]) -> int:
    """Active child Jobs over all replicatedJobs (``status.replicatedJobsStatus[].active``)."""
    return sum(int(s.get("active") or 0)
               for s in ((js.get("status") or {}).get("replicatedJobsStatus")) or [])


def jobset_pods_ready(js: Mapping[str, Any]) -> bool:
    """Kueue ``JobSet.PodsReady``: the child Jobs ready or succeeded
    (``status.replicatedJobsStatus[].ready + succeeded``) are all the replicas of every
    replicatedJob (``spec.replicatedJobs[].replicas``, default 1)."""
    replicas = sum(int(rj.get("replicas") if rj.get("replicas") is not None else 1)
                   for rj in ((js.get("spec") or {}).get("replicatedJobs")) or []
                   if isinstance(rj, Mapping))
    ready = sum(int(s.get("ready") or 0) + int(s.get("succeeded") or 0)
                for s in ((js.get("status") or {}).get("replicatedJobsStatus")) or []
                if isinstance(s, Mapping))
    return replicas == ready


class JobSet(TemplatedKind):
    """jobset.x-k8s.io/v1alpha2 JobSet (``JobKind``; module doc). ``optional``: its CRD may be
    absent; the manager then leaves the kind out at start-up."""

    key = "jobset"
    resource = JOBSETS
    api_group = GROUP
    kind = "JobSet"
    suspend = ("spec", "suspend")
    rules = RULES
    # Every JobSet, labelled or not, besides the kind's own (labelled) store: the unlabelled
    # JobSet an AppWrapper wraps is its Jobs' way to their queued ancestor
    # (``framework.stored_object``: the Job webhook's, the extender's and the reconciler's
    # walk; brk31 M3). Kueue v0.17.1 watches every JobSet too. Watched while the kind is
    # served (a TrainJob watches it as well, ``made_store``).
    side_stores = ((CHILD_JOBSETS, JOBSETS),)
    # JobSet v0.11 labels its child Jobs' pods with both.
    pod_labels = (JOBSET_NAME_LABEL, JOBSET_UID_LABEL)
    # JobSet v0.11.1 returns at once for a JobSet being deleted (``jobSetMarkedForDeletion``):
    # its status is never settled again; its child Jobs are stopped by the child rule.
    ignored_once_deleted = True
    # Its child Jobs run its pods; it controls none itself.
    runs_batch_jobs = True
    controls_pods_directly = False

    def templates(self, obj: Mapping[str, Any]) -> list[Template]:
        """One per replicatedJob (module doc). Raises ``WorkloadSpecError``."""
        return jobset_templates(obj)

    def child_jobs(self, obj: Mapping[str, Any]) -> dict[str, int]:
        """``<jobset>-<replicatedJob>-<index>`` for each index below ``replicas`` (jobset
        v0.11.1 ``GenJobName``), each with its replicatedJob's ``min(parallelism,
        completions)``. Raises ``WorkloadSpecError``."""
        name = str((obj.get("metadata") or {}).get("name", ""))
        out: dict[str, int] = {}
        for i, rj in enumerate(replicated_jobs(obj)):
            where = f"spec.replicatedJobs[{i}]"
            replicas = integer(rj.get("replicas"), f"{where}.replicas", default=1, minimum=0)
            per_job = replicated_job_pods(rj, where) // replicas if replicas else 0
            for index in range(replicas):
                out[f"{name}-{rj['name']}-{index}"] = per_job
        return out

    def child_job_sized_by(self, obj: Mapping[str, Any], job: Mapping[str, Any]) -> Any:
        """The pod template of the replicatedJob whose Job ``job`` is
        (``child_job_pod_template``; ``child_jobs`` gives its share), None for any other
        Job. Raises ``WorkloadSpecError``."""
        return child_job_pod_template(obj, str((obj.get("metadata") or {}).get("name", "")),
                                      job)

    def leaves_orphans(self, ctx: Context, pod: Mapping[str, Any], name: str,
                       uid: str) -> bool:
        """Every pod of the JobSet (its ``jobset-uid`` label checked by ``stray_pod``) runs
        through a child Job, which JobSet v0.11.1 makes again once it is gone (one deleted
        with ``--cascade=orphan``, brk28); it selects and adopts no pod, and the new Job's
        selector is its own uid (``adopted_by_job``)."""
        return True

    def finished(self, obj: Mapping[str, Any]) -> tuple[bool, str, str]:
        """(finished, ``Succeeded``/``Failed``, message) from the conditions ``Completed`` /
        ``Failed`` (Kueue ``JobSet.Finished``)."""
        return job_finished(obj, complete="Completed", kind="JobSet")

    def pods_ready(self, obj: Mapping[str, Any]) -> bool:
        return jobset_pods_ready(obj)

    def active_pods(self, obj: Mapping[str, Any]) -> int:
        return active_jobs(obj)

    async def hold_to_ancestor(self, ctx: Context, obj: Obj, parent_kind: Any,
                               parent: Mapping[str, Any], workload: Mapping[str, Any]) -> None:
        """A running JobSet that ``parent``'s operator made in its stead (``parent_kind``'s
        ``child_via`` is JobSet: a TrainJob's) whose podSets exceed ``parent``'s admitted
        ``workload`` (``admission_excess``: more pods, bigger ones, or a podSet it lacks) is
        suspended (Warning Event ``ExceedsAncestorAdmission``): a JobSet the trainer made
        before its runtime changed keeps its old shape while the Workload follows the
        runtime. Goes beyond Kueue v0.17.1 (``shouldSuspendChildJob`` leaves an admitted
        ancestor's child alone). A JobSet another kind wraps (an AppWrapper's: other podSet
        names) is left to that kind's rules; one that cannot be read, to the parent's."""
        if getattr(parent_kind, "child_via", "") != self.kind or self.is_suspended(obj):
            return
        try:
            why = admission_excess(self.desired(obj).pod_sets, workload_from_object(workload))
        except WorkloadSpecError:
            return
        if why is None:
            return
        meta = parent.get("metadata") or {}
        message = (f"{why}: more than {parent_kind.kind} {meta.get('namespace')}/"
                   f"{meta.get('name')} was admitted for, so the JobSet is suspended (made "
                   f"before its {parent_kind.kind} changed shape?)")
        written = await self.stop(ctx, obj, message)
        ctx.recorder.emit(written, WARNING, "ExceedsAncestorAdmission", message)


KIND = JobSet()


def workload_from_jobset(js: Mapping[str, Any], *, priority_classes: Mapping[str, int] | None
                         = None, pod_priority_classes: Mapping[str, int] | None = None
                         ) -> Workload:
    """The domain Workload a JobSet needs (module doc). Raises ``WorkloadSpecError``."""
    return KIND.desired(js, priority_classes=priority_classes,
                        pod_priority_classes=pod_priority_classes)


def workload_object_for_jobset(js: Mapping[str, Any], *, priority_classes: Mapping[str, int]
                               | None = None, pod_priority_classes: Mapping[str, int]
                               | None = None) -> Obj:
    """The Workload object (kueue.x-k8s.io/v1beta2) to create for a JobSet: one podSet per
    replicatedJob with its pod template as written. Raises ``WorkloadSpecError``."""
    return KIND.workload_object(js, priority_classes=priority_classes,
                                pod_priority_classes=pod_priority_classes)


def injected_jobset(js: Mapping[str, Any], scheduling: Mapping[str, tuple[Mapping[str, str],
                    list[Obj]]], *, inject_node_selector: bool = True) -> Obj:
    """A copy of ``js`` started (``TemplatedKind.injected``). Raises ``InjectionConflict``."""
    return KIND.injected(js, scheduling, inject_node_selector=inject_node_selector)


def restored_jobset(js: Mapping[str, Any]) -> Obj:
    """A copy of ``js`` stopped (``TemplatedKind.restored``)."""
    return KIND.restored(js)


def jobset_finished(js: Mapping[str, Any]) -> tuple[bool, str, str]:
    return KIND.finished(js)

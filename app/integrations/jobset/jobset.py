"""jobset.x-k8s.io/v1alpha2 JobSet as a job kind (Kueue ``pkg/controller/jobs/jobset``,
kueue-integrations.md 0 and 3).

PodSets: one per replicatedJob, in spec order, named after it lower-cased (Kueue
``NewPodSetReference``), ``count = replicas x min(parallelism, completions)`` (replicas default
1, parallelism default 1), at most 8 (the Workload's podSets limit). Suspend lever:
``spec.suspend``. Finished: the JobSet condition ``Completed`` (reason ``Succeeded``) or
``Failed``. Active: any replicatedJob with active child Jobs (Kueue ``IsActive``). Priority: the
``kueue.x-k8s.io/priority-class`` label, else the first replicatedJob's pod
``priorityClassName``.

Start (``RunWithPodSetsInfo``): each podSet's flavor nodeSelector and tolerations go into its
own replicatedJob's pod template, with the pod label ``kueue.x-k8s.io/podset``, and
``spec.suspend=false``, in one update; what the user wrote (each template's nodeSelector,
tolerations and labels) is kept in the JobSet's annotation ``ORIGINAL_ANNOTATION`` as JSON by
replicatedJob name. Stop sets ``spec.suspend=true`` and restores those fields in one update.
JobSet's own webhook allows exactly these pod template fields to change while the JobSet is, or
becomes, suspended (jobset v0.11.1 ``ValidateUpdate``), and JobSet suspends its child Jobs
itself.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from app.controllers.client import Resource
from app.controllers.errors import Permanent
from app.controllers.events import NORMAL
from app.core.workload import PodSet, Workload
from app.integrations.batchjob.job import (
    MANAGED_JOBS,
    ORIGINAL_ANNOTATION,
    injected_job,
    is_injected,
    is_suspended,
    job_finished,
    queue_name,
    refused_as_immutable,
    restored_job,
)
from app.integrations.jobset.rules import MAX_POD_SETS  # Workload spec.podSets maxItems
from app.integrations.podsets import admitted_scheduling, write_start
from app.wire.fields import WorkloadSpecError, integer, mapping, sequence, string
from app.wire.names import QUEUE_NAME_LABEL
from app.wire.podtemplate import pod_set_from_template
from app.wire.workload import (
    check_dns_subdomain,
    creation_seconds,
    job_pod_count,
    job_priority,
    workload_name_for_owner,
    workload_object_for_owner,
)

if TYPE_CHECKING:
    from app.controllers.context import Context

Obj = dict[str, Any]

GROUP, VERSION = "jobset.x-k8s.io", "v1alpha2"
JOBSETS = Resource(GROUP, VERSION, "jobsets", "JobSet")


def replicated_jobs(js: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """``spec.replicatedJobs`` checked: 1..8 entries, each with a ``name`` and a
    ``template.spec.template``. Raises ``WorkloadSpecError`` naming the field."""
    spec = mapping(js.get("spec"), "spec", required=True)
    rjobs = list(sequence(spec.get("replicatedJobs"), "spec.replicatedJobs"))
    if not rjobs:
        raise WorkloadSpecError("spec.replicatedJobs", "required (at least one)")
    if len(rjobs) > MAX_POD_SETS:
        raise WorkloadSpecError("spec.replicatedJobs", f"{len(rjobs)} replicatedJobs: a Workload "
                                f"holds at most {MAX_POD_SETS} podSets")
    out = []
    for i, rj in enumerate(rjobs):
        where = f"spec.replicatedJobs[{i}]"
        rj = mapping(rj, where, required=True)
        if not string(rj.get("name"), f"{where}.name"):
            raise WorkloadSpecError(f"{where}.name", "required")
        job_spec = mapping(mapping(rj.get("template"), f"{where}.template", required=True)
                            .get("spec"), f"{where}.template.spec", required=True)
        mapping(job_spec.get("template"), f"{where}.template.spec.template", required=True)
        out.append(rj)
    return out


def _pod_count(rj: Mapping[str, Any], where: str) -> int:
    """``replicas x min(parallelism, completions)`` of one replicatedJob."""
    replicas = integer(rj.get("replicas"), f"{where}.replicas", default=1, minimum=0)
    try:
        per_job = job_pod_count(rj["template"])
    except WorkloadSpecError as exc:
        raise WorkloadSpecError(f"{where}.template.{exc.field}",
                                str(exc).split(": ", 1)[-1]) from None
    return replicas * per_job


def pod_sets(js: Mapping[str, Any]) -> tuple[PodSet, ...]:
    """The JobSet's podSets (module doc). Raises ``WorkloadSpecError``."""
    out = []
    for i, rj in enumerate(replicated_jobs(js)):
        where = f"spec.replicatedJobs[{i}]"
        out.append(pod_set_from_template(str(rj["name"]).lower(), _pod_count(rj, where),
                                         rj["template"]["spec"]["template"],
                                         field=f"{where}.template.spec.template"))
    return tuple(out)


def _priority(js: Mapping[str, Any], priority_classes: Mapping[str, int] | None,
              pod_priority_classes: Mapping[str, int] | None) -> tuple[int, dict | None]:
    """The label's WorkloadPriorityClass, else the first replicatedJob's pod priorityClassName
    (``job_priority`` on a view of the JobSet with that template)."""
    first = replicated_jobs(js)[0]["template"]["spec"]["template"]
    view = {"metadata": js.get("metadata") or {}, "spec": {"template": first}}
    return job_priority(view, priority_classes=priority_classes,
                        pod_priority_classes=pod_priority_classes)


def workload_name(js: Mapping[str, Any]) -> str:
    """``jobset-<name>-<hash5>`` (Kueue ``GetWorkloadNameForOwnerWithGVK``)."""
    meta = js.get("metadata") or {}
    return workload_name_for_owner("JobSet", GROUP, str(meta.get("name", "")),
                                   str(meta.get("uid", "")))


def workload_from_jobset(js: Mapping[str, Any], *, priority_classes: Mapping[str, int] | None
                         = None, pod_priority_classes: Mapping[str, int] | None = None
                         ) -> Workload:
    """The domain Workload a JobSet needs (module doc). Raises ``WorkloadSpecError``."""
    if not isinstance(js, Mapping):
        raise WorkloadSpecError("<jobset>", f"expected a JobSet object, got {type(js).__name__}")
    meta = mapping(js.get("metadata"), "metadata", required=True)
    if not string(meta.get("name"), "metadata.name"):
        raise WorkloadSpecError("metadata.name", "required")
    where = f"metadata.labels[{QUEUE_NAME_LABEL}]"
    queue = string(mapping(meta.get("labels"), "metadata.labels").get(QUEUE_NAME_LABEL), where)
    if queue:
        check_dns_subdomain(queue, where)
    priority, _ = _priority(js, priority_classes, pod_priority_classes)
    return Workload(namespace=string(meta.get("namespace"), "metadata.namespace"),
                    name=workload_name(js), queue_name=queue, pod_sets=pod_sets(js),
                    priority=priority, creation=creation_seconds(meta))


def workload_object_for_jobset(js: Mapping[str, Any], *, priority_classes: Mapping[str, int]
                               | None = None, pod_priority_classes: Mapping[str, int]
                               | None = None) -> Obj:
    """The Workload object (kueue.x-k8s.io/v1beta2) to create for a JobSet: one podSet per
    replicatedJob with its pod template as written. Raises ``WorkloadSpecError``."""
    wl = workload_from_jobset(js, priority_classes=priority_classes,
                              pod_priority_classes=pod_priority_classes)
    _, ref = _priority(js, priority_classes, pod_priority_classes)
    templates = [copy.deepcopy(rj["template"]["spec"]["template"]) for rj in replicated_jobs(js)]
    sets = [{"name": ps.name, "count": ps.count, "template": t}
            for ps, t in zip(wl.pod_sets, templates, strict=True)]
    return workload_object_for_owner(js, wl, ref, sets, kind="JobSet",
                                     api_version=f"{GROUP}/{VERSION}")


# ------------------------------------------------------------------------- inject / restore


def _records(js: Mapping[str, Any]) -> dict[str, str]:
    """replicatedJob name -> the stored record (JSON text) of its pod template, or {} (also
    when the annotation is unreadable: it is on the tenant's JobSet, which the tenant may
    edit; each record is read by ``read_record``, which ignores a bad one)."""
    ann = ((js.get("metadata") or {}).get("annotations") or {}).get(ORIGINAL_ANNOTATION)
    try:
        out = json.loads(ann) if isinstance(ann, str) and ann else {}
    except (ValueError, RecursionError):
        return {}
    return {k: v for k, v in out.items() if isinstance(v, str)} if isinstance(out, dict) else {}


def _view(rj: Mapping[str, Any], record: str | None) -> Obj:
    """A Job-shaped view of one replicatedJob (``{metadata, spec: {template}}``) with its stored
    record, so the Job kind's ``injected_job`` / ``restored_job`` do the template work."""
    view: Obj = {"spec": {"template": copy.deepcopy(rj["template"]["spec"]["template"])}}
    if record is not None:
        view["metadata"] = {"annotations": {ORIGINAL_ANNOTATION: record}}
    return view


def injected_jobset(js: Mapping[str, Any], scheduling: Mapping[str, tuple[Mapping[str, str],
                    list[Obj]]], *, inject_node_selector: bool = True) -> Obj:
    """A copy of ``js`` started: each replicatedJob's pod template = the user's record + its
    podSet's flavor nodeSelector/tolerations (``scheduling``: podSet name -> both) + the podset
    label; the records in ``ORIGINAL_ANNOTATION``; ``spec.suspend=false``. Idempotent.
    Raises ``InjectionConflict`` when a flavor's nodeSelector contradicts the user's."""
    out = copy.deepcopy(dict(js))
    stored = _records(out)
    records: dict[str, str] = {}
    for rj in out["spec"]["replicatedJobs"]:
        name = str(rj["name"])
        selector, tolerations = scheduling.get(name.lower(), ({}, []))
        started = injected_job(_view(rj, stored.get(name)), name.lower(), selector, tolerations,
                               inject_node_selector=inject_node_selector)
        rj["template"]["spec"]["template"] = started["spec"]["template"]
        records[name] = started["metadata"]["annotations"][ORIGINAL_ANNOTATION]
    meta = out.setdefault("metadata", {})
    meta["annotations"] = {**(meta.get("annotations") or {}),
                           ORIGINAL_ANNOTATION: json.dumps(records, sort_keys=True)}
    out["spec"]["suspend"] = False
    return out


def restored_jobset(js: Mapping[str, Any], *, restore: bool = True) -> Obj:
    """A copy of ``js`` stopped: ``spec.suspend=true`` and, where recorded (and ``restore``),
    each pod template's nodeSelector / tolerations / labels as the user wrote them; the
    record removed (``restore=False``: only removed, for a record the API server refuses)."""
    out = copy.deepcopy(dict(js))
    out.setdefault("spec", {})["suspend"] = True
    if ORIGINAL_ANNOTATION not in ((out.get("metadata") or {}).get("annotations") or {}):
        return out
    stored = _records(out) if restore else {}
    for rj in out["spec"].get("replicatedJobs") or []:
        record = stored.get(str(rj.get("name")))
        if record is not None:
            rj["template"]["spec"]["template"] = restored_job(_view(rj, record))["spec"][
                "template"]
    anns = dict(out["metadata"].get("annotations") or {})
    anns.pop(ORIGINAL_ANNOTATION, None)
    if anns:
        out["metadata"]["annotations"] = anns
    else:
        out["metadata"].pop("annotations", None)
    return out


def jobset_finished(js: Mapping[str, Any]) -> tuple[bool, str, str]:
    """(finished, ``Succeeded``/``Failed``, message) from the conditions ``Completed`` /
    ``Failed`` (Kueue ``JobSet.Finished``)."""
    return job_finished(js, complete="Completed", kind="JobSet")


def active_jobs(js: Mapping[str, Any]) -> int:
    """Active child Jobs over all replicatedJobs (``status.replicatedJobsStatus[].active``)."""
    return sum(int(s.get("active") or 0)
               for s in ((js.get("status") or {}).get("replicatedJobsStatus")) or [])


class JobSet:
    """jobset.x-k8s.io/v1alpha2 JobSet (``JobKind``; module doc). ``optional``: its CRD may be
    absent; the reconciler then leaves the kind out at start-up."""

    key = "jobset"
    resource = JOBSETS
    api_group = GROUP
    kind = "JobSet"
    label_selector: str | None = MANAGED_JOBS
    optional = True

    # The readers (JobKind's) are the module's functions; the queue label, the suspend lever and
    # the start record are the same as a Job's.
    queue_name = staticmethod(queue_name)
    workload_name = staticmethod(workload_name)
    workload_object = staticmethod(workload_object_for_jobset)
    desired = staticmethod(workload_from_jobset)
    is_suspended = staticmethod(is_suspended)
    is_started = staticmethod(is_injected)
    finished = staticmethod(jobset_finished)
    active_pods = staticmethod(active_jobs)

    async def _put(self, ctx: Context, js: Obj) -> Obj:
        out = await ctx.client.replace(JOBSETS, js)
        ctx.store(self.key).put(out)
        return out

    async def start(self, ctx: Context, obj: Obj, workload: Mapping[str, Any]) -> bool:
        """Unsuspend with each podSet's flavors in its replicatedJob (idempotent). Raises
        ``InjectionConflict`` (a ``StartError``)."""
        desired = injected_jobset(obj, admitted_scheduling(ctx, workload),
                                  inject_node_selector=ctx.settings.scheduling
                                  .inject_node_selector)
        if desired == obj:
            return False
        await write_start(ctx, obj, desired, workload, self._put)
        return True

    async def stop(self, ctx: Context, obj: Obj, why: str) -> Obj:
        """Suspend and restore the pod templates in one update (module doc)."""
        restored = restored_jobset(obj)
        if restored == obj:
            return obj
        try:
            out = await self._put(ctx, restored)
        except Permanent as exc:
            if refused_as_immutable(exc):
                raise
            # A record the API server refuses (the tenant may edit it): suspend regardless.
            out = await self._put(ctx, restored_jobset(obj, restore=False))
        if not is_suspended(obj):
            ctx.recorder.emit(out, NORMAL, "Stopped", why)
        return out


KIND = JobSet()

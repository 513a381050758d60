"""batch/v1 Job as a job kind (Kueue ``pkg/controller/jobs/job``, kueue-semantics.md 4.3-4.6).

One podSet ``main``: the pod template, ``count = min(parallelism, completions)``
(``app.core.workload.workload_from_job``). Suspend lever: ``spec.suspend``. Finished: the
``Complete`` / ``Failed`` conditions.

Start (``RunWithPodSetsInfo``): the flavors' nodeLabels merged into the template's
nodeSelector, their tolerations appended, the pod label ``kueue.x-k8s.io/podset=main``
(``app.integrations.podsets.inject_template``), a partial admission's count as
``spec.parallelism``, and ``spec.suspend=false``, in one write. What the user wrote is kept on
the Job itself, in the annotation ``ORIGINAL_ANNOTATION`` (the template's start record,
``podsets.template_record``, plus the user's ``parallelism`` when a partial admission changed
it), written in the same update that unsuspends. Stop (``Job.Stop``, 4.5) sets
``spec.suspend=true`` and then restores exactly those fields and drops the annotation.
Keeping the record on the Job (not only in the Workload) makes the restore independent of the
Workload's fate (deleted, rebuilt) and of controller restarts; injecting from the record makes
a repeated injection a no-op. A start the flavors contradict raises ``InjectionConflict``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from app.core.workload import Workload
from app.integrations.framework import (
    MANAGED_JOBS,
    KindDefaults,
    delete_pods,
    job_finished,
    label_queue_name,
    pods_in,
    pods_of,
)
from app.integrations.podsets import (
    admitted_scheduling,
    apply_record,
    has_start_record,
    inject_template,
    read_record,
    record_text,
    strip_admission,
    template_record,
    write_start,
)
from app.kube.client import JOBS, MERGE_PATCH
from app.kube.errors import Conflict, Permanent
from app.kube.events import NORMAL
from app.wire.fields import Obj
from app.wire.names import ORIGINAL_ANNOTATION, PODSET_LABEL, PREBUILT_WORKLOAD_LABEL
from app.wire.workload import (
    completions_follow_parallelism,
    job_pod_count,
    workload_from_job,
    workload_name_for_job,
    workload_object_for_job,
)

if TYPE_CHECKING:
    from app.kube.context import Context


STOPPING_ANNOTATION = "kueue.x-k8s.io/stopping"


# ------------------------------------------------------------------------- inject / restore


def _template(job: Obj) -> Obj:
    return job.setdefault("spec", {}).setdefault("template", {})


def record_original(job: Obj) -> Obj:
    """The user's scheduling fields of the Job's pod template (or the stored record, when
    readable: ``read_record``)."""
    ann = ((job.get("metadata") or {}).get("annotations") or {}).get(ORIGINAL_ANNOTATION)
    return template_record(job.get("spec", {}).get("template") or {}, ann)


def _set_parallelism(job: Obj, value: int) -> None:
    spec = job.setdefault("spec", {})
    spec["parallelism"] = value
    if completions_follow_parallelism(job):
        spec["completions"] = value


def _apply_record(job: Obj, rec: Obj) -> None:
    if "parallelism" in rec:  # partial admission changed it
        _set_parallelism(job, rec["parallelism"])
    apply_record(_template(job), rec)


def injected_job(job: Obj, pod_set: str, node_selector: Mapping[str, str],
                 tolerations: Iterable[Mapping[str, Any]], *,
                 inject_node_selector: bool = True, parallelism: int | None = None) -> Obj:
    """A copy of ``job`` started for ``pod_set``: suspend false, the template = the user's
    record + the flavors' ``node_selector`` / ``tolerations`` + the podset label, and the
    record stored in ``ORIGINAL_ANNOTATION``. ``parallelism``: the count of a partial
    admission (Kueue sets ``spec.parallelism`` to it, and ``spec.completions`` too under
    ``job-completions-equal-parallelism``; the user's value joins the record).
    Idempotent: injecting an injected Job again gives the same object.

    Raises ``InjectionConflict`` when ``node_selector`` contradicts the user's nodeSelector.
    """
    out = copy.deepcopy(job)
    rec = record_original(out)
    if parallelism is not None and "parallelism" not in rec:
        rec["parallelism"] = (out.get("spec") or {}).get("parallelism", 1)
    if "parallelism" in rec:
        _set_parallelism(out, rec["parallelism"])
    if parallelism is not None:
        _set_parallelism(out, parallelism)
    inject_template(_template(out), rec, pod_set, node_selector, tolerations,
                    inject_node_selector=inject_node_selector)
    meta = out.setdefault("metadata", {})
    anns = dict(meta.get("annotations") or {})
    anns[ORIGINAL_ANNOTATION] = record_text(rec)
    anns.pop(STOPPING_ANNOTATION, None)
    meta["annotations"] = anns
    out["spec"]["suspend"] = False
    return out


def restored_job(job: Obj, *, restore: bool = True) -> Obj:
    """A copy of ``job`` stopped: suspend true and, when a record exists (and ``restore``),
    the template's nodeSelector / tolerations / labels exactly as the user wrote them, record
    removed (``restore=False``: only removed, for a record the API server refuses)."""
    out = copy.deepcopy(job)
    out.setdefault("spec", {})["suspend"] = True
    meta = out.setdefault("metadata", {})
    anns = dict(meta.get("annotations") or {})
    if ORIGINAL_ANNOTATION in anns and (rec := read_record(anns.pop(ORIGINAL_ANNOTATION))) \
            is not None and restore:
        _apply_record(out, rec)
    anns.pop(STOPPING_ANNOTATION, None)
    if anns:
        meta["annotations"] = anns
    else:
        meta.pop("annotations", None)
    return out


def carries_admission(job: Mapping[str, Any]) -> bool:
    """True when the Job's pod template carries the podSet label pykueue writes when it starts
    a job (``kueue.x-k8s.io/podset``) but no start record of the Job's own: the template was
    copied from a started ancestor (a JobSet's replicatedJob, a RayJob's submitter) by its
    operator, together with the flavor's nodeSelector and tolerations."""
    tpl = (job.get("spec") or {}).get("template") or {}
    labels = (tpl.get("metadata") or {}).get("labels") or {}
    return isinstance(labels, Mapping) and PODSET_LABEL in labels \
        and not is_injected(job)  # type: ignore[arg-type]


def without_admission(job: Obj, flavors: Iterable[Mapping[str, Any]]) -> Obj:
    """A copy of ``job`` suspended, with what an admission injects taken out of its pod
    template (``podsets.strip_admission``)."""
    out = copy.deepcopy(job)
    out.setdefault("spec", {})["suspend"] = True
    strip_admission(_template(out), flavors)
    return out


def recorded_parallelism(job: Mapping[str, Any]) -> int | None:
    """The user's ``spec.parallelism`` kept in the record when a partial admission changed
    it; None otherwise."""
    ann = ((job.get("metadata") or {}).get("annotations") or {}).get(ORIGINAL_ANNOTATION)
    if not ann:
        return None
    value = (read_record(ann) or {}).get("parallelism")
    return value if isinstance(value, int) and value >= 0 else None


def partial_count(workload: Mapping[str, Any]) -> int | None:
    """The admitted pod count when the Workload (podSet ``minCount``) was admitted with
    fewer pods than its ``count`` (Kueue partial admission); None otherwise."""
    sets = (workload.get("spec") or {}).get("podSets") or []
    psas = ((workload.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []
    if not sets or not psas or sets[0].get("minCount") is None:
        return None
    admitted = psas[0].get("count")
    return admitted if isinstance(admitted, int) and admitted < sets[0].get("count", 1) else None


_WHOLE_TEMPLATE = ("spec.template", "spec.replicatedJobs")
_IMMUTABLE = "field is immutable"


def refused_as_immutable(exc: Exception) -> bool:
    """True when the API server refused a write because a field is immutable at this moment
    (apimachinery's "field is immutable", on the whole ``spec.template``: a Job's template
    before its suspension settled), which a retry cures; any other refusal of a restore is
    the record's content (a cause naming a field inside the template).

    Read from the Status' causes (``details.causes``, which a 422 Invalid carries): a cause
    whose field is exactly the whole template. Not from the text: a refusal quotes the values
    it refused, and the record is the tenant's to edit, so a label or toleration reading
    "field is immutable" made every restore look unsettled and the stop (and the quota
    release behind it) would be retried for ever. Without causes, the message must be
    the whole template's refusal: ``spec.template: Invalid value: ...: field is immutable``."""
    causes = (getattr(exc, "details", None) or {}).get("causes") or []
    if causes:
        return any(isinstance(c, Mapping) and c.get("field") in _WHOLE_TEMPLATE
                   and str(c.get("message", "")).rstrip().endswith(_IMMUTABLE)
                   for c in causes)
    text = str(getattr(exc, "message", "") or exc).rstrip()
    return text.endswith(_IMMUTABLE) and any(
        text.split(" is invalid: ", 1)[-1].startswith(f"{f}: Invalid value: ")
        for f in _WHOLE_TEMPLATE)


def is_injected(job: Obj) -> bool:
    """True when the Job carries pykueue's record (it was started by pykueue)."""
    return has_start_record(job)


# ------------------------------------------------------------------------- Job state


def is_suspended(job: Obj) -> bool:
    return bool((job.get("spec") or {}).get("suspend"))


def active_pods(job: Obj) -> int:
    """Pods of the Job still holding resources: ``status.active`` + ``status.terminating``."""
    st = job.get("status") or {}
    return int(st.get("active") or 0) + int(st.get("terminating") or 0)


def pods_ready(job: Obj) -> bool:
    """Kueue ``Job.PodsReady``: ``status.ready`` + ``status.succeeded`` (+ succeeded pods not
    yet counted) reach the Job's pod count, min(parallelism, completions)."""
    spec, st = job.get("spec") or {}, job.get("status") or {}
    count = int(spec.get("parallelism") if spec.get("parallelism") is not None else 1)
    if spec.get("completions") is not None:
        count = min(count, int(spec["completions"]))
    uncounted = len(((st.get("uncountedTerminatedPods") or {}).get("succeeded")) or [])
    return int(st.get("ready") or 0) + int(st.get("succeeded") or 0) + uncounted >= count


class BatchJob(KindDefaults):
    """batch/v1 Job (``JobKind``; module doc)."""

    key = "job"
    resource = JOBS
    api_group = "batch"
    kind = "Job"
    label_selector: str | None = MANAGED_JOBS
    # Partial admission: start() applies an admitted count below the spec's (so a job not yet
    # started matches its Workload's spec, not the smaller admission). Kinds without it must
    # match the admission itself, or a Workload edited to a small minCount would start all.
    partial_admission = True
    # The Job controller's labels on every pod it makes (Kubernetes >= 1.27).
    pod_labels = ("batch.kubernetes.io/job-name", "batch.kubernetes.io/controller-uid")

    def queue_name(self, obj: Mapping[str, Any]) -> str:
        return label_queue_name(obj)

    def workload_name(self, obj: Mapping[str, Any]) -> str:
        """Kueue's name, or the Workload its ``kueue.x-k8s.io/prebuilt-workload-name`` label
        names (a MultiKueue worker's copy: adopted, never created)."""
        meta = obj.get("metadata") or {}
        prebuilt = (meta.get("labels") or {}).get(PREBUILT_WORKLOAD_LABEL)
        if prebuilt:
            return str(prebuilt)
        return workload_name_for_job(str(meta.get("name", "")), str(meta.get("uid", "")))

    def workload_object(self, obj: Mapping[str, Any], *, priority_classes: Mapping[str, int],
                        pod_priority_classes: Mapping[str, int]) -> Obj:
        return workload_object_for_job(obj, priority_classes=priority_classes,
                                       pod_priority_classes=pod_priority_classes)

    def desired(self, obj: Mapping[str, Any], *, priority_classes: Mapping[str, int],
                pod_priority_classes: Mapping[str, int]) -> Workload:
        """The Job's Workload; for a Job started by a partial admission, the user's Job
        (its recorded ``parallelism``) with the pods it runs now as the podSet count."""
        original = recorded_parallelism(obj)
        if original is None:
            return workload_from_job(obj, priority_classes=priority_classes,
                                     pod_priority_classes=pod_priority_classes)
        user = copy.deepcopy(dict(obj))
        _set_parallelism(user, original)
        wl = workload_from_job(user, priority_classes=priority_classes,
                               pod_priority_classes=pod_priority_classes)
        running = replace(wl.pod_sets[0], count=job_pod_count(obj))
        return replace(wl, pod_sets=(running, *wl.pod_sets[1:]))

    def is_suspended(self, obj: Mapping[str, Any]) -> bool:
        return is_suspended(obj)  # type: ignore[arg-type]

    def is_started(self, obj: Mapping[str, Any]) -> bool:
        return is_injected(obj)  # type: ignore[arg-type]

    def carries_admission(self, obj: Mapping[str, Any]) -> bool:
        return carries_admission(obj)

    def finished(self, obj: Mapping[str, Any]) -> tuple[bool, str, str]:
        return job_finished(obj)

    def active_pods(self, obj: Mapping[str, Any]) -> int:
        return active_pods(obj)  # type: ignore[arg-type]

    def pods_ready(self, obj: Mapping[str, Any]) -> bool:
        return pods_ready(obj)  # type: ignore[arg-type]

    def _keep(self, ctx: Context, out: Obj) -> None:
        """Put a written Job into the kind's store when that store lists it (labelled, or
        there already): an unlabelled child stopped here would otherwise stay in a store whose
        watch never reports its deletion."""
        store = ctx.store(self.key)
        meta = out.get("metadata") or {}
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        if label_queue_name(out) or store.get(key):
            store.put(out)

    async def _put(self, ctx: Context, job: Obj) -> Obj:
        out = await ctx.client.replace(JOBS, job)
        self._keep(ctx, out)
        return out

    async def _clear_start_time(self, ctx: Context, job: Obj) -> Obj:
        meta = job["metadata"]
        out = await ctx.client.patch(JOBS, meta["name"], {"status": {"startTime": None}},
                                     meta["namespace"], content_type=MERGE_PATCH,
                                     subresource="status")
        self._keep(ctx, out)
        return out

    async def start(self, ctx: Context, obj: Obj, workload: Mapping[str, Any]) -> bool:
        """Unsuspend with the admission's flavors injected (idempotent). Raises
        ``InjectionConflict`` (a ``StartError``)."""
        scheduling = admitted_scheduling(ctx, workload)
        pod_set = next(iter(scheduling), "main")
        selector, tolerations = scheduling.get(pod_set, ({}, []))
        inject = ctx.settings.scheduling.inject_node_selector
        count = partial_count(workload)
        desired = injected_job(obj, pod_set, selector, tolerations, inject_node_selector=inject,
                               parallelism=count)
        if desired == obj:
            return False
        if (obj.get("status") or {}).get("startTime") and is_suspended(obj):
            obj = await self._clear_start_time(ctx, obj)
            desired = injected_job(obj, pod_set, selector, tolerations,
                                   inject_node_selector=inject, parallelism=count)
        await write_start(ctx, obj, desired, workload, self._put)
        return True

    async def stop(self, ctx: Context, obj: Obj, why: str, *,
                   restore: Callable[[Obj], Obj] = restored_job) -> Obj:
        """Suspend, then (once suspended) clear startTime and restore the template
        (``restore``: the Job as it is to stay, by default ``restored_job``).

        Kubernetes allows changing a Job's pod template only while it is suspended and not
        started, hence three writes (Kueue ``Job.Stop`` does the same).

        A Job being deleted is suspended and its running pods deleted (``_delete_pods``), and
        that is all: the Job controller never makes a pod for it again, and the API server
        refuses its template's restore for as long as the Job controller counts its pods
        active, which it no longer settles for a Job being deleted (Kubernetes v1.36: a
        suspended Job's template may change only with ``status.active`` 0 and the
        ``JobSuspended`` condition or no ``startTime``), so the restore would be refused,
        and retried, until the Job is gone. The start record stays: every later look at the
        Job stops it again, deleting any pod of it that still runs."""
        job = obj
        if not is_suspended(job):
            first = copy.deepcopy(job)
            first["spec"]["suspend"] = True
            anns = first["metadata"].setdefault("annotations", {})
            anns[STOPPING_ANNOTATION] = "true"
            job = await self._put(ctx, first)
            ctx.recorder.emit(job, NORMAL, "Stopped", why)
        if (job.get("metadata") or {}).get("deletionTimestamp"):
            await self._delete_pods(ctx, job, why)
            return job
        if (job.get("status") or {}).get("startTime"):
            job = await self._clear_start_time(ctx, job)
        restored = restore(job)
        if restored != job:
            try:
                job = await self._put(ctx, restored)
            except Permanent as exc:
                if refused_as_immutable(exc):
                    # The Job controller has not settled the suspension yet: re-read and
                    # retry quietly (a Conflict), as for a stale resourceVersion.
                    raise Conflict(409, "NotSettled", "the Job's suspension is not settled "
                                   "yet; its pod template is restored on retry") from exc
                # The record (the tenant's to edit) holds what the API server refuses (a bad
                # toleration, say): drop it unapplied rather than never finish the stop.
                job = await self._put(ctx, restored_job(job, restore=False))
        return job

    async def _delete_pods(self, ctx: Context, job: Obj, why: str) -> None:
        """Delete the running pods of ``job``, which is being deleted: the Job controller
        does nothing for a Job being deleted (Kubernetes v1.36 ``syncJob`` calls
        ``manageJob`` only without a ``deletionTimestamp``), so its suspension kills none,
        and a Job a finalizer keeps (a tenant's own) would run on, its Workload holding the
        quota through a preemption, an eviction or ``maximumExecutionTimeSeconds``. Beyond
        Kueue, whose reconciler leaves a Job being deleted alone. Pods already going are
        left; one Normal Event ``DeletedPods`` on the Job."""
        ns = str((job.get("metadata") or {}).get("namespace", ""))
        deleted = len(await delete_pods(ctx, [
            p for p in pods_of(self, pods_in(ctx, ns), job, ctx=ctx)
            if not (p.get("metadata") or {}).get("deletionTimestamp")]))
        if deleted:
            ctx.recorder.emit(job, NORMAL, "DeletedPods",
                              f"{deleted} pod(s) deleted: the Job is being deleted, so the Job "
                              f"controller does not stop them ({why})")

    async def stop_orphaned(self, ctx: Context, obj: Obj, why: str) -> Obj:
        """Stop a Job that ran on the admission of an ancestor which is gone
        (``carries_admission``, no managed ancestor: ``kubectl delete --cascade=orphan`` of a
        JobSet or RayJob): suspended, and what the admission injected taken out of its pod
        template (``without_admission``), so resuming it gives no flavor's scheduling."""
        flavors = list(ctx.store("rf"))
        return await self.stop(ctx, obj, why,
                               restore=lambda job: without_admission(job, flavors))


KIND = BatchJob()

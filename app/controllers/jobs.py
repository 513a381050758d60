"""batch/v1 Job <-> Workload: start (unsuspend + inject), stop (suspend + restore), finish.

Pure helpers (no I/O) first, then ``JobController`` which applies them through the API.

Injection at admission (Kueue v1beta2 ``startJob`` / ``RunWithPodSetsInfo``,
kueue-semantics.md 4.4): for the Job's podSet, the ``nodeLabels`` of every flavor assigned
to it are merged into ``spec.template.spec.nodeSelector``, their ``tolerations`` appended
(without duplicates: a toleration with an empty operator equals one with ``Equal``,
KQ-21 / kueue#11147), and the pod label ``kueue.x-k8s.io/podset=<podSet>`` added; then
``spec.suspend=false``, all in one write.

What the user wrote is kept on the Job itself, in the annotation ``ORIGINAL_ANNOTATION``
(JSON of the template's ``nodeSelector``, ``tolerations`` and ``metadata.labels``, a key
absent when the field was absent), written in the same update that unsuspends. Eviction
(``Job.Stop``, 4.5) sets ``spec.suspend=true`` and then restores exactly those fields and
drops the annotation. Keeping the record on the Job (not only in the Workload) makes the
restore independent of the Workload's fate (deleted, rebuilt) and of controller restarts;
injecting from the record makes a repeated injection a no-op (KQ-21 step 2).
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from app.controllers.client import JOBS, MERGE_PATCH, WORKLOADS
from app.controllers.context import JOB, PC, RF, WL, WPC, Context
from app.controllers.errors import Conflict, NotFound, Permanent
from app.controllers.events import NORMAL, WARNING
from app.controllers.informers import DELETED
from app.controllers.workloads import (
    has_admission,
    is_active,
    is_evicted,
    is_finished,
    owner_job,
    with_finished,
    with_released,
)
from app.controllers.workqueue import WorkQueue, work
from app.core.workload import (
    QUEUE_NAME_LABEL,
    WorkloadSpecError,
    admission_mismatch,
    workload_from_job,
    workload_from_object,
    workload_name_for_job,
    workload_object_for_job,
)

Obj = dict[str, Any]

ORIGINAL_ANNOTATION = "pykueue.dev/original-pod-scheduling"
STOPPING_ANNOTATION = "kueue.x-k8s.io/stopping"
PODSET_LABEL = "kueue.x-k8s.io/podset"


class InjectionConflict(ValueError):
    """The flavors' nodeLabels contradict the Job's own nodeSelector (or each other).

    Kueue treats this as a permanent start failure (Workload Finished, reason FailedToStart).
    """


# ------------------------------------------------------------------------- tolerations


def toleration_identity(t: Mapping[str, Any]) -> tuple[str, str, str, str, Any]:
    """Normalised identity of a core/v1 Toleration dict: (key, operator, value, effect,
    tolerationSeconds); an empty/missing operator is ``Equal`` (kueue#11147)."""
    return (
        str(t.get("key") or ""),
        str(t.get("operator") or "Equal"),
        str(t.get("value") or ""),
        str(t.get("effect") or ""),
        t.get("tolerationSeconds"),
    )


def merge_tolerations(existing: Iterable[Mapping[str, Any]],
                      extra: Iterable[Mapping[str, Any]]) -> list[Obj]:
    """``existing`` unchanged, then each of ``extra`` not already present (by identity)."""
    out = [dict(t) for t in existing]
    seen = {toleration_identity(t) for t in out}
    for t in extra:
        ident = toleration_identity(t)
        if ident not in seen:
            seen.add(ident)
            out.append({k: v for k, v in dict(t).items() if v not in (None, "")})
    return out


# ------------------------------------------------------------------------- flavors


def podset_scheduling(flavor_names: Iterable[str],
                      flavors: Mapping[str, Obj]) -> tuple[dict[str, str], list[Obj]]:
    """Union of ``spec.nodeLabels`` and ``spec.tolerations`` of the named ResourceFlavors.

    ``flavors``: ResourceFlavor objects (dicts) by name; a missing one contributes nothing.
    Raises ``InjectionConflict`` when two flavors want different values for one label.
    """
    selector: dict[str, str] = {}
    tolerations: list[Obj] = []
    for name in dict.fromkeys(flavor_names):
        spec = (flavors.get(name) or {}).get("spec") or {}
        for k, v in (spec.get("nodeLabels") or {}).items():
            if selector.get(k, v) != v:
                raise InjectionConflict(
                    f"flavors assigned to one podSet disagree on node label {k}: "
                    f"{selector[k]!r} vs {v!r} (flavor {name})")
            selector[k] = v
        tolerations = merge_tolerations(tolerations, spec.get("tolerations") or [])
    return selector, tolerations


# ------------------------------------------------------------------------- inject / restore


def _template(job: Obj) -> Obj:
    return job.setdefault("spec", {}).setdefault("template", {})


def record_original(job: Obj) -> Obj:
    """The user's scheduling fields of the Job's pod template (or the stored record)."""
    ann = ((job.get("metadata") or {}).get("annotations") or {}).get(ORIGINAL_ANNOTATION)
    if ann:
        return json.loads(ann)
    tpl = job.get("spec", {}).get("template") or {}
    spec = tpl.get("spec") or {}
    rec: Obj = {}
    if "nodeSelector" in spec and spec["nodeSelector"] is not None:
        rec["nodeSelector"] = copy.deepcopy(spec["nodeSelector"])
    if "tolerations" in spec and spec["tolerations"] is not None:
        rec["tolerations"] = copy.deepcopy(spec["tolerations"])
    labels = (tpl.get("metadata") or {}).get("labels")
    if labels is not None:
        rec["labels"] = copy.deepcopy(labels)
    return rec


def _apply_record(job: Obj, rec: Obj) -> None:
    tpl = _template(job)
    spec = tpl.setdefault("spec", {})
    for field in ("nodeSelector", "tolerations"):
        if field in rec:
            spec[field] = copy.deepcopy(rec[field])
        else:
            spec.pop(field, None)
    if "labels" in rec:
        tpl.setdefault("metadata", {})["labels"] = copy.deepcopy(rec["labels"])
    elif isinstance(tpl.get("metadata"), dict):
        tpl["metadata"].pop("labels", None)
        if not tpl["metadata"]:
            del tpl["metadata"]


def injected_job(job: Obj, pod_set: str, node_selector: Mapping[str, str],
                 tolerations: Iterable[Mapping[str, Any]], *,
                 inject_node_selector: bool = True) -> Obj:
    """A copy of ``job`` started for ``pod_set``: suspend false, the template = the user's
    record + the flavors' ``node_selector`` / ``tolerations`` + the podset label, and the
    record stored in ``ORIGINAL_ANNOTATION``. Idempotent: injecting an injected Job again
    gives the same object.

    Raises ``InjectionConflict`` when ``node_selector`` contradicts the user's nodeSelector.
    """
    out = copy.deepcopy(job)
    rec = record_original(out)
    _apply_record(out, rec)
    tpl = _template(out)
    spec = tpl["spec"]
    if inject_node_selector and node_selector:
        user = dict(rec.get("nodeSelector") or {})
        for k, v in node_selector.items():
            if user.get(k, v) != v:
                raise InjectionConflict(
                    f"the Job's nodeSelector {k}={user[k]} contradicts the flavor's {k}={v}")
        spec["nodeSelector"] = {**user, **node_selector}
    extra = list(tolerations)
    if extra:
        spec["tolerations"] = merge_tolerations(rec.get("tolerations") or [], extra)
    labels = dict(rec.get("labels") or {})
    labels[PODSET_LABEL] = pod_set
    tpl.setdefault("metadata", {})["labels"] = labels
    meta = out.setdefault("metadata", {})
    anns = dict(meta.get("annotations") or {})
    anns[ORIGINAL_ANNOTATION] = json.dumps(rec, sort_keys=True, separators=(",", ":"))
    anns.pop(STOPPING_ANNOTATION, None)
    meta["annotations"] = anns
    out["spec"]["suspend"] = False
    return out


def restored_job(job: Obj) -> Obj:
    """A copy of ``job`` stopped: suspend true and, when a record exists, the template's
    nodeSelector / tolerations / labels exactly as the user wrote them, record removed."""
    out = copy.deepcopy(job)
    out.setdefault("spec", {})["suspend"] = True
    meta = out.setdefault("metadata", {})
    anns = dict(meta.get("annotations") or {})
    if ORIGINAL_ANNOTATION in anns:
        _apply_record(out, json.loads(anns.pop(ORIGINAL_ANNOTATION)))
    anns.pop(STOPPING_ANNOTATION, None)
    if anns:
        meta["annotations"] = anns
    else:
        meta.pop("annotations", None)
    return out


def is_injected(job: Obj) -> bool:
    """True when the Job carries pykueue's record (it was started by pykueue)."""
    return ORIGINAL_ANNOTATION in (((job.get("metadata") or {}).get("annotations")) or {})


# ------------------------------------------------------------------------- Job state


def is_suspended(job: Obj) -> bool:
    return bool((job.get("spec") or {}).get("suspend"))


def job_finished(job: Obj) -> tuple[bool, str, str]:
    """(finished, reason, message) from the Job's ``Complete`` / ``Failed`` conditions:
    reason ``Succeeded`` or ``Failed`` (Kueue's Finished reasons), message copied."""
    for c in ((job.get("status") or {}).get("conditions")) or []:
        if c.get("status") != "True":
            continue
        if c.get("type") == "Complete":
            return True, "Succeeded", c.get("message") or "Job finished successfully"
        if c.get("type") == "Failed":
            return True, "Failed", c.get("message") or c.get("reason") or "Job failed"
    return False, "", ""


def active_pods(job: Obj) -> int:
    """Pods of the Job still holding resources: ``status.active`` + ``status.terminating``."""
    st = job.get("status") or {}
    return int(st.get("active") or 0) + int(st.get("terminating") or 0)


def queue_name(job: Obj) -> str:
    return str(((job.get("metadata") or {}).get("labels") or {}).get(QUEUE_NAME_LABEL, ""))


# ============================================================================ controller
# I/O below: the Job controller of the reconciler (leader only writes).



log = logging.getLogger(__name__)

JOB_PREFIX, WL_PREFIX = "job:", "wl:"


class JobController:
    """Reconciles labelled Jobs with their Workloads (Kueue jobframework, reference 4.3-4.6).

    Keys ``job:<ns>/<name>`` and ``wl:<ns>/<name>`` go through one ``WorkQueue`` processed by
    ``workers`` tasks; handlers on the Job and Workload informers enqueue them. Writes happen
    only while ``ctx.may_write`` (leader and synced); on gaining leadership every Job and
    Workload is enqueued again.

    Per Job (in order): deleted -> delete its Workloads (their quota returns); Complete/Failed
    -> Workload Finished (Succeeded/Failed); no Workload -> suspend a running Job, then create
    the Workload once no pod is active; Workload admitted -> start the Job (inject, unsuspend),
    unless its pods no longer match the admission (parallelism or requests changed): then stop
    it and, once its pods are gone, replace the Workload (Kueue ``NoMatchingWorkload``);
    Workload evicted -> stop the Job (suspend, clear startTime, restore the template), then
    release the quota once no pod is left; Workload pending -> a running Job is stopped
    ("no Job left unsuspended without an admitted Workload"), a suspended Job whose spec
    changed gets its Workload rebuilt.
    """

    def __init__(self, ctx: Context, *, workers: int = 4) -> None:
        self.ctx = ctx
        self.queue = WorkQueue(base=ctx.settings.scheduling.requeue_backoff_seconds / 4,
                               cap=ctx.settings.scheduling.requeue_backoff_max_seconds)
        self.workers = workers
        self._tasks: list[asyncio.Task[None]] = []
        self.reconciles = 0

    # ----------------------------------------------------------------- wiring

    def on_job(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        obj = new or old
        if obj is not None:
            meta = obj["metadata"]
            self.queue.add(f"{JOB_PREFIX}{meta['namespace']}/{meta['name']}")

    def on_workload(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        obj = new or old
        if obj is None:
            return
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        owner = owner_job(obj)
        if owner is not None:
            self.queue.add(f"{JOB_PREFIX}{meta['namespace']}/{owner[0]}")
        elif etype != DELETED:
            self.queue.add(f"{WL_PREFIX}{key}")

    def enqueue_all(self) -> None:
        for job in self.ctx.store(JOB):
            self.on_job("SYNC", None, job)
        for wl in self.ctx.store(WL):
            self.on_workload("SYNC", None, wl)

    @property
    def tasks(self) -> list[asyncio.Task[None]]:
        """The running worker tasks."""
        return list(self._tasks)

    def start(self) -> None:
        for i in range(self.workers):
            self._tasks.append(asyncio.create_task(self._worker(), name=f"job-worker-{i}"))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        self.queue.close()

    async def _worker(self) -> None:
        await work(self.queue, self._reconcile_key, may_write=lambda: self.ctx.may_write,
                   log=log, what="reconcile")

    async def _reconcile_key(self, key: str) -> float | None:
        self.reconciles += 1
        kind, _, rest = key.partition(":")
        ns, _, name = rest.partition("/")
        if kind == "job":
            return await self.reconcile_job(ns, name)
        return await self.reconcile_workload(ns, name)

    # ----------------------------------------------------------------- helpers

    def _priority_maps(self) -> tuple[dict[str, int], dict[str, int]]:
        wpc = {o["metadata"]["name"]: int(o.get("value") or 0) for o in self.ctx.store(WPC)}
        pc = {o["metadata"]["name"]: int(o.get("value") or 0) for o in self.ctx.store(PC)}
        return wpc, pc

    async def _put_job(self, job: Obj) -> Obj:
        out = await self.ctx.client.replace(JOBS, job)
        self.ctx.store(JOB).put(out)
        return out

    async def _put_wl_status(self, wl: Obj) -> Obj:
        out = await self.ctx.client.replace(WORKLOADS, wl, subresource="status")
        self.ctx.store(WL).put(out)
        return out

    def _flavors(self) -> dict[str, Obj]:
        return {o["metadata"]["name"]: o for o in self.ctx.store(RF)}

    # ----------------------------------------------------------------- Job

    async def reconcile_job(self, ns: str, name: str) -> float | None:
        """One pass over Job ``ns/name``; returns seconds to look again (or None)."""
        ctx = self.ctx
        job = ctx.store(JOB).get(f"{ns}/{name}")
        if job is None or not queue_name(job):  # an empty queue name is no queue (MANAGED_JOBS)
            await self._job_gone(ns, name)
            return None
        uid = job["metadata"].get("uid", "")
        wl = ctx.store(WL).get(f"{ns}/{workload_name_for_job(name, uid)}")
        finished, reason, message = job_finished(job)
        if finished:
            if wl is not None and not is_finished(wl):
                await self._put_wl_status(with_finished(wl, reason, message, ctx.clock()))
                ctx.recorder.emit(job, NORMAL, "FinishedWorkload",
                                  f"Workload '{ns}/{wl['metadata']['name']}' is declared finished")
                ctx.wake()
            return None
        if wl is None:
            return await self._without_workload(job)
        if is_finished(wl):
            return None
        if has_admission(wl) and not is_evicted(wl) and is_active(wl):
            why = self._admission_mismatch(job, wl)
            if why is not None:
                return await self._stop_mismatched(job, wl, why)
            await self._start(job, wl)
            return None
        if has_admission(wl):  # evicted (or deactivated) while holding quota
            return await self._stop_then_release(job, wl)
        if f"{ns}/{wl['metadata']['name']}" in ctx.inflight:
            return None  # its admission is being written right now
        if not is_suspended(job) or is_injected(job):
            await self._stop(job, "Not admitted by cluster queue")
            return None
        await self._maybe_rebuild(job, wl)
        return None

    def _admission_mismatch(self, job: Obj, wl: Obj) -> str | None:
        """Why the Job's pods no longer match its admitted Workload (``admission_mismatch``),
        or None. A Job that cannot be read any more counts as not matching."""
        wpc, pc = self._priority_maps()
        try:
            want = workload_from_job(job, priority_classes=wpc, pod_priority_classes=pc)
            have = workload_from_object(wl)
        except WorkloadSpecError as exc:
            return f"the Job cannot be read: {exc}"
        return admission_mismatch(want.pod_sets, have)

    async def _stop_mismatched(self, job: Obj, wl: Obj, why: str) -> float | None:
        """The Job was changed after admission (``spec.parallelism`` raised, say): stop it as
        Kueue does (``NoMatchingWorkload``), and once none of its pods is left delete the old
        Workload, whose quota then returns; the Job is queued again with a new Workload for
        its new shape. The quota is held until the pods are gone, so the Job never runs more
        than was admitted for longer than it takes to stop."""
        ctx = self.ctx
        meta = wl["metadata"]
        if not is_suspended(job) or is_injected(job):
            job = await self._stop(job, "No matching Workload; restoring pod templates "
                                        f"according to existent Workload ({why})")
            ctx.recorder.emit(wl, WARNING, "NoMatchingWorkload",
                              f"The Job no longer matches its admission: {why}")
        if active_pods(job) > 0:
            return 1.0
        try:
            await ctx.client.delete(WORKLOADS, meta["name"], meta["namespace"],
                                    uid=meta.get("uid"))
        except NotFound:
            pass
        ctx.recorder.emit(job, NORMAL, "DeletedWorkload",
                          f"Deleted not matching Workload: {meta['namespace']}/{meta['name']}")
        ctx.wake()
        return 0.5  # the watch removes it; then a Workload for the new shape is created

    async def _job_gone(self, ns: str, name: str) -> None:
        """The Job left the store (deleted, or its queue label removed): delete the Workloads
        it controls if it is really gone (GET 404 or another uid)."""
        keys = self.ctx.owners.workloads_of(f"{ns}/{name}")
        if not keys:
            return
        try:
            live = await self.ctx.client.get(JOBS, name, ns)
        except NotFound:
            live = None
        for key in keys:
            wl = self.ctx.store(WL).get(key)
            if wl is None:
                continue
            owner = owner_job(wl)
            if live is not None and owner and owner[1] == live["metadata"].get("uid"):
                continue  # the Job exists but lost its label: leave its Workload alone
            try:
                await self.ctx.client.delete(WORKLOADS, wl["metadata"]["name"], ns,
                                             uid=wl["metadata"].get("uid"))
            except NotFound:
                pass
            self.ctx.wake()

    async def _without_workload(self, job: Obj) -> float | None:
        ctx = self.ctx
        if not is_suspended(job) or is_injected(job):
            await self._stop(job, "No matching Workload; restoring pod templates according to "
                                  "existent Workload")
            return None
        if active_pods(job) > 0:
            return 1.0  # wait for the pods of the stopped Job to go
        wpc, pc = self._priority_maps()
        try:
            body = workload_object_for_job(job, priority_classes=wpc, pod_priority_classes=pc)
        except WorkloadSpecError as exc:
            ctx.recorder.emit(job, WARNING, "ErrWorkloadCompose", str(exc))
            return 30.0
        try:
            out = await ctx.client.create(WORKLOADS, body)
        except Conflict as exc:
            if exc.already_exists:
                return 0.5  # the watch has not shown it yet
            raise
        ctx.store(WL).put(out)
        ctx.recorder.emit(job, NORMAL, "CreatedWorkload",
                          f"Created Workload: {out['metadata']['namespace']}/"
                          f"{out['metadata']['name']}")
        return None

    async def _start(self, job: Obj, wl: Obj) -> None:
        """Unsuspend with the admission's flavors injected (idempotent)."""
        ctx = self.ctx
        admission = (wl.get("status") or {}).get("admission") or {}
        psas = admission.get("podSetAssignments") or []
        pod_set = psas[0].get("name", "main") if psas else "main"
        try:
            selector, tolerations = podset_scheduling(
                (psas[0].get("flavors") or {}).values() if psas else (), self._flavors())
            desired = injected_job(job, pod_set, selector, tolerations,
                                   inject_node_selector=ctx.settings.scheduling.inject_node_selector)
        except InjectionConflict as exc:
            await self._put_wl_status(with_finished(wl, "FailedToStart", str(exc), ctx.clock()))
            ctx.recorder.emit(job, WARNING, "FailedToStart", str(exc))
            ctx.wake()
            return
        if desired == job:
            return
        if (job.get("status") or {}).get("startTime") and is_suspended(job):
            job = await self._clear_start_time(job)
            desired = injected_job(job, pod_set, selector, tolerations,
                                   inject_node_selector=ctx.settings.scheduling.inject_node_selector)
        try:
            await self._put_job(desired)
        except Permanent as exc:
            ctx.recorder.emit(job, WARNING, "FailedToStart", exc.message)
            raise
        ctx.recorder.emit(job, NORMAL, "Started",
                          f"Admitted by clusterQueue {admission.get('clusterQueue', '')}")

    async def _clear_start_time(self, job: Obj) -> Obj:
        meta = job["metadata"]
        out = await self.ctx.client.patch(JOBS, meta["name"], {"status": {"startTime": None}},
                                          meta["namespace"], content_type=MERGE_PATCH,
                                          subresource="status")
        self.ctx.store(JOB).put(out)
        return out

    async def _stop(self, job: Obj, why: str) -> Obj:
        """Suspend, then (once suspended) clear startTime and restore the template.

        Kubernetes allows changing a Job's pod template only while it is suspended and not
        started, hence three writes (Kueue ``Job.Stop`` does the same)."""
        ctx = self.ctx
        if not is_suspended(job):
            first = copy.deepcopy(job)
            first["spec"]["suspend"] = True
            anns = first["metadata"].setdefault("annotations", {})
            anns[STOPPING_ANNOTATION] = "true"
            job = await self._put_job(first)
            ctx.recorder.emit(job, NORMAL, "Stopped", why)
        if (job.get("status") or {}).get("startTime"):
            job = await self._clear_start_time(job)
        restored = restored_job(job)
        if restored != job:
            job = await self._put_job(restored)
        return job

    async def _stop_then_release(self, job: Obj, wl: Obj) -> float | None:
        ctx = self.ctx
        if not is_suspended(job) or is_injected(job):
            ev = next((c for c in (wl.get("status") or {}).get("conditions", [])
                       if c.get("type") == "Evicted"), {})
            job = await self._stop(job, str(ev.get("message") or "Evicted"))
        if active_pods(job) > 0:
            return 1.0
        await self._put_wl_status(with_released(wl, ctx.clock()))
        ctx.wake()
        return None

    async def _maybe_rebuild(self, job: Obj, wl: Obj) -> None:
        """A suspended Job whose spec no longer matches its pending Workload: update the
        Workload's spec (queueName, podSets, priority) in place."""
        wpc, pc = self._priority_maps()
        try:
            want = workload_from_job(job, priority_classes=wpc, pod_priority_classes=pc)
            have = workload_from_object(wl)
        except WorkloadSpecError as exc:
            self.ctx.recorder.emit(job, WARNING, "ErrWorkloadCompose", str(exc))
            return
        if (want.queue_name, want.priority, want.pod_sets) == \
                (have.queue_name, have.priority, have.pod_sets):
            return
        body = workload_object_for_job(job, priority_classes=wpc, pod_priority_classes=pc)
        updated = copy.deepcopy(wl)
        updated["spec"] = {**(wl.get("spec") or {}), **body["spec"]}
        if "priorityClassRef" not in body["spec"]:
            updated["spec"].pop("priorityClassRef", None)
            updated["spec"].pop("priority", None)
        try:
            out = await self.ctx.client.replace(WORKLOADS, updated)
        except Permanent:
            await self.ctx.client.delete(WORKLOADS, wl["metadata"]["name"],
                                         wl["metadata"]["namespace"],
                                         uid=wl["metadata"].get("uid"))
            self.ctx.store(WL).remove(f"{wl['metadata']['namespace']}/{wl['metadata']['name']}")
            return
        self.ctx.store(WL).put(out)
        self.ctx.recorder.emit(job, NORMAL, "UpdatedWorkload",
                               f"Updated not matching Workload for suspended job: "
                               f"{wl['metadata']['namespace']}/{wl['metadata']['name']}")
        self.ctx.wake()

    # ----------------------------------------------------------------- Workload without Job

    async def reconcile_workload(self, ns: str, name: str) -> float | None:
        """A Workload with no controlling Job: an eviction releases its quota at once (it has
        no pods to wait for); its creator marks it Finished."""
        wl = self.ctx.store(WL).get(f"{ns}/{name}")
        if wl is None or owner_job(wl) is not None or is_finished(wl):
            return None
        if has_admission(wl) and (is_evicted(wl) or not is_active(wl)):
            await self._put_wl_status(with_released(wl, self.ctx.clock()))
            self.ctx.wake()
        return None

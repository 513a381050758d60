"""A job kind made of several pod templates in one object, each one podSet (Kueue's
``RunWithPodSetsInfo`` / ``RestorePodSetsInfo`` on a kind with many templates): the shared base
of the operators' kinds (Kubeflow's training jobs, MPIJob, RayJob, RayCluster).

A kind says where its templates are (``templates(obj)``: podSet name, count, the template's
path in the object, and the key its record is stored under), where its suspend lever is
(``suspend``: a path such as ``("spec", "runPolicy", "suspend")``), when it has finished and
how many of its pods are active. The base does the rest, the same way for each:

- Workload: ``<kind lower-cased>-<name>-<hash5>`` (Kueue ``GetWorkloadNameForOwnerWithGVK``),
  one podSet per template in the kind's order, each with its pod template as written.
- Priority: the ``kueue.x-k8s.io/priority-class`` label (a WorkloadPriorityClass), else the
  first template (in podSet order) with a ``priorityClassName`` (Kueue ``ExtractPriority`` over
  the kind's ``PriorityClass()``); a kind may name another source (``priority_class``).
- Start: each podSet's flavor nodeSelector and tolerations go into its own template, with the
  pod label ``kueue.x-k8s.io/podset``, and the lever is set to false, in one update; what the
  user wrote (each template's nodeSelector, tolerations and labels) is kept in the object's
  annotation ``ORIGINAL_ANNOTATION`` as JSON by template key (each value one template's
  start record, ``app.integrations.podsets``). Stop sets the lever to true and restores those
  fields in one update. A flavor contradicting a template's nodeSelector raises
  ``InjectionConflict``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.core.workload import Workload
from app.integrations.framework import (
    MANAGED_JOBS,
    KindDefaults,
    delete_own_pods,
    label_queue_name,
)
from app.integrations.podsets import (
    admitted_scheduling,
    apply_record,
    has_start_record,
    inject_template,
    read_record,
    record_text,
    template_record,
    write_start,
)
from app.integrations.unsupported import adopts_prebuilt
from app.kube.events import NORMAL
from app.wire.fields import Obj, WorkloadSpecError, mapping, string
from app.wire.names import ORIGINAL_ANNOTATION, PREBUILT_WORKLOAD_LABEL, QUEUE_NAME_LABEL
from app.wire.podtemplate import pod_set_from_template
from app.wire.workload import (
    check_dns_subdomain,
    creation_seconds,
    job_priority,
    workload_name_for_owner,
    workload_object_for_owner,
)

if TYPE_CHECKING:
    from app.kube.client import Resource
    from app.kube.context import Context

MAX_POD_SETS = 8  # Kueue v1beta2 Workload spec.podSets maxItems
Path = tuple[str | int, ...]


@dataclass(frozen=True)
class Template:
    """One podSet of an object: ``name`` (the podSet's), ``count`` (its pods), ``path`` (keys
    from the object's root to its PodTemplateSpec), ``key`` (its record's key in
    ``ORIGINAL_ANNOTATION``: the replica type or group name as the user wrote it)."""

    name: str
    count: int
    path: Path
    key: str

    @property
    def field(self) -> str:
        """The template's JSON path for messages (``spec.workerGroupSpecs[0].template``)."""
        out = ""
        for p in self.path:
            out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else p)
        return out


def get_in(obj: Any, path: Path) -> Any:
    """The value at ``path`` (keys and list indexes) in ``obj``; None when a level is absent."""
    for p in path:
        if isinstance(p, int):
            obj = obj[p] if isinstance(obj, list) and 0 <= p < len(obj) else None
        else:
            obj = obj.get(p) if isinstance(obj, Mapping) else None
        if obj is None:
            return None
    return obj


def set_in(obj: Obj, path: Path, value: Any) -> None:
    """Set ``path`` in ``obj`` to ``value``, creating missing objects (not list entries)."""
    for p in path[:-1]:
        obj = obj[p] if isinstance(p, int) else obj.setdefault(p, {})  # type: ignore[index]
    obj[path[-1]] = value  # type: ignore[index]


def stored_records(obj: Mapping[str, Any]) -> dict[str, str]:
    """Template key -> the stored record (JSON text) of its pod template, or {} when there is
    none or it cannot be read: the annotation sits on the tenant's object, so a garbled one is
    ignored (nothing to restore) rather than make every stop fail and keep the quota."""
    ann = ((obj.get("metadata") or {}).get("annotations") or {}).get(ORIGINAL_ANNOTATION)
    if not isinstance(ann, str) or not ann:
        return {}
    try:
        records = json.loads(ann)
    except (ValueError, RecursionError):
        return {}
    if not isinstance(records, dict):
        return {}
    return {k: v for k, v in records.items() if isinstance(k, str) and isinstance(v, str)}


def injected(obj: Mapping[str, Any], templates: list[Template], suspend: Path,
             scheduling: Mapping[str, tuple[Mapping[str, str], list[Obj]]], *,
             inject_node_selector: bool = True) -> Obj:
    """A copy of ``obj`` started: each template = the user's record + its podSet's flavor
    nodeSelector/tolerations (``scheduling``: podSet name -> both) + the podset label; the
    records in ``ORIGINAL_ANNOTATION``; the lever at ``suspend`` false. Idempotent. Raises
    ``InjectionConflict`` when a flavor's nodeSelector contradicts the user's."""
    out = copy.deepcopy(dict(obj))
    stored = stored_records(out)
    records: dict[str, str] = {}
    for t in templates:
        selector, tolerations = scheduling.get(t.name, ({}, []))
        template = copy.deepcopy(dict(get_in(out, t.path)))
        rec = template_record(template, stored.get(t.key))
        inject_template(template, rec, t.name, selector, tolerations,
                        inject_node_selector=inject_node_selector)
        set_in(out, t.path, template)
        records[t.key] = record_text(rec)
    meta = out.setdefault("metadata", {})
    meta["annotations"] = {**(meta.get("annotations") or {}),
                           ORIGINAL_ANNOTATION: json.dumps(records, sort_keys=True)}
    set_in(out, suspend, False)
    return out


def restored(obj: Mapping[str, Any], templates: list[Template], suspend: Path) -> Obj:
    """A copy of ``obj`` stopped: the lever at ``suspend`` true and, where recorded, each
    template's nodeSelector / tolerations / labels as the user wrote them; the record removed."""
    out = copy.deepcopy(dict(obj))
    set_in(out, suspend, True)
    stored = stored_records(out)
    if not stored and ORIGINAL_ANNOTATION not in ((out.get("metadata") or {})
                                                  .get("annotations") or {}):
        return out
    for t in templates:
        record = stored.get(t.key)
        if record is not None:
            template = copy.deepcopy(dict(get_in(out, t.path)))
            if (rec := read_record(record)) is not None:
                apply_record(template, rec)
            set_in(out, t.path, template)
    anns = dict(out["metadata"].get("annotations") or {})
    anns.pop(ORIGINAL_ANNOTATION, None)
    if anns:
        out["metadata"]["annotations"] = anns
    else:
        out["metadata"].pop("annotations", None)
    return out


class TemplatedKind(KindDefaults):
    """Base of a ``JobKind`` whose object holds one pod template per podSet (module doc).
    Subclasses set ``key``, ``resource``, ``api_group``, ``kind``, ``suspend`` and define
    ``templates``, ``finished`` and ``active_pods``. ``optional``: its CRD (an operator's) may
    be absent; the manager then leaves the kind out at start-up."""

    key: str
    resource: Resource
    api_group: str
    kind: str
    suspend: Path
    label_selector: str | None = MANAGED_JOBS
    optional = True

    queue_name = staticmethod(label_queue_name)
    is_started = staticmethod(has_start_record)

    # ---------------------------------------------------------------- the kind's own facts

    def templates(self, obj: Mapping[str, Any]) -> list[Template]:
        """The object's podSets in the kind's order, each template checked to be an object.
        Raises ``WorkloadSpecError`` naming the field."""
        raise NotImplementedError

    def finished(self, obj: Mapping[str, Any]) -> tuple[bool, str, str]:
        raise NotImplementedError

    def active_pods(self, obj: Mapping[str, Any]) -> int:
        raise NotImplementedError

    def template_of(self, obj: Mapping[str, Any], t: Template) -> Any:
        """The pod template of podSet ``t`` (a kind may supply a default where the object has
        none, e.g. RayJob's submitter)."""
        return get_in(obj, t.path)

    def _podset_child(self, obj: Mapping[str, Any], podset: str, name: str) -> dict[str, int]:
        """``{name: count of podSet podset}`` when ``obj`` has that podSet, else ``{}``."""
        meta = obj.get("metadata") or {}
        return {f"{meta.get('name', '')}{name}": t.count for t in self.templates(obj)
                if t.name == podset}

    def _podset_child_name(self, obj: Mapping[str, Any], job: Mapping[str, Any],
                           podset: str, name: str) -> str | None:
        """``podset`` when batch Job ``job`` is the one ``_podset_child`` names (``<obj's
        name><name>``) and ``obj`` has that podSet, else None."""
        meta = obj.get("metadata") or {}
        if (job.get("metadata") or {}).get("name") != f"{meta.get('name', '')}{name}":
            return None
        return podset if any(t.name == podset for t in self.templates(obj)) else None

    def _podset_child_template(self, obj: Mapping[str, Any], job: Mapping[str, Any],
                               podset: str, name: str) -> Any:
        """The pod template of podSet ``podset`` when batch Job ``job`` is the one
        ``_podset_child`` names (``<obj's name><name>``), else None."""
        meta = obj.get("metadata") or {}
        if (job.get("metadata") or {}).get("name") != f"{meta.get('name', '')}{name}":
            return None
        return next((self.template_of(obj, t) for t in self.templates(obj)
                     if t.name == podset), None)

    def priority_class(self, obj: Mapping[str, Any]) -> tuple[str, str]:
        """(PriorityClass name, its field) the kind reads before its templates', or ("", "")."""
        return "", ""

    # ---------------------------------------------------------------- the Workload

    def checked_templates(self, obj: Mapping[str, Any]) -> list[Template]:
        """``templates(obj)``, at least one and at most ``MAX_POD_SETS``, each an object."""
        ts = self.templates(obj)
        if not ts:
            raise WorkloadSpecError("spec", f"a {self.kind} with no pod template has no podSet")
        if len(ts) > MAX_POD_SETS:
            raise WorkloadSpecError("spec", f"{len(ts)} podSets: a Workload holds at most "
                                    f"{MAX_POD_SETS}")
        for t in ts:
            mapping(self.template_of(obj, t), t.field, required=True)
        return ts

    def spec_errors(self, obj: Mapping[str, Any]) -> list[str]:
        """Why the object cannot have a Workload (``[]``: it can), for the webhook to refuse it
        at create rather than leave it waiting without one."""
        try:
            self.checked_templates(obj)
        except WorkloadSpecError as exc:
            return [str(exc)]
        return []

    def is_suspended(self, obj: Mapping[str, Any]) -> bool:
        """True when the lever at ``suspend`` is true."""
        return get_in(obj, self.suspend) is True

    def workload_name(self, obj: Mapping[str, Any]) -> str:
        """``<kind>-<name>-<hash5>`` (Kueue ``GetWorkloadNameForOwnerWithGVK``), or the
        Workload its ``kueue.x-k8s.io/prebuilt-workload-name`` label names on a kind that
        adopts one (a MultiKueue worker's JobSet: adopted, never created)."""
        meta = obj.get("metadata") or {}
        prebuilt = (meta.get("labels") or {}).get(PREBUILT_WORKLOAD_LABEL)
        if prebuilt and adopts_prebuilt(obj):
            return str(prebuilt)
        return workload_name_for_owner(self.kind, self.api_group, str(meta.get("name", "")),
                                       str(meta.get("uid", "")))

    def _priority(self, obj: Mapping[str, Any], templates: list[Template],
                  priority_classes: Mapping[str, int] | None,
                  pod_priority_classes: Mapping[str, int] | None) -> tuple[int, dict | None]:
        """``job_priority`` on a Job-shaped view whose template carries the priority class the
        kind names, else the first template's that names one."""
        name, where = self.priority_class(obj)
        first = ({"spec": {"priorityClassName": name}} if name
                 else self.template_of(obj, templates[0]))
        for t in () if name else templates:
            tpl = self.template_of(obj, t)
            if string(mapping(tpl.get("spec"), f"{t.field}.spec").get("priorityClassName"),
                      f"{t.field}.spec.priorityClassName"):
                first, where = tpl, f"{t.field}.spec.priorityClassName"
                break
        view = {"metadata": obj.get("metadata") or {}, "spec": {"template": first}}
        try:
            return job_priority(view, priority_classes=priority_classes,
                                pod_priority_classes=pod_priority_classes)
        except WorkloadSpecError as exc:
            if where and exc.field.startswith("spec.template"):
                raise WorkloadSpecError(where, str(exc).split(": ", 1)[-1]) from None
            raise

    def desired(self, obj: Mapping[str, Any], *, priority_classes: Mapping[str, int] | None
                = None, pod_priority_classes: Mapping[str, int] | None = None) -> Workload:
        """The domain Workload the object needs (module doc). Raises ``WorkloadSpecError``."""
        return self._desired(obj, priority_classes, pod_priority_classes)[0]

    def _desired(self, obj: Mapping[str, Any], priority_classes: Mapping[str, int] | None,
                 pod_priority_classes: Mapping[str, int] | None
                 ) -> tuple[Workload, dict | None, list[Template]]:
        if not isinstance(obj, Mapping):
            raise WorkloadSpecError(f"<{self.kind}>", f"expected a {self.kind} object, got "
                                    f"{type(obj).__name__}")
        meta = mapping(obj.get("metadata"), "metadata", required=True)
        if not string(meta.get("name"), "metadata.name"):
            raise WorkloadSpecError("metadata.name", "required")
        where = f"metadata.labels[{QUEUE_NAME_LABEL}]"
        queue = string(mapping(meta.get("labels"), "metadata.labels").get(QUEUE_NAME_LABEL),
                       where)
        if queue:
            check_dns_subdomain(queue, where)
        ts = self.checked_templates(obj)
        pod_sets = tuple(pod_set_from_template(t.name, t.count, self.template_of(obj, t),
                                               field=t.field) for t in ts)
        priority, ref = self._priority(obj, ts, priority_classes, pod_priority_classes)
        wl = Workload(namespace=string(meta.get("namespace"), "metadata.namespace"),
                      name=self.workload_name(obj), queue_name=queue, pod_sets=pod_sets,
                      priority=priority, creation=creation_seconds(meta))
        return wl, ref, ts

    def workload_object(self, obj: Mapping[str, Any], *, priority_classes: Mapping[str, int]
                        | None = None, pod_priority_classes: Mapping[str, int] | None = None
                        ) -> Obj:
        """The Workload object (kueue.x-k8s.io/v1beta2) to create: one podSet per template
        with the template as written. Raises ``WorkloadSpecError``."""
        wl, ref, ts = self._desired(obj, priority_classes, pod_priority_classes)
        sets = [{"name": ps.name, "count": ps.count,
                 "template": copy.deepcopy(self.template_of(obj, t))}
                for ps, t in zip(wl.pod_sets, ts, strict=True)]
        return workload_object_for_owner(obj, wl, ref, sets, kind=self.kind,
                                         api_version=self.resource.api_version)

    # ---------------------------------------------------------------- the writes

    def injected(self, obj: Mapping[str, Any], scheduling: Mapping[str, tuple[Mapping[str, str],
                 list[Obj]]], *, inject_node_selector: bool = True) -> Obj:
        """``obj`` started with ``scheduling`` (podSet name -> nodeSelector, tolerations)."""
        return injected(obj, self.checked_templates(obj), self.suspend, scheduling,
                        inject_node_selector=inject_node_selector)

    def layout(self, obj: Mapping[str, Any]) -> list[Template]:
        """Where the object's templates are, for a stop: ``templates(obj)`` unless a kind
        can locate them without its refusals (``RayCluster``: in-tree autoscaling turned on
        after the start). Raises ``WorkloadSpecError``."""
        return self.templates(obj)

    def restored(self, obj: Mapping[str, Any]) -> Obj:
        """``obj`` suspended with its templates as the user wrote them. An object whose
        templates can no longer be located (changed after its start into a shape pykueue
        cannot read) is suspended all the same, its record kept for a later stop: a stop
        that raised would leave it running on an admission it no longer matches."""
        try:
            layout = self.layout(obj)
        except WorkloadSpecError:
            out = copy.deepcopy(dict(obj))
            set_in(out, self.suspend, True)
            return out
        return restored(obj, layout, self.suspend)

    async def _put(self, ctx: Context, obj: Obj) -> Obj:
        """Replace ``obj``; the kind's store takes the result unless its informer runs and
        does not hold the object (one outside the informer's selector, such as the unlabelled
        JobSet of a TrainJob, would stay there stale: no event ever updates it)."""
        out = await ctx.client.replace(self.resource, obj)
        meta = out.get("metadata") or {}
        informers = getattr(getattr(ctx, "informers", None), "informers", None)
        if isinstance(informers, Mapping) and self.key in informers and ctx.store(
                self.key).get(f"{meta.get('namespace', '')}/{meta.get('name', '')}") is None:
            return out
        ctx.store(self.key).put(out)
        return out

    async def start(self, ctx: Context, obj: Obj, workload: Mapping[str, Any]) -> bool:
        """Unsuspend with each podSet's flavors in its template (idempotent). Raises
        ``InjectionConflict`` (a ``StartError``)."""
        desired = self.injected(obj, admitted_scheduling(ctx, workload),
                                inject_node_selector=ctx.settings.scheduling.inject_node_selector)
        if desired == obj:
            return False
        await write_start(ctx, obj, desired, workload, self._put)
        return True

    async def stop(self, ctx: Context, obj: Obj, why: str) -> Obj:
        """Suspend and restore the templates in one update (module doc). An object being
        deleted, of a kind whose operator ignores it (``ignored_once_deleted``: the
        suspension kills no pod), also has the running pods it controls deleted
        (``delete_own_pods``)."""
        out = self.restored(obj)
        written = obj if out == obj else await self._put(ctx, out)
        if written is not obj and not self.is_suspended(obj):
            ctx.recorder.emit(written, NORMAL, "Stopped", why)
        if self.ignored_once_deleted and (written.get("metadata") or {}).get("deletionTimestamp"):
            await delete_own_pods(ctx, self, written, why)
        return written

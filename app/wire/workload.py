"""The Workload object (kueue.x-k8s.io/v1beta2) both ways: read into the domain
(``workload_from_object``) and built for a job's pod template (``workload_object_for_job``),
with Kueue's naming (``workload_name_for_owner``) and priority rules (``job_priority``).

Rules: Kueue v1beta2 job integration (``pkg/controller/jobs/job``, ``jobframework``), reference
4.3. Inputs are the plain JSON dicts the API server returns. Raises ``WorkloadSpecError``
naming the bad field.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from app.core.types import ClusterQueueName, FlavorName, ResourceName, WorkloadKey
from app.core.workload import Admission, PodSet, PodSetAssignment, Workload
from app.wire.fields import (
    WorkloadSpecError,
    go_bool,
    integer,
    mapping,
    resource_list,
    sequence,
    string,
)
from app.wire.names import (
    COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION,
    JOB_CONTROLLER_LABELS,
    JOB_UID_LABEL,
    KUEUE_GROUP,
    MAIN_POD_SET,
    MAX_EXEC_TIME_LABEL,
    MIN_PARALLELISM_ANNOTATION,
    PRIORITY_CLASS_LABEL,
    QUEUE_NAME_LABEL,
    WORKLOAD_API_VERSION,
)
from app.wire.podtemplate import pod_set_from_template
from app.wire.workload_status import EVICTED, QUOTA_RESERVED, condition, parse_time

# PriorityClasses every cluster has (scheduling.k8s.io, built in to kube-apiserver).
SYSTEM_PRIORITY_CLASSES: Mapping[str, int] = {
    "system-cluster-critical": 2_000_000_000,
    "system-node-critical": 2_000_001_000,
}


_WORKLOAD_NAME_MAX = 253


_HASH_LEN = 5


_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def job_pod_count(job: Mapping[str, Any]) -> int:
    """Pods a Job runs at once: ``min(parallelism, completions)``, parallelism defaulting to 1
    (batch/v1 defaulting; Kueue ``podsCount``). Raises ``WorkloadSpecError`` naming
    ``spec.parallelism`` / ``spec.completions`` when negative or not an integer.
    """
    spec = mapping(job.get("spec"), "spec", required=True)
    count = integer(spec.get("parallelism"), "spec.parallelism", default=1, minimum=0)
    completions = spec.get("completions")
    if completions is not None:
        count = min(count, integer(completions, "spec.completions", default=0, minimum=0))
    return count


def workload_name_for_owner(kind: str, group: str, name: str, uid: str = "") -> str:
    """Deterministic Workload name for an object of ``kind`` in API ``group`` (``""`` for the
    core group), as Kueue names it (``jobframework.GetWorkloadNameForOwnerWithGVK``):
    ``<lower(kind)>-<name>-<hash5>`` where the prefix is truncated so the whole name is at most
    253 characters and ``hash5`` is the first 5 hex digits of SHA-1 over
    ``"<kind>\\n<group>\\n<name>\\n<uid>"``.
    """
    digest = hashlib.sha1(f"{kind}\n{group}\n{name}\n{uid}".encode()).hexdigest()
    prefix = f"{kind.lower()}-{name}"[: _WORKLOAD_NAME_MAX - 1 - _HASH_LEN]
    return f"{prefix}-{digest[:_HASH_LEN]}"


def workload_name_for_job(job_name: str, job_uid: str = "") -> str:
    """The Workload name of batch/v1 Job ``job_name`` (``workload_name_for_owner``):
    ``job-<jobname>-<hash5>``."""
    return workload_name_for_owner("Job", "batch", job_name, job_uid)


def check_dns_subdomain(value: str, field: str) -> None:
    if len(value) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(value):
        raise WorkloadSpecError(
            field, f"{value!r} is not a DNS-1123 subdomain (lower case, digits, '-', '.')"
        )


def job_priority(
    job: Mapping[str, Any],
    *,
    priority_classes: Mapping[str, int] | None = None,
    pod_priority_classes: Mapping[str, int] | None = None,
) -> tuple[int, dict[str, str] | None]:
    """Priority of a Job's Workload and its ``priorityClassRef`` (Kueue ``ExtractPriority``).

    The ``kueue.x-k8s.io/priority-class`` label names a WorkloadPriorityClass (value from
    ``priority_classes``); else the pod template's ``priorityClassName`` names a PriorityClass
    (``pod_priority_classes``, plus the built-in ``system-*`` classes); else ``(0, None)``.
    Raises ``WorkloadSpecError`` naming the label or field when the class is unknown.
    """
    labels = mapping(mapping(job.get("metadata"), "metadata").get("labels"), "metadata.labels")
    wpc = string(labels.get(PRIORITY_CLASS_LABEL), f"metadata.labels[{PRIORITY_CLASS_LABEL}]")
    if wpc:
        if priority_classes is None or wpc not in priority_classes:
            raise WorkloadSpecError(
                f"metadata.labels[{PRIORITY_CLASS_LABEL}]",
                f"WorkloadPriorityClass {wpc!r} not found",
            )
        ref = {"group": KUEUE_GROUP, "kind": "WorkloadPriorityClass", "name": wpc}
        return int(priority_classes[wpc]), ref
    where = "spec.template.spec.priorityClassName"
    spec = mapping(mapping(job.get("spec"), "spec").get("template"), "spec.template")
    pcn = string(mapping(spec.get("spec"), "spec.template.spec").get("priorityClassName"), where)
    if pcn:
        known = {**SYSTEM_PRIORITY_CLASSES, **(pod_priority_classes or {})}
        if pcn not in known:
            raise WorkloadSpecError(where, f"PriorityClass {pcn!r} not found")
        return int(known[pcn]), {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": pcn}
    return 0, None


def creation_seconds(metadata: Mapping[str, Any]) -> float:
    stamp = string(metadata.get("creationTimestamp"), "metadata.creationTimestamp")
    if not stamp:
        return 0.0
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError as exc:
        raise WorkloadSpecError("metadata.creationTimestamp", f"not RFC 3339: {stamp!r}") from exc


def _job_basics(job: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any], str]:
    """(metadata, pod template, queue name) of a Job, validated."""
    if not isinstance(job, Mapping):
        raise WorkloadSpecError("<job>", f"expected a Job object, got {type(job).__name__}")
    metadata = mapping(job.get("metadata"), "metadata", required=True)
    if not string(metadata.get("name"), "metadata.name"):
        raise WorkloadSpecError("metadata.name", "required")
    spec = mapping(job.get("spec"), "spec", required=True)
    template = mapping(spec.get("template"), "spec.template", required=True)
    labels = mapping(metadata.get("labels"), "metadata.labels")
    queue = string(labels.get(QUEUE_NAME_LABEL), f"metadata.labels[{QUEUE_NAME_LABEL}]")
    if queue:
        check_dns_subdomain(queue, f"metadata.labels[{QUEUE_NAME_LABEL}]")
    return metadata, template, queue


def job_min_count(job: Mapping[str, Any], count: int, *, strict: bool = False) -> int | None:
    """The podSet ``minCount`` of a Job (Kueue partial admission): its annotation
    ``kueue.x-k8s.io/job-min-parallelism``; None when absent. Raises ``WorkloadSpecError``
    naming the annotation when it is not an integer > 0, or (``strict``, Kueue's create-time
    rule) not below the pod ``count``; without ``strict`` a minimum >= ``count`` is None
    (all pods or none: the Job was resized after creation, as Kueue allows)."""
    meta = mapping(job.get("metadata"), "metadata")
    anns = mapping(meta.get("annotations"), "metadata.annotations")
    raw = anns.get(MIN_PARALLELISM_ANNOTATION)
    if raw is None:
        return None
    where = f"metadata.annotations[{MIN_PARALLELISM_ANNOTATION}]"
    if not isinstance(raw, str) or not raw.isascii() or not raw.isdigit() or int(raw) < 1 \
            or (strict and int(raw) >= count):
        raise WorkloadSpecError(where, f"must be an integer greater than 0 and less than the "
                                f"Job's pod count {count}, got {raw!r}")
    return int(raw) if int(raw) < count else None


def workload_from_job(
    job: Mapping[str, Any],
    *,
    priority_classes: Mapping[str, int] | None = None,
    pod_priority_classes: Mapping[str, int] | None = None,
) -> Workload:
    """The domain Workload a batch/v1 Job needs (Kueue job integration, reference 4.3).

    ``job``: the Job's JSON (``metadata``, ``spec``). One podSet ``main`` with
    ``count = job_pod_count(job)`` and per-pod requests from ``pod_requests``; queue name from
    the ``kueue.x-k8s.io/queue-name`` label ("" when absent); priority from ``job_priority``
    (``priority_classes``: WorkloadPriorityClass name -> value; ``pod_priority_classes``:
    PriorityClass name -> value). Name from ``workload_name_for_job``; ``creation`` is the Job's
    creationTimestamp; ``uid`` is empty (the Workload object does not exist yet).
    Raises ``WorkloadSpecError`` naming the bad field.
    """
    metadata, template, queue = _job_basics(job)
    priority, _ = job_priority(
        job, priority_classes=priority_classes, pod_priority_classes=pod_priority_classes
    )
    count = job_pod_count(job)
    pod_set = pod_set_from_template(MAIN_POD_SET, count, template, field="spec.template")
    min_count = job_min_count(job, count)
    if min_count is not None:
        pod_set = replace(pod_set, min_count=min_count)
    return Workload(
        namespace=string(metadata.get("namespace"), "metadata.namespace"),
        name=workload_name_for_job(metadata["name"], string(metadata.get("uid"), "metadata.uid")),
        queue_name=queue,
        pod_sets=(pod_set,),
        priority=priority,
        creation=creation_seconds(metadata),
    )


def workload_object_for_job(
    job: Mapping[str, Any],
    *,
    priority_classes: Mapping[str, int] | None = None,
    pod_priority_classes: Mapping[str, int] | None = None,
    finalizers: Sequence[str] = (),
) -> dict[str, Any]:
    """The Workload object JSON (kueue.x-k8s.io/v1beta2) to create for a batch/v1 Job.

    ``metadata``: the deterministic name, the Job's namespace, label
    ``kueue.x-k8s.io/job-uid`` (when the Job has a uid), a controller ownerReference to the
    Job, and ``finalizers`` if given (Kueue uses ``RESOURCE_IN_USE_FINALIZER``). ``spec``:
    ``queueName``, ``podSets: [{name: main, count, template}]`` (the Job's pod template minus
    the Job controller's labels), ``priority`` and ``priorityClassRef`` when a class applies,
    ``maximumExecutionTimeSeconds`` from the ``kueue.x-k8s.io/max-exec-time-seconds`` label.
    Validates exactly as ``workload_from_job`` (same errors).
    """
    wl = workload_from_job(
        job, priority_classes=priority_classes, pod_priority_classes=pod_priority_classes
    )
    _, ref = job_priority(
        job, priority_classes=priority_classes, pod_priority_classes=pod_priority_classes
    )
    template = copy.deepcopy(dict(job["spec"]["template"]))
    tmeta = dict(mapping(template.get("metadata"), "spec.template.metadata"))
    if "labels" in tmeta:
        pod_labels = mapping(tmeta["labels"], "spec.template.metadata.labels")
        labels = {k: v for k, v in pod_labels.items() if k not in JOB_CONTROLLER_LABELS}
        if labels:
            tmeta["labels"] = labels
        else:
            del tmeta["labels"]
    tmeta.pop("creationTimestamp", None)
    if tmeta:
        template["metadata"] = tmeta
    else:
        template.pop("metadata", None)
    pod_set: dict[str, Any] = {"name": MAIN_POD_SET, "count": wl.pod_sets[0].count,
                                "template": template}
    if wl.pod_sets[0].min_count is not None:
        pod_set["minCount"] = wl.pod_sets[0].min_count
    return workload_object_for_owner(job, wl, ref, [pod_set], kind="Job",
                                     api_version="batch/v1", finalizers=finalizers)


def workload_object_for_owner(
    owner: Mapping[str, Any],
    wl: Workload,
    ref: Mapping[str, str] | None,
    pod_sets: Sequence[Mapping[str, Any]],
    *,
    kind: str,
    api_version: str,
    finalizers: Sequence[str] = (),
) -> dict[str, Any]:
    """The Workload object JSON (kueue.x-k8s.io/v1beta2) of ``owner``, an object of ``kind``
    (``api_version`` when the object does not say): name and namespace from ``wl``, label
    ``kueue.x-k8s.io/job-uid`` and a controller ownerReference when the owner has a uid,
    ``finalizers``; ``spec``: ``queueName`` (omitted when empty, as Kueue), ``podSets`` as
    given (``[{name, count, template[, minCount]}]``), ``priority`` and ``priorityClassRef``
    when ``ref`` is set, ``maximumExecutionTimeSeconds`` from the owner's
    ``kueue.x-k8s.io/max-exec-time-seconds`` label. Raises ``WorkloadSpecError`` naming that
    label when it is not a positive integer.
    """
    metadata = owner["metadata"]
    spec: dict[str, Any] = {"podSets": [dict(p) for p in pod_sets]}
    if wl.queue_name:  # omitted when empty (manageJobsWithoutQueueName)
        spec = {"queueName": wl.queue_name, **spec}
    if ref is not None:
        spec["priorityClassRef"] = dict(ref)
        spec["priority"] = wl.priority
    labels = mapping(metadata.get("labels"), "metadata.labels")
    max_exec = labels.get(MAX_EXEC_TIME_LABEL)
    if max_exec is not None:
        where = f"metadata.labels[{MAX_EXEC_TIME_LABEL}]"
        if (
            not isinstance(max_exec, str)
            or not max_exec.isascii()
            or not max_exec.isdigit()
            or int(max_exec) < 1
        ):
            raise WorkloadSpecError(where, f"must be a positive integer, got {max_exec!r}")
        spec["maximumExecutionTimeSeconds"] = int(max_exec)
    wl_meta: dict[str, Any] = {"name": wl.name, "namespace": wl.namespace}
    uid = metadata.get("uid")
    if uid:
        wl_meta["labels"] = {JOB_UID_LABEL: uid}
        wl_meta["ownerReferences"] = [
            {
                "apiVersion": owner.get("apiVersion", api_version),
                "kind": kind,
                "name": metadata["name"],
                "uid": uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    if finalizers:
        wl_meta["finalizers"] = list(finalizers)
    return {
        "apiVersion": WORKLOAD_API_VERSION,
        "kind": "Workload",
        "metadata": wl_meta,
        "spec": spec,
    }


def _admission(value: Any, pod_sets: Sequence[PodSet]) -> Admission | None:
    if value is None:
        return None
    adm = mapping(value, "status.admission")
    cq = string(adm.get("clusterQueue"), "status.admission.clusterQueue")
    if not cq:
        raise WorkloadSpecError("status.admission.clusterQueue", "required")
    counts = {ps.name: ps.count for ps in pod_sets}
    assignments = []
    for i, psa in enumerate(
        sequence(adm.get("podSetAssignments"), "status.admission.podSetAssignments")
    ):
        where = f"status.admission.podSetAssignments[{i}]"
        psa = mapping(psa, where, required=True)
        name = string(psa.get("name"), f"{where}.name", default=MAIN_POD_SET)
        flavors = {
            ResourceName(r): FlavorName(string(f, f"{where}.flavors[{r}]"))
            for r, f in mapping(psa.get("flavors"), f"{where}.flavors").items()
        }
        assignments.append(
            PodSetAssignment(
                name=name,
                flavors=flavors,
                resource_usage=resource_list(psa.get("resourceUsage"), f"{where}.resourceUsage"),
                count=integer(
                    psa.get("count"), f"{where}.count", default=counts.get(name, 0), minimum=0
                ),
            )
        )
    return Admission(cluster_queue=ClusterQueueName(cq), pod_set_assignments=tuple(assignments))


def workload_from_object(obj: Mapping[str, Any]) -> Workload:
    """The domain Workload of a kueue.x-k8s.io/v1beta2 Workload object's JSON.

    Reads ``metadata`` (name, namespace, uid, creationTimestamp), ``spec.queueName``,
    ``spec.priority`` (default 0), ``spec.podSets[]`` (``name`` default ``main``, ``count``
    default 1, per-pod requests from ``template`` as in ``pod_requests``) and
    ``status.admission`` when present (``resourceUsage`` parsed to exact amounts; ``count``
    defaulting to the podSet's) and ``spec.maximumExecutionTimeSeconds`` (an integer >= 1,
    else None). Raises ``WorkloadSpecError`` naming the bad field.
    """
    if not isinstance(obj, Mapping):
        raise WorkloadSpecError(
            "<workload>", f"expected a Workload object, got {type(obj).__name__}"
        )
    metadata = mapping(obj.get("metadata"), "metadata", required=True)
    name = string(metadata.get("name"), "metadata.name")
    if not name:
        raise WorkloadSpecError("metadata.name", "required")
    spec = mapping(obj.get("spec"), "spec", required=True)
    raw_sets = sequence(spec.get("podSets"), "spec.podSets")
    if not raw_sets:
        raise WorkloadSpecError("spec.podSets", "at least one podSet is required")
    pod_sets = []
    for i, ps in enumerate(raw_sets):
        where = f"spec.podSets[{i}]"
        ps = mapping(ps, where, required=True)
        built = pod_set_from_template(
            string(ps.get("name"), f"{where}.name", default=MAIN_POD_SET),
            integer(ps.get("count"), f"{where}.count", default=1, minimum=0),
            ps.get("template"),
            field=f"{where}.template",
        )
        if ps.get("minCount") is not None:
            built = replace(built, min_count=integer(ps.get("minCount"), f"{where}.minCount",
                                                     default=1, minimum=1))
        pod_sets.append(built)
    status = mapping(obj.get("status"), "status")
    return Workload(
        namespace=string(metadata.get("namespace"), "metadata.namespace"),
        name=name,
        queue_name=string(spec.get("queueName"), "spec.queueName"),
        pod_sets=tuple(pod_sets),
        priority=integer(spec.get("priority"), "spec.priority", default=0),
        creation=creation_seconds(metadata),
        uid=string(metadata.get("uid"), "metadata.uid"),
        admission=_admission(status.get("admission"), pod_sets),
        max_execution_seconds=_max_execution(spec.get("maximumExecutionTimeSeconds")),
    )


def workload_key(obj: Mapping[str, Any]) -> WorkloadKey:
    """The ``namespace/name`` key of a Workload object. Raises ``KeyError`` without
    ``metadata.namespace`` / ``metadata.name``."""
    meta = obj["metadata"]
    return WorkloadKey(f"{meta['namespace']}/{meta['name']}")


def domain_workload(obj: Mapping[str, Any]) -> Workload:
    """Workload object -> domain ``Workload`` including ``evicted_at`` (Evicted=True
    lastTransitionTime) and ``quota_reserved_at`` (QuotaReserved=True lastTransitionTime),
    seconds since the epoch. Raises ``WorkloadSpecError`` naming a bad field."""
    wl = workload_from_object(obj)
    ev = condition(obj, EVICTED)
    qr = condition(obj, QUOTA_RESERVED)
    evicted_at = parse_time(ev.get("lastTransitionTime")) \
        if ev and ev.get("status") == "True" else None
    reserved_at = parse_time(qr.get("lastTransitionTime")) \
        if qr and qr.get("status") == "True" else None
    return replace(wl, evicted_at=evicted_at, quota_reserved_at=reserved_at)


def _max_execution(value: Any) -> float | None:
    # Kueue requires minimum 1; a wrong value is ignored (the ETA only loses a bound) rather
    # than making the whole Workload unreadable.
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return None
    return float(value)


def completions_follow_parallelism(job: Mapping[str, Any]) -> bool:
    """Whether the Job asks that a partial admission set ``spec.completions`` with
    ``spec.parallelism`` (Kueue ``kueue.x-k8s.io/job-completions-equal-parallelism: "true"``,
    read as Go's ParseBool; an unreadable value, which the webhook refuses, counts as no)."""
    raw = ((job.get("metadata") or {}).get("annotations") or {}).get(
        COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION)
    try:
        return raw is not None and go_bool(raw, "")
    except WorkloadSpecError:
        return False

"""Domain Workload: what the admission core needs to know about a unit of admission.

Shapes (all amounts are integers, see ``app.core.quantity``: milli-CPU, bytes, counts):

- ``PodSet``: ``name``, ``count`` (pods), ``requests`` per pod ``{resource: amount}``, and the
  pod's scheduling constraints that flavor assignment reads (``node_selector``, required
  node-affinity terms, ``tolerations``).
- ``Workload``: key ``namespace/name``, the LocalQueue name, priority, creation time (seconds
  since the epoch, float), uid, podSets, and its admission if it has one.

Rules from Kueue v1beta2 Workload (``spec.podSets[].count``, ``spec.priority``,
``spec.queueName``) and the Kubernetes pod resource model.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from app.core.quantity import QuantityError, parse_quantity
from app.core.types import ClusterQueueName, FlavorName, ResourceName, WorkloadKey


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod toleration (core/v1 Toleration). ``operator`` is ``Equal`` or ``Exists``."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""  # "" matches every effect

    def tolerates(self, taint: Taint) -> bool:
        """True when this toleration tolerates ``taint`` (core/v1 ToleratesTaint rules)."""
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            # An empty key with Exists matches every taint.
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.value == taint.value


@dataclass(frozen=True, slots=True)
class Taint:
    """A node or flavor taint (core/v1 Taint).

    ``effect``: NoSchedule, PreferNoSchedule or NoExecute.
    """

    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True, slots=True)
class NodeSelectorRequirement:
    """One ``matchExpressions`` entry of a required node-affinity term."""

    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist, Gt, Lt
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PodSet:
    """A group of identical pods of a Workload (Kueue ``spec.podSets[]``).

    ``requests``: per-pod effective requests ``{resource: amount}`` (milli-CPU, bytes, counts),
    already combining containers, init containers, sidecars and pod overhead.
    ``affinity_terms``: required node-affinity terms, ORed; each term's requirements ANDed.
    """

    name: str
    count: int
    requests: Mapping[ResourceName, int]
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity_terms: tuple[tuple[NodeSelectorRequirement, ...], ...] = ()
    tolerations: tuple[Toleration, ...] = ()

    def total(self) -> dict[ResourceName, int]:
        """Requests of all ``count`` pods: ``{resource: amount * count}``."""
        return {r: v * self.count for r, v in self.requests.items()}


@dataclass(frozen=True, slots=True)
class PodSetAssignment:
    """Admission of one podSet: the flavor per resource and the usage reserved (all pods)."""

    name: str
    flavors: Mapping[ResourceName, FlavorName]
    resource_usage: Mapping[ResourceName, int]
    count: int


@dataclass(frozen=True, slots=True)
class Admission:
    """Kueue ``status.admission``: the ClusterQueue and one assignment per podSet."""

    cluster_queue: ClusterQueueName
    pod_set_assignments: tuple[PodSetAssignment, ...]


@dataclass(frozen=True, slots=True)
class Workload:
    """A Workload as the core sees it.

    ``creation``: seconds since the epoch (float) of ``metadata.creationTimestamp``; queue
    order is (priority desc, creation asc, uid asc) as Kueue v1beta2 orders a ClusterQueue.
    """

    namespace: str
    name: str
    queue_name: str
    pod_sets: tuple[PodSet, ...]
    priority: int = 0
    creation: float = 0.0
    uid: str = ""
    admission: Admission | None = None
    # Seconds since the epoch of the Evicted=True condition, None when not evicted. With an
    # admission the Workload is being evicted (it still holds its quota); without one it is
    # pending again and this time is its queue-order timestamp (so a preempted Workload does not
    # jump ahead of its preemptor: acceptance KQ-18).
    evicted_at: float | None = None
    # Seconds since the epoch of QuotaReserved=True (None: unknown, ``creation`` is used).
    # Preemption prefers the most recently admitted victims (Kueue CandidatesOrdering).
    quota_reserved_at: float | None = None
    # ``spec.maximumExecutionTimeSeconds``: the run is stopped after this many seconds of
    # admission (None: no limit). The core's decisions never read it; the ETA does.
    max_execution_seconds: float | None = None
    # ``namespace/name``, computed once (the scheduler reads it millions of times per run).
    _key: WorkloadKey = field(default=WorkloadKey(""), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_key", WorkloadKey(f"{self.namespace}/{self.name}"))

    @property
    def key(self) -> WorkloadKey:
        """``namespace/name``."""
        return self._key

    @property
    def queue_order_time(self) -> float:
        """Timestamp that orders this Workload in its queue: eviction time if it was evicted
        and is pending again, else ``creation`` (Kueue ``GetQueueOrderTimestamp``)."""
        if self.admission is None and self.evicted_at is not None:
            return self.evicted_at
        return self.creation


# --------------------------------------------------------------------------------------------
# batch/v1 Job -> Workload, and Workload object JSON -> domain Workload.
# Rules: Kueue v1beta2 job integration (pkg/controller/jobs/job, jobframework) and the
# Kubernetes pod resource model (k8s.io/component-helpers resource.PodRequests).
# Inputs are the plain JSON dicts the API server returns; nothing here imports pydantic.
# --------------------------------------------------------------------------------------------

KUEUE_GROUP = "kueue.x-k8s.io"
WORKLOAD_API_VERSION = "kueue.x-k8s.io/v1beta2"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
MAX_EXEC_TIME_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
RESOURCE_IN_USE_FINALIZER = "kueue.x-k8s.io/resource-in-use"
MAIN_POD_SET = "main"
# Labels the Job controller puts on the pod template; they differ per Job object, so Kueue
# drops them from the Workload's copy of the template (reference 4.3).
JOB_CONTROLLER_LABELS = frozenset(
    {"controller-uid", "batch.kubernetes.io/controller-uid", "job-name"}
)
# PriorityClasses every cluster has (scheduling.k8s.io, built in to kube-apiserver).
SYSTEM_PRIORITY_CLASSES: Mapping[str, int] = {
    "system-cluster-critical": 2_000_000_000,
    "system-node-critical": 2_000_001_000,
}
_WORKLOAD_NAME_MAX = 253
_HASH_LEN = 5
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_TOLERATION_OPERATORS = frozenset({"Equal", "Exists"})
_TAINT_EFFECTS = frozenset({"", "NoSchedule", "PreferNoSchedule", "NoExecute"})
_AFFINITY_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
_POD_LEVEL_RESOURCES = frozenset({"cpu", "memory"})  # plus hugepages-*


class WorkloadSpecError(ValueError):
    """A Job or Workload object cannot be turned into a domain Workload.

    ``field`` is the JSON path of the offending field (e.g.
    ``spec.template.spec.containers[0].resources.requests[cpu]``); the message starts with it.
    """

    def __init__(self, field: str, why: str) -> None:
        self.field = field
        super().__init__(f"{field}: {why}")


def _mapping(value: Any, field: str, *, required: bool = False) -> Mapping[str, Any]:
    if value is None:
        if required:
            raise WorkloadSpecError(field, "required")
        return {}
    if not isinstance(value, Mapping):
        raise WorkloadSpecError(field, f"expected an object, got {type(value).__name__}")
    return value


def _sequence(value: Any, field: str) -> Sequence[Any]:
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise WorkloadSpecError(field, f"expected a list, got {type(value).__name__}")
    return value


def _string(value: Any, field: str, *, default: str = "") -> str:
    if value is None:
        return default
    if not isinstance(value, str):
        raise WorkloadSpecError(field, f"expected a string, got {value!r}")
    return value


def _int(value: Any, field: str, *, default: int, minimum: int | None = None) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise WorkloadSpecError(field, f"expected an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise WorkloadSpecError(field, f"must be >= {minimum}, got {value}")
    return value


def _resource_list(value: Any, field: str) -> dict[ResourceName, int]:
    """Parse a core/v1 ResourceList ``{name: quantity}`` into exact integer amounts."""
    out: dict[ResourceName, int] = {}
    for name, qty in _mapping(value, field).items():
        where = f"{field}[{name}]"
        try:
            out[ResourceName(name)] = parse_quantity(qty, name, field=where)
        except QuantityError as exc:
            raise WorkloadSpecError(where, f"invalid quantity {qty!r}: {exc.why}") from exc
    return out


def _add(into: dict[ResourceName, int], other: Mapping[ResourceName, int]) -> None:
    for name, amount in other.items():
        into[name] = into.get(name, 0) + amount


def _max(into: dict[ResourceName, int], other: Mapping[ResourceName, int]) -> None:
    for name, amount in other.items():
        if amount > into.get(name, 0):
            into[name] = amount


def container_requests(container: Mapping[str, Any], *, field: str) -> dict[ResourceName, int]:
    """Effective requests of one container: ``resources.requests``, each missing request
    defaulting to its ``resources.limits`` entry (core/v1 API defaulting).

    Returns ``{resource: amount}`` (milli-CPU, bytes, counts). Raises ``WorkloadSpecError``
    naming ``<field>.resources.requests[<name>]`` (or ``limits``) for a bad quantity.
    """
    resources = _mapping(container.get("resources"), f"{field}.resources")
    requests = _resource_list(resources.get("requests"), f"{field}.resources.requests")
    limits = _resource_list(resources.get("limits"), f"{field}.resources.limits")
    for name, amount in limits.items():
        requests.setdefault(name, amount)
    return requests


def pod_requests(pod_spec: Mapping[str, Any], *, field: str = "spec") -> dict[ResourceName, int]:
    """Per-pod effective requests, as Kubernetes computes them (``resource.PodRequests``).

    ``sum(containers) + sum(sidecars)`` versus, for each init container ``i``,
    ``InitUse(i) = request(i) + sum(sidecars declared before i)`` — the larger per resource —
    then pod-level ``resources.requests`` (cpu, memory, hugepages-*) replace the container
    total for those resources, then ``overhead`` is added. A sidecar is an init container whose
    own ``restartPolicy`` is ``Always`` (KQ-04). Resources whose effective request is 0 are
    left out: a request of 0 is no request (KQ-01).

    Returns ``{resource: amount}`` (milli-CPU, bytes, counts). Raises ``WorkloadSpecError``
    naming the field (``<field>.containers[0].resources.requests[cpu]``).
    """
    containers = _sequence(pod_spec.get("containers"), f"{field}.containers")
    if not containers:
        raise WorkloadSpecError(f"{field}.containers", "at least one container is required")
    total: dict[ResourceName, int] = {}
    for i, c in enumerate(containers):
        where = f"{field}.containers[{i}]"
        _add(total, container_requests(_mapping(c, where, required=True), field=where))
    sidecars: dict[ResourceName, int] = {}
    init_peak: dict[ResourceName, int] = {}
    for i, c in enumerate(_sequence(pod_spec.get("initContainers"), f"{field}.initContainers")):
        where = f"{field}.initContainers[{i}]"
        c = _mapping(c, where, required=True)
        reqs = container_requests(c, field=where)
        policy = _string(c.get("restartPolicy"), f"{where}.restartPolicy")
        if policy == "Always":
            _add(total, reqs)
            _add(sidecars, reqs)
            _max(init_peak, sidecars)
        elif policy == "":
            use = dict(reqs)
            _add(use, sidecars)
            _max(init_peak, use)
        else:
            raise WorkloadSpecError(
                f"{where}.restartPolicy",
                f"only 'Always' is allowed on an init container, got {policy!r}",
            )
    _max(total, init_peak)
    pod_resources = _mapping(pod_spec.get("resources"), f"{field}.resources")
    pod_reqs = _resource_list(pod_resources.get("requests"), f"{field}.resources.requests")
    for name, amount in _resource_list(
        pod_resources.get("limits"), f"{field}.resources.limits"
    ).items():
        pod_reqs.setdefault(name, amount)
    for name, amount in pod_reqs.items():
        if name in _POD_LEVEL_RESOURCES or name.startswith("hugepages-"):
            total[name] = amount
    _add(total, _resource_list(pod_spec.get("overhead"), f"{field}.overhead"))
    return {name: amount for name, amount in total.items() if amount > 0}


def _tolerations(value: Any, field: str) -> tuple[Toleration, ...]:
    out = []
    for i, t in enumerate(_sequence(value, field)):
        where = f"{field}[{i}]"
        t = _mapping(t, where, required=True)
        operator = _string(t.get("operator"), f"{where}.operator", default="Equal")
        if operator not in _TOLERATION_OPERATORS:
            raise WorkloadSpecError(
                f"{where}.operator", f"must be Equal or Exists, got {operator!r}"
            )
        effect = _string(t.get("effect"), f"{where}.effect")
        if effect not in _TAINT_EFFECTS:
            raise WorkloadSpecError(
                f"{where}.effect",
                f"must be NoSchedule, PreferNoSchedule or NoExecute, got {effect!r}",
            )
        key = _string(t.get("key"), f"{where}.key")
        value_ = _string(t.get("value"), f"{where}.value")
        if not key and operator != "Exists":
            raise WorkloadSpecError(f"{where}.operator", "must be Exists when key is empty")
        if operator == "Exists" and value_:
            raise WorkloadSpecError(f"{where}.value", "must be empty when operator is Exists")
        out.append(Toleration(key=key, operator=operator, value=value_, effect=effect))
    return tuple(out)


def _affinity_terms(
    pod_spec: Mapping[str, Any], field: str
) -> tuple[tuple[NodeSelectorRequirement, ...], ...]:
    where = f"{field}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    affinity = _mapping(pod_spec.get("affinity"), f"{field}.affinity")
    node_affinity = _mapping(affinity.get("nodeAffinity"), f"{field}.affinity.nodeAffinity")
    required = _mapping(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"), where)
    terms = []
    for i, term in enumerate(
        _sequence(required.get("nodeSelectorTerms"), f"{where}.nodeSelectorTerms")
    ):
        tw = f"{where}.nodeSelectorTerms[{i}]"
        reqs = []
        for j, expr in enumerate(
            _sequence(_mapping(term, tw).get("matchExpressions"), f"{tw}.matchExpressions")
        ):
            ew = f"{tw}.matchExpressions[{j}]"
            expr = _mapping(expr, ew, required=True)
            key = _string(expr.get("key"), f"{ew}.key")
            if not key:
                raise WorkloadSpecError(f"{ew}.key", "required")
            op = _string(expr.get("operator"), f"{ew}.operator")
            if op not in _AFFINITY_OPERATORS:
                raise WorkloadSpecError(
                    f"{ew}.operator", f"must be one of {sorted(_AFFINITY_OPERATORS)}, got {op!r}"
                )
            values = tuple(
                _string(v, f"{ew}.values[{k}]")
                for k, v in enumerate(_sequence(expr.get("values"), f"{ew}.values"))
            )
            reqs.append(NodeSelectorRequirement(key=key, operator=op, values=values))
        terms.append(tuple(reqs))
    return tuple(terms)


def pod_set_from_template(
    name: str, count: int, template: Mapping[str, Any], *, field: str
) -> PodSet:
    """Build a domain ``PodSet`` from a PodTemplateSpec JSON (``{metadata, spec}``).

    Reads per-pod requests (``pod_requests``), ``nodeSelector``, required node-affinity
    ``matchExpressions`` (``matchFields`` name nodes, not flavors, and are ignored) and
    ``tolerations``. ``field`` is the template's JSON path, used in errors.
    Raises ``WorkloadSpecError``.
    """
    spec = _mapping(
        _mapping(template, field, required=True).get("spec"), f"{field}.spec", required=True
    )
    selector = {
        k: _string(v, f"{field}.spec.nodeSelector[{k}]")
        for k, v in _mapping(spec.get("nodeSelector"), f"{field}.spec.nodeSelector").items()
    }
    return PodSet(
        name=name,
        count=count,
        requests=pod_requests(spec, field=f"{field}.spec"),
        node_selector=selector,
        affinity_terms=_affinity_terms(spec, f"{field}.spec"),
        tolerations=_tolerations(spec.get("tolerations"), f"{field}.spec.tolerations"),
    )


def job_pod_count(job: Mapping[str, Any]) -> int:
    """Pods a Job runs at once: ``min(parallelism, completions)``, parallelism defaulting to 1
    (batch/v1 defaulting; Kueue ``podsCount``). Raises ``WorkloadSpecError`` naming
    ``spec.parallelism`` / ``spec.completions`` when negative or not an integer.
    """
    spec = _mapping(job.get("spec"), "spec", required=True)
    count = _int(spec.get("parallelism"), "spec.parallelism", default=1, minimum=0)
    completions = spec.get("completions")
    if completions is not None:
        count = min(count, _int(completions, "spec.completions", default=0, minimum=0))
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


def _check_dns_subdomain(value: str, field: str) -> None:
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
    labels = _mapping(_mapping(job.get("metadata"), "metadata").get("labels"), "metadata.labels")
    wpc = _string(labels.get(PRIORITY_CLASS_LABEL), f"metadata.labels[{PRIORITY_CLASS_LABEL}]")
    if wpc:
        if priority_classes is None or wpc not in priority_classes:
            raise WorkloadSpecError(
                f"metadata.labels[{PRIORITY_CLASS_LABEL}]",
                f"WorkloadPriorityClass {wpc!r} not found",
            )
        ref = {"group": KUEUE_GROUP, "kind": "WorkloadPriorityClass", "name": wpc}
        return int(priority_classes[wpc]), ref
    where = "spec.template.spec.priorityClassName"
    spec = _mapping(_mapping(job.get("spec"), "spec").get("template"), "spec.template")
    pcn = _string(_mapping(spec.get("spec"), "spec.template.spec").get("priorityClassName"), where)
    if pcn:
        known = {**SYSTEM_PRIORITY_CLASSES, **(pod_priority_classes or {})}
        if pcn not in known:
            raise WorkloadSpecError(where, f"PriorityClass {pcn!r} not found")
        return int(known[pcn]), {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": pcn}
    return 0, None


def _creation_seconds(metadata: Mapping[str, Any]) -> float:
    stamp = _string(metadata.get("creationTimestamp"), "metadata.creationTimestamp")
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
    metadata = _mapping(job.get("metadata"), "metadata", required=True)
    if not _string(metadata.get("name"), "metadata.name"):
        raise WorkloadSpecError("metadata.name", "required")
    spec = _mapping(job.get("spec"), "spec", required=True)
    template = _mapping(spec.get("template"), "spec.template", required=True)
    labels = _mapping(metadata.get("labels"), "metadata.labels")
    queue = _string(labels.get(QUEUE_NAME_LABEL), f"metadata.labels[{QUEUE_NAME_LABEL}]")
    if queue:
        _check_dns_subdomain(queue, f"metadata.labels[{QUEUE_NAME_LABEL}]")
    return metadata, template, queue


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
    pod_set = pod_set_from_template(
        MAIN_POD_SET, job_pod_count(job), template, field="spec.template"
    )
    return Workload(
        namespace=_string(metadata.get("namespace"), "metadata.namespace"),
        name=workload_name_for_job(metadata["name"], _string(metadata.get("uid"), "metadata.uid")),
        queue_name=queue,
        pod_sets=(pod_set,),
        priority=priority,
        creation=_creation_seconds(metadata),
    )


def admission_mismatch(running: Sequence[PodSet], admitted: Workload, *,
                       fewer_ok: bool = False) -> str | None:
    """Why the pods a job would run now (``running``: its podSets as read from the job) no
    longer match what its Workload was admitted for; None when they match.

    Compared per podSet: the names, the pod ``count`` (against the admitted count of
    ``admitted.admission`` when present, else the Workload's spec) and the per-pod
    ``requests`` (milli-CPU, bytes, counts). Any difference counts, up or down, as Kueue's
    ``EquivalentToWorkload`` (kueue-integrations.md 1.4): the job is stopped and queued
    again for its new shape, so it never runs more than was admitted (issue 14: a running
    Job's ``spec.parallelism`` can be raised). ``fewer_ok``: fewer pods than admitted match
    (a pod group whose members finished or failed, Kueue's group equivalence); a podSet the
    admission lacks never does. Never raises.
    """
    have = {ps.name: ps for ps in admitted.pod_sets}
    counts = {ps.name: ps.count for ps in admitted.pod_sets}
    if admitted.admission is not None:
        counts.update({a.name: a.count for a in admitted.admission.pod_set_assignments})
    want = {ps.name: ps for ps in running}
    if set(want) - set(have) or (not fewer_ok and set(want) != set(have)):
        return (f"podSets {sorted(want)} do not match the admitted podSets {sorted(have)}")
    for name, ps in want.items():
        if ps.count > counts[name] or (ps.count != counts[name] and not fewer_ok):
            return f"podSet {name}: {ps.count} pods, admitted for {counts[name]}"
        if dict(ps.requests) != dict(have[name].requests):
            changed = sorted(set(ps.requests) ^ set(have[name].requests) | {
                r for r in set(ps.requests) & set(have[name].requests)
                if ps.requests[r] != have[name].requests[r]})
            return (f"podSet {name}: per-pod requests of {', '.join(changed)} differ from "
                    "the admitted ones")
    return None


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
    tmeta = dict(_mapping(template.get("metadata"), "spec.template.metadata"))
    if "labels" in tmeta:
        pod_labels = _mapping(tmeta["labels"], "spec.template.metadata.labels")
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
    pod_sets = [{"name": MAIN_POD_SET, "count": wl.pod_sets[0].count, "template": template}]
    return workload_object_for_owner(job, wl, ref, pod_sets, kind="Job",
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
    ``finalizers``; ``spec``: ``queueName``, ``podSets`` as given (``[{name, count,
    template}]``), ``priority`` and ``priorityClassRef`` when ``ref`` is set,
    ``maximumExecutionTimeSeconds`` from the owner's ``kueue.x-k8s.io/max-exec-time-seconds``
    label. Raises ``WorkloadSpecError`` naming that label when it is not a positive integer.
    """
    metadata = owner["metadata"]
    spec: dict[str, Any] = {"queueName": wl.queue_name, "podSets": [dict(p) for p in pod_sets]}
    if ref is not None:
        spec["priorityClassRef"] = dict(ref)
        spec["priority"] = wl.priority
    labels = _mapping(metadata.get("labels"), "metadata.labels")
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
    adm = _mapping(value, "status.admission")
    cq = _string(adm.get("clusterQueue"), "status.admission.clusterQueue")
    if not cq:
        raise WorkloadSpecError("status.admission.clusterQueue", "required")
    counts = {ps.name: ps.count for ps in pod_sets}
    assignments = []
    for i, psa in enumerate(
        _sequence(adm.get("podSetAssignments"), "status.admission.podSetAssignments")
    ):
        where = f"status.admission.podSetAssignments[{i}]"
        psa = _mapping(psa, where, required=True)
        name = _string(psa.get("name"), f"{where}.name", default=MAIN_POD_SET)
        flavors = {
            ResourceName(r): FlavorName(_string(f, f"{where}.flavors[{r}]"))
            for r, f in _mapping(psa.get("flavors"), f"{where}.flavors").items()
        }
        assignments.append(
            PodSetAssignment(
                name=name,
                flavors=flavors,
                resource_usage=_resource_list(psa.get("resourceUsage"), f"{where}.resourceUsage"),
                count=_int(
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
    metadata = _mapping(obj.get("metadata"), "metadata", required=True)
    name = _string(metadata.get("name"), "metadata.name")
    if not name:
        raise WorkloadSpecError("metadata.name", "required")
    spec = _mapping(obj.get("spec"), "spec", required=True)
    raw_sets = _sequence(spec.get("podSets"), "spec.podSets")
    if not raw_sets:
        raise WorkloadSpecError("spec.podSets", "at least one podSet is required")
    pod_sets = []
    for i, ps in enumerate(raw_sets):
        where = f"spec.podSets[{i}]"
        ps = _mapping(ps, where, required=True)
        pod_sets.append(
            pod_set_from_template(
                _string(ps.get("name"), f"{where}.name", default=MAIN_POD_SET),
                _int(ps.get("count"), f"{where}.count", default=1, minimum=0),
                ps.get("template"),
                field=f"{where}.template",
            )
        )
    status = _mapping(obj.get("status"), "status")
    return Workload(
        namespace=_string(metadata.get("namespace"), "metadata.namespace"),
        name=name,
        queue_name=_string(spec.get("queueName"), "spec.queueName"),
        pod_sets=tuple(pod_sets),
        priority=_int(spec.get("priority"), "spec.priority", default=0),
        creation=_creation_seconds(metadata),
        uid=_string(metadata.get("uid"), "metadata.uid"),
        admission=_admission(status.get("admission"), pod_sets),
        max_execution_seconds=_max_execution(spec.get("maximumExecutionTimeSeconds")),
    )


def _max_execution(value: Any) -> float | None:
    # Kueue requires minimum 1; a wrong value is ignored (the ETA only loses a bound) rather
    # than making the whole Workload unreadable.
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return None
    return float(value)

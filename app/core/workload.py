"""Domain Workload: what the admission core needs to know about a unit of admission.

Shapes (all amounts are integers, see ``app.core.quantity``: milli-CPU, bytes, counts):

- ``PodSet``: ``name``, ``count`` (pods), ``requests`` per pod ``{resource: amount}``, and the
  pod's scheduling constraints that flavor assignment reads (``node_selector``, required
  node-affinity terms, ``tolerations``).
- ``Workload``: key ``namespace/name``, the LocalQueue name, priority, creation time (seconds
  since the epoch, float), uid, podSets, and its admission if it has one.

Rules from Kueue v1beta2 Workload (``spec.podSets[].count``, ``spec.priority``,
``spec.queueName``) and the Kubernetes pod resource model. No JSON here: the objects are read
by ``app.wire`` (``podtemplate``, ``workload``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

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
    ``min_count``: the fewest pods it may be admitted with (Kueue ``podSets[].minCount``,
    partial admission); None: all ``count`` or nothing.
    """

    name: str
    count: int
    requests: Mapping[ResourceName, int]
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity_terms: tuple[tuple[NodeSelectorRequirement, ...], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    min_count: int | None = None

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
    # Why the scheduler refuses its pods' resources, as the message it stays pending with
    # (Kueue's ``nominate``: a request above its limit, a LimitRange's bounds; read by
    # ``app.wire.podadjust``); "" when they pass. Checked before any quota is looked at.
    invalid_resources: str = ""
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


def admission_excess(running: Sequence[PodSet], admitted: Workload) -> str | None:
    """Why the pods of ``running`` (podSets read from an object an admitted job's operator
    made, e.g. the JobSet of a TrainJob) exceed what ``admitted`` (that job's Workload) was
    admitted for; None when they fit. Per podSet: one the admission lacks, more pods than
    its admitted count (``admission`` when present, else the spec), or any per-pod request
    above the admitted podSet's. Fewer or smaller pods fit (``admission_mismatch`` is the
    exact rule for the job itself). Never raises."""
    have = {ps.name: ps for ps in admitted.pod_sets}
    counts = {ps.name: ps.count for ps in admitted.pod_sets}
    if admitted.admission is not None:
        counts.update({a.name: a.count for a in admitted.admission.pod_set_assignments})
    for ps in running:
        if ps.count <= 0:
            continue
        if ps.name not in have:
            return f"podSet {ps.name} ({ps.count} pods) is not in the admitted podSets " \
                f"{sorted(have)}"
        if ps.count > counts[ps.name]:
            return f"podSet {ps.name}: {ps.count} pods, admitted for {counts[ps.name]}"
        above = sorted(r for r, q in ps.requests.items()
                       if q > have[ps.name].requests.get(r, 0))
        if above:
            return f"podSet {ps.name}: per-pod requests of {', '.join(above)} above the " \
                "admitted ones"
    return None


def admission_mismatch(running: Sequence[PodSet], admitted: Workload, *,
                       fewer_ok: bool = False) -> str | None:
    """Why the pods a job would run now (``running``: its podSets as read from the job) no
    longer match what its Workload was admitted for; None when they match.

    Compared per podSet: the names, the pod ``count`` (against the admitted count of
    ``admitted.admission`` when present, else the Workload's spec) and the per-pod
    ``requests`` (milli-CPU, bytes, counts). Any difference counts, up or down, as Kueue's
    ``EquivalentToWorkload`` (kueue-integrations.md 1.4): the job is stopped and queued
    again for its new shape, so it never runs more than was admitted (a running Job's
    ``spec.parallelism`` can be raised). ``fewer_ok``: fewer pods than admitted match
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

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

from collections.abc import Mapping
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
    """A node or flavor taint (core/v1 Taint). ``effect``: NoSchedule, PreferNoSchedule, NoExecute."""

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

    @property
    def key(self) -> WorkloadKey:
        """``namespace/name``."""
        return WorkloadKey(f"{self.namespace}/{self.name}")

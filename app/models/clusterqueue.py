"""Wire model of the Kueue v1beta2 ClusterQueue (cluster-scoped, status subresource).

Shape (``manifests/crds/kueue.x-k8s.io_clusterqueues.yaml``): ``spec.resourceGroups[]``
(``coveredResources``, ``flavors[].resources[]`` with ``nominalQuota``, ``borrowingLimit``,
``lendingLimit`` quantities), ``cohortName`` (and its deprecated alias ``cohort``),
``queueingStrategy``, ``namespaceSelector``, ``flavorFungibility``, ``preemption``,
``admissionChecksStrategy``, ``stopPolicy``, ``fairSharing``, ``admissionScope``; status with
conditions, per-flavor reservation and usage, workload counters.

Defaults of the fields read from the API server are Kueue's (the CRD applies the same ones):
BestEffortFIFO, preemption Never, stopPolicy None. ``namespace_selector`` ``None`` matches no
namespace; ``LabelSelector()`` (``{}``) matches all.
"""

from __future__ import annotations

from typing import Literal

from app.models.common import (
    KUEUE_API_VERSION,
    Condition,
    KubeObject,
    LabelSelector,
    Quantity,
    WireModel,
)

QueueingStrategy = Literal["StrictFIFO", "BestEffortFIFO"]
StopPolicy = Literal["None", "Hold", "HoldAndDrain"]
ReclaimWithinCohort = Literal["Never", "LowerPriority", "Any"]
WithinClusterQueue = Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"]
BorrowWithinCohortPolicy = Literal["Never", "LowerPriority"]
FlavorFungibilityPolicy = Literal["MayStopSearch", "TryNextFlavor"]


class ResourceQuota(WireModel):
    """Quota of one resource in one flavor (quantities as written, e.g. ``4``, ``"4Gi"``).

    ``borrowing_limit`` / ``lending_limit`` ``None``: no limit.
    """

    name: str
    nominal_quota: Quantity
    borrowing_limit: Quantity | None = None
    lending_limit: Quantity | None = None


class FlavorQuotas(WireModel):
    """A flavor of a resource group and its quota per covered resource (same order)."""

    name: str
    resources: list[ResourceQuota]


class ResourceGroup(WireModel):
    """Resources assigned one flavor together, and the flavors (tried in order)."""

    covered_resources: list[str]
    flavors: list[FlavorQuotas]


class BorrowWithinCohort(WireModel):
    """Preemption in other ClusterQueues while borrowing (classical preemption)."""

    policy: BorrowWithinCohortPolicy = "Never"
    max_priority_threshold: int | None = None


class ClusterQueuePreemption(WireModel):
    """Preemption policies; all ``Never`` by default."""

    reclaim_within_cohort: ReclaimWithinCohort = "Never"
    within_cluster_queue: WithinClusterQueue = "Never"
    borrow_within_cohort: BorrowWithinCohort | None = None


class FlavorFungibility(WireModel):
    """Flavor search policy; defaults MayStopSearch / TryNextFlavor."""

    when_can_borrow: FlavorFungibilityPolicy = "MayStopSearch"
    when_can_preempt: FlavorFungibilityPolicy = "TryNextFlavor"
    preference: Literal["BorrowingOverPreemption", "PreemptionOverBorrowing"] | None = None


class AdmissionCheckStrategyRule(WireModel):
    """An admission check and the flavors it applies to (empty: all)."""

    name: str
    on_flavors: list[str] | None = None


class AdmissionChecksStrategy(WireModel):
    """Admission checks per flavor."""

    admission_checks: list[AdmissionCheckStrategyRule] | None = None


class FairSharing(WireModel):
    """Fair sharing weight (quantity, default 1)."""

    weight: Quantity | None = None


class AdmissionScope(WireModel):
    """Admission Fair Sharing mode."""

    admission_mode: Literal["UsageBasedAdmissionFairSharing", "NoAdmissionFairSharing"]


class ClusterQueueSpec(WireModel):
    """Spec of a ClusterQueue. Use ``effective_cohort`` rather than reading ``cohort_name``:
    ``cohort`` is the deprecated alias the seed article writes."""

    resource_groups: list[ResourceGroup] | None = None
    cohort_name: str | None = None
    cohort: str | None = None
    queueing_strategy: QueueingStrategy = "BestEffortFIFO"
    namespace_selector: LabelSelector | None = None
    flavor_fungibility: FlavorFungibility | None = None
    preemption: ClusterQueuePreemption | None = None
    admission_checks_strategy: AdmissionChecksStrategy | None = None
    stop_policy: StopPolicy = "None"
    fair_sharing: FairSharing | None = None
    admission_scope: AdmissionScope | None = None

    @property
    def effective_cohort(self) -> str | None:
        """``cohortName``, else the deprecated ``cohort``, else ``None`` (no cohort)."""
        return self.cohort_name or self.cohort or None


class ResourceUsage(WireModel):
    """Usage of one resource in a flavor: ``total`` and the ``borrowed`` part (quantities)."""

    name: str
    total: Quantity | None = None
    borrowed: Quantity | None = None


class FlavorUsage(WireModel):
    """Usage of one flavor."""

    name: str
    resources: list[ResourceUsage]


class FairSharingStatus(WireModel):
    """``weightedShare``: dominant borrowed share / weight."""

    weighted_share: int | None = None


class ClusterQueueStatus(WireModel):
    """Status written by pykueue: condition ``Active``, reservation and usage per flavor,
    workload counters."""

    conditions: list[Condition] | None = None
    flavors_reservation: list[FlavorUsage] | None = None
    flavors_usage: list[FlavorUsage] | None = None
    pending_workloads: int | None = None
    reserving_workloads: int | None = None
    admitted_workloads: int | None = None
    fair_sharing: FairSharingStatus | None = None


class ClusterQueue(KubeObject):
    """``kueue.x-k8s.io/v1beta2`` ClusterQueue."""

    api_version: str = KUEUE_API_VERSION
    kind: str = "ClusterQueue"
    spec: ClusterQueueSpec | None = None
    status: ClusterQueueStatus | None = None

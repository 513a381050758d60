"""Wire models of pykueue's status API (``/api/v1/...``, served by ``app.api.status``).

camelCase on the wire (``positionInClusterQueue``), snake_case in Python. Quantities are
canonical Kubernetes quantity strings, exact by construction (``"4"``, ``"500m"``,
``"36Gi"``; ``app.core.quantity.format_quantity``), so ``parse_quantity`` gives back the exact
integer; counts and positions are integers; times are RFC 3339 UTC strings. ``null`` limits
mean "not set" (borrowingLimit: unlimited; lendingLimit: everything is lendable).

Names and meanings follow Kueue v1beta2 status fields (``pendingWorkloads``,
``reservingWorkloads``, ``admittedWorkloads``, ``flavorsReservation``) and the visibility API
(``positionInClusterQueue``, ``positionInLocalQueue``, 0-based; reference 5.2 and 5.3).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class StatusModel(BaseModel):
    """Base: camelCase aliases, Python names accepted too, responses serialised by alias."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True,
                              serialize_by_alias=True)


class ListMeta(StatusModel):
    """Paging of a list (Kubernetes ``ListMeta``): pass ``continue`` back as the
    ``continue`` query parameter for the next page; absent on the last page."""

    continue_: str | None = Field(default=None, alias="continue")
    remaining_item_count: int = 0
    total_items: int = 0


class QuotaLimits(StatusModel):
    """A flavor-resource's configured quota: ``nominalQuota`` and the ``borrowingLimit`` /
    ``lendingLimit`` toward the parent cohort (null: unset)."""

    flavor: str
    resource: str
    nominal_quota: str
    borrowing_limit: str | None = None
    lending_limit: str | None = None


class FlavorResourceQuota(QuotaLimits):
    """Quota and usage of one resource in one ResourceFlavor of a ClusterQueue.

    ``used``: held by Workloads admitted or being admitted; ``borrowed``: the part of
    ``used`` above ``nominalQuota`` (only in a cohort); ``lent``: this queue's unused quota in
    use by other cohort members; ``available``: what it could still admit now.
    """

    used: str
    borrowed: str
    lent: str
    available: str


class ResourceUsage(StatusModel):
    """Usage of one resource in one ResourceFlavor (canonical quantity)."""

    flavor: str
    resource: str
    used: str


class QueueState(StatusModel):
    """What ClusterQueues and LocalQueues both show: whether the queue takes Workloads
    (``active``; otherwise ``reason`` and ``message`` say why: Kueue ``Active`` condition) and
    Workload counts (``pendingWorkloads`` includes the ``inadmissibleWorkloads``, which wait
    for a change in the cohort; ``reservingWorkloads`` hold quota, ``admittedWorkloads`` are
    those whose admission is stored)."""

    active: bool
    reason: str
    message: str
    pending_workloads: int
    inadmissible_workloads: int
    reserving_workloads: int
    admitted_workloads: int


class ClusterQueueSummary(QueueState):
    """A ClusterQueue: configuration, whether it admits (``active``; otherwise ``reason`` and
    ``message`` say why, Kueue ``Active`` condition), Workload counts and quota per flavor
    and resource."""

    name: str
    cohort: str | None = None
    queueing_strategy: str
    evicting_workloads: int
    resources: list[FlavorResourceQuota]


class ClusterQueueList(StatusModel):
    """``GET /api/v1/clusterqueues``."""

    kind: Literal["ClusterQueueList"] = "ClusterQueueList"
    items: list[ClusterQueueSummary]


class CohortResource(QuotaLimits):
    """Quota and usage of one resource in one ResourceFlavor of a cohort's subtree.

    ``nominalQuota``: the Cohort object's own quota ("0" when it declares none);
    ``borrowingLimit`` / ``lendingLimit``: its limits toward its parent (null: unset);
    ``subtreeQuota``: its own quota plus what its members lend it (Kueue SubtreeQuota);
    ``used``: held by every ClusterQueue below it; ``borrowed``: what the subtree takes from
    its parent beyond ``subtreeQuota``.
    """

    subtree_quota: str
    used: str
    borrowed: str


class CohortSummary(StatusModel):
    """A cohort of the tree (Kueue v1beta2 Cohort; ``explicit`` false when only
    ClusterQueues' ``cohortName`` names it): ``parent`` (null: a root), whether its
    ClusterQueues can admit (``active``; ``reason`` ``CohortCycle`` or ``InvalidSpec`` with a
    ``message`` otherwise), its direct members (``cohorts``, ``clusterQueues``) and every
    ClusterQueue of its subtree, ``fairSharingWeight``, ``weightedShare`` (Kueue
    ``status.fairSharing.weightedShare``; null when fair sharing is off) and quota and usage
    per flavor and resource."""

    name: str
    parent: str | None = None
    explicit: bool
    active: bool
    reason: str
    message: str
    cohorts: list[str]
    cluster_queues: list[str]
    subtree_cluster_queues: list[str]
    fair_sharing_weight: str
    weighted_share: int | None = None
    resources: list[CohortResource]


class CohortList(StatusModel):
    """``GET /api/v1/cohorts``."""

    kind: Literal["CohortList"] = "CohortList"
    items: list[CohortSummary]


class QuotaShortfall(StatusModel):
    """The numbers behind "insufficient quota" for one flavor-resource of a pod set.

    ``requested``: what the pod set ``podSet`` needs of it; ``available``: what the
    ClusterQueue can take now for that pod set (less what the Workload's earlier pod sets
    take of it); ``maximum``: the same with an idle cohort; ``limitedBy``: which limit
    binds (``nominalQuota``, ``borrowingLimit``, ``cohort``, ``maximumCapacity``).
    """

    pod_set: str
    flavor: str
    resource: str
    requested: str
    available: str
    maximum: str
    nominal_quota: str
    used: str
    borrowed: str
    borrowing_limit: str | None = None
    limited_by: str
    cohort: str | None = None
    message: str


class EtaRange(StatusModel):
    """Gott's 50% interval of an ETA that rests on projected arrivals (``app.core.eta.Eta``
    ``earliest`` / ``latest``): the start had each higher-priority stream gone on for a
    third of its age (``earliest``) or three times its age (``latest``) instead of as long
    again as it has (``eta.start``). About half of real starts fall inside when one
    stream's end decides them; a guess at when a burst ends, not a bound.

    ``earliest`` / ``latest``: RFC 3339 UTC; ``earliestWaitSeconds`` /
    ``latestWaitSeconds``: from now (0 when due). ``latest`` null: no later bound (the
    longer projection gave no start within the run's budget or the projection's cap)."""

    earliest: str
    earliest_wait_seconds: int
    latest: str | None = None
    latest_wait_seconds: int | None = None


class Eta(StatusModel):
    """When a pending Workload is expected to start (``app.core.eta``: the admission core
    run forward on a copy of its cohort).

    ``start``: RFC 3339 UTC time (null when unknown); ``waitSeconds``: from now to ``start``
    (0 when due); ``confidence``: ``bounded`` (every run that had to end first has a time
    limit, ``maximumExecutionTimeSeconds``), ``estimated`` (some end was learned from
    finished Workloads of the same LocalQueue and shape, or projected arrivals went ahead:
    basis ``...+arrivals``), ``unknown``; ``basis``: which of those it rests on, or why it
    is unknown (``no end known``, ``never admitted``, ``budget exceeded``, ``computing``,
    ``outpaced by higher-priority arrivals``, ``not computed yet``); ``computedAt``: when it
    was computed (recomputed at most every few seconds, and once an expected end has passed
    with nothing changed); ``range``: Gott's 50% interval of a start that rests on
    projected arrivals (``EtaRange``; null otherwise, and while it is being computed)."""

    start: str | None = None
    wait_seconds: int | None = None
    confidence: Literal["bounded", "estimated", "unknown"]
    basis: str
    computed_at: str | None = None
    range: EtaRange | None = None


class PendingWorkload(StatusModel):
    """A pending Workload in admission order.

    ``reason``: pykueue's cause (``WaitingForQuota``, ``NoMatchingFlavor``, ...; null before
    its first scheduling cycle); ``conditionReason``: the Kueue QuotaReserved=False reason
    written on the object; ``message`` says why with numbers; ``inadmissible``: parked until
    something changes in its cohort. ``positionInClusterQueue`` / ``positionInLocalQueue``:
    0-based as Kueue's visibility API (0 = next); the texts for people (the message's
    ``position N``, ``pykueue status``, the dashboard) count from 1.
    """

    name: str
    namespace: str
    local_queue_name: str
    cluster_queue: str
    position_in_cluster_queue: int
    position_in_local_queue: int
    priority: int
    created: str
    inadmissible: bool
    reason: str | None = None
    condition_reason: str | None = None
    message: str
    shortfalls: list[QuotaShortfall] = Field(default_factory=list)
    eta: Eta | None = None


class PendingWorkloadList(StatusModel):
    """``GET .../pending``: one page of pending Workloads."""

    kind: Literal["PendingWorkloadList"] = "PendingWorkloadList"
    metadata: ListMeta
    items: list[PendingWorkload]


class LocalQueueSummary(QueueState):
    """A LocalQueue: its ClusterQueue, whether it accepts Workloads (Kueue ``Active``
    reasons ``Ready``, ``ClusterQueueDoesNotExist``, ``ClusterQueueIsInactive``), counts and
    the quota its Workloads hold."""

    name: str
    namespace: str
    cluster_queue: str
    usage: list[ResourceUsage]


class LocalQueueList(StatusModel):
    """``GET /api/v1/namespaces/{ns}/localqueues``."""

    kind: Literal["LocalQueueList"] = "LocalQueueList"
    items: list[LocalQueueSummary]


class PodSetAssignment(StatusModel):
    """Kueue ``status.admission.podSetAssignments[]``: flavor per resource, total usage."""

    name: str
    count: int
    flavors: dict[str, str]
    resource_usage: dict[str, str]


class WorkloadStatus(StatusModel):
    """``GET /api/v1/namespaces/{ns}/workloads/{name}``: where one Workload stands.

    ``state``: ``pending``, ``admitted`` or ``evicting`` (still holding quota);
    ``admissionInFlight``: admitted in memory, the status write not yet confirmed;
    ``awaitingAdmissionChecks``: holding quota (Kueue QuotaReserved) while the ClusterQueue's
    admission checks are not all Ready, so not Admitted yet. Positions, ``reason``,
    ``message`` and ``eta`` are set while pending.
    """

    kind: Literal["WorkloadStatus"] = "WorkloadStatus"
    name: str
    namespace: str
    local_queue_name: str
    cluster_queue: str | None = None
    state: str
    priority: int
    created: str
    admission_in_flight: bool
    awaiting_admission_checks: bool = False
    inadmissible: bool
    position_in_cluster_queue: int | None = None
    position_in_local_queue: int | None = None
    reason: str | None = None
    condition_reason: str | None = None
    message: str
    shortfalls: list[QuotaShortfall] = Field(default_factory=list)
    pod_set_assignments: list[PodSetAssignment] = Field(default_factory=list)
    usage: list[ResourceUsage] = Field(default_factory=list)
    eta: Eta | None = None

"""What one scheduling cycle decides: Admit, Preempt or Pending (plain frozen dataclasses).

- ``Admit``: write ``status.admission`` (``admission``) and QuotaReserved/Admitted=True. The
  core has already *assumed* it (its usage is reserved); if the write fails call
  ``Scheduler.forget(workload)``.
- ``Preempt``: set Evicted=True (reason ``Preempted``) and Preempted=True (reason per victim)
  on each ``victims`` entry. The core already counts them as being evicted (they keep their
  quota until ``finish_eviction``); if a write fails call ``Scheduler.cancel_eviction``.
- ``Pending``: set QuotaReserved=False with ``reason.condition_reason`` and ``message``.
  Emitted when the reason or message of that Workload changed or it was parked again.

Kueue v1beta2 Workload conditions (reference section 2).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from app.core.quantity import format_quantity
from app.core.types import ClusterQueueName, FlavorName, FlavorResource, ResourceName, WorkloadKey
from app.core.workload import Admission


class PendingReason(StrEnum):
    """Why a Workload is pending. ``condition_reason`` gives Kueue's QuotaReserved=False reason."""

    WAITING_FOR_QUOTA = "WaitingForQuota"
    EXCEEDS_MAX_QUOTA = "ExceedsMaxQuota"
    NO_MATCHING_FLAVOR = "NoMatchingFlavor"
    WAITING_FOR_PREEMPTION = "WaitingForPreemptedWorkloads"
    NAMESPACE_MISMATCH = "NamespaceMismatch"
    # Its pods' requests exceed their limits or a LimitRange of its namespace
    # (``Workload.invalid_resources``).
    INVALID_RESOURCES = "InvalidResources"
    RESOURCE_NOT_COVERED = "ResourceNotCovered"
    CLUSTER_QUEUE_INACTIVE = "ClusterQueueInactive"
    LOCAL_QUEUE_NOT_FOUND = "LocalQueueNotFound"
    CLUSTER_QUEUE_NOT_FOUND = "ClusterQueueNotFound"
    LOCAL_QUEUE_STOPPED = "LocalQueueStopped"
    # waitForPodsReady.blockAdmission: it fits, but an admitted Workload is not ready yet
    # (decided by the scheduling loop, not the core).
    WAITING_FOR_PODS_READY = "WaitingForPodsReady"

    @property
    def condition_reason(self) -> str:
        """Kueue v1beta2's QuotaReserved=False reason for this cause, exactly as Kueue v0.17.1
        writes it (checked by tests/conformance against real Kueue): ``Inadmissible`` when
        the Workload has no usable queue (its LocalQueue or ClusterQueue is missing,
        inactive or stopped: Kueue's workload controller), ``Pending`` for every other cause
        (the scheduler's: no fit, namespace mismatch, ...). The cause itself stays in
        ``PendingReason`` (the status API's ``reason``) and in the message. Held by
        waitForPodsReady.blockAdmission: ``Waiting`` (Kueue's legacy reason; with its
        UnadmittedWorkloadsObservability gate, WaitingForPodsReady)."""
        if self is PendingReason.WAITING_FOR_PODS_READY:
            return "Waiting"
        return "Inadmissible" if self in _NO_QUEUE else "Pending"


_NO_QUEUE = frozenset({
    PendingReason.LOCAL_QUEUE_NOT_FOUND,
    PendingReason.CLUSTER_QUEUE_NOT_FOUND,
    PendingReason.CLUSTER_QUEUE_INACTIVE,
    PendingReason.LOCAL_QUEUE_STOPPED,
})


class PreemptionReason(StrEnum):
    """Kueue v1beta2 ``Preempted`` condition reasons (classical preemption and fair
    sharing)."""

    IN_CLUSTER_QUEUE = "InClusterQueue"
    IN_COHORT_RECLAMATION = "InCohortReclamation"
    IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"
    IN_COHORT_FAIR_SHARING = "InCohortFairSharing"


@dataclass(frozen=True, slots=True)
class QuotaShortfall:
    """The numbers behind "insufficient quota" for one flavor-resource of one pod set.

    Amounts in the resource's unit (milli-CPU, bytes, counts), all of pod set ``pod_set``
    (the one the message names): ``requested``: what the pod set needs of it;
    ``earlier``: what the Workload's earlier pod sets already take of it (Kueue assigns a
    Workload's pod sets in order, each counting the ones before); ``available``: what the
    ClusterQueue can take now, less ``earlier`` (at least 0); ``maximum``: what it could
    take if the cohort were idle, less ``earlier``; ``borrowing_limit`` None = unlimited;
    ``limit``: what binds, one of ``nominalQuota`` (no cohort), ``borrowingLimit``,
    ``cohort`` (the cohort's unused quota), ``maximumCapacity`` (request above
    ``maximum``). ``nominal``, ``usage``, ``borrowed`` and the cohort's numbers are the
    ClusterQueue's and the cohort's.
    """

    pod_set: str
    flavor: FlavorName
    resource: ResourceName
    requested: int
    available: int
    maximum: int
    nominal: int
    usage: int
    borrowed: int
    borrowing_limit: int | None
    limit: str
    cohort: str | None = None
    cohort_capacity: int = 0
    cohort_usage: int = 0
    # Out of the repr: a Workload of one pod set (0) keeps the decision hash of
    # bench/simulate.py; ``describe`` (in every Pending's message) says it when it is not 0.
    earlier: int = field(default=0, repr=False)

    def describe(self) -> str:
        """One sentence with the numbers, e.g. "insufficient unused quota for nvidia.com/gpu
        in flavor a100: 6 requested, 4 available (nominal 4, usage 0, borrowed 0, ...)"."""
        r = self.resource

        def q(v: int) -> str:
            return format_quantity(v, r)

        bl = "unlimited" if self.borrowing_limit is None else q(self.borrowing_limit)
        where = f"nominal {q(self.nominal)}, usage {q(self.usage)}, borrowed {q(self.borrowed)}"
        if self.cohort is not None:
            where += (
                f", borrowingLimit {bl}; cohort {self.cohort}: "
                f"{q(self.cohort_usage)} of {q(self.cohort_capacity)} in use"
            )

        def split(of: int) -> str:
            # The ClusterQueue's amount this pod set's number was cut from.
            if not self.earlier:
                return ""
            return f" ({q(self.earlier)} of the {q(of)} taken by the workload's earlier pod sets)"

        if self.limit == "maximumCapacity":
            return (
                f"insufficient quota for {r} in flavor {self.flavor}: {q(self.requested)} "
                f"requested > maximum capacity {q(self.maximum)}"
                f"{split(self.maximum + self.earlier)} ({where})"
            )
        return (
            f"insufficient unused quota for {r} in flavor {self.flavor}: "
            f"{q(self.requested)} requested, {q(self.available)} available"
            f"{split(self.available + self.earlier)}, limited by {self.limit} ({where})"
        )


@dataclass(frozen=True, slots=True)
class Admit:
    """Admit ``workload`` into ``cluster_queue`` with ``admission`` (per-podSet flavor per
    resource and resourceUsage); ``usage``: its total per FlavorResource; ``borrowing``:
    whether it uses cohort quota beyond the ClusterQueue's nominal."""

    workload: WorkloadKey
    cluster_queue: ClusterQueueName
    admission: Admission
    usage: Mapping[FlavorResource, int]
    borrowing: bool = False

    @property
    def pod_set_flavors(self) -> dict[str, dict[ResourceName, FlavorName]]:
        """``{podSet name: {resource: flavor}}``."""
        return {a.name: dict(a.flavors) for a in self.admission.pod_set_assignments}


@dataclass(frozen=True, slots=True)
class Victim:
    """One Workload to evict for a preemptor, with the Preempted condition reason/message."""

    workload: WorkloadKey
    cluster_queue: ClusterQueueName
    reason: PreemptionReason
    message: str


@dataclass(frozen=True, slots=True)
class Preempt:
    """``preemptor`` (pending in ``cluster_queue``) needs ``victims`` evicted (new evictions
    to issue now) and waits for ``awaiting`` (already being evicted). ``usage``: the
    preemptor's planned usage; ``allow_borrowing``: whether the victim set was chosen letting
    the preemptor borrow from the cohort."""

    preemptor: WorkloadKey
    cluster_queue: ClusterQueueName
    victims: tuple[Victim, ...]
    awaiting: tuple[WorkloadKey, ...] = ()
    usage: Mapping[FlavorResource, int] = field(default_factory=dict)
    allow_borrowing: bool = False

    @property
    def targets(self) -> tuple[WorkloadKey, ...]:
        """Every Workload whose eviction the preemptor waits for."""
        return tuple(v.workload for v in self.victims) + self.awaiting


@dataclass(frozen=True, slots=True)
class Pending:
    """``workload`` stays pending. ``inadmissible``: parked until something changes in its
    cohort (a Workload finishes or is evicted, a queue, flavor or namespace changes)."""

    workload: WorkloadKey
    cluster_queue: ClusterQueueName | None
    reason: PendingReason
    message: str
    shortfalls: tuple[QuotaShortfall, ...] = ()
    inadmissible: bool = False


Decision = Admit | Preempt | Pending

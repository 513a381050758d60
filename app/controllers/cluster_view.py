"""Read-only views of the admission core for the status API and the metrics collector.

``ClusterView(cluster)`` turns the live ``app.core.scheduling_cycle.Scheduler`` (the reconciler's
``Manager.cluster``, exposed to the HTTP side as ``app.state.cluster``) into plain frozen
records: ClusterQueues with quota and usage per flavor-resource, cohorts (subtree quota,
usage, borrowed, members, parent, weighted share), pending Workloads in admission order with
their positions, LocalQueues, one Workload. Both ``app.api.status``
and ``app.controllers.metrics`` read through it, so the API and ``/metrics`` always agree.

Rules: what is shown follows Kueue v1beta2 status (reference 5.2, 5.3): ``pending`` = queued
+ inadmissible; ``reserving`` = Workloads holding quota (admitted, evicting, or whose
admission write is still in flight); ``admitted`` = ``reserving`` minus in-flight ones;
positions are 0-based in the ClusterQueue's order (and among the same LocalQueue's entries
for ``position_in_local_queue``), as Kueue's visibility API.

ETA: with an ``EtaBoard`` (``app.core.eta``; the scheduling loop's ``SchedulerLoop.eta``)
and a clock, pending entries carry their estimated start (``PendingView.eta``); the board
caches per cohort, so listing a queue costs at most one budgeted run every few seconds.

Amounts are exact integers (milli-CPU for ``cpu``, bytes, counts). Not thread-safe: call on
the event loop that feeds the core (the core is mutated by informer handlers there).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from app.core.decisions import QuotaShortfall
from app.core.eta import UNKNOWN, Eta, EtaBoard, EtaRun
from app.core.quota_state import (
    ClusterQueueStatus,
    CohortStatus,
    FlavorResourceStatus,
    PendingWorkloadInfo,
    QuotaState,
    WorkloadInfo,
    admission_usage,
)
from app.core.scheduling_cycle import Scheduler
from app.core.spec import LocalQueue, StopPolicy
from app.core.types import ClusterQueueName, CohortName, FlavorResource, WorkloadKey


@dataclass(frozen=True, slots=True)
class ClusterQueueView:
    """A ClusterQueue: ``status`` from the core plus the strategy and the finer counts.

    ``pending_inadmissible``: parked pending Workloads (``status.pending`` counts both);
    ``reserving``: Workloads holding quota; ``admitted``: those whose admission is stored;
    ``admitted_usage``: usage of the admitted ones only (Kueue ``flavorsUsage``), while
    ``status.resources[].usage`` includes in-flight admissions (Kueue ``flavorsReservation``).
    """

    status: ClusterQueueStatus
    queueing_strategy: str
    pending_inadmissible: int
    reserving: int
    admitted: int
    admitted_usage: Mapping[FlavorResource, int]

    @property
    def name(self) -> ClusterQueueName:
        return self.status.name

    @property
    def pending_active(self) -> int:
        """Pending Workloads in the queue (not parked)."""
        return self.status.pending - self.pending_inadmissible

    @property
    def resources(self) -> tuple[FlavorResourceStatus, ...]:
        return self.status.resources


@dataclass(frozen=True, slots=True)
class CohortView:
    """A cohort of the tree (a Cohort object, or implicit: named only by ClusterQueues).

    ``status``: the core's (``parent``, ``active`` with ``reason`` / ``message``, every
    ClusterQueue of its subtree, per flavor-resource its own ``nominal``, ``subtree_quota``,
    subtree ``usage`` and what the subtree ``borrowed`` from its parent); ``limits``: per
    flavor-resource its ``(borrowingLimit, lendingLimit)`` toward the parent (None: unset);
    ``child_cohorts`` / ``cluster_queues``: its direct members; ``weight_milli``:
    ``fairSharing.weight`` in milli-units; ``weighted_share``: its dominant resource share
    when fair sharing is enabled (None otherwise; infinite for weight 0 while borrowing)."""

    status: CohortStatus
    limits: Mapping[FlavorResource, tuple[int | None, int | None]]
    child_cohorts: tuple[CohortName, ...]
    cluster_queues: tuple[ClusterQueueName, ...]
    weight_milli: int
    weighted_share: float | None

    @property
    def name(self) -> CohortName:
        return self.status.name


@dataclass(frozen=True, slots=True)
class PendingView:
    """One pending Workload in its ClusterQueue's order.

    ``created``: seconds since the epoch (``metadata.creationTimestamp``); ``position`` and
    ``position_in_local_queue`` are 0-based; ``reason`` is the core's ``PendingReason`` value
    (None before its first scheduling cycle) and ``condition_reason`` Kueue's QuotaReserved
    reason for it; ``shortfalls`` carry the numbers behind a quota reason.
    """

    key: WorkloadKey
    namespace: str
    name: str
    local_queue: str
    cluster_queue: ClusterQueueName
    position: int
    position_in_local_queue: int
    priority: int
    created: float
    inadmissible: bool
    reason: str | None
    condition_reason: str | None
    message: str
    shortfalls: tuple[QuotaShortfall, ...]
    eta: Eta | None = None
    eta_at: float | None = None


@dataclass(frozen=True, slots=True)
class LocalQueueView:
    """A LocalQueue: its ClusterQueue, whether it can take Workloads, counts and usage.

    ``reason``: Kueue LocalQueue ``Active`` reason (``Ready``, ``ClusterQueueDoesNotExist``,
    ``ClusterQueueIsInactive``). ``usage``: quota held by its Workloads per flavor-resource
    (Kueue ``flavorsReservation``); ``admitted_usage``: that of its admitted Workloads only
    (Kueue ``flavorsUsage``: not in-flight admissions, not those awaiting admission checks).
    ``pending_inadmissible``: pending but not queued (parked, or no ClusterQueue to queue in).
    """

    namespace: str
    name: str
    cluster_queue: ClusterQueueName
    active: bool
    reason: str
    message: str
    pending: int
    pending_inadmissible: int
    reserving: int
    admitted: int
    usage: Mapping[FlavorResource, int]
    admitted_usage: Mapping[FlavorResource, int]


@dataclass(frozen=True, slots=True)
class WorkloadView:
    """Where one Workload stands: ``info`` from the core plus queue, priority, creation, the
    usage of its admission and, while pending in a ClusterQueue, its ``pending`` entry."""

    info: WorkloadInfo
    namespace: str
    name: str
    local_queue: str
    priority: int
    created: float
    usage: Mapping[FlavorResource, int]
    pending: PendingView | None


class ClusterView:
    """Read-only access to a ``QuotaState`` (see the module doc). Every method is O(size
    of what it returns), except pending lists: O(n log n) in the ClusterQueue's pending count.
    """

    def __init__(self, cluster: QuotaState, *, eta: EtaBoard | None = None,
                 clock: Callable[[], float] = time.time,
                 awaiting_checks: Collection[WorkloadKey] = frozenset(),
                 eta_advance: bool = True) -> None:
        self.cluster = cluster
        self.eta = eta
        # False when a background refresher computes the ETA runs: the view only reads them.
        self.eta_advance = eta_advance
        self.clock = clock
        # Workloads holding quota whose admission checks are not all Ready yet: reserving,
        # not admitted (Kueue counts them in reservingWorkloads only).
        self.awaiting_checks = awaiting_checks
        self._eta_runs: dict[ClusterQueueName, EtaRun] = {}

    def _eta(self, key: WorkloadKey, cluster_queue: ClusterQueueName,
             ) -> tuple[Eta | None, float | None]:
        if self.eta is None or not isinstance(self.cluster, Scheduler):
            return None, None
        # One answer per ClusterQueue per view (a view serves one request): the board does
        # at most one slice of a cohort's run per call, so a long list costs one slice.
        run = self._eta_runs.get(cluster_queue)
        if run is None:
            run = self._eta_runs[cluster_queue] = self.eta.for_cluster_queue(
                self.cluster, cluster_queue, self.clock(), advance=self.eta_advance)
        got = run.etas.get(key)
        return (got if got is not None else Eta(None, UNKNOWN, "not computed yet"),
                run.computed_at)

    def _local_queues(self) -> list[LocalQueue]:
        c = self.cluster
        return [lq for k in c.local_queue_keys() if (lq := c.local_queue(k)) is not None]

    def _spec_of(self, key: WorkloadKey) -> tuple[str, int, float] | None:
        """(queue name, priority, creation) of a known Workload."""
        wl = self.cluster.domain_workload(key)
        if wl is None:
            return None
        return wl.queue_name, wl.priority, wl.creation

    # ---- ClusterQueues -------------------------------------------------------------------
    def cluster_queue_names(self) -> list[ClusterQueueName]:
        """Known ClusterQueue names, sorted."""
        return self.cluster.cluster_queue_names()

    def cluster_queue(self, name: ClusterQueueName) -> ClusterQueueView | None:
        """One ClusterQueue (None when unknown)."""
        c = self.cluster
        status = c.cluster_queue_status(name)
        spec = c.cluster_queue_spec(name)
        if status is None or spec is None:
            return None
        inadmissible = sum(1 for p in c.pending_workloads(name) if p.inadmissible)
        reserving = admitted = 0
        admitted_usage: dict[FlavorResource, int] = {}
        for key in c.admitted(name):
            info = c.workload(key)
            if info is None:
                continue
            reserving += 1
            if info.assumed or info.admission is None or key in self.awaiting_checks:
                continue
            admitted += 1
            for fr, v in admission_usage(info.admission).items():
                admitted_usage[fr] = admitted_usage.get(fr, 0) + v
        return ClusterQueueView(status, spec.queueing_strategy.value, inadmissible, reserving,
                                admitted, admitted_usage)

    def cluster_queues(self) -> list[ClusterQueueView]:
        """Every ClusterQueue, sorted by name."""
        out = []
        for name in self.cluster_queue_names():
            v = self.cluster_queue(name)
            if v is not None:
                out.append(v)
        return out

    # ---- cohorts -------------------------------------------------------------------------
    def cohort_names(self) -> list[CohortName]:
        """Every cohort (Cohort objects and cohorts named by ClusterQueues), sorted."""
        return self.cluster.cohort_names()

    def cohort(self, name: CohortName) -> CohortView | None:
        """One cohort (None when neither a Cohort object nor a ClusterQueue names it)."""
        c = self.cluster
        st = c.cohort_status(name)
        if st is None:
            return None
        tree = c.tree
        limits: dict[FlavorResource, tuple[int | None, int | None]] = {}
        for r in st.resources:
            fr = FlavorResource(r.flavor, r.resource)
            q = tree.cohort_quota(name, fr)
            limits[fr] = (None, None) if q is None else (q.borrowing_limit, q.lending_limit)
        cohorts, cqs = tree.cohort_children(name)
        spec = c.cohort_spec(name)
        weight = spec.fair_weight_milli if spec is not None else tree.cohort_weight(name)
        share = None
        if isinstance(c, Scheduler) and c.fair_sharing is not None and tree.has_cohort(name):
            share = tree.cohort_share(name)
        return CohortView(st, limits, cohorts, cqs, weight, share)

    def cohorts(self) -> list[CohortView]:
        """Every cohort, sorted by name."""
        return [v for n in self.cohort_names() if (v := self.cohort(n)) is not None]

    # ---- pending Workloads ---------------------------------------------------------------
    def pending(self, name: ClusterQueueName, start: int = 0, stop: int | None = None,
                ) -> list[PendingWorkloadInfo] | None:
        """The ClusterQueue's pending Workloads in order, the slice ``[start, stop)`` (None
        when the ClusterQueue is unknown). Cheap records; ``detail`` adds creation, reasons
        and shortfalls."""
        if self.cluster.cluster_queue_spec(name) is None:
            return None
        return self.cluster.pending_workloads(name, start, stop)

    def local_queue_pending(self, namespace: str, name: str, start: int = 0,
                            stop: int | None = None,
                            ) -> tuple[ClusterQueueName, list[PendingWorkloadInfo]] | None:
        """(its ClusterQueue, pending Workloads of LocalQueue ``namespace/name`` in the
        ClusterQueue's order, the slice ``[start, stop)`` of that LocalQueue's list); None
        when the LocalQueue is unknown. Workloads waiting for a missing ClusterQueue are in
        no queue and not listed (``workload`` shows them)."""
        lq = self._local_queue(namespace, name)
        if lq is None:
            return None
        return lq.cluster_queue, self.cluster.local_queue_pending_workloads(
            lq.cluster_queue, namespace, name, start, stop)

    def detail(self, entry: PendingWorkloadInfo, cluster_queue: ClusterQueueName,
               position_in_local_queue: int) -> PendingView:
        """The full record of one entry of ``pending(...)``."""
        ns, name = entry.workload.split("/", 1)
        spec = self._spec_of(entry.workload)
        created = spec[2] if spec is not None else 0.0
        info = self.cluster.workload(entry.workload)
        shortfalls = info.shortfalls if info is not None else ()
        reason = entry.reason
        eta, eta_at = self._eta(entry.workload, cluster_queue)
        return PendingView(
            entry.workload, ns, name, entry.local_queue, cluster_queue, entry.position,
            position_in_local_queue, entry.priority, created, entry.inadmissible,
            None if reason is None else reason.value,
            None if reason is None else reason.condition_reason, entry.message, shortfalls,
            eta, eta_at,
        )

    def details(self, entries: list[PendingWorkloadInfo], cluster_queue: ClusterQueueName,
                local_queue_positions: Mapping[WorkloadKey, int] | None = None,
                ) -> list[PendingView]:
        """``detail`` for a slice of a pending list; ``local_queue_positions`` maps keys to
        their position in their LocalQueue (computed over the whole list when omitted)."""
        lqpos = local_queue_positions
        if lqpos is None:
            lqpos = local_queue_positions_of(entries)
        return [self.detail(e, cluster_queue, lqpos.get(e.workload, 0)) for e in entries]

    # ---- LocalQueues ---------------------------------------------------------------------
    def _local_queue(self, namespace: str, name: str) -> LocalQueue | None:
        return self.cluster.local_queue(f"{namespace}/{name}")

    def local_queue(self, namespace: str, name: str,
                    pending_by_cq: dict[ClusterQueueName, list[PendingWorkloadInfo]] | None = None,
                    ) -> LocalQueueView | None:
        """One LocalQueue (None when unknown). ``pending_by_cq``: a cache of pending lists
        shared by calls in one pass (each ClusterQueue's list is built once)."""
        lq = self._local_queue(namespace, name)
        return None if lq is None else self._local_queue_view(lq, {} if pending_by_cq is None
                                                              else pending_by_cq)

    def local_queues(self, namespace: str | None = None) -> list[LocalQueueView]:
        """LocalQueues of ``namespace`` (every namespace when None), sorted by key."""
        out = []
        pending: dict[ClusterQueueName, list[PendingWorkloadInfo]] = {}
        for lq in self._local_queues():
            if namespace is not None and lq.namespace != namespace:
                continue
            out.append(self._local_queue_view(lq, pending))
        return out

    def _local_queue_view(self, lq: LocalQueue,
                          pending_by_cq: dict[ClusterQueueName, list[PendingWorkloadInfo]],
                          ) -> LocalQueueView:
        c = self.cluster
        st = c.local_queue_status(lq.key)
        cq = c.cluster_queue_status(lq.cluster_queue)
        if lq.stop_policy != StopPolicy.NONE:
            active, reason, message = False, "Stopped", "LocalQueue is stopped"
        elif cq is None:
            active, reason = False, "ClusterQueueDoesNotExist"
            message = f"Can't submit new workloads to clusterQueue: {lq.cluster_queue} " \
                      "doesn't exist"
        elif not cq.active:
            active, reason = False, "ClusterQueueIsInactive"
            message = f"Can't submit new workloads to clusterQueue: {cq.message}"
        else:
            active, reason, message = True, "Ready", "Can submit new workloads to localQueue"
        pending = st.pending if st is not None else 0
        queued = 0  # in the ClusterQueue's heap; the rest (parked, or no queue) is inadmissible
        if cq is not None:
            entries = pending_by_cq.get(lq.cluster_queue)
            if entries is None:
                entries = pending_by_cq[lq.cluster_queue] = c.pending_workloads(lq.cluster_queue)
            queued = sum(
                1 for p in entries
                if not p.inadmissible and p.local_queue == lq.name
                and p.workload.split("/", 1)[0] == lq.namespace)
        inadmissible = max(0, pending - queued)
        reserving = admitted = 0
        admitted_usage: dict[FlavorResource, int] = {}
        for key in c.admitted(lq.cluster_queue):
            spec = self._spec_of(key)
            if spec is None or spec[0] != lq.name or key.split("/", 1)[0] != lq.namespace:
                continue
            reserving += 1
            info = c.workload(key)
            if (info is None or info.assumed or info.admission is None
                    or key in self.awaiting_checks):
                continue
            admitted += 1
            for fr, v in admission_usage(info.admission).items():
                admitted_usage[fr] = admitted_usage.get(fr, 0) + v
        usage = dict(st.usage) if st is not None else {}
        return LocalQueueView(lq.namespace, lq.name, lq.cluster_queue, active, reason, message,
                              pending, inadmissible, reserving, admitted, usage, admitted_usage)

    # ---- one Workload --------------------------------------------------------------------
    def workload(self, namespace: str, name: str) -> WorkloadView | None:
        """Where Workload ``namespace/name`` stands (None when the core does not know it:
        never seen, finished, or deleted)."""
        key = WorkloadKey(f"{namespace}/{name}")
        info = self.cluster.workload(key)
        spec = self._spec_of(key)
        if info is None or spec is None:
            return None
        queue, priority, created = spec
        usage = admission_usage(info.admission) if info.admission is not None else {}
        pending = None
        if info.state == "pending" and info.cluster_queue is not None:
            entries = self.cluster.pending_workloads(info.cluster_queue)
            lqpos = local_queue_positions_of(entries)
            for e in entries:
                if e.workload == key:
                    pending = self.detail(e, info.cluster_queue, lqpos.get(key, 0))
                    break
        return WorkloadView(info, namespace, name, queue, priority, created, usage, pending)


def local_queue_positions_of(entries: list[PendingWorkloadInfo]) -> dict[WorkloadKey, int]:
    """0-based position of each entry among the entries of the same LocalQueue (namespace and
    name), in list order (Kueue visibility ``positionInLocalQueue``)."""
    seen: dict[tuple[str, str], int] = {}
    out: dict[WorkloadKey, int] = {}
    for e in entries:
        lq = (e.workload.split("/", 1)[0], e.local_queue)
        n = seen.get(lq, 0)
        out[e.workload] = n
        seen[lq] = n + 1
    return out

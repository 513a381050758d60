"""The admission core's state: objects, quota usage and pending queues (Kueue v0.17.1's
"cache" and "queue manager", ``pkg/cache/scheduler``, ``pkg/cache/queue``; reference
3.1-3.3, 3.6). Pure, synchronous.

``QuotaState`` holds ResourceFlavors, ClusterQueues, Cohorts, LocalQueues, namespace labels
and Workloads (pending and admitted), the quota tree (``app.core.quota.QuotaTree``) and one
``PendingQueue`` per ClusterQueue. The reconciler mirrors API objects into it with
``add_*`` / ``update_*`` / ``delete_*``; the scheduling cycle lives in
``app.core.scheduling_cycle.Scheduler`` (a subclass adding ``schedule(now)``). Inputs are
the dataclasses of ``app.core.spec`` and ``app.core.workload``; quantities are the core's
integers per ``FlavorResource`` (``app.core.quantity``); time is always passed in (seconds
since the epoch); nothing here reads a clock or does I/O. Methods never raise for unknown
names (they return False or None, so a watch replay cannot crash the core); a ClusterQueue
or Cohort that cannot be used is kept inactive with a ``ConfigProblem`` (its reason and
message, as Kueue's Active condition).

Workload life cycle in the core::

    pending --assume--> admitted (assumed) --update_workload(with admission)--> admitted
       ^                    |  forget                         |  evict / Evicted condition
       |<-------------------+                                 v
       |<---------- finish_eviction / update(no admission) -- evicting (still holds quota)
    finish / delete_workload: gone, quota released
    admitted --hold_deleted--> held (deleted from the API, its pods still hold resources:
       shown as evicting, still holds quota) --release_deleted / a new Workload of its key-->
       gone, quota released

A Workload is *assumed* from the moment the core admits it until an update carrying its
admission arrives; an update without admission does not undo an assumption (the write may
still be in flight: acceptance KQ-29); only ``forget`` does.

Anything that frees or adds capacity (finish, delete, eviction finished, forget, a
ClusterQueue / flavor / namespace / LocalQueue change) returns the parked (inadmissible)
Workloads of the affected cohort to their queues at the start of the next cycle.

Admission Fair Sharing (``AdmissionFairSharing`` given to the constructor, ClusterQueues with
``admission_mode`` UsageBasedAdmissionFairSharing; Kueue ``pkg/cache/queue/afs``,
``pkg/controller/core/localqueue_controller.go``): per LocalQueue of such a ClusterQueue a
ledger of consumed resources (per resource name, in the core's units, floats) and the time
it was last folded. At the start of a cycle every ledger whose last fold is a sampling
interval old is folded with the usage its LocalQueue holds now (``consumed = consumed x (1
- a) + held x a``, ``a = 1 - 0.5^(elapsed / half-life)``; a half-life of 0 resets it); an
admission folds its LocalQueue's ledger the same way and adds the entry penalty (its usage x
``1 - 0.5^(sampling / half-life)``), which ``forget`` takes back. The queue orders by the
LocalQueue's ``Σ resource weight x consumed (Kubernetes units) / LocalQueue weight``.
Kueue keeps the entry penalty apart until the admission is written and folds it then; the
core folds it at once (its admission writes are confirmed or forgotten within a cycle).

Versions: every change that can alter a nomination in a cohort (usage: assume, forget,
finish, delete, evict, cancel_eviction, finish_eviction, an admitted Workload's update or
rebuild; config: its ClusterQueues' add / update / delete) gives that cohort (or the
cohort-less ClusterQueue) a new version, and config changes that can reach every
ClusterQueue (flavors, namespaces, LocalQueues) a new global epoch. ``_version(name)``
returns both; the scheduler memoizes nominations while it is unchanged. Pending Workloads
arriving or leaving do not change it (they hold no quota and are never preemption
candidates). An Admission Fair Sharing sample changes no version either (no usage moves),
but it reorders a fair-sharing ClusterQueue's own preemption candidates: ``_afs_samples``
counts, per such ClusterQueue, the samples (and seeds) that changed one of its LocalQueues'
ledgers, and the scheduler's nomination memo of that ClusterQueue reads it too.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from app.core.decisions import Pending, PendingReason, QuotaShortfall
from app.core.quantity import is_milli
from app.core.queues import PendingQueue, QueuedIndex
from app.core.quota import QuotaTree, quotas_of
from app.core.spec import (
    AdmissionFairSharing,
    AdmissionMode,
    ClusterQueueSpec,
    CohortSpec,
    ConfigProblem,
    LocalQueue,
    ResourceFlavor,
    StopPolicy,
    admission_checks_problem,
    validate_cluster_queue,
    validate_cohort,
)
from app.core.types import (
    ClusterQueueName,
    CohortName,
    FlavorName,
    FlavorResource,
    ResourceName,
    WorkloadKey,
)
from app.core.workload import Admission, Workload

PENDING, ADMITTED, ORPHAN = "pending", "admitted", "orphan"

# Inactive for these reasons a ClusterQueue admits nothing new but keeps its quota in its
# cohort (its admitted Workloads still run): a stop, or an admission check missing or inactive
# (checks gate admission, not capacity).
_KEEPS_QUOTA = frozenset({"Stopped", "AdmissionCheckNotFound", "AdmissionCheckInactive"})


def admission_usage(admission: Admission) -> dict[FlavorResource, int]:
    """Total usage ``{FlavorResource: amount}`` of an admission (resources with a flavor)."""
    out: dict[FlavorResource, int] = {}
    for psa in admission.pod_set_assignments:
        for r, amount in psa.resource_usage.items():
            flavor = psa.flavors.get(r)
            if flavor is not None and amount:
                fr = FlavorResource(flavor, r)
                out[fr] = out.get(fr, 0) + amount
    return out


@dataclass(slots=True)
class _Record:
    wl: Workload
    state: str = PENDING
    cq: ClusterQueueName | None = None
    usage: dict[FlavorResource, int] = field(default_factory=dict)
    assumed: bool = False
    before_assume: Workload | None = None
    last: tuple[PendingReason, str] | None = None
    shortfalls: tuple[QuotaShortfall, ...] = ()
    # Scheduler cache: the nomination shape of ``shape_of`` (= ``wl.pod_sets`` when valid).
    shape: tuple[object, ...] = ()
    shape_of: tuple[object, ...] | None = None
    # Admission Fair Sharing: the entry penalty its assumption added (``forget`` removes it).
    afs_penalty: dict[ResourceName, float] | None = None
    # Deleted from the API while admitted, its quota held until its pods are gone
    # (``hold_deleted``).
    gone: bool = False

    @property
    def lq_key(self) -> str:
        return f"{self.wl.namespace}/{self.wl.queue_name}"

    @property
    def evicting(self) -> bool:
        return self.state == ADMITTED and self.wl.evicted_at is not None


@dataclass(slots=True)
class _ClusterQueue:
    spec: ClusterQueueSpec
    problem: ConfigProblem | None
    queue: PendingQueue

    @property
    def active(self) -> bool:
        return self.problem is None


@dataclass
class _LqLedger:
    """Admission Fair Sharing ledger of one LocalQueue: decayed consumed resources (core
    units: milli-CPU, bytes, counts; floats) and when they were last folded (None: seeded
    from the LocalQueue's status, stamped at the next cycle)."""

    consumed: dict[ResourceName, float] = field(default_factory=dict)
    last: float | None = None


@dataclass(frozen=True, slots=True)
class LocalQueueFairSharing:
    """A LocalQueue's Admission Fair Sharing state (Kueue LocalQueue
    ``status.fairSharing.admissionFairSharingStatus``): ``consumed`` per resource in the
    core's units (milli-CPU, bytes, counts; decayed, so fractional), ``last_update`` (seconds;
    None before its first fold) and ``usage``, the value its ClusterQueue orders by (lower
    first; infinite for weight 0)."""

    key: str
    cluster_queue: ClusterQueueName
    consumed: Mapping[ResourceName, float]
    last_update: float | None
    usage: float


@dataclass(frozen=True, slots=True)
class FlavorResourceStatus:
    """Quota and usage of one flavor-resource of a ClusterQueue (amounts in the resource's
    unit). ``borrowed``: above nominal (0 without a cohort); ``lent``: of its unused quota,
    what other members use (see ``QuotaTree.lent``); ``available``: what it can take now."""

    flavor: FlavorName
    resource: ResourceName
    nominal: int
    borrowing_limit: int | None
    lending_limit: int | None
    usage: int
    borrowed: int
    lent: int
    available: int


@dataclass(frozen=True, slots=True)
class ClusterQueueStatus:
    """What the status API shows for a ClusterQueue (Kueue ``status.flavorsReservation``,
    ``pendingWorkloads``, ``reservingWorkloads``, ``Active`` condition)."""

    name: ClusterQueueName
    cohort: CohortName | None
    active: bool
    reason: str
    message: str
    resources: tuple[FlavorResourceStatus, ...]
    pending: int
    admitted: int
    evicting: int


@dataclass(frozen=True, slots=True)
class CohortResourceStatus:
    """Quota and usage of one flavor-resource of a cohort's subtree. ``nominal``: the Cohort
    object's own quota (0 if undeclared); ``subtree_quota``: own + what its children lend it
    (Kueue SubtreeQuota); ``usage``: Σ usage of every ClusterQueue below it; ``borrowed``:
    what the subtree takes from its parent (usage of its pool above ``subtree_quota``)."""

    flavor: FlavorName
    resource: ResourceName
    nominal: int
    subtree_quota: int
    usage: int
    borrowed: int


@dataclass(frozen=True, slots=True)
class CohortStatus:
    """What the Cohort status shows: ``explicit`` (a Cohort object exists, else implicit),
    ``parent``, ``active`` with a reason (``Ready``, ``CohortCycle``, ``InvalidSpec``) and a
    message, the ClusterQueues of its subtree, and usage per flavor-resource."""

    name: CohortName
    explicit: bool
    parent: CohortName | None
    active: bool
    reason: str
    message: str
    cluster_queues: tuple[ClusterQueueName, ...]
    resources: tuple[CohortResourceStatus, ...]


@dataclass(frozen=True, slots=True)
class PendingWorkloadInfo:
    """A pending Workload in its ClusterQueue's order (``position`` 0 = next)."""

    workload: WorkloadKey
    position: int
    priority: int
    local_queue: str
    inadmissible: bool
    reason: PendingReason | None
    message: str


@dataclass(frozen=True, slots=True)
class WorkloadInfo:
    """Where one Workload stands: ``state`` pending / admitted / evicting."""

    workload: WorkloadKey
    state: str
    cluster_queue: ClusterQueueName | None
    admission: Admission | None
    assumed: bool
    inadmissible: bool
    reason: PendingReason | None
    message: str
    shortfalls: tuple[QuotaShortfall, ...]


@dataclass(frozen=True, slots=True)
class LocalQueueStatus:
    """Kueue LocalQueue status counts and usage per flavor-resource of admitted Workloads."""

    key: str
    cluster_queue: ClusterQueueName
    pending: int
    admitted: int
    usage: Mapping[FlavorResource, int]


class QuotaState:
    """State and mutations of the core; see the module docstring. Methods never raise for
    unknown names: they return False (or None) so a watch replay cannot crash the core."""

    def __init__(self, admission_fair_sharing: AdmissionFairSharing | None = None) -> None:
        # Kueue Configuration admissionFairSharing (None: off; see the module docstring):
        # the ClusterQueues using it, each LocalQueue's ledger, the usage its admitted
        # Workloads hold per resource (LocalQueues of those ClusterQueues only), the ordering
        # value per LocalQueue (dropped when its ledger or weight changes) and the time of
        # the next due fold.
        self.admission_fair_sharing = admission_fair_sharing
        # How a Workload this state evicted is ordered in its queue once pending again
        # (``finish_eviction``): True, by its eviction time (pykueue's default, acceptance
        # KQ-18; Kueue v0.17.1 only for an InCohortReclaimWhileBorrowing preemption with
        # PrioritySortingWithinCohort off); False, by its
        # creation time (Kueue v0.17.1 as shipped: ``GetQueueOrderTimestamp`` takes the
        # eviction time only after a PodsReady timeout or an admission check, which this
        # state never makes). Settings.scheduling.preempted_queue_order.
        self.order_evicted_by_eviction_time = True
        self._afs_cqs: set[ClusterQueueName] = set()
        self._afs_ledgers: dict[str, _LqLedger] = {}
        self._afs_held: dict[str, dict[ResourceName, int]] = {}
        self._afs_values: dict[str, float] = {}
        self._afs_next: float | None = None
        # Per fair-sharing ClusterQueue: how many times a sample (or a seed) changed one of
        # its LocalQueues' ledgers. No version changes then (no usage moved), but the order
        # of the ClusterQueue's own preemption candidates may: the scheduler's nomination
        # memo of the ClusterQueue counts this as part of its version.
        self._afs_samples: dict[ClusterQueueName, int] = {}
        self.tree = QuotaTree()
        self._flavors: dict[FlavorName, ResourceFlavor] = {}
        self._cqs: dict[ClusterQueueName, _ClusterQueue] = {}
        # ``_cqs``'s names sorted (the scheduling cycle's order), None after a ClusterQueue
        # came or went: not sorted again every cycle.
        self._cq_order: list[ClusterQueueName] | None = None
        # The ClusterQueues whose pending queue has queued (not parked) Workloads, in name
        # order: every ClusterQueue's queue is bound to it (``PendingQueue.bind``) and keeps
        # it up to date, so a cycle visits those alone, not the idle ones.
        self._queued = QueuedIndex()
        # ClusterQueue -> (the queue order it was built from, LocalQueue (namespace, name) ->
        # positions in that order): ``local_queue_pending_workloads``.
        self._lq_groups: dict[ClusterQueueName, tuple[tuple[tuple[WorkloadKey, bool], ...],
                                                      dict[tuple[str, str], list[int]]]] = {}
        self._cohorts: dict[CohortName, CohortSpec] = {}
        # ClusterQueues with a minimum runtime before preemption (so the scheduler looks for
        # protected victims only when one exists).
        self._min_runtime_cqs: set[ClusterQueueName] = set()
        # ClusterQueues / LocalQueues whose stopPolicy is HoldAndDrain (``drain``).
        self._draining_cqs: set[ClusterQueueName] = set()
        self._draining_lqs: set[str] = set()
        # Cohort -> the problem that disables its subtree (a cycle, an invalid Cohort on the
        # way to the root); recomputed by ``_rebuild_cohorts``.
        self._cohort_problems: dict[CohortName, ConfigProblem] = {}
        self._lqs: dict[str, LocalQueue] = {}
        # AdmissionCheck name -> Active (Kueue v1beta2 AdmissionCheck ``Active`` condition).
        self._checks: dict[str, bool] = {}
        self._mk_checks: set[str] = set()  # the checks whose controller is MultiKueue's
        self._namespaces: dict[str, dict[str, str]] = {}
        self._wls: dict[WorkloadKey, _Record] = {}
        self._admitted_by_cq: dict[ClusterQueueName, dict[WorkloadKey, None]] = {}
        self._pending_by_lq: dict[str, dict[WorkloadKey, None]] = {}
        self._requeue: dict[ClusterQueueName, None] = {}
        self._orphan_news: dict[WorkloadKey, None] = {}
        # Versions (see module docstring): values come from one increasing tick, so a scope
        # that disappears and comes back never reuses an old version.
        self._tick = 0
        self._epoch = 0
        self._scope_versions: dict[tuple[str, str], int] = {}
        self._scopes: dict[ClusterQueueName, tuple[str, str]] = {}  # _scope memo (tree shape)
        # Counts every change of queues or usage (pending ones included, unlike the versions):
        # readers that cache a view of the state (the ETA) compare it to know if it moved.
        self.generation = 0

    # ---- ResourceFlavors ---------------------------------------------------------------------
    def add_flavor(self, flavor: ResourceFlavor) -> None:
        """Add or replace a ResourceFlavor; ClusterQueues are re-validated and requeued."""
        self._flavors[flavor.name] = flavor
        self._revalidate_all()

    update_flavor = add_flavor

    def delete_flavor(self, name: FlavorName) -> bool:
        """Remove a ResourceFlavor; ClusterQueues naming it become inactive (FlavorNotFound)."""
        if self._flavors.pop(name, None) is None:
            return False
        self._revalidate_all()
        return True

    # ---- AdmissionChecks ---------------------------------------------------------------------
    def set_admission_check(self, name: str, active: bool, multikueue: bool = False) -> None:
        """Add or update AdmissionCheck ``name`` (``active``: its Active condition is True;
        ``multikueue``: its controller is MultiKueue's); the ClusterQueues naming it are
        re-validated (Kueue: a ClusterQueue naming a missing or inactive check, or two
        MultiKueue checks, is inactive)."""
        if self._checks.get(name) is not active or (name in self._mk_checks) != multikueue:
            self._checks[name] = active
            if multikueue:
                self._mk_checks.add(name)
            else:
                self._mk_checks.discard(name)
            self._revalidate_all()

    def delete_admission_check(self, name: str) -> bool:
        """Remove AdmissionCheck ``name``; ClusterQueues naming it become inactive."""
        if self._checks.pop(name, None) is None:
            return False
        self._mk_checks.discard(name)
        self._revalidate_all()
        return True

    def _problem_of(self, spec: ClusterQueueSpec) -> ConfigProblem | None:
        problem = validate_cluster_queue(spec, self._flavors)
        if problem is None and spec.admission_checks:
            problem = admission_checks_problem(spec, self._checks, self._mk_checks)
        if problem is None and spec.cohort is not None:
            problem = self._cohort_problems.get(spec.cohort)
        return problem

    def _revalidate_all(self) -> None:
        self._bump_all()
        for name, cq in self._cqs.items():
            problem = self._problem_of(cq.spec)
            if problem != cq.problem:
                cq.problem = problem
                self.tree.set_cluster_queue(name, cq.spec.cohort, self._quotas(cq))
                self._scopes.clear()
            self._requeue[name] = None

    def _quotas(self, cq: _ClusterQueue) -> dict:
        # An invalid ClusterQueue lends and admits nothing; a stopped one keeps its quota, and
        # so does one whose object became unreadable (its spec is the last readable one).
        if cq.problem is None or cq.problem.reason in _KEEPS_QUOTA \
                or cq.spec.object_problem is not None:
            return quotas_of(cq.spec)
        return {}

    # ---- ClusterQueues -------------------------------------------------------------------------
    def add_cluster_queue(self, spec: ClusterQueueSpec) -> None:
        """Add or replace a ClusterQueue. An invalid spec makes it inactive (never raises).

        A spec with ``object_problem`` replacing a known ClusterQueue keeps that one's resource
        groups and cohort (the last readable spec), so the usage of its admitted Workloads
        stays in its cohort and nothing is lent or borrowed on the strength of unread quotas.
        """
        name = spec.name
        old = self._cqs.get(name)
        if spec.object_problem is not None and old is not None:
            spec = replace(old.spec, object_problem=spec.object_problem)
        if old is not None:
            self._mark_cohort(name)
        problem = self._problem_of(spec)
        cq = _ClusterQueue(spec, problem, old.queue if old is not None else PendingQueue())
        if old is None:
            self._cq_order = None
            cq.queue.bind(self._queued, name)
        self._cqs[name] = cq
        self.tree.set_cluster_queue(name, spec.cohort, self._quotas(cq))
        self.tree.set_weight(name, spec.fair_weight_milli)
        if spec.min_runtime_s:
            self._min_runtime_cqs.add(name)
        else:
            self._min_runtime_cqs.discard(name)
        if spec.stop_policy == StopPolicy.HOLD_AND_DRAIN:
            self._draining_cqs.add(name)
        else:
            self._draining_cqs.discard(name)
        self._scopes.clear()
        self._set_fair_sharing(cq)
        if old is None:
            for key in self._admitted_by_cq.get(name, {}):
                self.tree.add_usage(name, self._wls[key].usage)
            self._reroute_all()
        self._mark_cohort(name)

    update_cluster_queue = add_cluster_queue

    def delete_cluster_queue(self, name: ClusterQueueName) -> bool:
        """Remove a ClusterQueue; its pending Workloads wait for it ("doesn't exist"); its
        admitted ones keep their records and count again if it comes back."""
        if name not in self._cqs:
            return False
        self._mark_cohort(name)
        cq = self._cqs.pop(name)
        self._cq_order = None
        cq.queue.bind(None, name)
        self._lq_groups.pop(name, None)
        self._min_runtime_cqs.discard(name)
        if name in self._afs_cqs:
            self._afs_cqs.discard(name)
            self._afs_rebuild_held()
        self._afs_samples.pop(name, None)
        self._draining_cqs.discard(name)
        self.tree.remove_cluster_queue(name)
        self._scopes.clear()
        for key in [*cq.queue.active(), *cq.queue.parked()]:
            self._route(self._wls[key])
        return True

    # ---- Cohorts -------------------------------------------------------------------------------
    def add_cohort(self, spec: CohortSpec) -> None:
        """Add or replace a Cohort object (Kueue v1beta2 Cohort). Its parent, own quotas and
        limits take effect at once; a cycle or an invalid spec makes every ClusterQueue
        below it inactive with a reason naming it (never raises)."""
        self._cohorts[spec.name] = spec
        self._rebuild_cohorts()

    update_cohort = add_cohort

    def delete_cohort(self, name: CohortName) -> bool:
        """Remove a Cohort object; its ClusterQueues stay in an implicit cohort of that
        name (no own quota, no parent)."""
        if self._cohorts.pop(name, None) is None:
            return False
        self._rebuild_cohorts()
        return True

    def _rebuild_cohorts(self) -> None:
        """Apply every Cohort object to the tree: find cycles (Kueue: "a cycle disables every
        member"), give cohorts of a cycle no parent, and re-validate every ClusterQueue."""
        specs = self._cohorts
        problems: dict[CohortName, ConfigProblem] = {}
        for name in specs:
            chain: list[CohortName] = []
            n: CohortName | None = name
            while n is not None and n in specs and n not in chain:
                chain.append(n)
                n = specs[n].parent
            if n is not None and n in chain:
                cycle = chain[chain.index(n):] + [n]
                problems[name] = ConfigProblem(
                    "CohortCycle",
                    "spec.parentName",
                    "Can't admit new workloads: cohort " + name + " is in or below a cycle of "
                    "parentName: " + " -> ".join(cycle),
                )
        # An invalid Cohort spec disables its subtree too.
        for name, spec in specs.items():
            bad = validate_cohort(spec)
            if bad is not None and name not in problems:
                problems[name] = ConfigProblem(
                    bad.reason, bad.field, f"{bad.message} (Cohort {name})"
                )
        # Descendants (through ClusterQueues' cohorts: walk each cohort's ancestors).
        def inherited(name: CohortName) -> ConfigProblem | None:
            seen: set[CohortName] = set()
            n: CohortName | None = name
            while n is not None and n not in seen:
                if n in problems:
                    return problems[n]
                seen.add(n)
                n = specs[n].parent if n in specs else None
            return None

        names = set(specs) | {cq.spec.cohort for cq in self._cqs.values() if cq.spec.cohort}
        self._cohort_problems = {
            n: p for n in names if (p := inherited(n)) is not None
        }
        tree = self.tree
        for name in list(tree.cohort_names()):
            if name not in specs:
                tree.remove_cohort(name)
        # Detach first so re-parenting in any order never makes a transient cycle.
        for name in specs:
            tree.set_cohort(name, None, {})
        for name, spec in specs.items():
            cyclic = problems.get(name) is not None and problems[name].reason == "CohortCycle"
            ok = name not in problems
            tree.set_cohort(name, None if cyclic else spec.parent, quotas_of(spec) if ok else {})
            tree.set_weight(name, spec.fair_weight_milli, cohort=True)
        self._scopes.clear()
        self._revalidate_all()

    def _mark_cohort(self, name: ClusterQueueName) -> None:
        if not self.tree.has(name):
            return
        self._bump(name)
        cohort = self.tree.root_of(name)
        if cohort is None:
            self._requeue[name] = None
        else:
            self._requeue.update(dict.fromkeys(self.tree.members(cohort)))

    # ---- LocalQueues and namespaces ------------------------------------------------------------
    def add_local_queue(self, lq: LocalQueue) -> None:
        """Add or replace a LocalQueue; its pending Workloads are (re)routed. The same
        LocalQueue again (a status-only update) changes nothing."""
        old = self._lqs.get(lq.key)
        if old == lq:
            return
        self._lqs[lq.key] = lq
        self._afs_values.pop(lq.key, None)
        if self._afs_cqs and (old is None or old.cluster_queue != lq.cluster_queue):
            self._afs_rebuild_held()
        if lq.stop_policy == StopPolicy.HOLD_AND_DRAIN:
            self._draining_lqs.add(lq.key)
        else:
            self._draining_lqs.discard(lq.key)
        self._bump_all()
        self._reroute_lq(lq.key)

    update_local_queue = add_local_queue

    def delete_local_queue(self, key: str) -> bool:
        """Remove LocalQueue ``namespace/name``; its pending Workloads wait for it."""
        if self._lqs.pop(key, None) is None:
            return False
        # Kueue drops a deleted LocalQueue's fair sharing history.
        self._afs_ledgers.pop(key, None)
        self._afs_values.pop(key, None)
        if self._afs_cqs:
            self._afs_rebuild_held()
        self._draining_lqs.discard(key)
        self._bump_all()
        self._reroute_lq(key)
        return True

    def set_namespace(self, name: str, labels: Mapping[str, str]) -> None:
        """Set a namespace's labels (for ClusterQueue ``namespaceSelector``); requeues all."""
        self._namespaces[name] = dict(labels)
        self._bump_all()
        self._requeue.update(dict.fromkeys(self._cqs))

    add_namespace = update_namespace = set_namespace

    def delete_namespace(self, name: str) -> bool:
        """Forget a namespace's labels."""
        if self._namespaces.pop(name, None) is None:
            return False
        self._bump_all()
        return True

    def namespace_matches(self, spec: ClusterQueueSpec, namespace: str) -> bool:
        """Kueue ``namespaceSelector``: None matches nothing, ``{}`` everything."""
        sel = spec.namespace_selector
        if sel is None:
            return False
        if sel.selects_all:
            return True  # {}: every namespace (the usual ClusterQueue)
        return sel.matches(self._namespaces.get(namespace, {}))

    # ---- Workloads -----------------------------------------------------------------------------
    def add_workload(self, wl: Workload) -> None:
        """Add a Workload, or update it if known. With ``admission`` it holds quota in
        ``admission.cluster_queue`` (this is how a restart rebuilds usage); without, it
        waits in its LocalQueue's ClusterQueue."""
        rec = self._wls.get(wl.key)
        if rec is not None and rec.gone:
            self.delete_workload(wl.key)  # a new object of a held one's key: it is the truth
            rec = None
        if rec is not None:
            self.update_workload(wl)
            return
        rec = _Record(wl)
        self._wls[wl.key] = rec
        if wl.admission is not None:
            self._hold(rec, wl.admission)
        else:
            self._route(rec)

    def update_workload(self, wl: Workload) -> None:
        """Apply a new version of a Workload (the API object is the truth, except that an
        update without admission does not undo an assumption still being written)."""
        rec = self._wls.get(wl.key)
        if rec is None or rec.gone:
            self.add_workload(wl)
            return
        if rec.state == ADMITTED:
            # Any change of an admitted Workload (priority, reservation or eviction time) can
            # change the preemption candidates of its cohort.
            self._bump_cq(rec.cq)
            if wl.admission is None:
                if rec.assumed:
                    # Our admission write has not landed yet: keep the reservation.
                    rec.wl = replace(
                        wl,
                        admission=rec.wl.admission,
                        quota_reserved_at=rec.wl.quota_reserved_at,
                        evicted_at=rec.wl.evicted_at,
                    )
                    return
                self._release(rec)
                rec.wl = wl
                self._route(rec)
                return
            if (wl.admission != rec.wl.admission) or wl.priority != rec.wl.priority:
                self._release(rec)
                rec.wl = wl
                self._hold(rec, wl.admission)
            else:
                rec.wl = wl
            rec.assumed = False
            rec.before_assume = None
            return
        # pending / orphan
        if wl.admission is not None:
            self._unqueue(rec)
            rec.wl = wl
            self._hold(rec, wl.admission)
            return
        if (rec.wl.queue_name, rec.wl.namespace) != (wl.queue_name, wl.namespace):
            self._unqueue(rec)  # from its old LocalQueue: rec.lq_key follows rec.wl
        rec.wl = wl
        self._route(rec)

    def delete_workload(self, key: WorkloadKey) -> bool:
        """Forget a Workload (deleted from the API); its quota is released."""
        rec = self._wls.pop(key, None)
        if rec is None:
            return False
        if rec.state == ADMITTED:
            self._release(rec)
        else:
            self._unqueue(rec)
        return True

    def hold_deleted(self, key: WorkloadKey, now: float) -> bool:
        """Workload ``key`` was deleted from the API while its pods may still hold
        resources: if it holds quota (admitted, not merely assumed) keep that quota until
        ``release_deleted``, shown as being evicted since ``now`` (if not marked before) so
        it is no preemption victim to pick again (a preemptor waits for it as for a victim
        being evicted); True then. Otherwise it is forgotten at once (``delete_workload``)
        and False returned."""
        rec = self._wls.get(key)
        if rec is None or rec.state != ADMITTED or rec.assumed:
            self.delete_workload(key)
            return False
        rec.gone = True
        if rec.wl.evicted_at is None:
            rec.wl = replace(rec.wl, evicted_at=now)
        self._bump_cq(rec.cq)
        self.generation += 1
        return True

    def release_deleted(self, key: WorkloadKey) -> bool:
        """Release the quota ``hold_deleted`` kept for ``key`` (its pods are gone); False
        when ``key`` is not held so (a new Workload of that key replaced it meanwhile)."""
        rec = self._wls.get(key)
        if rec is None or not rec.gone:
            return False
        return self.delete_workload(key)

    def assume(self, key: WorkloadKey, admission: Admission, now: float) -> bool:
        """Reserve ``admission``'s usage for pending ``key`` before its status write lands
        (Kueue scheduler ``assume``). ``schedule`` does this for every Admit it returns."""
        rec = self._wls.get(key)
        if rec is None or rec.state == ADMITTED:
            return False
        self._unqueue(rec)
        rec.before_assume = rec.wl
        rec.wl = replace(rec.wl, admission=admission, quota_reserved_at=now, evicted_at=None)
        afs = admission.cluster_queue in self._afs_cqs
        if afs:
            self._afs_fold(rec.lq_key, now)  # the usage held until now, before this one
        self._hold(rec, admission)
        rec.assumed = True
        if afs:
            self._afs_penalize(rec)
        return True

    def forget(self, key: WorkloadKey) -> bool:
        """Undo ``assume`` (the admission write failed): release and requeue the Workload."""
        rec = self._wls.get(key)
        if rec is None or not rec.assumed:
            return False
        if rec.afs_penalty:
            ledger = self._afs_ledgers.get(rec.lq_key)
            if ledger is not None:
                for r, v in rec.afs_penalty.items():
                    ledger.consumed[r] = max(0.0, ledger.consumed.get(r, 0.0) - v)
                self._afs_values.pop(rec.lq_key, None)
        rec.afs_penalty = None
        self._release(rec)
        rec.wl = rec.before_assume or replace(rec.wl, admission=None, quota_reserved_at=None)
        rec.assumed, rec.before_assume = False, None
        self._route(rec)
        return True

    def finish(self, key: WorkloadKey) -> bool:
        """The Workload finished (Finished=True): release its quota and forget it."""
        return self.delete_workload(key)

    def evict(self, key: WorkloadKey, now: float) -> bool:
        """Mark admitted ``key`` as being evicted at ``now``; it keeps its quota until
        ``finish_eviction``. ``schedule`` does this for every preemption victim."""
        rec = self._wls.get(key)
        if rec is None or rec.state != ADMITTED or rec.evicting:
            return False
        rec.wl = replace(rec.wl, evicted_at=now)
        self._bump_cq(rec.cq)
        return True

    def drain(self, now: float) -> list[tuple[WorkloadKey, str, str]]:
        """Admitted Workloads that a ``HoldAndDrain`` stop policy evicts (Kueue ClusterQueue
        and LocalQueue ``spec.stopPolicy``): each is marked evicting at ``now`` (``evict``)
        and returned once as ``(key, reason, message)`` with reason ``ClusterQueueStopped`` or
        ``LocalQueueStopped``. O(admitted Workloads of draining queues)."""
        out: list[tuple[WorkloadKey, str, str]] = []
        for name in sorted(self._draining_cqs):
            for key in list(self._admitted_by_cq.get(name, {})):
                if self.evict(key, now):
                    out.append((key, "ClusterQueueStopped",
                                f"The ClusterQueue {name} is stopped (HoldAndDrain)"))
        for lq_key in sorted(self._draining_lqs):
            lq = self._lqs[lq_key]
            for key in list(self._admitted_by_cq.get(lq.cluster_queue, {})):
                if self._wls[key].lq_key == lq.key and self.evict(key, now):
                    out.append((key, "LocalQueueStopped",
                                f"The LocalQueue {lq.name} is stopped (HoldAndDrain)"))
        return out

    def cancel_eviction(self, key: WorkloadKey) -> bool:
        """Undo ``evict`` (the eviction write failed); the Workload stays admitted."""
        rec = self._wls.get(key)
        if rec is None or not rec.evicting or rec.gone:
            return False
        rec.wl = replace(rec.wl, evicted_at=None)
        self._bump_cq(rec.cq)
        return True

    def finish_eviction(self, key: WorkloadKey, now: float | None = None) -> bool:
        """The evicted Workload stopped: release its quota and queue it again, ordered by
        its eviction time (``now`` if it was never marked), or by its creation time when
        ``order_evicted_by_eviction_time`` is False (Kueue v0.17.1's order)."""
        rec = self._wls.get(key)
        if rec is None or rec.state != ADMITTED or rec.gone:
            return False
        evicted_at = rec.wl.evicted_at if rec.wl.evicted_at is not None else now
        if not self.order_evicted_by_eviction_time:
            evicted_at = None
        self._release(rec)
        rec.wl = replace(rec.wl, admission=None, quota_reserved_at=None, evicted_at=evicted_at)
        rec.assumed, rec.before_assume = False, None
        self._route(rec)
        return True

    # ---- Admission Fair Sharing ----------------------------------------------------------------
    def _set_fair_sharing(self, cq: _ClusterQueue) -> None:
        """Turn Admission Fair Sharing on or off for ``cq`` after a spec change."""
        name = cq.spec.name
        on = (self.admission_fair_sharing is not None
              and cq.spec.admission_mode == AdmissionMode.USAGE_BASED)
        if on == (name in self._afs_cqs):
            return
        if on:
            self._afs_cqs.add(name)
        else:
            self._afs_cqs.discard(name)
        q = cq.queue
        lq_of = {k: self._wls[k].lq_key for k in (*q.active(), *q.parked())}
        q.set_fair_sharing(self._afs_value if on else None, lq_of)
        self._afs_rebuild_held()
        self._afs_next = 0.0  # stamp the new ledgers at the next cycle

    def _afs_rebuild_held(self) -> None:
        """Recount the usage held per LocalQueue of the fair-sharing ClusterQueues."""
        self._afs_held = {}
        for cq in self._afs_cqs:
            for key in self._admitted_by_cq.get(cq, {}):
                self._afs_add_held(self._wls[key], 1)

    def _afs_add_held(self, rec: _Record, sign: int) -> None:
        held = self._afs_held.setdefault(rec.lq_key, {})
        for fr, v in rec.usage.items():
            held[fr.resource] = held.get(fr.resource, 0) + sign * v

    def _afs_fold(self, lq: str, now: float) -> None:
        """Fold LocalQueue ``lq``'s ledger with the usage it holds, up to ``now``."""
        cfg = self.admission_fair_sharing
        assert cfg is not None
        ledger = self._afs_ledgers.get(lq)
        if ledger is None:
            ledger = self._afs_ledgers[lq] = _LqLedger(last=now)
        if ledger.last is None:
            ledger.last = now
            return
        elapsed = now - ledger.last
        if elapsed <= 0:
            return
        if cfg.half_life_s == 0:
            ledger.consumed = {}  # Kueue: a half-life of 0 keeps no history
        else:
            a = cfg.alpha(elapsed)
            held = self._afs_held.get(lq, {})
            ledger.consumed = {r: ledger.consumed.get(r, 0.0) * (1 - a) + held.get(r, 0) * a
                               for r in {*ledger.consumed, *held}}
        ledger.last = now
        self._afs_values.pop(lq, None)

    def _afs_penalize(self, rec: _Record) -> None:
        """Add the entry penalty of just-assumed ``rec`` to its LocalQueue's ledger."""
        cfg = self.admission_fair_sharing
        assert cfg is not None
        a = cfg.alpha(cfg.sampling_s)
        if a == 0:
            return
        penalty: dict[ResourceName, float] = {}
        for fr, v in rec.usage.items():
            penalty[fr.resource] = penalty.get(fr.resource, 0.0) + v * a
        ledger = self._afs_ledgers[rec.lq_key]
        for r, v in penalty.items():
            ledger.consumed[r] = ledger.consumed.get(r, 0.0) + v
        rec.afs_penalty = penalty
        self._afs_values.pop(rec.lq_key, None)

    def _afs_sample(self, now: float) -> None:
        """Fold every LocalQueue ledger of a fair-sharing ClusterQueue whose last fold is a
        sampling interval old (Kueue's LocalQueue reconciler, every
        ``usageSamplingInterval``); cost O(those LocalQueues), only when one is due."""
        cfg = self.admission_fair_sharing
        if cfg is None or not self._afs_cqs or (self._afs_next is not None
                                                 and now < self._afs_next):
            return
        nxt: float | None = None
        for key, lq in self._lqs.items():
            if lq.cluster_queue not in self._afs_cqs:
                continue
            ledger = self._afs_ledgers.get(key)
            if ledger is None or ledger.last is None or now - ledger.last >= cfg.sampling_s:
                before = None if ledger is None else dict(ledger.consumed)
                self._afs_fold(key, now)
                ledger = self._afs_ledgers[key]
                if ledger.consumed != before:
                    self._afs_sampled(lq.cluster_queue)
            due = (ledger.last or now) + cfg.sampling_s
            nxt = due if nxt is None else min(nxt, due)
        self._afs_next = nxt

    def _afs_sampled(self, cq: ClusterQueueName) -> None:
        self._afs_samples[cq] = self._afs_samples.get(cq, 0) + 1

    def _afs_wakeup(self) -> float | None:
        """When the next fold is due, if one can change a ledger other than by the decay
        every LocalQueue shares (some LocalQueue holds usage), else None."""
        if self._afs_next is None or not any(
                v for held in self._afs_held.values() for v in held.values()):
            return None
        return self._afs_next

    def _afs_value(self, lq: str) -> float:
        """What a fair-sharing ClusterQueue orders LocalQueue ``lq`` by (Kueue
        ``CalculateUsage``): ``Σ weight(resource) x consumed`` in Kubernetes units (cores,
        bytes, counts) divided by the LocalQueue's weight; infinite for weight 0."""
        v = self._afs_values.get(lq)
        if v is not None:
            return v
        cfg = self.admission_fair_sharing
        ledger = self._afs_ledgers.get(lq)
        total = 0.0
        if cfg is not None and ledger is not None:
            weights = cfg.resource_weights
            for r in sorted(ledger.consumed):
                amount = ledger.consumed[r] / 1000 if is_milli(r) else ledger.consumed[r]
                total += weights.get(r, 1.0) * amount
        spec = self._lqs.get(lq)
        w = (spec.fair_weight_milli if spec is not None else 1000) / 1000
        v = math.inf if w <= 0 else total / w
        self._afs_values[lq] = v
        return v

    def seed_local_queue_usage(self, key: str, consumed: Mapping[ResourceName, float]) -> bool:
        """Start LocalQueue ``key``'s Admission Fair Sharing ledger from its persisted status
        (``status.fairSharing.admissionFairSharingStatus.consumedResources``, in the core's
        units) when the core has none yet, as Kueue seeds it after a restart; False when a
        ledger exists (the core's own history wins)."""
        if key in self._afs_ledgers:
            return False
        self._afs_ledgers[key] = _LqLedger({r: float(v) for r, v in consumed.items()}, None)
        self._afs_values.pop(key, None)
        self._afs_next = 0.0
        lq = self._lqs.get(key)
        if lq is not None and lq.cluster_queue in self._afs_cqs:
            self._afs_sampled(lq.cluster_queue)
        return True

    def local_queue_fair_sharing(self, key: str) -> LocalQueueFairSharing | None:
        """Admission Fair Sharing state of LocalQueue ``key`` (None unless its ClusterQueue
        uses it)."""
        lq = self._lqs.get(key)
        if lq is None or lq.cluster_queue not in self._afs_cqs:
            return None
        ledger = self._afs_ledgers.get(key) or _LqLedger()
        return LocalQueueFairSharing(key, lq.cluster_queue, dict(ledger.consumed), ledger.last,
                                     self._afs_value(key))

    # ---- versions ------------------------------------------------------------------------------
    def _scope(self, name: ClusterQueueName) -> tuple[str, str]:
        """The version scope of a ClusterQueue in the tree: its cohort, or itself (memoized
        until the tree's shape changes)."""
        scope = self._scopes.get(name)
        if scope is None:
            cohort = self.tree.root_of(name)  # the whole tree: usage anywhere changes it
            scope = ("cohort", cohort) if cohort is not None else ("cq", name)
            self._scopes[name] = scope
        return scope

    def _bump(self, name: ClusterQueueName) -> None:
        """New version for the scope of ClusterQueue ``name`` (which must be in the tree)."""
        self.generation += 1
        self._tick += 1
        self._scope_versions[self._scope(name)] = self._tick

    def _bump_cq(self, name: ClusterQueueName | None) -> None:
        if name is not None and self.tree.has(name):
            self._bump(name)

    def _bump_all(self) -> None:
        self.generation += 1
        self._tick += 1
        self._epoch = self._tick

    def _version(self, name: ClusterQueueName) -> tuple[int, int]:
        """``(global epoch, scope version)`` of ClusterQueue ``name`` (in the tree): equal
        values mean nothing that a nomination in its cohort reads has changed."""
        scope = self._scope(name)
        v = self._scope_versions.get(scope)
        if v is None:
            self._tick += 1
            v = self._scope_versions[scope] = self._tick
        return self._epoch, v

    # ---- internals -----------------------------------------------------------------------------
    def _hold(self, rec: _Record, admission: Admission) -> None:
        rec.state, rec.cq = ADMITTED, admission.cluster_queue
        rec.usage = admission_usage(admission)
        rec.last, rec.shortfalls = None, ()
        self._admitted_by_cq.setdefault(rec.cq, {})[rec.wl.key] = None
        if rec.cq in self._afs_cqs:
            self._afs_add_held(rec, 1)
        if self.tree.has(rec.cq):
            self.tree.add_usage(rec.cq, rec.usage)
            self._bump(rec.cq)

    def _release(self, rec: _Record) -> None:
        cq = rec.cq
        assert cq is not None
        members = self._admitted_by_cq.get(cq, {})
        members.pop(rec.wl.key, None)
        if not members:
            self._admitted_by_cq.pop(cq, None)
        if cq in self._afs_cqs:
            self._afs_add_held(rec, -1)
        rec.afs_penalty = None
        if self.tree.has(cq):
            self.tree.remove_usage(cq, rec.usage)
            self._mark_cohort(cq)
        rec.state, rec.cq, rec.usage = PENDING, None, {}

    def _unqueue(self, rec: _Record) -> None:
        self.generation += 1
        if rec.cq is not None and rec.state == PENDING:
            cq = self._cqs.get(rec.cq)
            if cq is not None:
                cq.queue.remove(rec.wl.key)
        lq = self._pending_by_lq.get(rec.lq_key)
        if lq is not None:
            lq.pop(rec.wl.key, None)
            if not lq:
                del self._pending_by_lq[rec.lq_key]
        self._orphan_news.pop(rec.wl.key, None)
        rec.cq = None
        rec.state = PENDING

    def _route(self, rec: _Record) -> None:
        """Put a pending Workload in its ClusterQueue's heap (or mark it orphaned)."""
        self.generation += 1
        key = rec.wl.key
        self._pending_by_lq.setdefault(rec.lq_key, {})[key] = None
        lq = self._lqs.get(rec.lq_key)
        target = None if lq is None or lq.stop_policy != StopPolicy.NONE else lq.cluster_queue
        if target is None or target not in self._cqs:
            if rec.cq is not None and rec.cq in self._cqs and rec.state == PENDING:
                self._cqs[rec.cq].queue.remove(key)
            rec.state, rec.cq = ORPHAN, None
            why = self._orphan_reason(rec)
            if rec.last != why:
                self._orphan_news[key] = None
            return
        if rec.cq is not None and rec.cq != target and rec.state == PENDING:
            old = self._cqs.get(rec.cq)
            if old is not None:
                old.queue.remove(key)
        self._orphan_news.pop(key, None)
        rec.state, rec.cq = PENDING, target
        self._cqs[target].queue.push(rec.wl)

    def _reroute_lq(self, lq_key: str) -> None:
        for key in list(self._pending_by_lq.get(lq_key, {})):
            self._route(self._wls[key])

    def _reroute_all(self) -> None:
        for lq_key in list(self._pending_by_lq):
            for key in list(self._pending_by_lq.get(lq_key, {})):
                rec = self._wls[key]
                if rec.state == ORPHAN:
                    self._route(rec)

    def _orphan_reason(self, rec: _Record) -> tuple[PendingReason, str]:
        """Why a pending Workload is in no ClusterQueue's heap: its LocalQueue is missing or
        stopped (Kueue LocalQueue ``stopPolicy``), or its ClusterQueue is missing."""
        lq = self._lqs.get(rec.lq_key)
        if lq is None:
            return (
                PendingReason.LOCAL_QUEUE_NOT_FOUND,
                f"LocalQueue {rec.wl.queue_name} doesn't exist in namespace {rec.wl.namespace}",
            )
        if lq.stop_policy != StopPolicy.NONE:
            return (
                PendingReason.LOCAL_QUEUE_STOPPED,
                f"LocalQueue {lq.name} is stopped (spec.stopPolicy: {lq.stop_policy})",
            )
        return (
            PendingReason.CLUSTER_QUEUE_NOT_FOUND,
            f"ClusterQueue {lq.cluster_queue} doesn't exist",
        )

    def _set_pending(
        self,
        rec: _Record,
        reason: PendingReason,
        message: str,
        shortfalls: tuple[QuotaShortfall, ...] = (),
        inadmissible: bool = False,
    ) -> Pending | None:
        """Record why ``rec`` is pending; return a Pending decision if it changed or the
        Workload was parked now (so a cycle returning nothing means nothing moved)."""
        rec.shortfalls = shortfalls
        if rec.last == (reason, message) and not inadmissible:
            return None
        rec.last = (reason, message)
        return Pending(rec.wl.key, rec.cq, reason, message, shortfalls, inadmissible)

    # ---- copies --------------------------------------------------------------------------------
    def scope_members(self, name: ClusterQueueName) -> tuple[ClusterQueueName, ...]:
        """The ClusterQueues whose admissions can interact with ``name``'s: the members of
        its cohort tree (from its root: quota borrowed through a parent cohort is shared
        with the sibling cohorts, brk37-4), or ``(name,)`` without a cohort; ``()`` when
        unknown."""
        if not self.tree.has(name):
            return ()
        root = self.tree.root_of(name)
        return (name,) if root is None else tuple(self.tree.members(root))

    def fork(self, names: Iterable[ClusterQueueName]) -> QuotaState:
        """A new, independent state of the same class holding ClusterQueues ``names`` (pass
        whole cohorts: ``scope_members``), every flavor, namespace and LocalQueue, the
        Workloads admitted in them (assumed ones as admitted) and their pending Workloads.
        Parked (inadmissible) Workloads stay parked, and only the requeues this state owes
        are owed by the copy: like the live state (and Kueue v0.17.1, which requeues
        inadmissible Workloads when quota frees, not when another is admitted) the copy
        looks at them again at its next free. Domain objects are immutable, so they are
        shared, not copied. Cost O(Workloads of ``names``)."""
        out = type(self)()
        out.admission_fair_sharing = self.admission_fair_sharing
        out.order_evicted_by_eviction_time = self.order_evicted_by_eviction_time
        out._afs_ledgers = {k: _LqLedger(dict(v.consumed), v.last)
                            for k, v in self._afs_ledgers.items()}
        wanted = [n for n in names if n in self._cqs]
        out._flavors = dict(self._flavors)
        out._namespaces = {k: dict(v) for k, v in self._namespaces.items()}
        out._lqs = dict(self._lqs)
        out._checks = dict(self._checks)
        out._mk_checks = set(self._mk_checks)
        # The Cohort objects first: a ClusterQueue of a child cohort has its root, and the
        # cohorts their own quotas, in the copy as here (brk37-4).
        out._cohorts = dict(self._cohorts)
        out._rebuild_cohorts()
        for n in wanted:
            out.add_cluster_queue(self._cqs[n].spec)
        for n in wanted:
            for key in self._admitted_by_cq.get(n, {}):
                out.add_workload(self._wls[key].wl)
            cq = self._cqs[n]
            for key in [*cq.queue.active(), *cq.queue.parked()]:
                out.add_workload(self._wls[key].wl)
            fq = out._cqs[n].queue
            for key in cq.queue.parked():
                if key in fq:
                    fq.park(self._wls[key].wl)
        out._requeue = {n: None for n in wanted if n in self._requeue}
        return out

    def local_queues_of(self, names: Iterable[ClusterQueueName]) -> list[LocalQueue]:
        """The LocalQueues pointing at ClusterQueues ``names``."""
        wanted = set(names)
        return [lq for lq in self._lqs.values() if lq.cluster_queue in wanted]

    # ---- read-only views -----------------------------------------------------------------------
    @property
    def flavors(self) -> Mapping[FlavorName, ResourceFlavor]:
        """ResourceFlavors by name (read-only view)."""
        return self._flavors

    def cluster_queue_names(self) -> list[ClusterQueueName]:
        """Known ClusterQueue names, sorted."""
        return list(self._sorted_cq_names())

    def _sorted_cq_names(self) -> list[ClusterQueueName]:
        """Known ClusterQueue names, sorted; the cached list itself (do not change it)."""
        if self._cq_order is None:
            self._cq_order = sorted(self._cqs)
        return self._cq_order

    def local_queue(self, key: str) -> LocalQueue | None:
        """LocalQueue ``namespace/name`` as last given (None when unknown)."""
        return self._lqs.get(key)

    def local_queue_keys(self) -> list[str]:
        """Known LocalQueue keys (``namespace/name``), sorted."""
        return sorted(self._lqs)

    def cluster_queue_spec(self, name: ClusterQueueName) -> ClusterQueueSpec | None:
        """The spec last given for ``name``."""
        cq = self._cqs.get(name)
        return None if cq is None else cq.spec

    def workload(self, key: WorkloadKey) -> WorkloadInfo | None:
        """Where ``key`` stands (None when unknown)."""
        rec = self._wls.get(key)
        if rec is None:
            return None
        state = "evicting" if rec.evicting else ("admitted" if rec.state == ADMITTED else "pending")
        inadmissible = rec.state == ORPHAN
        reason, message = rec.last if rec.last else (None, "")
        if rec.state == PENDING and rec.cq is not None:
            cq = self._cqs[rec.cq]
            inadmissible = cq.queue.is_parked(key)
            if cq.problem is not None:
                reason, message = PendingReason.CLUSTER_QUEUE_INACTIVE, cq.problem.message
        elif rec.state == ORPHAN:
            reason, message = self._orphan_reason(rec)
        return WorkloadInfo(
            key,
            state,
            rec.cq,
            rec.wl.admission,
            rec.assumed,
            inadmissible,
            reason,
            message,
            rec.shortfalls,
        )

    def domain_workload(self, key: WorkloadKey) -> Workload | None:
        """The domain Workload last given (or assumed) for ``key``; None when unknown."""
        rec = self._wls.get(key)
        return None if rec is None else rec.wl

    def admitted(self, name: ClusterQueueName) -> list[WorkloadKey]:
        """Keys of Workloads holding quota in ClusterQueue ``name`` (admitted or evicting)."""
        return list(self._admitted_by_cq.get(name, {}))

    def pending_workloads(self, name: ClusterQueueName, start: int = 0,
                          stop: int | None = None) -> list[PendingWorkloadInfo]:
        """Pending Workloads of a ClusterQueue in queue order, the slice ``[start, stop)``
        (positions count from the queue's head). The order is the queue's cached one
        (``PendingQueue.ordered``): O(n log n) after the queue changed, then O(slice)."""
        cq = self._cqs.get(name)
        if cq is None:
            return []
        ordered = cq.queue.ordered()
        stop = len(ordered) if stop is None else min(stop, len(ordered))
        return [self._pending_info(cq, pos, *ordered[pos]) for pos in range(start, stop)]

    def _pending_info(self, cq: _ClusterQueue, pos: int, key: WorkloadKey,
                      parked: bool) -> PendingWorkloadInfo:
        rec = self._wls[key]
        reason, message = rec.last if rec.last else (None, "")
        if cq.problem is not None:
            reason, message = PendingReason.CLUSTER_QUEUE_INACTIVE, cq.problem.message
        return PendingWorkloadInfo(key, pos, rec.wl.priority, rec.wl.queue_name, parked,
                                   reason, message)

    def local_queue_pending_workloads(self, name: ClusterQueueName, namespace: str,
                                      local_queue: str, start: int = 0,
                                      stop: int | None = None) -> list[PendingWorkloadInfo]:
        """The pending Workloads of LocalQueue ``namespace/local_queue`` in ClusterQueue
        ``name``'s order, the slice ``[start, stop)`` of that LocalQueue's own list
        (``position``: in the ClusterQueue). Grouped once per order of the queue, then
        O(slice)."""
        cq = self._cqs.get(name)
        if cq is None:
            return []
        ordered = cq.queue.ordered()
        cached = self._lq_groups.get(name)
        if cached is None or cached[0] is not ordered:
            groups: dict[tuple[str, str], list[int]] = {}
            for pos, (key, _) in enumerate(ordered):
                wl = self._wls[key].wl
                groups.setdefault((wl.namespace, wl.queue_name), []).append(pos)
            cached = self._lq_groups[name] = (ordered, groups)
        mine = cached[1].get((namespace, local_queue), [])
        return [self._pending_info(cq, pos, *ordered[pos]) for pos in mine[start:stop]]

    def cluster_queue_status(self, name: ClusterQueueName) -> ClusterQueueStatus | None:
        """Usage / borrowed / lent per flavor-resource, counts and the Active condition."""
        cq = self._cqs.get(name)
        if cq is None:
            return None
        tree, spec = self.tree, cq.spec
        frs = dict.fromkeys([*spec.quotas, *tree.usages(name)])
        resources = []
        for fr in frs:
            rq = spec.quota(fr)
            resources.append(
                FlavorResourceStatus(
                    fr.flavor,
                    fr.resource,
                    nominal=0 if rq is None else rq.nominal,
                    borrowing_limit=None if rq is None else rq.borrowing_limit,
                    lending_limit=None if rq is None else rq.lending_limit,
                    usage=tree.usage(name, fr),
                    borrowed=tree.borrowed(name, fr),
                    lent=tree.lent(name, fr),
                    available=tree.available(name, fr),
                )
            )
        admitted = self._admitted_by_cq.get(name, {})
        evicting = sum(1 for k in admitted if self._wls[k].evicting)
        if cq.problem is None:
            reason, message = "Ready", "Can admit new workloads"
        else:
            reason, message = cq.problem.reason, cq.problem.message
        return ClusterQueueStatus(
            name,
            spec.cohort,
            cq.active,
            reason,
            message,
            tuple(resources),
            len(cq.queue),
            len(admitted),
            evicting,
        )

    def cohort_names(self) -> list[CohortName]:
        """Every cohort: declared by a Cohort object or named by a ClusterQueue, sorted."""
        return sorted(set(self._cohorts) | set(self.tree.cohort_names()))

    def cohort_spec(self, name: CohortName) -> CohortSpec | None:
        """The Cohort object last given for ``name`` (None: implicit or unknown)."""
        return self._cohorts.get(name)

    def cohort_status(self, name: CohortName) -> CohortStatus | None:
        """Subtree quota and usage per flavor-resource of cohort ``name`` and its Active
        state (None when no Cohort object or ClusterQueue names it)."""
        spec = self._cohorts.get(name)
        tree = self.tree
        if spec is None and not tree.has_cohort(name):
            return None
        problem = self._cohort_problems.get(name)
        resources = []
        if tree.has_cohort(name):
            for fr in tree.cohort_keys(name):
                q = tree.cohort_quota(name, fr)
                pool = tree.cohort_capacity(name, fr)
                resources.append(CohortResourceStatus(
                    fr.flavor, fr.resource,
                    nominal=0 if q is None else q.nominal,
                    subtree_quota=pool,
                    usage=tree.subtree_usage(name, fr),
                    borrowed=max(0, tree.cohort_usage(name, fr) - pool),
                ))
        reason, message = ("Ready", "") if problem is None else (problem.reason, problem.message)
        return CohortStatus(
            name,
            spec is not None,
            spec.parent if spec is not None else None,
            problem is None,
            reason,
            message,
            tree.members(name),
            tuple(resources),
        )

    def local_queue_status(self, key: str) -> LocalQueueStatus | None:
        """Pending / admitted counts and admitted usage of LocalQueue ``namespace/name``."""
        lq = self._lqs.get(key)
        if lq is None:
            return None
        pending = len(self._pending_by_lq.get(key, {}))
        usage: dict[FlavorResource, int] = {}
        admitted = 0
        for wk in self._admitted_by_cq.get(lq.cluster_queue, {}):
            rec = self._wls[wk]
            if rec.lq_key == key:
                admitted += 1
                for fr, v in rec.usage.items():
                    usage[fr] = usage.get(fr, 0) + v
        return LocalQueueStatus(key, lq.cluster_queue, pending, admitted, usage)

    def queue_counts(self, name: ClusterQueueName) -> tuple[int, int] | None:
        """``(pending, admitted)`` Workloads of ClusterQueue ``name`` (the counts of
        ``cluster_queue_status`` without its per flavor-resource figures; None if unknown).
        O(1)."""
        cq = self._cqs.get(name)
        if cq is None:
            return None
        return len(cq.queue), len(self._admitted_by_cq.get(name, ()))

    def usage(self, name: ClusterQueueName) -> dict[FlavorResource, int]:
        """``{FlavorResource: amount}`` held in ClusterQueue ``name`` (empty if unknown)."""
        return self.tree.usages(name) if self.tree.has(name) else {}

    def workload_keys(self) -> Iterator[WorkloadKey]:
        """Every known Workload key."""
        return iter(list(self._wls))

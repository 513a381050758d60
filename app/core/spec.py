"""Configuration the admission core reads: ResourceFlavor, ClusterQueue, Cohort, LocalQueue.

Plain frozen dataclasses mirroring Kueue v1beta2 ``spec`` fields (reference section 1), with
amounts already parsed to integers (milli-CPU for ``cpu``, bytes, counts; see
``app.core.quantity``). The reconciler converts the CRD objects into these; tests build them
with ``tests/builders.py``.

``validate_cluster_queue`` / ``validate_cohort`` return the first configuration problem of a
ClusterQueue / Cohort (a ``ConfigProblem`` naming the field) or ``None``: the core keeps an
invalid ClusterQueue (or every ClusterQueue below an invalid Cohort) *inactive* instead of
raising, and its Workloads stay pending with that reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property

from app.core.types import ClusterQueueName, CohortName, FlavorName, FlavorResource, ResourceName
from app.core.workload import Taint, Toleration


class QueueingStrategy(StrEnum):
    """ClusterQueue ``spec.queueingStrategy`` (default BestEffortFIFO)."""

    STRICT_FIFO = "StrictFIFO"
    BEST_EFFORT_FIFO = "BestEffortFIFO"


class WithinClusterQueue(StrEnum):
    """ClusterQueue ``spec.preemption.withinClusterQueue``."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"


class ReclaimWithinCohort(StrEnum):
    """ClusterQueue ``spec.preemption.reclaimWithinCohort``."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    ANY = "Any"


class BorrowWithinCohort(StrEnum):
    """ClusterQueue ``spec.preemption.borrowWithinCohort.policy``."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"


class FungibilityPolicy(StrEnum):
    """``spec.flavorFungibility.whenCanBorrow`` / ``whenCanPreempt``."""

    MAY_STOP_SEARCH = "MayStopSearch"
    TRY_NEXT_FLAVOR = "TryNextFlavor"


class FungibilityPreference(StrEnum):
    """``spec.flavorFungibility.preference`` (only with both ``when*`` = TryNextFlavor)."""

    BORROWING_OVER_PREEMPTION = "BorrowingOverPreemption"
    PREEMPTION_OVER_BORROWING = "PreemptionOverBorrowing"


class AdmissionMode(StrEnum):
    """ClusterQueue ``spec.admissionScope.admissionMode`` (Kueue v1beta2 ``AdmissionScope``):
    UsageBasedAdmissionFairSharing orders the ClusterQueue's Workloads by their LocalQueues'
    recent usage (``AdmissionFairSharing``); unset means NoAdmissionFairSharing."""

    USAGE_BASED = "UsageBasedAdmissionFairSharing"
    NONE = "NoAdmissionFairSharing"


class StopPolicy(StrEnum):
    """ClusterQueue ``spec.stopPolicy``: anything but None makes the ClusterQueue inactive."""

    NONE = "None"
    HOLD = "Hold"
    HOLD_AND_DRAIN = "HoldAndDrain"


@dataclass(frozen=True, slots=True)
class ResourceFlavor:
    """Kueue v1beta2 ResourceFlavor ``spec``: node labels, taints and tolerations.

    Flavor assignment skips a flavor whose NoSchedule/NoExecute taints the pod set does not
    tolerate (its own ``tolerations`` count) or whose ``node_labels`` contradict the pod set's
    nodeSelector / required node affinity on the flavor's own label keys.
    """

    name: FlavorName
    node_labels: Mapping[str, str] = field(default_factory=dict)
    node_taints: tuple[Taint, ...] = ()
    tolerations: tuple[Toleration, ...] = ()


@dataclass(frozen=True, slots=True)
class ResourceQuota:
    """One ``resourceGroups[].flavors[].resources[]`` entry. Amounts are integers in the
    resource's unit; ``None`` limit = unset (borrowingLimit unlimited, lendingLimit: all
    unused nominal lendable) (Kueue v1beta2 ClusterQueue ``nominalQuota``,
    ``borrowingLimit``, ``lendingLimit``)."""

    name: ResourceName
    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


@dataclass(frozen=True, slots=True)
class FlavorQuotas:
    """``resourceGroups[].flavors[]``: a flavor and one quota per covered resource, in order."""

    name: FlavorName
    resources: tuple[ResourceQuota, ...]


@dataclass(frozen=True, slots=True)
class ResourceGroup:
    """``resourceGroups[]``: resources that always get the same flavor for one pod set."""

    covered_resources: tuple[ResourceName, ...]
    flavors: tuple[FlavorQuotas, ...]


def quotas_by_flavor_resource(
    groups: tuple[ResourceGroup, ...],
) -> dict[FlavorResource, ResourceQuota]:
    """``{FlavorResource: ResourceQuota}`` over resource groups (first occurrence wins)."""
    out: dict[FlavorResource, ResourceQuota] = {}
    for g in groups:
        for f in g.flavors:
            for rq in f.resources:
                out.setdefault(FlavorResource(f.name, rq.name), rq)
    return out


@dataclass(frozen=True, slots=True)
class LabelSelectorRequirement:
    """``matchExpressions[]`` of a metav1 LabelSelector (In, NotIn, Exists, DoesNotExist)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """True when ``labels`` satisfy this requirement."""
        present = self.key in labels
        if self.operator == "In":
            return present and labels[self.key] in self.values
        if self.operator == "NotIn":
            return not present or labels[self.key] not in self.values
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        return False


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A metav1 LabelSelector. The empty selector matches every label set."""

    match_labels: Mapping[str, str] = field(default_factory=dict)
    match_expressions: tuple[LabelSelectorRequirement, ...] = ()

    @property
    def selects_all(self) -> bool:
        """True for the empty selector (``{}``), which matches every label set."""
        return not self.match_labels and not self.match_expressions

    def matches(self, labels: Mapping[str, str]) -> bool:
        """True when ``labels`` satisfy every matchLabels entry and every expression."""
        for k, v in self.match_labels.items():
            if labels.get(k) != v:
                return False
        return all(e.matches(labels) for e in self.match_expressions)


@dataclass(frozen=True, slots=True)
class PreemptionPolicy:
    """ClusterQueue ``spec.preemption`` (all default Never)."""

    within_cluster_queue: WithinClusterQueue = WithinClusterQueue.NEVER
    reclaim_within_cohort: ReclaimWithinCohort = ReclaimWithinCohort.NEVER
    borrow_within_cohort: BorrowWithinCohort = BorrowWithinCohort.NEVER
    # borrowWithinCohort.maxPriorityThreshold: victims above it are not preempted while borrowing.
    max_priority_threshold: int | None = None


@dataclass(frozen=True, slots=True)
class FlavorFungibility:
    """ClusterQueue ``spec.flavorFungibility`` (defaults MayStopSearch / TryNextFlavor)."""

    when_can_borrow: FungibilityPolicy = FungibilityPolicy.MAY_STOP_SEARCH
    when_can_preempt: FungibilityPolicy = FungibilityPolicy.TRY_NEXT_FLAVOR
    preference: FungibilityPreference | None = None


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """Why a ClusterQueue is inactive. ``reason``: Kueue ``Active`` condition reason
    (``FlavorNotFound``, ``Stopped``, or ``InvalidSpec`` for what Kueue's webhook would
    reject); ``field``: the offending field path; ``message``: for people, names the field."""

    reason: str
    field: str
    message: str


@dataclass(frozen=True, slots=True)
class AdmissionCheckRef:
    """One entry of a ClusterQueue's ``spec.admissionChecksStrategy.admissionChecks``
    (Kueue v1beta2): the AdmissionCheck's ``name`` and the flavors it runs for
    (``on_flavors``; empty: every flavor of the ClusterQueue)."""

    name: str
    on_flavors: tuple[FlavorName, ...] = ()


@dataclass(frozen=True)
class ClusterQueueSpec:
    """Kueue v1beta2 ClusterQueue ``spec`` as the core needs it.

    ``namespace_selector``: ``None`` (Kueue: field unset) matches **no** namespace;
    ``LabelSelector()`` (``{}``) matches all. ``cohort``: ``spec.cohortName`` (``None``: no
    borrowing or lending). ``object_problem``: set when the object itself stops the queue:
    it could not be read (a malformed quantity, reason ``InvalidSpec``) or it is being deleted
    (reason ``Terminating``); the ClusterQueue is then inactive with it, and ``Scheduler`` keeps
    the last readable spec's quotas and cohort so its admitted usage stays counted where it
    was.
    Index helpers (``group_of``, ``quota``) are computed once.
    """

    name: ClusterQueueName
    resource_groups: tuple[ResourceGroup, ...] = ()
    cohort: CohortName | None = None
    queueing_strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO
    namespace_selector: LabelSelector | None = None
    preemption: PreemptionPolicy = field(default_factory=PreemptionPolicy)
    flavor_fungibility: FlavorFungibility = field(default_factory=FlavorFungibility)
    stop_policy: StopPolicy = StopPolicy.NONE
    object_problem: ConfigProblem | None = None
    # spec.fairSharing.weight in milli-units (Kueue default 1 = 1000); read only when fair
    # sharing is enabled. 0: the queue only gets capacity nobody else wants.
    fair_weight_milli: int = 1000
    # pykueue annotations (Kueue's API has no field for them), in seconds; None = off.
    # min_runtime_s: an admitted Workload of this queue is not preempted by reclaim or fair
    # sharing until it has held its quota this long. reclaim_backoff_s: after a reclaim or
    # fair-sharing preemption took Workloads of this queue, it does not borrow for this long.
    min_runtime_s: float | None = None
    reclaim_backoff_s: float | None = None
    # spec.admissionScope.admissionMode: Admission Fair Sharing between its LocalQueues when
    # UsageBasedAdmissionFairSharing and the core has an ``AdmissionFairSharing`` config.
    admission_mode: AdmissionMode = AdmissionMode.NONE
    # spec.admissionChecksStrategy.admissionChecks: the checks a Workload reserving quota here
    # must pass before it is Admitted (``checks_for_flavors``).
    admission_checks: tuple[AdmissionCheckRef, ...] = ()

    @cached_property
    def _group_index(self) -> dict[ResourceName, int]:
        out: dict[ResourceName, int] = {}
        for i, g in enumerate(self.resource_groups):
            for r in g.covered_resources:
                out.setdefault(r, i)
        return out

    @cached_property
    def quotas(self) -> dict[FlavorResource, ResourceQuota]:
        """``{FlavorResource: ResourceQuota}`` over all groups (first occurrence wins)."""
        return quotas_by_flavor_resource(self.resource_groups)

    def group_of(self, resource: ResourceName) -> ResourceGroup | None:
        """The resource group covering ``resource``, or None."""
        i = self._group_index.get(resource)
        return None if i is None else self.resource_groups[i]

    def quota(self, fr: FlavorResource) -> ResourceQuota | None:
        """The quota declared for ``fr``, or None when the ClusterQueue does not declare it."""
        return self.quotas.get(fr)

    def flavor_names(self) -> tuple[FlavorName, ...]:
        """Every flavor named in ``resourceGroups``, in order."""
        return tuple(f.name for g in self.resource_groups for f in g.flavors)


class FairSharingStrategy(StrEnum):
    """Kueue Configuration ``fairSharing.preemptionStrategies`` (reference 3.8)."""

    LESS_THAN_OR_EQUAL_TO_FINAL_SHARE = "LessThanOrEqualToFinalShare"
    LESS_THAN_INITIAL_SHARE = "LessThanInitialShare"


@dataclass(frozen=True, slots=True)
class FairSharing:
    """Fair sharing settings of the core (Kueue Configuration ``fairSharing``): when given to
    ``Scheduler``, the dominant resource share of each node of the cohort tree orders the heads
    of a cycle and chooses preemption victims. ``strategies``: tried in order; Kueue allows
    [S2-a], [S2-b] or [S2-a, S2-b] (the default). ``s2b_priority_guard``: pykueue's opt-in
    (default off, Kueue v0.17.1's rule): S2-b (``LessThanInitialShare``) takes no victim of
    another ClusterQueue above the preemptor's priority (app.core.preemption).
    ``sticky_preemptor_first``: pykueue's opt-in (default off, Kueue v0.17.1's tournament,
    which has no such term): in the admission tournament a preemptor that issued preemptions
    beats every other entry, so the capacity its victims free is not taken by a queue with a
    lower share (app.core.scheduling_cycle ``_fair_next``)."""

    strategies: tuple[FairSharingStrategy, ...] = (
        FairSharingStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,
        FairSharingStrategy.LESS_THAN_INITIAL_SHARE,
    )
    s2b_priority_guard: bool = False
    sticky_preemptor_first: bool = False


@dataclass(frozen=True, slots=True)
class AdmissionFairSharing:
    """Kueue Configuration ``admissionFairSharing`` (Kueue v1beta2 ``AdmissionFairSharing``,
    reference 1.10 and 3.8; ``pkg/util/admissionfairsharing``): in a ClusterQueue with
    ``admissionScope.admissionMode: UsageBasedAdmissionFairSharing`` each LocalQueue's
    consumed resources are an exponentially decayed average of what its admitted Workloads
    hold, and the LocalQueue with the lowest ``Σ resource weight x consumed / LocalQueue
    weight`` goes first.

    ``half_life_s``: ``usageHalfLifeTime`` in seconds (>= 0; 0: no history, usage is reset
    at every sample and admissions add no entry penalty); ``sampling_s``:
    ``usageSamplingInterval`` (> 0, Kueue default 5 minutes): how often the consumed
    resources are folded with the current usage, each fold weighing the current usage by
    ``1 - 0.5^(elapsed / half_life)``; each admission adds at once an entry penalty of its
    usage times ``1 - 0.5^(sampling / half_life)``, so a flood of Workloads cannot all pass
    before the next sample. ``resource_weights``: per resource name (default 1), applied to
    amounts in Kubernetes units (cores, bytes, counts)."""

    half_life_s: float
    sampling_s: float = 300.0
    resource_weights: Mapping[ResourceName, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.half_life_s >= 0:
            raise ValueError("admissionFairSharing.usageHalfLifeTime must not be negative")
        if not self.sampling_s > 0:
            raise ValueError("admissionFairSharing.usageSamplingInterval must be greater than 0")
        for r, w in self.resource_weights.items():
            if not w >= 0:
                raise ValueError(f"admissionFairSharing.resourceWeights[{r}] must not be "
                                 "negative")

    def alpha(self, elapsed_s: float) -> float:
        """Weight of the newest usage after ``elapsed_s`` seconds: ``1 - 0.5^(elapsed /
        half_life)`` (0 when the half-life is 0, Kueue ``calculateAlphaRate``)."""
        if self.half_life_s == 0:
            return 0.0
        return 1.0 - 0.5 ** (max(0.0, elapsed_s) / self.half_life_s)


@dataclass(frozen=True)
class CohortSpec:
    """Kueue v1beta2 Cohort ``spec`` (reference 1.3): ``parent`` = ``spec.parentName`` (None:
    a root; a parent with no Cohort object is an implicit root with no quota);
    ``resource_groups``: the cohort's own quota, an extra pool lendable to its subtree, with
    ``borrowingLimit`` / ``lendingLimit`` toward its parent (only with a parent);
    ``fair_weight_milli``: ``spec.fairSharing.weight`` in milli-units (default 1 = 1000).
    ``object_problem``: the object could not be read (its quotas are then not used)."""

    name: CohortName
    parent: CohortName | None = None
    resource_groups: tuple[ResourceGroup, ...] = ()
    fair_weight_milli: int = 1000
    object_problem: ConfigProblem | None = None

    @cached_property
    def quotas(self) -> dict[FlavorResource, ResourceQuota]:
        """``{FlavorResource: ResourceQuota}`` over all groups (first occurrence wins)."""
        return quotas_by_flavor_resource(self.resource_groups)


@dataclass(frozen=True, slots=True)
class LocalQueue:
    """Kueue v1beta2 LocalQueue: ``namespace/name`` pointing at ``spec.clusterQueue``.
    ``stop_policy`` (Kueue LocalQueue ``spec.stopPolicy``): ``Hold`` admits none of its
    Workloads; ``HoldAndDrain`` also evicts its admitted ones (reason ``LocalQueueStopped``).
    ``fair_weight_milli``: ``spec.fairSharing.weight`` in milli-units (default 1 = 1000), its
    weight in Admission Fair Sharing (0: its Workloads go after every other queue's)."""

    namespace: str
    name: str
    cluster_queue: ClusterQueueName
    stop_policy: StopPolicy = StopPolicy.NONE
    fair_weight_milli: int = 1000

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"



def _problem(reason: str, where: str, why: str) -> ConfigProblem:
    return ConfigProblem(reason, where, f"Can't admit new workloads: {where}: {why}")


def _enum_problem(spec: ClusterQueueSpec) -> ConfigProblem | None:
    checks: tuple[tuple[str, object, type[StrEnum]], ...] = (
        ("spec.queueingStrategy", spec.queueing_strategy, QueueingStrategy),
        (
            "spec.preemption.withinClusterQueue",
            spec.preemption.within_cluster_queue,
            WithinClusterQueue,
        ),
        (
            "spec.preemption.reclaimWithinCohort",
            spec.preemption.reclaim_within_cohort,
            ReclaimWithinCohort,
        ),
        (
            "spec.preemption.borrowWithinCohort.policy",
            spec.preemption.borrow_within_cohort,
            BorrowWithinCohort,
        ),
        (
            "spec.flavorFungibility.whenCanBorrow",
            spec.flavor_fungibility.when_can_borrow,
            FungibilityPolicy,
        ),
        (
            "spec.flavorFungibility.whenCanPreempt",
            spec.flavor_fungibility.when_can_preempt,
            FungibilityPolicy,
        ),
        ("spec.stopPolicy", spec.stop_policy, StopPolicy),
        ("spec.admissionScope.admissionMode", spec.admission_mode, AdmissionMode),
    )
    for where, value, enum in checks:
        if value not in {e.value for e in enum}:
            allowed = ", ".join(e.value for e in enum)
            return _problem("InvalidSpec", where, f"unsupported value {value!r} (one of {allowed})")
    ff = spec.flavor_fungibility
    if ff.preference is not None:
        if ff.preference not in {e.value for e in FungibilityPreference}:
            return _problem(
                "InvalidSpec",
                "spec.flavorFungibility.preference",
                f"unsupported value {ff.preference!r}",
            )
        if not (ff.when_can_borrow == ff.when_can_preempt == FungibilityPolicy.TRY_NEXT_FLAVOR):
            return _problem(
                "InvalidSpec",
                "spec.flavorFungibility.preference",
                "may be set only when whenCanBorrow and whenCanPreempt are TryNextFlavor",
            )
    p = spec.preemption
    if p.reclaim_within_cohort == ReclaimWithinCohort.NEVER and (
        p.borrow_within_cohort != BorrowWithinCohort.NEVER
    ):
        return _problem(
            "InvalidSpec",
            "spec.preemption.borrowWithinCohort.policy",
            "must be Never when reclaimWithinCohort is Never",
        )
    sel = spec.namespace_selector
    if sel is not None:
        for i, e in enumerate(sel.match_expressions):
            if e.operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
                return _problem(
                    "InvalidSpec",
                    f"spec.namespaceSelector.matchExpressions[{i}].operator",
                    f"unsupported operator {e.operator!r}",
                )
    return None


def _quota_problem(
    has_parent: bool, where: str, rq: ResourceQuota, parent_field: str = "cohortName"
) -> ConfigProblem | None:
    if rq.nominal < 0:
        return _problem("InvalidSpec", f"{where}.nominalQuota", "must not be negative")
    for name, limit in (("borrowingLimit", rq.borrowing_limit), ("lendingLimit", rq.lending_limit)):
        if limit is None:
            continue
        if not has_parent:
            return _problem(
                "InvalidSpec", f"{where}.{name}", f"must be nil when {parent_field} is empty"
            )
        if limit < 0:
            return _problem("InvalidSpec", f"{where}.{name}", "must not be negative")
    # Kueue checks lendingLimit <= nominalQuota for ClusterQueues only (reference 1.3).
    if parent_field == "cohortName" and rq.lending_limit is not None \
            and rq.lending_limit > rq.nominal:
        return _problem(
            "InvalidSpec",
            f"{where}.lendingLimit",
            f"must be less than or equal to nominalQuota ({rq.lending_limit} > {rq.nominal})",
        )
    return None


def _groups_problem(
    groups: tuple[ResourceGroup, ...], has_parent: bool, parent_field: str = "cohortName"
) -> ConfigProblem | None:
    covered_by: dict[ResourceName, int] = {}
    flavor_in: dict[FlavorName, int] = {}
    for gi, g in enumerate(groups):
        gw = f"spec.resourceGroups[{gi}]"
        if not g.covered_resources:
            return _problem("InvalidSpec", f"{gw}.coveredResources", "must not be empty")
        for ri, r in enumerate(g.covered_resources):
            if r in covered_by:
                return _problem(
                    "InvalidSpec",
                    f"{gw}.coveredResources[{ri}]",
                    f"resource {r} is already covered by spec.resourceGroups[{covered_by[r]}]",
                )
            covered_by[r] = gi
        if not g.flavors:
            return _problem("InvalidSpec", f"{gw}.flavors", "must not be empty")
        for fi, f in enumerate(g.flavors):
            fw = f"{gw}.flavors[{fi}]"
            if f.name in flavor_in:
                return _problem(
                    "InvalidSpec",
                    f"{fw}.name",
                    f"flavor {f.name} already appears in spec.resourceGroups[{flavor_in[f.name]}]",
                )
            flavor_in[f.name] = gi
            names = tuple(rq.name for rq in f.resources)
            if names != tuple(g.covered_resources):
                return _problem(
                    "InvalidSpec",
                    f"{fw}.resources",
                    f"must list exactly the covered resources "
                    f"{list(g.covered_resources)} in order, got {list(names)}",
                )
            for qi, rq in enumerate(f.resources):
                bad = _quota_problem(has_parent, f"{fw}.resources[{qi}]", rq, parent_field)
                if bad is not None:
                    return bad
    return None


def validate_cluster_queue(
    spec: ClusterQueueSpec, flavors: Mapping[FlavorName, ResourceFlavor]
) -> ConfigProblem | None:
    """Return the first problem that makes ``spec`` unusable, or None when it is active.

    Checks, in order: resource groups (a resource or flavor in two groups, flavor resources
    not matching ``coveredResources``, negative quotas, ``borrowingLimit`` / ``lendingLimit``
    without a cohort, ``lendingLimit`` > ``nominalQuota``), enum values and cross-field rules
    (Kueue v1beta2 ClusterQueue CEL rules and webhook), ResourceFlavors that do not exist
    (reason ``FlavorNotFound``), then ``stopPolicy`` (reason ``Stopped``). An
    ``object_problem`` (unreadable or terminating object) comes before all of them. Never raises.
    """
    if spec.object_problem is not None:
        return spec.object_problem
    bad = _groups_problem(spec.resource_groups, spec.cohort is not None) or _enum_problem(spec)
    if bad is not None:
        return bad
    for gi, g in enumerate(spec.resource_groups):
        for fi, f in enumerate(g.flavors):
            if f.name not in flavors:
                return _problem(
                    "FlavorNotFound",
                    f"spec.resourceGroups[{gi}].flavors[{fi}].name",
                    f"ResourceFlavor {f.name} not found",
                )
    if spec.stop_policy != StopPolicy.NONE:
        return ConfigProblem(
            "Stopped",
            "spec.stopPolicy",
            f"Can't admit new workloads: ClusterQueue is stopped "
            f"(spec.stopPolicy: {spec.stop_policy})",
        )
    return None


def validate_cohort(spec: CohortSpec) -> ConfigProblem | None:
    """The first problem of a Cohort spec, or None (Kueue v1beta2 Cohort webhook: resource
    groups as for a ClusterQueue, ``borrowingLimit`` / ``lendingLimit`` only with
    ``parentName``, no ``lendingLimit`` ≤ ``nominalQuota`` check). A parent chain that loops
    is not a spec problem: ``QuotaState`` names the cycle. Flavors are not checked: a
    cohort's quota for an unknown flavor is never assigned. Never raises."""
    if spec.object_problem is not None:
        return spec.object_problem
    if spec.fair_weight_milli < 0:
        return _problem("InvalidSpec", "spec.fairSharing.weight", "must not be negative")
    return _groups_problem(spec.resource_groups, spec.parent is not None, "parentName")


def admission_checks_problem(spec: ClusterQueueSpec, checks: Mapping[str, bool],
                             multikueue: AbstractSet[str] = frozenset()
                             ) -> ConfigProblem | None:
    """Why the AdmissionChecks ``spec`` names make it inactive, or None. ``checks``: every
    AdmissionCheck known, name -> its ``Active`` condition is True; ``multikueue``: the
    names of those whose controller is MultiKueue's. Kueue v1beta2
    (``pkg/cache/scheduler/clusterqueue.go``): a check that does not exist gives reason
    ``AdmissionCheckNotFound`` ("references missing AdmissionCheck(s): a,b"), one that is not
    Active ``AdmissionCheckInactive``, more than one MultiKueue check
    ``MultipleMultiKueueAdmissionChecks``, a MultiKueue check whose ``onFlavors`` is not every
    flavor ``MultiKueueAdmissionCheckAppliedPerFlavor``; in that order (Kueue joins the reasons
    of all, pykueue names the first). Never raises."""
    missing = sorted({c.name for c in spec.admission_checks if c.name not in checks})
    if missing:
        return ConfigProblem(
            "AdmissionCheckNotFound", "spec.admissionChecksStrategy.admissionChecks",
            f"Can't admit new workloads: references missing AdmissionCheck(s): "
            f"{','.join(missing)}.")
    inactive = sorted({c.name for c in spec.admission_checks if not checks[c.name]})
    if inactive:
        return ConfigProblem(
            "AdmissionCheckInactive", "spec.admissionChecksStrategy.admissionChecks",
            f"Can't admit new workloads: references inactive AdmissionCheck(s): "
            f"{','.join(inactive)}.")
    mk = sorted({c.name for c in spec.admission_checks if c.name in multikueue})
    if len(mk) > 1:
        return ConfigProblem(
            "MultipleMultiKueueAdmissionChecks", "spec.admissionChecksStrategy.admissionChecks",
            f"Can't admit new workloads: Cannot use multiple MultiKueue AdmissionChecks on "
            f"the same ClusterQueue, found: {','.join(mk)}.")
    every = {f.name for g in spec.resource_groups for f in g.flavors}
    per_flavor = sorted({c.name for c in spec.admission_checks
                         if c.name in multikueue and c.on_flavors
                         and set(c.on_flavors) != every})
    if per_flavor:
        return ConfigProblem(
            "MultiKueueAdmissionCheckAppliedPerFlavor",
            "spec.admissionChecksStrategy.admissionChecks",
            f"Can't admit new workloads: Cannot specify MultiKueue AdmissionCheck per flavor, "
            f"found: {','.join(per_flavor)}.")
    return None


def checks_for_flavors(spec: ClusterQueueSpec, flavors: Iterable[FlavorName]) -> tuple[str, ...]:
    """The AdmissionChecks a Workload admitted on ``flavors`` in ``spec`` must pass, sorted by
    name (Kueue ``AdmissionChecksForWorkload``): every check whose ``onFlavors`` is empty or
    names one of ``flavors``."""
    used = set(flavors)
    return tuple(sorted({c.name for c in spec.admission_checks
                         if not c.on_flavors or used.intersection(c.on_flavors)}))

"""Fluent builders for the admission core's data (design.md: "Table-driven tests with fluent
builders"), and ``Sim``: a Scheduler plus a clock for scenario tests.

    cq = cluster_queue("cq").cohort("ai").flavor("a100", gpu=8, borrowing_limit=4).build()
    wl = workload("w").pods(3, gpu=1).priority(5).build()

Quantities are Kubernetes quantities (``cpu=4`` = 4 CPUs = 4000 milli, ``memory="36Gi"``)
parsed with ``app.core.quantity.parse_quantity``. Short resource names: ``gpu`` =
``nvidia.com/gpu``; use ``resources={"example.com/gpu": 1}`` for any other name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from app.core.decisions import Admit, Decision, Pending, Preempt
from app.core.quantity import parse_quantity
from app.core.scheduling_cycle import Scheduler
from app.core.spec import (
    AdmissionFairSharing,
    AdmissionMode,
    BorrowWithinCohort,
    ClusterQueueSpec,
    CohortSpec,
    FairSharing,
    FlavorFungibility,
    FlavorQuotas,
    FungibilityPolicy,
    FungibilityPreference,
    LabelSelector,
    LocalQueue,
    PreemptionPolicy,
    QueueingStrategy,
    ReclaimWithinCohort,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    StopPolicy,
    WithinClusterQueue,
)
from app.core.types import (
    ClusterQueueName,
    CohortName,
    FlavorName,
    FlavorResource,
    ResourceName,
    WorkloadKey,
)
from app.core.workload import NodeSelectorRequirement, PodSet, Taint, Toleration, Workload

GPU = "nvidia.com/gpu"
_ALIASES = {"gpu": GPU}
Qty = int | str


def res(name: str) -> ResourceName:
    """Resource name from a short alias (``gpu`` -> ``nvidia.com/gpu``)."""
    return ResourceName(_ALIASES.get(name, name))


def q(resource: str, value: Qty) -> int:
    """Exact amount of ``value`` for ``resource`` (milli-CPU, bytes, counts)."""
    return parse_quantity(value, res(resource))


def fr(flavor: str, resource: str) -> FlavorResource:
    """``FlavorResource(flavor, resource)`` with the alias applied."""
    return FlavorResource(FlavorName(flavor), res(resource))


def _amounts(kw: Mapping[str, Qty], extra: Mapping[str, Qty] | None) -> dict[ResourceName, int]:
    out = {res(k): q(k, v) for k, v in kw.items()}
    for k, v in (extra or {}).items():
        out[res(k)] = q(k, v)
    return out


class FlavorBuilder:
    """``flavor("gpu").labels(pool="gpu").taint("nvidia.com/gpu").toleration(...)``."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._labels: dict[str, str] = {}
        self._taints: list[Taint] = []
        self._tolerations: list[Toleration] = []

    def labels(self, **labels: str) -> FlavorBuilder:
        self._labels.update(labels)
        return self

    def taint(self, key: str, value: str = "", effect: str = "NoSchedule") -> FlavorBuilder:
        self._taints.append(Taint(key, value, effect))
        return self

    def toleration(
        self, key: str = "", operator: str = "Equal", value: str = "", effect: str = ""
    ) -> FlavorBuilder:
        self._tolerations.append(Toleration(key, operator, value, effect))
        return self

    def build(self) -> ResourceFlavor:
        return ResourceFlavor(
            FlavorName(self._name),
            dict(self._labels),
            tuple(self._taints),
            tuple(self._tolerations),
        )


def flavor(name: str) -> FlavorBuilder:
    """Start a ResourceFlavor."""
    return FlavorBuilder(name)


class ClusterQueueBuilder:
    """``cluster_queue("cq").cohort("ai").flavor("a100", gpu=8, borrowing_limit=4)``.

    ``flavor(name, **quotas)`` joins the resource group whose covered resources equal the
    quota keys (a new group otherwise). ``borrowing_limit`` / ``lending_limit``: a quantity
    (when one resource is given) or ``{resource: quantity}``.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._cohort: str | None = None
        self._groups: list[tuple[tuple[ResourceName, ...], list[FlavorQuotas]]] = []
        self._strategy = QueueingStrategy.BEST_EFFORT_FIFO
        self._selector: LabelSelector | None = LabelSelector()
        self._preemption = PreemptionPolicy()
        self._fungibility = FlavorFungibility()
        self._stop = StopPolicy.NONE
        self._fair_weight_milli = 1000
        self._admission_mode = AdmissionMode.NONE

    def cohort(self, name: str | None) -> ClusterQueueBuilder:
        self._cohort = name
        return self

    def flavor(
        self,
        name: str,
        *,
        resources: Mapping[str, Qty] | None = None,
        borrowing_limit: Qty | Mapping[str, Qty] | None = None,
        lending_limit: Qty | Mapping[str, Qty] | None = None,
        **quotas: Qty,
    ) -> ClusterQueueBuilder:
        nominal = _amounts(quotas, resources)
        names = tuple(nominal)

        def limit(v: Qty | Mapping[str, Qty] | None, r: ResourceName) -> int | None:
            if v is None:
                return None
            if isinstance(v, Mapping):
                by = {res(k): x for k, x in v.items()}
                return q(r, by[r]) if r in by else None
            return q(r, v) if len(names) == 1 else None

        fq = FlavorQuotas(
            FlavorName(name),
            tuple(
                ResourceQuota(r, nominal[r], limit(borrowing_limit, r), limit(lending_limit, r))
                for r in names
            ),
        )
        for covered, flavors in self._groups:
            if covered == names:
                flavors.append(fq)
                return self
        self._groups.append((names, [fq]))
        return self

    def strict_fifo(self) -> ClusterQueueBuilder:
        self._strategy = QueueingStrategy.STRICT_FIFO
        return self

    def selector(self, selector: LabelSelector | None = None, **labels: str) -> ClusterQueueBuilder:
        """``selector(team="a")`` (matchLabels), ``selector(None)`` (nil: matches nothing)."""
        self._selector = LabelSelector(dict(labels)) if labels else selector
        return self

    def preemption(
        self,
        within: str = "Never",
        reclaim: str = "Never",
        borrow_within_cohort: str = "Never",
        max_priority_threshold: int | None = None,
    ) -> ClusterQueueBuilder:
        self._preemption = PreemptionPolicy(
            WithinClusterQueue(within),
            ReclaimWithinCohort(reclaim),
            BorrowWithinCohort(borrow_within_cohort),
            max_priority_threshold,
        )
        return self

    def fungibility(
        self,
        when_can_borrow: str = "MayStopSearch",
        when_can_preempt: str = "TryNextFlavor",
        preference: str | None = None,
    ) -> ClusterQueueBuilder:
        self._fungibility = FlavorFungibility(
            FungibilityPolicy(when_can_borrow),
            FungibilityPolicy(when_can_preempt),
            None if preference is None else FungibilityPreference(preference),
        )
        return self

    def stop(self, policy: str = "Hold") -> ClusterQueueBuilder:
        self._stop = StopPolicy(policy)
        return self

    def fair_weight(self, w: float) -> ClusterQueueBuilder:
        """``spec.fairSharing.weight`` (read only with fair sharing enabled)."""
        self._fair_weight_milli = round(w * 1000)
        return self

    def admission_fair_sharing(self, mode: str = "UsageBasedAdmissionFairSharing",
                               ) -> ClusterQueueBuilder:
        """``spec.admissionScope.admissionMode`` (used when the core has an
        ``AdmissionFairSharing`` config)."""
        self._admission_mode = AdmissionMode._value2member_map_.get(mode, mode)  # type: ignore
        return self

    def build(self) -> ClusterQueueSpec:
        return ClusterQueueSpec(
            ClusterQueueName(self._name),
            tuple(ResourceGroup(covered, tuple(fl)) for covered, fl in self._groups),
            None if self._cohort is None else CohortName(self._cohort),
            self._strategy,
            self._selector,
            self._preemption,
            self._fungibility,
            self._stop,
            fair_weight_milli=self._fair_weight_milli,
            admission_mode=self._admission_mode,
        )


def cluster_queue(name: str) -> ClusterQueueBuilder:
    """Start a ClusterQueue (namespaceSelector ``{}``, BestEffortFIFO, no preemption)."""
    return ClusterQueueBuilder(name)


class CohortBuilder(ClusterQueueBuilder):
    """``cohort("team").parent("org").flavor("a100", gpu=4, lending_limit=2).weight(2)``: a
    Kueue v1beta2 Cohort object (its ``flavor`` quotas are the cohort's own pool)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._parent: str | None = None
        self._weight_milli = 1000

    def parent(self, name: str | None) -> CohortBuilder:
        self._parent = name
        return self

    def weight(self, w: float) -> CohortBuilder:
        self._weight_milli = round(w * 1000)
        return self

    def build(self) -> CohortSpec:  # type: ignore[override]
        return CohortSpec(
            CohortName(self._name),
            None if self._parent is None else CohortName(self._parent),
            tuple(ResourceGroup(covered, tuple(fl)) for covered, fl in self._groups),
            self._weight_milli,
        )


def cohort(name: str) -> CohortBuilder:
    """Start a Cohort object (a root, no quota, weight 1)."""
    return CohortBuilder(name)


class WorkloadBuilder:
    """``workload("w").cq("cq").pods(3, gpu=1).priority(5)``; namespace ``ns`` unless the
    name is ``ns/name``; queue ``lq-<cq>`` by ``cq(...)`` or ``queue(...)``."""

    def __init__(self, name: str) -> None:
        ns, _, short = name.rpartition("/")
        self._ns = ns or "ns"
        self._name = short
        self._queue = "lq"
        self._priority = 0
        self._creation: float | None = None
        self._uid = ""
        self._limit: float | None = None
        self._pod_sets: list[PodSet] = []

    def cq(self, name: str) -> WorkloadBuilder:
        self._queue = f"lq-{name}"
        return self

    def queue(self, name: str) -> WorkloadBuilder:
        self._queue = name
        return self

    def namespace(self, ns: str) -> WorkloadBuilder:
        self._ns = ns
        return self

    def priority(self, p: int) -> WorkloadBuilder:
        self._priority = p
        return self

    def created(self, t: float) -> WorkloadBuilder:
        self._creation = t
        return self

    def uid(self, uid: str) -> WorkloadBuilder:
        self._uid = uid
        return self

    def limit(self, seconds: float) -> WorkloadBuilder:
        """``maximumExecutionTimeSeconds``."""
        self._limit = seconds
        return self

    def pods(
        self,
        count: int = 1,
        *,
        resources: Mapping[str, Qty] | None = None,
        name: str = "main",
        **requests: Qty,
    ) -> WorkloadBuilder:
        """Add a pod set of ``count`` pods with per-pod ``requests``."""
        self._pod_sets.append(PodSet(name, count, _amounts(requests, resources)))
        return self

    def _last(self, **changes: object) -> WorkloadBuilder:
        self._pod_sets[-1] = replace(self._pod_sets[-1], **changes)  # type: ignore[arg-type]
        return self

    def min_count(self, n: int) -> WorkloadBuilder:
        """The last pod set may be admitted with ``n`` pods or more (partial admission)."""
        return self._last(min_count=n)

    def node_selector(self, **labels: str) -> WorkloadBuilder:
        return self._last(node_selector=dict(labels))

    def affinity(self, *terms: Iterable[tuple[str, str, Iterable[str]]]) -> WorkloadBuilder:
        """Required node affinity: each term a list of (key, operator, values)."""
        return self._last(
            affinity_terms=tuple(
                tuple(NodeSelectorRequirement(k, op, tuple(vals)) for k, op, vals in term)
                for term in terms
            )
        )

    def tolerate(
        self, key: str = "", operator: str = "Equal", value: str = "", effect: str = ""
    ) -> WorkloadBuilder:
        ps = self._pod_sets[-1]
        return self._last(tolerations=(*ps.tolerations, Toleration(key, operator, value, effect)))

    def build(self, creation: float = 0.0) -> Workload:
        pod_sets = tuple(self._pod_sets) or (PodSet("main", 1, {}),)
        return Workload(
            self._ns,
            self._name,
            self._queue,
            pod_sets,
            self._priority,
            self._creation if self._creation is not None else creation,
            self._uid or f"uid-{self._name}",
            max_execution_seconds=self._limit,
        )


def workload(name: str) -> WorkloadBuilder:
    """Start a Workload (one pod set ``main`` per ``pods(...)`` call)."""
    return WorkloadBuilder(name)


class Sim:
    """A ``Scheduler`` with a clock: every CQ gets LocalQueue ``lq-<cq>`` in namespace ``ns``.

    ``submit`` stamps creation time from the clock (each call advances it by 1 s);
    ``cycle`` runs one scheduling cycle and advances the clock; ``settle`` runs cycles until
    one returns nothing. Decisions are kept in ``history``.
    """

    def __init__(
        self,
        *items: ClusterQueueBuilder | FlavorBuilder | ClusterQueueSpec | ResourceFlavor
        | CohortSpec,
        namespaces: Mapping[str, Mapping[str, str]] | None = None,
        default_flavor: bool = True,
        fair_sharing: FairSharing | None = None,
        admission_fair_sharing: AdmissionFairSharing | None = None,
        requeue_batch_s: float = 0.0,
    ) -> None:
        self.c = Scheduler(fair_sharing, admission_fair_sharing,
                           requeue_batch_s=requeue_batch_s)
        self.now = 1000.0
        self.history: list[list[Decision]] = []
        built = [
            i.build() if isinstance(i, (ClusterQueueBuilder, FlavorBuilder)) else i for i in items
        ]
        flavors = [b for b in built if isinstance(b, ResourceFlavor)]
        cqs = [b for b in built if isinstance(b, ClusterQueueSpec)]
        cohorts = [b for b in built if isinstance(b, CohortSpec)]
        names = {f.name for f in flavors}
        if default_flavor:
            for cq in cqs:
                for fname in cq.flavor_names():
                    if fname not in names:
                        flavors.append(ResourceFlavor(fname))
                        names.add(fname)
        for f in flavors:
            self.c.add_flavor(f)
        for ns, labels in (namespaces or {"ns": {}}).items():
            self.c.set_namespace(ns, labels)
        for co in cohorts:
            self.c.add_cohort(co)
        for cq in cqs:
            self.add_cq(cq)

    def add_cq(
        self, cq: ClusterQueueSpec | ClusterQueueBuilder, namespaces: Iterable[str] = ("ns",)
    ) -> ClusterQueueSpec:
        spec = cq.build() if isinstance(cq, ClusterQueueBuilder) else cq
        self.c.add_cluster_queue(spec)
        for ns in namespaces:
            self.c.add_local_queue(LocalQueue(ns, f"lq-{spec.name}", spec.name))
        return spec

    def add_lq(self, key: str, cq: str, weight: float = 1.0) -> LocalQueue:
        """LocalQueue ``namespace/name`` of ClusterQueue ``cq`` with ``spec.fairSharing.weight``
        ``weight`` (Admission Fair Sharing)."""
        ns, name = key.split("/", 1)
        lq = LocalQueue(ns, name, ClusterQueueName(cq), fair_weight_milli=round(weight * 1000))
        self.c.add_local_queue(lq)
        return lq

    def tick(self, dt: float = 1.0) -> float:
        self.now += dt
        return self.now

    def submit(self, *wls: WorkloadBuilder | Workload) -> list[Workload]:
        out = []
        for w in wls:
            wl = w.build(creation=self.tick()) if isinstance(w, WorkloadBuilder) else w
            self.c.add_workload(wl)
            out.append(wl)
        return out

    def cycle(self) -> list[Decision]:
        ds = self.c.schedule(self.tick())
        self.history.append(ds)
        return ds

    def settle(self, limit: int = 200) -> list[Decision]:
        """Cycles until a cycle returns nothing; all decisions made."""
        made: list[Decision] = []
        for _ in range(limit):
            ds = self.cycle()
            if not ds:
                return made
            made.extend(ds)
        raise AssertionError(f"no fixed point after {limit} cycles")

    def finish_evictions(self) -> list[WorkloadKey]:
        """Let every Workload being evicted stop (its pods gone) now; the keys finished."""
        evicting = [k for k in self.c.workload_keys() if self.c.workload(k).state == "evicting"]
        for k in evicting:
            self.c.finish_eviction(k, self.now)
        return evicting

    def settle_evictions(self, limit: int = 50) -> None:
        """Settle, let every Workload being evicted stop, and repeat until none is."""
        for _ in range(limit):
            self.settle()
            if not self.finish_evictions():
                return
        raise AssertionError(f"still evicting after {limit} rounds")

    # -- lookups ---------------------------------------------------------------------------------
    @staticmethod
    def key(name: str) -> WorkloadKey:
        return WorkloadKey(name if "/" in name else f"ns/{name}")

    def state(self, name: str) -> str:
        info = self.c.workload(self.key(name))
        assert info is not None, name
        return info.state

    def admitted(self, name: str) -> bool:
        return self.state(name) == "admitted"

    def pending(self, name: str) -> bool:
        return self.state(name) == "pending"

    def reason(self, name: str):
        info = self.c.workload(self.key(name))
        assert info is not None, name
        return info.reason

    def usage(self, cq: str, flavor_: str = "default-flavor", resource: str = "cpu") -> int:
        return self.c.usage(ClusterQueueName(cq)).get(fr(flavor_, resource), 0)

    def status(self, cq: str, flavor_: str = "default-flavor", resource: str = "cpu"):
        st = self.c.cluster_queue_status(ClusterQueueName(cq))
        assert st is not None
        for r in st.resources:
            if r.flavor == flavor_ and r.resource == res(resource):
                return r
        raise KeyError((cq, flavor_, resource))

    def finish(self, *names: str) -> None:
        for n in names:
            assert self.c.finish(self.key(n)), n

    def finish_eviction(self, *names: str) -> None:
        for n in names:
            assert self.c.finish_eviction(self.key(n), self.now), n

    def evictions(self, decisions: Iterable[Decision] | None = None) -> list[tuple[str, str]]:
        """(victim key, reason) of every Preempt in ``decisions`` (default: all history)."""
        ds = decisions if decisions is not None else [d for c in self.history for d in c]
        return [
            (v.workload, v.reason.value) for d in ds if isinstance(d, Preempt) for v in d.victims
        ]

    @staticmethod
    def admits(decisions: Iterable[Decision]) -> list[str]:
        return [d.workload for d in decisions if isinstance(d, Admit)]

    @staticmethod
    def pendings(decisions: Iterable[Decision]) -> dict[str, Pending]:
        return {d.workload: d for d in decisions if isinstance(d, Pending)}


# The ClusterQueue policy values the differential property tests draw from (withinClusterQueue,
# reclaimWithinCohort, borrowWithinCohort, flavorFungibility whenCan... and preference).
WITHIN = ("Never", "LowerPriority", "LowerOrNewerEqualPriority")
RECLAIM = ("Never", "LowerPriority", "Any")
BORROW = ("Never", "LowerPriority")
FUNG = ("MayStopSearch", "TryNextFlavor")
PREF = (None, "BorrowingOverPreemption", "PreemptionOverBorrowing")


class Lockstep:
    """Several cores driven through the same calls, for differential property tests: every
    call must return the same on each (``each``), and every cycle the same decisions by repr
    (``cycle``: the clock moves 0.5 s first). ``cores[0]`` is the one under test."""

    def __init__(self, *cores: Scheduler) -> None:
        self.cores = cores
        self.now = 1000.0

    def each(self, method: str, *args: object) -> None:
        results = [getattr(c, method)(*args) for c in self.cores]
        assert all(r == results[0] for r in results), (method, args, results)

    def setup(self, flavors: Iterable[str], tree: bool) -> None:
        """ResourceFlavors ``flavors``, namespace ``ns`` and, with ``tree``, the Cohorts
        ``co`` > ``left`` (its own ``f1``: 1 CPU) and ``right``."""
        for f in flavors:
            self.each("add_flavor", ResourceFlavor(FlavorName(f)))
        self.each("set_namespace", "ns", {})
        if tree:
            self.each("add_cohort", cohort("co").build())
            self.each("add_cohort", cohort("left").parent("co").flavor("f1", cpu=1).build())
            self.each("add_cohort", cohort("right").parent("co").build())

    def cycle(self) -> None:
        self.now += 0.5
        first, *rest = (repr(c.schedule(self.now)) for c in self.cores)
        for i, other in enumerate(rest, 1):
            assert other == first, f"core {i} ({type(self.cores[i]).__name__}) decided otherwise"

    def workload_op(self, names: list[str], op: tuple) -> bool:
        """``op`` = (kind, index[, priority]) on Workload ``names[index % len(names)]``:
        ``finish`` (if admitted), ``delete``, ``evicted`` (its eviction completes, if
        evicting) or ``prio`` (its priority set to ``op[2]``). False when there is no such
        Workload (no names yet, or it was deleted)."""
        if not names:
            return False
        key = WorkloadKey(f"ns/{names[op[1] % len(names)]}")
        probe = self.cores[0]
        wl = probe.domain_workload(key)
        if wl is None:
            return False
        kind, state = op[0], probe.workload(key).state
        if kind == "finish" and state == "admitted":
            self.each("finish", key)
        elif kind == "delete":
            self.each("delete_workload", key)
        elif kind == "evicted" and state == "evicting":
            self.each("finish_eviction", key, self.now)
        elif kind == "prio":
            self.each("update_workload", replace(wl, priority=op[2]))
        return True

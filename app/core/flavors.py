"""Flavor assignment: which ResourceFlavor each pod set gets for each resource group.

Rules (Kueue ``pkg/scheduler/flavorassigner``, reference 3.5):

- Requests of a pod set = per-pod requests × count; a resource requested at 0 is ignored
  entirely (no flavor, no usage: acceptance KQ-01); if the ClusterQueue covers ``pods``,
  ``pods = count`` is added. A requested resource no group covers ⇒ NoFit
  ("resource X unavailable in ClusterQueue").
- All requested resources of one resource group get the same flavor for one pod set;
  groups choose independently. Flavors are tried in the ClusterQueue's order.
- A flavor is skipped when its NoSchedule/NoExecute taints are not tolerated (pod set
  tolerations plus the flavor's own) or when the pod set's nodeSelector / required node
  affinity contradicts the flavor's ``node_labels`` on the flavor's own label keys only.
- Per resource (the request includes earlier pod sets of the same Workload):
  above the ClusterQueue's maximum capacity ⇒ NoFit (ExceedsMaxQuota); within what is
  available now ⇒ Fit (borrowing level 0 when within nominal); otherwise, if the request is
  within nominal or the ClusterQueue may preempt while borrowing, the preemption oracle
  says Preempt (victims in the own ClusterQueue), Reclaim (only in other ClusterQueues) or
  NoCandidates, with the borrowing level once its victims are gone (0 for NoCandidates: so
  a waiting StrictFIFO head is ordered as not borrowing, acceptance KQ-09); else NoFit
  (WaitingForQuota). A flavor's mode is its worst resource's.
- Fungibility: stop at the first flavor unless its mode is NoFit/NoCandidates, or it needs
  preemption and ``whenCanPreempt`` is TryNextFlavor (default), or it borrows and
  ``whenCanBorrow`` is TryNextFlavor. The best flavor seen wins: default
  (BorrowingOverPreemption) ranks mode first (Fit > Reclaim > Preempt), then lower
  borrowing; PreemptionOverBorrowing ranks lower borrowing first. Ties keep the earlier
  flavor. pykueue always scans from the first flavor (Kueue resumes after the last one
  tried; an optimisation that changes no outcome for a single pass).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum

from app.core.decisions import PendingReason, QuotaShortfall
from app.core.quota import QuotaTree
from app.core.spec import (
    BorrowWithinCohort,
    ClusterQueueSpec,
    FungibilityPolicy,
    FungibilityPreference,
    ResourceFlavor,
    ResourceGroup,
)
from app.core.types import ClusterQueueName, FlavorName, FlavorResource, ResourceName
from app.core.workload import Admission, NodeSelectorRequirement, PodSet, PodSetAssignment, Workload


class Mode(IntEnum):
    """Outcome for one resource, flavor, pod set or Workload; larger is better."""

    NO_FIT = 0
    NO_CANDIDATES = 1
    PREEMPT = 2
    RECLAIM = 3
    FIT = 4


Oracle = Callable[[FlavorResource, int], tuple[Mode, int]]
"""Preemption simulation for one flavor-resource and amount: (PREEMPT, RECLAIM or
NO_CANDIDATES, borrowing level once the victims are gone; 0 for NO_CANDIDATES)."""

_SEVERITY = {
    PendingReason.RESOURCE_NOT_COVERED: 4,
    PendingReason.NO_MATCHING_FLAVOR: 3,
    PendingReason.EXCEEDS_MAX_QUOTA: 2,
    PendingReason.WAITING_FOR_QUOTA: 1,
}


def _requirement_matches(req: NodeSelectorRequirement, labels: Mapping[str, str]) -> bool:
    present = req.key in labels
    value = labels.get(req.key, "")
    op = req.operator
    if op == "In":
        return present and value in req.values
    if op == "NotIn":
        return not present or value not in req.values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(req.values) == 1:
        try:
            have, want = int(value), int(req.values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def flavor_mismatch(pod_set: PodSet, flavor: ResourceFlavor) -> str | None:
    """Why ``flavor`` cannot host ``pod_set`` (a sentence), or None when it can.

    Taints with effect NoSchedule or NoExecute must be tolerated by the pod set's tolerations
    or the flavor's own (Kueue v1beta2 ResourceFlavor ``nodeTaints`` / ``tolerations``);
    nodeSelector and required node affinity are compared on the flavor's label keys only.
    """
    tolerations = (*pod_set.tolerations, *flavor.tolerations)
    for taint in flavor.node_taints:
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        if not any(t.tolerates(taint) for t in tolerations):
            shown = f"{taint.key}={taint.value}" if taint.value else taint.key
            return f"untolerated taint {shown}:{taint.effect} in flavor {flavor.name}"
    labels = flavor.node_labels
    for k, v in pod_set.node_selector.items():
        if k in labels and labels[k] != v:
            return (
                f"flavor {flavor.name} doesn't match nodeSelector {k}={v} "
                f"(flavor has {k}={labels[k]})"
            )
    if pod_set.affinity_terms:
        for term in pod_set.affinity_terms:
            relevant = [r for r in term if r.key in labels]
            # A term with no key of this flavor does not constrain it (terms are ORed).
            if all(_requirement_matches(r, labels) for r in relevant):
                return None
        return (
            f"flavor {flavor.name} doesn't match the required node affinity of pod set "
            f"{pod_set.name}"
        )
    return None


@dataclass(slots=True)
class PodSetFlavors:
    """Chosen flavors of one pod set: ``flavors`` {resource: flavor}, ``usage`` {resource:
    amount for all pods}, and the mode / borrowing level of that choice."""

    name: str
    count: int
    flavors: dict[ResourceName, FlavorName]
    usage: dict[ResourceName, int]
    mode: Mode = Mode.FIT
    borrow: int = 0


@dataclass(slots=True)
class Assignment:
    """Flavor assignment of a whole Workload in one ClusterQueue.

    ``mode``: worst pod set mode; ``borrow``: highest borrowing level; ``usage``: total per
    FlavorResource; ``need_preemption``: flavor-resources whose mode needs victims (ordered);
    for NoFit / NoCandidates ``reason``, ``message`` and ``shortfalls`` explain why.
    """

    pod_sets: list[PodSetFlavors] = field(default_factory=list)
    mode: Mode = Mode.FIT
    borrow: int = 0
    usage: dict[FlavorResource, int] = field(default_factory=dict)
    need_preemption: dict[FlavorResource, None] = field(default_factory=dict)
    reason: PendingReason | None = None
    message: str = ""
    shortfalls: tuple[QuotaShortfall, ...] = ()

    def admission(self, cluster_queue: ClusterQueueName) -> Admission:
        """The ``status.admission`` for this assignment (count = full pod set count)."""
        return Admission(
            cluster_queue,
            tuple(
                PodSetAssignment(ps.name, dict(ps.flavors), dict(ps.usage), ps.count)
                for ps in self.pod_sets
            ),
        )


def shortfall(
    tree: QuotaTree, spec: ClusterQueueSpec, pod_set: str, fr: FlavorResource, requested: int,
    earlier: int = 0,
) -> QuotaShortfall:
    """The numbers of one flavor-resource of ``spec`` against ``requested`` by pod set
    ``pod_set`` when the Workload's earlier pod sets take ``earlier`` of it (for messages:
    the numbers are the pod set's, see ``QuotaShortfall``)."""
    cq = spec.name
    available = tree.available(cq, fr)
    maximum = tree.potential_available(cq, fr)
    total, requested = requested + earlier, requested
    quota = tree.quota(cq, fr)
    nominal = 0 if quota is None else quota.nominal
    bl = None if quota is None else quota.borrowing_limit
    usage = tree.usage(cq, fr)
    cohort = tree.cohort_of(cq)
    if total > maximum:
        limit = "maximumCapacity"
    elif cohort is None:
        limit = "nominalQuota"
    elif bl is not None and nominal + bl - usage <= available:
        limit = "borrowingLimit"
    else:
        limit = "cohort"
    return QuotaShortfall(
        pod_set=pod_set,
        flavor=fr.flavor,
        resource=fr.resource,
        requested=requested,
        available=max(0, available - earlier),
        maximum=max(0, maximum - earlier),
        nominal=nominal,
        usage=usage,
        borrowed=tree.borrowed(cq, fr),
        borrowing_limit=bl,
        limit=limit,
        cohort=cohort,
        cohort_capacity=0 if cohort is None else tree.cohort_capacity(cohort, fr),
        cohort_usage=0 if cohort is None else tree.cohort_usage(cohort, fr),
        earlier=earlier,
    )


@dataclass(slots=True)
class _FlavorTry:
    flavor: FlavorName
    mode: Mode
    borrow: int
    reason: PendingReason
    text: str
    shortfalls: list[QuotaShortfall] = field(default_factory=list)
    preempt_frs: list[FlavorResource] = field(default_factory=list)


def _preferred(
    a: _FlavorTry, b: _FlavorTry | None, preference: FungibilityPreference | None
) -> bool:
    """True when ``a`` is strictly better than ``b``."""
    if b is None:
        return True
    viable_a, viable_b = a.mode >= Mode.PREEMPT, b.mode >= Mode.PREEMPT
    if viable_a != viable_b:
        return viable_a
    if not viable_a:
        return a.mode > b.mode
    if preference == FungibilityPreference.PREEMPTION_OVER_BORROWING:
        return (a.borrow, -a.mode) < (b.borrow, -b.mode)
    return (-a.mode, a.borrow) < (-b.mode, b.borrow)


def _keep_looking(t: _FlavorTry, spec: ClusterQueueSpec) -> bool:
    ff = spec.flavor_fungibility
    if t.mode <= Mode.NO_CANDIDATES:
        return True
    if (
        t.mode in (Mode.PREEMPT, Mode.RECLAIM)
        and ff.when_can_preempt == FungibilityPolicy.TRY_NEXT_FLAVOR
    ):
        return True
    return t.borrow > 0 and ff.when_can_borrow == FungibilityPolicy.TRY_NEXT_FLAVOR


class _Assigner:
    def __init__(
        self,
        wl: Workload,
        spec: ClusterQueueSpec,
        flavors: Mapping[FlavorName, ResourceFlavor],
        tree: QuotaTree,
        oracle: Oracle,
        fair_sharing: bool = False,
    ) -> None:
        self.wl, self.spec, self.flavors, self.tree, self.oracle = wl, spec, flavors, tree, oracle
        self.acc: dict[FlavorResource, int] = {}
        # Kueue's flavor assigner asks the oracle while borrowing under fair sharing too: a
        # borrower below its share may preempt one above it.
        self.may_preempt_while_borrowing = fair_sharing or (
            spec.preemption.borrow_within_cohort != BorrowWithinCohort.NEVER
        )

    def _resource(self, ps: PodSet, fr: FlavorResource, amount: int, t: _FlavorTry) -> None:
        cq, tree = self.spec.name, self.tree
        val = self.acc.get(fr, 0) + amount
        available = tree.available(cq, fr)
        borrow = tree.borrowing_level(cq, fr, val)
        if val <= available:
            t.borrow = max(t.borrow, borrow)
            return
        sf = shortfall(tree, self.spec, ps.name, fr, amount, earlier=val - amount)
        t.shortfalls.append(sf)
        if sf.limit == "maximumCapacity":
            mode, reason = Mode.NO_FIT, PendingReason.EXCEEDS_MAX_QUOTA
        elif val <= tree.nominal(cq, fr) or self.may_preempt_while_borrowing:
            # Kueue's oracle reports the borrowing level after the simulated preemption.
            (mode, borrow), reason = self.oracle(fr, val), PendingReason.WAITING_FOR_QUOTA
            if mode in (Mode.PREEMPT, Mode.RECLAIM):
                t.preempt_frs.append(fr)
        else:
            mode, reason = Mode.NO_FIT, PendingReason.WAITING_FOR_QUOTA
        t.borrow = max(t.borrow, borrow)
        if mode < t.mode:
            t.mode = mode
        if _SEVERITY[reason] > _SEVERITY[t.reason]:
            t.reason = reason
        t.text = "; ".join(s.describe() for s in t.shortfalls)

    def _group(self, ps: PodSet, group: ResourceGroup, req: dict[ResourceName, int]) -> _FlavorTry:
        best: _FlavorTry | None = None
        tries: list[_FlavorTry] = []
        for fq in group.flavors:
            rf = self.flavors.get(fq.name)
            why = f"flavor {fq.name} not found" if rf is None else flavor_mismatch(ps, rf)
            if why is not None:
                t = _FlavorTry(fq.name, Mode.NO_FIT, 0, PendingReason.NO_MATCHING_FLAVOR, why)
                tries.append(t)
                best = t if best is None else best
                continue
            t = _FlavorTry(fq.name, Mode.FIT, 0, PendingReason.WAITING_FOR_QUOTA, "")
            for r, amount in req.items():
                self._resource(ps, FlavorResource(fq.name, r), amount, t)
            tries.append(t)
            if _preferred(t, best, self.spec.flavor_fungibility.preference):
                best = t
            if not _keep_looking(t, self.spec):
                break
        assert best is not None  # a valid group has at least one flavor
        if best.mode == Mode.NO_FIT:
            # Per group the least severe flavor reason (reference 3.5).
            best.reason = min((t.reason for t in tries), key=lambda r: _SEVERITY[r])
            best.text = "; ".join(t.text for t in tries if t.text)
            best.shortfalls = [s for t in tries for s in t.shortfalls]
        return best

    def run(self) -> Assignment:
        out = Assignment()
        spec = self.spec
        covers_pods = spec.group_of(ResourceName("pods")) is not None
        for ps in self.wl.pod_sets:
            totals = {r: v * ps.count for r, v in ps.requests.items() if v * ps.count > 0}
            if covers_pods and ps.count > 0:
                totals[ResourceName("pods")] = ps.count
            per_group: dict[int, dict[ResourceName, int]] = {}
            for r, v in totals.items():
                g = spec.group_of(r)
                if g is None:
                    out.mode, out.reason = Mode.NO_FIT, PendingReason.RESOURCE_NOT_COVERED
                    out.message = (
                        f"couldn't assign flavors to pod set {ps.name}: resource {r} "
                        f"unavailable in ClusterQueue {spec.name}"
                    )
                    return out
                per_group.setdefault(spec.resource_groups.index(g), {})[r] = v
            chosen = PodSetFlavors(ps.name, ps.count, {}, {})
            for gi in sorted(per_group):
                req = per_group[gi]
                t = self._group(ps, spec.resource_groups[gi], req)
                if t.mode == Mode.NO_FIT:
                    out.mode, out.reason = Mode.NO_FIT, t.reason
                    out.message = f"couldn't assign flavors to pod set {ps.name}: {t.text}"
                    out.shortfalls = tuple(t.shortfalls)
                    return out
                for r, v in req.items():
                    fr = FlavorResource(t.flavor, r)
                    chosen.flavors[r] = t.flavor
                    chosen.usage[r] = v
                    self.acc[fr] = self.acc.get(fr, 0) + v
                chosen.mode = min(chosen.mode, t.mode)
                chosen.borrow = max(chosen.borrow, t.borrow)
                out.need_preemption.update(dict.fromkeys(t.preempt_frs))
                if t.mode < Mode.FIT:
                    out.shortfalls += tuple(t.shortfalls)
                    out.message = "; ".join(
                        m for m in (out.message, f"pod set {ps.name}: {t.text}") if m
                    )
            out.pod_sets.append(chosen)
            out.mode = min(out.mode, chosen.mode)
            out.borrow = max(out.borrow, chosen.borrow)
        out.usage = dict(self.acc)
        if out.mode == Mode.NO_CANDIDATES:
            out.reason = PendingReason.WAITING_FOR_QUOTA
            out.message = f"couldn't assign flavors: {out.message}"
        return out


def assign_flavors(
    wl: Workload,
    spec: ClusterQueueSpec,
    flavors: Mapping[FlavorName, ResourceFlavor],
    tree: QuotaTree,
    oracle: Oracle,
    fair_sharing: bool = False,
) -> Assignment:
    """Assign flavors to every pod set of ``wl`` in ClusterQueue ``spec`` against the current
    usage in ``tree``; ``oracle(fr, amount)`` decides whether preemption could make room
    (asked while borrowing too when ``fair_sharing`` is on or borrowWithinCohort allows it).

    Returns an ``Assignment`` (never raises for Workload contents; ``spec`` must be valid).
    """
    return _Assigner(wl, spec, flavors, tree, oracle, fair_sharing).run()

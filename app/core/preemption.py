"""Classical preemption: which admitted Workloads to evict so that a preemptor fits.

Rules (Kueue ``pkg/scheduler/preemption``, reference 3.7):

- Flavor-resources that "need preemption" are those whose flavor assignment needs victims.
  A candidate uses at least one of them and is admitted in the preemptor's ClusterQueue or
  another ClusterQueue of its cohort.
- Same ClusterQueue: ``withinClusterQueue`` — LowerPriority (candidate priority lower),
  LowerOrNewerEqualPriority (lower, or equal and the preemptor is older), Never.
- Other ClusterQueues: ``reclaimWithinCohort`` — LowerPriority, Any, Never; only from a
  ClusterQueue of the same cohort tree that borrows (usage > nominal) on a resource needing
  preemption, and whose cohorts up to the lowest common ancestor with the preemptor borrow
  too (Kueue's hierarchical reclaim, ``QuotaTree.reclaimable``), re-checked as victims are
  removed (a queue back within its nominal is no longer a candidate).
- ``borrowWithinCohort: LowerPriority`` lets the preemptor stay borrowing after reclaiming
  from other ClusterQueues, only from candidates of strictly lower priority and at most
  ``maxPriorityThreshold``; otherwise a reclaiming preemptor must end within its nominal.
- Attempts (allow borrowing: yes / no): only "yes" when there is no other-ClusterQueue
  candidate, or borrowWithinCohort is Never and the ClusterQueue is not under nominal on
  every resource needing preemption; only "no" when borrowWithinCohort is Never (and it is
  under nominal); else "yes" then "no".
- Candidate order: already being evicted first, other ClusterQueues before the own, (with
  Admission Fair Sharing in the preemptor's ClusterQueue: its Workloads from the LocalQueue
  with the higher usage first), lower priority, most recently admitted, uid, key.
- Fewest victims: remove candidates in that order until the preemptor fits, then walk the
  chosen ones backwards (all but the last) and put back each one whose return still lets it
  fit. The result is minimal: no victim can be spared (acceptance KQ-14, KQ-15).
- Reasons: InClusterQueue (same ClusterQueue), InCohortReclamation, and
  InCohortReclaimWhileBorrowing (taken by the borrowing attempt).

Fair sharing (``find_fair_targets``; Kueue v0.17.1 ``preemption.go`` ``fairPreemptions``,
``runFirstFsStrategy``, ``runSecondFsStrategy`` and ``preemption/fairsharing``, reference
3.8): the same eligible candidates (``borrowWithinCohort`` ignored). The preemptor's usage
is in the tree for the whole search (every share counts it; it is taken out only to test the
fit). The next victim comes from the ClusterQueue reached by descending the tree from the
root through the child with the highest dominant resource share (DRS, compared as Kueue's
``CompareDRS``: ``quota.Share``) that still has candidates; another ClusterQueue stays a
target while it, and each cohort between it and the lowest common ancestor, borrows any
flavor-resource (``QuotaTree.fair_target``, Kueue's ``nextTarget``). Own-queue candidates
are always taken; another queue's are taken unconditionally when the preemptor's queue, with
it, is within its nominal quota (decided once), else by the first strategy at the lowest
common ancestor: the target's candidates are tried in order, the first that passes is taken
and the target chosen again, those that fail are kept. S2-a ``LessThanOrEqualToFinalShare``:
preemptor's share ≤ the target's after the eviction; S2-b ``LessThanInitialShare``: < the
target's before it. When S2-b is the second strategy it goes on with the first one's victims
still removed, over the candidates the first one kept, one victim per queue. Reason
``InCohortFairSharing``. Then the same fill-back as classical preemption. With
``FairSharing.s2b_priority_guard`` (pykueue's opt-in; off, as Kueue v0.17.1, by default)
S2-b takes no victim of higher priority than the preemptor (S2-a and reclaim within nominal
stay priority-blind). S2-b can leave the target queue below the preemptor; with Kueue
v0.17.1's rule a lower-priority Workload's S2-b eviction, the target queue's lower-priority
Workloads coming back and the victim's own ``withinClusterQueue`` preemption of them can
follow one another forever (tests/unit/core/test_hierarchy_properties.py has the example,
round by round).

Simulation removes usage from the ``QuotaTree`` and restores it exactly before returning.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from app.core.decisions import PreemptionReason
from app.core.quota import QuotaTree, Share
from app.core.spec import (
    BorrowWithinCohort,
    ClusterQueueSpec,
    FairSharing,
    FairSharingStrategy,
    ReclaimWithinCohort,
    WithinClusterQueue,
)
from app.core.types import ClusterQueueName, FlavorResource, WorkloadKey


@dataclass(frozen=True, slots=True)
class Candidate:
    """An admitted Workload that could be evicted. ``reserved_at``: when it got its quota
    (seconds); ``order_time``: its queue-order timestamp; ``usage``: what it holds."""

    key: WorkloadKey
    cluster_queue: ClusterQueueName
    priority: int
    uid: str
    reserved_at: float
    order_time: float
    usage: Mapping[FlavorResource, int]
    evicting: bool = False
    # Admission Fair Sharing usage of its LocalQueue (only for candidates of the preemptor's
    # own ClusterQueue when that uses it; else 0).
    lq_usage: float = 0.0


@dataclass(frozen=True, slots=True)
class Preemptor:
    """The pending Workload that needs room."""

    key: WorkloadKey
    cluster_queue: ClusterQueueName
    priority: int
    uid: str
    order_time: float


@dataclass(frozen=True, slots=True)
class Target:
    """A chosen victim and the Preempted condition reason."""

    candidate: Candidate
    reason: PreemptionReason


@dataclass(frozen=True, slots=True)
class Targets:
    """The minimal victim set and whether it lets the preemptor borrow."""

    targets: tuple[Target, ...]
    allow_borrowing: bool


def candidate_order(c: Candidate, preemptor_cq: ClusterQueueName) -> tuple[object, ...]:
    """Kueue's CandidatesOrdering as a sort key (smaller = evicted first); Admission Fair
    Sharing's rule (higher LocalQueue usage first) for the preemptor's own ClusterQueue."""
    return (
        not c.evicting,
        c.cluster_queue == preemptor_cq,
        -c.lq_usage,
        c.priority,
        -c.reserved_at,
        c.uid,
        c.key,
    )


def _eligibility(
    p: Preemptor, spec: ClusterQueueSpec, need: tuple[FlavorResource, ...], tree: QuotaTree,
    fixed: Iterable[ClusterQueueName] = (), fair: bool = False,
) -> Callable[[Candidate], bool]:
    """The eligibility rule for candidates of one preemption search (Kueue
    ``preemption.go`` candidate filters), with the per-ClusterQueue part (same cohort tree,
    the ClusterQueue borrows a needed flavor-resource) computed once per ClusterQueue: the
    tree does not change while candidates are filtered. The part of the ClusterQueues
    ``fixed`` is computed now, so the rule can filter lazily while a search changes the
    tree. Classical: the cohorts up to the lowest common ancestor borrow one too
    (``QuotaTree.reclaimable``); with ``fair`` only the ClusterQueue itself (Kueue
    ``findCandidates``: ``cqIsBorrowing``; the fair search prunes the cohorts)."""
    own = p.cluster_queue
    within = spec.preemption.within_cluster_queue
    reclaim = spec.preemption.reclaim_within_cohort
    cohort = tree.cohort_of(own)
    root = tree.root_of(own)

    def borrows(cq: ClusterQueueName) -> bool:
        if not tree.has(cq):
            return False
        if fair:
            return cq != own and tree.root_of(cq) == root and tree.borrows(cq, need)
        return tree.reclaimable(own, cq, need)

    borrowing: dict[ClusterQueueName, bool] = {cq: borrows(cq) for cq in fixed}

    def other_borrows(cq: ClusterQueueName) -> bool:
        v = borrowing.get(cq)
        if v is None:
            v = borrowing[cq] = borrows(cq)
        return v

    def eligible(c: Candidate) -> bool:
        if not any(c.usage.get(fr, 0) > 0 for fr in need):
            return False
        if c.cluster_queue == own:
            if within == WithinClusterQueue.LOWER_PRIORITY:
                return c.priority < p.priority
            if within == WithinClusterQueue.LOWER_OR_NEWER_EQUAL_PRIORITY:
                return c.priority < p.priority or (
                    c.priority == p.priority and p.order_time < c.order_time
                )
            return False
        if cohort is None or reclaim == ReclaimWithinCohort.NEVER:
            return False
        if reclaim == ReclaimWithinCohort.LOWER_PRIORITY and not c.priority < p.priority:
            return False
        return other_borrows(c.cluster_queue)

    return eligible


class _Search:
    def __init__(
        self,
        p: Preemptor,
        spec: ClusterQueueSpec,
        tree: QuotaTree,
        need: tuple[FlavorResource, ...],
        request: Mapping[FlavorResource, int],
    ) -> None:
        self.p, self.spec, self.tree, self.need, self.request = p, spec, tree, need, request

    def fits(self, allow_borrowing: bool) -> bool:
        cq, tree = self.p.cluster_queue, self.tree
        for fr, r in self.request.items():
            if r > tree.available(cq, fr):
                return False
            if not allow_borrowing and tree.usage(cq, fr) + r > tree.nominal(cq, fr):
                return False
        return True

    def while_borrowing_ok(self, c: Candidate) -> bool:
        pol = self.spec.preemption
        if pol.borrow_within_cohort != BorrowWithinCohort.LOWER_PRIORITY:
            return False
        if not c.priority < self.p.priority:
            return False
        return pol.max_priority_threshold is None or c.priority <= pol.max_priority_threshold

    def attempt(self, cands: Iterable[Candidate], allow: bool) -> list[Target] | None:
        tree, own = self.tree, self.p.cluster_queue
        removed: list[Target] = []
        fits = False
        for c in cands:
            if c.cluster_queue != own:
                if not tree.reclaimable(own, c.cluster_queue, self.need):
                    continue
                if allow and not self.while_borrowing_ok(c):
                    continue
                reason = (
                    PreemptionReason.IN_COHORT_RECLAIM_WHILE_BORROWING
                    if allow
                    else PreemptionReason.IN_COHORT_RECLAMATION
                )
            else:
                reason = PreemptionReason.IN_CLUSTER_QUEUE
            tree.remove_usage(c.cluster_queue, c.usage)
            removed.append(Target(c, reason))
            if self.fits(allow):
                fits = True
                break
        return self.settle(removed, fits, allow)

    def settle(self, removed: list[Target], fits: bool, allow: bool) -> list[Target] | None:
        """Fill back (every victim but the last that is not needed returns), restore the
        tree, and return the victims (None when the preemptor did not fit)."""
        tree = self.tree
        if fits:
            for i in range(len(removed) - 2, -1, -1):
                c = removed[i].candidate
                tree.add_usage(c.cluster_queue, c.usage)
                if self.fits(allow):
                    del removed[i]
                else:
                    tree.remove_usage(c.cluster_queue, c.usage)
        for t in removed:
            tree.add_usage(t.candidate.cluster_queue, t.candidate.usage)
        return removed if fits else None


class OrderedCandidates:
    """The candidates of one preemptor's ClusterQueue ``own`` already in Kueue's candidate
    order, for ``find_targets`` to walk lazily (a head needing one victim reads a few, not a
    sorted copy of its whole cohort). ``others_evicting`` / ``others_running``: the cohort's
    candidates being evicted / not, each sorted by ``candidate_order`` (any ClusterQueue's
    name as the preemptor's: another queue's candidates compare alike), shared by every head
    of the cohort; ``own``'s among them are skipped. ``mine``: ``own``'s, sorted by
    ``candidate_order(c, own)``. ``cluster_queues``: every ClusterQueue in ``others_*``.
    Iteration gives ``sorted(all, key=candidate_order(c, own))``: being evicted first, and
    within that another ClusterQueue's before the own."""

    __slots__ = ("own", "others_evicting", "others_running", "mine", "cluster_queues")

    def __init__(self, own: ClusterQueueName, others_evicting: Sequence[Candidate],
                 others_running: Sequence[Candidate], mine: Sequence[Candidate],
                 cluster_queues: Iterable[ClusterQueueName]) -> None:
        self.own, self.mine = own, mine
        self.others_evicting, self.others_running = others_evicting, others_running
        self.cluster_queues = tuple(cluster_queues)

    def __iter__(self) -> Iterator[Candidate]:
        own = self.own
        for c in self.others_evicting:
            if c.cluster_queue != own:
                yield c
        for c in self.mine:
            if c.evicting:
                yield c
        for c in self.others_running:
            if c.cluster_queue != own:
                yield c
        for c in self.mine:
            if not c.evicting:
                yield c


class _Filtered:
    """``candidates`` filtered by ``keep``, walked again on every iteration (no copy)."""

    __slots__ = ("candidates", "keep")

    def __init__(self, candidates: Iterable[Candidate], keep: Callable[[Candidate], bool]):
        self.candidates, self.keep = candidates, keep

    def __iter__(self) -> Iterator[Candidate]:
        return filter(self.keep, self.candidates)

    def __bool__(self) -> bool:
        return next(iter(self), None) is not None


def _eligible(
    p: Preemptor,
    spec: ClusterQueueSpec,
    tree: QuotaTree,
    candidates: Iterable[Candidate],
    need: tuple[FlavorResource, ...],
    fair: bool = False,
) -> list[Candidate]:
    """The eligible candidates in Kueue's candidate order (``fair``: see ``_eligibility``)."""
    return sorted(
        filter(_eligibility(p, spec, need, tree, fair=fair), candidates),
        key=lambda c: candidate_order(c, p.cluster_queue),
    )


def find_targets(
    preemptor: Preemptor,
    spec: ClusterQueueSpec,
    tree: QuotaTree,
    candidates: Iterable[Candidate],
    need: Iterable[FlavorResource],
    request: Mapping[FlavorResource, int],
) -> Targets | None:
    """The fewest Workloads to evict so that ``request`` fits ``preemptor``'s ClusterQueue
    ``spec``, or None when no eligible set makes it fit.

    ``candidates``: admitted Workloads of the preemptor's ClusterQueue and its cohort (any
    order; ineligible ones are filtered), or an ``OrderedCandidates`` (walked in its order,
    filtered lazily, only as far as the search goes); ``need``: flavor-resources needing preemption;
    ``request``: the preemptor's whole usage per FlavorResource, which must not fit as
    things stand (the scheduler asks only then). ``tree`` is restored before returning.
    """
    p, need_t = preemptor, tuple(need)
    cands: Iterable[Candidate]
    if isinstance(candidates, OrderedCandidates):  # already in order: filter as walked
        cands = _Filtered(candidates, _eligibility(p, spec, need_t, tree,
                                                   candidates.cluster_queues))
    else:
        cands = _eligible(p, spec, tree, candidates, need_t)
    if not cands:
        return None
    search = _Search(p, spec, tree, need_t, request)
    has_other = any(c.cluster_queue != p.cluster_queue for c in cands)
    forbidden = spec.preemption.borrow_within_cohort == BorrowWithinCohort.NEVER
    under_nominal = all(
        tree.usage(p.cluster_queue, fr) < tree.nominal(p.cluster_queue, fr) for fr in need_t
    )
    if not has_other or (forbidden and not under_nominal):
        attempts = (True,)
    elif forbidden:
        attempts = (False,)
    else:
        attempts = (True, False)
    for allow in attempts:
        found = search.attempt(cands, allow)
        if found:
            return Targets(tuple(found), allow)
    return None


def _sides(own: list[str], other: list[str]) -> tuple[str, str]:
    """The children of the lowest common ancestor on each side of two node paths (each from
    the ClusterQueue up to, not including, the root)."""
    common = set(own) & set(other)
    a = next((i for i, n in enumerate(own) if n in common), len(own))
    b = next((i for i, n in enumerate(other) if n in common), len(other))
    return own[a - 1], other[b - 1]


class _FairSearch(_Search):
    """Fair-sharing preemption (see the module docstring), run as Kueue v0.17.1 runs it
    (``preemption.go`` ``fairPreemptions``, ``runFirstFsStrategy``, ``runSecondFsStrategy``;
    ``preemption/fairsharing``): the preemptor's usage is added to the tree for the whole
    search, so every share read (the target queue's choice, the strategies) counts it, and
    is taken out only to test whether the preemptor fits."""

    def within_nominal(self) -> bool:
        """Whether the preemptor's ClusterQueue, with the preemptor's usage (already in the
        tree), stays within its nominal quota on every flavor-resource needing preemption."""
        own, tree = self.p.cluster_queue, self.tree
        return all(tree.usage(own, fr) <= tree.nominal(own, fr) for fr in self.need)

    def fits_now(self) -> bool:
        """``fits`` with the preemptor's usage taken out of the tree meanwhile."""
        own = self.p.cluster_queue
        self.tree.remove_usage(own, self.request)
        try:
            return self.fits(True)
        finally:
            self.tree.add_usage(own, self.request)

    def target(self, pools: dict[ClusterQueueName, list[Candidate]]) -> ClusterQueueName:
        """The queue reached from the root through the highest shares (ties: node name)."""
        def descent(cq: ClusterQueueName) -> list[tuple[Share, str]]:
            return [(v, n) for n, v in reversed(self.tree.path_shares(cq))]

        return max(pools, key=descent)

    def shares(self, cq: ClusterQueueName) -> tuple[Share, str, Share]:
        """(the preemptor's share, the node of ``cq``'s side, that node's share now) at the
        lowest common ancestor of the preemptor's ClusterQueue and ``cq`` (Kueue
        ``ComputeShares``: the children of that ancestor on each side, the "almost LCAs")."""
        mine = self.tree.path_shares(self.p.cluster_queue)
        theirs = self.tree.path_shares(cq)
        a, b = _sides([n for n, _ in mine], [n for n, _ in theirs])
        return dict(mine)[a], b, dict(theirs)[b]

    def share_of(self, cq: ClusterQueueName, node: str) -> Share:
        return dict(self.tree.path_shares(cq))[node]

    def take(self, c: Candidate, reason: PreemptionReason, removed: list[Target]) -> bool:
        """Remove ``c``'s usage, record it, and tell whether the preemptor fits now."""
        self.tree.remove_usage(c.cluster_queue, c.usage)
        removed.append(Target(c, reason))
        return self.fits_now()

    def run(self, cands: list[Candidate], fair: FairSharing) -> list[Target] | None:
        tree, own = self.tree, self.p.cluster_queue
        tree.add_usage(own, self.request)
        removed: list[Target] = []
        try:
            fits, retry = self.first(cands, fair.strategies[0], fair.s2b_priority_guard,
                                     removed)
            if not fits and len(fair.strategies) > 1:
                fits = self.second(retry, fair.s2b_priority_guard, removed)
        finally:
            tree.remove_usage(own, self.request)
        return self.settle(removed, fits, True)

    def first(self, cands: list[Candidate], strategy: FairSharingStrategy, guard: bool,
              removed: list[Target]) -> tuple[bool, list[Candidate]]:
        """The first strategy (Kueue ``runFirstFsStrategy``): the next victim comes from the
        queue ``target`` names; the preemptor's own queue loses its next candidate; another
        queue too when the preemptor's queue stays within its nominal quota (decided once,
        before any victim); else that queue's candidates are tried in order, the first one
        that passes the strategy is taken (then the target is chosen again) and those that
        fail are kept, in order, for the second strategy. (fits, those kept)."""
        own, p, tree = self.p.cluster_queue, self.p, self.tree
        pools: dict[ClusterQueueName, list[Candidate]] = {}
        for c in cands:
            pools.setdefault(c.cluster_queue, []).append(c)
        within = self.within_nominal()
        final = strategy == FairSharingStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE
        retry: list[Candidate] = []
        while pools:
            cq = self.target(pools)
            pool = pools[cq]
            if cq == own:
                if self.take(pool.pop(0), PreemptionReason.IN_CLUSTER_QUEUE, removed):
                    return True, retry
            elif not tree.fair_target(own, cq):
                del pools[cq]  # borrows nothing any more after earlier victims
                continue
            elif within:
                if self.take(pool.pop(0), PreemptionReason.IN_COHORT_RECLAMATION, removed):
                    return True, retry
            else:
                share, node, before = self.shares(cq)
                while pool:
                    c = pool.pop(0)
                    if final:
                        tree.remove_usage(cq, c.usage)
                        ok = share <= self.share_of(cq, node)
                        tree.add_usage(cq, c.usage)
                    else:  # s2b_priority_guard: no S2-b victim above the preemptor's priority
                        ok = share < before and not (guard and c.priority > p.priority)
                    if ok:
                        if self.take(c, PreemptionReason.IN_COHORT_FAIR_SHARING, removed):
                            return True, retry
                        break  # the shares moved: choose the target again
                    retry.append(c)
            if not pool:
                del pools[cq]
        return False, retry

    def second(self, retry: list[Candidate], guard: bool, removed: list[Target]) -> bool:
        """S2-b after S2-a (Kueue ``runSecondFsStrategy``): over the candidates S2-a kept,
        with S2-a's victims still removed, each queue ``target`` names loses its first kept
        candidate when the preemptor's share is below the queue's, and is then dropped (one
        victim per queue)."""
        own, p = self.p.cluster_queue, self.p
        pools: dict[ClusterQueueName, list[Candidate]] = {}
        for c in retry:
            pools.setdefault(c.cluster_queue, []).append(c)
        while pools:
            cq = self.target(pools)
            pool = pools.pop(cq)
            if not self.tree.fair_target(own, cq):
                continue
            share, _, theirs = self.shares(cq)
            if not share < theirs:
                continue
            # s2b_priority_guard: no S2-b victim above the preemptor's priority
            c = next((c for c in pool if not (guard and c.priority > p.priority)), None)
            if c is not None and self.take(c, PreemptionReason.IN_COHORT_FAIR_SHARING,
                                           removed):
                return True
        return False


def find_fair_targets(
    preemptor: Preemptor,
    spec: ClusterQueueSpec,
    tree: QuotaTree,
    candidates: Iterable[Candidate],
    need: Iterable[FlavorResource],
    request: Mapping[FlavorResource, int],
    fair: FairSharing,
) -> Targets | None:
    """Fair-sharing preemption (see the module docstring): the fewest victims found by the
    first of ``fair.strategies`` that makes ``request`` fit, or None. Arguments as for
    ``find_targets``; ``tree`` is restored before returning."""
    p, need_t = preemptor, tuple(need)
    cands = _eligible(p, spec, tree, candidates, need_t, fair=True)
    if not cands:
        return None
    found = _FairSearch(p, spec, tree, need_t, request).run(cands, fair)
    return Targets(tuple(found), True) if found else None

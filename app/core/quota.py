"""ClusterQueue / cohort quota tree: nominalQuota, borrowingLimit, lendingLimit, usage.

Rules: Kueue v1beta2 ClusterQueue quotas and the hierarchical arithmetic of Kueue's
``pkg/cache/scheduler/resource_node.go`` (reference 3.6). Every amount is an integer per
``FlavorResource`` (milli-CPU, bytes, counts). Each ClusterQueue and each cohort is a node:

- ``local_quota(n)`` = max(0, subtree − lendingLimit) when lendingLimit is set, else 0: the
  part of a node's quota never lent to its cohort;
- ClusterQueue: ``subtree`` = nominal, ``usage`` = sum of its admitted (and assumed) Workloads;
- cohort: ``subtree`` = own nominal + Σ children (child.subtree − child.local_quota),
  ``usage`` = Σ children max(0, child.usage − child.local_quota);
- ``available(root)`` = subtree − usage; ``available(n)`` = max(0, local − usage) + P where
  P = max(0, available(parent)), capped when borrowingLimit is set at
  (subtree − local) − max(0, usage − local) + borrowingLimit; clamped at 0;
- ``potential_available(root)`` = subtree; ``(n)`` = local + potential(parent), capped at
  subtree + borrowingLimit.

Cohorts are hierarchical (Kueue v1beta2 Cohort ``spec.parentName`` and ``resourceGroups``):
``set_cohort`` gives a cohort node a parent and its own quotas (an extra shared pool lendable
to its subtree, with borrowing / lending limits toward its parent). A cohort named only by a
ClusterQueue's ``cohortName`` (implicit) is a root with no quota, and disappears with its last
member. The tree never holds a cycle: the caller (``QuotaState``) detects cycles and gives
the cohorts of a cycle no parent.

"borrowed" exists only where a cohort exists (acceptance KQ-02): max(0, usage − nominal).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from app.core.spec import ClusterQueueSpec, CohortSpec
from app.core.types import ClusterQueueName, CohortName, FlavorResource


class Share(NamedTuple):
    """A dominant resource share as Kueue v0.17.1 compares two of them (``CompareDRS``,
    ``pkg/cache/scheduler/fair_sharing.go``); tuple order is that comparison. A node of
    weight 0 that borrows (``zero_weight``) is above every other node, and two such nodes
    compare by their unweighted ratios (``value``: the largest borrowed × 1000 / lendable);
    any other node's ``value`` is that ratio / weight (0 when not borrowing)."""

    zero_weight: bool
    value: float

    @property
    def weighted(self) -> float:
        """The weighted share (Kueue ``PreciseWeightedShare``): +inf for ``zero_weight``."""
        return float("inf") if self.zero_weight else self.value


NOT_BORROWING = Share(False, 0.0)


@dataclass(frozen=True, slots=True)
class Quota:
    """Quota of one node for one FlavorResource (``None`` limit = unset)."""

    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


def quotas_of(spec: ClusterQueueSpec | CohortSpec) -> dict[FlavorResource, Quota]:
    """``{FlavorResource: Quota}`` declared by a ClusterQueue or Cohort spec."""
    return {
        fr: Quota(rq.nominal, rq.borrowing_limit, rq.lending_limit)
        for fr, rq in spec.quotas.items()
    }


@dataclass(eq=False, slots=True)
class _Node:
    name: str
    is_cohort: bool
    quotas: dict[FlavorResource, Quota] = field(default_factory=dict)
    usage: dict[FlavorResource, int] = field(default_factory=dict)
    parent: _Node | None = None
    # ClusterQueue children and cohort children apart: a Cohort and a ClusterQueue may share a
    # name (two kinds), and ``members`` lists ClusterQueues in the order they joined.
    children: dict[str, _Node] = field(default_factory=dict)
    child_cohorts: dict[str, _Node] = field(default_factory=dict)
    # Cohorts only: declared by a Cohort object (kept while empty) rather than implicit.
    explicit: bool = False
    # fairSharing.weight in milli-units (Kueue default 1).
    weight_milli: int = 1000
    # Cohorts only: cached Σ children (subtree − local) + own nominal.
    subtree: dict[FlavorResource, int] = field(default_factory=dict)

    def subtree_quota(self, fr: FlavorResource) -> int:
        if self.is_cohort:
            return self.subtree.get(fr, 0)
        q = self.quotas.get(fr)
        return q.nominal if q is not None else 0

    def local_quota(self, fr: FlavorResource) -> int:
        q = self.quotas.get(fr)
        if q is None or q.lending_limit is None:
            return 0
        return max(0, self.subtree_quota(fr) - q.lending_limit)

    def keys(self) -> Iterable[FlavorResource]:
        seen = dict.fromkeys(self.quotas)
        seen.update(dict.fromkeys(self.usage))
        if self.is_cohort:
            seen.update(dict.fromkeys(self.subtree))
        return seen


def _borrows(n: _Node, need: tuple[FlavorResource, ...] | None) -> bool:
    """Whether node ``n``'s usage is above its subtree quota on a flavor-resource of
    ``need`` (None: on any)."""
    u = n.usage
    if need is None:
        return any(v > n.subtree_quota(fr) for fr, v in u.items())
    return any(u.get(fr, 0) > n.subtree_quota(fr) for fr in need)


class QuotaTree:
    """ClusterQueue and cohort nodes with quotas and usage; pure arithmetic, no policy.

    Mutations: ``set_cluster_queue`` (add or replace quotas / cohort, keeping usage),
    ``remove_cluster_queue``, ``add_usage`` / ``remove_usage`` (exact inverses, so a
    simulation can remove a Workload and put it back). Queries take a ClusterQueue name and a
    FlavorResource; unknown names raise ``KeyError``.
    """

    def __init__(self) -> None:
        self._cqs: dict[str, _Node] = {}
        self._cohorts: dict[str, _Node] = {}

    # ---- structure -------------------------------------------------------------------------
    def set_cluster_queue(
        self,
        name: ClusterQueueName,
        cohort: CohortName | None,
        quotas: Mapping[FlavorResource, Quota],
    ) -> None:
        """Add or replace a ClusterQueue node; its usage is kept across replacement."""
        node = self._cqs.get(name)
        if node is None:
            node = _Node(name, is_cohort=False)
            self._cqs[name] = node
        self._attach(node, cohort, quotas)

    def _attach(
        self, node: _Node, parent: str | None, quotas: Mapping[FlavorResource, Quota]
    ) -> None:
        """Move ``node`` under cohort ``parent`` (None: a root) with ``quotas``; recompute."""
        self._detach(node)
        node.quotas = dict(quotas)
        if parent is not None:
            pn = self._cohort_node(parent)
            node.parent = pn
            (pn.child_cohorts if node.is_cohort else pn.children)[node.name] = node
        if node.is_cohort:
            self._recompute(node)  # its own quotas changed; recomputes its ancestors too
        elif node.parent is not None:
            self._recompute(node.parent)

    def _cohort_node(self, name: str) -> _Node:
        node = self._cohorts.get(name)
        if node is None:
            node = self._cohorts[name] = _Node(name, is_cohort=True)
        return node

    def set_cohort(
        self,
        name: CohortName,
        parent: CohortName | None,
        quotas: Mapping[FlavorResource, Quota],
    ) -> None:
        """Declare cohort ``name`` (a Cohort object): its parent (None: a root) and its own
        quotas. Its children and their usage are kept. The caller must not create a cycle
        (``ValueError`` if ``parent`` is ``name`` or one of its descendants)."""
        node = self._cohort_node(name)
        p = self._cohorts.get(parent) if parent is not None else None
        while p is not None:
            if p is node:
                raise ValueError(f"cohort {parent} is {name} or below it: a cycle")
            p = p.parent
        node.explicit = True
        self._attach(node, parent, quotas)

    def remove_cohort(self, name: CohortName) -> None:
        """Forget the Cohort object ``name``: its quotas and parent go; the node stays as an
        implicit root while ClusterQueues or cohorts still name it."""
        node = self._cohorts.get(name)
        if node is None:
            return
        node.explicit = False
        node.quotas = {}
        node.weight_milli = 1000
        self._detach(node)
        if self._cohorts.get(name) is node:
            if node.children or node.child_cohorts:
                self._recompute(node)
            else:
                del self._cohorts[name]

    def remove_cluster_queue(self, name: ClusterQueueName) -> None:
        """Remove a ClusterQueue node (and its usage) from the tree; no-op if absent."""
        node = self._cqs.pop(name, None)
        if node is not None:
            self._detach(node)

    def _detach(self, node: _Node) -> None:
        parent = node.parent
        if parent is None:
            return
        del (parent.child_cohorts if node.is_cohort else parent.children)[node.name]
        node.parent = None
        if parent.children or parent.child_cohorts or parent.quotas or parent.explicit:
            self._recompute(parent)
        else:
            # An implicit cohort goes with its last child (and leaves its own parent).
            del self._cohorts[parent.name]
            self._detach(parent)

    def _recompute(self, cohort: _Node) -> None:
        subtree: dict[FlavorResource, int] = {fr: q.nominal for fr, q in cohort.quotas.items()}
        usage: dict[FlavorResource, int] = {}
        for child in (*cohort.children.values(), *cohort.child_cohorts.values()):
            for fr in child.keys():
                lq = child.local_quota(fr)
                subtree[fr] = subtree.get(fr, 0) + child.subtree_quota(fr) - lq
                u = max(0, child.usage.get(fr, 0) - lq)
                if u:
                    usage[fr] = usage.get(fr, 0) + u
        cohort.subtree = subtree
        cohort.usage = usage
        if cohort.parent is not None:
            # A cohort with a parent is itself a child of that parent.
            self._recompute(cohort.parent)

    # ---- usage -----------------------------------------------------------------------------
    def add_usage(self, name: ClusterQueueName, usage: Mapping[FlavorResource, int]) -> None:
        """Add ``usage`` to a ClusterQueue; the part above its local quota reaches the cohort."""
        node = self._cqs[name]
        for fr, v in usage.items():
            if v:
                self._change(node, fr, v)

    def remove_usage(self, name: ClusterQueueName, usage: Mapping[FlavorResource, int]) -> None:
        """Exact inverse of ``add_usage``."""
        node = self._cqs[name]
        for fr, v in usage.items():
            if v:
                self._change(node, fr, -v)

    def _change(self, node: _Node, fr: FlavorResource, delta: int) -> None:
        old = node.usage.get(fr, 0)
        new = old + delta
        if new:
            node.usage[fr] = new
        else:
            node.usage.pop(fr, None)
        self._bubble(node, fr, old, new)

    def _bubble(self, node: _Node, fr: FlavorResource, old: int, new: int) -> None:
        parent = node.parent
        if parent is None:
            return
        lq = node.local_quota(fr)
        d = max(0, new - lq) - max(0, old - lq)
        if d:
            self._change(parent, fr, d)

    # ---- queries ---------------------------------------------------------------------------
    # ---- fair sharing (Kueue pkg/cache/scheduler/fair_sharing.go, reference 3.8) -----------
    def set_weight(self, name: str, weight_milli: int, cohort: bool = False) -> None:
        """``fairSharing.weight`` (milli-units) of a ClusterQueue or, with ``cohort``, a
        cohort node; unknown names are ignored."""
        node = (self._cohorts if cohort else self._cqs).get(name)
        if node is not None:
            node.weight_milli = weight_milli

    def _share(self, node: _Node) -> Share:
        """Dominant resource share of ``node`` within its parent: per resource name,
        Σ flavors max(0, usage − subtree quota) × 1000 / Σ flavors potential_available of
        the parent; the largest ratio, divided by the weight (the ratio itself, marked
        ``zero_weight``, for weight 0). ``NOT_BORROWING`` when not borrowing (or a root)."""
        parent = node.parent
        if parent is None:
            return NOT_BORROWING
        borrowed: dict[str, int] = {}
        for fr, u in node.usage.items():
            b = u - node.subtree_quota(fr)
            if b > 0:
                borrowed[fr.resource] = borrowed.get(fr.resource, 0) + b
        if not borrowed:
            return NOT_BORROWING
        lendable: dict[str, int] = {}
        for fr in parent.keys():
            if fr.resource in borrowed:
                lendable[fr.resource] = lendable.get(fr.resource, 0) + self._potential(parent, fr)
        ratio = max(
            (b * 1000 / lendable[r] if lendable.get(r) else float("inf"))
            for r, b in borrowed.items()
        )
        if node.weight_milli == 0:
            return Share(True, ratio)
        return Share(False, ratio * 1000 / node.weight_milli)

    def share(self, name: ClusterQueueName) -> float:
        """The ClusterQueue's weighted dominant resource share (see ``_share``; +inf when
        borrowing with weight 0); Kueue's ``status.fairSharing.weightedShare`` is its
        ceiling."""
        return self._share(self._cqs[name]).weighted

    def cohort_share(self, name: CohortName) -> float:
        """A cohort's weighted dominant resource share within its parent (0 for a root)."""
        return self._share(self._cohorts[name]).weighted

    def path_shares(
        self, name: ClusterQueueName, extra: Mapping[FlavorResource, int] | None = None
    ) -> list[tuple[str, Share]]:
        """``[(node id, share)]`` from the ClusterQueue up to (not including) its root, with
        ``extra`` usage added to the ClusterQueue while measuring (the tree is restored).
        Node ids are ``cq:<name>`` / ``co:<name>``; shares compare as Kueue's ``CompareDRS``."""
        if extra:
            self.add_usage(name, extra)
        try:
            out = []
            n: _Node | None = self._cqs[name]
            while n is not None and n.parent is not None:
                out.append((("co:" if n.is_cohort else "cq:") + n.name, self._share(n)))
                n = n.parent
            return out
        finally:
            if extra:
                self.remove_usage(name, extra)

    def has(self, name: ClusterQueueName) -> bool:
        """True when the ClusterQueue has a node."""
        return name in self._cqs

    def cohort_of(self, name: ClusterQueueName) -> CohortName | None:
        """The cohort name of a ClusterQueue, or None."""
        parent = self._cqs[name].parent
        return None if parent is None else CohortName(parent.name)

    def members(self, cohort: CohortName) -> tuple[ClusterQueueName, ...]:
        """ClusterQueues of a cohort's whole subtree: its own in the order they joined, then
        those of each child cohort (depth first, in the order the children joined)."""
        node = self._cohorts.get(cohort)
        if node is None:
            return ()
        if not node.child_cohorts:
            return tuple(ClusterQueueName(n) for n in node.children)
        out: list[ClusterQueueName] = []
        stack = [node]
        while stack:
            n = stack.pop()
            out.extend(ClusterQueueName(c) for c in n.children)
            stack.extend(reversed(n.child_cohorts.values()))
        return tuple(out)

    def root_of(self, name: ClusterQueueName) -> CohortName | None:
        """The root cohort of a ClusterQueue's tree (its cohort when flat), or None."""
        node = self._cqs[name].parent
        if node is None:
            return None
        while node.parent is not None:
            node = node.parent
        return CohortName(node.name)

    def path_of(self, name: ClusterQueueName) -> str:
        """``/root/.../cohort/cq``: a ClusterQueue's path in its tree (Kueue's preemption
        messages name the preemptor's and the preemptee's paths)."""
        parts = [name]
        n = self._cqs[name].parent
        while n is not None:
            parts.append(n.name)
            n = n.parent
        return "/" + "/".join(reversed(parts))

    def cohort_names(self) -> list[CohortName]:
        """Every cohort node (declared or implicit), sorted."""
        return sorted(CohortName(n) for n in self._cohorts)

    def has_cohort(self, name: CohortName) -> bool:
        """True when cohort ``name`` has a node (declared, or named by a member)."""
        return name in self._cohorts

    def cohort_parent(self, name: CohortName) -> CohortName | None:
        """The parent of cohort ``name`` in the tree (None: a root or unknown)."""
        node = self._cohorts.get(name)
        return None if node is None or node.parent is None else CohortName(node.parent.name)

    def cohort_children(
        self, name: CohortName,
    ) -> tuple[tuple[CohortName, ...], tuple[ClusterQueueName, ...]]:
        """(child cohorts, ClusterQueues directly in cohort ``name``), each in the order
        they joined; empty for an unknown cohort."""
        node = self._cohorts.get(name)
        if node is None:
            return (), ()
        return (tuple(CohortName(n) for n in node.child_cohorts),
                tuple(ClusterQueueName(n) for n in node.children))

    def cohort_weight(self, name: CohortName) -> int:
        """``fairSharing.weight`` of cohort ``name`` in milli-units (1000 when unknown)."""
        node = self._cohorts.get(name)
        return 1000 if node is None else node.weight_milli

    def cohort_quota(self, name: CohortName, fr: FlavorResource) -> Quota | None:
        """The quota a Cohort object declares for ``fr`` (None: undeclared)."""
        node = self._cohorts.get(name)
        return None if node is None else node.quotas.get(fr)

    def cohort_keys(self, name: CohortName) -> list[FlavorResource]:
        """FlavorResources a cohort has quota or usage for (its subtree's), in first-seen
        order."""
        node = self._cohorts.get(name)
        return [] if node is None else list(node.keys())

    def subtree_usage(self, name: CohortName, fr: FlavorResource) -> int:
        """Σ usage of ``fr`` by every ClusterQueue below cohort ``name`` (their whole usage,
        including what their local quota covers)."""
        return sum(self._cqs[m].usage.get(fr, 0) for m in self.members(name))

    def reclaimable(
        self, own: ClusterQueueName, other: ClusterQueueName, need: Iterable[FlavorResource]
    ) -> bool:
        """Kueue's hierarchical reclaim rule: ClusterQueue ``other`` (in ``own``'s tree)
        may lose Workloads to ``own``'s reclaim only if it and every cohort between it and
        their lowest common ancestor borrow (usage > subtree quota) some flavor-resource of
        ``need``. In a flat cohort: ``other`` borrows one of them. False across trees."""
        return self._borrows_to_lca(own, other, need if isinstance(need, tuple) else tuple(need))

    def fair_target(self, own: ClusterQueueName, other: ClusterQueueName) -> bool:
        """Whether ClusterQueue ``other`` is still a fair-sharing preemption target of
        ``own``'s preemptor: it and every cohort between it and their lowest common ancestor
        borrow (usage > subtree quota) any flavor-resource (Kueue v0.17.1
        ``preemption/fairsharing/ordering.go`` ``nextTarget``, which prunes a ClusterQueue
        or a cohort off the preemptor's path once ``!IsBorrowing()``). False for ``own``
        and across trees."""
        return self._borrows_to_lca(own, other, None)

    def _borrows_to_lca(
        self, own: ClusterQueueName, other: ClusterQueueName,
        need: tuple[FlavorResource, ...] | None,
    ) -> bool:
        """``reclaimable`` with ``need``; ``fair_target`` with None (any flavor-resource)."""
        me, o = self._cqs[own], self._cqs[other]
        if o is me or o.parent is None:
            return False
        if not _borrows(o, need):
            return False
        if o.parent is me.parent:
            return True  # siblings (every flat cohort): the common ancestor is their cohort
        ancestors = set()
        n: _Node | None = me
        while n is not None:
            ancestors.add(id(n))
            n = n.parent
        n = o.parent
        while n is not None and id(n) not in ancestors:
            if not _borrows(n, need):
                return False
            n = n.parent
        return n is not None

    def quota(self, name: ClusterQueueName, fr: FlavorResource) -> Quota | None:
        """The quota a ClusterQueue declares for ``fr`` (None: undeclared, nominal 0)."""
        return self._cqs[name].quotas.get(fr)

    def nominal(self, name: ClusterQueueName, fr: FlavorResource) -> int:
        """nominalQuota of ``fr`` in a ClusterQueue (0 when undeclared)."""
        q = self._cqs[name].quotas.get(fr)
        return 0 if q is None else q.nominal

    def usage(self, name: ClusterQueueName, fr: FlavorResource) -> int:
        """Usage of ``fr`` by a ClusterQueue's admitted and assumed Workloads."""
        return self._cqs[name].usage.get(fr, 0)

    def usages(self, name: ClusterQueueName) -> dict[FlavorResource, int]:
        """Copy of a ClusterQueue's usage ``{FlavorResource: amount}`` (non-zero entries)."""
        return dict(self._cqs[name].usage)

    def borrowed(self, name: ClusterQueueName, fr: FlavorResource) -> int:
        """max(0, usage − nominal) when the ClusterQueue is in a cohort, else 0 (KQ-02)."""
        node = self._cqs[name]
        if node.parent is None:
            return 0
        return max(0, node.usage.get(fr, 0) - node.subtree_quota(fr))

    def borrows(
        self, name: ClusterQueueName, need: tuple[FlavorResource, ...] | None = None
    ) -> bool:
        """True when the ClusterQueue is in a cohort and uses more than its nominal quota of
        some FlavorResource (``borrowed`` > 0 for any one), of ``need`` when given."""
        node = self._cqs[name]
        return node.parent is not None and _borrows(node, need)

    def _available(self, node: _Node, fr: FlavorResource) -> int:
        # The recursion of the module docstring unrolled, from the root down (a flat cohort:
        # two nodes); each node's quotas read through ``subtree_quota`` / ``local_quota``.
        path: list[_Node] = []
        n = node
        while n.parent is not None:
            path.append(n)
            n = n.parent
        avail = n.subtree_quota(fr) - n.usage.get(fr, 0)
        for n in reversed(path):
            usage = n.usage.get(fr, 0)
            q = n.quotas.get(fr)
            subtree = n.subtree_quota(fr)
            local = n.local_quota(fr)
            p = avail if avail > 0 else 0
            if q is not None and q.borrowing_limit is not None:
                cap = (subtree - local) - max(0, usage - local) + q.borrowing_limit
                if cap < p:
                    p = cap
            avail = max(0, local - usage) + max(0, p)
        return avail

    def available(self, name: ClusterQueueName, fr: FlavorResource) -> int:
        """How much more of ``fr`` a ClusterQueue can use now (≥ 0)."""
        return max(0, self._available(self._cqs[name], fr))

    def _potential(self, node: _Node, fr: FlavorResource) -> int:
        subtree = node.subtree_quota(fr)
        if node.parent is None:
            return subtree
        v = node.local_quota(fr) + self._potential(node.parent, fr)
        q = node.quotas.get(fr)
        if q is not None and q.borrowing_limit is not None:
            v = min(v, subtree + q.borrowing_limit)
        return v

    def potential_available(self, name: ClusterQueueName, fr: FlavorResource) -> int:
        """The most of ``fr`` a ClusterQueue could ever use if the cohort were idle."""
        return self._potential(self._cqs[name], fr)

    def borrowing_level(self, name: ClusterQueueName, fr: FlavorResource, amount: int) -> int:
        """0 when usage + amount fits the ClusterQueue's nominal (or it has no cohort), else
        the height of the cohort that provides the rest (1 for a flat cohort)."""
        node = self._cqs[name]
        if node.parent is None or node.usage.get(fr, 0) + amount <= node.subtree_quota(fr):
            return 0
        level, p = 1, node.parent
        while p.parent is not None and p.usage.get(fr, 0) > p.subtree_quota(fr):
            level, p = level + 1, p.parent
        return level

    def cohort_capacity(self, cohort: CohortName, fr: FlavorResource) -> int:
        """Quota of ``fr`` a cohort can hand out (Σ members' nominal − their local quota)."""
        node = self._cohorts.get(cohort)
        return 0 if node is None else node.subtree_quota(fr)

    def cohort_usage(self, cohort: CohortName, fr: FlavorResource) -> int:
        """Usage of the cohort's shared pool (Σ members' usage above their local quota)."""
        node = self._cohorts.get(cohort)
        return 0 if node is None else node.usage.get(fr, 0)

    def lendable(self, name: ClusterQueueName, fr: FlavorResource) -> int:
        """How much of a ClusterQueue's nominal its cohort may use (nominal − local quota)."""
        node = self._cqs[name]
        if node.parent is None:
            return 0
        return node.subtree_quota(fr) - node.local_quota(fr)

    def lent(self, name: ClusterQueueName, fr: FlavorResource) -> int:
        """How much of this ClusterQueue's unused lendable quota other members use.

        Kueue does not attribute borrowed quota to lenders; pykueue spreads the cohort's
        borrowed total over the lenders in proportion to their unused lendable quota
        (rounded down, so the members' sum may be below the total by < number of lenders).
        """
        node = self._cqs[name]
        parent = node.parent
        if parent is None:
            return 0
        members = list(parent.children.values())

        def unused(n: _Node) -> int:
            lq = n.local_quota(fr)
            return max(0, (n.subtree_quota(fr) - lq) - max(0, n.usage.get(fr, 0) - lq))

        total_borrowed = (
            sum(max(0, n.usage.get(fr, 0) - n.subtree_quota(fr)) for n in members)
            - parent.quotas.get(fr, Quota(0)).nominal
        )
        total_unused = sum(unused(n) for n in members)
        mine = unused(node)
        if total_borrowed <= 0 or total_unused <= 0 or mine == 0:
            return 0
        return min(mine, total_borrowed * mine // total_unused)

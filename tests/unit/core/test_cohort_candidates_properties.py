"""Preemption candidates built once per cohort version (issue 33): ``Scheduler._candidates``
keeps the other ClusterQueues' part of a cohort tree per version and priority bound, and a
victim search that can take no other ClusterQueue's Workload (classical preemption,
borrowWithinCohort Never, the preemptor's ClusterQueue not below its nominal quota of what
needs preemption: ``_searches_cohort``) gets only its own ClusterQueue's. Both must decide
exactly as building every candidate list afresh for every head did.

Property (hypothesis): two cores, the new one and ``_EveryHead`` (the previous
``_candidates`` kept verbatim, and every search given the whole cohort), are driven through
the same random arrivals, finishes, evictions, deletions, priority changes and ClusterQueue
policy changes (withinClusterQueue, reclaimWithinCohort, borrowWithinCohort, a minimum
runtime, which the memo must not cache across the clock), with and without fair sharing, in
one flat cohort and in a two-level tree;
after every cycle both return the same decisions (by repr)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.decisions import Preempt
from app.core.preemption import Candidate, OrderedCandidates, Preemptor, candidate_order
from app.core.scheduling_cycle import Scheduler
from app.core.spec import (
    ClusterQueueSpec,
    FairSharing,
    LocalQueue,
    ReclaimWithinCohort,
    ResourceFlavor,
    WithinClusterQueue,
)
from app.core.types import ClusterQueueName, FlavorName, FlavorResource, WorkloadKey
from tests.builders import Lockstep, Sim, cluster_queue, cohort, workload


class _EveryHead(Scheduler):
    """The core as it was: every head builds its whole candidate list (kept verbatim)."""

    def _searches_cohort(self, spec: ClusterQueueSpec,
                         need: tuple[FlavorResource, ...]) -> bool:
        return True

    def _candidates(self, p: Preemptor, spec: ClusterQueueSpec, protect: bool = True,
                    cohort: bool = True) -> list[Candidate]:
        name, tree, pol = spec.name, self.tree, spec.preemption
        within = pol.within_cluster_queue
        cqs: list[tuple[ClusterQueueName, int | None]] = []
        if within == WithinClusterQueue.LOWER_PRIORITY:
            cqs.append((name, p.priority))
        elif within == WithinClusterQueue.LOWER_OR_NEWER_EQUAL_PRIORITY:
            cqs.append((name, p.priority + 1))
        root = tree.root_of(name)
        if root is not None and pol.reclaim_within_cohort != ReclaimWithinCohort.NEVER:
            below = (
                p.priority if pol.reclaim_within_cohort == ReclaimWithinCohort.LOWER_PRIORITY
                else None
            )
            for cq in tree.members(root):
                if cq != name and tree.borrows(cq):
                    cqs.append((cq, below))
        out = []
        for cq, below in cqs:
            mr = self._cqs[cq].spec.min_runtime_s if protect and cq != name else None
            afs = cq == name and cq in self._afs_cqs
            for key in self._admitted_by_cq.get(cq, {}):
                rec = self._wls[key]
                wl = rec.wl
                if below is not None and wl.priority >= below:
                    continue
                reserved = (
                    wl.quota_reserved_at if wl.quota_reserved_at is not None else wl.creation
                )
                if mr is not None and not rec.evicting and reserved + mr > self._now:
                    self._wake(reserved + mr)
                    continue
                out.append(Candidate(key, cq, wl.priority, wl.uid, reserved, wl.creation,
                                     rec.usage, rec.evicting,
                                     self._afs_value(rec.lq_key) if afs else 0.0))
        return out


N_CQ = 4
SHAPES = ((1, 1), (1, 2), (2, 1), (1, 3), (2, 2))
WITHIN = ("Never", "LowerPriority", "LowerOrNewerEqualPriority")
RECLAIM = ("Never", "LowerPriority", "Any")
BORROW = ("Never", "LowerPriority")


def _spec(i: int, within: str, reclaim: str, borrow: str, min_runtime: bool,
          tree: bool = False):
    parent = ("left" if i < N_CQ // 2 else "right") if tree else "co"
    spec = (cluster_queue(f"q{i}").cohort(parent)
            .flavor("default-flavor", cpu=2 + i % 2, borrowing_limit=3)
            .preemption(within=within, reclaim=reclaim, borrow_within_cohort=borrow)
            .build())
    return replace(spec, min_runtime_s=3.0) if min_runtime else spec


_ops = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(0, N_CQ - 1), st.integers(0, len(SHAPES) - 1),
              st.integers(0, 3), st.integers(1, 4)),
    st.tuples(st.just("add"), st.integers(0, N_CQ - 1), st.integers(0, len(SHAPES) - 1),
              st.integers(0, 3), st.integers(1, 4)),
    st.tuples(st.sampled_from(["finish", "delete", "evicted"]), st.integers(0, 80)),
    st.tuples(st.just("prio"), st.integers(0, 80), st.integers(0, 3)),
    st.tuples(st.just("cq"), st.integers(0, N_CQ - 1), st.sampled_from(WITHIN),
              st.sampled_from(RECLAIM), st.sampled_from(BORROW), st.booleans()),
    st.tuples(st.just("tick"), st.integers(1, 5)),
), min_size=10, max_size=120)


class _Pair(Lockstep):
    def __init__(self, fair: bool, tree: bool) -> None:
        fs = FairSharing() if fair else None
        super().__init__(Scheduler(fs), _EveryHead(fs))
        self.tree = tree
        for c in self.cores:
            c.add_flavor(ResourceFlavor(FlavorName("default-flavor")))
        if tree:  # a hierarchy: reclaim also needs the cohorts up to the common one to borrow
            self.each("add_cohort", cohort("co").build())
            self.each("add_cohort", cohort("left").parent("co")
                      .flavor("default-flavor", cpu=1).build())
            self.each("add_cohort", cohort("right").parent("co").build())
        for i in range(N_CQ):
            self.each("add_cluster_queue",
                      _spec(i, "LowerPriority", "Any", "Never", False, tree))
            self.each("add_local_queue", LocalQueue("ns", f"lq-q{i}", ClusterQueueName(f"q{i}")))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fair=st.booleans(), tree=st.booleans(), ops=_ops)
def test_cohort_candidates_decide_as_every_head_building_its_own(fair, tree, ops):
    pair = _Pair(fair, tree)
    names: list[str] = []
    for op in ops:
        kind = op[0]
        if kind == "add":
            _, cq, shape, prio, n = op
            pods, cpu = SHAPES[shape]
            for _ in range(n):
                name = f"w{len(names)}"
                names.append(name)
                pair.each("add_workload", workload(name).queue(f"lq-q{cq}")
                          .pods(pods, cpu=cpu).priority(prio).build(pair.now))
        elif kind in ("finish", "delete", "evicted", "prio"):
            if not pair.workload_op(names, op):
                continue
        elif kind == "cq":
            _, i, within, reclaim, borrow, mr = op
            pair.each("update_cluster_queue", _spec(i, within, reclaim, borrow, mr, tree))
        elif kind == "tick":
            pair.now += op[1]
        pair.cycle()
    for _ in range(5):
        pair.cycle()


def test_a_borrowing_preemptor_gets_only_its_own_queue_and_the_same_victim():
    """Over its nominal quota with borrowWithinCohort Never, a preemptor's search takes
    only its own ClusterQueue's Workloads (no cohort list is built for it), and evicts the
    same lower-priority Workload of its own queue as before."""
    s = Sim(
        cluster_queue("a").cohort("co").flavor("default-flavor", cpu=2, borrowing_limit=2)
        .preemption(within="LowerPriority", reclaim="Any"),
        cluster_queue("b").cohort("co").flavor("default-flavor", cpu=4)
        .preemption(within="LowerPriority", reclaim="Any"),
    )
    s.submit(workload("a-low").cq("a").pods(1, cpu=2).priority(0),
             workload("a-over").cq("a").pods(1, cpu=2).priority(0),
             workload("b-low").cq("b").pods(1, cpu=2).priority(0))
    s.settle()
    assert s.status("a").borrowed == 2000  # a is over its nominal quota
    built_before = dict(s.c._cohort_candidates)
    s.submit(workload("a-high").cq("a").pods(1, cpu=2).priority(5))
    (d,) = [d for d in s.cycle() if isinstance(d, Preempt) and d.preemptor == "ns/a-high"]
    assert [v.workload for v in d.victims] in (["ns/a-low"], ["ns/a-over"])
    assert s.c._cohort_candidates == built_before  # the cohort's list was never needed


_cand = st.builds(
    lambda i, cq, prio, reserved, evicting, lq: Candidate(
        WorkloadKey(f"ns/c{i}"), ClusterQueueName(f"q{cq}"), prio, f"uid-{i % 3}",
        float(reserved), 0.0, {}, evicting, float(lq) if cq == 0 else 0.0),
    st.integers(0, 10_000), st.integers(0, 3), st.integers(0, 3), st.integers(0, 5),
    st.booleans(), st.integers(0, 2))


@settings(max_examples=300, deadline=None)
@given(cands=st.lists(_cand, max_size=30, unique_by=lambda c: c.key))
def test_ordered_candidates_walk_in_kueues_candidate_order(cands):
    """``OrderedCandidates`` (the cohort's part sorted once, the own ClusterQueue's merged in)
    walks exactly ``sorted(key=candidate_order(c, own))``: being evicted first, and within
    that another ClusterQueue's before the own (its Admission Fair Sharing usage first)."""
    own = ClusterQueueName("q0")
    mine = sorted((c for c in cands if c.cluster_queue == own),
                  key=lambda c: candidate_order(c, own))
    # The shared part holds every queue's candidates, the preemptor's own too (skipped).
    shared = sorted((replace(c, lq_usage=0.0) for c in cands),
                    key=lambda c: candidate_order(c, ClusterQueueName("")))
    evicting = [c for c in shared if c.evicting]
    running = [c for c in shared if not c.evicting]
    walked = list(OrderedCandidates(own, evicting, running, mine, {c.cluster_queue for c in cands}))
    assert walked == sorted(cands, key=lambda c: candidate_order(c, own))

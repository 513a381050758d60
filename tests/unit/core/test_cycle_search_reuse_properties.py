"""Breaker check of ``Scheduler._cycle_searches`` (a head's victims in a cycle are the search
its nomination's preemption oracle made in that cycle when need and request match).

Three cores are driven through the same random events: ``Scheduler`` as merged, ``_Fresh``
(``_entry_targets`` always searches again, as before the reuse) and ``_Checked`` (every
reuse is compared, at that moment, with a fresh search; the tree's usage of every node is
also compared with its usage when the oracle stored the search). After every cycle the three
return the same decisions (by repr). Covers: two flavors (fungibility whenCanPreempt /
whenCanBorrow / preference), one or two pod sets, partial admission (min_count), a second
resource (no reuse: usage has two flavor-resources), fair sharing on/off (both strategies),
Admission Fair Sharing, minimum runtime, reclaim backoff, StrictFIFO, flat and hierarchical
cohorts with lending limits, priority changes, evictions, deletions and ClusterQueue
policy changes."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.scheduling_cycle import Scheduler
from app.core.spec import (
    AdmissionFairSharing,
    FairSharing,
    FairSharingStrategy,
    LocalQueue,
)
from app.core.types import ClusterQueueName
from tests.builders import (
    BORROW,
    FUNG,
    PREF,
    RECLAIM,
    WITHIN,
    Lockstep,
    cluster_queue,
    workload,
)


class _Fresh(Scheduler):
    """A fresh victim search for every head (the behaviour before the reuse)."""

    def _entry_targets(self, e):  # type: ignore[no-untyped-def]
        self._cycle_searches.clear()
        return super()._entry_targets(e)


def _tree_state(c: Scheduler) -> tuple:
    t = c.tree
    return (
        tuple(sorted((n, tuple(sorted(node.usage.items()))) for n, node in t._cqs.items())),
        tuple(sorted((n, tuple(sorted(node.usage.items()))) for n, node in t._cohorts.items())),
    )


class _Checked(Scheduler):
    """Every reuse compared with a fresh search at that moment."""

    def __init__(self, *a, **k) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*a, **k)
        self.compared = 0
        self._states: dict = {}

    def _assign_shape(self, rec, spec, wl):  # type: ignore[no-untyped-def]
        before = set(self._cycle_searches)
        out = super()._assign_shape(rec, spec, wl)
        for k in set(self._cycle_searches) - before:
            self._states[k] = _tree_state(self)
        return out

    def schedule(self, now):  # type: ignore[no-untyped-def]
        self._states.clear()
        return super().schedule(now)

    def _entry_targets(self, e):  # type: ignore[no-untyped-def]
        p, need = self._preemptor(e.rec, e.spec), tuple(e.assignment.need_preemption)
        cohort = self._searches_cohort(e.spec, need)
        key = (p, e.spec.name, need, tuple(e.assignment.usage.items()), cohort)
        stored = self._cycle_searches.get(key)
        got = super()._entry_targets(e)
        STATS["entry_searches"] += 1
        if stored is not None:
            assert got is stored
            assert self._states.get(key) == _tree_state(self), "tree changed since the oracle"
            cands = self._candidates(p, e.spec, cohort=cohort)
            fresh = self._find_targets(p, e.spec, cands, need, e.assignment.usage)
            assert fresh == stored, (key, stored, fresh)
            self.compared += 1
        else:
            mine = [k for k in self._cycle_searches if k[0] == p]
            if len(e.assignment.usage) > 1:
                why = "miss_multi_fr"
            elif not mine:
                why = "miss_no_oracle_search"
            else:
                why = "miss_other"
            STATS[why] = STATS.get(why, 0) + 1
        return got


N_CQ = 4

_cq_policy = st.tuples(
    # preemption more often than not
    st.sampled_from(WITHIN[1:] + WITHIN), st.sampled_from(RECLAIM[1:] + RECLAIM),
    st.sampled_from(BORROW),
    st.sampled_from(FUNG), st.sampled_from(FUNG), st.sampled_from(PREF),
    st.sampled_from((None, 2.0, 5.0)),  # min runtime
    st.sampled_from((None, 3.0)),  # reclaim backoff
    st.booleans(),  # strict fifo
    st.booleans(),  # AFS admission mode
    st.integers(0, 3),  # quota variant
)


def _spec(i: int, pol: tuple, tree: bool, no_mr: bool):  # type: ignore[no-untyped-def]
    within, reclaim, borrow, wcb, wcp, pref, mr, backoff, strict, afs, qv = pol
    parent = ("left" if i < N_CQ // 2 else "right") if tree else "co"
    b = cluster_queue(f"q{i}").cohort(parent)
    n1, n2 = (4, 2, 6, 3)[(i + qv) % 4], (2, 4, 0, 5)[(i + qv) % 4]
    bl = (None, 2, 0)[qv % 3]
    ll = (None, 1)[(i + qv) % 2]
    b = b.flavor("f1", cpu=n1, borrowing_limit=bl, lending_limit=ll)
    b = b.flavor("f2", cpu=n2, borrowing_limit=bl)
    if qv % 2:
        b = b.flavor("f1m", memory=4)
    b = (b.preemption(within=within, reclaim=reclaim, borrow_within_cohort=borrow,
                      max_priority_threshold=(None, 2)[qv % 2])
         .fungibility(when_can_borrow=wcb, when_can_preempt=wcp, preference=pref))
    if strict:
        b = b.strict_fifo()
    if afs:
        b = b.admission_fair_sharing()
    spec = b.build()
    if no_mr:  # a minimum runtime anywhere drops every memo at each expiry: more oracles
        mr = None
    return replace(spec, min_runtime_s=mr, reclaim_backoff_s=backoff)


_add = st.tuples(
    st.just("add"), st.integers(0, N_CQ - 1),
    st.integers(1, 3), st.integers(1, 2),  # pod set 1: count, cpu
    st.sampled_from((None, 1, 2)),  # min_count of pod set 1
    st.sampled_from((None, None, None, (1, 1), (2, 1))),  # a second pod set (count, cpu)
    st.sampled_from((False, False, False, True)),  # also memory
    st.integers(0, 5),  # priority
    st.integers(1, 4),  # how many
    st.integers(0, 1),  # LocalQueue
)
_ops = st.lists(st.one_of(
    _add, _add, _add,
    st.tuples(st.sampled_from(["finish", "delete", "evicted", "evicted"]), st.integers(0, 80)),
    st.tuples(st.just("prio"), st.integers(0, 80), st.integers(0, 3)),
    st.tuples(st.just("cq"), st.integers(0, N_CQ - 1), _cq_policy),
    st.tuples(st.just("tick"), st.integers(1, 6)),
), min_size=10, max_size=100)


class _Trio(Lockstep):
    """The merged core, ``_Fresh`` (core 1: a differing decision is a reuse that differs
    from a fresh search) and ``_Checked``."""

    def __init__(self, fair: int, tree: bool, afs: bool, pols: list, no_mr: bool) -> None:
        fs = (None, FairSharing(),
              FairSharing((FairSharingStrategy.LESS_THAN_INITIAL_SHARE,)))[fair]
        a = AdmissionFairSharing(half_life_s=10.0, sampling_s=2.0) if afs else None
        super().__init__(Scheduler(fs, a), _Fresh(fs, a), _Checked(fs, a))
        self.tree = tree
        self.setup(("f1", "f2", "f1m"), tree)
        for i in range(N_CQ):
            self.each("add_cluster_queue", _spec(i, pols[i], tree, no_mr))
            for j in range(2):
                self.each("add_local_queue", LocalQueue(
                    "ns", f"lq-q{i}-{j}", ClusterQueueName(f"q{i}"),
                    fair_weight_milli=1000 * (j + 1)))


# Counters for a manual run (how many reuses were compared; why the others searched again).
STATS = {"examples": 0, "cycles": 0, "reuses": 0, "compared": 0, "entry_searches": 0}


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(fair=st.integers(0, 2), tree=st.booleans(), afs=st.booleans(), no_mr=st.booleans(),
       pols=st.lists(_cq_policy, min_size=N_CQ, max_size=N_CQ), ops=_ops)
def test_reused_victim_searches_decide_as_fresh_searches(fair, tree, afs, no_mr, pols, ops):
    trio = _Trio(fair, tree, afs, pols, no_mr)
    new = trio.cores[0]
    names: list[str] = []
    for op in ops:
        kind = op[0]
        if kind == "add":
            _, cq, count, cpu, mc, second, mem, prio, n, lq = op
            for _ in range(1 if no_mr else n):  # distinct shapes: fewer memo hits
                name = f"w{len(names)}"
                names.append(name)
                b = workload(name).queue(f"lq-q{cq}-{lq}")
                kw = {"cpu": cpu}
                if mem:
                    kw["memory"] = 1
                b = b.pods(count, **kw)
                if mc is not None and mc < count:
                    b = b.min_count(mc)
                if second is not None:
                    b = b.pods(second[0], name="second", cpu=second[1])
                trio.each("add_workload", b.priority(prio).build(trio.now))
        elif kind in ("finish", "delete", "evicted", "prio"):
            if not trio.workload_op(names, op):
                continue
        elif kind == "cq":
            _, i, pol = op
            trio.each("update_cluster_queue", _spec(i, pol, tree, no_mr))
        elif kind == "tick":
            trio.now += op[1]
        trio.cycle()
        STATS["cycles"] += 1
    for _ in range(6):
        trio.cycle()
        STATS["cycles"] += 1
    STATS["examples"] += 1
    STATS["reuses"] += new.search_reuses
    STATS["compared"] += trio.cores[2].compared
    assert not any(c._cycle_searches for c in trio.cores)


# ---- targeted cases ----------------------------------------------------------------------------
def _pair(build, fair=None):  # type: ignore[no-untyped-def]
    """The same scenario in a normal Sim and one whose heads always search afresh."""
    from tests.builders import Sim

    s, t = build(Sim, fair), build(Sim, fair)
    real = t.c._entry_targets

    def fresh(entry):  # type: ignore[no-untyped-def]
        t.c._cycle_searches.clear()
        return real(entry)

    t.c._entry_targets = fresh
    return s, t


def test_partial_admission_reuses_the_search_of_the_count_it_gets():
    """Full count 6 does not fit the nominal 4 (NoFit); the binary search over counts asks
    the oracle for 3, 4 and 5: the assignment's count 4 reuses the oracle's search for 4."""
    from tests.builders import cluster_queue as cqb

    def build(Sim, fair):  # type: ignore[no-untyped-def]
        s = Sim(cqb("q0").flavor("default-flavor", cpu=4).preemption(within="LowerPriority"))
        s.submit(*[workload(f"low{i}").cq("q0").pods(1, cpu=1).priority(i) for i in range(4)])
        s.settle()
        s.submit(workload("hi").cq("q0").pods(6, cpu=1).min_count(2).priority(9))
        return s

    s, t = _pair(build)
    before = s.c.search_reuses
    ds, dt = s.cycle(), t.cycle()
    assert s.c.search_reuses == before + 1
    assert repr(ds) == repr(dt)
    assert len(s.evictions(ds)) == 4


def test_two_pod_sets_on_one_flavor_reuse_the_search_for_their_sum():
    from tests.builders import cluster_queue as cqb

    def build(Sim, fair):  # type: ignore[no-untyped-def]
        s = Sim(
            cqb("q0").cohort("co").flavor("default-flavor", cpu=4)
            .preemption(within="LowerPriority", reclaim="Any"),
            cqb("q1").cohort("co").flavor("default-flavor", cpu=4)
            .preemption(within="LowerPriority", reclaim="Any"),
            fair_sharing=fair,
        )
        s.submit(*[workload(f"b{i}").cq("q1").pods(1, cpu=1).priority(i) for i in range(8)])
        s.settle()
        s.submit(workload("a").cq("q0").pods(1, cpu=1).pods(2, name="second", cpu=1))
        return s

    from app.core.spec import FairSharing

    for fair in (None, FairSharing()):
        s, t = _pair(build, fair)
        before = s.c.search_reuses
        ds, dt = s.cycle(), t.cycle()
        assert s.c.search_reuses == before + 1
        assert repr(ds) == repr(dt)
        assert sorted(v for v, _ in s.evictions(ds)) == ["ns/b0", "ns/b1", "ns/b2"]


def _cycle_raising_after_nominating(s, cq: str) -> None:  # type: ignore[no-untyped-def]
    """One cycle of ``Sim`` ``s`` that raises right after ClusterQueue ``cq``'s head is
    nominated (the heads before it nominated, their oracles' searches stored); ``_nominate``
    is restored afterwards."""
    real = s.c._nominate

    def boom(rec, spec):  # type: ignore[no-untyped-def]
        a = real(rec, spec)
        if spec.name == cq:
            raise RuntimeError("injected")
        return a

    s.c._nominate = boom
    try:
        s.cycle()
    except RuntimeError:
        pass
    else:
        raise AssertionError("the injected failure did not happen")
    finally:
        del s.c._nominate


def test_a_search_stored_by_a_cycle_that_raised_is_not_reused_by_the_next_cycle():
    """A cycle raising after a nomination's oracle stored a search leaves it in
    ``_cycle_searches``; the next cycle, with the victims gone, must not reuse it."""
    from tests.builders import Sim
    from tests.builders import cluster_queue as cqb

    s = Sim(
        cqb("q0").cohort("co").flavor("default-flavor", cpu=4)
        .preemption(within="LowerPriority", reclaim="Any"),
        cqb("q1").cohort("co").flavor("default-flavor", cpu=4)
        .preemption(within="LowerPriority", reclaim="Any"),
    )
    s.submit(*[workload(f"b{i}").cq("q1").pods(1, cpu=1).priority(i) for i in range(8)])
    s.settle()
    s.submit(workload("a").cq("q0").pods(1, cpu=2), workload("z").cq("q1").pods(1, cpu=1))
    _cycle_raising_after_nominating(s, "q1")
    assert s.c._cycle_searches, "the failed cycle left a's search behind"
    # b0 and b1 (a's stored victims) now outrank the rest: a's need and request are
    # unchanged, so the stale key would match, but the victims must now be b2 and b3.
    for n in ("b0", "b1"):
        wl = s.c.domain_workload(s.key(n))
        s.c.update_workload(replace(wl, priority=20))
    ds = s.cycle()
    assert sorted(v for v, _ in s.evictions(ds)) == ["ns/b2", "ns/b3"]


def test_a_search_left_by_a_raising_cycle_is_not_reused_after_an_afs_sample():
    """Admission Fair Sharing samples change the order of a ClusterQueue's own candidates
    without changing its version. A search left in ``_cycle_searches`` by a cycle that
    raised after the head's oracle ran must not be its victims in the next cycle, after a
    sample. Two guards: the memo counts the samples of an AFS ClusterQueue, so the head is
    nominated afresh and its oracle searches again; and the start-of-cycle clear (which
    this test exercised alone while the memoized nomination was reused)."""
    from tests.builders import Sim
    from tests.builders import cluster_queue as cqb

    s = Sim(cqb("q1").flavor("default-flavor", cpu=4),
            admission_fair_sharing=AdmissionFairSharing(half_life_s=5.0, sampling_s=1.0))
    s.add_cq(cqb("q0").flavor("default-flavor", cpu=4).preemption(within="LowerPriority")
             .admission_fair_sharing(), namespaces=())
    s.add_lq("ns/lq-a", "q0")
    s.add_lq("ns/lq-b", "q0")
    assert s.c.seed_local_queue_usage("ns/lq-a", {"cpu": 1e9})  # lq-a: a heavy past
    s.submit(workload("x0").queue("lq-a").pods(1, cpu=1),
             *[workload(f"y{i}").queue("lq-b").pods(1, cpu=1) for i in range(3)])
    s.settle()
    s.submit(workload("hi").queue("lq-b").pods(1, cpu=2).priority(5),
             workload("z").cq("q1").pods(1, cpu=8))
    _cycle_raising_after_nominating(s, "q1")
    left = list(s.c._cycle_searches.values())
    assert len(left) == 1 and "ns/x0" in [t.candidate.key for t in left[0].targets]
    s.tick(600)  # lq-a's past decays: lq-b (3 CPU held) now has the higher usage
    hits, misses = s.c._nomination_hits, s.c._nomination_misses
    ds = s.cycle()
    # z (q1, no AFS) reuses its nomination; hi (q0) is nominated afresh after the sample.
    assert (s.c._nomination_hits, s.c._nomination_misses) == (hits + 1, misses + 1)
    victims = sorted(v for v, _ in s.evictions(ds))
    assert "ns/x0" not in victims and len(victims) == 2, victims

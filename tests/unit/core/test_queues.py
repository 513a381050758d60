"""Pending queue rules: ordering, StrictFIFO / BestEffortFIFO, parking and requeue events."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.queues import PendingQueue
from app.core.spec import LocalQueue
from app.core.types import ClusterQueueName
from tests.builders import Sim, cluster_queue, workload

# (id, [(name, priority, created, uid)], expected order)
ORDER = [
    ("higher-priority-first", [("a", 0, 1, "u1"), ("b", 5, 2, "u2")], ["b", "a"]),
    ("then-older-first", [("a", 1, 9, "u1"), ("b", 1, 3, "u2")], ["b", "a"]),
    ("then-uid", [("a", 1, 3, "u9"), ("b", 1, 3, "u2")], ["b", "a"]),
    ("then-name", [("b", 1, 3, "u"), ("a", 1, 3, "u")], ["a", "b"]),
]


@pytest.mark.parametrize("items, expected", [c[1:] for c in ORDER], ids=[c[0] for c in ORDER])
def test_queue_order_priority_then_creation_then_uid(items, expected):
    q = PendingQueue()
    for name, prio, created, uid in items:
        q.push(workload(name).priority(prio).created(created).uid(uid).build())
    got = []
    while (k := q.head()) is not None:
        got.append(k.split("/")[1])
        q.remove(k)
    assert got == expected


def test_park_and_requeue_keep_order_and_lazy_deletion_is_exact():
    q = PendingQueue()
    wls = [workload(f"w{i}").created(i).build() for i in range(100)]
    for w in wls:
        q.push(w)
    for w in wls[:50]:
        q.park(w)
    assert q.head() == "ns/w50" and q.active_count == 50 and len(q) == 100
    assert sum(q.unpark(k) for k in list(q.parked()) if k != "ns/w3") == 49
    assert q.head() == "ns/w0" and q.is_parked("ns/w3")
    for w in wls[::2]:
        q.remove(w.key)
    assert q.head() == "ns/w1" and len(q) == 50
    assert [k for k, _ in q.ordered()][:3] == ["ns/w1", "ns/w3", "ns/w5"]


def _two(strict: bool) -> Sim:
    cq = cluster_queue("cq").flavor("default-flavor", cpu=4)
    s = Sim(cq.strict_fifo() if strict else cq)
    s.submit(
        workload("big").cq("cq").pods(1, cpu=5).priority(5),  # never fits
        workload("small").cq("cq").pods(1, cpu=1),
    )
    s.settle()
    return s


def test_strict_fifo_head_blocks_everything_behind_it():
    s = _two(strict=True)
    assert s.pending("big") and s.pending("small")
    order = s.c.pending_workloads(ClusterQueueName("cq"))
    assert [(p.workload, p.position, p.inadmissible) for p in order] == [
        ("ns/big", 0, False),
        ("ns/small", 1, False),
    ]
    assert order[0].reason is not None and order[1].reason is None  # small never evaluated


def test_best_effort_fifo_parks_the_head_and_admits_the_next():
    s = _two(strict=False)
    assert s.pending("big") and s.admitted("small")
    assert s.c.workload(s.key("big")).inadmissible


@pytest.mark.parametrize(
    "event",
    ["finish", "delete", "evict", "cq-update", "flavor-update", "namespace-update", "forget"],
)
def test_parked_workloads_return_when_capacity_changes_in_the_cohort(event):
    s = Sim(
        cluster_queue("a").cohort("co").flavor("default-flavor", cpu=2),
        cluster_queue("b").cohort("co").flavor("default-flavor", cpu=2),
        cluster_queue("solo").flavor("default-flavor", cpu=1),
    )
    s.submit(workload("hog").cq("b").pods(1, cpu=3), workload("other").cq("solo").pods(1, cpu=1))
    s.settle()
    s.submit(workload("w").cq("a").pods(1, cpu=2))
    s.settle()
    assert s.c.workload(s.key("w")).inadmissible
    if event == "finish":
        s.finish("hog")
    elif event == "delete":
        s.c.delete_workload(s.key("hog"))
    elif event == "evict":
        s.finish_eviction("hog")
    elif event == "cq-update":
        s.c.update_cluster_queue(
            cluster_queue("b").cohort("co").flavor("default-flavor", cpu=3).build()
        )
    elif event == "flavor-update":
        s.c.update_flavor(s.c.flavors["default-flavor"])
    elif event == "namespace-update":
        s.c.set_namespace("ns", {"x": "y"})
    elif event == "forget":
        s.submit(workload("x").cq("b").pods(1, cpu=0))
        # an assumed admission that fails frees nothing but still triggers a retry
        (admit,) = [d for d in s.cycle() if d.workload == "ns/x"]
        assert s.c.forget(admit.workload)
    s.cycle()
    info = s.c.workload(s.key("w"))
    if event in ("finish", "delete", "evict", "cq-update"):
        assert info.state == "admitted"
    else:
        assert info.state == "pending"  # retried (not admitted: no capacity was freed)


def test_finish_in_another_cohort_does_not_requeue():
    s = Sim(
        cluster_queue("a").cohort("co").flavor("default-flavor", cpu=1),
        cluster_queue("z").cohort("other").flavor("default-flavor", cpu=1),
    )
    s.submit(workload("fill").cq("a").pods(1, cpu=1), workload("zz").cq("z").pods(1, cpu=1))
    s.settle()
    s.submit(workload("w").cq("a").pods(1, cpu=1))
    s.settle()
    s.finish("zz")
    assert s.cycle() == [] and s.c.workload(s.key("w")).inadmissible


def test_local_queue_moves_pending_workloads_to_another_cluster_queue():
    s = Sim(
        cluster_queue("cq1").flavor("default-flavor", cpu=1),
        cluster_queue("cq2").flavor("default-flavor", cpu=4),
    )
    s.submit(workload("w").queue("shared").pods(1, cpu=2))
    s.c.add_local_queue(LocalQueue("ns", "shared", ClusterQueueName("cq1")))
    s.settle()
    assert s.pending("w")
    s.c.update_local_queue(LocalQueue("ns", "shared", ClusterQueueName("cq2")))
    s.settle()
    assert s.admitted("w") and s.usage("cq2") == 2000 and s.usage("cq1") == 0


def test_priority_update_reorders_a_pending_workload():
    s = Sim(cluster_queue("cq").strict_fifo().flavor("default-flavor", cpu=1))
    s.submit(workload("run").cq("cq").pods(1, cpu=1))
    s.settle()
    a, b = s.submit(workload("a").cq("cq").pods(1, cpu=1), workload("b").cq("cq").pods(1, cpu=1))
    s.c.update_workload(replace(b, priority=9))
    assert [p.workload for p in s.c.pending_workloads(ClusterQueueName("cq"))] == ["ns/b", "ns/a"]


def test_nil_namespace_selector_matches_no_namespace():
    s = Sim(cluster_queue("cq").flavor("default-flavor", cpu=1).selector(None))
    s.submit(workload("w").cq("cq").pods(1, cpu=1))
    s.settle()
    assert s.pending("w") and s.c.workload(s.key("w")).reason.value == "NamespaceMismatch"


# ---- nomination classes (scheduler step 1) -------------------------------------------------


def _backlog(n: int) -> Sim:
    """ClusterQueue ``cq`` (4 cpu, BestEffortFIFO) full with ``run``; ``n`` identical 1-cpu
    Workloads parked behind it, and ``huge`` (higher priority, never fits) parked too."""
    s = Sim(cluster_queue("cq").flavor("default-flavor", cpu=4))
    s.submit(workload("run").cq("cq").pods(1, cpu=4))
    s.settle()
    s.submit(workload("huge").cq("cq").pods(1, cpu=8).priority(10),
             *(workload(f"w{i:02d}").cq("cq").pods(1, cpu=1) for i in range(n)))
    s.settle()
    assert all(s.c.workload(s.key(f"w{i:02d}")).inadmissible for i in range(n))
    return s


def test_a_release_re_evaluates_one_workload_per_class_not_every_parked_one():
    s = _backlog(40)
    s.finish("run")
    made = s.settle()
    # 4 cpu freed: w00..w03 admitted in queue order, w04 found not to fit and parked again;
    # huge (its own class) re-evaluated once. The other 35 keep their verdict unevaluated.
    assert s.admits(made) == [s.key(f"w{i:02d}") for i in range(4)]
    assert sorted(s.pendings(made)) == [s.key("huge"), s.key("w04")]
    assert all(s.pending(f"w{i:02d}") for i in range(4, 40))
    # ...and they still come, in order, as capacity returns.
    s.finish("w00", "w01")
    assert s.admits(s.settle()) == [s.key("w04"), s.key("w05")]


def test_a_representative_that_leaves_unevaluated_hands_over_to_the_next():
    s = _backlog(3)
    s.finish("run")
    first = s.cycle()  # one head per cycle: huge (higher priority) goes first and is parked
    assert s.pendings(first).keys() == {s.key("huge")}
    assert s.c.delete_workload(s.key("w00"))  # the class representative, never evaluated
    s.settle()
    assert s.admitted("w01") and s.admitted("w02")


@pytest.mark.parametrize("strict", [True, False], ids=["StrictFIFO", "BestEffortFIFO"])
def test_workloads_parked_by_namespace_all_come_back(strict):
    cq = cluster_queue("cq").flavor("default-flavor", cpu=4).selector(team="y")
    s = Sim(cq.strict_fifo() if strict else cq)
    s.c.set_namespace("ns", {"team": "x"})
    s.submit(*(workload(f"w{i}").cq("cq").pods(1, cpu=1) for i in range(3)))
    s.settle()  # each parked: namespace mismatch (even under StrictFIFO)
    assert all(s.c.workload(s.key(f"w{i}")).inadmissible for i in range(3))
    s.c.set_namespace("ns", {"team": "y"})
    assert sorted(s.admits(s.settle())) == [s.key(f"w{i}") for i in range(3)]


def test_parked_class_mates_do_not_hold_their_queue_back_in_the_cohort():
    """A deliberate difference from Kueue's one-head-per-cycle requeue (fresh-user check,
    session 2): queue ``a`` has two identical parked Workloads that cannot fit; it no longer
    spends a cycle re-parking the second one, so when 1 cpu frees up its small Workload
    competes at once and, created earlier, wins over ``b``'s (Kueue: ``b-small`` wins because
    ``a`` is busy re-evaluating ``a-big-2``)."""
    s = Sim(
        cluster_queue("a").cohort("pool").flavor("default-flavor", cpu=2),
        cluster_queue("b").cohort("pool").flavor("default-flavor", cpu=2),
        cluster_queue("c").cohort("pool").flavor("default-flavor", cpu=1),
    )
    s.submit(workload("hold-a").cq("a").pods(1, cpu=2), workload("hold-b").cq("b").pods(1, cpu=2),
             workload("hold-c").cq("c").pods(1, cpu=1))
    s.settle()
    s.submit(workload("a-big-1").cq("a").pods(1, cpu=3), workload("a-big-2").cq("a").pods(1, cpu=3),
             workload("b-big-1").cq("b").pods(1, cpu=3), workload("a-small").cq("a").pods(1, cpu=1),
             workload("b-small").cq("b").pods(1, cpu=1))
    assert s.admits(s.settle()) == []
    s.finish("hold-c")
    assert s.admits(s.settle()) == [s.key("a-small")]
    assert s.pending("b-small") and s.pending("a-big-2")


# ---- Admission Fair Sharing ordering (property) -------------------------------------------------

_OPS = st.lists(st.tuples(
    st.sampled_from(["push", "park", "unpark", "remove", "move", "usage"]),
    st.integers(0, 11),      # workload
    st.integers(0, 2),       # LocalQueue (for push / move) or usage value
    st.integers(0, 3),       # priority
), max_size=60)


@settings(max_examples=150, deadline=None)
@given(_OPS)
def test_fair_sharing_head_is_the_lowest_usage_local_queues_first_workload(ops):
    """Whatever the pushes, parks, removals, LocalQueue moves and usage changes, the head is
    min over queued Workloads of (its LocalQueue's usage, queue order key), and ``ordered``
    lists every Workload in that order."""
    usage = {f"ns/lq{i}": 0.0 for i in range(3)}
    q = PendingQueue()
    q.set_fair_sharing(lambda lq: usage[lq], {})
    wls: dict[str, object] = {}
    for op, i, j, prio in ops:
        name = f"w{i}"
        if op in ("push", "move"):
            wl = workload(name).queue(f"lq{j}").priority(prio).created(i).build()
            wls[wl.key] = wl
            q.push(wl)
        elif op == "park" and f"ns/{name}" in wls:
            q.park(wls[f"ns/{name}"])
        elif op == "unpark":
            q.unpark(f"ns/{name}")
        elif op == "remove":
            q.remove(f"ns/{name}")
            wls.pop(f"ns/{name}", None)
        elif op == "usage":
            usage[f"ns/lq{j}"] = float(prio)
        active = [k for k in wls if k in q and not q.is_parked(k)]

        def key(k):
            wl = wls[k]
            return (usage[f"{wl.namespace}/{wl.queue_name}"], -wl.priority, wl.creation,
                    wl.uid, wl.key)

        assert q.head() == (min(active, key=key) if active else None)
        assert [k for k, _ in q.ordered()] == sorted((k for k in wls if k in q), key=key)


def test_a_pending_workload_moved_to_another_local_queue_leaves_the_old_one_for_good():
    """A pending Workload whose queue name changes is forgotten by its old LocalQueue: once
    it is deleted, deleting that old LocalQueue has nothing left to reroute (it raised
    KeyError on the lab when a namespace went with its queues) and counts it no more."""
    s = Sim(cluster_queue("a").flavor("default-flavor", cpu=1),
            cluster_queue("b").flavor("default-flavor", cpu=1))
    (wl,) = s.submit(workload("big").cq("a").pods(1, cpu=5))  # never fits
    s.settle()
    s.c.update_workload(replace(wl, queue_name="lq-b"))
    assert [s.c.local_queue_status(f"ns/lq-{q}").pending for q in "ab"] == [0, 1]
    s.c.delete_workload(wl.key)
    assert s.c.delete_local_queue("ns/lq-a")  # no KeyError
    assert s.c.delete_local_queue("ns/lq-b")


# ---- the cached order (status and the visibility API) ------------------------------------------

_PLAIN_OPS = st.lists(st.tuples(
    st.sampled_from(["push", "park", "unpark", "remove", "sticky", "read"]),
    st.integers(0, 11),      # workload
    st.integers(0, 3),       # priority
), max_size=60)


@settings(max_examples=150, deadline=None)
@given(_PLAIN_OPS)
def test_ordered_is_the_fresh_order_after_any_change_and_the_same_tuple_without_one(ops):
    """``ordered`` keeps its answer while the version stays: whatever the pushes (new
    priorities), parks, unparks, removals and sticky heads, it equals the order computed
    from scratch, and two reads with nothing between them give the same object."""
    q = PendingQueue()
    wls: dict[str, object] = {}
    for op, i, prio in ops:
        key = f"ns/w{i}"
        if op == "push":
            wls[key] = workload(f"w{i}").priority(prio).created(i).build()
            q.push(wls[key])
        elif op == "park" and key in wls and key in q:
            q.park(wls[key])
        elif op == "unpark":
            q.unpark(key)
        elif op == "remove":
            q.remove(key)
        elif op == "sticky" and key in q and not q.is_parked(key):
            q.sticky = key
        first = q.ordered()
        assert q.ordered() is first
        fresh = PendingQueue()
        for k in wls:
            if k in q:
                fresh.push(wls[k])
                if q.is_parked(k):
                    fresh.park(wls[k])
        fresh.sticky = q.sticky
        assert list(first) == list(fresh.ordered())


def test_slices_and_local_queue_lists_follow_moves_and_priority_changes():
    """``pending_workloads(name, start, stop)`` and ``local_queue_pending_workloads`` read
    the cached order: a priority change or a move to another LocalQueue of the same
    ClusterQueue shows at the next call."""
    s = Sim(cluster_queue("cq").flavor("default-flavor", cpu=1))
    s.c.add_local_queue(LocalQueue("ns", "lq-b", ClusterQueueName("cq")))
    s.submit(workload("run").cq("cq").pods(1, cpu=1))
    s.settle()
    wls = s.submit(*(workload(f"w{i}").cq("cq").pods(1, cpu=1).created(10 + i)
                     for i in range(5)))
    cq = ClusterQueueName("cq")

    def keys(infos):
        return [(p.workload, p.position) for p in infos]

    assert keys(s.c.pending_workloads(cq, 1, 3)) == [("ns/w1", 1), ("ns/w2", 2)]
    assert keys(s.c.pending_workloads(cq, 4, 99)) == [("ns/w4", 4)]
    lq = wls[0].queue_name
    assert keys(s.c.local_queue_pending_workloads(cq, "ns", lq, 1, 3)) == [
        ("ns/w1", 1), ("ns/w2", 2)]
    s.c.update_workload(replace(wls[3], priority=9))
    s.c.update_workload(replace(wls[1], queue_name="lq-b"))
    assert keys(s.c.pending_workloads(cq, 0, 2)) == [("ns/w3", 0), ("ns/w0", 1)]
    assert keys(s.c.local_queue_pending_workloads(cq, "ns", lq)) == [
        ("ns/w3", 0), ("ns/w0", 1), ("ns/w2", 3), ("ns/w4", 4)]
    assert keys(s.c.local_queue_pending_workloads(cq, "ns", "lq-b")) == [("ns/w1", 2)]
    assert s.c.local_queue_pending_workloads(cq, "other", lq) == []

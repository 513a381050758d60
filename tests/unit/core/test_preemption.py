"""Preemption rules: policies, candidate order, fewest victims, no loops."""

from __future__ import annotations

import pytest

from app.core.decisions import PendingReason, Preempt
from tests.builders import Sim, cluster_queue, workload

# (id, withinClusterQueue, running (name, prio, created), incoming prio, expected victims)
WITHIN = [
    ("never", "Never", [("r", 0, 1)], 5, []),
    ("lower-priority-evicts-lower", "LowerPriority", [("r", 0, 1)], 5, ["r"]),
    ("lower-priority-spares-equal", "LowerPriority", [("r", 5, 1)], 5, []),
    (
        "lower-or-newer-equal-evicts-newer-equal",
        "LowerOrNewerEqualPriority",
        [("r", 5, 99)],
        5,
        ["r"],
    ),
    ("lower-or-newer-equal-spares-older-equal", "LowerOrNewerEqualPriority", [("r", 5, 1)], 5, []),
]


@pytest.mark.parametrize(
    "policy, running, prio, victims", [c[1:] for c in WITHIN], ids=[c[0] for c in WITHIN]
)
def test_within_cluster_queue_policy(policy, running, prio, victims):
    s = Sim(cluster_queue("cq").flavor("default", cpu=2).preemption(within=policy))
    for name, p, created in running:
        s.submit(workload(name).cq("cq").pods(1, cpu=2).priority(p).created(s.now + created))
    s.settle()
    s.submit(workload("in").cq("cq").pods(1, cpu=2).priority(prio).created(s.now + 50))
    s.settle()
    assert [v for v, _ in s.evictions()] == [f"ns/{v}" for v in victims]
    assert s.pending("in")
    if not victims:
        assert s.reason("in") == PendingReason.WAITING_FOR_QUOTA


# (id, reclaimWithinCohort, borrower priority, expected victim)
RECLAIM = [
    ("never", "Never", 0, None),
    ("lower-priority-reclaims-lower", "LowerPriority", -1, "InCohortReclamation"),
    ("lower-priority-spares-higher", "LowerPriority", 9, None),
    ("any-reclaims-higher", "Any", 9, "InCohortReclamation"),
]


@pytest.mark.parametrize(
    "policy, borrower_prio, reason", [c[1:] for c in RECLAIM], ids=[c[0] for c in RECLAIM]
)
def test_reclaim_within_cohort_policy(policy, borrower_prio, reason):
    s = Sim(
        cluster_queue("owner").cohort("co").flavor("default", cpu=4).preemption(reclaim=policy),
        cluster_queue("borrower").cohort("co").flavor("default", cpu=4),
    )
    s.submit(workload("extra").cq("borrower").pods(1, cpu=8).priority(borrower_prio))
    s.settle()
    assert s.admitted("extra") and s.status("borrower", "default").borrowed == 4000
    s.submit(workload("in").cq("owner").pods(1, cpu=4))
    s.settle()
    assert s.evictions() == ([] if reason is None else [("ns/extra", reason)])


def test_reclaim_skips_queues_within_their_nominal():
    s = Sim(
        cluster_queue("owner").cohort("co").flavor("default", cpu=4).preemption(reclaim="Any"),
        cluster_queue("b").cohort("co").flavor("default", cpu=4),
        cluster_queue("c").cohort("co").flavor("default", cpu=4),
    )
    s.submit(
        workload("b-own").cq("b").pods(1, cpu=4).priority(-9),
        workload("c-own").cq("c").pods(1, cpu=3),
        workload("c-borrow").cq("c").pods(1, cpu=5),
    )
    s.settle()
    assert s.admitted("b-own") and s.admitted("c-own") and s.admitted("c-borrow")
    s.submit(workload("in").cq("owner").pods(1, cpu=4))
    s.settle()
    (victim,) = [v for v, _ in s.evictions()]
    assert victim in ("ns/c-own", "ns/c-borrow"), "never b-own: b is within nominal"


def test_borrow_within_cohort_respects_max_priority_threshold():
    def sim(threshold: int) -> Sim:
        s = Sim(
            cluster_queue("a")
            .cohort("all")
            .flavor("default", cpu=0, borrowing_limit=10)
            .preemption(reclaim="Any"),
            cluster_queue("b")
            .cohort("all")
            .flavor("default", cpu=5)
            .preemption(
                within="LowerPriority",
                reclaim="Any",
                borrow_within_cohort="LowerPriority",
                max_priority_threshold=threshold,
            ),
            cluster_queue("c").cohort("all").flavor("default", cpu=5),
        )
        s.submit(workload("a-mid").cq("a").pods(1, cpu=6).priority(100))
        s.settle()
        s.submit(workload("b-high").cq("b").pods(1, cpu=8).priority(1000))
        s.settle()
        return s

    assert sim(threshold=100).evictions() == [("ns/a-mid", "InCohortReclaimWhileBorrowing")]
    assert sim(threshold=99).evictions() == []


def test_fewest_victims_fill_back_returns_unneeded_candidates():
    s = Sim(cluster_queue("cq").flavor("default", cpu=10).preemption(within="LowerPriority"))
    # Candidate order: lowest priority first -> tiny (1), small (2), big (6).
    s.submit(
        workload("tiny").cq("cq").pods(1, cpu=1).priority(1),
        workload("small").cq("cq").pods(1, cpu=2).priority(2),
        workload("big").cq("cq").pods(1, cpu=6).priority(3),
        workload("keep").cq("cq").pods(1, cpu=1).priority(50),
    )
    s.settle()
    s.submit(workload("in").cq("cq").pods(1, cpu=6).priority(10))
    ds = s.settle()
    (pre,) = [d for d in ds if isinstance(d, Preempt)]
    assert [v.workload for v in pre.victims] == ["ns/big"]


def test_victims_being_evicted_are_not_evicted_twice_and_preemptor_waits():
    s = Sim(cluster_queue("cq").flavor("default", cpu=4).preemption(within="LowerPriority"))
    s.submit(workload("low").cq("cq").pods(1, cpu=4))
    s.settle()
    s.submit(workload("high").cq("cq").pods(1, cpu=4).priority(5))
    first = s.cycle()
    assert s.evictions(first) == [("ns/low", "InClusterQueue")]
    for _ in range(5):
        assert s.cycle() == []
    assert s.state("low") == "evicting" and s.pending("high")
    st = s.c.cluster_queue_status("cq")
    assert st.evicting == 1 and st.admitted == 1
    s.c.cancel_eviction(s.key("low"))  # the eviction write failed
    assert s.evictions(s.cycle()) == [("ns/low", "InClusterQueue")]


def test_same_victims_are_not_chosen_by_two_preemptors_in_one_cycle():
    s = Sim(
        cluster_queue("p1").cohort("co").flavor("default", cpu=2).preemption(reclaim="Any"),
        cluster_queue("p2").cohort("co").flavor("default", cpu=2).preemption(reclaim="Any"),
        cluster_queue("b").cohort("co").flavor("default", cpu=0),
    )
    s.submit(workload("borrower").cq("b").pods(1, cpu=4))
    s.settle()
    s.submit(workload("x").cq("p1").pods(1, cpu=2), workload("y").cq("p2").pods(1, cpu=2))
    first = s.cycle()
    assert s.evictions(first) == [("ns/borrower", "InCohortReclamation")]
    s.finish_eviction("borrower")
    s.settle()
    assert s.admitted("x") and s.admitted("y") and s.pending("borrower")

"""Quota tree arithmetic (Kueue resource_node.go, reference 3.6), table-driven."""

from __future__ import annotations

import pytest

from app.core.quota import Quota, QuotaTree
from app.core.types import ClusterQueueName, CohortName, FlavorName, FlavorResource, ResourceName

CPU = FlavorResource(FlavorName("f"), ResourceName("cpu"))
A, B, C = ClusterQueueName("a"), ClusterQueueName("b"), ClusterQueueName("c")


def tree(*cqs: tuple[str, str | None, Quota], usage: dict[str, int] | None = None) -> QuotaTree:
    t = QuotaTree()
    for name, cohort, quota in cqs:
        t.set_cluster_queue(
            ClusterQueueName(name), None if cohort is None else CohortName(cohort), {CPU: quota}
        )
    for name, u in (usage or {}).items():
        t.add_usage(ClusterQueueName(name), {CPU: u})
    return t


# (id, ClusterQueues, usage, queue asked, available, potential, borrowed)
CASES = [
    (
        "no-cohort-available-is-nominal-minus-usage",
        [("a", None, Quota(10))],
        {"a": 4},
        "a",
        6,
        10,
        0,
    ),
    (
        "no-cohort-over-usage-clamps-at-zero-and-never-borrows",
        [("a", None, Quota(1))],
        {"a": 3},
        "a",
        0,
        1,
        0,
    ),
    (
        "flat-cohort-borrows-the-idle-neighbour",
        [("a", "c", Quota(10)), ("b", "c", Quota(10))],
        {"a": 12},
        "a",
        8,
        20,
        2,
    ),
    (
        "borrowing-limit-caps-the-borrower",
        [("a", "c", Quota(10, borrowing_limit=4)), ("b", "c", Quota(10))],
        {"a": 12},
        "a",
        2,
        14,
        2,
    ),
    (
        "lending-limit-keeps-the-rest-guaranteed",
        [("a", "c", Quota(10)), ("b", "c", Quota(10, lending_limit=4))],
        {},
        "a",
        14,
        14,
        0,
    ),
    (
        "lender-keeps-its-guaranteed-part-while-lent-out",
        [("a", "c", Quota(10)), ("b", "c", Quota(10, lending_limit=4))],
        {"a": 14},
        "b",
        6,
        20,
        0,
    ),
    (
        "lent-out-nominal-without-lending-limit-is-not-guaranteed",
        [("a", "c", Quota(10)), ("b", "c", Quota(10))],
        {"a": 20},
        "b",
        0,
        20,
        0,
    ),
    (
        "kq12-lend1-ceiling-is-own-plus-lendable-of-lend2",
        [("a", "c", Quota(6, lending_limit=4)), ("b", "c", Quota(6, lending_limit=2))],
        {},
        "a",
        8,
        8,
        0,
    ),
    (
        "kq12-lend2-borrows-4-with-10",
        [("a", "c", Quota(6, lending_limit=4)), ("b", "c", Quota(6, lending_limit=2))],
        {"b": 10},
        "b",
        0,
        10,
        4,
    ),
    (
        "zero-nominal-queue-can-still-borrow",
        [("a", "c", Quota(0, borrowing_limit=10)), ("b", "c", Quota(5))],
        {},
        "a",
        5,
        5,
        0,
    ),
]


@pytest.mark.parametrize(
    "cqs, usage, ask, available, potential, borrowed",
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_quota_arithmetic(cqs, usage, ask, available, potential, borrowed):
    t = tree(*cqs, usage=usage)
    name = ClusterQueueName(ask)
    assert t.available(name, CPU) == available
    assert t.potential_available(name, CPU) == potential
    assert t.borrowed(name, CPU) == borrowed


def test_add_and_remove_usage_are_exact_inverses_under_lending_limits():
    t = tree(
        ("a", "c", Quota(6, lending_limit=4)),
        ("b", "c", Quota(6, lending_limit=2)),
        usage={"b": 10},
    )
    before = (t.cohort_usage(CohortName("c"), CPU), t.available(A, CPU), t.available(B, CPU))
    for amount in (1, 3, 7):
        t.remove_usage(B, {CPU: amount})
        t.add_usage(B, {CPU: amount})
    assert (
        t.cohort_usage(CohortName("c"), CPU),
        t.available(A, CPU),
        t.available(B, CPU),
    ) == before
    t.remove_usage(B, {CPU: 10})
    assert t.cohort_usage(CohortName("c"), CPU) == 0 and t.usage(B, CPU) == 0


def test_changing_quotas_keeps_usage_and_moves_between_cohorts():
    t = tree(("a", "x", Quota(4)), ("b", "x", Quota(4)), usage={"a": 6})
    assert t.cohort_usage(CohortName("x"), CPU) == 6
    t.set_cluster_queue(A, CohortName("y"), {CPU: Quota(4)})
    assert t.usage(A, CPU) == 6
    assert (
        t.cohort_usage(CohortName("x"), CPU) == 0 and t.cohort_capacity(CohortName("x"), CPU) == 4
    )
    assert t.cohort_usage(CohortName("y"), CPU) == 6 and t.available(A, CPU) == 0
    t.set_cluster_queue(A, None, {CPU: Quota(4)})
    assert t.borrowed(A, CPU) == 0 and t.members(CohortName("y")) == ()


def test_undeclared_flavor_resource_usage_counts_fully_against_the_cohort():
    other = FlavorResource(FlavorName("f"), ResourceName("memory"))
    t = QuotaTree()
    t.set_cluster_queue(A, CohortName("c"), {CPU: Quota(1)})
    t.set_cluster_queue(B, CohortName("c"), {CPU: Quota(2), other: Quota(1)})
    t.add_usage(A, {other: 2})  # A does not declare memory (KQ-07)
    assert t.cohort_usage(CohortName("c"), other) == 2
    assert t.available(B, other) == 0


@pytest.mark.parametrize(
    "usage, amount, level",
    [(0, 10, 0), (4, 6, 0), (4, 7, 1), (12, 1, 1)],
    ids=["empty", "fills-nominal", "one-over", "already-borrowing"],
)
def test_borrowing_level(usage, amount, level):
    t = tree(("a", "c", Quota(10)), ("b", "c", Quota(10)), usage={"a": usage})
    assert t.borrowing_level(A, CPU, amount) == level


def test_lent_is_attributed_to_lenders_in_proportion_to_their_unused_quota():
    t = tree(("a", "c", Quota(10)), ("b", "c", Quota(10)), ("c", "c", Quota(10)), usage={"a": 16})
    assert t.borrowed(A, CPU) == 6
    assert (t.lent(B, CPU), t.lent(C, CPU), t.lent(A, CPU)) == (3, 3, 0)
    solo = tree(("a", None, Quota(10)), usage={"a": 16})
    assert solo.lent(A, CPU) == 0

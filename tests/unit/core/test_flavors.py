"""Flavor assignment rules: selectors, affinity, taints, groups, fungibility, gang usage."""

from __future__ import annotations

import pytest

from app.core.decisions import Admit, PendingReason
from app.core.flavors import flavor_mismatch
from tests.builders import GPU, Sim, cluster_queue, flavor, fr, workload

GPU_FLAVOR = flavor("gpu").labels(pool="gpu", zone="z1").build()

# (id, workload builder, matches)
MATCH = [
    ("no-constraints", workload("w").pods(1), True),
    ("selector-equal", workload("w").pods(1).node_selector(pool="gpu"), True),
    ("selector-differs", workload("w").pods(1).node_selector(pool="cpu"), False),
    (
        "selector-key-not-a-flavor-label-is-ignored",
        workload("w").pods(1).node_selector(**{"kubernetes.io/arch": "arm64"}),
        True,
    ),
    ("affinity-in", workload("w").pods(1).affinity([("pool", "In", ["gpu", "x"])]), True),
    ("affinity-notin", workload("w").pods(1).affinity([("pool", "NotIn", ["gpu"])]), False),
    (
        "affinity-terms-are-ored",
        workload("w").pods(1).affinity([("pool", "In", ["cpu"])], [("zone", "In", ["z1"])]),
        True,
    ),
    (
        "affinity-term-without-flavor-keys-matches",
        workload("w").pods(1).affinity([("pool", "In", ["cpu"])], [("rack", "In", ["r1"])]),
        True,
    ),
    (
        "affinity-requirements-are-anded",
        workload("w").pods(1).affinity([("pool", "In", ["gpu"]), ("zone", "In", ["z2"])]),
        False,
    ),
    (
        "affinity-does-not-exist-on-flavor-key",
        workload("w").pods(1).affinity([("zone", "DoesNotExist", [])]),
        False,
    ),
]


@pytest.mark.parametrize("wl, ok", [c[1:] for c in MATCH], ids=[c[0] for c in MATCH])
def test_flavor_matches_selector_and_affinity_on_its_own_label_keys(wl, ok):
    (ps,) = wl.build().pod_sets
    assert (flavor_mismatch(ps, GPU_FLAVOR) is None) is ok


TAINTED = flavor("t").taint("dedicated", "gpu", "NoSchedule").taint("soft", "", "PreferNoSchedule")

# (id, flavor builder, pod tolerations, ok)
TAINTS = [
    ("untolerated", TAINTED, [], False),
    ("tolerated-equal", TAINTED, [("dedicated", "Equal", "gpu", "NoSchedule")], True),
    ("tolerated-empty-operator-is-equal", TAINTED, [("dedicated", "", "gpu", "")], True),
    ("wrong-value", TAINTED, [("dedicated", "Equal", "cpu", "NoSchedule")], False),
    ("exists-any-value", TAINTED, [("dedicated", "Exists", "", "")], True),
    ("empty-key-exists-tolerates-all", TAINTED, [("", "Exists", "", "")], True),
    ("prefer-no-schedule-is-ignored", flavor("t").taint("soft", "", "PreferNoSchedule"), [], True),
    ("flavor-own-toleration", flavor("t").taint("k").toleration("k", "Exists"), [], True),
]


@pytest.mark.parametrize("rf, tols, ok", [c[1:] for c in TAINTS], ids=[c[0] for c in TAINTS])
def test_flavor_taints_must_be_tolerated(rf, tols, ok):
    wl = workload("w").pods(1)
    for key, op, value, effect in tols:
        wl = wl.tolerate(key, op, value, effect)
    (ps,) = wl.build().pod_sets
    why = flavor_mismatch(ps, rf.build())
    assert (why is None) is ok
    if not ok:
        assert "untolerated taint dedicated=gpu:NoSchedule" in why


def test_flavors_are_tried_in_cluster_queue_order_and_skip_mismatches():
    s = Sim(
        flavor("a").labels(pool="a"),
        flavor("b").labels(pool="b"),
        flavor("c"),
        cluster_queue("cq").flavor("a", cpu=4).flavor("b", cpu=4).flavor("c", cpu=4),
    )
    s.submit(
        workload("first").cq("cq").pods(1, cpu=1),
        workload("pinned").cq("cq").pods(1, cpu=1).node_selector(pool="b"),
        workload("spill").cq("cq").pods(1, cpu=4),
    )
    ds = s.settle()
    got = {d.workload: d.pod_set_flavors["main"]["cpu"] for d in ds if isinstance(d, Admit)}
    assert got == {"ns/first": "a", "ns/pinned": "b", "ns/spill": "c"}


def test_one_flavor_per_resource_group_per_pod_set_groups_choose_independently():
    s = Sim(
        cluster_queue("cq")
        .flavor("small", cpu=2, memory="2Gi")
        .flavor("big", cpu=8, memory="8Gi")
        .flavor("t4", gpu=1)
        .flavor("a100", gpu=8)
    )
    s.submit(workload("w").cq("cq").pods(1, cpu=1, memory="4Gi", gpu=2))
    (admit,) = s.settle()
    assert admit.pod_set_flavors == {"main": {"cpu": "big", "memory": "big", GPU: "a100"}}


def test_no_matching_flavor_reason_names_the_flavors():
    s = Sim(flavor("a").labels(pool="a"), cluster_queue("cq").flavor("a", cpu=4))
    s.submit(workload("w").cq("cq").pods(1, cpu=1).node_selector(pool="z"))
    s.settle()
    info = s.c.workload(s.key("w"))
    assert info.reason == PendingReason.NO_MATCHING_FLAVOR and "flavor a" in info.message


def test_later_pod_sets_count_earlier_pod_sets_usage_all_or_nothing():
    s = Sim(cluster_queue("cq").flavor("x", cpu=4).flavor("y", cpu=6))
    s.submit(workload("w").cq("cq").pods(1, cpu=3, name="driver").pods(2, cpu=2, name="workers"))
    (admit,) = s.settle()
    assert admit.pod_set_flavors == {"driver": {"cpu": "x"}, "workers": {"cpu": "y"}}
    assert admit.usage == {fr("x", "cpu"): 3000, fr("y", "cpu"): 4000}
    s.submit(workload("too-big").cq("cq").pods(1, cpu=1, name="a").pods(3, cpu=2, name="b"))
    s.settle()
    assert s.pending("too-big")
    assert s.usage("cq", "x") == 3000 and s.usage("cq", "y") == 4000


# (id, flavors, when_can_borrow, expected flavor)
FUNGIBILITY = [
    ("default-takes-first-flavor-even-if-it-borrows", "MayStopSearch", "borrowed"),
    ("try-next-prefers-a-flavor-without-borrowing", "TryNextFlavor", "own"),
]


@pytest.mark.parametrize(
    "when_can_borrow, expected", [c[1:] for c in FUNGIBILITY], ids=[c[0] for c in FUNGIBILITY]
)
def test_fungibility_when_can_borrow(when_can_borrow, expected):
    s = Sim(
        cluster_queue("cq")
        .cohort("co")
        .flavor("borrowed", cpu=0)
        .flavor("own", cpu=4)
        .fungibility(when_can_borrow, "TryNextFlavor"),
        cluster_queue("lender").cohort("co").flavor("borrowed", cpu=4).flavor("own", cpu=0),
    )
    s.submit(workload("w").cq("cq").pods(1, cpu=2))
    (admit,) = s.settle()
    assert admit.pod_set_flavors["main"]["cpu"] == expected


def test_default_fungibility_looks_past_a_flavor_needing_preemption():
    s = Sim(
        cluster_queue("cq").flavor("a", cpu=1).flavor("b", cpu=4).preemption(within="LowerPriority")
    )
    s.submit(workload("low").cq("cq").pods(1, cpu=1).priority(-1))
    s.settle()
    s.submit(workload("high").cq("cq").pods(1, cpu=1).priority(5))
    ds = s.settle()
    assert [d.pod_set_flavors["main"]["cpu"] for d in ds if isinstance(d, Admit)] == ["b"]
    assert s.evictions() == []


def test_pods_resource_is_counted_when_covered():
    s = Sim(cluster_queue("cq").flavor("default-flavor", cpu=10, pods=3))
    s.submit(workload("w").cq("cq").pods(3, cpu=1), workload("v").cq("cq").pods(1, cpu=1))
    s.settle()
    assert s.admitted("w") and s.pending("v")
    assert s.usage("cq", resource="pods") == 3


def test_exceeds_max_quota_vs_waiting_for_quota_messages_carry_the_numbers():
    s = Sim(
        cluster_queue("a").cohort("ai").flavor("a100", gpu=4, borrowing_limit=2),
        cluster_queue("b").cohort("ai").flavor("a100", gpu=4),
    )
    s.submit(workload("hog").cq("b").pods(3, gpu=1), workload("huge").cq("a").pods(7, gpu=1))
    s.settle()
    huge = s.c.workload(s.key("huge"))
    assert huge.reason == PendingReason.EXCEEDS_MAX_QUOTA
    (sf,) = huge.shortfalls
    assert (sf.requested, sf.maximum, sf.limit) == (7, 6, "maximumCapacity")
    assert "7 requested > maximum capacity 6" in huge.message
    s.submit(workload("six").cq("a").pods(6, gpu=1))
    s.settle()
    six = s.c.workload(s.key("six"))
    assert six.reason == PendingReason.WAITING_FOR_QUOTA
    (sf,) = six.shortfalls
    assert (sf.resource, sf.flavor, sf.requested, sf.available, sf.nominal, sf.borrowed) == (
        GPU,
        "a100",
        6,
        5,
        4,
        0,
    )
    assert sf.limit == "cohort" and sf.borrowing_limit == 2
    assert "6 requested, 5 available" in six.message and "borrowingLimit 2" in six.message


def test_a_later_pod_sets_shortfall_gives_that_pod_sets_numbers():
    """A PyTorchJob-like Workload, master 1 + worker 4 GPUs, in a queue of 5 with 3 free:
    the worker does not fit. The message names pod set worker, so its numbers are the
    worker's: 4 requested, 2 available (the master takes 1 of the 3), not "5 requested, 3
    available"."""
    s = Sim(cluster_queue("cq").flavor("a100", gpu=5))
    s.submit(workload("run").cq("cq").pods(2, gpu=1))
    s.settle()
    s.submit(workload("ddp").cq("cq").pods(1, gpu=1, name="master").pods(4, gpu=1, name="worker"))
    s.settle()
    info = s.c.workload(s.key("ddp"))
    (sf,) = info.shortfalls
    assert (sf.pod_set, sf.requested, sf.available, sf.earlier) == ("worker", 4, 2, 1)
    assert "pod set worker: insufficient unused quota for nvidia.com/gpu in flavor a100: " \
        "4 requested, 2 available (1 of the 3 taken by the workload's earlier pod sets), " \
        "limited by nominalQuota" in info.message, info.message
    # Over the maximum capacity, the same split: 2 + 4 > 5.
    s.submit(workload("wide").cq("cq").pods(2, gpu=1, name="master").pods(4, gpu=1, name="worker"))
    s.settle()
    wide = s.c.workload(s.key("wide"))
    (sf,) = wide.shortfalls
    assert (sf.requested, sf.maximum, sf.limit) == (4, 3, "maximumCapacity")
    assert "4 requested > maximum capacity 3 (2 of the 5 taken by the workload's earlier " \
        "pod sets)" in wide.message, wide.message

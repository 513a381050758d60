"""Acceptance cases of ../shared/acceptance/core-cases.md that belong to the pure core.

Each test name carries the case id. Amounts are exact integers (milli-CPU, bytes, counts).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.core.decisions import Admit, PendingReason, Preempt
from app.core.quantity import format_quantity, parse_quantity
from app.core.types import ClusterQueueName
from app.core.workload import Workload
from tests.builders import GPU, Sim, cluster_queue, flavor, fr, workload

Gi = 2**30
Mi = 2**20


# ---- KQ-01 ---------------------------------------------------------------------------------
def test_kq01_zero_request_for_uncovered_resource_does_not_block_admission():
    s = Sim(cluster_queue("cq").flavor("default-flavor", memory="36Gi"))
    s.submit(workload("j1").cq("cq").pods(3, memory="200Mi", gpu=0))
    ds = s.settle()
    (admit,) = [d for d in ds if isinstance(d, Admit)]
    assert admit.pod_set_flavors == {"main": {"memory": "default-flavor"}}
    assert dict(admit.admission.pod_set_assignments[0].resource_usage) == {"memory": 629145600}
    assert s.c.usage(ClusterQueueName("cq")) == {fr("default-flavor", "memory"): 629145600}


def test_kq01_negative_control_nonzero_uncovered_resource_stays_pending():
    s = Sim(cluster_queue("cq").flavor("default-flavor", memory="36Gi"))
    s.submit(workload("j2").cq("cq").pods(3, memory="200Mi", gpu=1))
    s.settle()
    assert s.pending("j2")
    info = s.c.workload(s.key("j2"))
    assert info.reason == PendingReason.RESOURCE_NOT_COVERED and info.inadmissible
    assert GPU in info.message
    assert s.c.usage(ClusterQueueName("cq")) == {}


def test_kq01_preemption_variant_zero_request_is_ignored_by_preemption():
    s = Sim(cluster_queue("cq2").flavor("default-flavor", cpu=4).preemption(within="LowerPriority"))
    s.submit(workload("w-low").cq("cq2").pods(1, cpu=4).priority(-1))
    s.settle()
    s.submit(workload("w-pre").cq("cq2").pods(1, cpu=2, resources={"example.com/gpu": 0}))
    s.settle()
    assert s.evictions() == [("ns/w-low", "InClusterQueue")]
    assert s.pending("w-pre")
    s.finish_eviction("w-low")
    ds = s.settle()
    (admit,) = [d for d in ds if isinstance(d, Admit)]
    assert admit.workload == "ns/w-pre"
    assert admit.pod_set_flavors == {"main": {"cpu": "default-flavor"}}
    assert s.usage("cq2") == 2000


# ---- KQ-02 ---------------------------------------------------------------------------------
@pytest.mark.parametrize("cohort, borrowed", [(None, 0), ("co", 2000)], ids=["no-cohort", "cohort"])
def test_kq02_cluster_queue_without_cohort_never_reports_borrowed(cohort, borrowed):
    cq = cluster_queue("solo").cohort(cohort).flavor("default-flavor", cpu=5, memory="1Gi")
    s = Sim(cq)
    s.submit(workload("j1").cq("solo").pods(1, cpu=3, memory="600Mi"))
    s.settle()
    assert s.admitted("j1")
    s.c.update_cluster_queue(
        cluster_queue("solo").cohort(cohort).flavor("default-flavor", cpu=1, memory="1Gi").build()
    )
    s.settle()
    assert s.admitted("j1"), "shrinking quota never evicts"
    cpu, mem = s.status("solo"), s.status("solo", resource="memory")
    assert (cpu.usage, cpu.borrowed) == (3000, borrowed)
    assert (mem.usage, mem.borrowed) == (600 * Mi, 0)
    s.submit(workload("w2").cq("solo").pods(1, cpu=1))
    s.settle()
    assert s.pending("w2")
    assert s.reason("w2") == PendingReason.WAITING_FOR_QUOTA


# ---- KQ-06 (the arithmetic part) -----------------------------------------------------------
def test_kq06_exact_integer_arithmetic_at_nominal():
    s = Sim(cluster_queue("cq").flavor("default-flavor", cpu="300m", memory="4Gi"))
    s.submit(
        workload("w1").cq("cq").pods(1, cpu="0.1", memory="1Gi"),
        workload("w2").cq("cq").pods(1, cpu="200m", memory="3072Mi"),
    )
    s.settle()
    assert s.admitted("w1") and s.admitted("w2")
    assert s.usage("cq") == 300
    assert s.usage("cq", resource="memory") == 4294967296
    s.submit(workload("w3").cq("cq").pods(1, cpu="1m"), workload("w4").cq("cq").pods(1, memory=1))
    s.settle()
    assert s.pending("w3") and s.pending("w4")


@pytest.mark.parametrize(
    "request_, admitted",
    [
        ("4096Mi", True),
        ("4Gi", True),
        ("4097Mi", False),
        ("4.1Gi", False),
    ],
    ids=lambda v: str(v),
)
def test_kq06_requests_round_up_never_down(request_, admitted):
    s = Sim(cluster_queue("cq").flavor("default-flavor", memory="4Gi"))
    s.submit(workload("w").cq("cq").pods(1, memory=request_))
    s.settle()
    assert s.admitted("w") is admitted


def test_kq06_status_quantities_round_trip():
    s = Sim(cluster_queue("cq").flavor("default-flavor", cpu=8, memory="8Gi"))
    s.submit(
        workload("a").cq("cq").pods(1, cpu="1500m", memory=128000),
        workload("b").cq("cq").pods(1, memory=100000),
        workload("c").cq("cq").pods(1, memory=1572864),
    )
    s.settle()
    st = s.c.cluster_queue_status(ClusterQueueName("cq"))
    for r in st.resources:
        assert parse_quantity(format_quantity(r.usage, r.resource), r.resource) == r.usage
    assert s.usage("cq", resource="memory") == 128000 + 100000 + 1572864


# ---- KQ-07 ---------------------------------------------------------------------------------
def _kq07(reclaim: str = "Never") -> Sim:
    s = Sim(
        cluster_queue("cq1").cohort("co").flavor("default-flavor", cpu=1, memory="1Gi"),
        cluster_queue("cq2").cohort("co").flavor("default-flavor", cpu=2, memory="1Gi"),
    )
    s.submit(workload("wl1").cq("cq1").pods(1, cpu=2, memory="2Gi"))
    s.settle()
    assert s.admitted("wl1") and s.status("cq1").borrowed == 1000
    s.submit(workload("wl2").cq("cq2").pods(1, cpu=1, memory="1Gi"))
    s.settle()
    assert s.pending("wl2")
    # Edit CQ1: drop memory from its resource group (and, in the variant, CQ2 may reclaim).
    s.c.update_cluster_queue(
        cluster_queue("cq1").cohort("co").flavor("default-flavor", cpu=1).build()
    )
    s.c.update_cluster_queue(
        cluster_queue("cq2")
        .cohort("co")
        .flavor("default-flavor", cpu=2, memory="1Gi")
        .preemption(reclaim=reclaim)
        .build()
    )
    return s


def test_kq07_removed_resource_usage_still_counts_in_the_cohort():
    s = _kq07()
    s.settle()
    assert s.admitted("wl1"), "no eviction on quota change"
    assert s.usage("cq1", resource="memory") == 2 * Gi
    assert s.c.tree.cohort_usage("co", fr("default-flavor", "memory")) == 2 * Gi
    assert s.pending("wl2")
    for _ in range(5):
        s.cycle()
        assert s.pending("wl2")
    s.finish("wl1")
    s.settle()
    assert s.admitted("wl2")
    assert (s.usage("cq2"), s.usage("cq2", resource="memory")) == (1000, Gi)


def test_kq07_variant_reclaim_any_evicts_the_borrower_never_both_at_once():
    s = _kq07(reclaim="Any")
    s.settle()
    assert s.evictions() == [("ns/wl1", "InCohortReclamation")]
    assert s.pending("wl2")
    s.finish_eviction("wl1")
    s.settle()
    assert s.admitted("wl2") and s.pending("wl1")


# ---- KQ-09 ---------------------------------------------------------------------------------
def _kq09(strategy_strict: bool) -> Sim:
    cqs = (
        cluster_queue("cq-s")
        .cohort("co")
        .flavor("on-demand", cpu=5, borrowing_limit=0)
        .preemption(within="LowerPriority")
    )
    if strategy_strict:
        cqs = cqs.strict_fifo()
    s = Sim(
        cqs,
        cluster_queue("cq-a").cohort("co").flavor("on-demand", cpu=5),
        cluster_queue("cq-x").cohort("co").flavor("on-demand", cpu=5),
    )
    for name, cq, cpu, prio in [
        ("s-1", "cq-s", 3, 10),
        ("a-1", "cq-a", 5, 1),
        ("s-2", "cq-s", 3, 9),
        ("a-2", "cq-a", 5, 11),
    ]:
        s.submit(workload(name).cq(cq).pods(1, cpu=cpu).priority(prio))
        s.settle()
    return s


def test_kq09_strict_fifo_head_holds_only_its_unused_nominal_headroom():
    s = _kq09(strategy_strict=True)
    assert s.admitted("s-1") and s.admitted("a-1") and s.pending("s-2")
    assert s.admitted("a-2"), "15 - 8 used - 2 held for s-2 = 5 is enough"
    assert (s.usage("cq-a", "on-demand"), s.status("cq-a", "on-demand").borrowed) == (10000, 5000)
    s.submit(workload("a-3").cq("cq-a").pods(1, cpu=1).priority(10))
    s.settle()
    assert s.pending("a-3"), "CQ-S's 2 idle cpu are held for its StrictFIFO head"
    s.finish("s-1")
    s.settle()
    assert s.admitted("s-2") and s.admitted("a-3")
    assert s.usage("cq-s", "on-demand") == 3000
    cohort_total = sum(s.usage(c, "on-demand") for c in ("cq-s", "cq-a", "cq-x"))
    assert cohort_total == 14000
    first = {d.workload: i for i, c in enumerate(s.history) for d in c if isinstance(d, Admit)}
    assert first["ns/s-2"] <= first["ns/a-3"]


def test_kq09_contrast_best_effort_head_is_parked_and_holds_nothing():
    s = _kq09(strategy_strict=False)
    assert s.admitted("a-2") and s.pending("s-2")
    s.submit(workload("a-3").cq("cq-a").pods(1, cpu=1).priority(10))
    s.settle()
    assert s.admitted("a-3")


# ---- KQ-10 ---------------------------------------------------------------------------------
def _kq10() -> Sim:
    s = Sim(namespaces={"ns-a": {"team": "a"}, "ns-b": {}})
    s.add_cq(
        cluster_queue("cq").strict_fifo().flavor("default-flavor", cpu=4).selector(team="a"),
        namespaces=("ns-a", "ns-b"),
    )
    s.c.add_flavor(flavor("default-flavor").build())
    s.submit(
        workload("ns-b/w-b").cq("cq").pods(1, cpu=1),
        workload("ns-a/w-a1").cq("cq").pods(1, cpu=1),
        workload("ns-a/w-a2").cq("cq").pods(1, cpu=1),
    )
    s.settle()
    return s


def test_kq10_namespace_mismatch_does_not_block_strict_fifo():
    s = _kq10()
    info = s.c.workload(s.key("ns-b/w-b"))
    assert info.state == "pending" and info.inadmissible
    assert info.reason == PendingReason.NAMESPACE_MISMATCH
    assert s.admitted("ns-a/w-a1") and s.admitted("ns-a/w-a2")
    assert s.usage("cq") == 2000
    # Not re-evaluated every cycle: no further decision about w-b.
    for _ in range(3):
        assert s.cycle() == []
    s.c.set_namespace("ns-b", {"team": "a"})
    s.settle()
    assert s.admitted("ns-b/w-b") and s.usage("cq") == 3000


def test_kq10_alternative_selector_changed_to_all_namespaces():
    s = _kq10()
    s.c.update_cluster_queue(
        cluster_queue("cq").strict_fifo().flavor("default-flavor", cpu=4).build()
    )
    s.settle()
    assert s.admitted("ns-b/w-b") and s.usage("cq") == 3000


# ---- KQ-12 ---------------------------------------------------------------------------------
def _kq12() -> Sim:
    return Sim(
        *[
            cluster_queue(n)
            .cohort("cohort-lend")
            .flavor("default", cpu=6, lending_limit=ll)
            .preemption(within="LowerPriority", reclaim="LowerPriority")
            for n, ll in (("lend1", 4), ("lend2", 2))
        ]
    )


@pytest.mark.parametrize(
    "cpu, admitted", [(8, True), (9, False)], ids=["cpu8-fits", "cpu9-pending"]
)
def test_kq12_sanity_lend1_gets_own_plus_lendable_of_lend2(cpu, admitted):
    s = _kq12()
    s.submit(workload("w").cq("lend1").pods(1, cpu=cpu))
    s.settle()
    assert s.admitted("w") is admitted


def test_kq12_lending_limit_no_preemption_when_preemptor_could_never_fit():
    s = _kq12()
    s.submit(workload("lend2-low").cq("lend2").pods(1, cpu=10).priority(-1))
    s.settle()
    assert s.admitted("lend2-low")
    s.submit(workload("in").cq("lend1").pods(1, cpu=9))
    s.settle()
    assert s.evictions() == []
    assert s.pending("in") and s.reason("in") == PendingReason.EXCEEDS_MAX_QUOTA
    assert s.admitted("lend2-low")
    assert (s.usage("lend1", "default"), s.usage("lend2", "default")) == (0, 10000)
    assert s.status("lend2", "default").borrowed == 4000


# ---- KQ-14 ---------------------------------------------------------------------------------
def test_kq14_unset_borrowing_limit_is_unlimited_during_preemption():
    s = Sim(
        cluster_queue("d1")
        .cohort("c")
        .flavor("default", cpu=6, memory="3Gi")
        .preemption(within="LowerPriority", reclaim="LowerPriority"),
        cluster_queue("d2")
        .cohort("c")
        .flavor("default", cpu=6, memory="3Gi")
        .preemption(reclaim="Any"),
    )
    s.submit(
        workload("d1-med").cq("d1").pods(1, cpu=4).priority(0),
        workload("d1-low").cq("d1").pods(1, cpu=4).priority(-1),
        workload("d2-low-1").cq("d2").pods(1, cpu=4).priority(-1),
    )
    s.settle()
    assert all(s.admitted(n) for n in ("d1-med", "d1-low", "d2-low-1"))
    s.submit(workload("in").cq("d1").pods(1, cpu=4).priority(1))
    s.settle()
    assert s.evictions() == [("ns/d1-low", "InClusterQueue")]
    s.finish_eviction("d1-low")
    s.settle()
    assert s.admitted("in") and s.admitted("d1-med") and s.admitted("d2-low-1")
    assert s.usage("d1", "default") == 8000 and s.status("d1", "default").borrowed == 2000


# ---- KQ-15 ---------------------------------------------------------------------------------
def test_kq15_zero_request_at_nominal_resource_does_not_disable_reclaim():
    def cq(name: str):
        return (
            cluster_queue(name)
            .cohort("cohort")
            .flavor("default", cpu=6, memory="3Gi", borrowing_limit={"cpu": 6, "memory": "3Gi"})
        )

    s = Sim(
        cq("c1").preemption(within="LowerPriority", reclaim="LowerPriority"),
        cq("c2").preemption(reclaim="Any"),
    )
    s.submit(
        workload("c1-low").cq("c1").pods(1, cpu=3, memory="3Gi").priority(-1),
        workload("c2-mid").cq("c2").pods(1, cpu=3).priority(0),
        workload("c2-high").cq("c2").pods(1, cpu=6).priority(1),
    )
    s.settle()
    assert all(s.admitted(n) for n in ("c1-low", "c2-mid", "c2-high"))
    s.submit(workload("in").cq("c1").pods(1, cpu=3, memory=0).priority(1))
    s.settle()
    assert s.evictions() == [("ns/c2-mid", "InCohortReclamation")]
    assert s.admitted("c1-low") and s.admitted("c2-high")


# ---- KQ-17 ---------------------------------------------------------------------------------
def test_kq17_unschedulable_pending_workload_does_not_block_reclaim_of_another_cq():
    s = Sim(
        cluster_queue("other-alpha")
        .cohort("other")
        .flavor("on-demand", cpu=50, borrowing_limit=50),
        cluster_queue("other-beta")
        .cohort("other")
        .flavor("on-demand", cpu=50, borrowing_limit=10)
        .preemption(within="LowerPriority", reclaim="Any"),
    )
    s.submit(workload("use-all").cq("other-alpha").pods(1, cpu=100))
    s.settle()
    assert s.admitted("use-all")
    s.submit(
        workload("pending").cq("other-alpha").pods(1, cpu=1).priority(1),
        workload("preemptor").cq("other-beta").pods(1, cpu=1).priority(-1),
    )
    first = s.cycle()
    assert s.evictions(first) == [("ns/use-all", "InCohortReclamation")]
    assert s.reason("preemptor") == PendingReason.WAITING_FOR_PREEMPTION
    info = s.c.workload(s.key("pending"))
    assert info.state == "pending" and info.inadmissible
    s.settle()
    s.finish_eviction("use-all")
    s.settle()
    assert s.admitted("preemptor") and s.admitted("pending") and s.pending("use-all")
    assert s.usage("other-beta", "on-demand") == 1000
    assert s.usage("other-alpha", "on-demand") == 1000


# ---- KQ-18 ---------------------------------------------------------------------------------
def test_kq18_no_preempt_readmit_loop_with_borrow_within_cohort():
    mid, high = 100, 1000
    s = Sim(
        cluster_queue("a-cq")
        .cohort("all")
        .flavor("default", cpu=0, borrowing_limit=10)
        .preemption(within="LowerPriority", reclaim="Any"),
        cluster_queue("b-cq")
        .cohort("all")
        .flavor("default", cpu=5, borrowing_limit=5)
        .preemption(
            within="LowerPriority",
            reclaim="Any",
            borrow_within_cohort="LowerPriority",
            max_priority_threshold=2**31 - 1,
        ),
        cluster_queue("c-cq").cohort("all").flavor("default", cpu=5),
    )
    s.submit(workload("a-low").cq("a-cq").pods(1, cpu=4).priority(mid))
    s.settle()
    s.submit(workload("b1-high").cq("b-cq").pods(1, cpu=4).priority(high))
    s.settle()
    assert s.admitted("a-low") and s.admitted("b1-high")
    s.submit(workload("b2-high").cq("b-cq").pods(1, cpu=4).priority(high))
    s.settle()
    assert s.evictions() == [("ns/a-low", "InCohortReclaimWhileBorrowing")]
    s.finish_eviction("a-low")
    s.settle()
    assert s.admitted("b2-high") and s.pending("a-low")
    assert s.usage("b-cq", "default") == 8000 and s.status("b-cq", "default").borrowed == 3000
    for _ in range(12):
        s.cycle()
    assert len(s.evictions()) == 1, "a-low preempted exactly once"
    assert s.admitted("b2-high") and s.pending("a-low")
    assert s.c.workload(s.key("a-low")).inadmissible


def test_kq18_evicted_workload_is_ordered_by_eviction_time():
    s = Sim(cluster_queue("cq").flavor("default", cpu=1).preemption(within="LowerPriority"))
    s.submit(workload("old").cq("cq").pods(1, cpu=1))
    s.settle()
    s.submit(workload("newer").cq("cq").pods(1, cpu=1))  # same priority, created later
    s.submit(workload("boss").cq("cq").pods(1, cpu=1).priority(5))
    s.settle()
    s.finish_eviction("old")
    s.settle()
    assert s.admitted("boss")
    order = [p.workload for p in s.c.pending_workloads(ClusterQueueName("cq"))]
    assert order == ["ns/newer", "ns/old"]


def test_kueue_order_puts_a_preempted_workload_back_by_its_creation_time():
    """scheduling.preempted_queue_order: Creation (Kueue v0.17.1's GetQueueOrderTimestamp
    with PrioritySortingWithinCohort on, as shipped): the same steps as above leave the
    evicted Workload ahead of the one created after it."""
    s = Sim(cluster_queue("cq").flavor("default", cpu=1).preemption(within="LowerPriority"))
    s.c.order_evicted_by_eviction_time = False
    s.submit(workload("old").cq("cq").pods(1, cpu=1))
    s.settle()
    s.submit(workload("newer").cq("cq").pods(1, cpu=1))
    s.submit(workload("boss").cq("cq").pods(1, cpu=1).priority(5))
    s.settle()
    assert s.evictions() == [("ns/old", "InClusterQueue")]
    s.finish_eviction("old")
    s.settle()
    assert s.admitted("boss")
    order = [p.workload for p in s.c.pending_workloads(ClusterQueueName("cq"))]
    assert order == ["ns/old", "ns/newer"]
    fork = s.c.fork([ClusterQueueName("cq")])
    assert fork.order_evicted_by_eviction_time is False


# ---- KQ-19 ---------------------------------------------------------------------------------
def _kq19(preference: str) -> Sim:
    s = Sim(
        cluster_queue("pob-cq")
        .cohort("pob-cohort")
        .flavor("on-demand", cpu=5, borrowing_limit=0)
        .flavor("spot", cpu=0, borrowing_limit=5)
        .preemption(within="LowerPriority")
        .fungibility("TryNextFlavor", "TryNextFlavor", preference),
        cluster_queue("pob-lender")
        .cohort("pob-cohort")
        .flavor("on-demand", cpu=0)
        .flavor("spot", cpu=5),
    )
    s.submit(workload("low").cq("pob-cq").pods(1, cpu=5).priority(-1))
    s.settle()
    assert s.c.workload(s.key("low")).admission.pod_set_assignments[0].flavors == {
        "cpu": "on-demand"
    }
    s.submit(workload("high").cq("pob-cq").pods(1, cpu=5).priority(0))
    return s


def test_kq19_preemption_over_borrowing_preempts_on_the_first_flavor():
    s = _kq19("PreemptionOverBorrowing")
    ds = s.settle()
    assert s.evictions() == [("ns/low", "InClusterQueue")]
    (pre,) = [d for d in ds if isinstance(d, Preempt)]
    assert set(pre.usage) == {fr("on-demand", "cpu")}
    assert s.reason("high") == PendingReason.WAITING_FOR_PREEMPTION
    s.finish_eviction("low")
    ds = s.settle()
    admits = {d.workload: d for d in ds if isinstance(d, Admit)}
    assert admits["ns/high"].pod_set_flavors == {"main": {"cpu": "on-demand"}}
    assert s.status("pob-cq", "on-demand").borrowed == 0
    # low, requeued after its eviction, may now borrow the idle spot quota; never on-demand.
    assert admits.get("ns/low") is None or admits["ns/low"].pod_set_flavors == {
        "main": {"cpu": "spot"}
    }


def test_kq19_borrowing_over_preemption_borrows_spot_and_leaves_low_alone():
    s = _kq19("BorrowingOverPreemption")
    ds = s.settle()
    (admit,) = [d for d in ds if isinstance(d, Admit)]
    assert admit.workload == "ns/high" and admit.pod_set_flavors == {"main": {"cpu": "spot"}}
    assert s.status("pob-cq", "spot").borrowed == 5000
    assert s.evictions() == [] and s.admitted("low")


# ---- KQ-21 (the flavor-assignment part: taints vs the flavor's own tolerations) -------------
@pytest.mark.parametrize(
    "own_toleration, assigned",
    [(True, True), (False, False)],
    ids=["flavor-tolerates-own-taint", "untolerated-taint-skipped"],
)
def test_kq21_flavor_own_tolerations_cover_its_taints(own_toleration, assigned):
    rf = flavor("gpu").labels(pool="gpu").taint("nvidia.com/gpu", effect="NoSchedule")
    if own_toleration:
        rf = rf.toleration("nvidia.com/gpu", "Exists", effect="NoSchedule")
    s = Sim(rf, cluster_queue("cq").flavor("gpu", gpu=8))
    s.submit(workload("j").cq("cq").pods(1, gpu=1))
    s.settle()
    assert s.admitted("j") is assigned
    if not assigned:
        assert s.reason("j") == PendingReason.NO_MATCHING_FLAVOR


# ---- KQ-25: partial admission (KQ-23, the default LocalQueue, is a webhook rule:
# tests/unit/test_webhook.py::test_KQ_23_default_local_queue_respects_managed_namespaces) ----
def _admitted_count(s: Sim, name: str) -> int:
    info = s.c.workload(s.key(name))
    assert info is not None and info.admission is not None, name
    return info.admission.pod_set_assignments[0].count


def test_kq25_a_partial_admission_takes_the_largest_count_that_fits():
    """Case A: 10 pods x 1 cpu, min 9, in a 9-cpu queue: admitted with 9 (usage 9000m)."""
    s = Sim(cluster_queue("cq").flavor("default", cpu=9, memory="36Gi"))
    s.submit(workload("j").cq("cq").pods(10, cpu=1).min_count(9))
    s.settle()
    assert s.admitted("j") and _admitted_count(s, "j") == 9
    assert s.usage("cq", "default") == 9000


def test_kq25_b_evicted_partial_workload_asks_for_all_again_and_never_exceeds_quota():
    """Case B: min 8, admitted with 9; after eviction it asks for 10 again and is admitted
    with 9 once the quota is free; usage never above 9000m."""
    s = Sim(cluster_queue("cq").flavor("default", cpu=9))
    (j,) = s.submit(workload("j").cq("cq").pods(10, cpu=1).min_count(8))
    s.settle()
    assert _admitted_count(s, "j") == 9
    assert s.c.evict(j.key, s.now) and s.c.finish_eviction(j.key, s.now)
    assert s.c.domain_workload(j.key).pod_sets[0].count == 10  # the spec is untouched
    s.settle()
    assert _admitted_count(s, "j") == 9 and s.usage("cq", "default") == 9000


def test_partial_admission_binary_search_stops_at_min_count():
    s = Sim(cluster_queue("cq").flavor("default", cpu=4))
    s.submit(workload("big").cq("cq").pods(10, cpu=1).min_count(5),
             workload("fits").cq("cq").pods(3, cpu=1).min_count(1))
    s.settle()
    assert not s.admitted("big")  # 4 < 5: all-or-nothing below the minimum
    assert s.reason("big") is not None
    assert _admitted_count(s, "fits") == 3  # fits whole: not reduced


def test_partial_admission_prefers_preemption_of_the_full_count():
    """Kueue reduces only when the full count gets neither Fit nor preemption targets."""
    s = Sim(cluster_queue("cq").flavor("default", cpu=4).preemption(within="LowerPriority"))
    s.submit(workload("low").cq("cq").pods(4, cpu=1).priority(0))
    s.settle()
    s.submit(workload("high").cq("cq").pods(4, cpu=1).min_count(1).priority(10))
    ds = s.cycle()
    assert any(isinstance(d, Preempt) for d in ds)  # preempts for all 4, not 0 -> admit 1


# ---- KQ-29 (the core part) -----------------------------------------------------------------
def _kq29() -> tuple[Sim, Workload, Admit]:
    s = Sim(cluster_queue("cq").flavor("default", cpu=4).preemption(within="LowerPriority"))
    (w1,) = s.submit(workload("w1").cq("cq").pods(1, cpu=4).priority(0))
    (admit,) = s.cycle()
    assert isinstance(admit, Admit)  # assumed in the cache; the API write is "delayed"
    return s, w1, admit


def _check_cap(s: Sim) -> None:
    assert s.usage("cq", "default") <= 4000


def test_kq29_late_admission_write_after_eviction_retargets_instead_of_waiting_forever():
    s, w1, admit = _kq29()
    s.submit(workload("w2").cq("cq").pods(1, cpu=4).priority(10))
    s.settle()
    assert s.evictions() == [("ns/w1", "InClusterQueue")]
    assert s.state("w1") == "evicting"
    _check_cap(s)
    # The delayed admission write lands: W1 admitted, no Evicted condition.
    s.c.update_workload(replace(w1, admission=admit.admission, quota_reserved_at=s.now))
    assert s.state("w1") == "admitted", "not kept as 'being evicted'"
    s.settle()
    _check_cap(s)
    assert len(s.evictions()) == 2, "W1 re-targeted for eviction"
    s.finish_eviction("w1")
    s.settle()
    _check_cap(s)
    assert s.admitted("w2") and s.pending("w1")


def test_kq29_stale_update_without_admission_does_not_release_an_assumed_workload():
    s, w1, _ = _kq29()
    s.c.update_workload(w1)  # an older watch event: no admission yet
    assert s.state("w1") == "admitted"
    s.submit(workload("w2").cq("cq").pods(1, cpu=4).priority(0))
    s.settle()
    _check_cap(s)
    assert s.pending("w2")
    s.c.forget(s.key("w1"))  # the write finally failed
    s.settle()
    _check_cap(s)
    assert sum(s.admitted(n) for n in ("w1", "w2")) == 1


# ---- KQ-30 ---------------------------------------------------------------------------------
def _kq30(strict: bool) -> Sim:
    cq = cluster_queue("cq").flavor("b300", gpu=16).flavor("b200", gpu=40)
    if strict:
        cq = cq.strict_fifo()
    s = Sim(flavor("b300").labels(pool="b300"), flavor("b200").labels(pool="b200"), cq)
    s.submit(
        workload("run-1").cq("cq").pods(8, gpu=1).node_selector(pool="b300"),
        workload("run-2").cq("cq").pods(8, gpu=1).node_selector(pool="b300"),
    )
    s.settle()
    s.submit(
        workload("job-1").cq("cq").pods(8, gpu=1).node_selector(pool="b300"),
        workload("job-2").cq("cq").pods(8, gpu=1).node_selector(pool="b200"),
        workload("job-3").cq("cq").pods(2, gpu=1).node_selector(pool="b200"),
    )
    s.settle()
    return s


def test_kq30_strict_fifo_blocks_across_flavors():
    s = _kq30(strict=True)
    assert s.pending("job-1") and s.pending("job-2") and s.pending("job-3")
    assert s.usage("cq", "b200", "gpu") == 0
    assert [p.workload for p in s.c.pending_workloads(ClusterQueueName("cq"))][0] == "ns/job-1"
    s.finish("run-1")
    order = []
    for _ in range(5):
        order += Sim.admits(s.cycle())
    assert order == ["ns/job-1", "ns/job-2", "ns/job-3"]


def test_kq30_best_effort_fifo_does_not_block_across_flavors():
    s = _kq30(strict=False)
    assert s.pending("job-1") and s.admitted("job-2") and s.admitted("job-3")
    assert s.usage("cq", "b200", "gpu") == 10
    s.finish("run-1")
    s.settle()
    assert s.admitted("job-1")


# ---- the seed's deadlock -------------------------------------------------------------------
def test_seed_deadlock_gang_admission_one_whole_job_then_the_other():
    s = Sim(
        cluster_queue("team-a").cohort("ai").flavor("a100", gpu=4),
        cluster_queue("team-b").cohort("ai").flavor("a100", gpu=4),
    )
    s.submit(
        workload("six").cq("team-a").pods(6, gpu=1), workload("four").cq("team-b").pods(4, gpu=1)
    )
    s.settle()
    states = {n: s.state(n) for n in ("six", "four")}
    assert sorted(states.values()) == ["admitted", "pending"]
    (waiting,) = [n for n, st in states.items() if st == "pending"]
    (running,) = [n for n, st in states.items() if st == "admitted"]
    info = s.c.workload(s.key(waiting))
    assert info.reason == PendingReason.WAITING_FOR_QUOTA and info.shortfalls
    assert info.shortfalls[0].requested == (6 if waiting == "six" else 4)
    total = s.usage("team-a", "a100", "gpu") + s.usage("team-b", "a100", "gpu")
    assert total == (6 if running == "six" else 4), "whole job, never a part"
    s.finish(running)
    assert Sim.admits(s.cycle()) == [f"ns/{waiting}"]

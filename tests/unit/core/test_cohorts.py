"""Hierarchical cohorts (Kueue v1beta2 Cohort objects): a cohort's own quota pool, limits at
every level, reclaim across levels, cycles, implicit cohorts and the cohort status."""

from __future__ import annotations

from app.core.decisions import PendingReason
from app.core.types import CohortName
from tests.builders import Sim, cluster_queue, cohort, workload


def _names(s: Sim, decisions) -> list[str]:
    return [k.split("/", 1)[1] for k in s.admits(decisions)]


def test_reclaim_from_a_grandchild_through_two_levels():
    # org -> research -> vision; "vision-cq" borrows all of "prod-cq"'s quota through two
    # levels (kueue#3948, #6814: reclaim across levels must find it).
    s = Sim(
        cohort("org"),
        cohort("research").parent("org"),
        cohort("vision").parent("research"),
        cluster_queue("vision-cq").cohort("vision").flavor("default", cpu=0),
        cluster_queue("prod-cq").cohort("org").flavor("default", cpu=4).preemption(reclaim="Any"),
    )
    s.submit(workload("big").cq("vision-cq").pods(4, cpu=1))
    s.settle()
    assert s.admitted("big")
    assert s.status("vision-cq", "default").borrowed == 4000
    s.submit(workload("mine").cq("prod-cq").pods(1, cpu=4))
    s.settle()
    assert s.evictions() == [("ns/big", "InCohortReclamation")]
    p = [d for c in s.history for d in c if hasattr(d, "victims")][0]
    assert "preemptor path: /org/prod-cq" in p.victims[0].message
    assert "preemptee path: /org/research/vision/vision-cq" in p.victims[0].message
    s.finish_eviction("big")
    s.settle()
    assert s.admitted("mine") and s.pending("big")


def test_cohort_own_quota_is_a_pool_for_its_subtree():
    s = Sim(
        cohort("team").flavor("default", cpu=4),
        cluster_queue("a").cohort("team").flavor("default", cpu=0),
        cluster_queue("b").cohort("team").flavor("default", cpu=0),
    )
    s.submit(workload("w1").cq("a").pods(3, cpu=1), workload("w2").cq("b").pods(2, cpu=1))
    s.settle()
    assert s.admitted("w1") and s.pending("w2")  # 3 + 2 > the pool of 4
    st = s.c.cohort_status(CohortName("team"))
    assert st is not None and st.explicit and st.active
    (r,) = st.resources
    assert (r.nominal, r.subtree_quota, r.usage, r.borrowed) == (4000, 4000, 3000, 0)
    assert st.cluster_queues == ("a", "b")


def test_cohort_lending_limit_keeps_part_of_its_pool_for_its_subtree():
    # team's own 4 CPUs, of which only 1 may be lent to the parent "org".
    s = Sim(
        cohort("org"),
        cohort("team").parent("org").flavor("default", cpu=4, lending_limit=1),
        cluster_queue("inside").cohort("team").flavor("default", cpu=0),
        cluster_queue("outside").cohort("org").flavor("default", cpu=0),
    )
    s.submit(workload("out").cq("outside").pods(2, cpu=1))
    s.submit(workload("out1").cq("outside").pods(1, cpu=1))
    s.settle()
    assert s.pending("out") and s.admitted("out1")
    s.submit(workload("in").cq("inside").pods(3, cpu=1))
    s.settle()
    assert s.admitted("in")  # the 3 kept back plus nothing borrowed


def test_cohort_borrowing_limit_caps_what_its_subtree_takes_from_the_parent():
    s = Sim(
        cohort("org"),
        cohort("team").parent("org").flavor("default", cpu=0, borrowing_limit=2),
        cluster_queue("t").cohort("team").flavor("default", cpu=1),
        cluster_queue("donor").cohort("org").flavor("default", cpu=8),
    )
    s.submit(workload("four").cq("t").pods(4, cpu=1), workload("three").cq("t").pods(3, cpu=1))
    s.settle()
    # 1 own + 2 from org through team's borrowingLimit; the donor's other 6 stay out of reach.
    assert s.pending("four") and s.admitted("three")


def test_reclaim_spares_a_queue_whose_cohort_is_within_its_quota():
    # a2 borrows a1's unused quota inside cohort A (A itself borrows nothing from org), so
    # b1 (in B) may not evict it even while borrowing with a lower-priority victim: Kueue
    # requires every node up to the lowest common ancestor to be borrowing.
    s = Sim(
        cohort("org"),
        cohort("A").parent("org"),
        cohort("B").parent("org"),
        cluster_queue("a1").cohort("A").flavor("default", cpu=4).preemption(reclaim="Any"),
        cluster_queue("a2").cohort("A").flavor("default", cpu=0),
        cluster_queue("b1").cohort("B").flavor("default", cpu=4).preemption(
            reclaim="Any", borrow_within_cohort="LowerPriority"
        ),
    )
    s.submit(workload("a2-job").cq("a2").pods(4, cpu=1).priority(0))
    s.submit(workload("b1-job").cq("b1").pods(4, cpu=1).priority(0))
    s.settle()
    assert s.admitted("a2-job") and s.admitted("b1-job")
    s.submit(workload("b1-more").cq("b1").pods(1, cpu=1).priority(10))
    s.settle()
    assert s.evictions() == [] and s.pending("b1-more")
    # a1 reclaims its own quota from its sibling: the common ancestor is A.
    s.submit(workload("a1-job").cq("a1").pods(1, cpu=1).priority(0))
    s.settle()
    assert s.evictions() == [("ns/a2-job", "InCohortReclamation")]


def test_a_cycle_makes_every_member_inactive_with_a_reason_naming_it():
    s = Sim(
        cohort("x").parent("y"),
        cohort("y").parent("x"),
        cohort("below").parent("x"),
        cluster_queue("in-x").cohort("below").flavor("default", cpu=4),
        cluster_queue("free").cohort("z").flavor("default", cpu=4),
    )
    s.submit(workload("w").cq("in-x").pods(1, cpu=1), workload("v").cq("free").pods(1, cpu=1))
    s.settle()
    assert s.pending("w") and s.admitted("v")
    info = s.c.workload(s.key("w"))
    assert info.reason == PendingReason.CLUSTER_QUEUE_INACTIVE
    assert "x -> y -> x" in info.message
    st = s.c.cluster_queue_status("in-x")
    assert not st.active and st.reason == "CohortCycle"
    assert not s.c.cohort_status(CohortName("y")).active
    # Breaking the cycle activates the queue again.
    s.c.update_cohort(cohort("y").build())
    s.settle()
    assert s.admitted("w")
    assert s.c.cohort_status(CohortName("below")).active


def test_implicit_cohorts_and_a_missing_parent_work_without_objects():
    s = Sim(
        cohort("team").parent("nowhere"),
        cluster_queue("a").cohort("team").flavor("default", cpu=2),
        cluster_queue("b").cohort("nowhere").flavor("default", cpu=2),
    )
    s.submit(workload("w").cq("a").pods(4, cpu=1))
    s.settle()
    assert s.admitted("w")  # borrows b's 2 through the implicit root "nowhere"
    st = s.c.cohort_status(CohortName("nowhere"))
    assert st is not None and not st.explicit and st.cluster_queues == ("b", "a")
    assert st.resources[0].usage == 4000
    # Deleting the Cohort object leaves "team" an implicit root: no more borrowing from b.
    s.finish("w")
    assert s.c.delete_cohort(CohortName("team"))
    s.submit(workload("w2").cq("a").pods(4, cpu=1))
    s.settle()
    assert s.pending("w2")


def test_invalid_cohort_spec_disables_its_subtree():
    # borrowingLimit without parentName (Kueue's webhook: "must be nil when parent is empty").
    s = Sim(
        cohort("root").flavor("default", cpu=4, borrowing_limit=1),
        cluster_queue("a").cohort("root").flavor("default", cpu=2),
    )
    s.submit(workload("w").cq("a").pods(1, cpu=1))
    s.settle()
    assert s.pending("w")
    assert "borrowingLimit: must be nil when parentName is empty" in s.c.workload(
        s.key("w")).message

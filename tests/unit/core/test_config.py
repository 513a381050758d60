"""Invalid ClusterQueue configuration: inactive with a reason naming the field, never a crash."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.core.decisions import Pending, PendingReason
from app.core.spec import (
    ClusterQueueSpec,
    FlavorQuotas,
    LabelSelector,
    PreemptionPolicy,
    ReclaimWithinCohort,
    ResourceGroup,
    ResourceQuota,
    validate_cluster_queue,
)
from app.core.types import ClusterQueueName, CohortName, FlavorName, ResourceName
from tests.builders import Sim, cluster_queue, flavor, workload

CPU, MEM = ResourceName("cpu"), ResourceName("memory")
F = FlavorName("default-flavor")


def spec(*groups: ResourceGroup, cohort: str | None = None, **kw) -> ClusterQueueSpec:
    return ClusterQueueSpec(
        ClusterQueueName("cq"),
        groups,
        None if cohort is None else CohortName(cohort),
        namespace_selector=LabelSelector(),
        **kw,
    )


def group(resources: tuple[ResourceName, ...], *flavors: FlavorQuotas) -> ResourceGroup:
    return ResourceGroup(resources, flavors)


def fq(name: str, *quotas: ResourceQuota) -> FlavorQuotas:
    return FlavorQuotas(FlavorName(name), quotas)


CPU4 = ResourceQuota(CPU, 4000)

INVALID = [
    (
        "unknown-flavor",
        spec(group((CPU,), fq("a100", CPU4))),
        "FlavorNotFound",
        "spec.resourceGroups[0].flavors[0].name",
    ),
    (
        "resource-in-two-groups",
        spec(group((CPU,), fq("default-flavor", CPU4)), group((CPU,), fq("other", CPU4))),
        "InvalidSpec",
        "spec.resourceGroups[1].coveredResources[0]",
    ),
    (
        "flavor-in-two-groups",
        spec(
            group((CPU,), fq("default-flavor", CPU4)),
            group((MEM,), fq("default-flavor", ResourceQuota(MEM, 1))),
        ),
        "InvalidSpec",
        "spec.resourceGroups[1].flavors[0].name",
    ),
    (
        "flavor-resources-differ-from-covered",
        spec(group((CPU, MEM), fq("default-flavor", CPU4))),
        "InvalidSpec",
        "spec.resourceGroups[0].flavors[0].resources",
    ),
    (
        "borrowing-limit-without-cohort",
        spec(group((CPU,), fq("default-flavor", ResourceQuota(CPU, 4000, borrowing_limit=1)))),
        "InvalidSpec",
        "spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit",
    ),
    (
        "lending-limit-without-cohort",
        spec(group((CPU,), fq("default-flavor", ResourceQuota(CPU, 4000, lending_limit=1)))),
        "InvalidSpec",
        "spec.resourceGroups[0].flavors[0].resources[0].lendingLimit",
    ),
    (
        "lending-limit-above-nominal",
        spec(
            group((CPU,), fq("default-flavor", ResourceQuota(CPU, 4000, lending_limit=5000))),
            cohort="co",
        ),
        "InvalidSpec",
        "spec.resourceGroups[0].flavors[0].resources[0].lendingLimit",
    ),
    (
        "negative-nominal",
        spec(group((CPU,), fq("default-flavor", ResourceQuota(CPU, -1)))),
        "InvalidSpec",
        "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
    ),
    (
        "unknown-queueing-strategy",
        spec(group((CPU,), fq("default-flavor", CPU4)), queueing_strategy="Fifo"),
        "InvalidSpec",
        "spec.queueingStrategy",
    ),
    (
        "borrow-within-cohort-needs-reclaim",
        spec(
            group((CPU,), fq("default-flavor", CPU4)),
            cohort="co",
            preemption=PreemptionPolicy(borrow_within_cohort="LowerPriority"),
        ),
        "InvalidSpec",
        "spec.preemption.borrowWithinCohort.policy",
    ),
    (
        "stopped",
        spec(group((CPU,), fq("default-flavor", CPU4)), stop_policy="Hold"),
        "Stopped",
        "spec.stopPolicy",
    ),
]


@pytest.mark.parametrize("cq, reason, field", [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_cluster_queue_is_inactive_and_its_workloads_pend_with_the_field(cq, reason, field):
    problem = validate_cluster_queue(cq, {F: flavor("default-flavor").build()})
    assert problem is not None and problem.reason == reason and problem.field == field
    assert field in problem.message

    s = Sim(flavor("default-flavor"))
    s.add_cq(cq)
    s.submit(workload("w").cq("cq").pods(1, cpu=1))
    ds = s.settle()
    st = s.c.cluster_queue_status(ClusterQueueName("cq"))
    assert not st.active and st.reason == reason and field in st.message
    (p,) = [d for d in ds if isinstance(d, Pending)]
    assert p.reason == PendingReason.CLUSTER_QUEUE_INACTIVE and field in p.message
    assert p.reason.condition_reason == "Inadmissible" and p.inadmissible
    assert s.pending("w")
    (info,) = s.c.pending_workloads(ClusterQueueName("cq"))
    assert info.reason == PendingReason.CLUSTER_QUEUE_INACTIVE and field in info.message


def test_valid_spec_has_no_problem():
    cq = spec(
        group((CPU,), fq("default-flavor", ResourceQuota(CPU, 4000, 1000, 2000))),
        cohort="co",
        preemption=PreemptionPolicy(reclaim_within_cohort=ReclaimWithinCohort.ANY),
    )
    assert validate_cluster_queue(cq, {F: flavor("default-flavor").build()}) is None


def test_fixing_the_configuration_activates_the_queue_and_admits():
    s = Sim(flavor("default-flavor"))
    s.add_cq(cluster_queue("cq").flavor("a100", cpu=4))  # a100 does not exist
    s.submit(workload("w").cq("cq").pods(1, cpu=1))
    s.settle()
    assert s.pending("w")
    s.c.add_flavor(flavor("a100").build())
    s.settle()
    assert s.admitted("w")
    s.c.delete_flavor(FlavorName("a100"))
    st = s.c.cluster_queue_status(ClusterQueueName("cq"))
    assert not st.active and st.reason == "FlavorNotFound"
    assert s.admitted("w"), "an admitted workload is never evicted by a config change"


def test_invalid_queue_lends_nothing_to_its_cohort_but_keeps_admitted_usage():
    s = Sim(
        cluster_queue("lender").cohort("co").flavor("default-flavor", cpu=4),
        cluster_queue("borrower").cohort("co").flavor("default-flavor", cpu=0),
    )
    s.submit(workload("a").cq("lender").pods(1, cpu=1))
    s.settle()
    bad = replace(s.c.cluster_queue_spec(ClusterQueueName("lender")), stop_policy="Bogus")
    s.c.update_cluster_queue(bad)
    s.submit(workload("b").cq("borrower").pods(1, cpu=1))
    s.settle()
    assert s.pending("b") and s.admitted("a")
    assert s.usage("lender") == 1000


def test_missing_local_queue_or_cluster_queue_pends_with_misconfigured_reason():
    s = Sim(cluster_queue("cq").flavor("default-flavor", cpu=4))
    s.submit(workload("w").queue("nope").pods(1, cpu=1))
    (p,) = s.cycle()
    assert (
        p.reason == PendingReason.LOCAL_QUEUE_NOT_FOUND
        and p.reason.condition_reason == "Inadmissible"
    )
    assert s.cycle() == []
    s.c.delete_cluster_queue(ClusterQueueName("cq"))
    s.submit(workload("v").cq("cq").pods(1, cpu=1))
    (p,) = s.cycle()
    assert p.reason == PendingReason.CLUSTER_QUEUE_NOT_FOUND
    s.add_cq(cluster_queue("cq").flavor("default-flavor", cpu=4))
    s.settle()
    assert s.admitted("v") and s.pending("w")


def _unreadable(name: str) -> ClusterQueueSpec:
    """What the reader gives for a ClusterQueue whose quantity cannot be parsed (issue 14.4)."""
    from app.core.spec import ConfigProblem

    where = "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"
    return ClusterQueueSpec(
        ClusterQueueName(name), (), None, namespace_selector=LabelSelector(),
        object_problem=ConfigProblem("InvalidSpec", where,
                                   f"Can't admit new workloads: {where}: invalid quantity"))


def test_unreadable_update_keeps_the_borrowers_usage_in_its_cohort():
    s = Sim(
        cluster_queue("research").cohort("ai").flavor("default-flavor", cpu=4, borrowing_limit=4),
        cluster_queue("inference").cohort("ai").flavor("default-flavor", cpu=4, borrowing_limit=4),
    )
    s.submit(workload("train").cq("research").pods(6, cpu=1))
    s.settle()
    assert s.admitted("train") and s.usage("research") == 6000
    s.c.update_cluster_queue(_unreadable("research"))
    st = s.c.cluster_queue_status(ClusterQueueName("research"))
    assert not st.active and st.reason == "InvalidSpec" and "nominalQuota" in st.message
    s.submit(workload("serve").cq("inference").pods(4, cpu=1))
    s.submit(workload("more").cq("research").pods(1, cpu=1))
    s.settle()
    # 6 of 8 in use: inference may take only the 2 left, research (inactive) nothing new.
    assert s.admitted("train") and s.pending("serve") and s.pending("more")
    assert s.usage("research") + s.usage("inference") <= 8000
    s.submit(workload("small").cq("inference").pods(2, cpu=1))
    s.settle()
    assert s.admitted("small") and s.usage("research") + s.usage("inference") == 8000
    s.c.update_cluster_queue(
        cluster_queue("research").cohort("ai").flavor("default-flavor", cpu=4,
                                                      borrowing_limit=4).build())
    assert s.c.cluster_queue_status(ClusterQueueName("research")).active


def test_unreadable_new_queue_is_inactive_and_admits_nothing():
    s = Sim(cluster_queue("other").flavor("default-flavor", cpu=4))
    s.add_cq(_unreadable("cq"))
    s.submit(workload("w").cq("cq").pods(1, cpu=1))
    ds = s.settle()
    (p,) = [d for d in ds if isinstance(d, Pending)]
    assert p.reason == PendingReason.CLUSTER_QUEUE_INACTIVE and "nominalQuota" in p.message

"""Hierarchical cohorts and fair sharing on the real API server, with Job-less Workloads
(the creator marks them Finished): a reclaim through two cohort levels, with the Cohort
status written, and a fair-sharing preemption by a reconciler with fair sharing enabled."""

from __future__ import annotations

import pytest

from app.config import FairSharingSettings
from tests.integration.reconciler_support import (
    ManagerThread,
    apply,
    cond,
    make_queue,
    manager_fixture,  # noqa: F401 - fixture
    namespace,
    rlab_fixture,  # noqa: F401 - fixture
    settings_for,
    unique,
    wl,
    workload_manifest,
)
from tests.integration.test_reconciler_cases import admitted, cleanup, evicted
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab


def _cohort(name: str, parent: str | None = None) -> dict:
    spec = {"parentName": parent} if parent else {}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort",
            "metadata": {"name": name}, "spec": spec}


def test_reclaim_from_a_grandchild_through_two_cohort_levels(rlab: LabHandle, manager) -> None:
    ns = namespace(rlab, "hier")
    org, research, vision = unique("org"), unique("research"), unique("vision")
    vcq, pcq = unique("vision-cq"), unique("prod-cq")
    apply(rlab, _cohort(org), _cohort(research, org), _cohort(vision, research))
    make_queue(rlab, vcq, (ns,), cpu="0", cohort=vision, lq="qv")
    make_queue(rlab, pcq, (ns,), cpu="4", cohort=org, lq="qp",
               preemption={"reclaimWithinCohort": "Any"})
    try:
        apply(rlab, workload_manifest("big", ns, "qv", cpu="4"))
        wait_for(lambda: admitted(wl(rlab, ns, "big")), 30, "big admitted, borrowing 2 levels")

        def research_total() -> str | None:
            st = rlab.get("cohort", research).get("status") or {}
            for f in st.get("flavorsUsage") or []:
                for r in f["resources"]:
                    if r["name"] == "cpu":
                        return r["total"]
            return None

        wait_for(lambda: research_total() == "4", 20, "Cohort status: subtree usage 4 cpu")
        apply(rlab, workload_manifest("mine", ns, "qp", cpu="4"))
        wait_for(lambda: evicted(wl(rlab, ns, "big")), 30, "big evicted")
        assert cond(wl(rlab, ns, "big"), "Preempted")["reason"] == "InCohortReclamation"
        wait_for(lambda: admitted(wl(rlab, ns, "mine")), 30, "mine admitted")
    finally:
        cleanup(rlab, ns, vcq, pcq)
        rlab.kubectl("delete", "cohort", org, research, vision, "--wait=false")


def test_a_cohort_without_cluster_queues_gets_its_status_when_it_changes(
        rlab: LabHandle, manager) -> None:
    lone, parent = unique("lone"), unique("lone-parent")
    apply(rlab, _cohort(lone))
    try:
        def active() -> dict | None:
            st = rlab.get("cohort", lone).get("status") or {}
            return next((c for c in st.get("conditions") or [] if c["type"] == "Active"), None)

        wait_for(lambda: (active() or {}).get("status") == "True", 20,
                 "a new Cohort with no ClusterQueue gets Active=True")
        # A change of the Cohort object alone (no ClusterQueue anywhere in its tree) is
        # written too: a parent cycle makes it inactive.
        apply(rlab, _cohort(parent, lone), _cohort(lone, parent))
        wait_for(lambda: (active() or {}).get("reason") == "CohortCycle", 20,
                 "the cycle is written to the Cohort's status")
    finally:
        rlab.kubectl("delete", "cohort", lone, parent, "--wait=false")


def test_fair_sharing_preempts_the_queue_above_its_share(rlab: LabHandle) -> None:
    ns = namespace(rlab, "fair")
    co, a, b, donor = unique("fair"), unique("team-a"), unique("team-b"), unique("donor")
    make_queue(rlab, donor, (ns,), cpu="4", cohort=co, lq="qd")
    for cq, lq in ((a, "qa"), (b, "qb")):
        make_queue(rlab, cq, (ns,), cpu="0", cohort=co, lq=lq,
                   preemption={"reclaimWithinCohort": "Any"})
    settings = settings_for(rlab).model_copy(
        update={"fair_sharing": FairSharingSettings(enable=True)})
    mt = ManagerThread(settings).start()
    try:
        apply(rlab, *[workload_manifest(f"a{i}", ns, "qa", cpu="1") for i in range(4)])
        wait_for(lambda: all(admitted(wl(rlab, ns, f"a{i}")) for i in range(4)), 30,
                 "team-a borrows all 4")
        apply(rlab, workload_manifest("b0", ns, "qb", cpu="1"))
        wait_for(lambda: any(evicted(wl(rlab, ns, f"a{i}")) for i in range(4)), 30,
                 "one of team-a's evicted")
        victims = [i for i in range(4) if evicted(wl(rlab, ns, f"a{i}"))]
        assert len(victims) == 1
        assert cond(wl(rlab, ns, f"a{victims[0]}"), "Preempted")["reason"] \
            == "InCohortFairSharing"
        wait_for(lambda: admitted(wl(rlab, ns, "b0")), 30, "team-b admitted")
        share = (rlab.get("clusterqueue", a).get("status") or {}).get("fairSharing") or {}
        wait_for(lambda: ((rlab.get("clusterqueue", a).get("status") or {})
                          .get("fairSharing") or {}).get("weightedShare") == 750, 20,
                 f"team-a weightedShare 3/4 x 1000 (was {share})")
    finally:
        mt.stop()
        cleanup(rlab, ns, a, b, donor)

"""Queueing strategy, priorities, lendingLimit and inactive queues as conformance scenarios
(API only, Workloads without Jobs; the expected values are Kueue v0.17.1's)."""

from __future__ import annotations

import json
import time

import pytest

from tests.conformance.support import Target, cond
from tests.labfixture import wait_for


def test_strict_fifo_blocks_behind_its_head_best_effort_does_not(target: Target) -> None:
    s = target.scope("fifo")
    f = s.flavor("default")
    for strategy, cq in (("StrictFIFO", "strict"), ("BestEffortFIFO", "besteffort")):
        s.cluster_queue(cq, [(f, {"cpu": {"nominalQuota": "4"}})], strategy=strategy)
        s.workload(f"{cq}-1", cq, {"cpu": "3"})
        s.admitted(f"{cq}-1")
        s.workload(f"{cq}-2", cq, {"cpu": "3"})  # the head: does not fit
        # Queue order is the creation time, whole seconds in the API; equal times are
        # unordered (Kueue and pykueue): one second later, -3 is behind -2 for sure.
        time.sleep(1.1)
        s.workload(f"{cq}-3", cq, {"cpu": "1"})  # would fit
    s.admitted("besteffort-3")
    s.stays_pending("strict-3")
    s.stays_pending("strict-2", 0.5)
    s.finish("strict-1")  # the head goes first, then the one behind it
    s.admitted("strict-2")
    s.admitted("strict-3")


def test_within_cluster_queue_lower_priority_preempts_only_lower(target: Target) -> None:
    s = target.scope("prio")
    f = s.flavor("default")
    s.cluster_queue("cq", [(f, {"cpu": {"nominalQuota": "4"}})], within="LowerPriority")
    s.workload("low", "cq", {"cpu": "4"}, priority=0)
    s.admitted("low")
    s.workload("high", "cq", {"cpu": "4"}, priority=100)
    s.preempted("low", "InClusterQueue")
    s.admitted("high")
    s.pending("low")
    # Equal priority never preempts.
    s.workload("peer", "cq", {"cpu": "1"}, priority=100)
    s.stays_pending("peer")
    assert cond(s.wl("high"), "Evicted") is None or \
        cond(s.wl("high"), "Evicted")["status"] == "False"


def test_lending_limit_caps_what_others_borrow(target: Target) -> None:
    s = target.scope("lend")
    f = s.flavor("default")
    s.cluster_queue("lender", [(f, {"cpu": {"nominalQuota": "4", "lendingLimit": "1"}})],
                    cohort="co")
    s.cluster_queue("borrower", [(f, {"cpu": {"nominalQuota": "2"}})], cohort="co")
    s.workload("b1", "borrower", {"cpu": "3"})  # 2 own + 1 lent: the lender's limit
    s.admitted("b1")
    s.reserved("borrower", f, "cpu", 3000, 1000)
    s.workload("b2", "borrower", {"cpu": "1"})  # the lender has 3 idle, but lends only 1
    s.stays_pending("b2")
    s.workload("l1", "lender", {"cpu": "3"})  # the lender's own 3 not lent are there
    s.admitted("l1")


def test_inactive_queues_hold_workloads_and_say_why(target: Target) -> None:
    s = target.scope("inactive")
    f = s.flavor("default")
    s.cluster_queue("held", [(f, {"cpu": {"nominalQuota": "4"}})], stop_policy="Hold",
                    wait_active=False)

    def inactive(reason: str, get) -> dict | None:  # noqa: ANN001 - a getter
        c = cond(get(), "Active")
        return c if c and c["status"] == "False" and c["reason"] == reason else None

    wait_for(lambda: inactive("Stopped", lambda: s.cq("held")), 30, "held CQ Active=False")
    s.workload("w1", "held", {"cpu": "1"})
    w = s.stays_pending("w1")
    assert cond(w, "QuotaReserved")["reason"] == target.pending_reason("cq-stopped"), \
        w["status"]
    s.lab.kubectl("patch", "clusterqueue.kueue.x-k8s.io", s.n("held"), "--type=merge",
                  "-p", json.dumps({"spec": {"stopPolicy": "None"}}))
    s.admitted("w1")

    # A ClusterQueue naming a flavor that does not exist is inactive, and so is a LocalQueue
    # naming a ClusterQueue that does not exist.
    s.lab.apply(json.dumps({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
                            "metadata": {"name": s.n("noflavor")}, "spec": {
                                "namespaceSelector": {}, "resourceGroups": [{
                                    "coveredResources": ["cpu"], "flavors": [{
                                        "name": s.n("missing"), "resources": [
                                            {"name": "cpu", "nominalQuota": "1"}]}]}]}}))
    wait_for(lambda: inactive("FlavorNotFound", lambda: s.cq("noflavor")), 30,
             "noflavor CQ Active=False FlavorNotFound")
    s.lab.apply(json.dumps({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                            "metadata": {"name": "lq-orphan", "namespace": s.ns},
                            "spec": {"clusterQueue": s.n("nowhere")}}))
    wait_for(lambda: inactive("ClusterQueueDoesNotExist", lambda: s.lab.get(
        "localqueue.kueue.x-k8s.io", "-n", s.ns, "lq-orphan")), 30,
        "orphan LQ Active=False ClusterQueueDoesNotExist")
    s.workload("w2", "orphan", {"cpu": "1"})
    w = s.stays_pending("w2")
    assert cond(w, "QuotaReserved")["reason"] == target.pending_reason("cq-missing"), \
        w["status"]


@pytest.mark.make_test
def test_a_high_priority_arrival_into_a_full_cohort_evicts_queue_mates_and_a_borrower(
        target: Target) -> None:
    """The preemption behind most of the side-by-side run's evictions (issue 16; Kueue's
    performance generator: small and medium Workloads fill the cohort, then a large one of
    higher priority arrives in a ClusterQueue that holds some of them). Kueue v0.17.1's
    classical preemption (preemption.go): the preemptor's queue is below its nominal quota and
    borrowWithinCohort is unset, so the only attempt is without borrowing; candidates are
    tried other ClusterQueues' borrowers first, then lower priority, then the most recently
    admitted; a candidate whose ClusterQueue no longer borrows is skipped; then the targets are
    filled back where the preemptor still fits. Here: the borrower's newest Workload and both
    of the preemptor's queue-mates go; the borrower's older Workload and the third queue's
    stay."""
    s = target.scope("fullcohort")
    f = s.flavor("default")
    for cq in ("a", "b", "c"):
        s.cluster_queue(cq, [(f, {"cpu": {"nominalQuota": "4", "borrowingLimit": "20"}})],
                        cohort="co", within="LowerPriority", reclaim="Any")
    for name in ("a-s1", "a-s2"):
        s.workload(name, "a", {"cpu": "1"}, priority=50)
        s.admitted(name)
    s.workload("b1", "b", {"cpu": "4"}, priority=50)
    s.admitted("b1")
    time.sleep(1.1)  # reservation times are whole seconds: b2 is the more recent
    s.workload("b2", "b", {"cpu": "3"}, priority=50)  # borrows 3 of a's and c's idle quota
    s.admitted("b2")
    s.workload("c1", "c", {"cpu": "3"}, priority=50)
    s.admitted("c1")
    s.reserved("b", f, "cpu", 7000, 3000)  # the cohort: 2 + 7 + 3 = 12 of 12
    s.workload("large", "a", {"cpu": "4"}, priority=200)
    s.preempted("b2", "InCohortReclamation")
    for name in ("a-s1", "a-s2"):
        s.preempted(name, "InClusterQueue")
    s.admitted("large")
    s.stays_admitted("b1", "c1")
    s.pending("b2")  # 3 more would need 15 of 12; one of a's small ones may borrow the last 1
    s.reserved("b", f, "cpu", 4000, 0)
    s.reserved("c", f, "cpu", 3000, 0)

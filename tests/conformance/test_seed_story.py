"""The seed's story as conformance scenarios, against the API only (Workloads without Jobs).

Each test passes against Kueue v0.17.1 (``make conformance-kueue``) and against pykueue
(``make test``); the assertions are Kueue's observable behaviour: conditions and their reasons,
``status.admission`` and the ClusterQueue's ``flavorsReservation``.
"""

from __future__ import annotations

import time

from tests.conformance.support import Target, cond, is_true


def test_borrowing_stops_at_borrowing_limit(target: Target) -> None:
    s = target.scope("borrow")
    f = s.flavor("default")
    s.cluster_queue("research", [(f, {"cpu": {"nominalQuota": "4", "borrowingLimit": "2"}})],
                    cohort="co")
    s.cluster_queue("inference", [(f, {"cpu": {"nominalQuota": "4"}})], cohort="co")
    s.workload("r1", "research", {"cpu": "3"})
    s.admitted("r1")
    s.workload("r2", "research", {"cpu": "3"})  # 6 = nominal 4 + 2 borrowed: the limit
    s.admitted("r2")
    s.workload("r3", "research", {"cpu": "1"})  # 7 > 4 + borrowingLimit 2, though inference
    w = s.stays_pending("r3")                   # has 2 more idle
    assert cond(w, "QuotaReserved")["reason"] == target.pending_reason("no-fit"), w["status"]
    s.reserved("research", f, "cpu", 6000, 2000)
    # When r1 finishes, r3 is admitted without any other event.
    s.finish("r1")
    s.admitted("r3")


def test_reclaim_within_cohort_any_evicts_the_borrower(target: Target) -> None:
    s = target.scope("reclaim")
    f = s.flavor("default")
    s.cluster_queue("research", [(f, {"cpu": {"nominalQuota": "4"}})], cohort="co")
    s.cluster_queue("inference", [(f, {"cpu": {"nominalQuota": "4"}})], cohort="co",
                    reclaim="Any")
    s.workload("r1", "research", {"cpu": "4"})
    s.admitted("r1")
    # Victims are tried most recently admitted first: by the QuotaReserved condition's time,
    # whole seconds in the API, then by UID (Kueue's CandidatesOrdering; pykueue's too). One
    # second apart, r2 is the more recent, and evicting it alone is enough.
    time.sleep(1.1)
    s.workload("r2", "research", {"cpu": "2"})  # borrows 2 of inference's idle quota
    s.admitted("r2")
    s.reserved("research", f, "cpu", 6000, 2000)
    s.workload("i1", "inference", {"cpu": "4"}, priority=0)  # needs its nominal back
    s.preempted("r2", "InCohortReclamation", "InCohortReclaimWhileBorrowing")
    s.admitted("i1")
    assert is_true(s.wl("r1"), "Admitted") and not is_true(s.wl("r1"), "Evicted")
    s.pending("r2")  # requeued, waits for quota
    s.reserved("research", f, "cpu", 4000, 0)
    s.reserved("inference", f, "cpu", 4000, 0)


def test_flavor_fallback_a100_then_l4(target: Target) -> None:
    s = target.scope("fallback")
    a100 = s.flavor("a100", {"example.com/gpu-type": "a100"})
    l4 = s.flavor("l4", {"example.com/gpu-type": "l4"})
    gpu = "example.com/gpu"
    s.cluster_queue("gpu", [(a100, {gpu: {"nominalQuota": "2"}}),
                            (l4, {gpu: {"nominalQuota": "4"}})])
    s.workload("w1", "gpu", {gpu: "2"})
    s.admitted("w1")
    assert s.flavors_of("w1") == {gpu: a100}
    s.workload("w2", "gpu", {gpu: "2"})  # A100 full: the next flavor in order
    s.admitted("w2")
    assert s.flavors_of("w2") == {gpu: l4}
    s.workload("w3", "gpu", {gpu: "3"})  # fits no flavor now (A100 0 free, L4 2 free)
    s.stays_pending("w3")
    s.finish("w1")  # A100 frees 2: still not 3; L4 still 2
    s.stays_pending("w3", 2.0)
    s.finish("w2")  # L4 4 free
    s.admitted("w3")
    assert s.flavors_of("w3") == {gpu: l4}

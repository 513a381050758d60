"""Pure parts of the reconciler's writes: Workload conditions and admission JSON (Kueue
reference section 2), queue status (1.2, 1.4, 5.2; KQ-02, KQ-07), CRD -> core conversion,
domain Workload with eviction/reservation times, the work queue (no cluster)."""

from __future__ import annotations

import asyncio
import copy

import pytest

from app.controllers.cluster_view import ClusterView
from app.controllers.queue_status import cluster_queue_status, local_queue_status
from app.core.quota_state import LocalQueueFairSharing
from app.core.scheduling_cycle import Scheduler
from app.core.spec import ReclaimWithinCohort, WithinClusterQueue
from app.core.types import ClusterQueueName, ResourceName, WorkloadKey
from app.core.workload import Admission, PodSetAssignment
from app.integrations import default_registry
from app.kube.workqueue import WorkQueue
from app.wire.queues import cluster_queue, cohort_of, local_queue, resource_flavor
from app.wire.workload import domain_workload
from app.wire.workload_status import (
    admission_status,
    condition,
    execution_deadline,
    is_evicted,
    set_condition,
    with_admission,
    with_eviction,
    with_finished,
    with_pending,
    with_released,
)

T0 = 1_700_000_000.0
ADM = Admission("cq", (PodSetAssignment("main", {"cpu": "f", "memory": "f"},
                                        {"cpu": 2500, "memory": 3 * 2**30}, 2),))


def workload(**status) -> dict:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": "w", "namespace": "ns", "generation": 3, "uid": "u1",
                         "creationTimestamp": "2023-11-14T22:13:20Z", "resourceVersion": "5"},
            "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": 2, "template": {
                "spec": {"containers": [{"name": "c", "resources": {
                    "requests": {"cpu": "1250m", "memory": "1536Mi"}}}]}}}]},
            "status": status}


def test_admission_json_uses_canonical_quantities() -> None:
    assert admission_status(ADM) == {
        "clusterQueue": "cq",
        "podSetAssignments": [{"name": "main", "flavors": {"cpu": "f", "memory": "f"},
                               "resourceUsage": {"cpu": "2500m", "memory": "3Gi"},
                               "count": 2}]}


def test_admit_sets_quota_reserved_and_admitted_as_kueue_writes_them() -> None:
    out = with_admission(workload(), ADM, T0)
    qr, ad = condition(out, "QuotaReserved"), condition(out, "Admitted")
    assert (qr["status"], qr["reason"], qr["message"]) == \
        ("True", "QuotaReserved", "Quota reserved in ClusterQueue cq")
    assert (ad["status"], ad["reason"], ad["message"]) == \
        ("True", "Admitted", "The workload is admitted")
    assert qr["observedGeneration"] == 3 and qr["lastTransitionTime"] == "2023-11-14T22:13:20Z"
    assert out["status"]["admission"]["clusterQueue"] == "cq"


def test_condition_transition_time_changes_only_with_status() -> None:
    w = workload()
    assert set_condition(w, "QuotaReserved", "False", "WaitingForQuota", "m1", T0)
    assert not set_condition(w, "QuotaReserved", "False", "WaitingForQuota", "m1", T0 + 5)
    assert set_condition(w, "QuotaReserved", "False", "WaitingForQuota", "m2", T0 + 5)
    assert condition(w, "QuotaReserved")["lastTransitionTime"] == "2023-11-14T22:13:20Z"
    assert set_condition(w, "QuotaReserved", "True", "QuotaReserved", "x", T0 + 7)
    assert condition(w, "QuotaReserved")["lastTransitionTime"] == "2023-11-14T22:13:27Z"


def test_pending_reports_whether_anything_changed() -> None:
    w, changed = with_pending(workload(), "WaitingForQuota", "insufficient", T0)
    assert changed
    again, changed = with_pending(w, "WaitingForQuota", "insufficient", T0 + 1)
    assert not changed and again == w


def test_eviction_lifecycle_keeps_quota_until_released_then_requeues() -> None:
    admitted = with_admission(workload(), ADM, T0)
    ev = with_eviction(admitted, "Preempted", "to make room", T0 + 1,
                       preempted_reason="InCohortReclamation")
    assert is_evicted(ev) and ev["status"]["admission"]
    assert condition(ev, "Preempted")["reason"] == "InCohortReclamation"
    rel = with_released(ev, T0 + 2)
    assert "admission" not in rel["status"] and not is_evicted(rel)
    assert condition(rel, "QuotaReserved")["status"] == "False"
    assert condition(rel, "Admitted")["reason"] == "NoReservation"
    req = condition(rel, "Requeued")
    assert (req["status"], req["reason"]) == ("True", "Preempted")
    again = with_admission(rel, ADM, T0 + 3)
    e = condition(again, "Evicted")
    assert (e["status"], e["reason"], e["message"]) == ("False", "QuotaReserved",
                                                         "Previously: to make room")
    assert condition(again, "Preempted")["status"] == "False"


def test_finished_and_owner() -> None:
    w = with_finished(workload(), "Failed", "BackoffLimitExceeded", T0)
    assert condition(w, "Finished")["reason"] == "Failed"
    registry = default_registry()
    assert registry.owner_of(w) is None
    w["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j",
                                         "uid": "ju", "controller": True}]
    owner = registry.owner_of(w)
    assert owner is not None and (owner.kind.key, owner.name, owner.uid) == ("job", "j", "ju")
    w["metadata"]["ownerReferences"][0]["controller"] = False
    assert registry.owner_of(w) is None


def test_domain_workload_carries_eviction_and_reservation_times() -> None:
    w = with_eviction(with_admission(workload(), ADM, T0), "Preempted", "x", T0 + 10)
    d = domain_workload(w)
    assert d.admission is not None and d.admission.cluster_queue == "cq"
    assert d.quota_reserved_at == T0 and d.evicted_at == T0 + 10
    assert d.pod_sets[0].requests == {"cpu": 1250, "memory": 1536 * 2**20}
    assert domain_workload(workload()).evicted_at is None


# ------------------------------------------------------------------------------- convert

CQ_OBJ = {
    "metadata": {"name": "research-cq"},
    "spec": {"cohort": "ai-platform", "namespaceSelector": {},
             "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
             "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [
                 {"name": "default-flavor", "resources": [
                     {"name": "cpu", "nominalQuota": 4, "borrowingLimit": "4"},
                     {"name": "memory", "nominalQuota": "4Gi", "lendingLimit": "1Gi"}]}]}]},
}


def test_cluster_queue_conversion_with_the_deprecated_cohort_alias() -> None:
    spec, problem = cluster_queue(CQ_OBJ)
    assert problem is None
    assert spec.cohort == "ai-platform"
    assert spec.preemption.reclaim_within_cohort == ReclaimWithinCohort.ANY
    assert spec.preemption.within_cluster_queue == WithinClusterQueue.LOWER_PRIORITY
    q = spec.resource_groups[0].flavors[0].resources
    assert (q[0].nominal, q[0].borrowing_limit, q[0].lending_limit) == (4000, 4000, None)
    assert (q[1].nominal, q[1].lending_limit) == (4 * 2**30, 2**30)
    assert spec.namespace_selector is not None and spec.namespace_selector.matches({"a": "b"})
    assert cohort_of(CQ_OBJ["spec"])[1] and not cohort_of({"cohortName": "x"})[1]


def test_malformed_quantity_makes_an_inactive_spec_naming_the_field() -> None:
    bad = copy.deepcopy(CQ_OBJ)
    bad["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "4 cpus"
    spec, problem = cluster_queue(bad)
    assert spec.resource_groups == () and problem is not None
    assert "resourceGroups[0].flavors[0].resources[0].nominalQuota" in problem.message


@pytest.mark.parametrize("value", ["1e1.5", "1e1000", "100E"])
def test_unreadable_quantity_keeps_the_cohort_and_carries_the_problem(value: str) -> None:
    """Issue 14.4: the reader used to drop the cohort with the quotas, so the core saw an
    active queue outside its cohort and the cohort over-admitted."""
    bad = copy.deepcopy(CQ_OBJ)
    bad["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = value
    spec, problem = cluster_queue(bad)
    assert problem is not None and spec.object_problem == problem
    assert spec.cohort == "ai-platform"
    from app.core.spec import validate_cluster_queue
    assert validate_cluster_queue(spec, {}) == problem


def test_unset_namespace_selector_matches_nothing_and_other_kinds() -> None:
    spec, _ = cluster_queue({"metadata": {"name": "c"}, "spec": {}})
    assert spec.namespace_selector is None
    rf = resource_flavor({"metadata": {"name": "gpu"}, "spec": {
        "nodeLabels": {"pool": "gpu"}, "nodeTaints": [{"key": "k", "effect": "NoSchedule"}],
        "tolerations": [{"key": "t0", "value": "v0", "effect": "NoSchedule"}]}})
    assert rf.tolerations[0].operator == "Equal" and rf.node_taints[0].key == "k"
    lq = local_queue({"metadata": {"name": "q", "namespace": "n"}, "spec": {"clusterQueue": "c"}})
    assert (lq.key, lq.cluster_queue) == ("n/q", "c")


# ------------------------------------------------------------------------------- queue status


def _admitted(name: str, cq: str, cpu: str, *, lq: str = "lq", admitted: bool = True) -> dict:
    w = workload()
    w["metadata"]["name"] = name
    w["spec"]["queueName"] = lq
    w["status"] = {"admission": {"clusterQueue": cq, "podSetAssignments": [
        {"name": "main", "flavors": {"cpu": "f"}, "resourceUsage": {"cpu": cpu}, "count": 1}]},
        "conditions": [{"type": "QuotaReserved", "status": "True"},
                       {"type": "Admitted", "status": "True" if admitted else "False"}]}
    return w


def _cq(cohort: str | None) -> dict:
    spec = {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
        {"name": "f", "resources": [{"name": "cpu", "nominalQuota": "2"}]}]}]}
    if cohort:
        spec["cohortName"] = cohort
    return {"metadata": {"name": "cq", "generation": 1}, "spec": spec}


LQ = {"metadata": {"name": "lq", "namespace": "ns"}, "spec": {"clusterQueue": "cq"}}


def _core(cohort: str | None, *workloads: dict, assumed: tuple[dict, ...] = ()) -> ClusterView:
    """The admission core fed as the reconciler feeds it (the wire readers and
    ``domain_workload``); ``assumed``: admissions decided but not yet written."""
    c = Scheduler()
    c.add_flavor(resource_flavor({"metadata": {"name": "f"}, "spec": {}}))
    c.add_cluster_queue(cluster_queue(_cq(cohort))[0])
    c.add_local_queue(local_queue(LQ))
    c.set_namespace("ns", {})
    for w in workloads:
        c.update_workload(domain_workload(w))
    for w in assumed:
        wl = domain_workload(w)
        c.update_workload(wl)
        assert c.assume(wl.key, ADM_1CPU, T0)
    return ClusterView(c)


ADM_1CPU = Admission("cq", (PodSetAssignment("main", {"cpu": "f"}, {"cpu": 1000}, 1),))


@pytest.mark.parametrize(("cohort", "borrowed"), [("co", "1"), (None, "0")],
                         ids=["in-a-cohort-reports-borrowed", "KQ-02-no-cohort-never-borrowed"])
def test_cluster_queue_status_counts_and_borrowed(cohort: str | None, borrowed: str) -> None:
    pending = workload()
    pending["metadata"]["name"] = "p"
    b = workload()
    b["metadata"]["name"] = "b"
    view = _core(cohort, _admitted("a", "cq", "2"), pending, assumed=(b,))
    st = cluster_queue_status(_cq(cohort), view.cluster_queue("cq"), T0)
    assert (st["pendingWorkloads"], st["reservingWorkloads"], st["admittedWorkloads"]) == (1, 2, 1)
    assert st["flavorsReservation"] == [{"name": "f", "resources": [
        {"name": "cpu", "total": "3", "borrowed": borrowed}]}]
    assert st["flavorsUsage"][0]["resources"][0]["total"] == "2"  # the admission in flight
    active = st["conditions"][0]
    assert (active["type"], active["status"], active["reason"]) == ("Active", "True", "Ready")


def test_finished_workloads_count_nowhere_in_the_one_tally() -> None:
    a = _admitted("a", "cq", "2")
    view = _core(None, a)
    assert view.cluster_queue("cq").status.resources[0].usage == 2000
    view.cluster.finish(WorkloadKey("ns/a"))
    st = cluster_queue_status(_cq(None), view.cluster_queue("cq"), T0)
    assert st["reservingWorkloads"] == 0
    assert st["flavorsReservation"][0]["resources"][0]["total"] == "0"


def test_KQ_07_status_keeps_usage_of_a_resource_no_longer_declared() -> None:
    w = _admitted("a", "cq", "2")
    psa = w["status"]["admission"]["podSetAssignments"][0]
    psa["flavors"]["memory"] = "f"
    psa["resourceUsage"]["memory"] = "2Gi"
    st = cluster_queue_status(_cq("co"), _core("co", w).cluster_queue("cq"), T0)
    res = {r["name"]: r for r in st["flavorsReservation"][0]["resources"]}
    assert res["memory"] == {"name": "memory", "total": "2Gi", "borrowed": "2Gi"}


def test_local_queue_status_and_active_reasons() -> None:
    view = _core(None, _admitted("a", "cq", "2"))
    st = local_queue_status(LQ, view.local_queue("ns", "lq"), view.cluster_queue("cq"), T0)
    assert st["admittedWorkloads"] == 1
    assert st["flavorsUsage"] == [{"name": "f", "resources": [{"name": "cpu", "total": "2"}]}]
    assert st["conditions"][0]["reason"] == "Ready"
    view.cluster.delete_cluster_queue(ClusterQueueName("cq"))
    missing = local_queue_status(LQ, view.local_queue("ns", "lq"), None, T0)
    assert missing["conditions"][0]["reason"] == "ClusterQueueDoesNotExist"
    stopped_lq = {**LQ, "spec": {"clusterQueue": "cq", "stopPolicy": "Hold"}}
    view.cluster.add_local_queue(local_queue(stopped_lq))
    stopped = local_queue_status(stopped_lq, view.local_queue("ns", "lq"), None, T0)
    assert stopped["conditions"][0]["reason"] == "Stopped"


def test_local_queue_status_carries_the_admission_fair_sharing_ledger() -> None:
    view = _core(None, _admitted("a", "cq", "2"))
    afs = LocalQueueFairSharing("ns/lq", ClusterQueueName("cq"),
                                {ResourceName("cpu"): 1234.9}, T0 - 60, 1.2349)
    st = local_queue_status(LQ, view.local_queue("ns", "lq"), view.cluster_queue("cq"), T0, afs)
    assert st["fairSharing"] == {"admissionFairSharingStatus": {
        "consumedResources": {"cpu": "1234m"}, "lastUpdate": "2023-11-14T22:12:20Z"}}
    plain = local_queue_status(LQ, view.local_queue("ns", "lq"), view.cluster_queue("cq"), T0)
    assert "fairSharing" not in plain


# ------------------------------------------------------------------------------- work queue


async def test_workqueue_dedupes_and_requeues_a_key_added_while_processing() -> None:
    q = WorkQueue(base=0.01, cap=0.05)
    q.add("a")
    q.add("a")
    q.add("b")
    assert len(q) == 2
    k = await q.get()
    assert k == "a"
    q.add("a")  # while processing: not handed to another worker
    assert len(q) == 1
    assert await q.get() == "b"
    q.done("a")  # now requeued
    assert await asyncio.wait_for(q.get(), 1) == "a"
    q.done("a")
    q.done("b")
    assert q.add_rate_limited("c") == 0.01 and q.add_rate_limited("c") == 0.02
    assert await asyncio.wait_for(q.get(), 1) == "c"
    q.forget("c")
    assert q.failures("c") == 0
    q.close()


def test_execution_deadline_counts_time_admitted_before() -> None:
    w = _admitted("a", "cq", "1")
    w["spec"]["maximumExecutionTimeSeconds"] = 60
    w["status"]["conditions"][1]["lastTransitionTime"] = "2023-11-14T22:13:20Z"  # T0
    assert execution_deadline(w) == T0 + 60
    w["status"]["accumulatedPastExecutionTimeSeconds"] = 45
    assert execution_deadline(w) == T0 + 15
    released = with_released(w, T0 + 10)
    assert released["status"]["accumulatedPastExecutionTimeSeconds"] == 55
    assert execution_deadline(released) is None  # not admitted: no deadline
    del w["spec"]["maximumExecutionTimeSeconds"]
    assert execution_deadline(w) is None

"""The wire readers for Cohort objects, ``fairSharing.weight``, ``admissionScope`` and the
LocalQueue's Admission Fair Sharing weight and status (app/wire/queues.py)."""

from __future__ import annotations

import pytest

from app.core.scheduling_cycle import Scheduler
from app.core.spec import AdmissionMode, ResourceFlavor, validate_cluster_queue
from app.core.types import ClusterQueueName, CohortName, FlavorName, FlavorResource, ResourceName
from app.wire.fields import WorkloadSpecError
from app.wire.queues import (
    cluster_queue,
    cohort,
    consumed_from_status,
    consumed_resources,
    local_queue,
)

GPU = ResourceName("nvidia.com/gpu")


def _groups(**limits):
    return [{"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": "a100", "resources": [
        {"name": "nvidia.com/gpu", "nominalQuota": "4", **limits}]}]}]


def test_cohort_object_reads_parent_quota_limits_and_weight():
    spec, problem = cohort({
        "metadata": {"name": "research"},
        "spec": {"parentName": "org", "resourceGroups": _groups(lendingLimit=6, borrowingLimit="2"),
                 "fairSharing": {"weight": "0.5"}},
    })
    assert problem is None
    assert spec.name == "research" and spec.parent == "org"
    rq = spec.quotas[FlavorResource(FlavorName("a100"), GPU)]
    assert (rq.nominal, rq.borrowing_limit, rq.lending_limit) == (4, 2, 6)
    assert spec.fair_weight_milli == 500


def test_cohort_root_defaults_weight_1_and_no_parent():
    spec, problem = cohort({"metadata": {"name": "org"}, "spec": {}})
    assert problem is None and spec.parent is None and spec.fair_weight_milli == 1000
    assert spec.resource_groups == ()


def test_unreadable_cohort_quota_disables_its_subtree_in_the_core():
    spec, problem = cohort({"metadata": {"name": "org"},
                            "spec": {"resourceGroups": _groups(borrowingLimit="lots")}})
    assert problem is not None and "borrowingLimit" in problem.field
    c = Scheduler()
    c.add_flavor(ResourceFlavor(FlavorName("a100")))
    c.add_cohort(spec)
    cq, _ = cluster_queue({"metadata": {"name": "cq"}, "spec": {
        "cohortName": "org", "namespaceSelector": {}, "resourceGroups": _groups()}})
    c.add_cluster_queue(cq)
    st = c.cluster_queue_status(ClusterQueueName("cq"))
    assert not st.active and "borrowingLimit" in st.message and "Cohort org" in st.message
    assert not c.cohort_status(CohortName("org")).active


def test_cluster_queue_weight_is_read_in_milli_units():
    spec, problem = cluster_queue({"metadata": {"name": "cq"},
                                   "spec": {"fairSharing": {"weight": 3}}})
    assert problem is None and spec.fair_weight_milli == 3000


def test_admission_scope_is_read_and_an_unknown_mode_is_named():
    spec, problem = cluster_queue({"metadata": {"name": "cq"}, "spec": {
        "admissionScope": {"admissionMode": "UsageBasedAdmissionFairSharing"}}})
    assert problem is None and spec.admission_mode == AdmissionMode.USAGE_BASED
    ok, none = cluster_queue({"metadata": {"name": "cq"}, "spec": {
        "admissionScope": {"admissionMode": "NoAdmissionFairSharing"}}})
    assert none is None and ok.admission_mode == AdmissionMode.NONE
    bad, _ = cluster_queue({"metadata": {"name": "cq"}, "spec": {
        "admissionScope": {"admissionMode": "Sometimes"}}})
    problem = validate_cluster_queue(bad, {})
    assert problem is not None and problem.field == "spec.admissionScope.admissionMode"
    assert "'Sometimes'" in problem.message


def test_local_queue_weight_is_read_and_a_bad_one_is_named():
    lq = local_queue({"metadata": {"namespace": "a", "name": "team"}, "spec": {
        "clusterQueue": "cq", "fairSharing": {"weight": "2.5"}}})
    assert (lq.key, lq.cluster_queue, lq.fair_weight_milli) == ("a/team", "cq", 2500)
    assert local_queue({"metadata": {"namespace": "a", "name": "t"},
                        "spec": {"clusterQueue": "cq"}}).fair_weight_milli == 1000
    with pytest.raises(WorkloadSpecError, match=r"spec\.fairSharing\.weight"):
        local_queue({"metadata": {"namespace": "a", "name": "t"},
                     "spec": {"clusterQueue": "cq", "fairSharing": {"weight": "-1"}}})


def test_consumed_resources_round_trip_through_the_local_queue_status():
    consumed = {ResourceName("cpu"): 1500.9, ResourceName("memory"): 1073741824.7,
                GPU: 1.25, ResourceName("pods"): 3.0}
    wire = consumed_resources(consumed)
    assert wire == {"cpu": "1500m", "memory": "1Gi", "nvidia.com/gpu": "1250m", "pods": "3"}
    back = consumed_from_status({"status": {"fairSharing": {"admissionFairSharingStatus": {
        "consumedResources": wire, "lastUpdate": "2026-12-01T00:00:00Z"}}}})
    assert back == {ResourceName("cpu"): 1500.0, ResourceName("memory"): 1073741824.0,
                    GPU: 1.25, ResourceName("pods"): 3.0}
    assert consumed_from_status({"status": {}}) is None
    assert consumed_from_status({"status": {"fairSharing": {"admissionFairSharingStatus": {
        "consumedResources": {"cpu": "lots"}}}}}) is None


def test_bounded_preemption_annotations_are_read_in_seconds():
    spec, problem = cluster_queue({"metadata": {"name": "cq", "annotations": {
        "pykueue.dev/min-runtime-before-preemption": "5m",
        "pykueue.dev/reclaim-backoff": "90s"}}, "spec": {}})
    assert problem is None
    assert (spec.min_runtime_s, spec.reclaim_backoff_s) == (300.0, 90.0)


def test_an_unreadable_annotation_makes_the_queue_inactive_naming_it():
    _, problem = cluster_queue({"metadata": {"name": "cq", "annotations": {
        "pykueue.dev/min-runtime-before-preemption": "five minutes"}}, "spec": {}})
    assert problem is not None
    assert problem.field == "metadata.annotations[pykueue.dev/min-runtime-before-preemption]"


def test_cohort_status_shows_subtree_usage_and_the_cycle():
    from app.controllers.queue_status import INT64_MAX, cohort_status, weighted_share
    from tests.builders import Sim, cluster_queue, workload
    from tests.builders import cohort as cohort_b

    s = Sim(cohort_b("org").flavor("default", cpu=4),
            cohort_b("team").parent("org"),
            cluster_queue("a").cohort("team").flavor("default", cpu=2))
    s.submit(workload("w").cq("a").pods(5, cpu=1))
    s.settle()
    obj = {"metadata": {"name": "team"}, "spec": {"parentName": "org"}}
    st = cohort_status(obj, s.c.cohort_status(CohortName("team")), None, 100.0)
    assert st["flavorsUsage"] == [{"name": "default", "resources": [
        {"name": "cpu", "subtreeQuota": "2", "total": "5", "borrowed": "3"}]}]
    assert st["conditions"][0]["status"] == "True" and "fairSharing" not in st
    s.c.add_cohort(cohort_b("org").parent("team").build())
    st = cohort_status(obj, s.c.cohort_status(CohortName("team")), 0.0, 101.0)
    cond = st["conditions"][0]
    assert (cond["status"], cond["reason"]) == ("False", "CohortCycle")
    assert "team -> org -> team" in cond["message"] or "org -> team -> org" in cond["message"]
    assert st["fairSharing"] == {"weightedShare": 0}
    assert weighted_share(float("inf")) == INT64_MAX and weighted_share(250.2) == 251

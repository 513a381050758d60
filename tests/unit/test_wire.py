"""One reader per wire kind (``app.wire``): the controllers, the extender and the simulator read
ClusterQueues, ResourceFlavors and tolerations through the same functions, so they cannot
disagree (issue 17: an unset ``namespaceSelector`` meant "no namespace" in one and "all
namespaces" in the other)."""

from __future__ import annotations

import pytest

from app.core.scheduling_cycle import Scheduler
from app.core.types import ClusterQueueName, FlavorName, ResourceName
from app.core.workload import PodSet, Toleration, Workload
from app.extender.placement import ExtenderInputError, pod_facts
from app.sim import Simulator, TraceError, parse_trace
from app.wire.fields import WorkloadSpecError
from app.wire.podtemplate import tolerations
from app.wire.queues import cluster_queue, local_queue, resource_flavor

CPU = ResourceName("cpu")
GROUPS = [{"coveredResources": ["cpu"], "flavors": [
    {"name": "default", "resources": [{"name": "cpu", "nominalQuota": "4"}]}]}]


def _cq_obj(**spec: object) -> dict:
    return {"metadata": {"name": "team"}, "spec": {"resourceGroups": GROUPS, **spec}}


def _admits_in_core(cq_spec: dict) -> bool:
    """Feed the controllers' readers into the core; True when a 1-cpu Workload in namespace
    ``ml`` is admitted."""
    c = Scheduler()
    c.add_flavor(resource_flavor({"metadata": {"name": "default"}, "spec": {}}))
    spec, problem = cluster_queue(_cq_obj(**cq_spec))
    assert problem is None
    c.add_cluster_queue(spec)
    c.add_local_queue(local_queue({"metadata": {"namespace": "ml", "name": "lq"},
                                   "spec": {"clusterQueue": "team"}}))
    c.set_namespace("ml", {})
    c.add_workload(Workload("ml", "w", "lq", (PodSet("main", 1, {CPU: 1000}),), creation=1.0))
    return any(d.__class__.__name__ == "Admit" for d in c.schedule(now=2.0))


TRACE = """\
flavors: [{name: default}]
clusterQueues:
  - name: team
    namespace: ml
%s    resourceGroups:
      - coveredResources: [cpu]
        flavors: [{name: default, resources: [{name: cpu, nominalQuota: 4}]}]
arrivals:
  - {at: 0s, name: w, localQueue: ml/team, request: {cpu: 1}, runtime: 1s}
"""


def _admits_in_simulator(selector_line: str) -> bool:
    return Simulator(parse_trace(TRACE % selector_line, "t.yaml")).run().admits == 1


@pytest.mark.parametrize(("spec", "line", "admitted"), [
    pytest.param({}, "", False, id="unset namespaceSelector admits no namespace (Kueue)"),
    pytest.param({"namespaceSelector": {}}, "    namespaceSelector: {}\n", True,
                 id="empty namespaceSelector admits every namespace"),
    pytest.param({"namespaceSelector": {"matchLabels": {"team": "ml"}}},
                 "    namespaceSelector: {matchLabels: {team: ml}}\n", False,
                 id="a selector the namespace does not match"),
])
def test_controllers_and_simulator_read_namespace_selector_the_same(
        spec: dict, line: str, admitted: bool) -> None:
    assert _admits_in_core(spec) is admitted
    assert _admits_in_simulator(line) is admitted


def test_unset_selector_is_none_and_empty_is_match_all() -> None:
    unset, _ = cluster_queue(_cq_obj())
    empty, _ = cluster_queue(_cq_obj(namespaceSelector={}))
    assert unset.namespace_selector is None
    assert empty.namespace_selector is not None and empty.namespace_selector.matches({})


def test_flavor_reader_reads_labels_taints_and_tolerations() -> None:
    rf = resource_flavor({"metadata": {"name": "a100"}, "spec": {
        "nodeLabels": {"gpu": "a100"},
        "nodeTaints": [{"key": "nvidia.com/gpu", "value": "true"}],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                         "effect": "NoSchedule"}]}})
    assert rf.name == FlavorName("a100") and rf.node_labels == {"gpu": "a100"}
    assert [(t.key, t.value, t.effect) for t in rf.node_taints] == [
        ("nvidia.com/gpu", "true", "NoSchedule")]  # the CRD's default effect
    assert rf.tolerations == (Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"),)


BAD_TOLERATION = {"key": "k", "operator": "Sometimes"}


def test_one_toleration_reader_refuses_the_same_toleration_everywhere() -> None:
    with pytest.raises(WorkloadSpecError) as err:
        tolerations([BAD_TOLERATION], "spec.tolerations")
    assert err.value.field == "spec.tolerations[0].operator"
    with pytest.raises(WorkloadSpecError, match=r"spec\.tolerations\[0\]\.operator"):
        resource_flavor({"metadata": {"name": "x"}, "spec": {"tolerations": [BAD_TOLERATION]}})
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}],
                                                "tolerations": [BAD_TOLERATION]}}
    with pytest.raises(ExtenderInputError, match=r"Pod\.spec\.tolerations\[0\]\.operator"):
        pod_facts(pod, "nvidia.com/gpu")
    trace = ("flavors:\n  - name: x\n    tolerations:\n"
             "      - {key: k, operator: Sometimes}\n")
    with pytest.raises(TraceError) as terr:
        parse_trace(trace, "f.yaml")
    assert terr.value.line == 4 and "must be Equal or Exists" in str(terr.value)


def test_unreadable_quota_names_the_field_for_the_controllers_and_the_trace() -> None:
    bad = [{"coveredResources": ["cpu"], "flavors": [
        {"name": "default", "resources": [{"name": "cpu", "nominalQuota": "4x"}]}]}]
    spec, problem = cluster_queue({"metadata": {"name": "team"},
                                   "spec": {"resourceGroups": bad}})
    assert problem is not None
    assert problem.field == "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"
    assert spec.resource_groups == () and spec.object_problem == problem
    with pytest.raises(TraceError) as err:
        parse_trace((TRACE % "").replace("nominalQuota: 4", "nominalQuota: 4x"), "t.yaml")
    assert err.value.line == 7 and "nominalQuota" in str(err.value)
    assert ClusterQueueName("team") == spec.name

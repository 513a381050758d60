"""Admission checks and waitForPodsReady without a cluster: the ClusterQueue reader, the core's
Active rule, the Workload status builders and the lifecycle's timing rules (Kueue v1beta2
workload controller; reference 3.9, 3.10). The lab tests are in
tests/integration/test_reconciler_lifecycle.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from app.config import Settings, WaitForPodsReadySettings
from app.controllers.cluster_view import ClusterView
from app.controllers.lifecycle import (
    backoff_held,
    backoff_seconds,
    checks_message,
    pods_ready_deadline,
    retry_requeue_at,
)
from app.controllers.metrics import QueueCollector
from app.controllers.queue_status import cluster_queue_status, local_queue_status
from app.core.scheduling_cycle import Scheduler
from app.core.spec import checks_for_flavors
from app.core.types import FlavorName
from app.integrations.batchjob.job import pods_ready
from app.integrations.framework import StartError
from app.integrations.jobset.jobset import jobset_pods_ready
from app.integrations.podsets import admitted_scheduling
from app.wire.queues import (
    admission_check,
    cluster_queue,
    is_multikueue_check,
    local_queue,
    resource_flavor,
)
from app.wire.workload import domain_workload
from app.wire.workload_status import (
    condition,
    rfc3339,
    set_condition,
    with_admission,
    with_backoff_finished,
    with_checks_admitted,
    with_checks_synced,
    with_eviction,
    with_pods_ready,
    with_released,
)
from tests.unit.test_controllers_status import ADM, ADM_1CPU, LQ, T0, workload


def _cq(checks: list[dict] | None = None) -> dict:
    spec: dict = {"namespaceSelector": {}, "resourceGroups": [
        {"coveredResources": ["cpu"], "flavors": [
            {"name": "f", "resources": [{"name": "cpu", "nominalQuota": "2"}]},
            {"name": "g", "resources": [{"name": "cpu", "nominalQuota": "2"}]}]}]}
    if checks is not None:
        spec["admissionChecksStrategy"] = {"admissionChecks": checks}
    return {"metadata": {"name": "cq", "generation": 1}, "spec": spec}


def _ac(name: str, active: bool | None) -> dict:
    obj: dict = {"metadata": {"name": name}, "spec": {"controllerName": "example.com/c"}}
    if active is not None:
        obj["status"] = {"conditions": [{"type": "Active", "status": str(active),
                                         "reason": "R", "message": ""}]}
    return obj


def test_reader_keeps_the_admission_checks_strategy() -> None:
    spec, problem = cluster_queue(_cq([{"name": "prov", "onFlavors": ["g"]}, {"name": "all"}]))
    assert problem is None
    assert [(c.name, c.on_flavors) for c in spec.admission_checks] == [("prov", ("g",)),
                                                                       ("all", ())]
    assert checks_for_flavors(spec, {FlavorName("f")}) == ("all",)
    assert checks_for_flavors(spec, {FlavorName("g")}) == ("all", "prov")
    assert admission_check(_ac("prov", True)) == ("prov", True)
    assert admission_check(_ac("prov", None)) == ("prov", False)  # no Active yet


def test_a_queue_naming_a_missing_or_inactive_check_is_inactive_and_says_which() -> None:
    c = Scheduler()
    for f in ("f", "g"):
        c.add_flavor(resource_flavor({"metadata": {"name": f}, "spec": {}}))
    c.add_cluster_queue(cluster_queue(_cq([{"name": "prov"}, {"name": "b"}]))[0])
    c.add_local_queue(local_queue({"metadata": {"name": "lq", "namespace": "ns"},
                                   "spec": {"clusterQueue": "cq"}}))
    view = ClusterView(c)

    def active() -> dict:
        st = cluster_queue_status(_cq(), view.cluster_queue("cq"), T0)
        return st["conditions"][0]

    a = active()
    assert (a["status"], a["reason"]) == ("False", "AdmissionCheckNotFound")
    assert a["message"] == ("Can't admit new workloads: references missing AdmissionCheck(s): "
                            "b,prov.")
    c.set_admission_check(*admission_check(_ac("prov", True)))
    c.set_admission_check(*admission_check(_ac("b", False)))
    a = active()
    assert (a["reason"], a["message"]) == (
        "AdmissionCheckInactive",
        "Can't admit new workloads: references inactive AdmissionCheck(s): b.")
    c.set_admission_check("b", True)
    assert active()["reason"] == "Ready"
    c.delete_admission_check("prov")
    assert active()["reason"] == "AdmissionCheckNotFound"


def test_a_queue_naming_two_multikueue_checks_or_one_per_flavor_is_inactive() -> None:
    """Kueue v0.17.1 ``updateQueueStatus``: reasons ``MultipleMultiKueueAdmissionChecks`` and
    ``MultiKueueAdmissionCheckAppliedPerFlavor``; a MultiKueue check beside another kind of
    check is fine (found following docs/multikueue.md: such a queue admitted and dispatched)."""
    c = Scheduler()
    for f in ("f", "g"):
        c.add_flavor(resource_flavor({"metadata": {"name": f}, "spec": {}}))
    c.add_cluster_queue(cluster_queue(_cq([{"name": "mk1"}, {"name": "mk2"}]))[0])
    view = ClusterView(c)

    def active() -> dict:
        return cluster_queue_status(_cq(), view.cluster_queue("cq"), T0)["conditions"][0]

    def mk(name: str) -> dict:
        obj = _ac(name, True)
        obj["spec"]["controllerName"] = "kueue.x-k8s.io/multikueue"
        return obj
    for name in ("mk2", "mk1"):
        c.set_admission_check(*admission_check(mk(name)), multikueue=is_multikueue_check(mk(name)))
    a = active()
    assert (a["status"], a["reason"]) == ("False", "MultipleMultiKueueAdmissionChecks")
    assert a["message"] == ("Can't admit new workloads: Cannot use multiple MultiKueue "
                            "AdmissionChecks on the same ClusterQueue, found: mk1,mk2.")
    other = _ac("mk2", True)  # the same name, now another controller's check
    c.set_admission_check(*admission_check(other), multikueue=is_multikueue_check(other))
    assert active()["reason"] == "Ready"
    c.add_cluster_queue(cluster_queue(_cq([{"name": "mk1", "onFlavors": ["g"]}]))[0])
    a = active()
    assert (a["status"], a["reason"]) == ("False", "MultiKueueAdmissionCheckAppliedPerFlavor")
    assert a["message"] == ("Can't admit new workloads: Cannot specify MultiKueue AdmissionCheck "
                            "per flavor, found: mk1.")
    c.add_cluster_queue(cluster_queue(_cq([{"name": "mk1", "onFlavors": ["g", "f"]}]))[0])
    assert active()["reason"] == "Ready"  # every flavor: not per flavor (Kueue AllFlavors)


def test_queue_status_counts_a_workload_awaiting_checks_as_reserving_only() -> None:
    c = Scheduler()
    c.add_flavor(resource_flavor({"metadata": {"name": "f"}, "spec": {}}))
    c.add_cluster_queue(cluster_queue(_cq())[0])
    c.add_local_queue(local_queue(LQ))
    w = with_admission(workload(), ADM_1CPU, T0, ("prov",))
    c.update_workload(domain_workload(w))
    for awaiting, admitted in ((frozenset({"ns/w"}), 0), (frozenset(), 1)):
        st = cluster_queue_status(_cq(), ClusterView(c, awaiting_checks=awaiting)
                                  .cluster_queue("cq"), T0)
        assert (st["reservingWorkloads"], st["admittedWorkloads"]) == (1, admitted)
        # The LocalQueue: reserved quota in flavorsReservation, flavorsUsage only once admitted.
        view = ClusterView(c, awaiting_checks=awaiting)
        lq = local_queue_status(LQ, view.local_queue("ns", "lq"), view.cluster_queue("cq"), T0)
        assert (lq["reservingWorkloads"], lq["admittedWorkloads"]) == (1, admitted)
        assert lq["flavorsReservation"][0]["resources"][0]["total"] == "1"
        assert lq["flavorsUsage"][0]["resources"][0]["total"] == ("1" if admitted else "0")
        # /metrics reads the same set.
        registry = CollectorRegistry()
        registry.register(QueueCollector(lambda: c, awaiting_checks=lambda a=awaiting: a))
        assert registry.get_sample_value(
            "kueue_admitted_active_workloads",
            {"cluster_queue": "cq", "replica_role": "standalone"}) == admitted
        assert registry.get_sample_value(
            "kueue_reserving_active_workloads",
            {"cluster_queue": "cq", "replica_role": "standalone"}) == 1


def test_reservation_with_checks_is_not_admitted_until_all_are_ready() -> None:
    out = with_admission(workload(), ADM, T0, ("prov", "a"))
    assert condition(out, "QuotaReserved")["status"] == "True"
    assert condition(out, "Admitted") is None  # Kueue writes none until it changes
    assert [(c["name"], c["state"]) for c in out["status"]["admissionChecks"]] == \
        [("a", "Pending"), ("prov", "Pending")]
    out["status"]["admissionChecks"][0]["state"] = "Ready"
    _, changed = with_checks_admitted(out, T0 + 1)
    assert not changed
    out["status"]["admissionChecks"][1]["state"] = "Ready"
    ready, changed = with_checks_admitted(out, T0 + 1)
    assert changed and condition(ready, "Admitted")["status"] == "True"
    # Without checks: Admitted at once and no admissionChecks left from an earlier queue.
    plain = with_admission(ready, ADM, T0 + 2)
    assert "admissionChecks" not in plain["status"]
    assert condition(plain, "Admitted")["status"] == "True"


def test_checks_follow_the_queue_after_the_reservation() -> None:
    w = with_admission(workload(), ADM, T0, ("prov",))
    added, changed = with_checks_synced(w, ("b", "prov"), T0 + 1)
    assert changed and [c["name"] for c in added["status"]["admissionChecks"]] == ["b", "prov"]
    assert condition(added, "Admitted") is None
    dropped, changed = with_checks_synced(added, (), T0 + 2)
    assert changed and "admissionChecks" not in dropped["status"]
    assert condition(dropped, "Admitted")["status"] == "True"
    # An admitted Workload gets a new check: Admitted=False UnsatisfiedChecks (Kueue).
    again, _ = with_checks_synced(dropped, ("prov",), T0 + 3)
    assert (condition(again, "Admitted")["status"], condition(again, "Admitted")["reason"]) == \
        ("False", "UnsatisfiedChecks")


def test_retry_eviction_resets_checks_and_waits_out_its_delay() -> None:
    out = with_admission(workload(), ADM, T0, ("prov",))
    ac = out["status"]["admissionChecks"][0]
    ac.update(state="Retry", message="no capacity", requeueAfterSeconds=30,
              lastTransitionTime=rfc3339(T0 + 10))
    assert checks_message([ac], "Retry") == 'AdmissionCheck in Retry state: "prov" (no capacity)'
    assert retry_requeue_at([ac]) == T0 + 40
    ev = with_eviction(out, "AdmissionCheck", "Evicted due to ...", T0 + 11,
                       requeue_state={"requeueAt": rfc3339(T0 + 40)})
    ac = ev["status"]["admissionChecks"][0]
    assert (ac["state"], ac["retryCount"]) == ("Pending", 1)
    assert ac["message"] == "Reset to Pending after eviction. Previously: Retry"
    rel = with_released(ev, T0 + 12)
    req = condition(rel, "Requeued")
    assert (req["status"], req["reason"]) == ("False", "AdmissionCheck")
    assert condition(rel, "Admitted") is None
    assert backoff_held(rel)
    done = with_backoff_finished(rel, T0 + 40)
    assert not backoff_held(done)
    assert condition(done, "Requeued")["reason"] == "BackoffFinished"
    assert "requeueAt" not in done["status"]["requeueState"]


def test_deactivation_consumes_the_deactivation_target() -> None:
    w = workload()
    set_condition(w, "DeactivationTarget", "True", "AdmissionCheck",
                  'AdmissionCheck in Rejected state: "prov"', T0)
    assert condition(w, "DeactivationTarget")["status"] == "True"
    ev = with_eviction(w, "DeactivatedDueToAdmissionCheck", "m", T0 + 1)
    assert condition(ev, "DeactivationTarget") is None


def test_pods_ready_condition_and_deadlines() -> None:
    adm = with_admission(workload(), ADM, T0)
    assert pods_ready_deadline(adm, 300, 60) == T0 + 300
    w, changed = with_pods_ready(adm, False, T0 + 1)
    assert changed and (condition(w, "PodsReady")["reason"],
                        condition(w, "PodsReady")["message"]) == (
        "WaitForStart", "Not all pods are ready or succeeded")
    w, _ = with_pods_ready(w, True, T0 + 5)
    assert condition(w, "PodsReady")["reason"] == "Started"
    assert pods_ready_deadline(w, 300, 60) is None
    w, _ = with_pods_ready(w, False, T0 + 100)  # a pod failed after all were ready
    assert condition(w, "PodsReady")["reason"] == "WaitForRecovery"
    assert pods_ready_deadline(w, 300, 60) == T0 + 160
    w, _ = with_pods_ready(w, True, T0 + 120)
    assert condition(w, "PodsReady")["reason"] == "Recovered"
    # A requeued Workload starts its wait again.
    rel = with_released(with_eviction(w, "Preempted", "m", T0 + 130), T0 + 131)
    assert (condition(rel, "PodsReady")["status"], condition(rel, "PodsReady")["reason"]) == \
        ("False", "WaitForStart")
    assert pods_ready_deadline(rel, 300, 60) is None  # not admitted: nothing to time


def test_pods_ready_timeout_eviction_keeps_its_backoff() -> None:
    assert [backoff_seconds(n, 60, 3600) for n in (1, 2, 3, 7, 8)] == \
        [60, 120, 240, 3600, 3600]
    adm = with_admission(workload(), ADM, T0)
    ev = with_eviction(adm, "PodsReadyTimeout", "Exceeded the PodsReady timeout ns/w", T0 + 300,
                       requeue_state={"count": 1, "requeueAt": rfc3339(T0 + 360)})
    assert ev["status"]["requeueState"] == {"count": 1, "requeueAt": rfc3339(T0 + 360)}
    rel = with_released(ev, T0 + 301)
    assert backoff_held(rel)
    assert condition(rel, "Requeued")["reason"] == "PodsReadyTimeout"


@pytest.mark.parametrize(("status", "spec", "ready"), [
    ({"ready": 3, "active": 4}, {"parallelism": 4, "completions": 4}, False),
    ({"ready": 3, "succeeded": 1}, {"parallelism": 4, "completions": 4}, True),
    ({"ready": 2}, {"parallelism": 4, "completions": 2}, True),
    ({"ready": 1, "uncountedTerminatedPods": {"succeeded": ["u"]}}, {"parallelism": 2}, True),
    ({}, {"parallelism": 1}, False),
])
def test_job_pods_ready_as_kueue(status: dict, spec: dict, ready: bool) -> None:
    assert pods_ready({"spec": spec, "status": status}) is ready


def test_settings_default_and_recovery_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    # On by default with Kueue v0.19's values (apis/config/v1beta2 SetDefaults_Configuration).
    d = Settings().wait_for_pods_ready
    rs = d.requeuing_strategy
    assert (d.enable, d.timeout_seconds, d.recovery_seconds, d.block_admission) == (
        True, 1800, 1800, False)
    assert (rs.timestamp, rs.backoff_base_seconds, rs.backoff_max_seconds,
            rs.backoff_limit_count) == ("Eviction", 60, 3600, None)
    # Kueue v0.17.1's default (no waitForPodsReady section): off.
    monkeypatch.setenv("PYKUEUE_WAIT_FOR_PODS_READY__ENABLE", "false")
    assert Settings().wait_for_pods_ready.enable is False
    s = WaitForPodsReadySettings(enable=True, timeout_seconds=120)
    assert s.recovery_seconds == 120
    assert WaitForPodsReadySettings(timeout_seconds=120,
                                    recovery_timeout_seconds=30).recovery_seconds == 30
    with pytest.raises(ValueError, match="timestamp"):
        WaitForPodsReadySettings(requeuing_strategy={"timestamp": "Later"})


class _Flavors:
    """The one thing ``admitted_scheduling`` reads from a Context: the ResourceFlavors."""

    def store(self, key: str) -> list[dict]:
        assert key == "rf"
        return [{"metadata": {"name": "f"}, "spec": {"nodeLabels": {"pool": "a"}}}]


def _checked(*updates: dict) -> dict:
    w = with_admission(workload(), ADM, T0, ("prov",))
    w["status"]["admissionChecks"][0].update(state="Ready", podSetUpdates=list(updates))
    return w


def test_check_pod_set_updates_join_the_flavor_scheduling() -> None:
    tol = {"key": "prov", "operator": "Exists", "effect": "NoSchedule"}
    got = admitted_scheduling(_Flavors(), _checked(
        {"name": "main", "nodeSelector": {"zone": "z1"}, "tolerations": [tol]},
        {"name": "other", "nodeSelector": {"zone": "z9"}}))
    assert got == {"main": ({"pool": "a", "zone": "z1"}, [tol])}


@pytest.mark.parametrize(("update", "words"), [
    ({"name": "main", "nodeSelector": {"pool": "b"}}, "already has pool=a"),
    ({"name": "main", "labels": {"x": "y"}}, "labels (podSetUpdates): not supported"),
])
def test_check_pod_set_updates_that_cannot_be_honoured_fail_the_start(update: dict,
                                                                      words: str) -> None:
    with pytest.raises(StartError, match=re.escape(words)):
        admitted_scheduling(_Flavors(), _checked(update))


@pytest.mark.parametrize(("spec", "status", "ready"), [
    ({"replicatedJobs": [{"name": "w", "replicas": 2}, {"name": "d"}]},
     {"replicatedJobsStatus": [{"name": "w", "ready": 1, "succeeded": 1}, {"name": "d",
                                                                           "ready": 1}]}, True),
    ({"replicatedJobs": [{"name": "w", "replicas": 2}]},
     {"replicatedJobsStatus": [{"name": "w", "ready": 1, "active": 2}]}, False),
    ({"replicatedJobs": [{"name": "w", "replicas": 1}]}, {}, False),
])
def test_jobset_pods_ready_as_kueue(spec: dict, status: dict, ready: bool) -> None:
    assert jobset_pods_ready({"spec": spec, "status": status}) is ready


def test_the_conformance_suite_sets_wait_for_pods_ready_for_both_targets(tmp_path: Path) -> None:
    """Neither target runs on its default (pykueue's is on, Kueue v0.17.1's off): the suite
    gives pykueue the setting and Kueue's manager a configuration with or without the section
    (in v0.17.1's Configuration v1beta2 its presence turns waitForPodsReady on)."""
    import sys

    import yaml

    from tests.conformance import conftest as conformance
    from tests.labfixture import ROOT
    sys.path.insert(0, str(ROOT / "hack"))
    import kueue_lab

    shipped = tmp_path / "config" / "components" / "manager"
    shipped.mkdir(parents=True)
    (shipped / "controller_manager_config.yaml").write_text(yaml.safe_dump(
        {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
         "waitForPodsReady": {"timeout": "5m"}, "leaderElection": {}}))
    kl = kueue_lab.KueueLab(tmp_path / "state", 20640, tmp_path / "bin")
    assert "waitForPodsReady" not in kl.manager_config(tmp_path, tmp_path)
    assert kl.manager_config(tmp_path, tmp_path, pods_ready_timeout=20)["waitForPodsReady"] == {
        "timeout": "20s"}

    env, args = conformance.pods_ready_settings("pykueue")
    assert conformance.pods_ready_settings("kueue")[0] == {} and args == []
    if conformance.PODS_READY_TIMEOUT is None:
        assert env == {"PYKUEUE_WAIT_FOR_PODS_READY__ENABLE": "false"}
        assert conformance.pods_ready_settings("kueue")[1] == []
    else:
        assert env["PYKUEUE_WAIT_FOR_PODS_READY__ENABLE"] == "true"
        assert conformance.pods_ready_settings("kueue")[1][0] == "--wait-for-pods-ready-timeout"


def test_kueue_labs_give_the_manager_fair_sharing_and_the_interop_lab_every_option(
        tmp_path: Path) -> None:
    """hack/kueue_lab.py: ``fair_sharing`` (the strategies) becomes Kueue's ``fairSharing``
    section, absent otherwise (its presence turns fair sharing on); hack/multikueue_interop.py's
    lab takes every option ``start_manager`` passes (it broke when one was added)."""
    import sys

    import yaml

    from tests.labfixture import ROOT
    sys.path.insert(0, str(ROOT / "hack"))
    import kueue_lab
    import multikueue_interop

    shipped = tmp_path / "config" / "components" / "manager"
    shipped.mkdir(parents=True)
    (shipped / "controller_manager_config.yaml").write_text(yaml.safe_dump(
        {"kind": "Configuration", "leaderElection": {},
         "fairSharing": {"preemptionStrategies": ["LessThanOrEqualToFinalShare"]}}))
    kl = kueue_lab.KueueLab(tmp_path / "state", 20640, tmp_path / "bin")
    assert "fairSharing" not in kl.manager_config(tmp_path, tmp_path)
    assert kl.manager_config(tmp_path, tmp_path, fair_sharing=["LessThanInitialShare"])[
        "fairSharing"] == {"preemptionStrategies": ["LessThanInitialShare"]}

    mk = multikueue_interop.MultiKueueKueueLab.__new__(multikueue_interop.MultiKueueKueueLab)
    kueue_lab.KueueLab.__init__(mk, tmp_path / "state", 20640, tmp_path / "bin")
    mk.multikueue = {"gcInterval": "1m"}
    cfg = mk.manager_config(tmp_path, tmp_path, None, None, False, None)  # start_manager's
    assert cfg["multiKueue"] == {"gcInterval": "1m"} and cfg["leaderElection"]["leaderElect"] \
        is False

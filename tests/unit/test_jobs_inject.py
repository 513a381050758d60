"""Job start/stop injection and exact restore (app.integrations.batchjob and
app.integrations.podsets, KQ-21, Kueue 4.4/4.5)."""

from __future__ import annotations

import copy
import json

import pytest

from app.integrations.batchjob.job import (
    ORIGINAL_ANNOTATION,
    active_pods,
    injected_job,
    is_injected,
    job_finished,
    read_record,
    recorded_parallelism,
    restored_job,
)
from app.integrations.podsets import (
    InjectionConflict,
    merge_tolerations,
    podset_scheduling,
    toleration_identity,
)
from app.wire.names import PODSET_LABEL

GPU_TOL = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
T0_EQUAL = {"key": "t0", "operator": "Equal", "value": "v0", "effect": "NoSchedule"}
T0_NOOP = {"key": "t0", "value": "v0", "effect": "NoSchedule"}

GPU_FLAVOR = {"metadata": {"name": "gpu"},
              "spec": {"nodeLabels": {"pool": "gpu"}, "tolerations": [GPU_TOL, T0_NOOP]}}


def job(*, tolerations=None, node_selector=None, labels=None, suspend=True) -> dict:
    spec: dict = {"restartPolicy": "Never",
                  "containers": [{"name": "c", "image": "busybox",
                                  "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}
    if tolerations is not None:
        spec["tolerations"] = copy.deepcopy(tolerations)
    if node_selector is not None:
        spec["nodeSelector"] = dict(node_selector)
    tpl: dict = {"spec": spec}
    if labels is not None:
        tpl["metadata"] = {"labels": dict(labels)}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "ns", "resourceVersion": "7",
                         "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
            "spec": {"suspend": suspend, "parallelism": 1, "template": tpl}}


def start(j: dict) -> dict:
    sel, tols = podset_scheduling(["gpu"], {"gpu": GPU_FLAVOR})
    return injected_job(j, "main", sel, tols)


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        (T0_EQUAL, T0_NOOP, True),
        ({"key": "k", "operator": "", "value": "v"},
         {"key": "k", "operator": "Equal", "value": "v"},
         True),
        (GPU_TOL, {**GPU_TOL, "effect": "NoExecute"}, False),
        ({"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5},
         {"key": "k", "operator": "Exists", "effect": "NoExecute"}, False),
    ],
    ids=["empty-operator-equals-Equal", "explicit-empty-operator-equals-Equal",
         "different-effect-differs", "tolerationSeconds-counts"],
)
def test_toleration_identity(a: dict, b: dict, same: bool) -> None:
    assert (toleration_identity(a) == toleration_identity(b)) is same


def test_KQ_21_step1_injection_has_no_duplicate_tolerations_and_the_flavor_selector() -> None:
    j = job(tolerations=[GPU_TOL, T0_EQUAL], node_selector={})
    out = start(j)
    spec = out["spec"]["template"]["spec"]
    assert out["spec"]["suspend"] is False
    assert spec["nodeSelector"] == {"pool": "gpu"}
    assert spec["tolerations"] == [GPU_TOL, T0_EQUAL]
    assert out["spec"]["template"]["metadata"]["labels"] == {PODSET_LABEL: "main"}
    assert is_injected(out)


def test_KQ_21_step2_reinjecting_a_running_job_changes_nothing() -> None:
    first = start(job(tolerations=[GPU_TOL, T0_EQUAL], node_selector={}))
    again = start(first)
    assert again == first


def test_KQ_21_step3_eviction_restores_exactly_what_the_user_wrote() -> None:
    original = job(tolerations=[GPU_TOL, T0_EQUAL], node_selector={})
    stopped = restored_job(start(original))
    assert stopped["spec"]["suspend"] is True
    assert stopped["spec"]["template"] == original["spec"]["template"]
    assert stopped["spec"]["template"]["spec"]["tolerations"] == [GPU_TOL, T0_EQUAL]
    assert stopped["spec"]["template"]["spec"]["nodeSelector"] == {}
    assert ORIGINAL_ANNOTATION not in (stopped["metadata"].get("annotations") or {})
    assert stopped["metadata"] == original["metadata"]


def test_KQ_21_step4_job_without_tolerations_gets_the_flavor_tolerations() -> None:
    out = start(job())
    assert out["spec"]["template"]["spec"]["tolerations"] == [GPU_TOL, T0_NOOP]
    back = restored_job(out)
    assert "tolerations" not in back["spec"]["template"]["spec"]
    assert "nodeSelector" not in back["spec"]["template"]["spec"]
    assert "metadata" not in back["spec"]["template"] or \
        "labels" not in back["spec"]["template"]["metadata"]


@pytest.mark.parametrize(
    "original",
    [
        job(),
        job(node_selector={"zone": "a"}, labels={"app": "x", PODSET_LABEL: "old"}),
        job(tolerations=[T0_NOOP], labels={}),
        job(tolerations=[], node_selector={"pool": "gpu"}),
    ],
    ids=["bare-template", "user-selector-and-labels-incl-podset", "noop-toleration-empty-labels",
         "empty-tolerations-same-selector"],
)
def test_start_then_stop_round_trips_exactly(original: dict) -> None:
    started = start(original)
    record = json.loads(started["metadata"]["annotations"][ORIGINAL_ANNOTATION])
    assert set(record) <= {"nodeSelector", "tolerations", "labels"}
    assert restored_job(started) == original
    # Restarting injection on the record also round-trips (restart in the middle).
    assert restored_job(start(started)) == original


def test_user_selector_contradicting_the_flavor_is_a_conflict() -> None:
    with pytest.raises(InjectionConflict, match="pool"):
        start(job(node_selector={"pool": "cpu"}))


def test_two_flavors_disagreeing_on_a_label_is_a_conflict() -> None:
    other = {"spec": {"nodeLabels": {"pool": "other"}}}
    with pytest.raises(InjectionConflict, match="disagree"):
        podset_scheduling(["gpu", "other"], {"gpu": GPU_FLAVOR, "other": other})


def test_missing_flavor_contributes_nothing() -> None:
    assert podset_scheduling(["gone"], {}) == ({}, [])


def test_merge_tolerations_keeps_user_order_and_appends_new_ones() -> None:
    user = [T0_EQUAL]
    assert merge_tolerations(user, [GPU_TOL, T0_NOOP]) == [T0_EQUAL, GPU_TOL]


def test_restore_of_a_never_started_job_only_suspends() -> None:
    j = job(suspend=False, node_selector={"a": "b"})
    out = restored_job(j)
    assert out["spec"]["suspend"] is True
    assert out["spec"]["template"] == j["spec"]["template"]


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ([], (False, "", "")),
        ([{"type": "Complete", "status": "True", "message": "done"}], (True, "Succeeded", "done")),
        ([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
           "message": "Job has reached the specified backoff limit"}],
         (True, "Failed", "Job has reached the specified backoff limit")),
        ([{"type": "Failed", "status": "False"}], (False, "", "")),
        ([{"type": "Suspended", "status": "True"}], (False, "", "")),
    ],
    ids=["running", "complete", "failed", "failed-false", "suspended"],
)
def test_job_finished(conditions: list, expected: tuple) -> None:
    assert job_finished({"status": {"conditions": conditions}}) == expected


def test_active_pods_counts_terminating() -> None:
    assert active_pods({"status": {"active": 2, "terminating": 1}}) == 3
    assert active_pods({}) == 0


@pytest.mark.parametrize("ann", ["not json", "[1]", "5", '{"tolerations": 5}',
                                 '{"nodeSelector": []}', '{"parallelism": "9"}',
                                 '{"parallelism": -1}', '{"parallelism": true}'])
def test_a_record_the_tenant_garbled_is_ignored_not_raised(ann: str) -> None:
    """``ORIGINAL_ANNOTATION`` is on the tenant's own Job: stop, start and the partial
    admission's reader treat an unreadable record as none (a raise would keep an evicted
    Job's quota forever)."""
    j = job(tolerations=[{"key": "a", "operator": "Exists"}], suspend=False)
    j["metadata"]["annotations"] = {ORIGINAL_ANNOTATION: ann}
    assert read_record(ann) is None and recorded_parallelism(j) is None
    stopped = restored_job(j)
    assert stopped["spec"]["suspend"] is True
    assert ORIGINAL_ANNOTATION not in (stopped["metadata"].get("annotations") or {})
    assert stopped["spec"]["template"] == j["spec"]["template"]
    started = injected_job(j, "main", {}, [])
    assert started["spec"]["suspend"] is False

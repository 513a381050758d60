"""Pod groups (issue 17): one Workload per group, one podSet per role, only once the group
holds together; the webhook's group rules and role hash (no cluster)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.integrations import managed_kinds
from app.integrations.framework import GROUP_WORKLOAD_ANNOTATION
from app.integrations.pod.rules import (
    ADMISSION_GATE,
    GROUP_LABEL,
    ROLE_HASH_ANNOTATION,
    TOTAL_COUNT_ANNOTATION,
    mutate_pod,
    role_hash,
    validate_pod,
)
from app.integrations.podgroup.group import KIND
from app.wire.fields import WorkloadSpecError
from app.wire.workload import workload_from_object
from tests.unit.test_pod_integration import KINDS, POLICY, apply_patch

QUEUE = "kueue.x-k8s.io/queue-name"


def member(name: str, group: str = "g", total: str | None = "3", cpu: str = "1",
           queue: str = "lq", phase: str | None = None) -> dict[str, Any]:
    ann = {} if total is None else {TOTAL_COUNT_ANNOTATION: total}
    p = {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}",
                      "labels": {QUEUE: queue, GROUP_LABEL: group,
                                 "kueue.x-k8s.io/managed": "true"},
                      "annotations": ann},
         "spec": {"schedulingGates": [{"name": ADMISSION_GATE}],
                  "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}}
    p["metadata"]["annotations"][ROLE_HASH_ANNOTATION] = role_hash(p)
    if phase:
        p["status"] = {"phase": phase}
    return p


def group(*pods: dict) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": dict(pods[0]["metadata"]),
            "group": "g", "pods": list(pods)}


def compose(*pods: dict) -> dict[str, Any]:
    return KIND.workload_object(group(*pods), priority_classes={}, pod_priority_classes={})


def test_a_complete_group_is_one_workload_with_one_podset_per_role():
    body = compose(member("a"), member("b"), member("big", cpu="4"))
    assert body["metadata"]["name"] == "g"
    assert body["metadata"]["annotations"] == {GROUP_WORKLOAD_ANNOTATION: "true"}
    assert {r["name"] for r in body["metadata"]["ownerReferences"]} == {"a", "b", "big"}
    assert not any(r["controller"] for r in body["metadata"]["ownerReferences"])
    wl = workload_from_object(body)
    counts = sorted((ps.count, ps.requests["cpu"]) for ps in wl.pod_sets)
    assert counts == [(1, 4000), (2, 1000)]


@pytest.mark.parametrize(("pods", "fragment"), [
    pytest.param((member("a"), member("b")), "has 2 of 3 pods", id="incomplete: waits"),
    pytest.param((member("a"), member("b"), member("c"), member("d")),
                 "more than its total count 3", id="too many"),
    pytest.param((member("a"), member("b"), member("c", total="4")), "disagree",
                 id="counts disagree"),
    pytest.param((member("a"), member("b"), member("c", queue="other")), "disagree",
                 id="queues disagree"),
])
def test_a_group_that_does_not_hold_together_gets_no_workload_and_a_reason(pods, fragment):
    with pytest.raises(WorkloadSpecError, match=fragment):
        compose(*pods)


def test_finished_and_failed_members():
    g = group(member("a", phase="Succeeded"), member("b", phase="Succeeded"),
              member("c", phase="Succeeded"))
    assert KIND.finished(g)[:2] == (True, "Succeeded")
    running = group(member("a", phase="Succeeded"), member("b"), member("c"))
    assert KIND.finished(running) == (False, "", "")
    assert KIND.is_suspended(running)
    failed = copy.deepcopy(running)
    for p in failed["pods"]:
        p["spec"].pop("schedulingGates")
        p["status"] = {"phase": "Failed"}
    assert KIND.finished(failed)[:2] == (True, "Failed")


def test_the_webhook_computes_the_role_hash_and_keeps_the_group_for_life():
    raw = member("a")
    raw["metadata"]["annotations"][ROLE_HASH_ANNOTATION] = "forged"
    del raw["spec"]["schedulingGates"]
    out = apply_patch(raw, mutate_pod(raw, "CREATE", POLICY, KINDS))
    assert out["metadata"]["annotations"][ROLE_HASH_ANNOTATION] == role_hash(raw)
    moved = copy.deepcopy(out)
    moved["metadata"]["labels"][GROUP_LABEL] = "other"
    assert "is immutable" in " ".join(validate_pod(out, moved, "alice", POLICY, KINDS))
    no_count = member("a", total=None)
    assert any("required with the label" in e
               for e in validate_pod(None, no_count, "alice", POLICY, managed_kinds()))
    zero = member("a", total="0")
    assert any("from 1 to 100000" in e for e in validate_pod(None, zero, "alice", POLICY, KINDS))

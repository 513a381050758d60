"""Plain Pods (issue 17): the webhook rules that gate a queued Pod and keep the gate until
pykueue lifts it, and the Pod kind's Workload, start and finish (no cluster)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.integrations import managed_kinds
from app.integrations.pod.pod import KIND, injected_pod
from app.integrations.pod.webhook_rules import (
    ADMISSION_GATE,
    MANAGED_LABEL,
    mutate_pod,
    validate_pod,
)
from app.integrations.podsets import InjectionConflict
from app.integrations.webhook_toolkit import WebhookPolicy
from app.wire.workload import workload_from_object

CONTROLLER = "system:serviceaccount:pykueue-system:pykueue"
POLICY = WebhookPolicy(controller_usernames=frozenset({CONTROLLER}))
KINDS = managed_kinds()
QUEUE = "kueue.x-k8s.io/queue-name"


def pod(queue: str | None = "lq", *, gated: bool = False, owner: dict | None = None,
        **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "research", "uid": "u-p",
                            "labels": {**({QUEUE: queue} if queue is not None else {}), **labels}}
    if owner:
        meta["ownerReferences"] = [owner]
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {
        "requests": {"cpu": "1", "nvidia.com/gpu": "1"}}}]}
    if gated:
        spec["schedulingGates"] = [{"name": ADMISSION_GATE}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def apply_patch(obj: dict, patch: list[dict]) -> dict:
    out = copy.deepcopy(obj)
    for op in patch:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        target = out
        for p in parts[:-1]:
            target = target[p]
        if parts[-1] == "-":
            target.append(op["value"])
        else:
            target[parts[-1]] = op["value"]
    return out


def test_a_queued_pod_is_gated_and_marked_at_create_once():
    patch = mutate_pod(pod(), "CREATE", POLICY, KINDS)
    gated = apply_patch(pod(), patch)
    assert gated["spec"]["schedulingGates"] == [{"name": ADMISSION_GATE}]
    assert gated["metadata"]["labels"][MANAGED_LABEL] == "true"
    assert mutate_pod(gated, "CREATE", POLICY, KINDS) == []  # idempotent
    other = pod()
    other["spec"]["schedulingGates"] = [{"name": "example.com/other"}]
    both = apply_patch(other, mutate_pod(other, "CREATE", POLICY, KINDS))
    assert [g["name"] for g in both["spec"]["schedulingGates"]] == [
        "example.com/other", ADMISSION_GATE]


@pytest.mark.parametrize("p", [
    pytest.param(pod(None), id="no queue label"),
    pytest.param(pod(""), id="empty queue name is no queue"),
    pytest.param(pod(owner={"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "x",
                            "controller": True}), id="a Job's pod is the Job's business"),
])
def test_pods_that_are_not_plain_queued_pods_are_left_alone(p):
    assert mutate_pod(p, "CREATE", POLICY, KINDS) == []
    assert validate_pod(None, p, "alice", POLICY, KINDS) == []


def test_a_replicaset_pod_with_the_label_is_a_plain_pod():
    rs = pod(owner={"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "y",
                    "controller": True})
    assert mutate_pod(rs, "CREATE", POLICY, KINDS)


def test_only_pykueue_lifts_the_gate():
    gated = apply_patch(pod(), mutate_pod(pod(), "CREATE", POLICY, KINDS))
    ungated = copy.deepcopy(gated)
    del ungated["spec"]["schedulingGates"]
    errors = validate_pod(gated, ungated, "alice", POLICY, KINDS)
    assert errors and "only pykueue may remove" in errors[0] and "alice" in errors[0]
    assert validate_pod(gated, ungated, CONTROLLER, POLICY, KINDS) == []


def test_queue_label_rules_on_update():
    gated = apply_patch(pod(), mutate_pod(pod(), "CREATE", POLICY, KINDS))
    moved = copy.deepcopy(gated)
    moved["metadata"]["labels"][QUEUE] = "other"
    assert validate_pod(gated, moved, "alice", POLICY, KINDS) == []  # gated: may move
    removed = copy.deepcopy(gated)
    del removed["metadata"]["labels"][QUEUE]
    assert "cannot be removed from a gated Pod" in validate_pod(
        gated, removed, "alice", POLICY, KINDS)[0]
    running = pod(None)
    labelled = pod("lq")
    assert "cannot be added to a Pod that is not gated" in validate_pod(
        running, labelled, "alice", POLICY, KINDS)[0]
    admitted = copy.deepcopy(gated)
    del admitted["spec"]["schedulingGates"]
    moved = copy.deepcopy(admitted)
    moved["metadata"]["labels"][QUEUE] = "other"
    assert "immutable" in validate_pod(admitted, moved, "alice", POLICY, KINDS)[0]


def test_a_queued_pod_created_without_the_gate_is_refused_and_managed_is_true_only():
    errors = validate_pod(None, pod(), "alice", POLICY, KINDS)
    assert errors and "spec.schedulingGates" in errors[0] and "MutatingWebhook" in errors[0]
    bad = pod(gated=True, **{MANAGED_LABEL: "yes"})
    assert any("only allowed value is 'true'" in e for e in
               validate_pod(None, bad, "alice", POLICY, KINDS))


def test_the_pod_workload_is_named_as_kueue_and_owned_by_the_pod():
    p = pod(gated=True)
    body = KIND.workload_object(p, priority_classes={}, pod_priority_classes={})
    assert body["metadata"]["name"].startswith("pod-p-") and len(body["metadata"]["name"]) == 11
    (ref,) = body["metadata"]["ownerReferences"]
    assert (ref["apiVersion"], ref["kind"], ref["name"], ref["uid"]) == ("v1", "Pod", "p", "u-p")
    wl = workload_from_object(body)
    assert wl.queue_name == "lq" and wl.pod_sets[0].count == 1
    assert dict(wl.pod_sets[0].requests) == {"cpu": 1000, "nvidia.com/gpu": 1}
    assert "schedulingGates" not in body["spec"]["podSets"][0]["template"]["spec"]


def test_start_ungates_with_the_flavor_and_finish_reads_the_phase():
    p = pod(gated=True)
    started = injected_pod(p, "main", {"nvidia.com/gpu.product": "A100"},
                           [{"key": "nvidia.com/gpu", "operator": "Exists",
                             "effect": "NoSchedule"}], inject_node_selector=True)
    assert "schedulingGates" not in started["spec"]
    assert started["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "A100"}
    assert started["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "main"
    assert KIND.is_suspended(p) and not KIND.is_suspended(started)
    assert KIND.active_pods(p) == 0 and KIND.active_pods(started) == 1
    clash = copy.deepcopy(p)
    clash["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "L4"}
    with pytest.raises(InjectionConflict):
        injected_pod(clash, "main", {"nvidia.com/gpu.product": "A100"}, [],
                     inject_node_selector=True)
    done = {**started, "status": {"phase": "Succeeded"}}
    assert KIND.finished(done)[:2] == (True, "Succeeded") and KIND.active_pods(done) == 0
    assert KIND.finished({**started, "status": {"phase": "Failed", "message": "OOM"}}) == (
        True, "Failed", "OOM")

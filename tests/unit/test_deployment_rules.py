"""Deployments (issue 17): the queue goes onto the pod template so every pod is a queued
plain Pod; the queue name changes only while no replica is ready."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.integrations.deployment.webhook_rules import (
    SUSPENDING_PARENT,
    mutate_deployment,
    validate_deployment_update,
)
from app.integrations.webhook_toolkit import WebhookPolicy
from tests.unit.test_pod_integration import apply_patch

POLICY = WebhookPolicy(controller_usernames=frozenset({"pykueue"}))
QUEUE = "kueue.x-k8s.io/queue-name"


def dep(queue: str | None = "lq", template_labels: dict | None = None, ready: int = 0,
        **labels: str) -> dict[str, Any]:
    tpl: dict[str, Any] = {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    if template_labels is not None:
        tpl["metadata"] = {"labels": dict(template_labels)}
    meta = {"name": "d", "namespace": "inference",
            "labels": {**({QUEUE: queue} if queue is not None else {}), **labels}}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
            "spec": {"replicas": 3, "template": tpl}, "status": {"readyReplicas": ready}}


@pytest.mark.parametrize("template_labels", [None, {"app": "serve"},
                                             {"app": "serve", QUEUE: "other"}])
def test_the_queue_goes_onto_the_template_and_wins(template_labels):
    d = dep(template_labels=template_labels, **{"kueue.x-k8s.io/priority-class": "high"})
    out = apply_patch(d, mutate_deployment(d, "CREATE", POLICY))
    meta = out["spec"]["template"]["metadata"]
    assert meta["labels"][QUEUE] == "lq" and meta["labels"]["kueue.x-k8s.io/managed"] == "true"
    assert meta["labels"]["kueue.x-k8s.io/priority-class"] == "high"
    assert meta["annotations"] == {SUSPENDING_PARENT: "deployment"}
    if template_labels:
        assert meta["labels"]["app"] == "serve"
    assert mutate_deployment(out, "UPDATE", POLICY) == []  # idempotent


def test_an_unqueued_deployment_is_untouched():
    assert mutate_deployment(dep(None), "CREATE", POLICY) == []
    assert mutate_deployment(dep(""), "CREATE", POLICY) == []


def test_queue_name_changes_only_while_no_replica_is_ready():
    old = dep(ready=0)
    new = copy.deepcopy(old)
    new["metadata"]["labels"][QUEUE] = "other"
    assert validate_deployment_update(old, new, "alice", POLICY) == []
    busy = dep(ready=2)
    moved = copy.deepcopy(busy)
    moved["metadata"]["labels"][QUEUE] = "other"
    (err,) = validate_deployment_update(busy, moved, "alice", POLICY)
    assert "2 ready" in err and QUEUE in err
    removed = copy.deepcopy(old)
    del removed["metadata"]["labels"][QUEUE]
    assert "cannot be removed" in validate_deployment_update(old, removed, "alice", POLICY)[0]
    assert validate_deployment_update(busy, moved, "pykueue", POLICY) == []


# ---------------------------------------------------------------------------- StatefulSets


def sts(replicas: int, *, ready: int = 0, current: int = 0, queue: str | None = "lq") -> dict:
    d = dep(queue, ready=ready)
    d["kind"] = "StatefulSet"
    d["spec"]["replicas"] = replicas
    d["status"]["replicas"] = current
    return d


def test_a_statefulset_scales_only_through_zero():
    from app.integrations.statefulset.webhook_rules import validate_statefulset_update

    assert "scale it to 0 first" in validate_statefulset_update(sts(4), sts(6), "alice",
                                                                POLICY)[0]
    assert validate_statefulset_update(sts(4), sts(0), "alice", POLICY) == []
    assert "still in progress" in validate_statefulset_update(sts(0, current=2), sts(4),
                                                              "alice", POLICY)[0]
    assert validate_statefulset_update(sts(0), sts(4), "alice", POLICY) == []
    assert validate_statefulset_update(sts(4, queue=None), sts(6, queue=None), "alice",
                                       POLICY) == []


def test_a_statefulset_pod_joins_its_group_sized_by_replicas():
    from app.integrations import managed_kinds
    from app.integrations.pod.webhook_rules import mutate_pod, validate_pod
    from app.integrations.statefulset.webhook_rules import mutate_statefulset

    s = sts(4)
    s = apply_patch(s, mutate_statefulset(s, "CREATE", POLICY))
    tpl = s["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "d-0", "namespace": "inference", **copy.deepcopy(tpl["metadata"]),
                        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                                             "name": "d", "uid": "s", "controller": True}]},
           "spec": copy.deepcopy(tpl["spec"])}
    out = apply_patch(pod, mutate_pod(pod, "CREATE", POLICY, managed_kinds(),
                                      lambda _, ns, name: 4 if (ns, name) == ("inference", "d")
                                      else None))
    assert out["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] == "statefulset-d"
    ann = out["metadata"]["annotations"]
    assert ann["kueue.x-k8s.io/pod-group-total-count"] == "4"
    assert ann["kueue.x-k8s.io/pod-group-fast-admission"] == "true"
    assert ann["kueue.x-k8s.io/role-hash"]
    assert validate_pod(None, out, "system:serviceaccount:kube-system:statefulset-controller",
                        POLICY, managed_kinds()) == []
    unknown = apply_patch(pod, mutate_pod(pod, "CREATE", POLICY, managed_kinds(),
                                          lambda *_: None))
    assert "does not know StatefulSet" in " ".join(validate_pod(
        None, unknown, "system:serviceaccount:kube-system:statefulset-controller", POLICY,
        managed_kinds()))


def test_a_queued_statefulsets_pod_shape_cannot_change():
    from app.integrations.statefulset.webhook_rules import validate_statefulset_update

    old = sts(4)
    old["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"nvidia.com/gpu": "1"}}
    bigger = copy.deepcopy(old)
    bigger["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"][
        "nvidia.com/gpu"] = "2"
    assert "shape" in validate_statefulset_update(old, bigger, "alice", POLICY)[0]
    image = copy.deepcopy(old)
    image["spec"]["template"]["spec"]["containers"][0]["image"] = "other"
    assert validate_statefulset_update(old, image, "alice", POLICY) == []


@pytest.mark.parametrize("name", ["d", "s" * 51, "s" * 52, "a" * 41 + "." + "b" * 10,
                                  "a" * 40 + "-." + "b" * 10])
def test_a_statefulset_group_name_is_always_a_valid_label_value(name: str) -> None:
    """Kubernetes allows StatefulSet names up to 52 characters; ``statefulset-<name>`` would
    then exceed a label value's 63 and every pod of the StatefulSet would be refused."""
    import re

    from app.integrations.parents import group_name

    group = group_name(name)
    assert len(group) <= 63
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*",
                        group)
    assert group == f"statefulset-{name}" or len(f"statefulset-{name}") > 63
    assert group_name(name + "x") != group

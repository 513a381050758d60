"""LeaderWorkerSet's pure rules (``app.integrations.leaderworkerset.webhook_rules``): the queue
onto both templates, its pods' group membership through the Pod webhook, and the update rules
(queue name, templates' shape and ``size`` immutable while queued: Kueue #13279)."""

from __future__ import annotations

import copy
from typing import Any

from app.integrations import GROUP_PARENTS, managed_kinds
from app.integrations.leaderworkerset.webhook_rules import (
    FRAMEWORK,
    membership,
    mutate_leaderworkerset,
    pod_sets,
    validate_leaderworkerset_update,
)
from app.integrations.pod.webhook_rules import mutate_pod, validate_pod
from app.integrations.webhook_toolkit import WebhookPolicy
from tests.unit.test_pod_integration import apply_patch

POLICY = WebhookPolicy(controller_usernames=frozenset({"pykueue"}))
QUEUE = "kueue.x-k8s.io/queue-name"
STS_CONTROLLER = "system:serviceaccount:kube-system:statefulset-controller"


def lws(size: int = 3, *, leader: bool = True, gpus: str = "1") -> dict[str, Any]:
    tpl = {"spec": {"containers": [{"name": "c", "image": "x", "resources": {
        "requests": {"nvidia.com/gpu": gpus}}}]}}
    lwt: dict[str, Any] = {"size": size, "workerTemplate": copy.deepcopy(tpl)}
    if leader:
        lwt["leaderTemplate"] = copy.deepcopy(tpl)
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "serve", "namespace": "ml", "labels": {QUEUE: "lq"}},
            "spec": {"replicas": 2, "leaderWorkerTemplate": lwt}}


def pod_of(obj: dict[str, Any], template: str, name: str, *, worker: bool,
           index_label: bool = True) -> dict[str, Any]:
    """A pod as the LWS operator's StatefulSets create it from ``template``."""
    tpl = copy.deepcopy(obj["spec"]["leaderWorkerTemplate"][template])
    meta = tpl.get("metadata") or {}
    labels = {**meta.get("labels", {}), "leaderworkerset.sigs.k8s.io/name": "serve"}
    if index_label:
        labels["leaderworkerset.sigs.k8s.io/group-index"] = "1"
    ann = {**meta.get("annotations", {}), "leaderworkerset.sigs.k8s.io/size": "3"}
    if worker:
        ann["leaderworkerset.sigs.k8s.io/leader-name"] = "serve-1"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": "ml", "labels": labels, "annotations": ann,
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                             "name": "serve-1" if worker else "serve", "uid": "u",
                             "controller": True}]}, "spec": tpl["spec"]}


def test_a_queued_lws_puts_the_queue_and_its_podset_names_on_both_templates() -> None:
    out = apply_patch(lws(), mutate_leaderworkerset(lws(), "CREATE", POLICY))
    lwt = out["spec"]["leaderWorkerTemplate"]
    for template, role in (("leaderTemplate", "leader"), ("workerTemplate", "worker")):
        meta = lwt[template]["metadata"]
        assert meta["labels"][QUEUE] == "lq"
        assert meta["annotations"]["kueue.x-k8s.io/pod-suspending-parent"] == FRAMEWORK
        assert meta["annotations"]["kueue.x-k8s.io/role-hash"] == role
    assert mutate_leaderworkerset(out, "UPDATE", POLICY) == []  # idempotent
    alone = apply_patch(lws(leader=False), mutate_leaderworkerset(lws(leader=False), "CREATE",
                                                                  POLICY))
    assert alone["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"][
        "annotations"]["kueue.x-k8s.io/role-hash"] == "main"
    unqueued = lws()
    del unqueued["metadata"]["labels"]
    assert mutate_leaderworkerset(unqueued, "CREATE", POLICY) == []


def test_pod_sets_follow_kueue() -> None:
    assert pod_sets(lws(3)) == [("leader", 1), ("worker", 2)]
    assert pod_sets(lws(3, leader=False)) == [("main", 3)]


def test_its_pods_join_their_replica_groups_through_the_pod_webhook() -> None:
    obj = apply_patch(lws(), mutate_leaderworkerset(lws(), "CREATE", POLICY))
    # The leader before the operator's own webhook labelled it: the index from its ordinal.
    leader = pod_of(obj, "leaderTemplate", "serve-1", worker=False, index_label=False)
    worker = pod_of(obj, "workerTemplate", "serve-1-2", worker=True)
    for pod, role in ((leader, "leader"), (worker, "worker")):
        out = apply_patch(pod, mutate_pod(pod, "CREATE", POLICY, managed_kinds(),
                                          lambda *_: None, parents=GROUP_PARENTS))
        assert out["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] == \
            "leaderworkerset-serve-1"
        ann = out["metadata"]["annotations"]
        assert ann["kueue.x-k8s.io/pod-group-total-count"] == "3"
        assert ann["kueue.x-k8s.io/role-hash"] == role
        assert ann["kueue.x-k8s.io/pod-group-serving"] == "true"
        assert "kueue.x-k8s.io/pod-group-fast-admission" not in ann
        assert out["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/admission"}]
        assert validate_pod(None, out, STS_CONTROLLER, POLICY, managed_kinds(),
                            parents=GROUP_PARENTS) == []
    # Without the LeaderWorkerSet parent known, its serving annotation is refused.
    out = apply_patch(worker, mutate_pod(worker, "CREATE", POLICY, managed_kinds(),
                                         lambda *_: None, parents=GROUP_PARENTS))
    assert validate_pod(None, out, STS_CONTROLLER, POLICY, managed_kinds())


def test_a_pod_whose_group_does_not_read_is_left_to_be_refused() -> None:
    obj = apply_patch(lws(), mutate_leaderworkerset(lws(), "CREATE", POLICY))
    odd = pod_of(obj, "leaderTemplate", "other-name", worker=False, index_label=False)
    assert membership(odd, "serve") is None
    out = apply_patch(odd, mutate_pod(odd, "CREATE", POLICY, managed_kinds(),
                                      lambda *_: None, parents=GROUP_PARENTS))
    assert "does not know LeaderWorkerSet 'serve'" in " ".join(
        validate_pod(None, out, STS_CONTROLLER, POLICY, managed_kinds(), parents=GROUP_PARENTS))


def test_size_shape_and_queue_are_immutable_while_queued_replicas_are_not() -> None:
    old = apply_patch(lws(), mutate_leaderworkerset(lws(), "CREATE", POLICY))
    bigger = copy.deepcopy(old)
    bigger["spec"]["leaderWorkerTemplate"]["size"] = 4
    errors = validate_leaderworkerset_update(old, bigger, "alice", POLICY)
    assert any(e.startswith("spec.leaderWorkerTemplate.size") and "was 3, now 4" in e
               for e in errors)
    assert validate_leaderworkerset_update(old, bigger, "pykueue", POLICY) == []
    scaled = copy.deepcopy(old)
    scaled["spec"]["replicas"] = 5
    assert validate_leaderworkerset_update(old, scaled, "alice", POLICY) == []
    reshaped = copy.deepcopy(old)
    reshaped["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0][
        "resources"]["requests"]["nvidia.com/gpu"] = "2"
    assert any(e.startswith("spec.leaderWorkerTemplate.workerTemplate") for e in
               validate_leaderworkerset_update(old, reshaped, "alice", POLICY))
    moved = copy.deepcopy(old)
    moved["metadata"]["labels"][QUEUE] = "other"
    assert any("is immutable" in e for e in
               validate_leaderworkerset_update(old, moved, "alice", POLICY))


def test_a_priority_class_cannot_be_added_to_a_ready_lws_nor_removed() -> None:
    prio = "kueue.x-k8s.io/priority-class"
    old = apply_patch(lws(), mutate_leaderworkerset(lws(), "CREATE", POLICY))
    old["status"] = {"readyReplicas": 1}
    added = copy.deepcopy(old)
    added["metadata"]["labels"][prio] = "high"
    assert any("cannot be added to a LeaderWorkerSet" in e
               for e in validate_leaderworkerset_update(old, added, "alice", POLICY))
    old["status"] = {"readyReplicas": 0}
    assert validate_leaderworkerset_update(old, added, "alice", POLICY) == []
    assert any("cannot be removed" in e
               for e in validate_leaderworkerset_update(added, old, "alice", POLICY))

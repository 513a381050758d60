"""Pod groups (issue 17): one Workload per group, one podSet per role, only once the group
holds together; the webhook's group rules and role hash (no cluster)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.integrations import managed_kinds
from app.integrations.framework import GROUP_WORKLOAD_ANNOTATION
from app.integrations.pod.group import KIND
from app.integrations.pod.webhook_rules import (
    ADMISSION_GATE,
    GROUP_LABEL,
    ROLE_HASH_ANNOTATION,
    TOTAL_COUNT_ANNOTATION,
    mutate_pod,
    role_hash,
    validate_pod,
)
from app.wire.fields import WorkloadSpecError
from app.wire.names import SERVING_ANNOTATION
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


def test_a_serving_groups_workload_is_not_owned_by_its_members():
    """A LeaderWorkerSet's rollout replaces every member: owned by the originals, the
    Workload went with the last of them while the replacements, started on it, ran on."""
    pods = [member(n) for n in ("a", "b", "c")]
    for p in pods:
        p["metadata"]["annotations"][SERVING_ANNOTATION] = "true"
    assert "ownerReferences" not in compose(*pods)["metadata"]


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


# ---- the group index: a lookup costs the group's size, not the store's


class _CountingKeyFn:
    """``PodGroup.object_key`` counting its calls (each call reads one Pod)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, pod: dict) -> str | None:
        self.calls += 1
        return KIND.object_key(pod)


def _pods_store(n_groups: int, size: int):
    from app.kube.client import PODS
    from app.kube.informers import Store

    store = Store(PODS)
    store.replace_all(member(f"g{g}-{i}", group=f"g{g}", total=str(size))
                      for g in range(n_groups) for i in range(size))
    return store


def test_the_group_index_follows_every_store_change():
    from types import SimpleNamespace

    from app.integrations.pod.group import GROUP_INDEX

    store = _pods_store(3, 2)
    ctx = SimpleNamespace(store=lambda key: store)
    assert [p["metadata"]["name"] for p in KIND.lookup(ctx, "ns", "g1")["pods"]] == \
        ["g1-0", "g1-1"]
    # put (a watch event, or a writer's early put), a relabel, a remove, a relist.
    store.put(member("g1-2", group="g1"))
    moved = member("g1-0", group="g2")
    moved["metadata"]["resourceVersion"] = "9"
    store.put(moved)
    assert sorted(p["metadata"]["name"] for p in store.by_index(GROUP_INDEX, "ns/g1")) == \
        ["g1-1", "g1-2"]
    assert "g1-0" in [p["metadata"]["name"] for p in KIND.lookup(ctx, "ns", "g2")["pods"]]
    store.remove("ns/g1-1")
    store.remove("ns/g1-2")
    assert KIND.lookup(ctx, "ns", "g1") is None
    store.replace_all([member("x", group="g1")])
    assert [p["metadata"]["name"] for p in KIND.lookup(ctx, "ns", "g1")["pods"]] == ["x"]
    assert KIND.lookup(ctx, "ns", "g0") is None
    assert KIND.lookup(ctx, "other", "g1") is None


def test_a_group_lookup_reads_only_the_group_once_indexed():
    """10,000 queued Pods in 1,000 groups of 10: building the index reads each Pod once; then
    a lookup reads none (the store's index answers), and a put reads only the Pod put."""
    store = _pods_store(1000, 10)
    key_fn = _CountingKeyFn()
    store.index("counted", key_fn)
    assert key_fn.calls == 10_000
    key_fn.calls = 0
    for g in range(1000):
        assert len(store.by_index("counted", f"ns/g{g}")) == 10
    assert key_fn.calls == 0
    store.put(member("g5-10", group="g5"))
    assert key_fn.calls == 1 and len(store.by_index("counted", "ns/g5")) == 11


# ---- excess pods: Kueue deletes the ones beyond the count and admits the rest


def _aged(p: dict, ts: str, gated: bool = True) -> dict:
    p["metadata"]["creationTimestamp"] = ts
    if not gated:
        p["spec"]["schedulingGates"] = []
    return p


def test_without_a_workload_the_newest_gated_pods_beyond_the_count_are_excess():
    pods = [_aged(member("d"), "2026-01-01T00:00:04Z"),
            _aged(member("a"), "2026-01-01T00:00:01Z"),
            _aged(member("c"), "2026-01-01T00:00:01Z"),
            _aged(member("b"), "2026-01-01T00:00:09Z", gated=False),  # ungated: kept first
            _aged(member("f", phase="Failed"), "2026-01-01T00:00:00Z")]  # not runnable
    assert [p["metadata"]["name"] for p in KIND.excess(group(*pods), None)] == ["d"]
    # What is left composes (3 of 3) and is admitted as usual.
    kept = [p for p in pods if p["metadata"]["name"] != "d"]
    assert {r["name"] for r in compose(*kept)["metadata"]["ownerReferences"]} == {"a", "b", "c"}


def test_a_group_that_disagrees_is_not_trimmed_but_refused_whole():
    pods = [member("a"), member("b"), member("c"), member("d", total="4")]
    assert KIND.excess(group(*pods), None) == []
    with pytest.raises(WorkloadSpecError, match="disagree"):
        compose(*pods)


def test_with_a_workload_each_role_keeps_its_podset_count():
    pods = [_aged(member("a"), "2026-01-01T00:00:01Z"),
            _aged(member("b"), "2026-01-01T00:00:02Z"),
            _aged(member("c"), "2026-01-01T00:00:03Z"),
            _aged(member("big", cpu="4"), "2026-01-01T00:00:01Z")]
    wl = compose(*pods[:2], member("big", cpu="4"))  # small x 2, big x 1: "c" is extra
    assert [p["metadata"]["name"] for p in KIND.excess(group(*pods), wl)] == ["c"]
    # A member of a role the Workload lacks is not excess (it is the mismatch rule's).
    odd = member("odd", cpu="7")
    assert KIND.excess(group(*pods[:2], odd), wl) == []
    # Nor is anything when the Workload was built for another total count (stale).
    bigger = [member(n, total="5") for n in "abcde"]
    assert KIND.excess(group(*bigger), wl) == []


async def test_trim_deletes_the_excess_with_an_event_and_returns_the_rest():
    from types import SimpleNamespace

    deleted, events = [], []

    async def delete(resource, name, namespace, uid=None):
        deleted.append((namespace, name, uid))

    ctx = SimpleNamespace(client=SimpleNamespace(delete=delete), recorder=SimpleNamespace(
        emit=lambda obj, etype, reason, msg: events.append(
            (obj["metadata"]["name"], reason, msg))))
    pods = [_aged(member(n), f"2026-01-01T00:00:0{i}Z") for i, n in enumerate("abcd")]
    out = await KIND.trim(ctx, group(*pods), None)
    assert [p["metadata"]["name"] for p in out["pods"]] == ["a", "b", "c"]
    assert deleted == [("ns", "d", "u-d")]
    assert events == [("d", "ExcessPodDeleted", "Excess pod deleted")]


def test_the_group_index_follows_the_informers_watch_events():
    from types import SimpleNamespace

    from app.kube.client import PODS
    from app.kube.informers import Informer

    inf = Informer(None, PODS)  # type: ignore[arg-type]  # _apply never calls the client
    ctx = SimpleNamespace(store=lambda key: inf.store)
    assert KIND.lookup(ctx, "ns", "g") is None  # the index exists from here on
    for name in ("a", "b"):
        inf._apply({"type": "ADDED", "object": member(name)})
    assert [p["metadata"]["name"] for p in KIND.lookup(ctx, "ns", "g")["pods"]] == ["a", "b"]
    moved = member("a", group="h")
    inf._apply({"type": "MODIFIED", "object": moved})
    inf._apply({"type": "DELETED", "object": member("b")})
    assert KIND.lookup(ctx, "ns", "g") is None
    assert [p["metadata"]["name"] for p in KIND.lookup(ctx, "ns", "h")["pods"]] == ["a"]

"""A MultiKueue worker's copy evicted on its manager: Kueue v0.17.1's MultiKueue manager
sets condition ``DeactivationTarget=True`` (reason ``EvictedOnManagerCluster``) on the copy,
and the worker's workload controller turns it into ``spec.active: false``
(``workload_controller.go``: an active Workload with that condition), whose eviction stops
the worker's Job. pykueue's worker ignored a DeactivationTarget it had not written itself:
the copy kept running and Kueue's manager kept its preempted Workload's quota (found by
`make multikueue-interop`, direction b, preemption on the manager)."""

from __future__ import annotations

from types import SimpleNamespace

from app.kube.context import WL
from tests.unit.test_dra import _drain, _feed_loop


def _copy(active: bool = True, target: bool = True) -> dict:
    conds = [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
              "lastTransitionTime": "2026-12-04T14:00:00Z"},
             {"type": "Admitted", "status": "True", "reason": "Admitted",
              "lastTransitionTime": "2026-12-04T14:00:00Z"}]
    if target:
        conds.append({"type": "DeactivationTarget", "status": "True",
                      "reason": "EvictedOnManagerCluster",
                      "message": "Evicted on manager: Preempted to accommodate a workload",
                      "lastTransitionTime": "2026-12-04T14:00:05Z"})
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": "w", "namespace": "ns", "resourceVersion": "3",
                         "labels": {"kueue.x-k8s.io/multikueue-origin": "multikueue"}},
            "spec": {"queueName": "lq", "active": active, "podSets": [
                {"name": "main", "count": 1, "template": {"spec": {"containers": [
                    {"name": "c", "image": "i", "resources": {"requests": {"cpu": "1"}}}]}}}]},
            "status": {"conditions": conds, "admission": {
                "clusterQueue": "cq", "podSetAssignments": [
                    {"name": "main", "count": 1, "flavors": {"cpu": "f"},
                     "resourceUsage": {"cpu": "1"}}]}}}


async def test_a_deactivation_target_set_by_the_manager_deactivates_the_copy() -> None:
    loop, ctx, stores = _feed_loop()
    ctx.leader = SimpleNamespace(is_leader=True)
    obj = _copy()
    stores[WL].put(obj)
    loop.feed.on_workload("MODIFIED", obj, obj)
    await _drain(loop)
    assert ctx.client.writes, "nothing written"
    last = ctx.client.writes[-1]
    assert last["spec"]["active"] is False
    target = next(c for c in last["status"]["conditions"] if c["type"] == "DeactivationTarget")
    assert (target["status"], target["reason"]) == ("True", "EvictedOnManagerCluster")
    assert "Deactivated" in ctx.events


async def test_without_the_condition_nothing_is_deactivated() -> None:
    for obj in (_copy(target=False), _copy(active=False, target=False)):
        loop, ctx, stores = _feed_loop()
        ctx.leader = SimpleNamespace(is_leader=True)
        stores[WL].put(obj)
        loop.feed.on_workload("MODIFIED", obj, obj)
        await _drain(loop)
        assert not any(c["type"] == "DeactivationTarget" for w in ctx.client.writes
                       for c in (w.get("status") or {}).get("conditions") or [])
        if obj["spec"]["active"]:
            assert not ctx.client.writes  # an admitted, active copy: nothing to do

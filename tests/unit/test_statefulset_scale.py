"""StatefulSet ``scale`` subresource (issue 17): ``kubectl scale`` of a queued StatefulSet gets
the same replicas rule as an update of ``spec.replicas`` (Kueue v0.17.1's rule, which its own
webhook on ``statefulsets`` does not apply to the subresource); unqueued ones are untouched.
Through the HTTP webhook, with the store lookup stubbed."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.test_webhook import CONTROLLER, answer, make_app, post

VALIDATE_STATEFULSET_SCALE_PATH = "/validate-apps-v1-statefulset-scale"

QUEUE = "kueue.x-k8s.io/queue-name"


class Queued:
    """The webhook's ``admission_lookup``: the queued StatefulSets by ``namespace/name``."""

    def __init__(self, statefulsets: dict[str, dict[str, Any]] | None = None) -> None:
        self.statefulsets = statefulsets or {}

    def queued_statefulset(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.statefulsets.get(f"{namespace}/{name}")


def sts(queue: str = "lq") -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "ring", "namespace": "research", "labels": {QUEUE: queue}},
            "spec": {"replicas": 4}}


def scale(replicas: int | None, status: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {"apiVersion": "autoscaling/v1", "kind": "Scale",
                           "metadata": {"name": "ring", "namespace": "research"},
                           "spec": {}, "status": {"replicas": status}}
    if replicas is not None:
        out["spec"]["replicas"] = replicas  # the API omits a zero
    return out


def review(old: Any, new: Any, user: str = "alice", sub: str = "scale") -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u1", "operation": "UPDATE", "name": "ring",
                        "namespace": "research",
                        "kind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
                        "resource": {"group": "apps", "version": "v1",
                                     "resource": "statefulsets"},
                        "subResource": sub, "userInfo": {"username": user},
                        "oldObject": old, "object": new}}


@pytest.mark.parametrize(("old", "new", "allowed", "fragment"), [
    pytest.param(scale(4, 4), scale(3, 4), False, "scale it to 0 first, then to 3", id="4->3"),
    pytest.param(scale(4, 4), scale(6, 4), False, "group of 4 pods", id="4->6"),
    pytest.param(scale(4, 4), scale(None, 4), True, "", id="4->0"),
    pytest.param(scale(None, 0), scale(6, 0), True, "", id="0->6"),
    pytest.param(scale(None, 2), scale(6, 2), False, "scaling down is still in progress",
                 id="0->6 while 2 pods remain"),
    pytest.param(scale(4, 4), scale(4, 4), True, "", id="unchanged"),
])
async def test_a_queued_statefulset_scales_only_through_zero(old, new, allowed, fragment):
    app = make_app(admission=Queued({"research/ring": sts()}))
    sent = review(old, new)
    resp = answer(await post(app, VALIDATE_STATEFULSET_SCALE_PATH, sent), sent)
    assert resp["allowed"] is allowed, resp
    if not allowed:
        assert resp["status"]["code"] == 403 and fragment in resp["status"]["message"]


@pytest.mark.parametrize(("lookup", "user", "sub"), [
    pytest.param(Queued(), "alice", "scale", id="not queued (or not synced)"),
    pytest.param(Queued({"research/ring": sts(queue="")}), "alice", "scale", id="empty queue"),
    pytest.param(Queued({"research/ring": sts()}), CONTROLLER, "scale", id="pykueue itself"),
    pytest.param(Queued({"research/ring": sts()}), "alice", "status", id="another subresource"),
])
async def test_everything_else_scales_freely(lookup, user, sub):
    sent = review(scale(4, 4), scale(3, 4), user=user, sub=sub)
    resp = answer(await post(make_app(admission=lookup), VALIDATE_STATEFULSET_SCALE_PATH, sent),
                  sent)
    assert resp["allowed"] is True


async def test_an_unreadable_scale_is_a_400_naming_the_field():
    bad = scale(3, 4)
    bad["spec"]["replicas"] = "three"
    sent = review(scale(4, 4), bad)
    resp = answer(await post(make_app(admission=Queued({"research/ring": sts()})),
                             VALIDATE_STATEFULSET_SCALE_PATH, sent), sent)
    assert resp["allowed"] is False and resp["status"]["code"] == 400
    assert "request.object.spec.replicas" in resp["status"]["message"]

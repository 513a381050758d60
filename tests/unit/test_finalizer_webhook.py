"""The ``kueue.x-k8s.io/resource-in-use`` finalizer at CREATE (app.controllers.finalizers
``ROUTES``, as Kueue v0.17.1's mutating webhooks ``mclusterqueue``/``mresourceflavor``):
AdmissionReviews in and out over the real ASGI app (no cluster), and the controller fallback,
which must add the finalizer to an object the webhook never saw and write nothing for one it
did."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.config import IntegrationsSettings, Settings
from app.controllers.finalizers import FinalizerController, finalizer_json_patch
from app.kube.client import CLUSTER_QUEUES, RESOURCE_FLAVORS
from app.kube.context import CQ, RF
from app.kube.informers import Store
from app.main import create_app
from app.wire.names import RESOURCE_IN_USE_FINALIZER as IN_USE
from tests.unit.test_webhook import answer, decoded_patch, make_app, post

CQ_PATH = "/mutate-kueue-x-k8s-io-v1beta2-clusterqueue"
RF_PATH = "/mutate-kueue-x-k8s-io-v1beta2-resourceflavor"
KINDS = {CQ_PATH: ("ClusterQueue", "clusterqueues"), RF_PATH: ("ResourceFlavor", "resourceflavors")}


def queue_object(path: str, finalizers: Any = "absent", *, metadata: Any = "default") -> Any:
    """A ClusterQueue or ResourceFlavor (by ``path``) as kube-apiserver sends it at CREATE."""
    kind = KINDS[path][0]
    obj: dict[str, Any] = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind,
                           "spec": {} if kind == "ResourceFlavor" else {"namespaceSelector": {}}}
    if metadata == "default":
        metadata = {"name": "team-a"}
        if finalizers != "absent":
            metadata["finalizers"] = finalizers
    if metadata != "absent":
        obj["metadata"] = metadata
    return obj


def queue_review(path: str, obj: Any, operation: str = "CREATE") -> dict[str, Any]:
    kind, resource = KINDS[path]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "7d0e1f2a-0b1c-4d2e-8f3a-4b5c6d7e8f90",
        "kind": {"group": "kueue.x-k8s.io", "version": "v1beta2", "kind": kind},
        "resource": {"group": "kueue.x-k8s.io", "version": "v1beta2", "resource": resource},
        "name": "team-a", "namespace": "", "operation": operation,
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": obj, "oldObject": obj if operation == "UPDATE" else None}}


def apply_ops(document: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 ``add`` as the API server applies it (``-`` appends to an array); a missing
    parent fails (KeyError), as it would there."""
    out = copy.deepcopy(document)
    for op in patch:
        assert op["op"] == "add", op
        *parents, last = op["path"][1:].split("/")
        target: Any = out
        for token in parents:
            target = target[token]
        if isinstance(target, list):
            assert last == "-", op
            target.append(copy.deepcopy(op["value"]))
        else:
            target[last] = copy.deepcopy(op["value"])
    return out


both_paths = pytest.mark.parametrize("path", [CQ_PATH, RF_PATH], ids=["clusterqueue",
                                                                      "resourceflavor"])


@both_paths
@pytest.mark.parametrize(
    ("finalizers", "metadata", "stored"),
    [
        pytest.param("absent", "default", [IN_USE], id="no finalizers: the list is added"),
        pytest.param(None, "default", [IN_USE], id="finalizers null: the list is added"),
        pytest.param([], "default", [IN_USE], id="empty list: the finalizer appended"),
        pytest.param(["example.com/keep", "other.io/x"], "default",
                     ["example.com/keep", "other.io/x", IN_USE],
                     id="other finalizers are kept, in order"),
        pytest.param("absent", "absent", [IN_USE], id="no metadata: added whole"),
    ],
)
async def test_create_is_stored_with_the_finalizer(path: str, finalizers: Any, metadata: Any,
                                                   stored: list[str]) -> None:
    obj = queue_object(path, finalizers, metadata=metadata)
    sent = queue_review(path, obj)
    got = answer(await post(make_app(), path, sent), sent)
    assert got["allowed"] is True
    patched = apply_ops(obj, decoded_patch(got))
    assert patched["metadata"]["finalizers"] == stored
    # Idempotent: the stored object reviewed again needs no patch.
    assert finalizer_json_patch(patched, KINDS[path][0]) == []


@both_paths
@pytest.mark.parametrize("finalizers", [[IN_USE], ["example.com/keep", IN_USE]],
                         ids=["only it", "among others"])
async def test_create_already_carrying_the_finalizer_is_not_patched(path: str,
                                                                   finalizers: list[str]) -> None:
    sent = queue_review(path, queue_object(path, finalizers))
    got = answer(await post(make_app(), path, sent), sent)
    assert got["allowed"] is True
    assert "patch" not in got and "patchType" not in got


@both_paths
async def test_update_is_allowed_unchanged(path: str) -> None:
    """Kueue's mutating webhook is registered for CREATE only; any other operation that
    reaches the route passes untouched (removal is the controller's business)."""
    sent = queue_review(path, queue_object(path), operation="UPDATE")
    got = answer(await post(make_app(), path, sent), sent)
    assert got == {"uid": sent["request"]["uid"], "allowed": True}


async def test_a_review_of_another_kind_is_allowed_unchanged() -> None:
    sent = queue_review(CQ_PATH, queue_object(RF_PATH))
    sent["request"]["kind"]["kind"] = "ResourceFlavor"
    got = answer(await post(make_app(), CQ_PATH, sent), sent)
    assert got == {"uid": sent["request"]["uid"], "allowed": True}


async def test_served_whatever_integrations_frameworks_lists() -> None:
    """Not a job kind: no framework turns it off (Kueue always registers these webhooks)."""
    app = create_app(Settings(controllers_enabled=False,
                              integrations=IntegrationsSettings(frameworks=["batch/job"])))
    sent = queue_review(RF_PATH, queue_object(RF_PATH))
    got = answer(await post(app, RF_PATH, sent), sent)
    assert decoded_patch(got) == [{"op": "add", "path": "/metadata/finalizers",
                                   "value": [IN_USE]}]


@both_paths
@pytest.mark.parametrize(
    ("obj", "field", "problem"),
    [
        pytest.param("a string", "request.object", "object, got string", id="object not a map"),
        pytest.param({"metadata": ["x"]}, "request.object.metadata",
                     "expected an object, got array", id="metadata not a map"),
        pytest.param({"metadata": {"name": "a", "finalizers": IN_USE}},
                     "request.object.metadata.finalizers", "expected an array, got string",
                     id="finalizers a string"),
        pytest.param({"metadata": {"name": "a", "finalizers": ["ok", 3]}},
                     "request.object.metadata.finalizers[1]", "expected a string, got number",
                     id="a finalizer not a string"),
    ],
)
async def test_an_unreadable_object_is_refused_with_a_400_naming_the_field(
        path: str, obj: Any, field: str, problem: str) -> None:
    sent = queue_review(path, obj)
    got = answer(await post(make_app(), path, sent), sent)
    assert got["allowed"] is False
    assert got["status"]["code"] == 400 and got["status"]["reason"] == "BadRequest"
    assert got["status"]["message"].startswith(f"cannot read the object: {field}: ")
    assert problem in got["status"]["message"]


@both_paths
@pytest.mark.parametrize(
    ("body", "error"),
    [
        pytest.param(b"{not json", "request body is not JSON", id="not JSON"),
        pytest.param(b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}',
                     "request is missing", id="no request"),
        pytest.param(b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", '
                     b'"request": {"operation": "CREATE"}}',
                     "not an admission.k8s.io/v1 AdmissionReview", id="no uid"),
    ],
)
async def test_a_malformed_review_is_an_http_400(path: str, body: bytes, error: str) -> None:
    import httpx

    transport = httpx.ASGITransport(app=make_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://webhook") as c:
        r = await c.post(path, content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    assert error in r.json()["error"]


# ---------------------------------------------------------------------------- the fallback


class _Client:
    def __init__(self) -> None:
        self.patches: list[tuple[str, str, dict[str, Any]]] = []

    async def patch(self, res: Any, name: str, body: dict[str, Any], content_type: str = "",
                    **_: Any) -> dict[str, Any]:
        self.patches.append((res.plural, name, body))
        return {"metadata": {"name": name, "resourceVersion": "2",
                             "finalizers": body["metadata"]["finalizers"]}}


class _Ctx:
    """What ``FinalizerController.reconcile`` reads: the two stores and the client."""

    def __init__(self, *objs: tuple[str, dict[str, Any]]) -> None:
        self.client = _Client()
        self.stores = {CQ: Store(CLUSTER_QUEUES), RF: Store(RESOURCE_FLAVORS)}
        for key, obj in objs:
            self.stores[key].put(obj)

    def store(self, key: str) -> Store:
        return self.stores[key]


def _stored(name: str, finalizers: list[str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "resourceVersion": "1"}
    if finalizers is not None:
        meta["finalizers"] = finalizers
    return {"metadata": meta, "spec": {}}


async def test_the_controller_adds_what_the_webhook_did_not_and_nothing_else() -> None:
    """Created while the webhook was not registered: one merge patch each, keeping the other
    finalizers; came through the webhook: no write."""
    webhooked = apply_ops(queue_object(CQ_PATH), finalizer_json_patch(
        queue_object(CQ_PATH), "ClusterQueue"))
    webhooked["metadata"]["resourceVersion"] = "1"
    webhooked["metadata"]["name"] = "via-webhook"
    ctx = _Ctx((CQ, webhooked), (CQ, _stored("before-install", ["example.com/keep"])),
               (RF, _stored("rf-before")), (RF, _stored("rf-via-webhook", [IN_USE])))
    controller = FinalizerController(ctx, lambda cq: 0)  # type: ignore[arg-type]
    for key in ("cq:via-webhook", "rf:rf-via-webhook"):
        assert await controller.reconcile(key) is None
    assert ctx.client.patches == []
    for key in ("cq:before-install", "rf:rf-before"):
        assert await controller.reconcile(key) is None
    assert ctx.client.patches == [
        ("clusterqueues", "before-install",
         {"metadata": {"finalizers": ["example.com/keep", IN_USE], "resourceVersion": "1"}}),
        ("resourceflavors", "rf-before",
         {"metadata": {"finalizers": [IN_USE], "resourceVersion": "1"}}),
    ]

"""Kueue's visibility API (app.api.visibility) over the status scenario's core
(tests/status_scenario.py), in process: the exact ``PendingWorkloadsSummary`` JSON, ``limit``
/ ``offset``, discovery, and request-header authentication (front-proxy certificate, allowed
names, X-Remote-* headers) with a SubjectAccessReview, all answered as Kubernetes Status.

research-cq's pending Workloads, in order: research/eval-1 (priority 10, lq-research),
research/train-4 (lq-research), team-b/probe (lq-b)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.datastructures import Headers

from app.api.access import Grant, StaticAccessReviewer, UserInfo
from app.api.requestheader import RequestHeaderAuth
from app.api.status import rfc3339
from app.api.visibility import Page, StatusError
from app.config import LeaderElectionSettings, Settings, VisibilitySettings
from app.main import create_app
from certs.pki import ensure_ca, ensure_leaf
from tests.status_scenario import CREATED, build_cluster

G = "/apis/visibility.kueue.x-k8s.io"
CQ_PATH = f"{G}/v1beta2/clusterqueues/research-cq/pendingworkloads"
LQ_PATH = f"{G}/v1beta2/namespaces/research/localqueues/lq-research/pendingworkloads"
PROXY = {"X-Remote-User": "admin", "X-Remote-Group": "system:masters"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, str]:
    """A front-proxy CA with kube-apiserver's client certificate, and another CA's."""
    d = tmp_path_factory.mktemp("front-proxy")
    ensure_ca(d, common_name="front-proxy-ca")
    ensure_leaf(d, "proxy", "front-proxy-client", server=False)
    ensure_leaf(d, "stranger", "someone-else", server=False)
    o = tmp_path_factory.mktemp("other")
    ensure_ca(o, common_name="other-ca")
    ensure_leaf(o, "proxy", "front-proxy-client", server=False)
    return {"ca": (d / "ca.crt").read_text(), "proxy": (d / "proxy.crt").read_text(),
            "stranger": (d / "stranger.crt").read_text(),
            "other": (o / "proxy.crt").read_text(), "dir": str(d)}


def reviewer() -> StaticAccessReviewer:
    return StaticAccessReviewer({}, [
        Grant("group:system:masters", ("*",), "*", ("*",)),
        Grant("tenant", ("get",), "visibility.kueue.x-k8s.io",
              ("localqueues/pendingworkloads",), namespace="research"),
        Grant("group:cq-viewers", ("get",), "visibility.kueue.x-k8s.io",
              ("clusterqueues/pendingworkloads",)),
    ])


class WithCert:
    """ASGI wrapper: the TLS extension ``app.serving`` fills, with ``cert`` as the verified
    client certificate (None: no certificate)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.cert: str | None = None

    async def __call__(self, scope, receive, send) -> None:
        scope.setdefault("extensions", {})["tls"] = {
            "client_cert_chain": [self.cert] if self.cert else []}
        await self.app(scope, receive, send)


def make_app(pki: dict[str, str], **visibility: Any):
    settings = Settings(controllers_enabled=False,
                        leader_election=LeaderElectionSettings(enabled=False),
                        visibility=VisibilitySettings(
                            requestheader_client_ca_file=Path(pki["dir"]) / "ca.crt",
                            **visibility))
    main = create_app(settings)
    main.state.cluster = build_cluster()
    main.state.access_reviewer = reviewer()
    return main.state.visibility_app if settings.visibility.served else main


@pytest.fixture
async def client(pki) -> AsyncIterator[httpx.AsyncClient]:
    wrapper = WithCert(make_app(pki, requestheader_allowed_names=["front-proxy-client"]))
    wrapper.cert = pki["proxy"]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=wrapper),
                                 base_url="http://test") as c:
        c.wrapper = wrapper  # type: ignore[attr-defined]
        yield c


async def get(c: httpx.AsyncClient, path: str, headers: dict | None = None,
              **params: Any) -> httpx.Response:
    return await c.get(path, headers=PROXY if headers is None else headers, params=params)


def brief(body: dict) -> list[tuple[str, int, int]]:
    return [(f'{i["metadata"]["namespace"]}/{i["metadata"]["name"]}',
             i["positionInClusterQueue"], i["positionInLocalQueue"]) for i in body["items"]]


# ------------------------------------------------------------------------------ shape


async def test_cluster_queue_summary_is_kueues_shape(client) -> None:
    r = await get(client, CQ_PATH)
    assert r.status_code == 200, r.text
    body = r.json()
    assert list(body) == ["kind", "apiVersion", "metadata", "items"]
    assert body["kind"] == "PendingWorkloadsSummary"
    assert body["apiVersion"] == "visibility.kueue.x-k8s.io/v1beta2"
    assert body["metadata"] == {}
    assert body["items"][0] == {
        "metadata": {"name": "eval-1", "namespace": "research",
                     "creationTimestamp": rfc3339(CREATED["research/eval-1"])},
        "priority": 10, "localQueueName": "lq-research",
        "positionInClusterQueue": 0, "positionInLocalQueue": 0}
    # Positions in a LocalQueue count per namespace and name.
    assert brief(body) == [("research/eval-1", 0, 0), ("research/train-4", 1, 1),
                           ("team-b/probe", 2, 0)]


async def test_v1beta1_answers_the_same_items(client) -> None:
    v2 = (await get(client, CQ_PATH)).json()
    v1 = (await get(client, CQ_PATH.replace("v1beta2", "v1beta1"))).json()
    assert v1["apiVersion"] == "visibility.kueue.x-k8s.io/v1beta1"
    assert v1["items"] == v2["items"]


async def test_owner_references_and_creation_come_from_the_stored_workload(client) -> None:
    stored = {"research/eval-1": {"metadata": {
        "creationTimestamp": "2026-01-02T03:04:05Z", "ownerReferences": [{
            "apiVersion": "batch/v1", "kind": "Job", "name": "eval", "uid": "u-1",
            "controller": True, "blockOwnerDeletion": True}]}}}
    client.wrapper.app.state.workload_store = stored
    item = (await get(client, LQ_PATH)).json()["items"][0]
    assert item["metadata"] == {
        "name": "eval-1", "namespace": "research", "creationTimestamp": "2026-01-02T03:04:05Z",
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "eval",
                             "uid": "u-1"}]}


# ------------------------------------------------------------------------------ paging


async def test_cluster_queue_offset_and_limit(client) -> None:
    body = (await get(client, CQ_PATH, offset=1, limit=1)).json()
    assert brief(body) == [("research/train-4", 1, 1)]
    body = (await get(client, CQ_PATH, offset=2)).json()
    assert brief(body) == [("team-b/probe", 2, 0)]
    assert (await get(client, CQ_PATH, offset=3)).json()["items"] == []
    assert len((await get(client, CQ_PATH, limit=0)).json()["items"]) == 3  # 0: the default


async def test_local_queue_lists_only_its_own_workloads_and_pages(client) -> None:
    body = (await get(client, LQ_PATH)).json()
    assert brief(body) == [("research/eval-1", 0, 0), ("research/train-4", 1, 1)]
    body = (await get(client, LQ_PATH, offset=1, limit=5)).json()
    assert brief(body) == [("research/train-4", 1, 1)]
    other = f"{G}/v1beta2/namespaces/team-b/localqueues/lq-b/pendingworkloads"
    assert brief((await get(client, other)).json()) == [("team-b/probe", 2, 0)]


@pytest.mark.parametrize("query", [{"limit": "x"}, {"limit": "-1"}, {"offset": "-3"},
                                   {"offset": "1.5"}, {"limit": "1_000"}, {"limit": " 5"},
                                   {"offset": str(2**63)}])
def test_page_refuses_what_is_not_a_non_negative_integer(query) -> None:
    with pytest.raises(StatusError) as e:
        Page.parse(query)
    assert e.value.code == 400


def test_page_defaults() -> None:
    assert Page.parse({}) == Page(0, 1000)
    assert Page.parse({"limit": "0", "offset": "7"}) == Page(7, 1000)


async def test_bad_limit_is_a_400_status(client) -> None:
    r = await get(client, CQ_PATH, limit="many")
    assert r.status_code == 400
    assert (r.json()["kind"], r.json()["reason"]) == ("Status", "BadRequest")


async def test_unknown_queues_are_404_status(client) -> None:
    r = await get(client, f"{G}/v1beta2/clusterqueues/nope/pendingworkloads")
    assert r.status_code == 404
    assert r.json() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'clusterqueue.visibility.kueue.x-k8s.io "nope" not found',
        "reason": "NotFound", "details": {"name": "nope", "group": "visibility.kueue.x-k8s.io",
                                          "kind": "clusterqueue"}, "code": 404}
    r = await get(client, f"{G}/v1beta2/namespaces/research/localqueues/x/pendingworkloads")
    assert (r.status_code, r.json()["details"]["kind"]) == (404, "localqueue")
    r = await get(client, CQ_PATH.replace("v1beta2", "v1"))
    assert r.status_code == 404


# ------------------------------------------------------------------------------ discovery


async def test_discovery_documents(client) -> None:
    r = await get(client, f"{G}/v1beta2", headers={"X-Remote-User": "system:kube-aggregator"})
    assert r.status_code == 200
    body = r.json()
    assert (body["kind"], body["groupVersion"]) == ("APIResourceList",
                                                    "visibility.kueue.x-k8s.io/v1beta2")
    assert {(x["name"], x["namespaced"], tuple(x["verbs"])) for x in body["resources"]} == {
        ("clusterqueues", False, ()), ("clusterqueues/pendingworkloads", False, ("get",)),
        ("localqueues", True, ()), ("localqueues/pendingworkloads", True, ("get",))}
    group = (await get(client, G)).json()
    assert group["preferredVersion"]["version"] == "v1beta2"
    assert [v["version"] for v in group["versions"]] == ["v1beta2", "v1beta1"]
    assert (await get(client, "/openapi/v2")).json()["swagger"] == "2.0"
    assert (await get(client, "/openapi/v3")).json() == {"paths": {}}


@pytest.mark.parametrize("off", [{"enabled": False}, {"port": 0}])
async def test_disabled_serves_nothing(pki, off) -> None:
    main = make_app(pki, **off)
    assert main.state.visibility_app is None
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=WithCert(main)),
                                 base_url="http://test") as c:
        assert (await c.get(CQ_PATH, headers=PROXY)).status_code == 404


async def test_the_main_application_never_serves_the_visibility_paths(pki) -> None:
    """The paths live on the visibility listener's application only, which shares the main
    application's state (the core, the reviewer)."""
    vis = make_app(pki)
    settings = Settings(controllers_enabled=False,
                        leader_election=LeaderElectionSettings(enabled=False),
                        visibility=VisibilitySettings(
                            requestheader_client_ca_file=Path(pki["dir"]) / "ca.crt"))
    main = create_app(settings)
    assert main.state.visibility_app.state is main.state
    wrapper = WithCert(main)
    wrapper.cert = pki["proxy"]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=wrapper),
                                 base_url="http://test") as c:
        for path in (CQ_PATH, LQ_PATH, G, f"{G}/v1beta2", "/openapi/v2", "/openapi/v3"):
            assert (await c.get(path, headers=PROXY)).status_code == 404, path
    assert vis.state.visibility_auth is not None


# ------------------------------------------------------------------------------ authentication


@pytest.mark.parametrize("cert, headers, why", [
    (None, PROXY, "no client certificate"),
    ("other", PROXY, "not issued by the request-header"),
    ("stranger", PROXY, '"someone-else" is not in the request-header allowed names'),
    ("proxy", {"X-Remote-Group": "system:masters"}, "no user in X-Remote-User"),
])
async def test_only_the_front_proxy_with_a_user_is_answered(client, pki, cert, headers,
                                                            why) -> None:
    client.wrapper.cert = pki[cert] if cert else None
    for path in (CQ_PATH, f"{G}/v1beta2", "/openapi/v2"):
        r = await get(client, path, headers)
        assert r.status_code == 401, (path, r.text)
        body = r.json()
        assert (body["kind"], body["reason"], body["code"]) == ("Status", "Unauthorized", 401)
        assert why in body["message"]


async def test_any_common_name_when_no_allowed_names(pki) -> None:
    wrapper = WithCert(make_app(pki))
    wrapper.cert = pki["stranger"]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=wrapper),
                                 base_url="http://test") as c:
        assert (await c.get(CQ_PATH, headers=PROXY)).status_code == 200


async def test_the_proxied_user_is_authorized_with_a_subject_access_review(client) -> None:
    tenant = {"X-Remote-User": "tenant"}
    assert (await get(client, LQ_PATH, tenant)).status_code == 200
    r = await get(client, f"{G}/v1beta2/namespaces/team-b/localqueues/lq-b/pendingworkloads",
                  tenant)
    assert r.status_code == 403
    assert r.json()["message"] == (
        'localqueues.visibility.kueue.x-k8s.io "lq-b" is forbidden: User "tenant" cannot get '
        'resource "localqueues/pendingworkloads" in API group "visibility.kueue.x-k8s.io" in '
        'the namespace "team-b"')
    r = await get(client, CQ_PATH, tenant)
    assert (r.status_code, r.json()["reason"]) == (403, "Forbidden")
    assert "at the cluster scope" in r.json()["message"]
    # Groups (every value of the header) reach the review.
    viewer = [("X-Remote-User", "ann"), ("X-Remote-Group", "a"),
              ("X-Remote-Group", "cq-viewers")]
    r = await client.get(CQ_PATH, headers=viewer)
    assert r.status_code == 200, r.text


def test_request_header_auth_reads_users_groups_and_extra(pki) -> None:
    auth = RequestHeaderAuth.from_pem(pki["ca"], allowed_names=["front-proxy-client"])
    headers = Headers(raw=[(k.lower().encode(), v.encode()) for k, v in (
        ("X-Remote-User", "ann"), ("X-Remote-Group", "g1"), ("X-Remote-Group", "g2"),
        ("X-Remote-Extra-Scopes", "a"), ("X-Remote-Extra-Scopes", "b"),
        ("X-Remote-Extra-Example.com%2fteam", "t"))])
    user = auth.authenticate([pki["proxy"]], headers)
    assert user == UserInfo("ann", "", ("g1", "g2"),
                            {"scopes": ("a", "b"), "example.com/team": ("t",)})


def test_request_header_auth_from_the_configmap(pki) -> None:
    auth = RequestHeaderAuth.from_configmap({
        "requestheader-client-ca-file": pki["ca"],
        "requestheader-allowed-names": '["front-proxy-client"]',
        "requestheader-username-headers": '["X-Remote-User"]',
        "requestheader-group-headers": '["X-Remote-Group"]',
        "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]'})
    assert auth is not None
    assert auth.allowed_names == ("front-proxy-client",)
    assert auth.issued(pki["proxy"]) is not None and auth.issued(pki["other"]) is None
    assert RequestHeaderAuth.from_configmap({"client-ca-file": pki["ca"]}) is None

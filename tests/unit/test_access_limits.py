"""Fake bearer tokens must not cost pykueue its leadership (issue 14 item 3): reviews have a
client and a budget of their own, each client address its own limit (429), rejected tokens a
cache of their own; the Lease is renewed on a client no other traffic can queue."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from aiohttp import web

from app.api.access import (
    CachedAccessReviewer,
    ClientLimiter,
    StaticAccessReviewer,
    TooManyReviews,
    UserInfo,
)
from app.config import ClientSettings, LeaderElectionSettings, Settings
from app.kube.client import KubeClient, TokenBucket
from app.kube.leader import LeaderElector
from app.main import create_app
from tests.status_scenario import build_cluster, reviewer
from tests.unit.test_status_api import CQ, Clock


async def test_random_tokens_do_not_evict_real_users_and_rejections_expire_sooner() -> None:
    inner, clock = StaticAccessReviewer({"good": UserInfo("alice")}), Clock()
    cached = CachedAccessReviewer(inner, ttl=10.0, negative_ttl=2.0, max_entries=100,
                                  clock=clock)
    assert (await cached.authenticate("good")).user == UserInfo("alice")
    for _ in range(3_000):
        assert (await cached.authenticate(secrets.token_hex(16))).user is None
    calls = inner.authentications
    assert (await cached.authenticate("good")).user == UserInfo("alice")
    assert inner.authentications == calls  # still cached: the flood filled the other cache
    bad = secrets.token_hex(16)
    await cached.authenticate(bad)
    await cached.authenticate(bad)
    assert inner.authentications == calls + 1  # a rejection is cached ...
    clock.t = 2.0
    await cached.authenticate(bad)
    assert inner.authentications == calls + 2  # ... for negative_ttl only


def test_client_limiter_refills_at_its_rate_per_client() -> None:
    clock = Clock()
    limiter = ClientLimiter(2.0, 3, max_clients=2, clock=clock)
    for _ in range(3):
        limiter.take("10.0.0.1")
    with pytest.raises(TooManyReviews) as err:
        limiter.take("10.0.0.1")
    assert err.value.retry_after == pytest.approx(0.5)
    limiter.take("10.0.0.2")  # another client has its own budget
    clock.t = 0.5
    limiter.take("10.0.0.1")  # refilled one token at 2 per second


async def test_a_token_flood_from_one_address_gets_429_and_others_are_served() -> None:
    inner = reviewer()
    app = create_app(Settings(controllers_enabled=False))
    app.state.cluster = build_cluster()
    # One token per 100 s: no refill while 50 requests are answered on a loaded machine.
    app.state.access_reviewer = CachedAccessReviewer(inner, limiter=ClientLimiter(0.01, 5))

    def client(ip: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=app, client=(ip, 5555)),
                                 base_url="http://test")

    async with client("10.1.1.1") as attacker, client("10.2.2.2") as user:
        assert (await user.get(CQ, headers={"Authorization": "Bearer admin-token"})
                ).status_code == 200
        codes = [(await attacker.get(CQ, headers={"Authorization": f"Bearer {i}"})).status_code
                 for i in range(50)]
        assert codes[:5] == [401] * 5 and set(codes[5:]) == {429}
        r = await attacker.get(CQ, headers={"Authorization": "Bearer fresh"})
        assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1
        assert "too many requests from 10.1.1.1" in r.json()["detail"]
        before = inner.authentications
        assert (await user.get(CQ, headers={"Authorization": "Bearer admin-token"})
                ).status_code == 200
    assert before == 6  # 1 for the user + 5 for the attacker: the other 45 never left pykueue


class StubManager:
    """app.main's view of the Manager, with a real KubeClient whose bucket has 5 tokens and
    refills once in 1,000 s (nothing listens at its address)."""

    def __init__(self, settings: Settings, **kwargs: Any) -> None:
        self.client = _client("https://127.0.0.1:1", qps=0.001, burst=5)
        self.ctx = type("Ctx", (), {"client": self.client,
                                    "store": staticmethod(lambda key: None)})()
        self.cluster = build_cluster()
        self.admission_lookup = self.extender_state = None
        self.is_leader = False

    async def start(self) -> None: ...

    async def stop(self) -> None:
        await self.client.close()

    def ready(self) -> tuple[bool, str]:
        return True, "synced"


def _client(host: str, qps: float, burst: int) -> KubeClient:
    from kubernetes_asyncio import client as k8s

    from app.kube.client import RateLimitedApiClient

    cfg = k8s.Configuration()
    cfg.host = host
    settings = ClientSettings(qps=qps, burst=burst, request_timeout_seconds=2.0)
    return KubeClient(RateLimitedApiClient(cfg, TokenBucket(qps, burst), 2.0), settings)


async def test_access_reviews_do_not_spend_the_controllers_rate_limit(monkeypatch) -> None:
    import app.controllers.manager as manager_module

    monkeypatch.setattr(manager_module, "Manager", StubManager)
    app = create_app(Settings())
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://test") as c:
            for i in range(10):
                # Bounded: before issue 14 the 6th review waited ~1,000 s for a token.
                r = await asyncio.wait_for(
                    c.get(CQ, headers={"Authorization": f"Bearer random-{i}"}), 10)
                assert r.status_code == 503  # the review was tried: nothing listens
                assert r.json()["detail"].startswith("cannot check access now: TokenReview")
        bucket = app.state.reconciler.client.api.bucket
        assert [bucket.try_acquire() for _ in range(5)] == [True] * 5  # untouched


# ------------------------------------------------------------------------------ the Lease


class FakeLeaseServer:
    """Just enough of kube-apiserver for a Lease: create, read, replace (with conflicts on a
    stale resourceVersion), and Namespace create. Counts the replaces (renewals)."""

    def __init__(self) -> None:
        self.leases: dict[str, dict[str, Any]] = {}
        self.version = 0
        self.renewals = 0

    def _store(self, key: str, body: dict[str, Any]) -> web.Response:
        self.version += 1
        body.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        self.leases[key] = body
        return web.json_response(body)

    async def create(self, req: web.Request) -> web.Response:
        body = await req.json()
        key = f"{req.match_info['ns']}/{body['metadata']['name']}"
        if key in self.leases:
            return web.json_response({"kind": "Status", "code": 409, "reason": "AlreadyExists"},
                                     status=409)
        return self._store(key, body)

    async def read(self, req: web.Request) -> web.Response:
        key = f"{req.match_info['ns']}/{req.match_info['name']}"
        if key not in self.leases:
            return web.json_response({"kind": "Status", "code": 404, "reason": "NotFound"},
                                     status=404)
        return web.json_response(self.leases[key])

    async def replace(self, req: web.Request) -> web.Response:
        body = await req.json()
        key = f"{req.match_info['ns']}/{req.match_info['name']}"
        if body["metadata"].get("resourceVersion") != self.leases[key]["metadata"][
                "resourceVersion"]:
            return web.json_response({"kind": "Status", "code": 409, "reason": "Conflict"},
                                     status=409)
        self.renewals += 1
        return self._store(key, body)

    async def namespace(self, req: web.Request) -> web.Response:
        return web.json_response(json.loads(await req.text()), status=201)


@pytest.fixture
async def lease_server() -> AsyncIterator[tuple[FakeLeaseServer, str]]:
    fake = FakeLeaseServer()
    app = web.Application()
    base = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
    app.router.add_post(base, fake.create)
    app.router.add_get(base + "/{name}", fake.read)
    app.router.add_put(base + "/{name}", fake.replace)
    app.router.add_post("/api/v1/namespaces", fake.namespace)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # noqa: SLF001 - the port picked
    yield fake, f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def _until(cond: Any, timeout: float) -> None:
    async def poll() -> None:
        while not cond():
            await asyncio.sleep(0.05)
    await asyncio.wait_for(poll(), timeout)


async def test_lease_renewal_never_waits_behind_the_shared_rate_limiter(lease_server) -> None:
    fake, url = lease_server
    client = _client(url, qps=0.01, burst=20)  # the shared bucket: refills once per 100 s
    settings = LeaderElectionSettings(enabled=True, namespace="ns", lease_name="l",
                                      lease_duration_seconds=3, renew_deadline_seconds=2.5,
                                      retry_period_seconds=1.0)
    elector = LeaderElector(client, settings, identity="me")
    task = asyncio.create_task(elector.run())
    queued: list[asyncio.Task[None]] = []
    try:
        await _until(lambda: elector.is_leader, 10)
        # Saturate the shared limiter: 200 requests queue behind it (about 20,000 s of
        # tokens), as a token flood did through the access reviews.
        queued = [asyncio.create_task(client.api.bucket.acquire()) for _ in range(200)]
        await asyncio.sleep(0)
        renewed = fake.renewals
        await _until(lambda: fake.renewals >= renewed + 3, 8)  # ~1 per retry period
        assert elector.is_leader and elector.transitions == 1  # never lost it
    finally:
        for t in (*queued, task):
            t.cancel()
        await asyncio.gather(*queued, task, return_exceptions=True)
        await client.close()

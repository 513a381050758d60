"""breaker7: ``RateLimitedApiClient.send`` (raw requests on a session without ``trust_env``,
msgspec codec, issue 16) keeps what kubernetes-asyncio's ``call_api`` gave: the bearer token
refreshed by the configuration's hook, client certificates, ``tls-server-name``, timeouts,
watch lines as long as etcd's largest object, error mapping of non-JSON bodies, query
encoding and raw ``bytes`` bodies. Against a local HTTPS server (the test CA)."""

from __future__ import annotations

import asyncio
import json
import math
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import pytest
from aiohttp import web
from kubernetes_asyncio import client as k8s_client

from app.config import ClientSettings
from app.kube.client import (
    JSON_PATCH,
    WORKLOADS,
    KubeClient,
    RateLimitedApiClient,
    TokenBucket,
)
from app.kube.errors import Permanent, Retryable
from certs.pki import ensure_client_cert


class Api:
    """A stand-in API server: records each request (method, path, raw query, headers, body)
    and answers with ``self.reply(request)``."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.reply: Any = lambda req, body: web.json_response({"kind": "Status"})

    async def handle(self, req: web.Request) -> web.StreamResponse:
        body = await req.read()
        self.seen.append({"method": req.method, "path": req.path,
                          "query": req.rel_url.raw_query_string, "headers": dict(req.headers),
                          "body": body})
        out = self.reply(req, body)
        return await out if asyncio.iscoroutine(out) else out


async def _serve(api: Api, certs: Path, *, client_ca: bool = False
                 ) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", api.handle)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(certs / "tls.crt", certs / "tls.key")
    if client_ca:
        ctx.load_verify_locations(certs / "ca.crt")
        ctx.verify_mode = ssl.CERT_REQUIRED
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"https://127.0.0.1:{port}"


def _cfg(host: str, certs: Path) -> k8s_client.Configuration:
    cfg = k8s_client.Configuration()
    cfg.host = host
    cfg.ssl_ca_cert = str(certs / "ca.crt")
    cfg.api_key = {"BearerToken": "first"}
    cfg.api_key_prefix = {"BearerToken": "Bearer"}
    return cfg


@pytest.fixture
async def api(certs: Path) -> AsyncIterator[tuple[Api, str]]:
    a = Api()
    runner, url = await _serve(a, certs)
    yield a, url
    await runner.cleanup()


def _client(cfg: k8s_client.Configuration, timeout: float = 5.0) -> KubeClient:
    return KubeClient(RateLimitedApiClient(cfg, TokenBucket(100, 100), timeout),
                      ClientSettings(request_timeout_seconds=timeout))


async def _get_fails(cfg: k8s_client.Configuration, timeout: float = 5.0) -> Retryable:
    """GET /api must fail with ``Retryable``; returns it."""
    kc = _client(cfg, timeout)
    try:
        with pytest.raises(Retryable) as err:
            await kc.request("GET", "/api")
    finally:
        await kc.close()
    return err.value


def _stream(*lines: bytes) -> Any:
    """A handler answering 200 with ``lines`` streamed as a watch, then the end."""
    async def handler(req: web.Request, body: bytes) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(req)
        for line in lines:
            await resp.write(line + b"\n")
        await resp.write_eof()
        return resp
    return handler


async def test_the_bearer_token_is_refreshed_per_request_by_the_hook(api, certs) -> None:
    """exec / OIDC / in-cluster token rotation all go through ``refresh_api_key_hook``."""
    srv, url = api
    cfg = _cfg(url, certs)
    tokens = iter(["t1", "t2"])

    async def refresh(c: k8s_client.Configuration) -> None:
        c.api_key["BearerToken"] = next(tokens)

    cfg.refresh_api_key_hook = refresh
    kc = _client(cfg)
    try:
        await kc.request("GET", "/api/v1/namespaces")
        await kc.request("GET", "/api/v1/namespaces")
    finally:
        await kc.close()
    assert [s["headers"]["Authorization"] for s in srv.seen] == ["Bearer t1", "Bearer t2"]
    assert srv.seen[0]["headers"]["User-Agent"] == "pykueue/0.1.0"


async def test_a_client_certificate_is_presented(certs) -> None:
    ensure_client_cert(certs, "b7-client", "pykueue-controller")
    a = Api()
    runner, url = await _serve(a, certs, client_ca=True)
    cfg = _cfg(url, certs)
    cfg.cert_file, cfg.key_file = str(certs / "b7-client.crt"), str(certs / "b7-client.key")
    kc = _client(cfg)
    try:
        assert await kc.request("GET", "/api") == {"kind": "Status"}
    finally:
        await kc.close()
        await runner.cleanup()


async def test_tls_server_name_is_the_name_verified(api, certs) -> None:
    """kubeconfig ``tls-server-name``: the certificate is checked against it, not the host."""
    _, url = api
    cfg = _cfg(url, certs)
    cfg.tls_server_name = "not-in-the-certificate.example"
    err = await _get_fails(cfg)
    assert "certificate" in str(err), err


async def test_a_hung_server_times_out_as_retryable(api, certs) -> None:
    srv, url = api

    async def hang(req, body):
        await asyncio.sleep(2)

    srv.reply = hang
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await _get_fails(_cfg(url, certs), timeout=0.5)
    assert loop.time() - t0 < 5


async def test_a_watch_line_of_etcds_largest_object_is_read_whole(api, certs) -> None:
    """etcd's default request limit is 1.5 MiB: one watch event line can be that long."""
    srv, url = api
    big = {"type": "MODIFIED", "object": {"kind": "Workload", "metadata": {
        "name": "w", "annotations": {"a": "x" * (3 * 2**19)}}}}

    srv.reply = _stream(json.dumps(big).encode(),
                        b'{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}}')
    kc = _client(_cfg(url, certs))
    try:
        got = [e async for e in kc.watch(WORKLOADS, "ns", resource_version="1")]
    finally:
        await kc.close()
    assert got[0] == big and got[1]["type"] == "BOOKMARK"
    assert dict(parse_qsl(srv.seen[0]["query"]))["allowWatchBookmarks"] == "true"


async def test_an_html_502_from_a_proxy_is_retryable_with_its_text(api, certs) -> None:
    srv, url = api
    srv.reply = lambda req, body: web.Response(status=502, text="<html>Bad Gateway</html>",
                                               content_type="text/html")
    err = await _get_fails(_cfg(url, certs))
    assert err.status == 502 and "Bad Gateway" in str(err)


async def test_an_html_200_is_an_api_error_not_a_decode_crash(api, certs) -> None:
    """A captive proxy or a wrong host answering 200 with HTML: callers handle ``ApiError``
    (informers relist and retry on ``Retryable``); a raw ``msgspec.DecodeError`` escapes
    them."""
    srv, url = api
    srv.reply = lambda req, body: web.Response(status=200, text="<html>login</html>",
                                               content_type="text/html")
    err = await _get_fails(_cfg(url, certs))
    assert err.reason == "InvalidResponse" and "login" in str(err)


async def test_selectors_and_continue_tokens_reach_the_server_unchanged(api, certs) -> None:
    srv, url = api
    srv.reply = lambda req, body: web.json_response(
        {"items": [], "metadata": {"resourceVersion": "5"}})
    selector = "app=a,tier!=b,!gpu,env in (prod,dev),x notin (y)"
    fields = "metadata.name=w+1,status.phase!=Done"
    kc = _client(_cfg(url, certs))
    try:
        await kc.list(WORKLOADS, "ns", label_selector=selector, field_selector=fields)
        await kc.request("GET", WORKLOADS.path("ns"), query={"continue": "eyJ2Ijo+/=="})
    finally:
        await kc.close()
    q0 = dict(parse_qsl(srv.seen[0]["query"], keep_blank_values=True))
    assert q0["labelSelector"] == selector and q0["fieldSelector"] == fields
    assert dict(parse_qsl(srv.seen[1]["query"]))["continue"] == "eyJ2Ijo+/=="


async def test_bytes_bodies_and_non_ascii_go_through_as_written(api, certs) -> None:
    srv, url = api
    srv.reply = lambda req, body: web.json_response({"metadata": {"name": "w"}})
    patch = (b'[{"op":"replace","path":"/metadata/annotations/n",'
             b'"value":"caf\xc3\xa9 \xe2\x9c\x93"}]')
    kc = _client(_cfg(url, certs))
    try:
        await kc.patch(WORKLOADS, "w", patch, "ns", content_type=JSON_PATCH)
        await kc.patch(WORKLOADS, "w", {"metadata": {"annotations": {"n": "café ✓"}}}, "ns")
    finally:
        await kc.close()
    assert srv.seen[0]["body"] == patch
    assert srv.seen[0]["headers"]["Content-Type"] == JSON_PATCH
    assert json.loads(srv.seen[1]["body"]) == {"metadata": {"annotations": {"n": "café ✓"}}}


async def test_a_nan_in_a_body_is_refused_not_sent_as_null(api, certs) -> None:
    srv, url = api
    kc = _client(_cfg(url, certs))
    try:
        with pytest.raises(Permanent, match="NaN or infinite"):
            await kc.patch(WORKLOADS, "w", {"status": {"x": math.nan}}, "ns")
        with pytest.raises(Permanent):
            await kc.patch(WORKLOADS, "w", {"status": {"y": [1, {"z": -math.inf}]}}, "ns")
        # A null the caller meant (a merge patch's deletion) is sent as written.
        await kc.patch(WORKLOADS, "w", {"metadata": {"annotations": {"a": None}}}, "ns")
    finally:
        await kc.close()
    assert len(srv.seen) == 1 and json.loads(srv.seen[0]["body"]) == {
        "metadata": {"annotations": {"a": None}}}


async def test_a_connection_refused_is_retryable(certs) -> None:
    await _get_fails(_cfg("https://127.0.0.1:1", certs))


async def test_a_watch_line_that_is_not_json_is_retryable(api, certs) -> None:
    srv, url = api

    srv.reply = _stream(b"<html>proxy timeout</html>")
    kc = _client(_cfg(url, certs))
    try:
        with pytest.raises(Retryable) as err:
            _ = [e async for e in kc.watch(WORKLOADS, "ns", resource_version="1")]
    finally:
        await kc.close()
    assert "proxy timeout" in str(err.value)


@pytest.mark.parametrize("host", ["http://10.255.255.1:8080", "https://10.255.255.1:6443"])
async def test_proxy_credentials_from_the_environment_reach_the_proxy(
        host: str, certs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTP(S)_PROXY with user:password (client-go's ProxyFromEnvironment): the proxy gets
    Proxy-Authorization on the CONNECT of an https API server and on each request to a
    plain-http one (before breaker7 the latter went without it)."""
    heads: list[list[str]] = []

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heads.append((await reader.readuntil(b"\r\n\r\n")).decode().split("\r\n"))
        # A plain request is answered; a CONNECT is refused (only its head matters here).
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 2\r\n\r\n{}" if heads[-1][0].startswith("GET")
                     else b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    srv = await asyncio.start_server(proxy, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    for var in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "http_proxy", "https_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://user:secret@127.0.0.1:{port}")
    monkeypatch.setenv("HTTPS_PROXY", f"http://user:secret@127.0.0.1:{port}")
    kc = _client(_cfg(host, certs))
    try:
        try:
            await kc.request("GET", "/api")
        except Retryable:
            assert host.startswith("https")  # the refused CONNECT
    finally:
        await kc.close()
        srv.close()
    assert heads and heads[0][0].startswith("CONNECT" if host.startswith("https") else "GET")
    assert "Proxy-Authorization: Basic dXNlcjpzZWNyZXQ=" in heads[0]

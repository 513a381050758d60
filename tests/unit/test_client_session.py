"""The controllers' API client reads the proxy environment once, not per request (issue 16:
aiohttp's ``trust_env`` looked up the proxy variables and ``~/.netrc`` in a worker thread for
every request)."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client as k8s_client

from app.kube.client import RateLimitedApiClient, TokenBucket, _decode, _encode

HOST = "https://10.0.0.1:6443"


def _cfg(proxy: str | None = None) -> k8s_client.Configuration:
    cfg = k8s_client.Configuration()
    cfg.host = HOST
    cfg.proxy = proxy
    return cfg


@pytest.fixture
def clean_proxy_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY",
                "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


async def test_no_proxy_env_no_proxy_and_no_trust_env(clean_proxy_env: pytest.MonkeyPatch) -> None:
    api = RateLimitedApiClient(_cfg(), TokenBucket(10, 10), 5.0)
    try:
        assert api.rest_client.pool_manager.trust_env is False
        assert not api.rest_client.proxy
    finally:
        await api.close()


async def test_https_proxy_resolved_once_with_credentials(
        clean_proxy_env: pytest.MonkeyPatch) -> None:
    clean_proxy_env.setenv("HTTPS_PROXY", "http://user:secret@proxy.example:3128")
    api = RateLimitedApiClient(_cfg(), TokenBucket(10, 10), 5.0)
    try:
        # aiohttp sends them as Proxy-Authorization (CONNECT and plain-http requests alike:
        # tests/unit/test_client_raw_send.py).
        assert api.rest_client.proxy == "http://user:secret@proxy.example:3128"
        assert not api.rest_client.proxy_headers
    finally:
        await api.close()


async def test_no_proxy_bypasses_the_api_server(clean_proxy_env: pytest.MonkeyPatch) -> None:
    clean_proxy_env.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    clean_proxy_env.setenv("NO_PROXY", "10.0.0.1")
    api = RateLimitedApiClient(_cfg(), TokenBucket(10, 10), 5.0)
    try:
        assert not api.rest_client.proxy
    finally:
        await api.close()


async def test_configured_proxy_wins(clean_proxy_env: pytest.MonkeyPatch) -> None:
    clean_proxy_env.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    api = RateLimitedApiClient(_cfg("http://mine:8080"), TokenBucket(10, 10), 5.0)
    try:
        assert api.rest_client.proxy == "http://mine:8080"
    finally:
        await api.close()


def test_body_codec_round_trip() -> None:
    body = {"metadata": {"name": "w", "labels": {}}, "spec": {"count": 3, "ratio": 0.5,
            "on": True, "none": None, "list": [1, "a"]}, "ops": [{"op": "add"}]}
    assert _decode(_encode(body)) == body
    assert _encode(None) is None
    assert _encode(b"raw") == b"raw"
    assert _encode([{"op": "remove", "path": "/a"}]) == b'[{"op":"remove","path":"/a"}]'

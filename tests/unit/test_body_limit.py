"""A request body over Settings.server.max_body_bytes gets HTTP 413 with a JSON message on every
endpoint, whether it announces its length or streams it; smaller bodies are served as before."""

from __future__ import annotations

import httpx
import pytest

from app.config import ServerSettings, Settings
from app.main import create_app


def _app(limit: int):
    settings = Settings(controllers_enabled=False, server=ServerSettings(max_body_bytes=limit))
    return create_app(settings)


@pytest.mark.parametrize(
    "path", ["/mutate-batch-v1-job", "/scheduler/filter", "/validate-batch-v1-job"])
async def test_large_body_with_content_length_is_refused_with_413(path: str) -> None:
    transport = httpx.ASGITransport(app=_app(4096))
    async with httpx.AsyncClient(transport=transport, base_url="https://t") as c:
        r = await c.post(path, content=b"a" * 10_000)
    assert r.status_code == 413
    assert "larger than 4096 bytes" in r.json()["detail"]


async def test_streamed_body_over_the_limit_is_refused_with_413() -> None:
    async def chunks():
        for _ in range(10):
            yield b"a" * 1000

    transport = httpx.ASGITransport(app=_app(4096))
    async with httpx.AsyncClient(transport=transport, base_url="https://t") as c:
        r = await c.post("/scheduler/filter", content=chunks())
    assert r.status_code == 413


async def test_body_under_the_limit_is_handled_normally() -> None:
    transport = httpx.ASGITransport(app=_app(4096))
    async with httpx.AsyncClient(transport=transport, base_url="https://t") as c:
        r = await c.post("/mutate-batch-v1-job", content=b"not json")
        h = await c.get("/healthz")
    assert r.status_code == 400  # the webhook's own answer to garbage, not 413
    assert h.status_code == 200

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


def _budget_app(budget: int):
    settings = Settings(controllers_enabled=False, server=ServerSettings(
        max_body_bytes=1024 * 1024, max_body_bytes_in_flight=budget))
    return create_app(settings)


async def test_bodies_in_flight_past_the_budget_get_503_and_small_ones_still_pass() -> None:
    """breaker8: 100 unauthenticated 8 MiB webhook POSTs held one byte short took pykueue to
    1.1 GiB RSS. Bodies held at once are bounded (beyond 64 KiB each): past the budget a body
    gets 503 with Retry-After, a small one is still answered, and the budget is given back
    when the holding request ends."""
    import asyncio

    from app.api.limits import FREE_BYTES_PER_REQUEST

    app = _budget_app(100_000)
    transport = httpx.ASGITransport(app=app)
    release = asyncio.Event()
    sent = asyncio.Event()

    async def held_body():
        yield b"a" * (FREE_BYTES_PER_REQUEST + 90_000)  # charges 90,000 of the 100,000
        sent.set()
        await release.wait()
        yield b"a"

    async with httpx.AsyncClient(transport=transport, base_url="https://t") as c:
        holder = asyncio.create_task(c.post("/mutate-batch-v1-job", content=held_body()))
        await sent.wait()
        await asyncio.sleep(0)  # let the app read the first chunk
        big = await c.post("/validate-batch-v1-job",
                           content=b"a" * (FREE_BYTES_PER_REQUEST + 20_000))
        small = await c.post("/validate-batch-v1-job", content=b"not json")
        release.set()
        held = await holder
        again = await c.post("/validate-batch-v1-job",
                             content=b"a" * (FREE_BYTES_PER_REQUEST + 20_000))
    assert big.status_code == 503, big.text
    assert big.headers["retry-after"] == "1" and "in flight" in big.json()["detail"]
    assert small.status_code == 400  # the webhook's own answer: not charged, not refused
    assert held.status_code == 400  # the holder was served (its body is not JSON)
    assert again.status_code == 400  # the budget came back


@pytest.mark.xfail(strict=True, reason=(
    "breaker8, open: a webhook body is parsed on the event loop the controllers share. A 6 MB "
    "AdmissionReview of 100,000 small containers (under max_body_bytes, no credentials "
    "needed) blocks the loop ~0.7-1 s; 12-30 such POSTs in flight on the lab delayed a normal "
    "Workload's admission from 0.07 s to 7-10 s and the leader's Lease renewal gap to 9.5 s "
    "(deadline 10 s). Needs parsing off the loop or a share of loop time for large bodies."))
async def test_a_large_admission_review_does_not_block_the_event_loop() -> None:
    import asyncio
    import json
    import time

    containers = [{"name": f"c{i}", "resources": {"requests": {"cpu": "1"}}}
                  for i in range(100_000)]
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "x", "namespace": "a",
                        "labels": {"kueue.x-k8s.io/queue-name": "q"}},
           "spec": {"suspend": True, "template": {"spec": {"containers": containers}}}}
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": "u", "operation": "CREATE", "object": job,
                                   "kind": {"group": "batch", "version": "v1", "kind": "Job"}}})
    transport = httpx.ASGITransport(app=_app(8 * 1024 * 1024))
    longest = 0.0
    done = False

    async def ticker() -> None:
        nonlocal longest
        last = time.monotonic()
        while not done:
            await asyncio.sleep(0.005)
            now = time.monotonic()
            longest, last = max(longest, now - last), now

    tick = asyncio.create_task(ticker())
    async with httpx.AsyncClient(transport=transport, base_url="https://t") as c:
        r = await c.post("/mutate-batch-v1-job", content=body)
    done = True
    await tick
    assert r.status_code == 200
    assert longest < 0.1, f"event loop blocked {longest:.2f}s by one review"

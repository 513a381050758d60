"""Events take their tokens from the controllers' bucket by default, as Kueue's event recorder
shares its manager's RateLimiter; ``ClientSettings.events_bucket: own`` (opt-in) gives them
a bucket of their own."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client as k8s_client
from pydantic import ValidationError

from app.config import ClientSettings, Settings
from app.controllers.manager import events_client
from app.kube.client import KubeClient, RateLimitedApiClient, TokenBucket


def _client(settings: ClientSettings) -> KubeClient:
    cfg = k8s_client.Configuration()
    cfg.host = "https://10.0.0.1:6443"
    bucket = TokenBucket(settings.qps, settings.burst)
    return KubeClient(RateLimitedApiClient(cfg, bucket, 5.0), settings)


async def test_events_get_a_bucket_of_their_own_when_asked() -> None:
    settings = ClientSettings(qps=7, burst=9, events_bucket="own")
    client = _client(settings)
    events = events_client(client, settings)
    assert events is not None and events is not client
    assert events.api.bucket is not client.api.bucket
    assert (events.api.bucket.qps, events.api.bucket.burst) == (7, 9)
    assert events.api.configuration.host == client.api.configuration.host
    # Taking every token of the controllers' bucket leaves the Events' bucket full.
    for _ in range(9):
        await client.api.bucket.acquire()
    assert client.api.bucket._tokens < 1 <= events.api.bucket._tokens
    await events.close()
    await client.close()


async def test_by_default_events_use_the_controllers_client() -> None:
    settings = ClientSettings()
    assert settings.events_bucket == "shared"
    client = _client(settings)
    assert events_client(client, settings) is None
    await client.close()


def test_events_bucket_refuses_other_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYKUEUE_CLIENT__EVENTS_BUCKET", "own")
    assert Settings().client.events_bucket == "own"
    with pytest.raises(ValidationError, match="events_bucket"):
        ClientSettings(events_bucket="both")  # type: ignore[arg-type]

"""Health endpoints (app/api/health.py): /healthz, /readyz from app.state.ready_checks, /metrics."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from app.api.health import metrics_registry
from app.config import ServerSettings, Settings
from app.main import create_app


async def get(app: Any, path: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://h") as c:
        return await c.get(path)


def app_with(checks: list[Any] | None, metrics_auth: bool = False) -> Any:
    app = create_app(Settings(controllers_enabled=False,
                              server=ServerSettings(metrics_auth=metrics_auth)))
    if checks is not None:
        app.state.ready_checks = checks
    return app


async def test_healthz_is_always_ok_even_when_not_ready() -> None:
    r = await get(app_with([lambda: (False, "informers not synced")]), "/healthz")
    assert (r.status_code, r.json()) == (200, {"status": "ok"})


def ok() -> tuple[bool, str]:
    return True, "informers synced"


def not_synced() -> tuple[bool, str]:
    return False, "informers not synced: jobs, workloads"


async def async_ok() -> tuple[bool, str]:
    return True, "leader lease held"


def exploding() -> tuple[bool, str]:
    raise RuntimeError("store gone")


@pytest.mark.parametrize(
    ("checks", "status", "messages"),
    [
        pytest.param(None, 200, [], id="no checks registered means ready"),
        pytest.param([ok, async_ok], 200, ["informers synced", "leader lease held"],
                     id="all checks pass, sync and async"),
        pytest.param([ok, not_synced], 503,
                     ["informers synced", "informers not synced: jobs, workloads"],
                     id="one failing check makes it not ready"),
        pytest.param([exploding], 503, ["exploding: RuntimeError: store gone"],
                     id="a raising check counts as failed with its message"),
    ],
)  # fmt: skip
async def test_readyz(checks: list[Any] | None, status: int, messages: list[str]) -> None:
    r = await get(app_with(checks), "/readyz")
    assert r.status_code == status
    body = r.json()
    assert body["status"] == ("ready" if status == 200 else "not ready")
    assert [c["message"] for c in body["checks"]] == messages


async def test_metrics_expose_the_apps_own_registry() -> None:
    from prometheus_client import Counter

    app = app_with(None)
    Counter("pykueue_test_things", "things", registry=metrics_registry(app)).inc(2)
    r = await get(app, "/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    assert "pykueue_test_things_total 2.0" in r.text
    assert "pykueue_test_things" not in (await get(app_with(None), "/metrics")).text


@pytest.mark.parametrize(("token", "status", "detail"), [
    (None, 401, "missing bearer token"),
    ("wrong-token", 401, "invalid bearer token"),
    ("research-token", 403, 'cannot get path "/metrics"'),
    ("admin-token", 200, None),
])
async def test_metrics_need_a_token_allowed_to_get_the_metrics_url(token, status, detail) -> None:
    """Issue 14 item 7: /metrics names every namespace's queues; as Kueue's, it is served
    only to a user allowed to `get` the non-resource URL /metrics (the default)."""
    from tests.status_scenario import reviewer

    app = app_with(None, metrics_auth=True)
    app.state.access_reviewer = reviewer()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://h") as c:
        r = await c.get("/metrics", headers=headers)
    assert r.status_code == status, r.text
    if detail:
        assert detail in r.json()["detail"]
    else:
        assert r.headers["content-type"].startswith("text/plain")


async def test_metrics_without_a_reviewer_are_refused_by_default() -> None:
    r = await get(create_app(Settings(controllers_enabled=False)), "/metrics")
    assert r.status_code == 503 and "access review is not configured" in r.json()["detail"]

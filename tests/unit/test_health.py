"""Health endpoints (app/api/health.py): /healthz, /readyz from app.state.ready_checks, /metrics."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from app.api.health import metrics_registry
from app.config import Settings
from app.main import create_app


async def get(app: Any, path: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://h") as c:
        return await c.get(path)


def app_with(checks: list[Any] | None) -> Any:
    app = create_app(Settings(controllers_enabled=False))
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

"""HTTP adapter: liveness, readiness and Prometheus metrics.

- ``GET /healthz``: always 200 ``{"status": "ok"}`` while the process serves HTTP.
- ``GET /readyz``: 200 when every check in ``app.state.ready_checks`` passes, else 503. A check
  is a callable (sync or async) returning ``(ok: bool, message: str)``; one that raises counts as
  failed with the exception as its message. Body: ``{"status": "ready"|"not ready",
  "checks": [{"ok": bool, "message": str}, ...]}``. No checks registered means ready.
- ``GET /metrics``: the text exposition of the per-app ``CollectorRegistry`` in
  ``app.state.metrics_registry`` (no global registry, so several apps can live in one process).
  It names every namespace's LocalQueues and their counts, so, as Kueue's metrics endpoint,
  it needs ``Authorization: Bearer <token>`` of a user allowed to ``get`` the non-resource URL
  ``/metrics`` (TokenReview + SubjectAccessReview through ``app.state.access_reviewer``;
  answers 401 / 403 / 429 / 503 as the status API, ``app.api.status.authorize``), unless
  ``Settings.server.metrics_auth`` is false.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from app.api.access import metrics_access
from app.api.status import Credentials, authorize

router = APIRouter()

# A readiness check: returns (ok, message), possibly awaitable.
ReadyCheck = Callable[[], "tuple[bool, str] | Awaitable[tuple[bool, str]]"]


def metrics_registry(app: FastAPI | Any) -> CollectorRegistry:
    """The app's own CollectorRegistry (``app.state.metrics_registry``), created on first use."""
    registry = getattr(app.state, "metrics_registry", None)
    if registry is None:
        registry = CollectorRegistry()
        app.state.metrics_registry = registry
    return registry


async def _run_check(check: ReadyCheck) -> tuple[bool, str]:
    name = getattr(check, "__name__", type(check).__name__)
    try:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        ok, message = result  # type: ignore[misc]
        return bool(ok), str(message)
    except Exception as exc:  # a broken check means "not ready", never a 500
        return False, f"{name}: {type(exc).__name__}: {exc}"


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """Liveness: the event loop answers HTTP."""
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(request: Request) -> JSONResponse:
    """Readiness: 200 when all ``app.state.ready_checks`` pass, else 503 with their messages."""
    checks: list[ReadyCheck] = list(getattr(request.app.state, "ready_checks", None) or [])
    results = [await _run_check(check) for check in checks]
    ready = all(ok for ok, _ in results)
    body = {
        "status": "ready" if ready else "not ready",
        "checks": [{"ok": ok, "message": message} for ok, message in results],
    }
    return JSONResponse(body, status_code=200 if ready else 503)


@router.get("/metrics")
async def metrics(request: Request, credentials: Credentials) -> Response:
    """Prometheus text exposition of the app's registry (authorization: see the module doc)."""
    settings = getattr(request.app.state, "settings", None)
    if settings is None or settings.server.metrics_auth:
        await authorize(request, credentials, metrics_access())
    return Response(generate_latest(metrics_registry(request.app)), media_type=CONTENT_TYPE_LATEST)

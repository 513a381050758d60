"""The FastAPI application: ``create_app(settings)`` wires the HTTP adapters and the lifespan.

One process serves, over HTTPS, the webhook (``/mutate-batch-v1-job``, ``/validate-batch-v1-job``),
the scheduler extender (``/scheduler/filter``, ``/scheduler/prioritize``), the status API
(``/api/v1/...``), health (``/healthz``, ``/readyz``) and ``/metrics``; the lifespan starts and
stops the controllers (``app.controllers``) in the same event loop.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from app.api import extender, health, status, webhook
from app.config import Settings


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the application for ``settings`` (defaults from the environment)."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield

    app = FastAPI(title="pykueue", version="0.1.0", lifespan=lifespan)
    app.state.settings = settings
    for module in (webhook, extender, status, health):
        app.include_router(module.router)
    return app

"""``pykueue dashboard``: the dashboard on localhost, with the user's own credentials.

Like ``kubectl proxy``: a plain-HTTP server bound to 127.0.0.1 serves the dashboard's page
and assets (the same files ``pykueue serve`` serves) and forwards every ``GET /api/v1/...``
to pykueue's status API over HTTPS with the user's bearer token (found as ``pykueue status``
finds it: ``--token``, ``$PYKUEUE_TOKEN``, the kubeconfig user's token). The browser
therefore needs no token, and sees exactly what that user may see: the server checks the
token as for any request. Anyone who can reach the local port acts as that user, as with
``kubectl proxy``: it listens on the loopback interface only.

Forwarded: the path and query, ``If-None-Match``; returned: the status, body,
``Content-Type``, ``ETag`` and ``Cache-Control``. Nothing but GET under ``/api/v1`` is
forwarded. An unreachable server gives 502 with the reason.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI, Request, Response
from fastapi.responses import FileResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

from app.dashboard import INDEX_HTML, STATIC_DIR

_PASSED_BACK = ("content-type", "etag", "cache-control", "www-authenticate")


def create_local_app(server: str, token: str, *, ca_file: Path | None = None,
                     transport: httpx.AsyncBaseTransport | None = None) -> FastAPI:
    """The localhost app forwarding to ``server`` (``https://host:port``) with ``token``.
    ``transport``: an httpx transport instead of the network (tests)."""
    verify: Any = ssl.create_default_context(cafile=str(ca_file)) if ca_file else True
    client = httpx.AsyncClient(base_url=server.rstrip("/"), verify=verify, timeout=15.0,
                               headers={"Authorization": f"Bearer {token}"},
                               transport=transport)
    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await client.aclose()

    app = FastAPI(title="pykueue dashboard (local)", docs_url=None, redoc_url=None,
                  openapi_url=None, lifespan=lifespan)
    app.state.upstream = client

    @app.get("/")
    async def root() -> RedirectResponse:
        return RedirectResponse("/dashboard")

    @app.get("/dashboard")
    async def page() -> FileResponse:
        return FileResponse(INDEX_HTML, media_type="text/html",
                            headers={"Cache-Control": "no-cache"})

    @app.get("/api/v1/{path:path}")
    async def forward(path: str, request: Request) -> Response:
        headers = {}
        if "if-none-match" in request.headers:
            headers["If-None-Match"] = request.headers["if-none-match"]
        try:
            r = await client.get(f"/api/v1/{path}", params=request.query_params,
                                 headers=headers)
        except httpx.HTTPError as exc:
            return Response(f'{{"detail": "cannot reach pykueue at {server}: {exc}"}}',
                            status_code=502, media_type="application/json")
        return Response(r.content, status_code=r.status_code,
                        headers={k: v for k, v in r.headers.items() if k in _PASSED_BACK})

    app.mount("/dashboard/static", StaticFiles(directory=STATIC_DIR), name="dashboard-static")
    return app

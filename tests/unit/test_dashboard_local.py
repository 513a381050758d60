"""`pykueue dashboard` (app/cli/dashboard.py, app/cli/main.py): the localhost server forwards the
page's API requests to pykueue over HTTPS with the user's token, so the browser needs none;
the command itself, run as a process, takes the token from the kubeconfig."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from app.cli.dashboard import create_local_app
from tests.pykueue_server import free_port
from tests.status_server import Server, start_dashboard_command


@contextlib.asynccontextmanager
async def local_client(server: Server, certs: Path, token: str,
                       ) -> AsyncIterator[httpx.AsyncClient]:
    app = create_local_app(server.url, token, ca_file=certs / "ca.crt")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://local") as c:
        yield c
    await app.state.upstream.aclose()  # else the server waits for its keep-alive connection


async def test_forwards_with_the_users_token_and_passes_etags_back(server, certs):
    async with local_client(server, certs, "research-token") as c:
        r = await c.get("/api/v1/dashboard")  # no Authorization from the browser
        assert r.status_code == 200, r.text
        assert r.json()["user"] == "system:serviceaccount:research:viewer"
        assert r.json()["namespaces"] == ["research"]
        again = await c.get("/api/v1/dashboard", headers={"If-None-Match": r.headers["ETag"]})
        assert again.status_code == 304
        # The status API too, with the server's own access rules: this user may not list CQs.
        assert (await c.get("/api/v1/clusterqueues")).status_code == 403
        page = await c.get("/dashboard")
        assert page.status_code == 200 and "pykueue dashboard" in page.text
        js = await c.get("/dashboard/static/vendor/uplot/uPlot.iife.min.js")
        assert js.status_code == 200 and len(js.content) > 10_000
        assert (await c.get("/mutate-batch-v1-job")).status_code in (404, 405)


async def test_a_bad_token_is_refused_by_the_server_and_an_absent_one_reported(server, certs):
    async with local_client(server, certs, "forged") as c:
        assert (await c.get("/api/v1/dashboard")).status_code == 401
    app = create_local_app(f"https://127.0.0.1:{free_port()}", "t", ca_file=certs / "ca.crt")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://local") as c:
        r = await c.get("/api/v1/dashboard")
        assert r.status_code == 502 and "cannot reach pykueue" in r.json()["detail"]


def test_the_command_serves_on_localhost_with_the_kubeconfig_token(server, certs, tmp_path):
    proc, url = start_dashboard_command(server, certs, tmp_path)
    try:
        r = httpx.get(url.replace("/dashboard", "/api/v1/dashboard"), timeout=10)
        assert r.status_code == 200 and r.json()["user"] == "admin" and r.json()["admin"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)

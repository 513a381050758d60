"""The status API app (app.main.create_app, controllers off) under uvicorn with TLS in a thread,
serving the known Cluster of tests/status_scenario.py with its in-process token table: for
tests that need a real HTTPS server (the CLI, the dashboard in a browser)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvicorn

from app.config import Settings
from app.main import create_app
from tests.pykueue_server import free_port
from tests.status_scenario import build_cluster, reviewer


class _Uvicorn(uvicorn.Server):
    """uvicorn's server, remembering its event loop (``Server.call`` runs code on it)."""

    loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets: Any = None) -> None:
        self.loop = asyncio.get_running_loop()
        await super().serve(sockets)


class Server:
    """The FastAPI app under uvicorn in a thread (stopped by ``stop``); ``cluster`` replaces
    the scenario's state (e.g. one built around the current time)."""

    def __init__(self, certs: Path, cluster: Any = None) -> None:
        self.app = create_app(Settings(controllers_enabled=False))
        self.app.state.cluster = build_cluster() if cluster is None else cluster
        self.app.state.access_reviewer = reviewer()
        self.port = free_port()
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port,
                                ssl_certfile=str(certs / "tls.crt"),
                                ssl_keyfile=str(certs / "tls.key"), log_level="warning",
                                lifespan="off")
        self.server = _Uvicorn(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn()`` on the server's event loop (the core is not thread-safe: requests
        read it there) and return its value."""
        assert self.server.loop is not None

        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.server.loop).result(timeout=10)

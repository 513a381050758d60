"""The status API app (app.main.create_app, controllers off) under uvicorn with TLS in a thread,
serving the known core (Scheduler) of tests/status_scenario.py with its in-process token table: for
tests that need a real HTTPS server (the CLI, the dashboard in a browser)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvicorn
import yaml

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


def start_dashboard_command(server: Server, certs: Path, tmp_path: Path,
                            ) -> tuple[subprocess.Popen, str]:
    """`pykueue dashboard --port 0 --no-open` as a process, the token from a kubeconfig;
    returns it and the URL it printed."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "current-context": "me", "contexts": [{"name": "me", "context": {"user": "me"}}],
        "users": [{"name": "me", "user": {"token": "admin-token"}}]}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYKUEUE_")}
    env["KUBECONFIG"] = str(kubeconfig)
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "pykueue"), "dashboard", "--port", "0", "--no-open",
         "--server", server.url, "--ca-file", str(certs / "ca.crt")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        cwd=Path(__file__).resolve().parents[2])
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    lines = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        lines.append(line)
        m = re.search(r"(http://127\.0\.0\.1:\d+/dashboard)", line)
        if m:
            return proc, m.group(1)
    proc.kill()
    raise AssertionError(f"pykueue dashboard printed no URL: {''.join(lines)}")

"""`pykueue serve` as a test subprocess: HTTPS on a free loopback port, controllers disabled."""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def trust(certs: Path) -> ssl.SSLContext:
    """A client context that trusts only ``certs/ca.crt`` (hostname checking on)."""
    return ssl.create_default_context(cafile=str(certs / "ca.crt"))


def serve_env(
    certs: Path,
    port: int,
    base: Mapping[str, str] | None = None,
    controller_usernames: list[str] | None = None,
    visibility_port: int = 0,
) -> dict[str, str]:
    """Environment for `pykueue serve`: ``base`` (default os.environ) without PYKUEUE_*, plus the
    listener on 127.0.0.1:``port`` with the PEM files in ``certs`` and controllers disabled; the
    visibility listener on ``visibility_port`` (0: none)."""
    env = {k: v for k, v in (base or os.environ).items() if not k.startswith("PYKUEUE_")}
    env.update(
        PYKUEUE_SERVER__HOST="127.0.0.1",
        PYKUEUE_SERVER__PORT=str(port),
        PYKUEUE_SERVER__CERT_FILE=str(certs / "tls.crt"),
        PYKUEUE_SERVER__KEY_FILE=str(certs / "tls.key"),
        PYKUEUE_SERVER__CA_FILE=str(certs / "ca.crt"),
        PYKUEUE_CONTROLLERS_ENABLED="false",
        PYKUEUE_VISIBILITY__PORT=str(visibility_port),
    )
    if controller_usernames is not None:
        env["PYKUEUE_WEBHOOK__CONTROLLER_USERNAMES"] = json.dumps(controller_usernames)
    return env


def pykueue_exe() -> str:
    """The `pykueue` console script of the running interpreter's environment."""
    return str(Path(sys.executable).parent / "pykueue")


class PykueueServer:
    """Start/stop `pykueue serve`; output goes to ``log``."""

    def __init__(
        self,
        certs: Path,
        log: Path,
        env: Mapping[str, str] | None = None,
        controller_usernames: list[str] | None = None,
    ) -> None:
        self.certs, self.log, self.port = certs, log, free_port()
        self.env = serve_env(certs, self.port, env, controller_usernames)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> None:
        """Start and wait until /healthz answers over TLS; AssertionError with the log if not."""
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [pykueue_exe(), "serve"], env=self.env, cwd=ROOT, stdout=log, stderr=log
            )
        ctx = trust(self.certs)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"pykueue serve did not come up:\n{self.log.read_text()}")
            try:
                if httpx.get(f"{self.url}/healthz", verify=ctx).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)

    def stop(self) -> None:
        """Terminate (SIGTERM) and reap the process this object started."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=15)
        self.proc = None


def trickle_until_closed(sock: socket.socket, chunks: Iterator[bytes], every: float,
                         limit: float) -> tuple[float, bytes]:
    """Send one chunk every ``every`` seconds until the server closes the connection; return
    (seconds the connection lived, what the server sent). Gives up after ``limit`` seconds."""
    start = time.monotonic()
    received = b""
    sock.settimeout(every)
    while time.monotonic() - start < limit:
        try:
            sock.sendall(next(chunks))
        except (OSError, StopIteration):
            pass
        try:
            data = sock.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            break
        if not data:
            break
        received += data
    return time.monotonic() - start, received

"""Fixtures shared by the unit tests: a throwaway CA and serving certificate, and (for the
tests that need the status API behind a real HTTPS server: the CLI, the dashboard)
``tests.status_server.Server`` over the known state of tests/status_scenario.py. A module may
define its own to override them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from certs.pki import ensure_certs
from tests.status_server import Server


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA and a serving certificate for 127.0.0.1 (``ca.crt``, ``tls.crt``, ``tls.key``)."""
    out = tmp_path_factory.mktemp("certs")
    ensure_certs(out)
    return out


@pytest.fixture(scope="module")
def server(certs: Path) -> Iterator[Server]:
    s = Server(certs)
    s.start()
    yield s
    s.stop()

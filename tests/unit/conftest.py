"""Fixtures shared by the unit tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.certs import ensure_certs


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA and a serving certificate for 127.0.0.1 (``ca.crt``, ``tls.crt``, ``tls.key``)."""
    out = tmp_path_factory.mktemp("certs")
    ensure_certs(out)
    return out

"""Shared fixtures. Tests under tests/integration and tests/e2e get the ``lab`` marker and a
session-scoped real control plane (hack/lab.py); it is started when not already up and stopped
at the end only when this session started it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.labfixture import ROOT, LabHandle, start_lab


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).parts
        if "integration" in parts or "e2e" in parts:
            item.add_marker(pytest.mark.lab)


@pytest.fixture(scope="session")
def lab() -> Iterator[LabHandle]:
    """A running lab (real etcd, kube-apiserver, controller-manager, scheduler, kwok nodes)."""
    state = Path(os.environ.get("LAB_STATE_DIR", ROOT / ".lab"))
    port = int(os.environ.get("LAB_PORT_BASE", "16440"))
    bins = Path(os.environ.get("LAB_BIN_DIR", ROOT / ".k8sbin" / "current"))
    handle, started = start_lab(state, port, bins)
    try:
        yield handle
    finally:
        if started and not os.environ.get("LAB_KEEP"):
            handle.lab_cmd("down", check=False)

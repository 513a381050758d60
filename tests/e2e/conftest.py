"""The e2e fixture: pykueue started fresh in the lab for each module (counters at zero)."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from tests.labfixture import ROOT, LabHandle

sys.path.insert(0, str(ROOT / "hack"))
import lab as labmod  # noqa: E402
import scenario  # noqa: E402


@pytest.fixture(scope="module")
def pykueue_in_lab(lab: LabHandle) -> Iterator[labmod.Lab]:
    """A fresh pykueue (counters at zero) under its ServiceAccount, webhooks and extender on."""
    handle = labmod.from_args(str(lab.state), lab.port_base, str(lab.bin_dir))
    labmod.pykueue_down(handle)
    scenario.prepare(handle)
    labmod.pykueue_up(handle)
    try:
        yield handle
    finally:
        labmod.pykueue_down(handle)

"""``jobs.pod_replacement_policy: Failed`` (pykueue's opt-in) on the lab: brk32 H4's tenant
deletes its admitted Job's Running pod twice while the pod runs out a long grace period;
with the setting the Job controller starts no replacement beside it (default, Kueue's: 3 GPUs
Running on an admission of 1, ``tests/e2e/test_brk32_findings.py::test_h4_...``)."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from tests.e2e.test_brk32_findings import h4_gpus_running
from tests.labfixture import ROOT, LabHandle

sys.path.insert(0, str(ROOT / "hack"))
import lab as labmod  # noqa: E402
import scenario  # noqa: E402

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def replacing_on_failure(lab: LabHandle) -> Iterator[labmod.Lab]:
    """pykueue restarted with ``PYKUEUE_JOBS__POD_REPLACEMENT_POLICY=Failed``; stopped
    after the module."""
    handle = labmod.from_args(str(lab.state), lab.port_base, str(lab.bin_dir))
    labmod.pykueue_down(handle)
    scenario.prepare(handle)
    labmod.pykueue_up(handle, extra_env={"PYKUEUE_JOBS__POD_REPLACEMENT_POLICY": "Failed"})
    try:
        yield handle
    finally:
        labmod.pykueue_down(handle)


def test_a_deleted_pod_of_a_queued_job_is_replaced_only_once_terminal(
        lab: LabHandle, replacing_on_failure: labmod.Lab) -> None:
    seen: list[str] = []

    def policy(ns: str) -> None:
        seen.append(lab.get("job", "j", "-n", ns)["spec"].get("podReplacementPolicy"))

    gpus = h4_gpus_running(lab, "podrepl", on_job=policy)
    assert seen == ["Failed"], f"the Job's podReplacementPolicy: {seen}"
    assert gpus <= 1, f"{gpus} GPUs Running for j, admitted for 1"

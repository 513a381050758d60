"""The e2e fixture: pykueue started fresh in the lab for each module (counters at zero)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.labfixture import ROOT, LabHandle

sys.path.insert(0, str(ROOT / "hack"))
import lab as labmod  # noqa: E402
import operators as ops  # noqa: E402
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


@contextmanager
def operators_running(lab: LabHandle, *names: str) -> Iterator[None]:
    """The named operators (CRDs and controllers) running in the lab for the block; those this
    started are stopped after it. Skips the test when one is not built."""
    for name in names:
        op = ops.OPERATORS[name]
        if not op.built:
            pytest.skip(f"{name} {op.version} not built ({op.binary} missing): "
                        "run `make operators`")
    handle = labmod.from_args(str(lab.state), lab.port_base, str(lab.bin_dir))
    running = [n for n in names if labmod._pid(handle, n)]
    r = lab.lab_cmd("operators-up", *names, check=False)
    assert r.returncode == 0, f"operators-up {' '.join(names)} failed:\n{r.stdout}\n{r.stderr}"
    try:
        yield
    finally:
        for n in reversed(names):
            if n not in running:
                lab.lab_cmd("operators-down", n, check=False)


def gpu_queue(lab: LabHandle, ns: str, cq: str, rf: str, gpus: int, flavor: dict) -> None:
    """A ResourceFlavor ``rf`` with ``flavor`` as its spec (node labels, tolerations), a
    ClusterQueue ``cq`` of ``gpus`` GPUs on it, and the LocalQueue ``lq`` in ``ns`` to it."""
    lab.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
         "metadata": {"name": rf}, "spec": flavor},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": cq},
         "spec": {"namespaceSelector": {}, "resourceGroups": [
             {"coveredResources": ["nvidia.com/gpu"], "flavors": [
                 {"name": rf, "resources": [{"name": "nvidia.com/gpu",
                                             "nominalQuota": gpus}]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": "lq", "namespace": ns}, "spec": {"clusterQueue": cq}},
    ]}))

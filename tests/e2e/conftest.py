"""The e2e fixtures: pykueue started fresh in the lab for each module (counters at zero); the
MultiKueue labs handed from one module to the next (``mk_kept``)."""

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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The e2e modules that use the MultiKueue labs (fixture ``sites`` of
    test_multikueue.py: two worker labs beside the session's) run one after another, at the
    place of the first of them, so that the worker labs start once for all of them (``sites``
    hands them to the next module) instead of once per module. Each module's tests keep their
    order; the other modules keep theirs."""
    def module(item: pytest.Item) -> pytest.Module | None:
        return item.getparent(pytest.Module)

    mk_modules = {module(i) for i in items if "sites" in getattr(i, "fixturenames", ())}
    if len(mk_modules) < 2:
        return
    moved = [i for i in items if module(i) in mk_modules]
    first = next(n for n, i in enumerate(items) if module(i) in mk_modules)
    rest = [i for i in items if module(i) not in mk_modules]
    items[:] = rest[:first] + moved + rest[first:]


@pytest.fixture(scope="session")
def mk_kept(lab: LabHandle) -> Iterator[set[str]]:
    """The names of the MultiKueue labs (hack/multikueue_lab.py) whose pykueue (the manager,
    the session's lab) or whole lab (a worker) a module's ``sites`` started and left running
    for the next module (test_multikueue.py); those still running at the end of the session
    (a run stopped early: ``-x``) are stopped here."""
    kept: set[str] = set()
    yield kept
    if kept:
        import multikueue_lab as mk

        manager, *workers = mk.sites(str(lab.state), lab.port_base)
        for site in (manager, *workers):
            if site.name in kept:
                site.lab("pykueue-down", check=False)
                if site is not manager:
                    site.lab("down", check=False)


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


@pytest.fixture(scope="session")
def seed_run(lab: LabHandle) -> object:
    """The seed scenario played once in the session for test_dashboard_seed.py and
    test_scenario.py, on a pykueue of its own stopped after it (tests/e2e/seed_play.py)."""
    from tests.e2e import seed_play

    return seed_play.play(lab)


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

"""The conformance suite's target: a private lab running pykueue or real Kueue.

``PYKUEUE_CONFORMANCE_TARGET=pykueue`` (the default, part of ``make test``): a lab of its own
(hack/lab.py) with ``pykueue serve`` deployed as a user would (``hack/lab.py pykueue-up``: its
ServiceAccount, webhooks, kube-scheduler extender). ``=kueue`` (``make conformance-kueue``, needs
``make kueue`` and root): the same lab with Kueue v0.17.1's CRDs and manager
(``hack/kueue_lab.py up``). The tests talk to the API server only.

State in ``<tmp>/pykueue-conformance-<target>-<port base>``; ports from
``CONFORMANCE_PORT_BASE`` (default: the first free block of 10 from 20540); the lab is stopped
at the end unless ``LAB_KEEP`` is set.

Fair sharing is off, as both ship it; a test module that needs it uses the ``fair_sharing``
fixture: the target's scheduler (pykueue's process, Kueue's manager) is restarted on the same
lab with fair sharing on (Kueue's Configuration ``fairSharing``; ``PYKUEUE_FAIR_SHARING__*``)
with the module's ``FAIR_SHARING_STRATEGIES`` (default Kueue's) for that module, and off
again after it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conformance.support import Target
from tests.labfixture import ROOT, LabHandle

TARGETS = ("pykueue", "kueue")
# waitForPodsReady, set for both targets so that no result depends on a default (pykueue's is
# on, as Kueue v0.19's; Kueue v0.17.1's is off): off, as Kueue v0.17.1 ships it. The suite's
# own Workloads have no pods (it plays their owner), so a timeout would only evict them.
# None: off; seconds: on with that timeout in both.
PODS_READY_TIMEOUT: float | None = None


def pods_ready_settings(name: str) -> tuple[dict[str, str], list[str]]:
    """(pykueue's environment, ``hack/kueue_lab.py up`` arguments) for target ``name`` that set
    waitForPodsReady to ``PODS_READY_TIMEOUT``."""
    if PODS_READY_TIMEOUT is None:
        env = {"PYKUEUE_WAIT_FOR_PODS_READY__ENABLE": "false"}
        args: list[str] = []  # Kueue v0.17.1: no waitForPodsReady section is off
    else:
        env = {"PYKUEUE_WAIT_FOR_PODS_READY__ENABLE": "true",
               "PYKUEUE_WAIT_FOR_PODS_READY__TIMEOUT_SECONDS": f"{PODS_READY_TIMEOUT:g}"}
        args = ["--wait-for-pods-ready-timeout", f"{PODS_READY_TIMEOUT:g}"]
    return (env, []) if name == "pykueue" else ({}, args)


def _free_base(start: int) -> int:
    for base in range(start, start + 400, 10):
        ok = True
        for port in range(base, base + 8):
            with socket.socket() as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError(f"no free block of ports from {start}")


def _run(cmd: list[str], env: dict[str, str]) -> None:
    r = subprocess.run(cmd, env=env, cwd=ROOT, text=True, capture_output=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stdout}\n{r.stderr}")


def _job_webhooks_see_unlabelled_jobs(lab: LabHandle) -> None:
    """The lab's pykueue Job webhooks as manifests/overlays/unlabelled-jobs sets them: no
    objectSelector, every namespace but kube-system and pykueue-system."""
    hooks = {"mutatingwebhookconfiguration": "mjob.pykueue.io",
             "validatingwebhookconfiguration": "vjob.pykueue.io"}
    for kind, hook in hooks.items():
        for cfg in lab.get(kind, "-l", "app.kubernetes.io/name=pykueue")["items"]:
            found = [w for w in cfg["webhooks"] if w["name"] == hook]
            for w in found:
                w.pop("objectSelector", None)
                w["namespaceSelector"] = {"matchExpressions": [{
                    "key": "kubernetes.io/metadata.name", "operator": "NotIn",
                    "values": ["kube-system", "pykueue-system"]}]}
            if found:
                lab.kubectl("replace", "-f", "-", input=json.dumps(cfg))


def _pykueue_up(py: str, env: dict[str, str], lab: LabHandle, fair: list[str] | None) -> None:
    # Kueue v0.17.1's LocalQueueDefaulting is GA and locked on; pykueue's is a setting,
    # off by default, that needs the Job webhooks to see unlabelled Jobs
    # (manifests/overlays/unlabelled-jobs): both on here, so the targets compare alike.
    _run([py, str(ROOT / "hack" / "lab.py"), "pykueue-up"],
         {**env, "PYKUEUE_JOBS__LOCAL_QUEUE_DEFAULTING": "true",
          **pods_ready_settings("pykueue")[0],
          **({"PYKUEUE_FAIR_SHARING__ENABLE": "true",
              "PYKUEUE_FAIR_SHARING__PREEMPTION_STRATEGIES": json.dumps(fair)} if fair else {})})
    _job_webhooks_see_unlabelled_jobs(lab)


def _restart(t: Target, fair: list[str] | None) -> None:
    """Restart ``t``'s scheduler on its lab with fair sharing on with the preemption
    strategies ``fair``, or off (None)."""
    py, env = sys.executable, t.env
    if t.name == "pykueue":
        _run([py, str(ROOT / "hack" / "lab.py"), "pykueue-down"], env)
        _pykueue_up(py, env, t.lab, fair)
    else:
        _run([py, str(ROOT / "hack" / "kueue_lab.py"), "restart",
              *pods_ready_settings("kueue")[1],
              *([f"--fair-sharing={','.join(fair)}"] if fair else [])], env)


@pytest.fixture(scope="module")
def fair_sharing(target: Target, request: pytest.FixtureRequest) -> Iterator[Target]:
    """``target`` with fair sharing on for one test module (see the module doc), with the
    module's ``FAIR_SHARING_STRATEGIES`` (default: Kueue's, S2-a then S2-b)."""
    _restart(target, list(getattr(request.module, "FAIR_SHARING_STRATEGIES",
                                  ["LessThanOrEqualToFinalShare", "LessThanInitialShare"])))
    try:
        yield target
    finally:
        _restart(target, None)


@pytest.fixture(scope="session")
def target() -> Iterator[Target]:
    name = os.environ.get("PYKUEUE_CONFORMANCE_TARGET", "pykueue")
    if name not in TARGETS:
        raise pytest.UsageError(f"PYKUEUE_CONFORMANCE_TARGET={name!r}: one of {TARGETS}")
    base = int(os.environ.get("CONFORMANCE_PORT_BASE") or _free_base(20540))
    # One state folder per port block: two checkouts running the suite at once (free blocks
    # differ) never stop each other's lab.
    state = Path(tempfile.gettempdir()) / f"pykueue-conformance-{name}-{base}"
    bins = Path(os.environ.get("LAB_BIN_DIR", ROOT / ".k8sbin" / "current")).resolve()
    env = {**os.environ, "LAB_STATE_DIR": str(state), "LAB_PORT_BASE": str(base),
           "LAB_BIN_DIR": str(bins), "PYKUEUE_PORT": str(base + 5)}
    lab = LabHandle(state=state, port_base=base, bin_dir=bins)
    lab.lab_cmd("down", check=False)
    py = sys.executable
    wfpr_args = pods_ready_settings(name)[1]
    if name == "pykueue":
        _run([py, str(ROOT / "hack" / "lab.py"), "up"], env)
        _pykueue_up(py, env, lab, fair=None)
        down = [py, str(ROOT / "hack" / "lab.py"), "down"]
    else:
        _run([py, str(ROOT / "hack" / "kueue_lab.py"), "up", *wfpr_args], env)
        down = [py, str(ROOT / "hack" / "kueue_lab.py"), "down"]
    try:
        yield Target(name, lab, env)
    finally:
        if not os.environ.get("LAB_KEEP"):
            subprocess.run(down, env=env, cwd=ROOT, capture_output=True, timeout=300)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under plain ``make test`` (no PYKUEUE_CONFORMANCE_TARGET set) only the seed story and
    the scenarios marked ``make_test`` run (about a minute against pykueue), to keep within
    make test's time budget; ``make conformance`` / ``conformance-kueue`` set the target and
    run every scenario."""
    if os.environ.get("PYKUEUE_CONFORMANCE_TARGET"):
        return
    skip = pytest.mark.skip(reason="`make conformance` runs it (make test's time budget)")
    for item in items:
        if "conformance" in Path(str(item.fspath)).parts and \
                Path(str(item.fspath)).name != "test_seed_story.py" and \
                item.get_closest_marker("make_test") is None:
            item.add_marker(skip)

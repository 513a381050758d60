"""The seed scenario (hack/scenario.py, checked) played once in a session for two tests:
test_dashboard_seed.py's (the dashboard in headless Chromium before the scenario and after its
steps 1 and 2) and test_scenario.py's (every step, then /metrics). One play serves both: a
fresh pykueue (counters at zero) under its ServiceAccount, the training-operator started
before it when built (step 7, as `make run` has it), the dashboard looked at on the way. A
failure is kept for the test it belongs to: a dashboard check's for the dashboard's test (the
scenario goes on), the scenario's for both, /metrics' for test_scenario.py's.

On a fresh machine hack/test.sh takes both files only once the training-operator is built
(hack/test_waves.py NEEDS), so every play there has step 7."""

from __future__ import annotations

import json
import re
import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.browser import Browser, chromium_path
from tests.integration.test_operators import operators_running
from tests.labfixture import ROOT, LabHandle

sys.path.insert(0, str(ROOT / "hack"))
import lab as labmod  # noqa: E402
import operators as ops  # noqa: E402
import scenario  # noqa: E402

RESEARCH_SA = "dashboard-viewer"


@dataclass
class SeedRun:
    """What the play saw. ``dashboard_failures``: the dashboard checks that failed (None:
    Chromium is not installed, the dashboard was not looked at); ``error``: the scenario's own
    failure; ``metrics``: the /metrics scrape after the scenario (None when it failed)."""

    operators: bool
    lines: list[str] = field(default_factory=list)
    outcomes: dict[str, Any] = field(default_factory=dict)
    error: BaseException | None = None
    metrics: dict[tuple[str, frozenset], float] | None = None
    metrics_error: BaseException | None = None
    dashboard_failures: list[BaseException] | None = None


def research_reader() -> str:
    docs = [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": RESEARCH_SA, "namespace": "research"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "dashboard-localqueue-reader", "namespace": "research"},
         "rules": [{"apiGroups": ["kueue.x-k8s.io"], "resources": ["localqueues"],
                    "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "dashboard-viewer-reads-localqueues", "namespace": "research"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": "dashboard-localqueue-reader"},
         "subjects": [{"kind": "ServiceAccount", "name": RESEARCH_SA,
                       "namespace": "research"}]},
    ]
    return "\n---\n".join(json.dumps(d) for d in docs)


def metrics(lab: labmod.Lab) -> dict[tuple[str, frozenset], float]:
    """The scrape, as Prometheus would: with a token allowed to get /metrics (issue 14)."""
    ctx = ssl.create_default_context(cafile=str(ROOT / "certs" / "out" / "ca.crt"))
    url = f"https://127.0.0.1:{labmod.PYKUEUE_PORT}/metrics"
    req = urllib.request.Request(  # noqa: S310 - https to the lab's pykueue
        url, headers={"Authorization": f"Bearer {scenario.viewer_token(lab)}"})
    with urllib.request.urlopen(req, context=ctx, timeout=10) as r:  # noqa: S310
        text = r.read().decode()
    out: dict[tuple[str, frozenset], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


class DashboardScenario(scenario.Scenario):
    """The seed scenario with the dashboard looked at after steps 1 and 2; a failed look is
    kept in ``failures`` (the scenario goes on)."""

    def __init__(self, *args, browsers: tuple[Browser, Browser], admin_token: str,
                 user_token: str, failures: list[BaseException], **kw) -> None:
        super().__init__(*args, **kw)
        self.admin, self.user = browsers
        self.tokens = admin_token, user_token
        self.failures = failures
        self.url = f"https://127.0.0.1:{labmod.PYKUEUE_PORT}/dashboard"
        # Workloads are named after their Job as Kueue names them: job-train-6-<hash>.
        self.train6 = '[data-workload^="research/job-train-6-"]'

    def step1_submit(self) -> None:
        super().step1_submit()
        with kept(self.failures):
            self.admin.open(f"{self.url}#token={self.tokens[0]}")
            row = self.admin.wait_text("WaitingForQuota", self.train6)
            assert "pending" in row and "nvidia.com/gpu" in row, row
            # The ETA may read "not computed yet" for up to eta_min_interval_seconds (5 s)
            # when the cohort's last run (for serve-4) was that recent: wait for the computed
            # one.
            eta = self.admin.wait_text("(bounded)", f"{self.train6} td.eta", timeout=20)
            assert re.fullmatch(r"(in ~\d+[ms]|now) \(bounded\)", eta), eta
            self.user.open("about:blank")
            self.user.open(f"{self.url}#token={self.tokens[1]}")
            text = self.user.wait_text("research/job-train-6-")
            assert "user view" in text and "inference/" not in text, text
            assert "Cohorts and ClusterQueues" not in text

    def step2_borrow(self) -> None:
        super().step2_borrow()
        with kept(self.failures):
            # The admin page stayed open: it polls.
            self.admin.wait_text("admitted", self.train6, timeout=20)
            cq = self.admin.wait_text("borrowed 2", '[data-cq="research-cq"]', timeout=20)
            assert "a100-flavor · nvidia.com/gpu" in cq and "used 6 / nominal 4" in cq, cq
            assert self.admin.js("document.getElementById('error').hidden"), \
                self.admin.text("#error")  # no script error on the way


@contextmanager
def kept(failures: list[BaseException]) -> Iterator[None]:
    """Run the block; an exception it raises is appended to ``failures`` instead."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - kept for the dashboard's test to raise
        failures.append(exc)


def signed_out(browser: Browser) -> None:
    """Without a token: 401 from the API, and the page asks to sign in."""
    ctx = ssl.create_default_context(cafile=str(ROOT / "certs" / "out" / "ca.crt"))
    try:
        urllib.request.urlopen(  # noqa: S310
            f"https://127.0.0.1:{labmod.PYKUEUE_PORT}/api/v1/dashboard", context=ctx, timeout=10)
    except urllib.error.HTTPError as refused:
        assert refused.code == 401, refused.code
    else:
        raise AssertionError("GET /api/v1/dashboard without a token was answered")
    browser.open(f"https://127.0.0.1:{labmod.PYKUEUE_PORT}/dashboard")
    text = browser.wait_text("Sign in")
    assert "not signed in" in text and "train-6" not in text, text


@contextmanager
def _training_operator(lab: LabHandle) -> Iterator[bool]:
    """The training-operator in the lab before pykueue starts, as `make run` has it (step 7);
    False when it is not built (step 7 is then left out, as `make run` does)."""
    if not ops.OPERATORS["training-operator"].built:
        yield False
        return
    with operators_running(lab, ["training-operator"]) as (started, _):
        yield "training-operator" in started


def play(lab: LabHandle) -> SeedRun:
    """Play the seed scenario once (see the module doc) and stop pykueue after it."""
    handle = labmod.from_args(str(lab.state), lab.port_base, str(lab.bin_dir))
    with _training_operator(lab) as operators:
        labmod.pykueue_down(handle)
        scenario.prepare(handle)
        labmod.kubectl(handle, "apply", "-f", "-", input=research_reader())
        labmod.pykueue_up(handle)
        try:
            return _play(handle, SeedRun(operators=operators))
        finally:
            labmod.pykueue_down(handle)


def _play(lab: labmod.Lab, run: SeedRun) -> SeedRun:
    def kubectl(*args: str, input: str | None = None, check: bool = True):
        return labmod.kubectl(lab, *args, input=input, check=check)

    opened: list[Browser] = []
    make: Callable[..., scenario.Scenario] = scenario.Scenario
    kw: dict[str, Any] = {}
    if chromium_path() is not None:
        run.dashboard_failures = []
        with kept(run.dashboard_failures):
            opened.append(Browser())
            opened.append(Browser())
            kw = {"browsers": (opened[0], opened[1]),
                  "admin_token": scenario.viewer_token(lab),
                  "user_token": labmod.sa_token(lab, "research", RESEARCH_SA, 3600),
                  "failures": run.dashboard_failures}
            make = DashboardScenario
            with kept(run.dashboard_failures):
                signed_out(opened[1])
    try:
        run.outcomes = make(kubectl, say=run.lines.append, check=True, timeout=120,
                            **kw).run(with_operators=run.operators)
    except Exception as exc:  # noqa: BLE001 - kept for both tests to raise
        run.error = exc
    finally:
        for b in opened:
            b.close()
    if run.error is None:
        try:
            run.metrics = metrics(lab)
        except Exception as exc:  # noqa: BLE001 - kept for test_scenario.py to raise
            run.metrics_error = exc
    return run

"""Issue 15 e2e: the dashboard of the real pykueue in the lab, in headless Chromium, during the
seed scenario (hack/scenario.py, checked): after step 1 the admin sees research/train-6
waiting with its reason and a bounded ETA (serve-4 has a 60 s limit) and a research user
sees train-6 but not inference's serve-4; after step 2 the page, without reload, shows
train-6 admitted and research-cq borrowing 2 A100s. Without a token the API answers 401 and
the page asks to sign in."""

from __future__ import annotations

import json
import re
import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from tests.browser import SKIP_REASON, Browser, chromium_path
from tests.labfixture import ROOT, LabHandle

sys.path.insert(0, str(ROOT / "hack"))
import lab as labmod  # noqa: E402
import scenario  # noqa: E402

pytestmark = pytest.mark.skipif(chromium_path() is None, reason=SKIP_REASON)

RESEARCH_SA = "dashboard-viewer"


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


@pytest.fixture(scope="module")
def pykueue_in_lab(lab: LabHandle) -> Iterator[labmod.Lab]:
    handle = labmod.from_args(str(lab.state), lab.port_base, str(lab.bin_dir))
    labmod.pykueue_down(handle)
    scenario.prepare(handle)
    labmod.kubectl(handle, "apply", "-f", "-", input=research_reader())
    labmod.pykueue_up(handle)
    try:
        yield handle
    finally:
        labmod.pykueue_down(handle)


@pytest.fixture(scope="module")
def browsers() -> Iterator[tuple[Browser, Browser]]:
    admin, user = Browser(), Browser()
    yield admin, user
    admin.close()
    user.close()


class DashboardScenario(scenario.Scenario):
    """The seed scenario with the dashboard looked at after steps 1 and 2."""

    def __init__(self, *args, browsers: tuple[Browser, Browser], admin_token: str,
                 user_token: str, **kw) -> None:
        super().__init__(*args, **kw)
        self.admin, self.user = browsers
        self.tokens = admin_token, user_token
        self.url = f"https://127.0.0.1:{labmod.PYKUEUE_PORT}/dashboard"
        # Workloads are named after their Job as Kueue names them: job-train-6-<hash>.
        self.train6 = '[data-workload^="research/job-train-6-"]'

    def step1_submit(self) -> None:
        super().step1_submit()
        self.admin.open(f"{self.url}#token={self.tokens[0]}")
        row = self.admin.wait_text("WaitingForQuota", self.train6)
        assert "pending" in row and "nvidia.com/gpu" in row, row
        # The ETA may read "not computed yet" for up to eta_min_interval_seconds (5 s) when
        # the cohort's last run (for serve-4) was that recent: wait for the computed one.
        eta = self.admin.wait_text("(bounded)", f"{self.train6} td.eta", timeout=20)
        assert re.fullmatch(r"(in ~\d+[ms]|now) \(bounded\)", eta), eta
        self.user.open("about:blank")
        self.user.open(f"{self.url}#token={self.tokens[1]}")
        text = self.user.wait_text("research/job-train-6-")
        assert "user view" in text and "inference/" not in text, text
        assert "Cohorts and ClusterQueues" not in text

    def step2_borrow(self) -> None:
        super().step2_borrow()
        # The admin page stayed open: it polls.
        self.admin.wait_text("admitted", self.train6, timeout=20)
        cq = self.admin.wait_text("borrowed 2", '[data-cq="research-cq"]', timeout=20)
        assert "a100-flavor · nvidia.com/gpu" in cq and "used 6 / nominal 4" in cq, cq
        assert self.admin.js("document.getElementById('error').hidden"), \
            self.admin.text("#error")  # no script error on the way


def test_dashboard_during_the_seed_scenario(pykueue_in_lab: labmod.Lab, browsers) -> None:
    lab = pykueue_in_lab
    admin_token = scenario.viewer_token(lab)
    user_token = labmod.sa_token(lab, "research", RESEARCH_SA, 3600)

    # Without a token: 401 from the API, and the page asks to sign in.
    ctx = ssl.create_default_context(cafile=str(ROOT / "certs" / "out" / "ca.crt"))
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(  # noqa: S310
            f"https://127.0.0.1:{labmod.PYKUEUE_PORT}/api/v1/dashboard", context=ctx, timeout=10)
    assert refused.value.code == 401
    anon = browsers[1]
    anon.open(f"https://127.0.0.1:{labmod.PYKUEUE_PORT}/dashboard")
    text = anon.wait_text("Sign in")
    assert "not signed in" in text and "train-6" not in text

    def kubectl(*args: str, input: str | None = None, check: bool = True):
        return labmod.kubectl(lab, *args, input=input, check=check)

    lines: list[str] = []
    DashboardScenario(kubectl, say=lines.append, check=True, timeout=120, browsers=browsers,
                      admin_token=admin_token, user_token=user_token).run()

"""Issue 15 e2e: the dashboard of the real pykueue in the lab, in headless Chromium, during the
seed scenario (hack/scenario.py, checked): after step 1 the admin sees research/train-6
waiting with its reason and a bounded ETA (serve-4 has a 60 s limit) and a research user
sees train-6 but not inference's serve-4; after step 2 the page, without reload, shows
train-6 admitted and research-cq borrowing 2 A100s. Without a token the API answers 401 and
the page asks to sign in. The play is the session's ``seed_run`` (tests/e2e/seed_play.py:
the checks are ``DashboardScenario``'s and ``signed_out``), which test_scenario.py asserts on
too."""

from __future__ import annotations

import pytest

from tests.browser import SKIP_REASON, chromium_path
from tests.e2e.seed_play import SeedRun

pytestmark = pytest.mark.skipif(chromium_path() is None, reason=SKIP_REASON)


def test_dashboard_during_the_seed_scenario(seed_run: SeedRun) -> None:
    assert seed_run.dashboard_failures is not None, "the dashboard was not looked at"
    for failure in seed_run.dashboard_failures:
        raise failure
    if seed_run.error is not None:
        raise seed_run.error

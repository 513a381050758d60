"""The dashboard in a real headless Chromium (tests/browser.py), against pykueue's app under
uvicorn with TLS, on the seed scenario's GPU setup built around the current time: what a
person sees as admin and as a research user, live updates, refused access, and
`pykueue dashboard` (the localhost server with the kubeconfig's token).

State (cohort ai, a100 only): inference-cq and research-cq with 4 GPUs nominal each,
borrowingLimit 4. inference/serve-4 (4 GPUs, maximumExecutionTimeSeconds 600) was admitted
60 s ago; research/train-6 (6 GPUs) waits: inference's GPUs are all in use. serve-4 ends at
the latest 540 s from now, then train-6 fits by borrowing 2 of inference's: its ETA is
"in ~9m (bounded)".
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.controllers.history import UsageHistory
from app.core.decisions import Admit
from app.core.eta import ArrivalModel, EtaBoard
from app.core.scheduling_cycle import Scheduler
from app.core.spec import LocalQueue
from app.core.types import ClusterQueueName, WorkloadKey
from tests.browser import SKIP_REASON, Browser, chromium_path
from tests.builders import Sim, cluster_queue, workload
from tests.status_server import Server, start_dashboard_command

pytestmark = pytest.mark.skipif(chromium_path() is None, reason=SKIP_REASON)


def seed_like_cluster(now: float) -> Scheduler:
    sim = Sim(cluster_queue("inference-cq").cohort("ai").flavor("a100", gpu=4, borrowing_limit=4)
              .preemption(reclaim="Any"),
              cluster_queue("research-cq").cohort("ai").flavor("a100", gpu=4, borrowing_limit=4),
              namespaces={"research": {}, "inference": {}})
    c = sim.c
    c.add_local_queue(LocalQueue("research", "research", ClusterQueueName("research-cq")))
    c.add_local_queue(LocalQueue("inference", "inference", ClusterQueueName("inference-cq")))
    c.add_workload(workload("inference/serve-4").queue("inference").pods(4, gpu=1).limit(600)
                   .build(creation=now - 70))
    assert [d for d in c.schedule(now - 60) if isinstance(d, Admit)]
    c.add_workload(workload("research/train-6").queue("research").pods(6, gpu=1)
                   .build(creation=now - 30))
    for _ in range(3):
        c.schedule(now - 20)
    assert c.workload(WorkloadKey("research/train-6")).state == "pending"
    return c


@pytest.fixture
def server(certs: Path) -> Iterator[Server]:
    s = Server(certs, seed_like_cluster(time.time()))
    s.app.state.eta = EtaBoard(min_interval=0.0)
    s.app.state.history = UsageHistory()
    s.app.state.history.sample(s.app.state.cluster, time.time() - 60)
    s.start()
    yield s
    s.stop()


@pytest.fixture
def stream_server(certs: Path) -> Iterator[Server]:
    """The same state, and inference has been sending a priority-10 job of 4 GPUs (300 s
    limit) every 300 s for the last 50 min: projected ahead of train-6 for 50 min more
    (Gott's median), 17 min to 150 min more at the ends of the 50% interval."""
    now = time.time()
    s = Server(certs, seed_like_cluster(now))
    arrivals = ArrivalModel(window_seconds=3600)
    for i in range(11):
        arrivals.observe(workload(f"inference/hi-{i}").queue("inference").priority(10)
                         .pods(4, gpu=1).limit(300).build(creation=now - 3000 + 300 * i))
    s.app.state.eta = EtaBoard(min_interval=0.0, arrivals=arrivals)
    s.app.state.history = UsageHistory()
    s.start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    b = Browser()
    yield b
    b.close()


def _open(browser: Browser, url: str) -> None:
    # A fresh tab state: no token kept from an earlier test.
    browser.open("about:blank")
    browser.js("sessionStorage.clear()")
    browser.open(url)


def test_admin_sees_train6_waiting_with_reason_and_eta_then_admitted_borrowing(server, browser):
    _open(browser, f"{server.url}/dashboard#token=admin-token")
    row = browser.wait_text("research/train-6", '[data-workload="research/train-6"]')
    assert "pending" in row and "WaitingForQuota" in row
    assert "6 requested, 4 available" in row, row
    assert "in ~9m (bounded)" in row
    assert "#token" not in browser.js("location.href")  # the token left the address bar
    inference = browser.text('[data-cq="inference-cq"]')
    assert "used 4 / nominal 4" in inference
    assert "Cohorts and ClusterQueues" in browser.text()

    def finish_serve4() -> None:
        c = server.app.state.cluster
        c.finish(WorkloadKey("inference/serve-4"))
        assert [d.workload for d in c.schedule(time.time()) if isinstance(d, Admit)] == \
            ["research/train-6"]
        server.app.state.history.sample(c, time.time())  # research-cq now has usage

    server.call(finish_serve4)
    # The page polls every 5 s: no reload.
    row = browser.wait_text("admitted", '[data-workload="research/train-6"]', timeout=15)
    research = browser.wait_text("borrowed 2", '[data-cq="research-cq"]')
    assert "used 6 / nominal 4 · borrowed 2" in research
    assert "lent 2" in browser.text('[data-cq="inference-cq"]')
    # research-cq's chart got a usage series when it first used GPUs: redrawn, no script error.
    browser.wait_text("used a100/nvidia.com/gpu", '[data-history="research-cq"]')
    assert browser.js("document.querySelectorAll('[data-history=research-cq] canvas').length") == 1
    assert browser.js("document.getElementById('error').hidden"), browser.text("#error")


def test_research_user_sees_only_research_workloads(server, browser):
    _open(browser, f"{server.url}/dashboard#token=research-token")
    text = browser.wait_text("research/train-6")
    assert "user view" in text and "My Workloads (namespaces: research)" in text
    assert "inference/serve-4" not in text
    assert "Cohorts and ClusterQueues" not in text  # no admin part without get clusterqueues


def test_without_a_token_the_page_asks_to_sign_in_and_shows_no_data(server, browser):
    _open(browser, f"{server.url}/dashboard")
    text = browser.wait_text("Sign in")
    assert "not signed in" in text and "train-6" not in text and "research-cq" not in text
    _open(browser, f"{server.url}/dashboard#token=forged")
    assert "invalid bearer token" in browser.wait_text("invalid bearer token")
    # Signing in with the form: the token pasted, then the admin view.
    browser.js("document.getElementById('token').value = 'admin-token';"
               "document.getElementById('signin-form').requestSubmit()")
    assert "admin · admin view" in browser.wait_text("admin view")
    assert not browser.js("document.getElementById('signin').checkVisibility()")


def test_pykueue_dashboard_shows_the_kubeconfig_users_view_without_a_token(
        server, browser, certs, tmp_path):
    proc, url = start_dashboard_command(server, certs, tmp_path)  # kubeconfig user: admin
    try:
        _open(browser, url)
        text = browser.wait_text("research/train-6")
        assert "admin · admin view" in text and "in ~9m (bounded)" in text
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_user_sees_the_range_of_an_eta_that_rests_on_projected_arrivals(stream_server, browser):
    def board_eta():
        st = stream_server.app.state
        run = st.eta.for_cluster_queue(st.cluster, ClusterQueueName("research-cq"), time.time())
        return run.etas[WorkloadKey("research/train-6")]

    eta = stream_server.call(board_eta)
    assert eta.basis.endswith("+arrivals") and eta.earliest is not None
    assert eta.earliest <= eta.start and (eta.latest is None or eta.start <= eta.latest)
    _open(browser, f"{stream_server.url}/dashboard#token=research-token")
    row = browser.wait_text("range", '[data-workload="research/train-6"]')
    assert "(estimated), range " in row and " to " in row, row
    # The interval reads as waits from now, the same as the ETA itself.
    assert re.search(r"in ~\d+[mh]\S* \(estimated\), range (now|\d+\S*) to (\?|\d+\S*)",
                     row), row

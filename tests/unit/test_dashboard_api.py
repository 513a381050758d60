"""The dashboard's JSON (app/api/dashboard.py) over the known state of tests/status_scenario.py:
what the admin and a namespace user see, 401 without a token, ETag/304, history and
preemptions; and the page and its vendored assets are served by pykueue itself."""

from __future__ import annotations

import httpx
import pytest

from app.config import Settings
from app.controllers.history import PreemptionLog, UsageHistory
from app.core.decisions import Preempt, PreemptionReason, Victim
from app.core.eta import EtaBoard
from app.core.types import ClusterQueueName, WorkloadKey
from app.main import create_app
from tests.status_scenario import build_cluster, reviewer

URL = "/api/v1/dashboard"


def make_app():
    app = create_app(Settings(controllers_enabled=False))
    app.state.cluster = build_cluster()
    app.state.access_reviewer = reviewer()
    app.state.eta = EtaBoard()
    app.state.history = UsageHistory(capacity=3)
    app.state.preemptions = PreemptionLog()
    return app


@pytest.fixture
async def client():
    app = make_app()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as c:
        c.app = app  # type: ignore[attr-defined]
        yield c


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_admin_sees_the_cohort_tree_with_borrowing_counts_and_every_workload(client):
    r = await client.get(URL, headers=auth("admin-token"))
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["admin"] is True and d["user"] == "admin"
    assert d["cohorts"] == [{"name": "ai", "clusterQueues": ["inference-cq", "research-cq"]},
                            {"name": None, "clusterQueues": ["solo-cq"]}]
    research = next(q for q in d["clusterQueues"] if q["name"] == "research-cq")
    assert (research["pending"], research["inadmissible"], research["admitted"]) == (3, 3, 1)
    gpu = research["resources"][0]
    assert (gpu["flavor"], gpu["resource"], gpu["nominal"], gpu["used"], gpu["borrowed"]) == (
        "a100", "nvidia.com/gpu", 4, 6, 2)
    inference = next(q for q in d["clusterQueues"] if q["name"] == "inference-cq")
    assert inference["resources"][0]["lent"] == 2
    names = [f"{w['namespace']}/{w['name']}" for w in d["workloads"]]
    # pending in admission order per ClusterQueue, then the admitted ones by name
    assert names[:3] == ["research/eval-1", "research/train-4", "team-b/probe"]
    assert {"inference/serve-2", "research/train-6", "ns/big"} <= set(names)
    eval1 = d["workloads"][0]
    assert eval1["position"] == 0 and eval1["reason"] == "WaitingForQuota"
    assert "3 requested, 0 available" in eval1["message"]
    # train-6 (no time limit, nothing learned) holds the GPUs eval-1 needs: unknown
    assert eval1["eta"] == {"start": None, "confidence": "unknown", "basis": "no end known"}


async def test_a_namespace_user_sees_only_their_namespace(client):
    r = await client.get(URL, headers=auth("research-token"))
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["admin"] is False and "clusterQueues" not in d and "preemptions" not in d
    assert d["namespaces"] == ["research"]
    names = {f"{w['namespace']}/{w['name']}" for w in d["workloads"]}
    assert names == {"research/eval-1", "research/train-4", "research/train-6"}
    assert all(lq["namespace"] == "research" for lq in d["localQueues"])


async def test_no_token_or_a_bad_one_is_refused(client):
    r = await client.get(URL)
    assert r.status_code == 401 and "missing bearer token" in r.json()["detail"]
    r = await client.get(URL, headers=auth("forged"))
    assert r.status_code == 401


async def test_etag_gives_304_until_something_changes(client):
    first = await client.get(URL, headers=auth("admin-token"))
    tag = first.headers["ETag"]
    again = await client.get(URL, headers=auth("admin-token") | {"If-None-Match": tag})
    assert again.status_code == 304 and again.content == b""
    client.app.state.cluster.finish(WorkloadKey("ns/big"))
    changed = await client.get(URL, headers=auth("admin-token") | {"If-None-Match": tag})
    assert changed.status_code == 200 and changed.headers["ETag"] != tag


async def test_history_ring_and_recent_preemptions_are_shown(client):
    app = client.app
    for t in (100.0, 130.0, 160.0, 190.0):  # capacity 3: the first sample drops out
        app.state.history.sample(app.state.cluster, t)
    app.state.preemptions.record(Preempt(
        WorkloadKey("inference/serve-4b"), ClusterQueueName("inference-cq"),
        (Victim(WorkloadKey("research/train-6"), ClusterQueueName("research-cq"),
                PreemptionReason.IN_COHORT_RECLAMATION, "reclaim"),)), 200.0)
    d = (await client.get(URL, headers=auth("admin-token"))).json()
    h = d["history"]["research-cq"]
    assert h["t"] == [130.0, 160.0, 190.0] and h["pending"] == [3, 3, 3]
    assert h["used"] == {"a100/nvidia.com/gpu": [6, 6, 6]}
    assert d["preemptions"] == [{
        "time": "1970-01-01T00:03:20Z", "preemptor": "inference/serve-4b",
        "clusterQueue": "inference-cq",
        "victims": [{"workload": "research/train-6", "reason": "InCohortReclamation"}]}]


async def test_the_page_and_its_vendored_chart_library_are_served_without_a_cdn(client):
    page = await client.get("/dashboard")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert "https://" not in page.text and "http://" not in page.text  # nothing from outside
    for path in ("/dashboard/static/app.js", "/dashboard/static/app.css",
                 "/dashboard/static/vendor/uplot/uPlot.iife.min.js",
                 "/dashboard/static/vendor/uplot/uPlot.min.css"):
        r = await client.get(path)
        assert r.status_code == 200 and len(r.content) > 500, path
    js = (await client.get("/dashboard/static/app.js")).text
    assert "innerHTML" not in js  # data reaches the page as text only

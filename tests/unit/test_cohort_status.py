"""Cohorts in the status API (``GET /api/v1/cohorts[/{name}]``, app/api/status.py through
``ClusterView``) and in ``pykueue status``, against a real uvicorn server (TLS) serving the
scenario of tests/status_scenario.py with a cohort tree added:

- Cohort ``org`` (a root with 2 A100 GPUs of its own) is the parent of Cohort ``ai`` (weight
  2), whose ClusterQueues are inference-cq (4 GPUs) and research-cq (4 GPUs, borrowing limit
  4): research's train-6 (6 GPUs) and inference's serve-2 (2 GPUs) use all 8 of ai's pool;
- Cohorts ``loop-a`` and ``loop-b`` name each other as parent (a cycle);
- fair sharing is on, so cohorts carry a weighted share."""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from app.api.access import Grant, StaticAccessReviewer, UserInfo
from app.cli import app as cli
from app.core.scheduling_cycle import Scheduler
from app.core.spec import (
    CohortSpec,
    FairSharing,
    FlavorQuotas,
    ResourceGroup,
    ResourceQuota,
)
from app.core.types import CohortName, FlavorName, ResourceName
from tests.status_scenario import TOKENS, build_cluster, reviewer
from tests.status_server import Server

GPU = ResourceName("nvidia.com/gpu")
COHORT_VIEWER = UserInfo("cohort-viewer", "uid-co")
QUEUE_ADMIN = UserInfo("queue-admin", "uid-qa")  # every ClusterQueue view, no cohorts


def cohort_cluster() -> Scheduler:
    c = build_cluster()
    c.fair_sharing = FairSharing()
    own = ResourceGroup((GPU,), (FlavorQuotas(FlavorName("a100"), (ResourceQuota(GPU, 2),)),))
    c.add_cohort(CohortSpec(CohortName("org"), resource_groups=(own,)))
    c.add_cohort(CohortSpec(CohortName("ai"), CohortName("org"), fair_weight_milli=2000))
    c.add_cohort(CohortSpec(CohortName("loop-a"), CohortName("loop-b")))
    c.add_cohort(CohortSpec(CohortName("loop-b"), CohortName("loop-a")))
    return c


def access() -> StaticAccessReviewer:
    """The scenario's table plus a user who may get Cohort ``ai`` only and one who may read
    every ClusterQueue and its pending list but no cohort."""
    base = reviewer()
    return StaticAccessReviewer(
        {**TOKENS, "cohort-ai-token": COHORT_VIEWER, "queue-admin-token": QUEUE_ADMIN}, [
            *base.grants,
            Grant(COHORT_VIEWER.username, ("get",), "kueue.x-k8s.io", ("cohorts",),
                  names=("ai",)),
            Grant(QUEUE_ADMIN.username, ("get",), "kueue.x-k8s.io", ("clusterqueues",)),
            Grant(QUEUE_ADMIN.username, ("get",), "visibility.kueue.x-k8s.io",
                  ("clusterqueues/pendingworkloads",)),
        ])


@pytest.fixture(scope="module")
def server(certs: Path) -> Iterator[Server]:
    s = Server(certs, cluster=cohort_cluster())
    s.app.state.access_reviewer = access()
    s.start()
    yield s
    s.stop()


def get(server: Server, certs: Path, path: str, token: str | None = "admin-token"
        ) -> httpx.Response:
    ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.get(server.url + path, verify=ctx, headers=headers)


AI = {
    "name": "ai", "parent": "org", "explicit": True, "active": True, "reason": "Ready",
    "message": "", "cohorts": [], "clusterQueues": ["inference-cq", "research-cq"],
    "subtreeClusterQueues": ["inference-cq", "research-cq"], "fairSharingWeight": "2",
    # 8 GPUs used of the 8 its members lend it: nothing borrowed from org, share 0.
    "weightedShare": 0,
    "resources": [{"flavor": "a100", "resource": "nvidia.com/gpu", "nominalQuota": "0",
                   "borrowingLimit": None, "lendingLimit": None, "subtreeQuota": "8",
                   "used": "8", "borrowed": "0"}],
}


def test_cohort_list_shows_the_tree_with_subtree_quota_usage_and_shares(server, certs) -> None:
    r = get(server, certs, "/api/v1/cohorts")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["kind"] == "CohortList"
    by = {c["name"]: c for c in body["items"]}
    assert list(by) == ["ai", "loop-a", "loop-b", "org"]  # sorted by name
    assert by["ai"] == AI
    # org: its own 2 GPUs plus ai's 8 -> subtree quota 10; every ClusterQueue below it.
    org = by["org"]
    assert (org["parent"], org["cohorts"], org["clusterQueues"]) == (None, ["ai"], [])
    assert org["subtreeClusterQueues"] == ["inference-cq", "research-cq"]
    assert org["resources"] == [{
        "flavor": "a100", "resource": "nvidia.com/gpu", "nominalQuota": "2",
        "borrowingLimit": None, "lendingLimit": None, "subtreeQuota": "10", "used": "8",
        "borrowed": "0"}]
    loop = by["loop-a"]
    assert (loop["active"], loop["reason"]) == (False, "CohortCycle")
    assert "loop-a -> loop-b -> loop-a" in loop["message"] or \
        "loop-b -> loop-a -> loop-b" in loop["message"]


def test_one_cohort_and_an_unknown_one(server, certs) -> None:
    r = get(server, certs, "/api/v1/cohorts/ai")
    assert r.status_code == 200, r.text
    assert r.json() == AI
    r = get(server, certs, "/api/v1/cohorts/nope")
    assert r.status_code == 404
    assert 'cohort "nope" not found' in r.json()["detail"]


@pytest.mark.parametrize(("path", "token", "status"), [
    ("/api/v1/cohorts", None, 401),
    ("/api/v1/cohorts", "bad-token", 401),
    ("/api/v1/cohorts", "nobody-token", 403),
    # A ClusterQueue viewer (get clusterqueues) does not see cohorts without get cohorts.
    ("/api/v1/cohorts", "cq-research-token", 403),
    ("/api/v1/cohorts/ai", "cq-research-token", 403),
    # A viewer of Cohort ai: that one, not the list or another.
    ("/api/v1/cohorts/ai", "cohort-ai-token", 200),
    ("/api/v1/cohorts", "cohort-ai-token", 403),
    ("/api/v1/cohorts/org", "cohort-ai-token", 403),
])
def test_cohort_views_need_get_on_cohorts(server, certs, path, token, status) -> None:
    r = get(server, certs, path, token)
    assert r.status_code == status, r.text
    if status == 403:
        assert "cohorts" in r.json()["detail"]


# ------------------------------------------------------------------------------ CLI


def run_status(server: Server, certs: Path, tmp_path: Path, *args: str,
               token: str = "admin-token"):
    env = {"COLUMNS": "200", "PYKUEUE_TOKEN": None, "PYKUEUE_URL": None,
           "KUBECONFIG": str(tmp_path / "no-kubeconfig")}
    return CliRunner().invoke(cli, ["status", "--server", server.url, "--ca-file",
                                    str(certs / "ca.crt"), "--token", token, *args], env=env)


def test_status_draws_the_cohort_tree(server, certs, tmp_path) -> None:
    r = run_status(server, certs, tmp_path)
    assert r.exit_code == 0, r.output
    tree = r.stdout[r.stdout.index("Cohorts"):]
    lines = tree.splitlines()
    org = next(i for i, ln in enumerate(lines) if ln.lstrip("├└─│ ").startswith("org"))
    ai = next(i for i, ln in enumerate(lines) if ln.lstrip("├└─│ ").startswith("ai "))
    assert org < ai  # ai below its parent
    assert lines[ai].index("ai") > lines[org].index("org")  # indented one level
    assert "gpu a100 8/10" in lines[org] and "own quota gpu a100 2" in lines[org]
    assert "gpu a100 8/8" in lines[ai] and "weight 2, share 0" in lines[ai]
    cqs = [ln for ln in lines if "ClusterQueue inference-cq" in ln or
           "ClusterQueue research-cq" in ln]
    assert len(cqs) == 2 and all(ln.index("ClusterQueue") > lines[ai].index("ai") for ln in cqs)
    loop = next(ln for ln in lines if "loop-a" in ln and "inactive" in ln)
    assert "CohortCycle" in loop


def test_status_without_get_cohorts_says_the_tree_is_left_out(server, certs, tmp_path) -> None:
    """Without `get cohorts` the tree is left out, and said to be (an absent section reads
    as "no cohorts"): the table view names the refusal, the JSON has ``forbidden``."""
    r = run_status(server, certs, tmp_path, token="queue-admin-token")
    assert r.exit_code == 0, r.output
    assert "research-cq" in r.stdout and "Cohorts" not in r.stdout
    note = " ".join(r.stdout[r.stdout.index("The cohort tree is not shown"):].split())
    assert note.startswith("The cohort tree is not shown: the status API refused it (HTTP "
                           '403: user "queue-admin" cannot'), note
    assert "pykueue-clusterqueue-viewer" in note
    r = run_status(server, certs, tmp_path, "-o", "json", token="queue-admin-token")
    assert r.exit_code == 0, r.output
    snap = json.loads(r.stdout)
    assert snap["cohorts"] is None and "cohorts" in snap["forbidden"]["cohorts"]
    r = run_status(server, certs, tmp_path, "-o", "json")
    snap = json.loads(r.stdout)
    assert [c["name"] for c in snap["cohorts"]] == ["ai", "loop-a", "loop-b", "org"]
    assert "forbidden" not in snap
    r = run_status(server, certs, tmp_path)
    assert "not shown" not in r.stdout

"""breaker6: ``pykueue status`` for a user who may read every ClusterQueue and the cohorts
but not the visibility API's ``clusterqueues/pendingworkloads`` (Kueue grants them apart:
its ClusterQueue viewer role has no pending list). The whole command failed with the first
list's 403; the queues and the tree are shown and the refused lists named (tidy6 did so for
the cohort tree only). Against the status API served over TLS with the static reviewer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.api.access import Grant, StaticAccessReviewer, UserInfo
from tests.status_scenario import TOKENS, reviewer
from tests.status_server import Server
from tests.unit.test_cohort_status import cohort_cluster, run_status

QUEUES_ONLY = UserInfo("queues-only", "uid-qo")


@pytest.fixture(scope="module")
def server(certs: Path) -> Iterator[Server]:
    s = Server(certs, cluster=cohort_cluster())
    s.app.state.access_reviewer = StaticAccessReviewer(
        {**TOKENS, "queues-only-token": QUEUES_ONLY}, [
            *reviewer().grants,
            Grant(QUEUES_ONLY.username, ("get",), "kueue.x-k8s.io",
                  ("clusterqueues", "cohorts")),
        ])
    s.start()
    yield s
    s.stop()


def test_status_without_the_pending_lists_shows_the_queues_and_names_the_refusal(
    server, certs, tmp_path
) -> None:
    r = run_status(server, certs, tmp_path, token="queues-only-token")
    assert r.exit_code == 0, r.output
    out = " ".join(r.stdout.split())
    assert "research-cq" in out and "Cohorts" in out
    assert "No pending Workloads." not in out  # it cannot know
    note = out[out.index("The pending lists of the ClusterQueues are not shown"):]
    assert note.startswith("The pending lists of the ClusterQueues are not shown: the status "
                           'API refused it (HTTP 403: user "queues-only" cannot'), note
    r = run_status(server, certs, tmp_path, "-o", "json", token="queues-only-token")
    assert r.exit_code == 0, r.output
    snap = json.loads(r.stdout)
    assert snap["pending"] == {} and "pendingworkloads" in snap["forbidden"]["pending"]
    assert "cohorts" not in snap["forbidden"]

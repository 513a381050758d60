"""The queue status API (app.api.status) over a core Scheduler built in process
(tests/status_scenario.py) with an in-process token table (StaticAccessReviewer): every
endpoint with exact figures, paging, and 401/403/503. Expected figures are derived in the
comments from the scenario."""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncIterator
from dataclasses import replace

import httpx
import pytest

from app.api.access import (
    AccessDecision,
    CachedAccessReviewer,
    ResourceAccess,
    ReviewUnavailable,
    StaticAccessReviewer,
    TokenResult,
    UserInfo,
)
from app.config import LeaderElectionSettings, Settings
from app.core.quantity import parse_quantity
from app.core.types import ClusterQueueName, WorkloadKey
from app.main import create_app
from tests.builders import workload
from tests.status_scenario import ADMIN, build_cluster, reviewer

# One replica without leader election: the metrics say replica_role="standalone".
STANDALONE = Settings(controllers_enabled=False,
                      leader_election=LeaderElectionSettings(enabled=False))

ADMIN_H = {"Authorization": "Bearer admin-token"}


def make_app(cluster=None, access=None):
    app = create_app(STANDALONE)
    app.state.cluster = build_cluster() if cluster is None else cluster
    app.state.access_reviewer = reviewer() if access is None else access
    return app


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = make_app()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as c:
        c.app = app  # type: ignore[attr-defined]
        yield c


async def get(c: httpx.AsyncClient, path: str, token: str | None = "admin-token",
              **params) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return await c.get(path, headers=headers, params=params)


# ------------------------------------------------------------------------------ ClusterQueues


async def test_cluster_queue_list_shows_quota_usage_borrowing_and_counts(client) -> None:
    r = await get(client, "/api/v1/clusterqueues")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["kind"] == "ClusterQueueList"
    by = {cq["name"]: cq for cq in body["items"]}
    assert list(by) == ["inference-cq", "research-cq", "solo-cq"]  # sorted by name

    # research-cq: train-6 uses 6 GPUs of nominal 4 -> borrowed 2; the cohort's 8 GPUs are all
    # in use -> available 0; 3 pending (eval-1, train-4, probe), all parked.
    assert by["research-cq"] == {
        "name": "research-cq", "cohort": "ai", "queueingStrategy": "BestEffortFIFO",
        "active": True, "reason": "Ready", "message": "Can admit new workloads",
        "pendingWorkloads": 3, "inadmissibleWorkloads": 3, "reservingWorkloads": 1,
        "admittedWorkloads": 1, "evictingWorkloads": 0,
        "resources": [{
            "flavor": "a100", "resource": "nvidia.com/gpu", "nominalQuota": "4",
            "borrowingLimit": "4", "lendingLimit": None, "used": "6", "borrowed": "2",
            "lent": "0", "available": "0",
        }],
    }
    # inference-cq: serve-2 holds 2 of its 4; research uses the other 2 -> lent 2. serve-2's
    # admission write is in flight: reserving 1, admitted 0.
    inf = by["inference-cq"]
    assert (inf["reservingWorkloads"], inf["admittedWorkloads"], inf["pendingWorkloads"]) == \
        (1, 0, 0)
    assert inf["resources"] == [{
        "flavor": "a100", "resource": "nvidia.com/gpu", "nominalQuota": "4",
        "borrowingLimit": None, "lendingLimit": None, "used": "2", "borrowed": "0",
        "lent": "2", "available": "0",
    }]
    # solo-cq: no cohort; big holds 6 CPUs and 20Gi of 8 CPUs and 32Gi; next waits at the head
    # of a StrictFIFO queue (not parked), after behind it.
    solo = by["solo-cq"]
    assert (solo["cohort"], solo["queueingStrategy"]) == (None, "StrictFIFO")
    assert (solo["pendingWorkloads"], solo["inadmissibleWorkloads"]) == (2, 0)
    assert [(x["resource"], x["nominalQuota"], x["used"], x["available"], x["borrowed"])
            for x in solo["resources"]] == [
        ("cpu", "8", "6", "2", "0"),
        ("memory", "32Gi", "20Gi", "12Gi", "0"),
    ]


async def test_quantities_are_canonical_and_exact(client) -> None:
    r = await get(client, "/api/v1/clusterqueues/solo-cq")
    mem = next(x for x in r.json()["resources"] if x["resource"] == "memory")
    assert parse_quantity(mem["used"], "memory") == 20 * 2**30
    assert parse_quantity(mem["available"], "memory") == 12 * 2**30


async def test_one_cluster_queue_and_unknown_one(client) -> None:
    r = await get(client, "/api/v1/clusterqueues/research-cq")
    assert r.status_code == 200
    listed = (await get(client, "/api/v1/clusterqueues")).json()["items"]
    assert r.json() == next(cq for cq in listed if cq["name"] == "research-cq")
    r = await get(client, "/api/v1/clusterqueues/nope")
    assert r.status_code == 404
    assert r.json()["detail"] == 'ClusterQueue "nope" not found'


async def test_inactive_cluster_queue_says_why(client) -> None:
    cluster = client.app.state.cluster
    cluster.delete_flavor("default-flavor")
    cq = (await get(client, "/api/v1/clusterqueues/solo-cq")).json()
    assert cq["active"] is False
    assert cq["reason"] == "FlavorNotFound"
    assert "default-flavor" in cq["message"]


# ------------------------------------------------------------------------------ pending


async def test_cluster_queue_pending_in_admission_order_with_reasons_and_numbers(client) -> None:
    r = await get(client, "/api/v1/clusterqueues/research-cq/pending")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["kind"] == "PendingWorkloadList"
    assert body["metadata"] == {"continue": None, "remainingItemCount": 0, "totalItems": 3}
    items = body["items"]
    # Priority 10 first, then by creation; positions in the LocalQueue count per LocalQueue.
    assert [(i["namespace"], i["name"], i["localQueueName"], i["positionInClusterQueue"],
             i["positionInLocalQueue"], i["priority"], i["created"]) for i in items] == [
        ("research", "eval-1", "lq-research", 0, 0, 10, "1970-01-01T00:16:49Z"),
        ("research", "train-4", "lq-research", 1, 1, 0, "1970-01-01T00:16:50Z"),
        ("team-b", "probe", "lq-b", 2, 0, 0, "1970-01-01T00:16:51Z"),
    ]
    first = items[0]
    assert (first["clusterQueue"], first["inadmissible"], first["reason"],
            first["conditionReason"]) == ("research-cq", True, "WaitingForQuota", "Pending")
    core = client.app.state.cluster.workload(WorkloadKey("research/eval-1"))
    assert first["message"] == core.message
    assert "3 requested, 0 available" in first["message"]
    # eval-1 needs 3 GPUs; research-cq could use 8 (4 nominal + borrowingLimit 4) in an idle
    # cohort, uses 6 (2 borrowed); the cohort's 8 are all in use, so the cohort binds.
    (s,) = first["shortfalls"]
    assert s == {
        "podSet": "main", "flavor": "a100", "resource": "nvidia.com/gpu", "requested": "3",
        "available": "0", "maximum": "8", "nominalQuota": "4", "used": "6", "borrowed": "2",
        "borrowingLimit": "4", "limitedBy": "cohort", "cohort": "ai",
        "message": core.shortfalls[0].describe(),
    }


async def test_strict_fifo_head_waits_unparked_and_the_next_has_no_reason_yet(client) -> None:
    items = (await get(client, "/api/v1/clusterqueues/solo-cq/pending")).json()["items"]
    assert [(i["name"], i["inadmissible"], i["reason"]) for i in items] == [
        ("next", False, "WaitingForQuota"), ("after", False, None)]
    assert items[0]["shortfalls"][0]["requested"] == "4"
    assert items[0]["shortfalls"][0]["available"] == "2"
    assert items[0]["shortfalls"][0]["limitedBy"] == "nominalQuota"
    assert items[1]["message"] == ""


async def test_local_queue_pending_lists_only_its_workloads(client) -> None:
    r = await get(client, "/api/v1/namespaces/research/localqueues/lq-research/pending")
    items = r.json()["items"]
    assert [(i["name"], i["positionInClusterQueue"], i["positionInLocalQueue"])
            for i in items] == [("eval-1", 0, 0), ("train-4", 1, 1)]
    r = await get(client, "/api/v1/namespaces/team-b/localqueues/lq-b/pending")
    assert [(i["name"], i["positionInClusterQueue"], i["positionInLocalQueue"])
            for i in r.json()["items"]] == [("probe", 2, 0)]
    # A LocalQueue whose ClusterQueue is missing has no queue order: nothing listed.
    r = await get(client, "/api/v1/namespaces/research/localqueues/lq-orphan/pending")
    assert r.status_code == 200 and r.json()["items"] == []
    r = await get(client, "/api/v1/namespaces/research/localqueues/nope/pending")
    assert r.status_code == 404
    assert r.json()["detail"] == 'LocalQueue "nope" not found in namespace "research"'


# ------------------------------------------------------------------------------ paging


def bulk_cluster(n: int):
    cluster = build_cluster()
    for i in range(n):  # all pending behind the full cohort, ordered by creation
        cluster.add_workload(workload(f"team-b/bulk-{i:03}").queue("lq-b").pods(1, gpu=1)
                             .build(creation=2000.0 + i))
    return cluster


async def pages(c: httpx.AsyncClient, path: str, limit: int) -> list[dict]:
    out, token, seen_tokens = [], None, 0
    while True:
        params = {"limit": limit} | ({"continue": token} if token else {})
        r = await get(c, path, **params)
        assert r.status_code == 200, r.text
        body = r.json()
        assert len(body["items"]) <= limit
        out.append(body)
        token = body["metadata"]["continue"]
        if token is None:
            return out
        seen_tokens += 1
        assert seen_tokens < 100


async def test_paging_walks_the_whole_list_once_in_order() -> None:
    app = make_app(bulk_cluster(25))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as c:
        full = (await get(c, "/api/v1/clusterqueues/research-cq/pending", limit=1000)).json()
        assert full["metadata"]["totalItems"] == 28  # 3 of the scenario + 25
        got = await pages(c, "/api/v1/clusterqueues/research-cq/pending", 10)
        assert [len(p["items"]) for p in got] == [10, 10, 8]
        assert [p["metadata"]["remainingItemCount"] for p in got] == [18, 8, 0]
        names = [i["name"] for p in got for i in p["items"]]
        assert names == [i["name"] for i in full["items"]]
        assert [i["positionInClusterQueue"] for p in got for i in p["items"]] == list(range(28))
        # The LocalQueue view pages the same way over its own Workloads.
        lq = await pages(c, "/api/v1/namespaces/team-b/localqueues/lq-b/pending", 7)
        lq_names = [i["name"] for p in lq for i in p["items"]]
        assert lq_names == ["probe", *[f"bulk-{i:03}" for i in range(25)]]
        assert [i["positionInLocalQueue"] for p in lq for i in p["items"]] == list(range(26))


async def test_next_page_resumes_after_the_last_item_when_earlier_ones_leave() -> None:
    cluster = bulk_cluster(10)
    app = make_app(cluster)
    path = "/api/v1/namespaces/team-b/localqueues/lq-b/pending"
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as c:
        p1 = (await get(c, path, limit=4)).json()
        assert [i["name"] for i in p1["items"]] == ["probe", "bulk-000", "bulk-001", "bulk-002"]
        # Two Workloads of the first page go away: the next page still starts at bulk-003.
        cluster.delete_workload(WorkloadKey("team-b/probe"))
        cluster.delete_workload(WorkloadKey("team-b/bulk-000"))
        p2 = (await get(c, path, limit=4, **{"continue": p1["metadata"]["continue"]})).json()
        assert [i["name"] for i in p2["items"]] == ["bulk-003", "bulk-004", "bulk-005",
                                                    "bulk-006"]


@pytest.mark.parametrize(("params", "status", "detail"), [
    pytest.param({"continue": "not-a-token"}, 400, "invalid continue token",
                 id="garbage continue token is a 400"),
    pytest.param({"continue": base64.urlsafe_b64encode(b"[" * 3_000).decode()}, 400,
                 "invalid continue token",
                 id="a token decoding to deeply nested JSON is a 400, not a 500 (issue 14)"),
    pytest.param({"limit": 0}, 422, None, id="limit below 1 is refused"),
    pytest.param({"limit": 1001}, 422, None, id="limit above 1000 is refused"),
])
async def test_bad_paging_parameters(client, params, status, detail) -> None:
    r = await get(client, "/api/v1/clusterqueues/research-cq/pending", **params)
    assert r.status_code == status, r.text
    if detail:
        assert detail in r.json()["detail"]


async def test_continue_token_of_another_list_is_refused() -> None:
    app = make_app(bulk_cluster(5))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as c:
        p1 = (await get(c, "/api/v1/clusterqueues/research-cq/pending", limit=2)).json()
        r = await get(c, "/api/v1/clusterqueues/solo-cq/pending", limit=2,
                      **{"continue": p1["metadata"]["continue"]})
        assert r.status_code == 400
        assert "belongs to another list" in r.json()["detail"]


async def test_default_page_size_is_100() -> None:
    app = make_app(bulk_cluster(150))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as c:
        body = (await get(c, "/api/v1/clusterqueues/research-cq/pending")).json()
        assert len(body["items"]) == 100
        assert body["metadata"]["remainingItemCount"] == 53
        assert body["metadata"]["continue"]


# ------------------------------------------------------------------------------ LocalQueues


async def test_local_queues_of_a_namespace(client) -> None:
    r = await get(client, "/api/v1/namespaces/research/localqueues")
    assert r.status_code == 200
    by = {lq["name"]: lq for lq in r.json()["items"]}
    assert list(by) == ["lq-orphan", "lq-research"]
    # lq-research: train-6 holds 6 GPUs of a100; eval-1 and train-4 wait (parked).
    assert by["lq-research"] == {
        "name": "lq-research", "namespace": "research", "clusterQueue": "research-cq",
        "active": True, "reason": "Ready", "message": "Can submit new workloads to localQueue",
        "pendingWorkloads": 2, "inadmissibleWorkloads": 2, "reservingWorkloads": 1,
        "admittedWorkloads": 1,
        "usage": [{"flavor": "a100", "resource": "nvidia.com/gpu", "used": "6"}],
    }
    orphan = by["lq-orphan"]
    assert (orphan["active"], orphan["reason"], orphan["pendingWorkloads"],
            orphan["inadmissibleWorkloads"], orphan["usage"]) == \
        (False, "ClusterQueueDoesNotExist", 1, 1, [])
    assert "missing-cq" in orphan["message"]
    # inference: serve-2 is reserving (its write is in flight), not yet admitted.
    inf = (await get(client, "/api/v1/namespaces/inference/localqueues")).json()["items"]
    assert [(x["name"], x["reservingWorkloads"], x["admittedWorkloads"], x["usage"])
            for x in inf] == [("lq-inference", 1, 0, [{"flavor": "a100",
                                                       "resource": "nvidia.com/gpu",
                                                       "used": "2"}])]
    assert (await get(client, "/api/v1/namespaces/empty/localqueues")).json()["items"] == []


# ------------------------------------------------------------------------------ Workloads


async def test_admitted_workload_shows_its_flavors_and_usage(client) -> None:
    r = await get(client, "/api/v1/namespaces/research/workloads/train-6")
    assert r.status_code == 200, r.text
    assert r.json() == {
        "kind": "WorkloadStatus", "name": "train-6", "namespace": "research",
        "localQueueName": "lq-research", "clusterQueue": "research-cq", "state": "admitted",
        "priority": 0, "created": "1970-01-01T00:16:41Z", "admissionInFlight": False,
        "awaitingAdmissionChecks": False, "inadmissible": False,
        "positionInClusterQueue": None, "positionInLocalQueue": None,
        "reason": None, "conditionReason": None, "message": "", "shortfalls": [],
        "podSetAssignments": [{"name": "main", "count": 6,
                               "flavors": {"nvidia.com/gpu": "a100"},
                               "resourceUsage": {"nvidia.com/gpu": "6"}}],
        "usage": [{"flavor": "a100", "resource": "nvidia.com/gpu", "used": "6"}],
        "eta": None,
    }


async def test_workload_with_admission_in_flight(client) -> None:
    body = (await get(client, "/api/v1/namespaces/inference/workloads/serve-2")).json()
    assert (body["state"], body["admissionInFlight"], body["clusterQueue"]) == \
        ("admitted", True, "inference-cq")


async def test_workload_awaiting_admission_checks_is_reserving_not_admitted(client) -> None:
    before = (await get(client, "/api/v1/clusterqueues/research-cq")).json()
    client.app.state.awaiting_checks = {WorkloadKey("research/train-6")}
    body = (await get(client, "/api/v1/namespaces/research/workloads/train-6")).json()
    assert (body["state"], body["awaitingAdmissionChecks"]) == ("admitted", True)
    after = (await get(client, "/api/v1/clusterqueues/research-cq")).json()
    assert after["reservingWorkloads"] == before["reservingWorkloads"]
    assert after["admittedWorkloads"] == before["admittedWorkloads"] - 1
    metrics = (await get(client, "/metrics")).text
    assert f'kueue_admitted_active_workloads{{cluster_queue="research-cq",' \
        f'replica_role="standalone"}} {after["admittedWorkloads"]}.0' in metrics


async def test_pending_workload_shows_position_and_reason(client) -> None:
    body = (await get(client, "/api/v1/namespaces/research/workloads/train-4")).json()
    assert (body["state"], body["clusterQueue"], body["positionInClusterQueue"],
            body["positionInLocalQueue"], body["inadmissible"], body["reason"]) == \
        ("pending", "research-cq", 1, 1, True, "WaitingForQuota")
    assert "4 requested, 0 available" in body["message"]
    assert body["shortfalls"][0]["requested"] == "4"
    assert body["podSetAssignments"] == [] and body["usage"] == []


async def test_workload_without_a_cluster_queue_says_so(client) -> None:
    body = (await get(client, "/api/v1/namespaces/research/workloads/lost")).json()
    assert (body["state"], body["clusterQueue"], body["positionInClusterQueue"],
            body["reason"], body["conditionReason"]) == \
        ("pending", None, None, "ClusterQueueNotFound", "Inadmissible")
    assert body["message"] == "ClusterQueue missing-cq doesn't exist"


async def test_evicting_workload(client) -> None:
    client.app.state.cluster.evict(WorkloadKey("research/train-6"), 1500.0)
    body = (await get(client, "/api/v1/namespaces/research/workloads/train-6")).json()
    assert body["state"] == "evicting"
    cq = (await get(client, "/api/v1/clusterqueues/research-cq")).json()
    assert (cq["evictingWorkloads"], cq["reservingWorkloads"]) == (1, 1)


async def test_unknown_workload_is_404(client) -> None:
    r = await get(client, "/api/v1/namespaces/research/workloads/nope")
    assert r.status_code == 404
    assert 'Workload "nope" not found in namespace "research"' in r.json()["detail"]


async def test_finished_workload_is_forgotten_and_frees_quota(client) -> None:
    cluster = client.app.state.cluster
    cluster.finish(WorkloadKey("ns/big"))
    r = await get(client, "/api/v1/namespaces/ns/workloads/big")
    assert r.status_code == 404
    solo = (await get(client, "/api/v1/clusterqueues/solo-cq")).json()
    assert [(x["resource"], x["used"], x["available"]) for x in solo["resources"]] == [
        ("cpu", "0", "8"), ("memory", "0", "32Gi")]
    assert (solo["reservingWorkloads"], solo["admittedWorkloads"]) == (0, 0)


# ------------------------------------------------------------------------------ access

CQ = "/api/v1/clusterqueues"
CQ_ONE = "/api/v1/clusterqueues/research-cq"
CQ_OTHER = "/api/v1/clusterqueues/inference-cq"
CQ_PENDING = "/api/v1/clusterqueues/research-cq/pending"
LQS_RESEARCH = "/api/v1/namespaces/research/localqueues"
LQS_INFERENCE = "/api/v1/namespaces/inference/localqueues"
LQ_PENDING = "/api/v1/namespaces/research/localqueues/lq-research/pending"
WL = "/api/v1/namespaces/research/workloads/train-6"
WL_OTHER = "/api/v1/namespaces/inference/workloads/serve-2"

ACCESS_TABLE = [
    ("admin-token", CQ, 200), ("admin-token", LQS_INFERENCE, 200),
    ("research-token", LQS_RESEARCH, 200), ("research-token", LQ_PENDING, 200),
    ("research-token", WL, 200),
    ("research-token", LQS_INFERENCE, 403), ("research-token", WL_OTHER, 403),
    ("research-token", CQ, 403), ("research-token", CQ_PENDING, 403),
    # The pending list names Workloads of every namespace: `get clusterqueues` is not enough,
    # it needs Kueue's visibility permission (issue 14 item 7), and that alone.
    ("cq-research-token", CQ_ONE, 200), ("cq-research-token", CQ_PENDING, 403),
    ("pending-research-token", CQ_PENDING, 200), ("pending-research-token", CQ_ONE, 403),
    ("cq-research-token", CQ_OTHER, 403), ("cq-research-token", CQ, 403),
    ("cq-research-token", LQS_RESEARCH, 403),
    ("nobody-token", CQ, 403), ("nobody-token", LQS_RESEARCH, 403),
    ("wrong-token", CQ, 401), ("wrong-token", LQS_RESEARCH, 401),
    (None, CQ, 401), (None, LQ_PENDING, 401), (None, WL, 401),
]


@pytest.mark.parametrize(("token", "path", "status"), [
    pytest.param(t, p, s, id=f"{t or 'no token'} GET {p} -> {s}") for t, p, s in ACCESS_TABLE
])
async def test_access_table(client, token, path, status) -> None:
    r = await get(client, path, token)
    assert r.status_code == status, r.text


async def test_missing_token_is_401_with_a_hint(client) -> None:
    r = await get(client, CQ, None)
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == "Bearer"
    assert r.json()["detail"].startswith("missing bearer token: send 'Authorization: Bearer")


async def test_rejected_token_is_401_with_the_review_error(client) -> None:
    r = await get(client, CQ, "wrong-token")
    assert r.status_code == 401
    assert r.json()["detail"] == "invalid bearer token: rejected by the TokenReview: " \
                                 "unknown token"


async def test_forbidden_names_the_missing_permission(client) -> None:
    r = await get(client, LQS_INFERENCE, "research-token")
    assert r.status_code == 403
    assert r.json()["detail"].startswith(
        'user "system:serviceaccount:research:viewer" cannot get resource "localqueues" in '
        'API group "kueue.x-k8s.io" in the namespace "inference"')
    r = await get(client, CQ_OTHER, "cq-research-token")
    assert 'cannot get resource "clusterqueues" named "inference-cq" in API group ' \
           '"kueue.x-k8s.io" at the cluster scope' in r.json()["detail"]
    r = await get(client, CQ_PENDING, "cq-research-token")
    assert 'cannot get resource "clusterqueues/pendingworkloads" named "research-cq" in API ' \
           'group "visibility.kueue.x-k8s.io" at the cluster scope' in r.json()["detail"]


async def test_access_is_checked_before_existence(client) -> None:
    # A caller without access learns nothing about which names exist.
    r = await get(client, "/api/v1/namespaces/inference/workloads/nope", "research-token")
    assert r.status_code == 403


async def test_no_reviewer_configured_is_503() -> None:
    app = make_app()
    app.state.access_reviewer = None
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as c:
        r = await get(c, CQ)
        assert r.status_code == 503
        assert "access review is not configured" in r.json()["detail"]


class Unreachable:
    """An AccessReviewer whose API server does not answer."""

    def __init__(self) -> None:
        self.calls = 0

    async def authenticate(self, token: str) -> TokenResult:
        self.calls += 1
        raise ReviewUnavailable("TokenReview failed: HTTP 500 Internal Server Error")

    async def authorize(self, user: UserInfo, access: ResourceAccess) -> AccessDecision:
        raise AssertionError("not reached")


async def test_review_failure_is_503_and_not_cached() -> None:
    inner = Unreachable()
    app = make_app(access=CachedAccessReviewer(inner))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as c:
        for _ in range(2):
            r = await get(c, CQ)
            assert r.status_code == 503
            assert r.json()["detail"] == "cannot check access now: TokenReview failed: " \
                                         "HTTP 500 Internal Server Error"
    assert inner.calls == 2


async def test_state_not_ready_is_503_after_access_is_checked() -> None:
    app = make_app()
    app.state.cluster_ready = lambda: (False, "reconciler: waiting for informers: workload")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as c:
        assert (await get(c, CQ, None)).status_code == 401
        r = await get(c, CQ)
        assert r.status_code == 503
        assert r.json()["detail"] == "pykueue is starting: reconciler: waiting for " \
                                     "informers: workload"
        app.state.cluster = None
        r = await get(c, CQ)
        assert r.status_code == 503 and "not available yet" in r.json()["detail"]


# ------------------------------------------------------------------------------ caching


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


async def test_cache_keeps_answers_for_the_ttl_then_asks_again() -> None:
    inner, clock = reviewer(), Clock()
    cached = CachedAccessReviewer(inner, ttl=10.0, clock=clock)
    app = make_app(access=cached)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as c:
        for _ in range(3):
            assert (await get(c, CQ)).status_code == 200
        assert (inner.authentications, inner.authorizations) == (1, 1)
        assert (await get(c, "/api/v1/clusterqueues/solo-cq")).status_code == 200
        assert (inner.authentications, inner.authorizations) == (1, 2)  # another resource
        clock.t = 9.9
        assert (await get(c, CQ)).status_code == 200
        assert (inner.authentications, inner.authorizations) == (1, 2)
        clock.t = 10.0
        assert (await get(c, CQ)).status_code == 200
        assert (inner.authentications, inner.authorizations) == (2, 3)
        # Rejections are cached too (for the same short time).
        for _ in range(2):
            assert (await get(c, CQ, "wrong-token")).status_code == 401
        assert inner.authentications == 3


async def test_cache_is_bounded_least_recently_used_first() -> None:
    tokens = {f"t{i}": UserInfo(f"u{i}") for i in range(5)}
    inner = StaticAccessReviewer(tokens)
    cached = CachedAccessReviewer(inner, ttl=60.0, max_entries=3, clock=Clock())
    for name in ("t0", "t1", "t2"):
        await cached.authenticate(name)
    await cached.authenticate("t0")        # hit: t0 becomes most recent
    await cached.authenticate("t3")        # evicts t1 (least recently used)
    assert inner.authentications == 4
    await cached.authenticate("t0")
    await cached.authenticate("t2")
    assert inner.authentications == 4      # still cached
    await cached.authenticate("t1")
    assert inner.authentications == 5      # was evicted


async def test_cache_does_not_keep_tokens_in_clear() -> None:
    cached = CachedAccessReviewer(reviewer(), clock=Clock())
    await cached.authenticate("admin-token")
    keys = list(cached._tokens._data)  # noqa: SLF001 - checking what is stored
    assert keys and all(k != "admin-token" and isinstance(k, bytes) for k in keys)


async def test_admin_result_carries_the_user() -> None:
    result = await reviewer().authenticate("admin-token")
    assert result == TokenResult(ADMIN)


# ------------------------------------------------------------------------------ served from memory


async def test_answers_follow_the_live_core_without_any_api_call(client) -> None:
    cluster = client.app.state.cluster
    before = (await get(client, CQ_PENDING)).json()["metadata"]["totalItems"]
    cluster.add_workload(replace(workload("research/late").queue("lq-research")
                                 .pods(1, gpu=1).build(creation=3000.0)))
    after = (await get(client, CQ_PENDING)).json()
    assert after["metadata"]["totalItems"] == before + 1
    assert after["items"][-1]["name"] == "late"
    assert cluster.cluster_queue_status(ClusterQueueName("research-cq")).pending == before + 1


# ------------------------------------------------------------------------------ wiring


class StubManager:
    """Stands in for app.controllers.manager.Manager in app.main's lifespan: the reconciler's
    public surface that main wires (no API server behind it)."""

    def __init__(self, settings, **kwargs) -> None:
        from types import SimpleNamespace

        from kubernetes_asyncio import client as k8s

        from app.config import ClientSettings
        from app.kube.client import WORKLOADS, KubeClient, RateLimitedApiClient, TokenBucket
        from app.kube.informers import Store

        cfg = k8s.Configuration()
        cfg.host = "https://127.0.0.1:1"  # nothing listens: reviews fail fast
        self.api = RateLimitedApiClient(cfg, TokenBucket(10, 10), 1.0)
        self.ctx = SimpleNamespace(client=KubeClient(self.api, ClientSettings()),
                                   store=lambda key: Store(WORKLOADS))
        self.cluster = build_cluster()
        self.admission_lookup = self.extender_state = None
        self.is_leader = False
        self.synced = True
        self.metrics = kwargs.get("metrics")

    async def start(self) -> None: ...

    async def stop(self) -> None:
        await self.api.close()

    def ready(self) -> tuple[bool, str]:
        return (True, "synced") if self.synced else (False, "waiting for informers: workload")


async def test_lifespan_serves_the_reconcilers_cluster(monkeypatch) -> None:
    import app.controllers.manager as manager_module

    monkeypatch.setattr(manager_module, "Manager", StubManager)
    app = create_app(Settings(leader_election=LeaderElectionSettings(enabled=False)))
    async with app.router.lifespan_context(app):
        manager = app.state.reconciler
        assert app.state.cluster is manager.cluster
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://test") as c:
            # The real reviewer is wired: with no API server to ask, access cannot be checked.
            r = await get(c, CQ)
            assert r.status_code == 503
            assert r.json()["detail"].startswith("cannot check access now: TokenReview failed")
            app.state.access_reviewer = reviewer()
            names = [cq["name"] for cq in (await get(c, CQ)).json()["items"]]
            assert names == ["inference-cq", "research-cq", "solo-cq"]
            manager.synced = False
            r = await get(c, CQ)
            assert r.status_code == 503 and "waiting for informers" in r.json()["detail"]
            # The reconciler gets the app's recorder; its counts and the gauges are served.
            manager.metrics.admitted("research-cq", 2.0)
            metrics = (await c.get("/metrics", headers=ADMIN_H)).text
            assert 'kueue_pending_workloads{cluster_queue="research-cq",' \
                   'replica_role="standalone",status="inadmissible"} 3.0' in metrics
            assert 'kueue_admitted_workloads_total{cluster_queue="research-cq",' \
                   'priority_class="",replica_role="standalone"} 1.0' in metrics


async def test_pending_workloads_carry_their_eta() -> None:
    from app.api.status import rfc3339
    from app.core.eta import EtaBoard
    from tests.builders import Sim, cluster_queue

    now = time.time()
    sim = Sim(cluster_queue("gpu").flavor("a100", gpu=4).strict_fifo())
    sim.c.add_workload(workload("a").cq("gpu").pods(1, gpu=4).limit(600).build(creation=now - 90))
    assert sim.c.schedule(now - 60)  # admitted a minute ago, stopped 600 s after at the latest
    sim.c.add_workload(workload("x").cq("gpu").pods(1, gpu=2).limit(60).build(creation=now - 10))
    sim.c.schedule(now - 5)
    app = make_app(sim.c)
    app.state.eta = EtaBoard()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as c:
        item = (await get(c, "/api/v1/clusterqueues/gpu/pending")).json()["items"][0]
        one = (await get(c, "/api/v1/namespaces/ns/workloads/x")).json()
    eta = item["eta"]
    assert (eta["start"], eta["confidence"], eta["basis"]) == (
        rfc3339(now - 60 + 600), "bounded", "maximumExecutionTimeSeconds")
    assert 535 <= eta["waitSeconds"] <= 540
    assert one["eta"]["start"] == eta["start"]


async def test_an_eta_behind_projected_arrivals_carries_gotts_interval() -> None:
    # x (priority 0) waits behind a priority-10 stream of 4-GPU, 300 s jobs that has gone on
    # for 3,000 s: Gott's median, 3,000 s more (x starts after the last one, 3,300 s from
    # the last arrival); the 50% interval, 1,000 s more (1,200 s) to 9,000 s more (9,300 s).
    from app.api.status import rfc3339
    from app.core.eta import ArrivalModel, EtaBoard
    from tests.builders import Sim, cluster_queue

    now = time.time()
    t0 = now - 2  # the last arrival, admitted at once
    sim = Sim(cluster_queue("gpu").flavor("a100", gpu=4).strict_fifo())
    sim.c.add_workload(workload("hi").cq("gpu").priority(10).pods(1, gpu=4).limit(300)
                       .build(creation=t0))
    assert sim.c.schedule(t0)
    sim.c.add_workload(workload("x").cq("gpu").pods(1, gpu=4).limit(60).build(creation=t0 + 1))
    sim.c.schedule(t0 + 1)
    arrivals = ArrivalModel(window_seconds=6000)
    for i in range(11):
        arrivals.observe(workload(f"hi-{i}").cq("gpu").priority(10).pods(1, gpu=4).limit(300)
                         .build(creation=t0 - 3000 + 300 * i))
    app = make_app(sim.c)
    app.state.eta = EtaBoard(arrivals=arrivals)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as c:
        eta = (await get(c, "/api/v1/namespaces/ns/workloads/x")).json()["eta"]
    assert eta["basis"] == "maximumExecutionTimeSeconds+arrivals"
    # The board ran at its own "now", a few ms after t0 + 2: compare to the second.
    assert abs(parse_time(eta["start"]) - (t0 + 3300)) < 1.5
    span = eta["range"]
    assert abs(parse_time(span["earliest"]) - (t0 + 1200)) < 1.5
    assert abs(parse_time(span["latest"]) - (t0 + 9300)) < 1.5
    assert abs(span["earliestWaitSeconds"] - (t0 + 1200 - now)) <= 2
    assert abs(span["latestWaitSeconds"] - (t0 + 9300 - now)) <= 2
    assert rfc3339(parse_time(eta["start"])) == eta["start"]


def parse_time(s: str) -> float:
    from datetime import datetime
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()

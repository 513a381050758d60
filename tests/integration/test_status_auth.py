"""Status API access against the real lab API server: TokenReview and SubjectAccessReview made
by ``KubeAccessReviewer`` (kubernetes-asyncio), with a ServiceAccount token from
``kubectl create token`` and a Role granting ``get`` on localqueues in one namespace only.

The admission state is a core Scheduler built in process (tests/status_scenario.py) plus a
LocalQueue and a Workload in the ServiceAccount's namespace; what is under test is who may
read it: 200 in that namespace, 403 in another one and on ClusterQueues, 401 without a token
or with a token the API server rejects."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from kubernetes_asyncio import client as k8s_client

from app.api.access import CachedAccessReviewer, KubeAccessReviewer
from app.config import ClientSettings, Settings
from app.core.spec import LocalQueue
from app.core.types import ClusterQueueName
from app.kube.client import load_configuration
from app.main import create_app
from tests.builders import workload
from tests.labfixture import LabHandle
from tests.status_scenario import build_cluster

pytestmark = pytest.mark.lab

SUFFIX = uuid.uuid4().hex[:6]
TEAM = f"status-team-{SUFFIX}"
OTHER = f"status-other-{SUFFIX}"
SA = "queue-viewer"


def manifests() -> str:
    docs = [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": SA, "namespace": TEAM}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "localqueue-reader", "namespace": TEAM},
         "rules": [{"apiGroups": ["kueue.x-k8s.io"], "resources": ["localqueues"],
                    "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "queue-viewer-reads-localqueues", "namespace": TEAM},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": "localqueue-reader"},
         "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": TEAM}]},
    ]
    return "\n---\n".join(json.dumps(d) for d in docs)


@pytest.fixture(scope="module")
def viewer_token(lab: LabHandle):
    for ns in (TEAM, OTHER):
        lab.create_namespace(ns)
    lab.apply(manifests())
    token = lab.kubectl("create", "token", SA, "-n", TEAM, "--duration", "10m").stdout.strip()
    assert token.count(".") == 2, "expected a JWT"
    yield token
    for ns in (TEAM, OTHER):
        lab.kubectl("delete", "namespace", ns, "--wait=false", check=False)


async def api_client(kubeconfig: Path) -> k8s_client.ApiClient:
    cfg = await load_configuration(ClientSettings(kubeconfig=kubeconfig))
    return k8s_client.ApiClient(cfg)


def app_with(reviewer) -> object:
    app = create_app(Settings(controllers_enabled=False))
    cluster = build_cluster()
    cluster.add_local_queue(LocalQueue(TEAM, "team-lq", ClusterQueueName("research-cq")))
    cluster.add_workload(workload(f"{TEAM}/wait-2").queue("team-lq").pods(2, gpu=1)
                         .build(creation=5000.0))
    cluster.add_local_queue(LocalQueue(OTHER, "other-lq", ClusterQueueName("research-cq")))
    app.state.cluster = cluster
    app.state.access_reviewer = reviewer
    return app


@pytest.fixture
async def http(lab: LabHandle) -> AsyncIterator[httpx.AsyncClient]:
    api = await api_client(lab.kubeconfig)  # the lab's admin may create reviews
    app = app_with(CachedAccessReviewer(KubeAccessReviewer(api)))
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://test") as c:
            yield c
    finally:
        await api.close()


def bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


@pytest.mark.parametrize(("path", "status"), [
    pytest.param(f"/api/v1/namespaces/{TEAM}/localqueues", 200, id="own namespace: 200"),
    pytest.param(f"/api/v1/namespaces/{TEAM}/localqueues/team-lq/pending", 200,
                 id="own LocalQueue's pending list: 200"),
    pytest.param(f"/api/v1/namespaces/{TEAM}/workloads/wait-2", 200,
                 id="own Workload: 200"),
    pytest.param(f"/api/v1/namespaces/{OTHER}/localqueues", 403, id="other namespace: 403"),
    pytest.param(f"/api/v1/namespaces/{OTHER}/localqueues/other-lq/pending", 403,
                 id="other namespace's LocalQueue: 403"),
    pytest.param("/api/v1/clusterqueues", 403, id="ClusterQueues: 403"),
    pytest.param("/api/v1/clusterqueues/research-cq/pending", 403,
                 id="a ClusterQueue's pending list: 403"),
])
async def test_service_account_token(http, viewer_token, path: str, status: int) -> None:
    r = await http.get(path, headers=bearer(viewer_token))
    assert r.status_code == status, r.text


async def test_allowed_view_has_the_figures(http, viewer_token) -> None:
    r = await http.get(f"/api/v1/namespaces/{TEAM}/localqueues", headers=bearer(viewer_token))
    (lq,) = r.json()["items"]
    assert (lq["name"], lq["clusterQueue"], lq["pendingWorkloads"]) == \
        ("team-lq", "research-cq", 1)
    r = await http.get(f"/api/v1/namespaces/{TEAM}/workloads/wait-2",
                       headers=bearer(viewer_token))
    assert (r.json()["state"], r.json()["clusterQueue"]) == ("pending", "research-cq")


async def test_forbidden_message_names_user_and_permission(http, viewer_token) -> None:
    r = await http.get(f"/api/v1/namespaces/{OTHER}/localqueues", headers=bearer(viewer_token))
    assert r.status_code == 403
    assert r.json()["detail"].startswith(
        f'user "system:serviceaccount:{TEAM}:{SA}" cannot get resource "localqueues" in API '
        f'group "kueue.x-k8s.io" in the namespace "{OTHER}"')


@pytest.mark.parametrize("token", [
    pytest.param(None, id="no token: 401"),
    pytest.param("not-a-token", id="garbage token: 401"),
    pytest.param("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln", id="forged JWT: 401"),
])
async def test_unauthenticated(http, viewer_token, token: str | None) -> None:
    r = await http.get(f"/api/v1/namespaces/{TEAM}/localqueues", headers=bearer(token))
    assert r.status_code == 401, r.text
    assert r.headers["www-authenticate"].startswith("Bearer")


async def test_cluster_admin_token_reads_cluster_queues(lab: LabHandle, http) -> None:
    # A ServiceAccount bound to cluster-admin passes the clusterqueues check.
    name = f"status-admin-{SUFFIX}"
    lab.kubectl("create", "serviceaccount", name, "-n", TEAM)
    lab.kubectl("create", "clusterrolebinding", name, "--clusterrole=cluster-admin",
                f"--serviceaccount={TEAM}:{name}")
    try:
        token = lab.kubectl("create", "token", name, "-n", TEAM).stdout.strip()
        r = await http.get("/api/v1/clusterqueues", headers=bearer(token))
        assert r.status_code == 200, r.text
        assert [cq["name"] for cq in r.json()["items"]] == \
            ["inference-cq", "research-cq", "solo-cq"]
    finally:
        lab.kubectl("delete", "clusterrolebinding", name, check=False)


async def test_pykueue_identity_can_review(lab: LabHandle, viewer_token) -> None:
    # pykueue's own ServiceAccount (manifests/rbac) may create TokenReviews and
    # SubjectAccessReviews, so the status API works in a deployment.
    api = await api_client(lab.sa_kubeconfig())
    try:
        app = app_with(KubeAccessReviewer(api))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://test") as c:
            r = await c.get(f"/api/v1/namespaces/{TEAM}/localqueues",
                            headers=bearer(viewer_token))
            assert r.status_code == 200, r.text
    finally:
        await api.close()

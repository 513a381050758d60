"""Kueue's visibility API through the lab's aggregation layer (app/api/visibility.py).

One ClusterQueue with 1 CPU held by a Job-less Workload; four one-CPU Jobs of distinct
WorkloadPriorityClasses wait behind it: three in ``viz-a``'s LocalQueue ``lq``, one in
``viz-b``'s LocalQueue of the same name. A tenant ServiceAccount of ``viz-a`` bound to
``pykueue-pending-workloads-lq-viewer`` calls ``kubectl get --raw`` (v1beta2 and v1beta1):
its own LocalQueue answers with Kueue's ``PendingWorkloadsSummary`` (positions, priorities,
owners), ``limit``/``offset`` slice it, ``viz-b``'s LocalQueue and the ClusterQueue are 403
until ``pykueue-pending-workloads-cq-viewer`` is bound. pykueue's visibility listener itself
refuses a request without kube-apiserver's front-proxy certificate (401, or the handshake
fails for a certificate of another CA) even with a forged ``X-Remote-User``, and answers the
front-proxy certificate; pykueue's main port does not serve these paths to anyone."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.labfixture import ROOT, wait_for

sys.path.insert(0, str(ROOT / "hack"))
import lab as labmod  # noqa: E402

pytestmark = pytest.mark.lab
V = "kueue.x-k8s.io/v1beta2"
G = "/apis/visibility.kueue.x-k8s.io"
CQ = "viz-cq"
TENANT = "viz-viewer"
# Job -> (namespace, WorkloadPriorityClass value)
JOBS = {"a-1": ("viz-a", 100), "a-2": ("viz-a", 90), "b-1": ("viz-b", 50), "a-3": ("viz-a", 10)}


def _objects() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = [
        {"apiVersion": V, "kind": "ResourceFlavor", "metadata": {"name": "viz-flavor"}},
        {"apiVersion": V, "kind": "ClusterQueue", "metadata": {"name": CQ}, "spec": {
            "namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
                {"name": "viz-flavor", "resources": [{"name": "cpu", "nominalQuota": 1}]}]}]}},
    ]
    for ns in ("viz-a", "viz-b"):
        docs.append({"apiVersion": V, "kind": "LocalQueue",
                     "metadata": {"name": "lq", "namespace": ns}, "spec": {"clusterQueue": CQ}})
    for value in sorted({p for _, p in JOBS.values()}):
        docs.append({"apiVersion": V, "kind": "WorkloadPriorityClass",
                     "metadata": {"name": f"viz-p{value}"}, "value": value})
    docs += [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": TENANT, "namespace": "viz-a"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "viz-viewer-lq", "namespace": "viz-a"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "pykueue-pending-workloads-lq-viewer"},
         "subjects": [{"kind": "ServiceAccount", "name": TENANT, "namespace": "viz-a"}]},
    ]
    return docs


def _job(name: str, ns: str, priority: int) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": name, "namespace": ns, "labels": {
            "kueue.x-k8s.io/queue-name": "lq",
            "kueue.x-k8s.io/priority-class": f"viz-p{priority}"}},
        "spec": {"parallelism": 1, "completions": 1, "template": {"spec": {
            "restartPolicy": "Never", "containers": [{
                "name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}}}}


def _blocker() -> dict[str, Any]:
    return {"apiVersion": V, "kind": "Workload", "metadata": {"name": "blocker",
                                                              "namespace": "viz-a"},
            "spec": {"queueName": "lq", "priority": 1000, "podSets": [{
                "name": "main", "count": 1, "template": {"spec": {
                    "restartPolicy": "Never", "containers": [{
                        "name": "c", "image": "busybox",
                        "resources": {"requests": {"cpu": "1"}}}]}}}]}}


def _apply(lab: labmod.Lab, *docs: dict[str, Any]) -> None:
    labmod.kubectl(lab, "apply", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": list(docs)}))


def _tenant_kubeconfig(lab: labmod.Lab, tmp: Path) -> Path:
    """A kubeconfig with only the tenant's token (no admin certificate beside it)."""
    cfg = json.loads(lab.kubeconfig.read_text())
    cfg["users"] = [{"name": TENANT, "user": {
        "token": labmod.sa_token(lab, "viz-a", TENANT, 3600)}}]
    cfg["contexts"] = [{"name": "t", "context": {"cluster": "pykueue-lab", "user": TENANT}}]
    cfg["current-context"] = "t"
    out = tmp / "tenant.kubeconfig"
    out.write_text(json.dumps(cfg))
    return out


@pytest.fixture(scope="module")
def queues(pykueue_in_lab: labmod.Lab, tmp_path_factory) -> Any:
    lab = pykueue_in_lab
    for ns in ("viz-a", "viz-b"):
        _apply(lab, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    _apply(lab, *_objects())
    _apply(lab, _blocker())
    wait_for(lambda: (labmod.kubectl(lab, "get", "workloads.kueue.x-k8s.io", "blocker", "-n",
                                     "viz-a", "-o", "jsonpath={.status.admission.clusterQueue}",
                                     check=False).stdout == CQ), 60, "the blocker admitted")
    for name, (ns, priority) in JOBS.items():
        _apply(lab, _job(name, ns, priority))
    yield lab, _tenant_kubeconfig(lab, tmp_path_factory.mktemp("viz"))
    labmod.kubectl(lab, "delete", "namespace", "viz-a", "viz-b", "--wait=false", check=False)
    labmod.kubectl(lab, "delete", "clusterqueue", CQ, "--wait=false", check=False)
    labmod.kubectl(lab, "delete", "clusterrolebinding", "viz-viewer-cq", "--ignore-not-found",
                   check=False)


def raw(lab: labmod.Lab, path: str, kubeconfig: Path | None = None) -> tuple[int, dict]:
    """``kubectl get --raw path`` -> (0 or kubectl's exit status, parsed body or stderr)."""
    cmd = [str(lab.binary("kubectl")), "--kubeconfig", str(kubeconfig or lab.kubeconfig),
           "get", "--raw", path]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        return r.returncode, {"stderr": r.stderr}
    return 0, json.loads(r.stdout)


def owners(body: dict) -> list[str]:
    return [i["metadata"]["ownerReferences"][0]["name"] for i in body["items"]]


def test_pending_workloads_through_the_aggregation_layer(queues) -> None:
    lab, tenant = queues
    cq_path = f"{G}/v1beta2/clusterqueues/{CQ}/pendingworkloads"
    # The admin (system:masters) sees the ClusterQueue once every Job's Workload is queued.
    _, body = wait_for(lambda: (lambda r: r if r[0] == 0 and len(r[1]["items"]) == 4 else None)(
        raw(lab, cq_path)), 60, "4 pending Workloads in the ClusterQueue")
    assert owners(body) == ["a-1", "a-2", "b-1", "a-3"]

    lq = "/namespaces/viz-a/localqueues/lq/pendingworkloads"
    for version in ("v1beta2", "v1beta1"):
        rc, body = raw(lab, f"{G}/{version}{lq}", tenant)
        assert rc == 0, body
        assert body["kind"] == "PendingWorkloadsSummary"
        assert body["apiVersion"] == f"visibility.kueue.x-k8s.io/{version}"
        assert body["metadata"] == {}
        assert owners(body) == ["a-1", "a-2", "a-3"]
        assert [i["positionInClusterQueue"] for i in body["items"]] == [0, 1, 3]
        assert [i["positionInLocalQueue"] for i in body["items"]] == [0, 1, 2]
        assert [i["priority"] for i in body["items"]] == [100, 90, 10]
        first = body["items"][0]
        assert first["localQueueName"] == "lq"
        assert first["metadata"]["namespace"] == "viz-a"
        assert first["metadata"]["name"].startswith("job-a-1-")
        assert first["metadata"]["creationTimestamp"].endswith("Z")
        ref = first["metadata"]["ownerReferences"][0]
        assert set(ref) == {"apiVersion", "kind", "name", "uid"}
        assert (ref["apiVersion"], ref["kind"]) == ("batch/v1", "Job")

    rc, body = raw(lab, f"{G}/v1beta2{lq}?limit=1&offset=1", tenant)
    assert rc == 0, body
    assert owners(body) == ["a-2"]
    assert (body["items"][0]["positionInLocalQueue"],
            body["items"][0]["positionInClusterQueue"]) == (1, 1)

    # Another namespace's LocalQueue, and the ClusterQueue, without the cq-viewer role.
    rc, body = raw(lab, f"{G}/v1beta2/namespaces/viz-b/localqueues/lq/pendingworkloads", tenant)
    assert rc != 0 and "Forbidden" in body["stderr"], body
    rc, body = raw(lab, cq_path, tenant)
    assert rc != 0 and "Forbidden" in body["stderr"], body

    labmod.kubectl(lab, "create", "clusterrolebinding", "viz-viewer-cq",
                   "--clusterrole=pykueue-pending-workloads-cq-viewer",
                   f"--serviceaccount=viz-a:{TENANT}")
    # pykueue keeps a denial for access_review.ttl_seconds: wait for the new answer.
    _, body = wait_for(lambda: (lambda r: r if r[0] == 0 else None)(
        raw(lab, f"{cq_path}?offset=2&limit=1", tenant)), 30, "the ClusterQueue list allowed")
    assert owners(body) == ["b-1"]
    item = body["items"][0]
    assert (item["positionInClusterQueue"], item["positionInLocalQueue"]) == (2, 0)
    assert item["metadata"]["namespace"] == "viz-b"


def _direct(port: int, path: str, cert: tuple[Path, Path] | None) -> tuple[int, dict]:
    """GET ``https://127.0.0.1:port/path`` as the front proxy would send it (a forged user in
    the headers) with the client certificate ``cert`` (crt, key) or none: (status, body)."""
    ctx = ssl.create_default_context(cafile=str(ROOT / "certs" / "out" / "ca.crt"))
    if cert is not None:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    req = urllib.request.Request(f"https://127.0.0.1:{port}{path}", headers={
        "X-Remote-User": "system:admin", "X-Remote-Group": "system:masters"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as r:  # noqa: S310
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_pykueue_refuses_callers_without_the_front_proxy_certificate(queues) -> None:
    lab, _ = queues
    path = f"{G}/v1beta2/namespaces/viz-a/localqueues/lq/pendingworkloads"
    port = labmod.PYKUEUE_VISIBILITY_PORT
    status, body = _direct(port, path, None)
    assert status == 401, body
    assert (body["kind"], body["reason"], body["code"]) == ("Status", "Unauthorized", 401)
    # The lab admin's certificate: issued by the lab CA, which pykueue's main port trusts (for
    # the webhooks' and the extender's callers), not by the front-proxy CA: the handshake fails.
    with pytest.raises((urllib.error.URLError, ConnectionError)):  # TLS 1.3: a reset
        _direct(port, path, (lab.pki / "admin.crt", lab.pki / "admin.key"))


def test_only_the_visibility_port_serves_the_front_proxy(queues) -> None:
    """kube-apiserver's proxy certificate (the front-proxy CA's, CN front-proxy-client) gets
    the list on the visibility port. The main port (webhooks, extender, status API) does not
    take it: its TLS trusts the lab's client CAs only (the front-proxy CA does not join them),
    and it serves the visibility paths to no certificate it does take (the admin's)."""
    lab, _ = queues
    proxy = (lab.pki / "front-proxy" / "front-proxy-client.crt",
             lab.pki / "front-proxy" / "front-proxy-client.key")
    path = f"{G}/v1beta2/namespaces/viz-a/localqueues/lq/pendingworkloads"
    status, body = _direct(labmod.PYKUEUE_VISIBILITY_PORT, path, proxy)
    assert status == 200, body
    assert body["kind"] == "PendingWorkloadsSummary" and len(body["items"]) == 3, body
    with pytest.raises((urllib.error.URLError, ConnectionError)):  # TLS 1.3: a reset
        _direct(labmod.PYKUEUE_PORT, path, proxy)
    for p in (path, f"{G}/v1beta2", "/openapi/v2"):
        status, body = _direct(labmod.PYKUEUE_PORT, p,
                               (lab.pki / "admin.crt", lab.pki / "admin.key"))
        assert status == 404, (p, body)

"""Serving the webhook: `pykueue serve` over TLS only, and the webhook configurations
(manifests/webhook/ + hack/render_webhooks.py). No cluster: the server is a real subprocess on
loopback and the manifests are checked as data."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from app.integrations import CRD_RULES
from tests.pykueue_server import PykueueServer, free_port, pykueue_exe, serve_env, trust

ROOT = Path(__file__).resolve().parents[2]
LABEL = "kueue.x-k8s.io/queue-name"
# (configuration kind, webhook name) -> (path, operations, (apiGroups, apiVersions, resources))
WEBHOOKS = {
    ("MutatingWebhookConfiguration", "mjob.pykueue.io"):
        ("/mutate-batch-v1-job", ["CREATE", "UPDATE"], (["batch"], ["v1"], ["jobs"])),
    ("ValidatingWebhookConfiguration", "vjob.pykueue.io"):
        ("/validate-batch-v1-job", ["CREATE", "UPDATE"], (["batch"], ["v1"], ["jobs"])),
    ("MutatingWebhookConfiguration", "mpod.pykueue.io"):
        ("/mutate--v1-pod", ["CREATE"], ([""], ["v1"], ["pods"])),
    ("ValidatingWebhookConfiguration", "vpod.pykueue.io"):
        ("/validate--v1-pod", ["CREATE", "UPDATE"], ([""], ["v1"], ["pods"])),
    ("ValidatingWebhookConfiguration", "vpodowner.pykueue.io"):
        ("/validate--v1-pod-owner", ["UPDATE"], ([""], ["v1"], ["pods"])),
    ("MutatingWebhookConfiguration", "mdeployment.pykueue.io"):
        ("/mutate-apps-v1-deployment", ["CREATE", "UPDATE"], (["apps"], ["v1"], ["deployments"])),
    ("ValidatingWebhookConfiguration", "vdeployment.pykueue.io"):
        ("/validate-apps-v1-deployment", ["UPDATE"], (["apps"], ["v1"], ["deployments"])),
    ("MutatingWebhookConfiguration", "mstatefulset.pykueue.io"):
        ("/mutate-apps-v1-statefulset", ["CREATE", "UPDATE"],
         (["apps"], ["v1"], ["statefulsets"])),
    ("ValidatingWebhookConfiguration", "vstatefulset.pykueue.io"):
        ("/validate-apps-v1-statefulset", ["UPDATE"], (["apps"], ["v1"], ["statefulsets"])),
    ("ValidatingWebhookConfiguration", "vstatefulset-scale.pykueue.io"):
        ("/validate-apps-v1-statefulset-scale", ["UPDATE"],
         (["apps"], ["v1"], ["statefulsets/scale"])),
    ("ValidatingWebhookConfiguration", "vappwrapper-wrapped.pykueue.io"):
        ("/validate-apps-v1-appwrapper-wrapped", ["UPDATE"],
         (["apps"], ["v1"], ["deployments", "statefulsets"])),
    ("ValidatingWebhookConfiguration", "vappwrapper-wrapped-owned.pykueue.io"):
        ("/validate-apps-v1-appwrapper-wrapped", ["CREATE", "UPDATE"],
         (["apps"], ["v1"], ["deployments", "statefulsets"])),
    ("ValidatingWebhookConfiguration", "vappwrapper-wrapped-job.pykueue.io"):
        ("/validate-batch-v1-job", ["CREATE", "UPDATE"], (["batch"], ["v1"], ["jobs"])),
    ("ValidatingWebhookConfiguration", "vappwrapper-wrapped-jobset-job.pykueue.io"):
        ("/validate-batch-v1-job", ["CREATE", "UPDATE"], (["batch"], ["v1"], ["jobs"])),
    ("ValidatingWebhookConfiguration", "vappwrapper-wrapped-jobset.pykueue.io"):
        ("/validate-jobset-x-k8s-io-v1alpha2-jobset", ["CREATE", "UPDATE"],
         (["jobset.x-k8s.io"], ["v1alpha2"], ["jobsets"])),
    ("ValidatingWebhookConfiguration", "vappwrapper-wrapped-scale.pykueue.io"):
        ("/validate-apps-v1-appwrapper-wrapped", ["UPDATE"],
         (["apps"], ["v1"], ["deployments/scale", "statefulsets/scale"])),
    ("MutatingWebhookConfiguration", "mjobset.pykueue.io"):
        ("/mutate-jobset-x-k8s-io-v1alpha2-jobset", ["CREATE"],
         (["jobset.x-k8s.io"], ["v1alpha2"], ["jobsets"])),
    ("ValidatingWebhookConfiguration", "vjobset.pykueue.io"):
        ("/validate-jobset-x-k8s-io-v1alpha2-jobset", ["CREATE", "UPDATE"],
         (["jobset.x-k8s.io"], ["v1alpha2"], ["jobsets"])),
    ("MutatingWebhookConfiguration", "mleaderworkerset.pykueue.io"):
        ("/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset", ["CREATE", "UPDATE"],
         (["leaderworkerset.x-k8s.io"], ["v1"], ["leaderworkersets"])),
    ("ValidatingWebhookConfiguration", "vleaderworkerset.pykueue.io"):
        ("/validate-leaderworkerset-x-k8s-io-v1-leaderworkerset", ["UPDATE"],
         (["leaderworkerset.x-k8s.io"], ["v1"], ["leaderworkersets"])),
    # Kueue's resource-in-use finalizer at CREATE (app.controllers.finalizers): cluster-scoped
    # kinds, so no selector at all.
    ("MutatingWebhookConfiguration", "mclusterqueue.pykueue.io"):
        ("/mutate-kueue-x-k8s-io-v1beta2-clusterqueue", ["CREATE"],
         (["kueue.x-k8s.io"], ["v1beta2"], ["clusterqueues"])),
    ("MutatingWebhookConfiguration", "mresourceflavor.pykueue.io"):
        ("/mutate-kueue-x-k8s-io-v1beta2-resourceflavor", ["CREATE"],
         (["kueue.x-k8s.io"], ["v1beta2"], ["resourceflavors"])),
}
CLUSTER_SCOPED = {"mclusterqueue.pykueue.io", "mresourceflavor.pykueue.io"}
# The operators' kinds served by the shared rules (app.integrations.crdrules): one pair each.
for _r in CRD_RULES:
    _target = ([_r.group], [_r.version], [_r.plural])
    WEBHOOKS[("MutatingWebhookConfiguration", f"m{_r.kind.lower()}.pykueue.io")] = (
        _r.mutate_path, ["CREATE"], _target)
    WEBHOOKS[("ValidatingWebhookConfiguration", f"v{_r.kind.lower()}.pykueue.io")] = (
        _r.validate_path, ["CREATE", "UPDATE"], _target)
KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


# ---------------------------------------------------------------------------------- manifests


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


@pytest.mark.parametrize("template", ["webhooks.yaml", "webhooks-lab.yaml"])
def test_webhook_configurations_follow_the_contract(template: str) -> None:
    docs = documents(ROOT / "manifests" / "webhook" / template)
    assert sorted(d["kind"] for d in docs) == sorted(KINDS)
    seen = {(d["kind"], w["name"]) for d in docs for w in d["webhooks"]}
    assert seen == set(WEBHOOKS)
    for doc, webhook in ((d, w) for d in docs for w in d["webhooks"]):
        path, operations, target = WEBHOOKS[(doc["kind"], webhook["name"])]
        assert doc["apiVersion"] == "admissionregistration.k8s.io/v1"
        assert webhook["admissionReviewVersions"] == ["v1"]
        assert webhook["failurePolicy"] == "Fail"
        assert webhook["sideEffects"] == "None"
        # Kueue's finalizer webhooks leave the API server's default (10 s); pykueue's own 5 s.
        assert webhook["timeoutSeconds"] == (10 if webhook["name"] in CLUSTER_SCOPED else 5)
        if webhook["name"] in CLUSTER_SCOPED:
            # Every create of the kind: a namespaceSelector would not apply to it anyway.
            assert "objectSelector" not in webhook and "namespaceSelector" not in webhook
            assert webhook["rules"][0]["scope"] == "Cluster"
        elif all(r.endswith("/scale") for r in target[2]):
            # A Scale object has no labels: an objectSelector would never match it.
            assert "objectSelector" not in webhook
        elif webhook["name"] == "vappwrapper-wrapped.pykueue.io":  # the controller's label
            assert webhook["objectSelector"] == {"matchExpressions": [
                {"key": "workload.codeflare.dev/appwrapper", "operator": "Exists"}]}
        elif webhook["name"] == "vappwrapper-wrapped-owned.pykueue.io":
            # The AppWrapper as controller (breaker14), whatever the labels: the creator's
            # to leave out.
            assert "objectSelector" not in webhook
            assert [c["name"] for c in webhook["matchConditions"]] == [
                "controlled-by-an-appwrapper", "create-or-unlabelled"]
        elif webhook["name"] in ("vappwrapper-wrapped-job.pykueue.io",
                                 "vappwrapper-wrapped-jobset.pykueue.io"):
            # Unlabelled Jobs and JobSets the AppWrapper controls (brk30b H2, H3): the
            # labelled ones are vjob's and vjobset's.
            assert "objectSelector" not in webhook
            assert [c["name"] for c in webhook["matchConditions"]] == [
                "controlled-by-an-appwrapper", "without-a-queue-name"]
        elif webhook["name"] == "vappwrapper-wrapped-jobset-job.pykueue.io":
            # The Jobs of an AppWrapper's JobSet (brk31 M3): controlled by a JobSet, their
            # pods labelled by the AppWrapper controller, unlabelled.
            assert "objectSelector" not in webhook
            assert [c["name"] for c in webhook["matchConditions"]] == [
                "controlled-by-a-jobset", "pods-labelled-by-an-appwrapper",
                "without-a-queue-name"]
        elif webhook["name"] == "vpodowner.pykueue.io":  # every pod of an admitted job
            assert webhook["objectSelector"] == {
                "matchExpressions": [{"key": "kueue.x-k8s.io/podset", "operator": "Exists"}]
            }
        else:
            assert webhook["objectSelector"] == {
                "matchExpressions": [{"key": LABEL, "operator": "Exists"}]
            }
        (rule,) = webhook["rules"]
        assert rule["operations"] == operations
        assert (rule["apiGroups"], rule["apiVersions"], rule["resources"]) == target
        if target[2] != ["jobs"] and webhook["name"] not in CLUSTER_SCOPED:
            # never kube-system nor pykueue's own namespace
            (expr,) = webhook["namespaceSelector"]["matchExpressions"]
            assert expr == {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                            "values": ["kube-system", "pykueue-system"]}
        client = webhook["clientConfig"]
        assert "caBundle" not in client  # filled by hack/render_webhooks.py
        if template == "webhooks.yaml":
            assert client["service"] == {
                "name": "pykueue-webhook-service",
                "namespace": "pykueue-system",
                "path": path,
                "port": 443,
            }
        else:
            assert client["url"] == f"https://127.0.0.1:9443{path}"


@pytest.mark.parametrize(
    ("variant", "extra", "url_prefix"),
    [
        pytest.param("lab", ["--port", "9555"], "https://127.0.0.1:9555", id="lab with a port"),
        pytest.param("lab", [], "https://127.0.0.1:9443", id="lab default port"),
        pytest.param("cluster", [], None, id="in-cluster service reference"),
    ],
)
def test_render_fills_the_ca_bundle(
    certs: Path, tmp_path: Path, variant: str, extra: list[str], url_prefix: str | None
) -> None:
    out = tmp_path / "webhooks.yaml"
    subprocess.run(
        [sys.executable, "hack/render_webhooks.py", "--variant", variant,
         "--ca", str(certs / "ca.crt"), "--out", str(out), *extra],
        cwd=ROOT, check=True, capture_output=True, text=True,
    )  # fmt: skip
    rendered = [(d, w) for d in documents(out) for w in d["webhooks"]]
    assert len(rendered) == len(WEBHOOKS)
    for doc, webhook in rendered:
        path = WEBHOOKS[(doc["kind"], webhook["name"])][0]
        client = webhook["clientConfig"]
        assert base64.b64decode(client["caBundle"]) == (certs / "ca.crt").read_bytes()
        if url_prefix:
            assert client["url"] == url_prefix + path
        else:
            assert client["service"]["path"] == path


@pytest.mark.parametrize("variant", ["lab", "cluster"])
def test_render_unlabelled_lets_every_job_kinds_webhooks_see_unlabelled_objects(
        certs: Path, tmp_path: Path, variant: str) -> None:
    """``--unlabelled`` (jobs.manage_jobs_without_queue_name): every job kind's webhooks
    (Job, Pod, Deployment, StatefulSet and the operators' kinds) have no objectSelector and
    skip the system namespaces; the others keep theirs."""
    out = tmp_path / "webhooks.yaml"
    subprocess.run([sys.executable, "hack/render_webhooks.py", "--variant", variant,
                    "--ca", str(certs / "ca.crt"), "--out", str(out), "--unlabelled"],
                   cwd=ROOT, check=True, capture_output=True, text=True)
    hooks = {w["name"]: w for d in documents(out) for w in d["webhooks"]}
    subprocess.run([sys.executable, "hack/render_webhooks.py", "--variant", variant,
                    "--ca", str(certs / "ca.crt"), "--out", str(tmp_path / "plain.yaml")],
                   cwd=ROOT, check=True, capture_output=True, text=True)
    plain = {w["name"]: w for d in documents(tmp_path / "plain.yaml") for w in d["webhooks"]}
    wide = {f"{v}{k}.pykueue.io" for v in "mv" for k in (
        "job", "pod", "deployment", "statefulset", "jobset", "pytorchjob", "tfjob", "xgboostjob",
        "paddlejob", "jaxjob", "mpijob", "rayjob", "raycluster",
        "rayservice", "leaderworkerset", "trainjob", "appwrapper",
        "sparkapplication")}
    assert wide <= set(hooks)
    for name, webhook in hooks.items():
        if name not in wide:  # the scale webhook never had one (a Scale carries no labels)
            assert webhook == plain[name], name
        else:
            assert "objectSelector" not in webhook
            assert webhook["namespaceSelector"]["matchExpressions"] == [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                 "values": ["kube-system", "pykueue-system"]}]


def test_render_without_a_ca_says_what_to_do(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "hack/render_webhooks.py", "--ca", str(tmp_path / "missing.crt"),
         "--out", str(tmp_path / "w.yaml")],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 2
    assert "make certs" in r.stderr
    assert not (tmp_path / "w.yaml").exists()


# ---------------------------------------------------------------------------------- pykueue serve


@pytest.fixture(scope="module")
def server(certs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PykueueServer]:
    process = PykueueServer(certs, tmp_path_factory.mktemp("serve") / "pykueue.log")
    process.start()
    yield process
    process.stop()


def test_serve_answers_a_review_over_tls_verified_by_the_ca(server: PykueueServer) -> None:
    port, certs = server.port, server.certs
    sent = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "tls-1",
            "kind": {"group": "batch", "version": "v1", "kind": "Job"},
            "operation": "CREATE",
            "namespace": "ns",
            "object": {"metadata": {"labels": {LABEL: "lq"}}, "spec": {}},
        },
    }
    for host in ("127.0.0.1", "localhost"):
        r = httpx.post(
            f"https://{host}:{port}/mutate-batch-v1-job?timeout=5s",
            json=sent,
            verify=trust(certs),
        )
        response = r.json()["response"]
        assert response["uid"] == "tls-1"
        assert json.loads(base64.b64decode(response["patch"])) == [
            {"op": "add", "path": "/spec/suspend", "value": True}
        ]


def test_serve_has_no_plaintext_listener(server: PykueueServer) -> None:
    port = server.port
    with pytest.raises(httpx.HTTPError):  # the TLS listener drops a plaintext request
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)


def test_serve_refuses_to_start_without_certificates(tmp_path: Path) -> None:
    r = subprocess.run(
        [pykueue_exe(), "serve"], env=serve_env(tmp_path, free_port()), cwd=ROOT,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 2
    assert "TLS file(s) not found" in r.stderr
    assert "certs.generate" in r.stderr

"""The deployable manifests against the lab's real kube-apiserver: everything
`kubectl kustomize manifests/default` renders passes `kubectl apply --dry-run=server`
(schema, defaulting, admission, RBAC escalation checks), and so does the cert-manager overlay
apart from cert-manager's own kinds (cert-manager is not installed in the lab). The one-file
installs (`make release-manifest`) and the Helm chart pass `kubectl apply --server-side` (dry
run) with the same objects as the kustomize build."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import yaml

from tests import install_support as install
from tests.labfixture import ROOT, LabHandle, wait_for

pytestmark = pytest.mark.lab

CERT_MANAGER_GROUP = "cert-manager.io/"


def render(lab: LabHandle, directory: str) -> list[dict]:
    out = lab.kubectl("kustomize", str(ROOT / directory)).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def _key(doc: dict) -> str:
    return f"{doc['kind']}/{doc['metadata']['name']}"


@pytest.fixture(scope="module")
def prepared(lab: LabHandle) -> LabHandle:
    """The CRDs applied for real (Established) and the namespace created: a server-side dry
    run of a namespaced object or a custom resource needs them to exist."""
    docs = render(lab, "manifests/default")
    crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    assert crds, "manifests/default renders no CRD"
    lab.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                input=yaml.safe_dump_all(crds))
    for crd in crds:
        lab.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                    f"crd/{crd['metadata']['name']}")
    lab.kubectl("apply", "-f", str(ROOT / "manifests/default/namespace.yaml"))
    wait_for(lambda: lab.kubectl("get", "ns", "pykueue-system", check=False).returncode == 0,
             30, "namespace pykueue-system")
    return lab


def dry_run(lab: LabHandle, docs: list[dict]) -> dict[str, str]:
    """`kubectl apply --dry-run=server` of ``docs``; returns kind/name -> kubectl's verdict
    line, and fails the test with kubectl's errors when any object is rejected."""
    r = lab.kubectl("apply", "--dry-run=server", "-o", "json", "-f", "-",
                    input=yaml.safe_dump_all(docs), check=False, timeout=180)
    assert r.returncode == 0, f"server-side dry run rejected:\n{r.stderr}"
    # pykueue-system enforces the "restricted" Pod Security level; for a Deployment the
    # PodSecurity admission only warns, so a violation shows up here.
    assert "would violate PodSecurity" not in r.stderr, r.stderr
    result = json.loads(r.stdout)
    items = result["items"] if result.get("kind") == "List" else [result]
    return {f"{i['kind']}/{i['metadata']['name']}": i for i in items}


def test_default_renders_every_part_of_the_installation(lab: LabHandle):
    kinds = {d["kind"] for d in render(lab, "manifests/default")}
    assert {"Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole",
            "ClusterRoleBinding", "Role", "RoleBinding", "Deployment", "Service",
            "PodDisruptionBudget", "NetworkPolicy", "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration", "APIService"} <= kinds


def test_every_rendered_manifest_passes_server_side_dry_run(prepared: LabHandle):
    docs = render(prepared, "manifests/default")
    accepted = dry_run(prepared, docs)
    assert set(accepted) == {_key(d) for d in docs}
    # The server's answer, defaulted: what a cluster would really store.
    dep = accepted["Deployment/pykueue"]
    assert dep["spec"]["replicas"] == 2
    assert dep["metadata"]["namespace"] == "pykueue-system"


def test_deployment_is_replicated_leader_elected_probed_and_hardened(lab: LabHandle):
    docs = render(lab, "manifests/default")
    dep = next(d for d in docs if d["kind"] == "Deployment")
    pdb = next(d for d in docs if d["kind"] == "PodDisruptionBudget")
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert dep["spec"]["replicas"] == 2
    assert env["PYKUEUE_CONFIG_FILE"] == "/etc/pykueue/config/config.yaml"
    config = next(d for d in docs if d["kind"] == "ConfigMap")
    assert yaml.safe_load(config["data"]["config.yaml"])["leader_election"]["enabled"] is True
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert mounts["config"] == "/etc/pykueue/config"
    assert pod["serviceAccountName"] == "pykueue"
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = c[probe]["httpGet"]
        assert (get["path"], get["scheme"], get["port"]) == (path, "HTTPS", "https")
    assert {p["name"]: p["containerPort"] for p in c["ports"]}["https"] == 9443
    assert set(c["resources"]["requests"]) == set(c["resources"]["limits"]) == {"cpu", "memory"}
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert {v["name"]: v.get("configMap", {}).get("name") for v in pod["volumes"]}[
        "config"] == config["metadata"]["name"]
    secrets = [v for v in pod["volumes"] if "secret" in v]
    assert [v["secret"]["secretName"] for v in secrets] == ["pykueue-webhook-server-cert"]
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= \
        dep["spec"]["template"]["metadata"]["labels"].items()


def test_cert_manager_overlay_passes_dry_run_except_cert_manager_kinds(prepared: LabHandle):
    docs = render(prepared, "manifests/overlays/cert-manager")
    ours = [d for d in docs if not d["apiVersion"].startswith(CERT_MANAGER_GROUP)]
    theirs = [d for d in docs if d["apiVersion"].startswith(CERT_MANAGER_GROUP)]
    assert {d["kind"] for d in theirs} == {"Issuer", "Certificate"}
    accepted = dry_run(prepared, ours)
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
                 "APIService/v1beta2.visibility", "APIService/v1beta1.visibility"):
        obj = next(v for k, v in accepted.items() if k.startswith(kind))
        assert obj["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
            "pykueue-system/pykueue-serving-cert")


def test_cert_manager_certificate_covers_the_service_and_feeds_the_mounted_secret(
        lab: LabHandle):
    docs = render(lab, "manifests/overlays/cert-manager")
    cert = next(d for d in docs if d["kind"] == "Certificate")
    svc = next(d for d in docs if d["kind"] == "Service")
    dep = next(d for d in docs if d["kind"] == "Deployment")
    name, ns = svc["metadata"]["name"], svc["metadata"]["namespace"]
    assert set(cert["spec"]["dnsNames"]) >= {f"{name}.{ns}.svc", f"{name}.{ns}.svc.cluster.local"}
    secrets = {v["secret"]["secretName"] for v in dep["spec"]["template"]["spec"]["volumes"]
               if "secret" in v}
    assert cert["spec"]["secretName"] in secrets
    inject = f"{cert['metadata']['namespace']}/{cert['metadata']['name']}"
    for d in docs:
        if d["kind"].endswith("WebhookConfiguration"):
            assert d["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == inject


def name_of(d: dict) -> str:
    return d["metadata"]["name"]


def ns_of(d: dict) -> str:
    return d["metadata"]["namespace"]


def test_webhooks_point_at_the_service_that_selects_the_deployment(lab: LabHandle):
    docs = render(lab, "manifests/default")
    svc = next(d for d in docs if d["kind"] == "Service")
    dep = next(d for d in docs if d["kind"] == "Deployment")
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    https = next(p for p in svc["spec"]["ports"] if p["name"] == "https")
    assert https["port"] == 443
    container_ports = {p["name"]: p["containerPort"]
                       for p in dep["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert container_ports[https["targetPort"]] == 9443
    # Kueue's visibility API: the APIServices go to the same Service, on the port of the
    # visibility listener (tests/unit/test_visibility_manifests.py follows it to the pod).
    visibility = next(p for p in svc["spec"]["ports"] if p["name"] == "visibility")
    assert container_ports[visibility["targetPort"]] == 8082
    apiservices = [d for d in docs if d["kind"] == "APIService"]
    assert {d["spec"]["version"] for d in apiservices} == {"v1beta2", "v1beta1"}
    for d in apiservices:
        assert d["spec"]["service"] == {"name": name_of(svc), "namespace": ns_of(svc),
                                        "port": visibility["port"]}
    webhooks = [w for d in docs if d["kind"].endswith("WebhookConfiguration")
                for w in d["webhooks"]]
    assert webhooks
    for w in webhooks:
        ref = w["clientConfig"]["service"]
        assert (ref["name"], ref["namespace"], ref.get("port", 443)) == (
            svc["metadata"]["name"], svc["metadata"]["namespace"], https["port"])
        kinds = (r"(batch-v1-job|-v1-pod|-v1-pod-owner"
                 r"|apps-v1-(deployment|statefulset|statefulset-scale|appwrapper-wrapped)"
                 r"|jobset-x-k8s-io-v1alpha2-jobset"
                 r"|kubeflow-org-v1-(pytorch|tf|xgboost|paddle|jax)job|kubeflow-org-v2beta1-mpijob"
                 r"|ray-io-v1-(rayjob|raycluster|rayservice)"
                 r"|leaderworkerset-x-k8s-io-v1-leaderworkerset"
                 r"|trainer-kubeflow-org-v1alpha1-trainjob"
                 r"|workload-codeflare-dev-v1beta2-appwrapper"
                 r"|sparkoperator-k8s-io-v1beta2-sparkapplication"
                 r"|kueue-x-k8s-io-v1beta2-(clusterqueue|resourceflavor))")
        assert re.fullmatch(r"/(mutate|validate)-" + kinds, ref["path"])


def server_side_dry_run(lab: LabHandle, text: str) -> dict[tuple[str, str, str], dict]:
    """``kubectl apply --server-side --dry-run=server -f -`` of ``text`` (the install command
    README.md gives, as a dry run: the image cannot run in the lab and the real webhooks
    would fail closed without it); returns (kind, namespace, name) -> the server's object."""
    r = lab.kubectl("apply", "--server-side", "--force-conflicts", "--dry-run=server",
                    "--field-manager=pykueue-install", "-o", "json", "-f", "-",
                    input=text, check=False, timeout=180)
    assert r.returncode == 0, f"server-side apply (dry run) rejected:\n{r.stderr}"
    assert "would violate PodSecurity" not in r.stderr, r.stderr
    result = json.loads(r.stdout)
    items = result["items"] if result.get("kind") == "List" else [result]
    return {install.key(i): i for i in items}


def test_release_manifest_applies_server_side_with_the_kustomize_objects(prepared: LabHandle):
    subprocess.run(["make", "-s", "release-manifest"], cwd=ROOT, check=True,
                   capture_output=True, text=True, timeout=300)
    built = {install.key(d) for d in render(prepared, "manifests/default")}
    accepted = server_side_dry_run(prepared, (ROOT / "dist/pykueue.yaml").read_text())
    assert set(accepted) == built
    assert accepted[("Deployment", "pykueue-system", "pykueue")]["spec"]["replicas"] == 2
    # The cert-manager variant: the same objects, plus cert-manager's Issuer and Certificate
    # (cert-manager is not installed in the lab: left out of the dry run).
    docs = install.docs_of((ROOT / "dist/pykueue-cert-manager.yaml").read_text())
    ours = [d for d in docs if not d["apiVersion"].startswith(CERT_MANAGER_GROUP)]
    assert {install.key(d) for d in docs} - {install.key(d) for d in ours} == {
        ("Issuer", "pykueue-system", "pykueue-selfsigned-issuer"),
        ("Certificate", "pykueue-system", "pykueue-serving-cert")}
    assert set(server_side_dry_run(prepared, yaml.safe_dump_all(ours))) == built


def test_helm_chart_applies_server_side_with_the_kustomize_objects(prepared: LabHandle):
    rendered = install.helm_template().stdout
    built = {install.key(d) for d in render(prepared, "manifests/default")}
    accepted = server_side_dry_run(prepared, rendered)
    assert set(accepted) == built
    crd = accepted[("CustomResourceDefinition", "", "clusterqueues.kueue.x-k8s.io")]
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"

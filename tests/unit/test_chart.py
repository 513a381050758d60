"""The Helm chart (charts/pykueue) and the kustomize build of manifests/ do not drift apart:
with default values ``helm template`` renders the same objects (kind, namespace, name), the
same RBAC rules, the same webhooks (paths, rules, selectors, failurePolicy), the same CRDs, and
the rest equal but for the chart's own annotations. The values reach the configuration file
pykueue reads (app/config.py). Needs the lab's kubectl and Helm (`make controlplane helm`)."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from app.config import KUEUE_FRAMEWORKS, Settings
from tests.install_support import (
    ROOT,
    Obj,
    by_key,
    chart,
    helm_template,
    key,
    kubectl_binary,
    kustomize,
)

CONFIG = ("ConfigMap", "pykueue-system", "pykueue-config")
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


@pytest.fixture(scope="module")
def built() -> dict[tuple[str, str, str], Obj]:
    return by_key(kustomize())


@pytest.fixture(scope="module")
def rendered() -> dict[tuple[str, str, str], Obj]:
    return by_key(chart())


def config_file(docs: dict[tuple[str, str, str], Obj]) -> Obj:
    return yaml.safe_load(docs[CONFIG]["data"]["config.yaml"])


def normalized(doc: Obj) -> Obj:
    """``doc`` without what only the chart adds: the CRDs' keep policy, the pod template's
    configuration checksum; the configuration file compared as YAML, not as text."""
    doc = copy.deepcopy(doc)
    doc["metadata"].get("annotations", {}).pop("helm.sh/resource-policy", None)
    if doc["kind"] == "Deployment":
        doc["spec"]["template"]["metadata"].get("annotations", {}).pop("checksum/config", None)
    if key(doc) == CONFIG:
        doc["data"]["config.yaml"] = yaml.safe_load(doc["data"]["config.yaml"])
    for holder in (doc["metadata"], doc["spec"]["template"]["metadata"]
                   if doc["kind"] == "Deployment" else {}):
        if holder.get("annotations") == {}:
            del holder["annotations"]
    return doc


def webhooks(docs: dict[tuple[str, str, str], Obj]) -> dict[str, Obj]:
    return {w["name"]: w for k, d in docs.items() if k[0] in WEBHOOK_KINDS
            for w in d["webhooks"] or ()}


def test_chart_is_generated_from_the_current_manifests():
    r = subprocess.run([sys.executable, str(ROOT / "hack" / "gen_chart.py"), "--check"],
                       capture_output=True, text=True, timeout=120,
                       env={"KUBECTL": str(kubectl_binary()), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr


def test_same_objects_by_kind_namespace_and_name(built, rendered):
    assert set(rendered) == set(built)


def test_same_rbac_rules_and_bindings(built, rendered):
    for k, doc in built.items():
        if k[0] in ("ClusterRole", "Role"):
            assert rendered[k]["rules"] == doc["rules"], k
        if k[0] in ("ClusterRoleBinding", "RoleBinding"):
            assert (rendered[k]["roleRef"], rendered[k]["subjects"]) == (
                doc["roleRef"], doc["subjects"]), k


def test_same_webhooks_paths_rules_selectors_and_failure_policy(built, rendered):
    ours, theirs = webhooks(built), webhooks(rendered)
    assert set(theirs) == set(ours)
    for name, w in ours.items():
        for field in ("clientConfig", "rules", "objectSelector", "namespaceSelector",
                      "failurePolicy", "matchConditions", "sideEffects", "timeoutSeconds",
                      "matchPolicy", "reinvocationPolicy", "admissionReviewVersions"):
            assert theirs[name].get(field) == w.get(field), (name, field)


def test_same_crds(built, rendered):
    crds = [k for k in built if k[0] == "CustomResourceDefinition"]
    assert len(crds) == 9
    for k in crds:
        assert rendered[k]["spec"] == built[k]["spec"], k
        # helm uninstall keeps them: deleting a CRD deletes every object of its kind.
        assert rendered[k]["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_every_object_equal_but_for_the_charts_annotations(built, rendered):
    for k, doc in built.items():
        assert normalized(rendered[k]) == normalized(doc), k


def test_manifests_configuration_file_states_pykueues_defaults(built, tmp_path, monkeypatch):
    """The ConfigMap (and so the chart's default values) changes no default of
    app.config.Settings: the Deployment behaves as `pykueue serve` without a file."""
    settings = load_settings(built[CONFIG], monkeypatch, tmp_path)
    default = Settings()
    for group in config_file(built):
        assert getattr(settings, group) == getattr(default, group), group


def load_settings(configmap: Obj, monkeypatch, directory: Path) -> Settings:
    """Settings as the Deployment's container reads them: the ConfigMap's file through
    PYKUEUE_CONFIG_FILE, plus the Deployment's own PYKUEUE_LEADER_ELECTION__NAMESPACE."""
    f = directory / "config.yaml"
    f.write_text(configmap["data"]["config.yaml"])
    monkeypatch.setenv("PYKUEUE_CONFIG_FILE", str(f))
    monkeypatch.setenv("PYKUEUE_LEADER_ELECTION__NAMESPACE", "pykueue-system")
    return Settings()


VALUES = {
    "replicaCount": 3,
    "image": {"repository": "registry.example.com/pykueue", "tag": "9.9.9",
              "pullPolicy": "Always"},
    "resources": {"requests": {"cpu": "2", "memory": "1Gi"}},
    "config": {
        "leader_election": {"enabled": True},
        "integrations": {"frameworks": ["batch/job", "kubeflow.org/pytorchjob"]},
        "wait_for_pods_ready": {"enable": False, "timeout_seconds": 300},
        "fair_sharing": {"enable": True, "preemption_strategies": ["LessThanInitialShare"]},
        "admission_fair_sharing": {"enable": True, "usage_half_life_time": "168h",
                                   "resource_weights": {"nvidia.com/gpu": 4}},
        "resources": {"deviceClassMappings": [
            {"name": "example.com/gpu", "deviceClassNames": ["gpu.example.com"]}]},
    },
}


def test_values_reach_the_deployment_and_the_configuration_pykueue_reads(tmp_path,
                                                                         monkeypatch):
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(VALUES))
    docs = by_key(chart("-f", str(values)))
    dep = docs[("Deployment", "pykueue-system", "pykueue")]
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert dep["spec"]["replicas"] == 3
    assert (c["image"], c["imagePullPolicy"]) == ("registry.example.com/pykueue:9.9.9", "Always")
    # Helm merges maps with the defaults: the limits stay, the requests are replaced.
    assert c["resources"] == {"requests": {"cpu": "2", "memory": "1Gi"},
                              "limits": {"cpu": "1", "memory": "512Mi"}}
    s = load_settings(docs[CONFIG], monkeypatch, tmp_path)
    assert s.leader_election.enabled and s.leader_election.namespace == "pykueue-system"
    assert s.integrations.frameworks == ["batch/job", "kubeflow.org/pytorchjob"]
    assert (s.wait_for_pods_ready.enable, s.wait_for_pods_ready.timeout_seconds) == (False, 300)
    assert s.fair_sharing.core() is not None
    assert s.fair_sharing.preemption_strategies == ["LessThanInitialShare"]
    afs = s.admission_fair_sharing.core()
    assert afs is not None and afs.half_life_s == 168 * 3600
    assert afs.resource_weights == {"nvidia.com/gpu": 4.0}
    assert s.resources.device_classes() == {"gpu.example.com": "example.com/gpu"}
    # Another configuration, another checksum: `helm upgrade` rolls the pods.
    default_dep = by_key(chart())[("Deployment", "pykueue-system", "pykueue")]
    assert (dep["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
            != default_dep["spec"]["template"]["metadata"]["annotations"]["checksum/config"])


def test_webhooks_of_frameworks_not_enabled_are_not_installed(built):
    frameworks = '{"frameworks": ["batch/job", "kubeflow.org/pytorchjob"]}'
    docs = by_key(chart("--set-json", f"config.integrations={frameworks}"))
    assert set(webhooks(docs)) == {"mjob.pykueue.io", "vjob.pykueue.io",
                                   "mpytorchjob.pykueue.io", "vpytorchjob.pykueue.io",
                                   "vpodowner.pykueue.io", "mclusterqueue.pykueue.io",
                                   "mresourceflavor.pykueue.io"}
    # Every framework's webhooks are in the default chart (all of KUEUE_FRAMEWORKS enabled).
    assert config_file(built)["integrations"]["frameworks"] == list(KUEUE_FRAMEWORKS)


def test_several_replicas_without_leader_election_are_refused():
    r = helm_template("--set", "config.leader_election.enabled=false", check=False)
    assert r.returncode != 0
    assert "replicaCount > 1 needs config.leader_election.enabled" in r.stderr
    one = by_key(chart("--set", "config.leader_election.enabled=false",
                       "--set", "replicaCount=1"))
    assert one[("Deployment", "pykueue-system", "pykueue")]["spec"]["replicas"] == 1


def test_cert_manager_option_renders_the_overlays_issuer_certificate_and_injection():
    overlay = by_key(kustomize("manifests/overlays/cert-manager"))
    docs = by_key(chart("--set", "certManager.enable=true"))
    assert set(docs) == set(overlay)
    for k, doc in overlay.items():
        assert normalized(docs[k]) == normalized(doc), k


def test_ca_bundle_value_fills_every_webhook():
    docs = by_key(chart("--set", "webhook.caBundle=Q0EK"))
    hooks = webhooks(docs)
    assert hooks and {w["clientConfig"]["caBundle"] for w in hooks.values()} == {"Q0EK"}
    assert all("caBundle" not in w["clientConfig"] for w in webhooks(by_key(chart())).values())


def test_namespace_can_be_left_to_the_user(built):
    docs = by_key(chart("--set", "namespace.create=false"))
    assert set(built) - set(docs) == {("Namespace", "", "pykueue-system")}


def test_every_webhook_belongs_to_a_kueue_framework_or_guards_every_kind():
    """The chart leaves out the webhooks of a disabled framework: each webhook of
    manifests/webhook must name one of Kueue's frameworks (the pod-owner guard and the
    ClusterQueue and ResourceFlavor finalizer webhooks: none)."""
    sys.path.insert(0, str(ROOT / "hack"))
    import gen_chart

    docs = yaml.safe_load_all((ROOT / "manifests/webhook/webhooks.yaml").read_text())
    seen = {w["name"]: gen_chart.webhook_framework(w) for d in docs for w in d["webhooks"]}
    assert seen.pop("vpodowner.pykueue.io") is None
    # Kueue's own kinds (the resource-in-use finalizer): installed whatever the frameworks.
    assert seen.pop("mclusterqueue.pykueue.io") is None
    assert seen.pop("mresourceflavor.pykueue.io") is None
    assert set(seen.values()) == set(KUEUE_FRAMEWORKS)
    assert seen["vstatefulset-scale.pykueue.io"] == "statefulset"


def test_visibility_apiservices_follow_config_visibility_enabled(built):
    """Off, the APIServices are not installed: one whose listener is off breaks discovery."""
    off = by_key(chart("--set", "config.visibility.enabled=false"))
    assert {k for k in set(built) - set(off)} == {
        ("APIService", "", "v1beta2.visibility.kueue.x-k8s.io"),
        ("APIService", "", "v1beta1.visibility.kueue.x-k8s.io")}
    assert yaml.safe_load(off[CONFIG]["data"]["config.yaml"])["visibility"]["enabled"] is False


def test_listener_ports_and_env_settings_follow_the_config_file(tmp_path, monkeypatch):
    """The Deployment's PYKUEUE_<GROUP>__<FIELD> variables win over the config file in
    pykueue: the chart takes each from config.<group>.<field>, and the listeners' ports reach
    the container ports and the NetworkPolicy, so no config value is silently overridden."""
    docs = by_key(chart("--set", "config.visibility.port=9090",
                        "--set", "config.server.port=9444"))
    dep = docs[("Deployment", "pykueue-system", "pykueue")]
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert (env["PYKUEUE_SERVER__PORT"], env["PYKUEUE_VISIBILITY__PORT"]) == ("9444", "9090")
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"https": 9444,
                                                                   "visibility": 9090}
    (policy,) = [d for k, d in docs.items() if k[0] == "NetworkPolicy"]
    assert sorted(p["port"] for r in policy["spec"]["ingress"] for p in r["ports"]) == [
        9090, 9444]
    for name, value in env.items():
        if value is not None and name.startswith("PYKUEUE_") and name != "PYKUEUE_CONFIG_FILE":
            monkeypatch.setenv(name, value)
    s = load_settings(docs[CONFIG], monkeypatch, tmp_path)
    assert (s.server.port, s.visibility.port) == (9444, 9090)

"""The install's wiring of Kueue's visibility API (manifests/default, its release manifest and
the chart generated from it): each APIService goes to a Service port whose target is the
Deployment's containerPort on which pykueue's visibility listener runs (its
PYKUEUE_VISIBILITY__PORT), not the main port, and the NetworkPolicy admits that port for
kube-apiserver. Needs the lab's kubectl (`make controlplane`)."""

from __future__ import annotations

from typing import Any

import pytest

from app.config import Settings, VisibilitySettings
from tests.install_support import kustomize

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def docs() -> list[Obj]:
    return kustomize()


def one(docs: list[Obj], kind: str) -> Obj:
    (doc,) = [d for d in docs if d["kind"] == kind]
    return doc


def test_the_apiservices_reach_the_visibility_listener_not_the_main_port(docs):
    svc, dep = one(docs, "Service"), one(docs, "Deployment")
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    container_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    listener = int(env["PYKUEUE_VISIBILITY__PORT"])
    assert listener == VisibilitySettings().port == 8082  # Kueue's visibility server's port
    assert listener != int(env["PYKUEUE_SERVER__PORT"])
    apiservices = [d for d in docs if d["kind"] == "APIService"]
    assert {d["spec"]["version"] for d in apiservices} == {"v1beta2", "v1beta1"}
    for d in apiservices:
        ref = d["spec"]["service"]
        assert (ref["name"], ref["namespace"]) == (svc["metadata"]["name"],
                                                   svc["metadata"]["namespace"])
        (port,) = [p for p in svc["spec"]["ports"] if p["port"] == ref["port"]]
        target = port["targetPort"]
        assert container_ports.get(target, target) == listener, (ref, port, container_ports)
    # Settings as the Deployment gives them: two listeners on two ports.
    settings = Settings(server={"port": int(env["PYKUEUE_SERVER__PORT"])},
                        visibility={"port": listener})
    assert settings.visibility.served


def test_the_network_policy_admits_the_visibility_port_from_outside_the_pod_network(docs):
    policy = one(docs, "NetworkPolicy")
    listener = next(int(e["value"]) for e in
                    one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]
                    if e["name"] == "PYKUEUE_VISIBILITY__PORT")
    (rule,) = [r for r in policy["spec"]["ingress"]
               if {"port": listener, "protocol": "TCP"} in r["ports"]]
    assert rule["ports"] == [{"port": listener, "protocol": "TCP"}]
    assert all("ipBlock" in peer and peer["ipBlock"].get("except") for peer in rule["from"])


def test_the_visibility_port_may_not_be_the_main_port():
    with pytest.raises(ValueError, match="listener of its own"):
        Settings(server={"port": 8082})
    assert not Settings(server={"port": 8082}, visibility={"port": 0}).visibility.served

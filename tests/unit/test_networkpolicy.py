"""The NetworkPolicy (manifests/manager/networkpolicy.yaml, issue 14 item 2): it selects the
pykueue pods, admits only their HTTPS port, and no peer of it admits every pod."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MANAGER = ROOT / "manifests" / "manager"


def _load(name: str) -> dict:
    return yaml.safe_load((MANAGER / name).read_text())


def test_the_policy_selects_the_deployments_pods_and_only_its_https_ports():
    """One rule per container port: HTTPS 9443 and the visibility listener's 8082."""
    policy, dep = _load("networkpolicy.yaml"), _load("deployment.yaml")
    assert policy["metadata"]["namespace"] == dep["metadata"]["namespace"]
    assert policy["spec"]["podSelector"]["matchLabels"] == \
        dep["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    rules = policy["spec"]["ingress"]
    assert [r["ports"] for r in rules] == [[{"port": p["containerPort"], "protocol": "TCP"}]
                                           for p in container["ports"]]
    assert "networkpolicy.yaml" in (MANAGER / "kustomization.yaml").read_text()


@pytest.mark.parametrize("index", [0, 1])
def test_no_peer_admits_every_pod(index):
    rule = _load("networkpolicy.yaml")["spec"]["ingress"][index]
    assert rule["from"], "an empty `from` admits everyone"
    for peer in rule["from"]:
        assert peer, "an empty peer admits every pod"
        assert "podSelector" not in peer or "namespaceSelector" in peer
        if "namespaceSelector" in peer:
            assert peer["namespaceSelector"].get("matchLabels"), "{} selects every namespace"
        if "ipBlock" in peer:
            block = ipaddress.ip_network(peer["ipBlock"]["cidr"])
            excepted = [ipaddress.ip_network(c) for c in peer["ipBlock"].get("except", [])]
            # An address block wide enough to hold a pod network keeps one out.
            assert block.prefixlen > 8 or any(e.subnet_of(block) for e in excepted), peer

"""The RayCluster checks of an admitted RayJob's cluster (the lab twins are in
``tests/e2e/test_ray_quota_gaps.py`` and ``tests/e2e/test_ray_dra_gap.py``): worker groups are
matched to podSets by lower-cased name (``gpu``, ``Gpu``, ``GPU`` are one podSet, as Kueue
names it) in the webhook and in the set-back, so a renamed or case-variant group is compared
with its podSet's template; and DRA claims are compared with the per-pod requests."""

from __future__ import annotations

import copy
from typing import Any

from app.integrations.ray.ray import changed_requests, raised_groups, with_admitted_templates


def _container(gpus: int) -> dict[str, Any]:
    res = {"nvidia.com/gpu": str(gpus)} if gpus else {"cpu": "1"}
    return {"name": "ray", "image": "ray", "resources": {"requests": res, "limits": res}}


HEAD = {"spec": {"containers": [_container(0)]}}
WORKER = {"spec": {"containers": [_container(1)]}}
SPEC = {"headGroupSpec": {"template": HEAD},
        "workerGroupSpecs": [{"groupName": "gpu", "replicas": 1, "template": WORKER}]}
RAYJOB = {"kind": "RayJob", "metadata": {"name": "rj", "namespace": "ns"},
          "spec": {"rayClusterSpec": SPEC}}
WORKLOAD = {"kind": "Workload", "metadata": {"name": "w", "namespace": "ns"},
            "spec": {"queueName": "lq", "podSets": [
                {"name": "head", "count": 1, "template": HEAD},
                {"name": "gpu", "count": 1, "template": WORKER}]}}


def _cluster() -> dict[str, Any]:
    return {"kind": "RayCluster", "metadata": {"name": "rc", "namespace": "ns"},
            "spec": copy.deepcopy(SPEC)}


def _renamed_and_raised() -> dict[str, Any]:
    rc = _cluster()
    group = rc["spec"]["workerGroupSpecs"][0]
    group["groupName"] = "Gpu"
    group["template"]["spec"]["containers"][0] = _container(4)
    return rc


def test_a_renamed_group_with_raised_gpus_is_set_back() -> None:
    body, fields = with_admitted_templates(_renamed_and_raised(), RAYJOB, WORKLOAD)
    assert fields and body["spec"].get("suspend") is True


def test_the_webhook_sees_a_renamed_group_with_raised_gpus() -> None:
    old, new = _cluster(), _renamed_and_raised()
    assert raised_groups(old, new) or changed_requests(old, new)


def test_an_added_case_variant_group_with_raised_gpus_is_set_back() -> None:
    rc = _cluster()
    extra = copy.deepcopy(rc["spec"]["workerGroupSpecs"][0])
    extra["groupName"] = "GPU"
    extra["template"]["spec"]["containers"][0] = _container(4)
    rc["spec"]["workerGroupSpecs"][0]["replicas"] = 0
    rc["spec"]["workerGroupSpecs"].append(extra)
    body, fields = with_admitted_templates(rc, RAYJOB, WORKLOAD)
    assert fields and body["spec"].get("suspend") is True


def _with_claim(rc: dict[str, Any], template: str) -> dict[str, Any]:
    """``rc`` whose worker pods get a device claim from ResourceClaimTemplate ``template``."""
    spec = rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": template}]
    spec["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    return rc


def test_a_worker_template_switched_to_a_bigger_claim_template_is_seen() -> None:
    """A RayJob whose workers claim devices through ResourceClaimTemplate ``one-gpu`` (counted
    in quota through ``resources.deviceClassMappings``); the tenant points its RayCluster's
    worker template at ``four-gpus``, which the per-pod requests do not see."""
    old = _with_claim(_cluster(), "one-gpu")
    new = _with_claim(_cluster(), "four-gpus")
    assert changed_requests(old, new)

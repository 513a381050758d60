"""brk30: a breaker's findings against 87ed464, each closed in 7175cb8 (a ``generateName``
component's prefix names it only while the controller creates it, phase ``Resuming``; a
Job's share follows its controller). As found:

H (``AppWrapper.child_job_pods`` through ``names_component``): while a ``generateName``
component of an admitted, running AppWrapper is not deployed (appwrapper v1.2.0 phase
``Resetting``: its components deleted, ``ResourcesDeployed`` False ``CompononetDeleted``,
for ``retryPausePeriodDuration``, an annotation the tenant sets, up to
``GracePeriodMaximum``, 24 h by default; also ``ComponentCreationErrored`` retried for the
``admissionGracePeriodDuration``), every batch Job with the component's prefix that the
tenant hangs under the AppWrapper gets the component's whole share: N such Jobs run N times
the admitted pods (the shares are not exclusive), with pods asking whatever they like.

L (``child_job_pods``' first match): a JobSet component's Job whose name starts with an
undeployed ``generateName`` Job component's prefix takes that component's share.

M (webhook ``vappwrapper-wrapped-owned``, brk29 L's remainder): the same window lets a
tenant's Deployments with the prefix join the AppWrapper as its component (not suspended,
not deployed), any number of them; once the controller records its own, they are no
component, so nothing holds them (scaled to 8). docs/security.md calls the window "the
moments of the controller's own create"; in default settings (``child_job_creators``
empty) it is as long as the tenant sets the retry pause."""

from __future__ import annotations

import copy
from typing import Any

from app.integrations.appwrapper.appwrapper import KIND
from app.integrations.framework import child_share
from tests.unit.test_appwrapper import aw, job
from tests.unit.test_appwrapper_wrapped import (
    create_review,
    decide,
    object_review,
    owned,
    queued_appwrapper,
)

RESETTING = [{"type": "ResourcesDeployed", "status": "False", "reason": "CompononetDeleted"}]


def _resetting(obj: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """``obj`` admitted and running as appwrapper v1.2.0 leaves it in ``Resetting`` once
    ``deleteComponents`` is done: unsuspended, each component's old name kept with
    ``ResourcesDeployed`` False."""
    out = copy.deepcopy(obj)
    out["spec"]["suspend"] = False
    out["metadata"]["annotations"] = {
        "workload.codeflare.dev.appwrapper/retryPausePeriodDuration": "24h"}
    out["status"] = {"phase": "Resetting", "componentStatus": [
        {"name": n, "conditions": copy.deepcopy(RESETTING)} for n in names]}
    return out


def test_jobs_with_the_prefix_share_one_component_not_each_its_whole() -> None:
    """AppWrapper ``aw`` wraps one Job by ``generateName: j-`` (2 pods admitted), in the
    ``Resetting`` pause. The tenant creates 5 Jobs ``j-e0``..``j-e4`` (parallelism 2 each)
    with a controller ownerReference to it (the Job webhook lets anyone, as Kueue, unless
    ``webhook.child_job_creators`` is set): each gets a share of 2, so the child-Job rule
    leaves 10 pods running on an admission of 2 until the controller records a new name."""
    template = job("j", 2)
    template["metadata"] = {"generateName": "j-"}
    obj = _resetting(aw(template), ["j-old"])

    def tenant_job(name: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "ownerReferences": [
            {"kind": "AppWrapper", "name": "aw", "uid": "u1", "controller": True}]},
            "spec": {"parallelism": 2}}
    shares = [child_share(KIND, obj, tenant_job(f"j-e{i}")) for i in range(5)]
    assert sum(shares) <= 2, f"shares {shares}: {sum(shares)} pods on an admission of 2"


async def test_an_extra_deployment_joined_in_the_reset_pause_is_held() -> None:
    """AppWrapper ``dep`` (a side Job, a Deployment by ``generateName: dep-``, 1 replica of 1
    GPU) in the ``Resetting`` pause (unsuspended, both components ``CompononetDeleted``).
    The tenant (alice) creates ``dep-evil`` under it: allowed as the component. The
    controller then creates and records ``dep-x7k2p``; ``dep-evil`` is no component, so
    alice raising it to 8 replicas passes: 9 GPU pods on an admission of 1."""
    resetting = _resetting(queued_appwrapper(generateName="dep-"), ["side", "dep-x7k2p"])
    created = (await decide(create_review(owned(1, name="dep-evil")), resetting))["allowed"]
    running = copy.deepcopy(resetting)
    for entry in running["status"]["componentStatus"]:
        entry["conditions"] = [{"type": "ResourcesDeployed", "status": "True",
                                "reason": "ComponentCreatedSuccessfully"}]
    running["status"]["phase"] = "Running"
    review = object_review(owned(1, name="dep-evil"), owned(8, name="dep-evil"))
    review["request"]["name"] = "dep-evil"
    scaled = (await decide(review, running))["allowed"]
    assert not (created and scaled), "dep-evil created under the AppWrapper, then raised to 8"


def test_a_jobsets_job_has_its_replicated_jobs_share_not_a_prefix_components() -> None:
    """AppWrapper ``aw``: a Job by ``generateName: a-`` (8 pods) and JobSet ``a-b``
    (replicatedJob ``c``, 1 replica of 1 pod), being reset: the controller's
    ``deleteComponents`` has seen the Job gone (``ResourcesDeployed`` False) while JobSet
    ``a-b`` is still there (True until its DELETE answers NotFound), its Job ``a-b-c-0``
    running. That Job (controlled by JobSet ``a-b``) is matched against the components in
    order (``child_job_pods``): the Job component's prefix ``a-`` takes it first, so its
    share is 8, not 1, and the tenant may raise its parallelism to 8 (the webhook's
    ``child_job_share`` and the child-Job rule agree)."""
    template = job("j", 8)
    template["metadata"] = {"generateName": "a-"}
    js = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "a-b"},
          "spec": {"replicatedJobs": [{"name": "c", "replicas": 1, "template": {"spec": {
              "parallelism": 1, "template": {"spec": {"containers": [{"name": "c"}]}}}}}]}}
    obj = aw(template, js)
    obj["spec"]["suspend"] = False
    cond = [{"type": "ResourcesDeployed", "status": "False", "reason": "CompononetDeleted"}]
    done = [{"type": "ResourcesDeployed", "status": "True",
             "reason": "ComponentCreatedSuccessfully"}]
    obj["status"] = {"phase": "Resetting", "componentStatus": [
        {"name": "a-k2n4p", "conditions": cond}, {"name": "a-b", "conditions": done}]}
    jobsets_job = {"metadata": {"name": "a-b-c-0", "ownerReferences": [
        {"kind": "JobSet", "name": "a-b", "uid": "js-uid", "controller": True}]}}
    assert child_share(KIND, obj, jobsets_job) == 1
    # The same while the controller creates (phase Resuming), when the prefix names the Job
    # component: the JobSet's Job still has its replicatedJob's share.
    obj["status"]["phase"] = "Resuming"
    assert child_share(KIND, obj, jobsets_job) == 1

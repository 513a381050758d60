"""manageJobsWithoutQueueName for Pods, Deployments and StatefulSets.

Kueue applies ``manageJobsWithoutQueueName`` (with ``managedJobsNamespaceSelector``) to every
integration, the Pod one included (Kueue v0.17.1 ``pod_webhook.go`` ``Default``; docs "Setup
manageJobsWithoutQueueName"; KEP-3589): an unlabelled Pod in a managed namespace that no
managed job kind controls is gated and queued, and an unlabelled Deployment's or
StatefulSet's pod template is marked as Kueue's. Before this, pykueue's setting covered Jobs
only: on the lab a tenant ran a 2-GPU bare Pod with the A100 flavor's nodeSelector and
tolerations and no queue label, outside any quota (breaker8; issue 31: 3 such pods, 6 GPUs,
usage 0)."""

from __future__ import annotations

from typing import Any

import pytest

from app.config import JobsSettings, Settings
from app.controllers.manager import Manager
from app.integrations.pod.group import PodGroup
from app.integrations.pod.pod import KIND as POD_KIND
from tests.unit.test_webhook import (
    CONTROLLER,
    Lookups,
    answer,
    apply_patch,
    decoded_patch,
    make_app,
    post,
    review,
)

GATE = "kueue.x-k8s.io/admission"
MANAGED = "kueue.x-k8s.io/managed"
POD_KIND_REF = {"group": "", "version": "v1", "kind": "Pod"}
ON = JobsSettings(manage_jobs_without_queue_name=True)


def _pod(**meta: Any) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", **meta},
            "spec": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
                     "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                     "containers": [{"name": "c", "image": "x", "resources": {
                         "requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]}}


async def _mutated(obj: dict, *, managed: bool | None = True, jobs: JobsSettings = ON,
                   namespace: str = "ns", path: str = "/mutate--v1-pod",
                   kind: dict | None = None) -> dict:
    app = make_app(default_queue=Lookups(default_queue=False, managed=managed), jobs=jobs)
    sent = review("CREATE", obj, kind=kind or POD_KIND_REF)
    sent["request"]["namespace"] = namespace
    response = answer(await post(app, path, sent), sent)
    assert response["allowed"] is True
    return apply_patch(sent["request"]["object"], decoded_patch(response)) \
        if "patch" in response else sent["request"]["object"]


def _gates(pod: dict) -> list[str]:
    return [g.get("name") for g in pod["spec"].get("schedulingGates") or []]


async def test_manage_jobs_without_queue_name_gates_an_unlabelled_pod() -> None:
    patched = await _mutated(_pod())
    assert GATE in _gates(patched)
    assert patched["metadata"]["labels"] == {MANAGED: "true"}


async def test_an_unlabelled_pod_naming_its_node_is_gated_too() -> None:
    """``spec.nodeName`` skips kube-scheduler (and so the extender); the gate makes the API
    server refuse the Pod ("cannot be set until all schedulingGates have been cleared")."""
    pod = _pod(labels={"app": "x"})
    pod["spec"]["nodeName"] = "a100-0"
    patched = await _mutated(pod)
    assert GATE in _gates(patched) and patched["metadata"]["labels"][MANAGED] == "true"


@pytest.mark.parametrize(("managed", "jobs", "namespace"), [
    (False, ON, "ns"),  # the namespace selector does not match
    (True, JobsSettings(), "ns"),  # the setting is off (Kueue's default)
    (None, ON, "kube-system"),  # namespace unknown to the stores: judged by its name
])
async def test_an_unlabelled_pod_is_left_alone_outside_the_setting(
        managed: bool | None, jobs: JobsSettings, namespace: str) -> None:
    patched = await _mutated(_pod(), managed=managed, jobs=jobs, namespace=namespace)
    assert _gates(patched) == [] and "labels" not in patched["metadata"]


async def test_a_namespace_not_seen_yet_is_judged_by_its_name() -> None:
    assert GATE in _gates(await _mutated(_pod(), managed=None, namespace="team-a"))


async def test_a_pod_of_a_managed_job_kind_is_its_owners_business() -> None:
    owned = _pod(ownerReferences=[{"apiVersion": "batch/v1", "kind": "Job", "name": "j",
                                   "uid": "u", "controller": True}])
    assert _gates(await _mutated(owned)) == []
    # A ReplicaSet (a Deployment's) or a DaemonSet is no job kind: its pods are gated, as
    # in Kueue.
    for kind in ("ReplicaSet", "DaemonSet"):
        rs = _pod(ownerReferences=[{"apiVersion": "apps/v1", "kind": kind, "name": "r",
                                    "uid": "u", "controller": True}])
        assert GATE in _gates(await _mutated(rs))


async def test_an_ungated_unlabelled_pod_of_a_managed_namespace_is_refused() -> None:
    """The validating webhook's check for when the mutating one was bypassed."""
    app = make_app(default_queue=Lookups(managed=True), jobs=ON)
    sent = review("CREATE", _pod(), kind=POD_KIND_REF)
    response = answer(await post(app, "/validate--v1-pod", sent), sent)
    assert response["allowed"] is False
    assert "namespace pykueue manages" in response["status"]["message"]
    sent = review("CREATE", _pod(), kind=POD_KIND_REF, user=CONTROLLER)
    assert answer(await post(app, "/validate--v1-pod", sent), sent)["allowed"] is True


async def test_only_pykueue_lifts_the_gate_of_an_unlabelled_pod() -> None:
    app = make_app(default_queue=Lookups(managed=True), jobs=ON)
    old = _pod(labels={MANAGED: "true"})
    old["spec"]["schedulingGates"] = [{"name": GATE}]
    new = _pod(labels={MANAGED: "true"})
    sent = review("UPDATE", new, old, kind=POD_KIND_REF)
    response = answer(await post(app, "/validate--v1-pod", sent), sent)
    assert response["allowed"] is False and "only pykueue may remove" in \
        response["status"]["message"]


def _owner(kind: str) -> dict:
    return {"apiVersion": "apps/v1", "kind": kind,
            "metadata": {"name": "d", "namespace": "ns"},
            "spec": {"replicas": 2, "template": {
                "metadata": {"labels": {"app": "d"}},
                "spec": {"containers": [{"name": "c", "image": "x"}]}}}}


@pytest.mark.parametrize(("kind", "path", "parent"), [
    ("Deployment", "/mutate-apps-v1-deployment", "deployment"),
    ("StatefulSet", "/mutate-apps-v1-statefulset", "statefulset"),
])
async def test_an_unlabelled_owner_of_a_managed_namespace_marks_its_pod_template(
        kind: str, path: str, parent: str) -> None:
    """Kueue ``WorkloadShouldBeSuspended``: the template is marked as Kueue's (managed label,
    suspending parent), without a queue label; its pods then wait for one."""
    ref = {"group": "apps", "version": "v1", "kind": kind}
    patched = await _mutated(_owner(kind), path=path, kind=ref)
    meta = patched["spec"]["template"]["metadata"]
    assert meta["labels"] == {"app": "d", MANAGED: "true"}
    assert meta["annotations"] == {"kueue.x-k8s.io/pod-suspending-parent": parent}
    untouched = await _mutated(_owner(kind), path=path, kind=ref, managed=False)
    assert untouched == _owner(kind)


def test_the_pod_informer_lists_every_pod_marked_managed_when_the_setting_is_on() -> None:
    on = Manager(Settings(controllers_enabled=False, jobs=ON))
    off = Manager(Settings(controllers_enabled=False))
    assert on._selector(POD_KIND) == f"{MANAGED}=true"
    assert off._selector(POD_KIND) == POD_KIND.label_selector


def test_only_marked_pods_outside_a_group_are_queued_on_their_own() -> None:
    marked = _pod(labels={MANAGED: "true"})
    member = _pod(labels={MANAGED: "true", "kueue.x-k8s.io/pod-group-name": "g"})
    assert POD_KIND.takes_unlabelled(marked)
    assert not POD_KIND.takes_unlabelled(_pod(labels={"app": "x"}))
    assert not POD_KIND.takes_unlabelled(member)
    assert PodGroup().takes_unlabelled({"pods": [member]})
    assert not PodGroup().takes_unlabelled({"pods": [_pod()]})


async def test_a_pod_claiming_a_managed_owner_cannot_name_its_node() -> None:
    """Such a Pod is left ungated for its owner (Kueue); with ``spec.nodeName`` it would skip
    kube-scheduler and the extender, which checks its owner's admission."""
    app = make_app(default_queue=Lookups(managed=True), jobs=ON)
    owned = _pod(ownerReferences=[{"apiVersion": "batch/v1", "kind": "Job", "name": "j",
                                   "uid": "u", "controller": True}])
    owned["spec"]["nodeName"] = "a100-0"
    sent = review("CREATE", owned, kind=POD_KIND_REF)
    response = answer(await post(app, "/validate--v1-pod", sent), sent)
    assert response["allowed"] is False and "spec.nodeName" in response["status"]["message"]
    del owned["spec"]["nodeName"]
    sent = review("CREATE", owned, kind=POD_KIND_REF)
    assert answer(await post(app, "/validate--v1-pod", sent), sent)["allowed"] is True

"""The Deployments and StatefulSets an AppWrapper wraps keep to the podSet it was admitted
for (``app.integrations.appwrapper.wrapped``): an UPDATE of the object or of its ``scale``
subresource raising ``replicas`` above the podSet count is refused; lowering, objects no
queued AppWrapper wraps and pykueue's own writes pass. Through the HTTP webhook, with the
lookup answered by the real store lookup over stub stores."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from app.config import Settings
from app.controllers.admission_lookup import StoreAdmissionLookup
from app.integrations import default_registry
from app.integrations.appwrapper.appwrapper import KIND as APPWRAPPER
from app.integrations.appwrapper.appwrapper import wrapped_replicas
from app.integrations.appwrapper.wrapped import PATH
from app.kube.client import JOBS
from app.kube.informers import Store
from tests.unit.test_webhook import CONTROLLER, answer, make_app, post


def appwrapper(kind: str = "Deployment", replicas: int = 1,
               declared: int | None = None) -> dict[str, Any]:
    comp: dict[str, Any] = {"template": {
        "apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "dep-d"},
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "c"}]}}}}}
    if declared is not None:
        comp["podSets"] = [{"path": "template.spec.template", "replicas": declared}]
    return {"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
            "metadata": {"name": "dep", "namespace": "research",
                         "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
            "spec": {"components": [
                {"template": {"apiVersion": "batch/v1", "kind": "Job",
                              "metadata": {"name": "side"},
                              "spec": {"template": {"spec": {}}}}}, comp]}}


def lookup(*appwrappers: dict[str, Any]) -> StoreAdmissionLookup:
    store = Store(JOBS)
    for aw in appwrappers:
        store.put(aw)
    ctx = SimpleNamespace(store=lambda k: store if k == APPWRAPPER.key else Store(JOBS),
                          synced=True, settings=Settings(),
                          informers=SimpleNamespace(informers={APPWRAPPER.key: None}))
    return StoreAdmissionLookup(ctx, default_registry())  # type: ignore[arg-type]


def test_the_podset_count_of_the_wrapped_object_by_kind_and_name() -> None:
    assert wrapped_replicas(appwrapper(replicas=2), "Deployment", "dep-d") == 2
    assert wrapped_replicas(appwrapper("StatefulSet", 3), "StatefulSet", "dep-d") == 3
    assert wrapped_replicas(appwrapper(), "StatefulSet", "dep-d") is None
    assert wrapped_replicas(appwrapper(), "Deployment", "other") is None
    assert wrapped_replicas({"spec": {"components": "bad"}}, "Deployment", "dep-d") is None
    assert lookup(appwrapper(replicas=2)).wrapped_replicas("research", "Deployment", "dep-d") \
        == ("AppWrapper research/dep", 2)
    assert lookup(appwrapper()).wrapped_replicas("elsewhere", "Deployment", "dep-d") is None


def deployment(replicas: int) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "dep-d", "namespace": "research",
                         "labels": {"workload.codeflare.dev/appwrapper": "dep"}},
            "spec": {"replicas": replicas}}


def scale(replicas: int) -> dict[str, Any]:
    return {"apiVersion": "autoscaling/v1", "kind": "Scale",
            "metadata": {"name": "dep-d", "namespace": "research"},
            "spec": {"replicas": replicas} if replicas else {}, "status": {"replicas": 1}}


def review(old: int, new: int, sub: str = "scale", resource: str = "deployments",
           user: str = "alice") -> dict[str, Any]:
    make = scale if sub else deployment
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u1", "operation": "UPDATE", "name": "dep-d",
                        "namespace": "research",
                        "resource": {"group": "apps", "version": "v1", "resource": resource},
                        "subResource": sub, "userInfo": {"username": user},
                        "oldObject": make(old), "object": make(new)}}


async def decide(sent: dict[str, Any], *appwrappers: dict[str, Any]) -> dict[str, Any]:
    app = make_app(admission=lookup(*appwrappers))
    return answer(await post(app, PATH, sent), sent)


@pytest.mark.parametrize("sub", ["scale", ""])
async def test_raising_a_wrapped_deployment_above_its_podset_is_refused(sub: str) -> None:
    resp = await decide(review(1, 4, sub), appwrapper(replicas=1))
    assert resp["allowed"] is False and resp["status"]["code"] == 403
    message = resp["status"]["message"]
    assert "Deployment research/dep-d is wrapped by AppWrapper research/dep" in message
    assert "sized for 1 of its pods; 4 would run pods no quota covers" in message


@pytest.mark.parametrize(("sent", "appwrappers"), [
    pytest.param(review(2, 1), (appwrapper(replicas=2),), id="lowered"),
    pytest.param(review(1, 2), (appwrapper(replicas=1, declared=2),), id="within the podSet"),
    pytest.param(review(1, 4), (), id="wrapped by no queued AppWrapper"),
    pytest.param(review(1, 4, resource="statefulsets"), (appwrapper(),),
                 id="a StatefulSet of that name is not the wrapped Deployment"),
    pytest.param(review(1, 4, user=CONTROLLER), (appwrapper(),), id="pykueue itself"),
    pytest.param(review(1, 4, sub="status"), (appwrapper(),), id="another subresource"),
])
async def test_everything_else_passes(sent: dict[str, Any],
                                      appwrappers: tuple[dict[str, Any], ...]) -> None:
    assert (await decide(sent, *appwrappers))["allowed"] is True


async def test_a_wrapped_statefulset_is_held_too() -> None:
    resp = await decide(review(3, 5, resource="statefulsets"), appwrapper("StatefulSet", 3))
    assert resp["allowed"] is False and "StatefulSet research/dep-d" in \
        resp["status"]["message"]


def object_review(old: dict[str, Any], new: dict[str, Any],
                  user: str = "alice") -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u1", "operation": "UPDATE", "name": "dep-d",
                        "namespace": "research",
                        "resource": {"group": "apps", "version": "v1",
                                     "resource": "deployments"},
                        "subResource": "", "userInfo": {"username": user},
                        "oldObject": old, "object": new}}


def gpu_template(gpus: str) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "c", "resources": {
        "requests": {"nvidia.com/gpu": gpus}}}]}}


async def test_the_label_of_a_wrapped_object_stays() -> None:
    """breaker14: the label dropped (the objectSelector then sees no later update), the
    replicas raised in the next patch."""
    unlabelled = deployment(1)
    unlabelled["metadata"]["labels"] = {}
    resp = await decide(object_review(deployment(1), unlabelled), appwrapper())
    assert resp["allowed"] is False
    assert "metadata.labels[workload.codeflare.dev/appwrapper]" in resp["status"]["message"]
    assert (await decide(object_review(deployment(1), unlabelled)))["allowed"] is True


async def test_the_pod_template_of_a_wrapped_object_stays() -> None:
    """breaker14: a GPU request raised from 1 to 2 with the replicas kept."""
    old, new = deployment(1), deployment(1)
    old["spec"]["template"], new["spec"]["template"] = gpu_template("1"), gpu_template("2")
    resp = await decide(object_review(old, new), appwrapper())
    assert resp["allowed"] is False and "spec.template" in resp["status"]["message"]
    assert (await decide(object_review(old, new, CONTROLLER), appwrapper()))["allowed"] is True
    assert (await decide(object_review(old, new)))["allowed"] is True
    assert (await decide(object_review(old, old), appwrapper()))["allowed"] is True


# --------------------------------------------------- objects that become an AppWrapper's

AW_UID = "aw-uid"


def queued_appwrapper(replicas: int = 1, gpus: str = "1", **name: str) -> dict[str, Any]:
    """``appwrapper`` (AppWrapper research/dep wrapping Deployment ``dep-d``) with a uid and
    a component pod template of one container requesting ``gpus`` GPUs; ``name``:
    ``generateName=...`` for the component's name instead. The podSetInfos of its admission
    on flavor ``gpu: a100`` are there (pykueue writes them as it unsuspends it; the tests
    unsuspend it when it matters)."""
    aw = appwrapper(replicas=replicas)
    aw["metadata"]["uid"] = AW_UID
    tpl = aw["spec"]["components"][1]["template"]
    tpl["spec"]["template"] = gpu_template(gpus)
    if name:
        tpl["metadata"] = dict(name)
    aw["spec"]["components"][1]["podSetInfos"] = [
        {"labels": {"kueue.x-k8s.io/podset": "dep-1"}, "nodeSelector": {"gpu": "a100"}}]
    return aw


def owned(replicas: int, gpus: str = "1", name: str = "dep-d", uid: str = AW_UID,
          labelled: bool = False) -> dict[str, Any]:
    """Deployment ``name`` as the API server hands it to the webhook: controlled by the
    AppWrapper (``uid``), its pod template as the AppWrapper controller would make it (its
    label, the admission's podset label and nodeSelector, defaults)."""
    template = gpu_template(gpus)
    template["metadata"] = {"labels": {"workload.codeflare.dev/appwrapper": "dep",
                                       "kueue.x-k8s.io/podset": "dep-1"}}
    template["spec"].update(nodeSelector={"gpu": "a100"}, restartPolicy="Always",
                            dnsPolicy="ClusterFirst")
    template["spec"]["containers"][0].update(imagePullPolicy="Always",
                                             terminationMessagePath="/dev/termination-log")
    labels = {"workload.codeflare.dev/appwrapper": "dep"} if labelled else {}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "research", "labels": labels,
                         "ownerReferences": [{
                             "apiVersion": "workload.codeflare.dev/v1beta2",
                             "kind": "AppWrapper", "name": "dep", "uid": uid,
                             "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"replicas": replicas, "template": template}}


def unowned(replicas: int) -> dict[str, Any]:
    dep = owned(replicas)
    del dep["metadata"]["ownerReferences"]
    return dep


def create_review(obj: dict[str, Any], user: str = "alice",
                  resource: str = "deployments") -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u1", "operation": "CREATE",
                        "name": obj["metadata"]["name"], "namespace": "research",
                        "resource": {"group": "apps", "version": "v1", "resource": resource},
                        "subResource": "", "userInfo": {"username": user}, "object": obj}}


async def test_a_deployment_created_under_the_appwrapper_with_more_replicas_is_refused() -> None:
    """breaker14: the wrapped Deployment deleted and created again, by the tenant, with 3
    replicas and the AppWrapper as controller (its pods then run on the AppWrapper's
    admission of 1)."""
    resp = await decide(create_review(owned(3, labelled=True)), queued_appwrapper())
    assert resp["allowed"] is False
    assert "Deployment research/dep-d is wrapped by AppWrapper research/dep, whose Workload " \
        "was sized for 1 of its pods; 3 would run" in resp["status"]["message"]


async def test_a_deployment_created_under_the_appwrapper_with_bigger_pods_is_refused() -> None:
    resp = await decide(create_review(owned(1, gpus="2")), queued_appwrapper())
    assert resp["allowed"] is False
    message = resp["status"]["message"]
    assert "spec.template: Deployment research/dep-d is controlled by AppWrapper " \
        "research/dep" in message and "'nvidia.com/gpu': 2" in message


async def test_a_deployment_created_under_the_appwrapper_elsewhere_is_refused() -> None:
    """brk31 M1, M2 for a Deployment joining (a ``generateName`` component's prefix while
    the controller creates it, brk29): pods on another flavor's nodes, or claiming DRA
    devices the component does not, are refused naming the field."""
    resuming = {**queued_appwrapper(generateName="dep-"), "status": {"phase": "Resuming"}}
    elsewhere = owned(1, name="dep-evil")
    elsewhere["spec"]["template"]["spec"]["nodeSelector"] = {"gpu": "t4"}
    claiming = owned(1, name="dep-evil")
    claiming["spec"]["template"]["spec"]["resourceClaims"] = [
        {"name": "gpu", "resourceClaimTemplateName": "eight-gpus"}]
    for obj, field in ((elsewhere, "nodeSelector"), (claiming, "resourceClaims")):
        resp = await decide(create_review(obj), resuming)
        assert resp["allowed"] is False
        assert resp["status"]["message"].startswith(
            f"spec.template.spec.{field}: Deployment research/dep-evil is controlled by "
            "AppWrapper research/dep"), resp["status"]["message"]
    assert (await decide(create_review(owned(1, name="dep-evil")), resuming))["allowed"]


async def test_an_object_the_appwrapper_does_not_wrap_cannot_be_put_under_it() -> None:
    for obj, resource in ((owned(1, name="other"), "deployments"),
                          ({**owned(1), "kind": "StatefulSet"}, "statefulsets")):
        resp = await decide(create_review(obj, resource=resource), queued_appwrapper())
        assert resp["allowed"] is False
        assert "which wraps no" in resp["status"]["message"]


async def test_the_appwrapper_controllers_own_create_passes() -> None:
    """The component as appwrapper v1.2.0 creates it: labelled, the podSetInfos applied,
    defaulted; a generateName component (its name not recorded yet, phase Resuming) too."""
    user = "system:serviceaccount:appwrapper-system:appwrapper-controller-manager"
    assert (await decide(create_review(owned(1, labelled=True), user),
                               queued_appwrapper()))["allowed"] is True
    assert (await decide(create_review(owned(2), user),
                               queued_appwrapper(replicas=2)))["allowed"] is True
    resuming = {**queued_appwrapper(generateName="dep-"), "status": {"phase": "Resuming"}}
    assert (await decide(create_review(owned(1, name="dep-x7k2p"), user),
                               resuming))["allowed"] is True


@pytest.mark.parametrize(("sent", "appwrappers"), [
    pytest.param(create_review(unowned(3)), (queued_appwrapper(),),
                 id="a tenant's Deployment of no AppWrapper"),
    pytest.param(create_review(owned(3, uid="other")), (queued_appwrapper(),),
                 id="a reference to another uid (no managed ancestor; the GC deletes it)"),
    pytest.param(create_review(owned(3)), (), id="an AppWrapper pykueue does not hold"),
    pytest.param(create_review(owned(3)), ({**queued_appwrapper(), "metadata": {
        "name": "dep", "namespace": "research", "uid": AW_UID}},),
        id="an AppWrapper without a queue name"),
    pytest.param(create_review(owned(3), CONTROLLER), (queued_appwrapper(),),
                 id="pykueue itself"),
])
async def test_other_creates_pass(sent: dict[str, Any],
                                  appwrappers: tuple[dict[str, Any], ...]) -> None:
    assert (await decide(sent, *appwrappers))["allowed"] is True


async def test_the_appwrapper_as_controller_added_by_an_update_is_reviewed_as_a_create() -> None:
    """A Deployment of 3 created unowned (and unlabelled: no webhook selected it), then given
    the AppWrapper as controller: refused as its create would be; an update that keeps the
    reference keeps the update rules."""
    resp = await decide(object_review(unowned(3), owned(3)), queued_appwrapper())
    assert resp["allowed"] is False and "3 would run" in resp["status"]["message"]
    assert (await decide(object_review(unowned(1), owned(1)),
                               queued_appwrapper()))["allowed"] is True
    assert (await decide(object_review(owned(1), owned(1)),
                               queued_appwrapper()))["allowed"] is True
    resp = await decide(object_review(owned(1), owned(3)), queued_appwrapper())
    assert resp["allowed"] is False
    assert resp["status"]["message"].count("3 would run") == 1

"""MultiKueue for KubeRay's RayJob, RayCluster and RayService (Kueue v0.17.1
``pkg/controller/jobs/ray/ray_multikueue_adapter.go`` and the kinds' ``CanDefaultManagedBy``;
KubeRay v1.6.0 ``spec.managedBy``): where managedBy sits, the copy sent to the worker, the
status mirrored back, the counts cleared after an eviction on the manager, the webhook's
default, and the worker side adopting the prebuilt Workload."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.core.multikueue import (
    ADAPTERS,
    KUBERAY_OPERATOR,
    MULTIKUEUE_CONTROLLER,
    ORIGIN_LABEL,
    PREBUILT_LABEL,
    RAY,
    START_RECORD,
    adapter_for,
)
from app.integrations.ray.ray import (
    RAYCLUSTER,
    RAYJOB,
    RAYSERVICE,
    managed_by_multikueue,
)
from app.integrations.unsupported import adoptable_copy, adopts_prebuilt, unsupported_errors
from tests.unit.test_multikueue_webhook import MultiKueueLookups
from tests.unit.test_ray import _RayCtx, group, raycluster, rayjob, rayservice
from tests.unit.test_webhook import answer, decoded_patch, make_app, post, review

MK = MULTIKUEUE_CONTROLLER
PLURALS = {"RayJob": "rayjobs", "RayCluster": "rayclusters", "RayService": "rayservices"}


def test_the_ray_kinds_have_adapters_with_kuberays_managed_by() -> None:
    """KubeRay v1.6.0: ``spec.managedBy`` on all three (its CRDs allow only
    ``ray.io/kuberay-operator`` and ``kueue.x-k8s.io/multikueue``); Kueue registers an adapter
    for each."""
    for kind, plural in PLURALS.items():
        a = adapter_for("ray.io/v1", kind)
        assert a is not None and a in ADAPTERS and a in RAY
        assert (a.plural, a.managed_by, a.operator) == (plural, ("spec", "managedBy"),
                                                         KUBERAY_OPERATOR)
    assert adapter_for("ray.io/v1alpha1", "RayJob") is None
    assert adapter_for("ray.io/v1", "RayCronJob") is None  # no adapter in Kueue v0.17.1
    assert adapter_for("ray.io/v1", "RayService").suspend == (  # type: ignore[union-attr]
        "spec", "rayClusterConfig", "suspend")


@pytest.mark.parametrize(("managed_by", "can"), [
    (None, True), (KUBERAY_OPERATOR, True), (MK, False), ("example.com/other", False)])
def test_managed_by_is_defaulted_over_kuberays_own_only(managed_by: str | None,
                                                        can: bool) -> None:
    """Kueue ``RayJob.CanDefaultManagedBy`` / ``RayCluster.CanDefaultManagedBy``: unset or
    KubeRay's controller."""
    obj = rayjob(group("gpu"))
    if managed_by:
        obj["spec"]["managedBy"] = managed_by
    for a in RAY:
        assert a.can_default_managed_by(obj) is can


def test_dispatch_is_refused_unless_managed_by_multikueue() -> None:
    a = adapter_for("ray.io/v1", "RayJob")
    assert a is not None
    obj = rayjob(group("gpu"))
    assert a.not_managed_message(obj) == (
        f'The owner is not managed by Kueue: Expecting spec.managedBy to be "{MK}" not ""')
    obj["spec"]["managedBy"] = KUBERAY_OPERATOR
    assert f'not "{KUBERAY_OPERATOR}"' in (a.not_managed_message(obj) or "")
    obj["spec"]["managedBy"] = MK
    assert a.not_managed_message(obj) is None


def _as_stored(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` as the manager's API server holds it: managed by MultiKueue, with server
    fields and pykueue's start record."""
    out = copy.deepcopy(obj)
    out["spec"]["managedBy"] = MK
    out["metadata"].update(resourceVersion="7", creationTimestamp="2026-12-04T14:00:00Z",
                           finalizers=["x"], annotations={START_RECORD: "{}", "team": "a"},
                           ownerReferences=[{"kind": "X", "name": "y", "uid": "z"}])
    out["status"] = {"jobDeploymentStatus": "Running"}
    return out


@pytest.mark.parametrize("kind", ["RayJob", "RayCluster", "RayService"])
def test_the_copy_sent_to_the_worker(kind: str) -> None:
    """Kueue ``SyncJob``: metadata cloned (name, namespace, labels, annotations), labels
    ``prebuilt-workload-name`` and the origin added, the spec copied with ``managedBy``
    cleared (the worker's KubeRay runs it); pykueue also suspends it (the worker's pykueue
    starts it with the copy's admission) and drops its own start record."""
    made = {"RayJob": rayjob(group("gpu")), "RayCluster": raycluster(group("gpu")),
            "RayService": rayservice(group("gpu"), suspend=False)}[kind]
    local = _as_stored(made)
    a = adapter_for("ray.io/v1", kind)
    assert a is not None
    out = a.remote(local, "multikueue", "wl-1")
    assert (out["apiVersion"], out["kind"]) == ("ray.io/v1", kind)
    assert out["metadata"] == {
        "name": made["metadata"]["name"], "namespace": "ns",
        "labels": {**made["metadata"]["labels"], PREBUILT_LABEL: "wl-1",
                   ORIGIN_LABEL: "multikueue"},
        "annotations": {"team": "a"}}
    assert "status" not in out and "managedBy" not in out["spec"]
    want = copy.deepcopy(made["spec"])
    lever = a.suspend
    want_at = want
    for key in lever[1:-1]:
        want_at = want_at[key]
    want_at[lever[-1]] = True
    assert out["spec"] == want
    assert local["spec"]["managedBy"] == MK  # the manager's object is not changed


def test_the_workers_whole_status_is_mirrored() -> None:
    """Kueue ``copyJobStatus``: ``dst.Status = src.Status`` (a merge patch here: fields the
    worker's status lacks are removed)."""
    a = adapter_for("ray.io/v1", "RayJob")
    assert a is not None
    local = {"status": {"jobDeploymentStatus": "Initializing", "reason": "x"}}
    remote = {"status": {"jobDeploymentStatus": "Running", "rayClusterName": "tune-abc",
                         "rayClusterStatus": {"state": "ready"}}}
    assert a.status_to_mirror(local, remote) == {
        "jobDeploymentStatus": "Running", "rayClusterName": "tune-abc",
        "rayClusterStatus": {"state": "ready"}, "reason": None}
    assert a.status_to_mirror(remote, remote) is None
    # Mirrored also while the manager's object is still suspended (Kueue copies always).
    assert a.status_to_mirror({"spec": {"suspend": True}}, remote) is not None


@pytest.mark.parametrize(("kind", "running"), [
    (RAYJOB, {"jobDeploymentStatus": "Running", "rayClusterName": "tune-abc",
              "rayClusterStatus": {"state": "ready"}}),
    (RAYCLUSTER, {"state": "ready", "readyWorkerReplicas": 2, "availableWorkerReplicas": 2,
                  "desiredWorkerReplicas": 2}),
    (RAYSERVICE, {"conditions": [{"type": "Ready", "status": "True"}],
                  "activeServiceStatus": {"rayClusterName": "serve-a"}}),
])
def test_clearing_the_running_status_ends_the_mirrored_pods(kind: Any,
                                                            running: dict[str, Any]) -> None:
    """After an eviction on the manager the controller clears the adapter's
    ``running_status`` on the manager's object (``_clear_running``): what the kind's
    ``active_pods`` reads must be among those fields, or the manager's quota would wait
    for pods that run on no cluster."""
    a = adapter_for("ray.io/v1", kind.kind)
    assert a is not None
    obj = {"spec": {}, "status": running}
    assert kind.active_pods(obj) == 1 and kind.pods_ready(obj)
    cleared = {k: v for k, v in running.items() if k not in a.running_status}
    assert kind.active_pods({"spec": {}, "status": cleared}) == 0
    assert not kind.pods_ready({"spec": {}, "status": cleared})


def test_the_webhooks_default_managed_by_per_kind() -> None:
    """``multikueue=`` on the kinds' CrdRules: ``spec.managedBy`` defaulted on the queued
    object (``managed_by_op``), not on a RayCluster a RayJob or RayService made (its owner's
    business: KubeRay copies the owner's labels, queue name included)."""
    op = {"op": "add", "path": "/spec/managedBy", "value": MK}
    assert RAYJOB.rules.managed_by_op(rayjob(group("gpu"))) == op
    assert RAYCLUSTER.rules.managed_by_op(raycluster(group("gpu"))) == op
    assert RAYSERVICE.rules.managed_by_op(rayservice(group("gpu"))) == op
    assert RAYCLUSTER.rules.managed_by_op(raycluster(group("gpu"), owner="RayJob")) is None
    own = rayjob(group("gpu"), managedBy=KUBERAY_OPERATOR)
    assert RAYJOB.rules.managed_by_op(own) == op  # ``add`` replaces KubeRay's own name
    assert RAYJOB.rules.managed_by_op(rayjob(group("gpu"), managedBy=MK)) is None


def _sent(obj: dict[str, Any]) -> dict[str, Any]:
    kind = obj["kind"]
    sent = review("CREATE", obj, kind={"group": "ray.io", "version": "v1", "kind": kind})
    sent["request"]["resource"] = {"group": "ray.io", "version": "v1",
                                   "resource": PLURALS[kind]}
    return sent


@pytest.mark.parametrize(("uses", "want"), [(True, [MK]), (False, []), (None, [])])
@pytest.mark.parametrize("kind", ["RayJob", "RayCluster"])
async def test_a_queued_ray_object_gets_managed_by_when_its_queue_uses_multikueue(
        kind: str, uses: bool | None, want: list[str]) -> None:
    """Through the HTTP route: the mutating webhook asks whether the LocalQueue's
    ClusterQueue has a MultiKueue AdmissionCheck (None: unknown, not synced)."""
    lookups = MultiKueueLookups(uses)
    obj = rayjob(group("gpu"), suspend=None) if kind == "RayJob" \
        else raycluster(group("gpu"))
    if kind == "RayCluster":
        del obj["spec"]["suspend"]
    sent = _sent(obj)
    path = f"/mutate-ray-io-v1-{kind.lower()}"
    response = answer(await post(make_app(admission=lookups), path, sent), sent)
    assert response["allowed"]
    ops = decoded_patch(response)
    assert [o["value"] for o in ops if o["path"] == "/spec/managedBy"] == want
    assert {"op": "add", "path": "/spec/suspend", "value": True} in ops
    assert lookups.asked_mk == [("ns", "lq")]


def test_the_worker_adopts_the_prebuilt_workload() -> None:
    """On a worker, a RayJob, RayCluster or RayService labelled ``prebuilt-workload-name``
    is queued under that Workload (the MultiKueue copy, adopted: ``adoptable_copy``) instead
    of Kueue's name for it; the label is allowed on its own metadata and still refused in a
    pod template."""
    copy_ = {"metadata": {"name": "wl-1", "labels": {ORIGIN_LABEL: "multikueue"}}}
    for kind, obj in ((RAYJOB, rayjob(group("gpu"))), (RAYCLUSTER, raycluster(group("gpu"))),
                      (RAYSERVICE, rayservice(group("gpu")))):
        before = kind.workload_name(obj)
        obj["metadata"]["labels"][PREBUILT_LABEL] = "wl-1"
        assert adopts_prebuilt(obj)
        assert kind.workload_name(obj) == "wl-1" != before
        assert adoptable_copy(obj, copy_)
        assert not adoptable_copy(obj, {"metadata": {"name": "wl-1", "labels": {}}})
        assert unsupported_errors(None, obj) == []
    job = rayjob(group("gpu"))
    job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["metadata"] = {
        "labels": {PREBUILT_LABEL: "wl-1"}}
    assert unsupported_errors(None, job) == [
        f"spec.rayClusterSpec.headGroupSpec.template.metadata.labels[{PREBUILT_LABEL}]: "
        "pykueue does not adopt prebuilt Workloads: it creates the object's Workload itself; "
        "remove the label"]


def test_the_cluster_kuberay_makes_for_a_workers_rayjob_stays_the_rayjobs() -> None:
    """KubeRay copies the worker RayJob's labels (the prebuilt one included) onto the
    RayCluster it makes: the webhook lets it through, and it has no queue of its own."""
    rc = raycluster(group("gpu"), owner="RayJob")
    rc["metadata"]["labels"][PREBUILT_LABEL] = "wl-1"
    rc["metadata"]["labels"][ORIGIN_LABEL] = "multikueue"
    assert unsupported_errors(None, rc) == []
    assert RAYCLUSTER.queue_name(rc) == ""


class _ClockCtx(_RayCtx):
    def clock(self) -> float:
        return 1000.0


async def test_a_managers_started_raycluster_is_not_resynced() -> None:
    """``RayCluster.settle`` asks KubeRay to look again at a started cluster missing pods;
    the manager's KubeRay leaves a MultiKueue cluster alone (its pods run on a worker), so
    nothing is written for it."""
    started = raycluster(group("gpu", 1))
    started["spec"]["suspend"] = False
    ctx = _ClockCtx(started)
    assert await RAYCLUSTER.settle(ctx, started, 0) == 10.0  # type: ignore[arg-type]
    assert len(ctx.replaced) == 1
    managed = copy.deepcopy(started)
    managed["spec"]["managedBy"] = MK
    managed["metadata"].pop("annotations", None)
    assert managed_by_multikueue(managed)
    ctx = _ClockCtx(managed)
    assert await RAYCLUSTER.settle(ctx, managed, 0) is None  # type: ignore[arg-type]
    assert ctx.replaced == []

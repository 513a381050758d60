"""KubeRay's RayJob and RayCluster as job kinds (issue 18; Kueue ``jobs/rayjob``,
``jobs/raycluster``): podSets head, worker groups (replicas x numOfHosts) and the RayJob's
submitter, KubeRay's default submitter written on start and removed on stop, what is refused
and why, finished and active, the managed-ancestor rule for a RayJob's RayCluster, the webhook
rules and their HTTP routes."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest

from app.integrations.batchjob.job import ORIGINAL_ANNOTATION
from app.integrations.ray.ray import (
    DEFAULT_SUBMITTER_ANNOTATION,
    RAYCLUSTER,
    RAYJOB,
    RAYSERVICE,
    default_submitter,
    ray_owner,
    with_admitted_templates,
)
from app.wire.fields import WorkloadSpecError
from tests.unit.test_jobset import A100, POLICY, QUEUE
from tests.unit.test_webhook import answer, make_app, post, review

IMAGE = "rayproject/ray:2.46.0"


def group(name: str, replicas: int | None = 2, gpu: int = 1, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"groupName": name, "template": {"spec": {"containers": [
        {"name": "w", "image": IMAGE,
         "resources": {"requests": {"nvidia.com/gpu": str(gpu)}}}]}}, **extra}
    if replicas is not None:
        out["replicas"] = replicas
    return out


def cluster_spec(*groups: dict[str, Any]) -> dict[str, Any]:
    return {"headGroupSpec": {"template": {"spec": {"containers": [
        {"name": "ray-head", "image": IMAGE, "resources": {"requests": {"cpu": "1"}}}]}}},
        "workerGroupSpecs": list(groups)}


def rayjob(*groups: dict[str, Any], suspend: bool | None = True, **spec: Any) -> dict[str, Any]:
    s: dict[str, Any] = {"entrypoint": "python x.py", "shutdownAfterJobFinishes": True,
                         "rayClusterSpec": cluster_spec(*groups), **spec}
    if suspend is not None:
        s["suspend"] = suspend
    return {"apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": "tune", "namespace": "ns", "uid": "u-1",
                         "labels": {QUEUE: "lq"}}, "spec": s}


def raycluster(*groups: dict[str, Any], owner: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "rc", "namespace": "ns", "uid": "u-2",
                            "labels": {QUEUE: "lq"}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": owner, "name": "tune",
                                    "uid": "u-1", "controller": True}]
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta,
            "spec": {**cluster_spec(*groups), "suspend": True}}


def test_podsets_head_worker_groups_and_the_submitter() -> None:
    wl = RAYJOB.desired(rayjob(group("GPU", 2, numOfHosts=2), group("small", None)))
    assert [(ps.name, ps.count) for ps in wl.pod_sets] == [
        ("head", 1), ("gpu", 4), ("small", 1), ("submitter", 1)]
    assert wl.pod_sets[0].requests == {"cpu": 1000}
    # KubeRay's default submitter: 500m CPU and 200Mi.
    assert wl.pod_sets[3].requests == {"cpu": 500, "memory": 200 * 2**20}
    assert wl.name.startswith("rayjob-tune-")
    http = RAYJOB.desired(rayjob(group("gpu"), submissionMode="HTTPMode"))
    assert [ps.name for ps in http.pod_sets] == ["head", "gpu"]
    own = RAYJOB.desired(rayjob(group("gpu"), submitterPodTemplate={"spec": {"containers": [
        {"name": "s", "resources": {"requests": {"cpu": "2"}}}]}}))
    assert own.pod_sets[2].requests == {"cpu": 2000}
    rc = RAYCLUSTER.desired(raycluster(group("gpu", 3)))
    assert [(ps.name, ps.count) for ps in rc.pod_sets] == [("head", 1), ("gpu", 3)]


def test_a_worker_group_counts_the_replicas_kuberay_runs() -> None:
    """breaker9 on the lab: a queued RayCluster with replicas 1 and minReplicas 4 was admitted
    for 1 GPU worker and ran 4: KubeRay clamps replicas to [minReplicas, maxReplicas]."""
    rc = RAYCLUSTER.desired(raycluster(group("a", 1, minReplicas=4, maxReplicas=4),
                                       group("b", 6, minReplicas=0, maxReplicas=2),
                                       group("c", 3, minReplicas=1)))
    assert [(ps.name, ps.count) for ps in rc.pod_sets] == [("head", 1), ("a", 4), ("b", 2),
                                                           ("c", 3)]
    wl = RAYJOB.desired(rayjob(group("gpu", 1, minReplicas=3, numOfHosts=2)))
    assert [(ps.name, ps.count) for ps in wl.pod_sets][:2] == [("head", 1), ("gpu", 6)]


@pytest.mark.parametrize(("obj", "field"), [
    (rayjob(group("head")), "spec.rayClusterSpec.workerGroupSpecs[0].groupName"),
    (rayjob(group("Submitter")), "spec.rayClusterSpec.workerGroupSpecs[0].groupName"),
    (rayjob(*[group(f"g{i}") for i in range(8)]), "spec.rayClusterSpec.workerGroupSpecs"),
    (rayjob(group("gpu"), shutdownAfterJobFinishes=False), "spec.shutdownAfterJobFinishes"),
    (rayjob(group("gpu"), clusterSelector={"ray.io/cluster": "x"}), "spec.clusterSelector"),
    (rayjob(group("gpu"), submissionMode="SidecarMode"), "spec.submissionMode"),
    (rayjob(group("gpu", -1)), "spec.rayClusterSpec.workerGroupSpecs[0].replicas"),
    ({**rayjob(), "spec": {"shutdownAfterJobFinishes": True}}, "spec.rayClusterSpec"),
])
def test_refused_rayjobs_name_the_field(obj: dict[str, Any], field: str) -> None:
    with pytest.raises(WorkloadSpecError) as err:
        RAYJOB.desired(obj)
    assert err.value.field == field
    assert RAYJOB.rules.validate(None, obj, "alice", POLICY)[0].startswith(field)


def test_in_tree_autoscaling_is_refused() -> None:
    rc = raycluster(group("gpu"))
    rc["spec"]["enableInTreeAutoscaling"] = True
    with pytest.raises(WorkloadSpecError) as err:
        RAYCLUSTER.desired(rc)
    assert err.value.field == "spec.enableInTreeAutoscaling"


def test_start_writes_the_default_submitter_with_its_flavor_and_stop_removes_it() -> None:
    job = rayjob(group("gpu"))
    started = RAYJOB.injected(job, {"gpu": A100, "submitter": ({"pool": "cpu"}, [])})
    assert started["spec"]["suspend"] is False
    sub = started["spec"]["submitterPodTemplate"]
    assert sub["spec"]["containers"] == default_submitter(job)["spec"]["containers"]
    assert sub["spec"]["containers"][0]["image"] == IMAGE
    assert sub["spec"]["nodeSelector"] == {"pool": "cpu"}
    assert sub["metadata"]["labels"] == {"kueue.x-k8s.io/podset": "submitter"}
    worker = started["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]
    assert worker["spec"]["nodeSelector"] == A100[0]
    assert worker["spec"]["tolerations"] == A100[1]
    assert started["metadata"]["annotations"][DEFAULT_SUBMITTER_ANNOTATION] == "true"
    assert RAYJOB.is_started(started) and not RAYJOB.is_suspended(started)
    assert RAYJOB.injected(started, {"gpu": A100, "submitter": ({"pool": "cpu"}, [])}) == \
        started
    stopped = RAYJOB.restored(started)
    assert stopped["spec"] == job["spec"]
    assert ORIGINAL_ANNOTATION not in stopped["metadata"].get("annotations", {})
    assert DEFAULT_SUBMITTER_ANNOTATION not in stopped["metadata"].get("annotations", {})
    # A submitter the user wrote stays (its fields restored), and no marker is set.
    own = rayjob(group("gpu"), submitterPodTemplate={"spec": {"containers": [{"name": "s"}]}})
    started = RAYJOB.injected(own, {"submitter": ({"pool": "cpu"}, [])})
    assert DEFAULT_SUBMITTER_ANNOTATION not in started["metadata"]["annotations"]
    assert RAYJOB.restored(started)["spec"] == own["spec"]


def test_finished_and_active() -> None:
    job = rayjob(group("gpu"))
    assert RAYJOB.finished(job) == (False, "", "")
    assert RAYJOB.active_pods(job) == 0
    job["status"] = {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}
    assert RAYJOB.active_pods(job) == 1 and not RAYJOB.finished(job)[0]
    job["status"] = {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}
    assert RAYJOB.finished(job)[:2] == (True, "Succeeded")
    job["status"] = {"jobDeploymentStatus": "Failed", "jobStatus": "FAILED", "message": "boom"}
    assert RAYJOB.finished(job) == (True, "Failed", "boom")
    job["status"] = {"jobDeploymentStatus": "Suspended"}
    assert RAYJOB.active_pods(job) == 0
    rc = raycluster(group("gpu"))
    assert RAYCLUSTER.finished(rc) == (False, "", "")
    rc["status"] = {"state": "ready"}
    assert RAYCLUSTER.active_pods(rc) == 1


def test_pods_ready_is_the_clusters_ready_state() -> None:
    """Kueue v0.17.1 ``RayJob.PodsReady`` (``status.rayClusterStatus.state``) and
    ``RayCluster.PodsReady`` (``status.state``): ``ready``."""
    job = rayjob(group("gpu"))
    assert RAYJOB.pods_ready(job) is False
    job["status"] = {"jobDeploymentStatus": "Initializing", "rayClusterStatus": {}}
    assert RAYJOB.pods_ready(job) is False
    job["status"]["rayClusterStatus"]["state"] = "ready"
    assert RAYJOB.pods_ready(job) is True
    job["status"] = {"state": "ready"}  # a RayCluster's field, not a RayJob's
    assert RAYJOB.pods_ready(job) is False
    rc = raycluster(group("gpu"))
    assert RAYCLUSTER.pods_ready(rc) is False
    rc["status"] = {"state": "suspended"}
    assert RAYCLUSTER.pods_ready(rc) is False
    rc["status"] = {"state": "ready"}
    assert RAYCLUSTER.pods_ready(rc) is True


def test_a_rayjobs_raycluster_belongs_to_the_rayjob() -> None:
    """KubeRay copies the RayJob's labels (queue name included) onto its RayCluster: neither
    the reconciler nor the webhook queues it again."""
    owned = raycluster(group("gpu"), owner="RayJob")
    owned["spec"]["suspend"] = False
    assert RAYCLUSTER.queue_name(owned) == ""
    assert RAYCLUSTER.rules.mutate(owned, "CREATE", POLICY) == []
    assert RAYCLUSTER.rules.validate(None, owned, "alice", POLICY) == []
    alone = copy.deepcopy(owned)
    del alone["metadata"]["ownerReferences"]
    assert RAYCLUSTER.queue_name(alone) == "lq"
    assert RAYCLUSTER.rules.mutate(alone, "CREATE", POLICY) == [
        {"op": "add", "path": "/spec/suspend", "value": True}]


RAYJOB_KIND = {"group": "ray.io", "version": "v1", "kind": "RayJob"}


async def test_routes_answer_reviews() -> None:
    app = make_app()
    sent = review("CREATE", rayjob(group("gpu"), suspend=None), kind=RAYJOB_KIND)
    resp = answer(await post(app, "/mutate-ray-io-v1-rayjob", sent), sent)
    assert json.loads(base64.b64decode(resp["patch"])) == [
        {"op": "add", "path": "/spec/suspend", "value": True}]
    sent = review("CREATE", rayjob(group("gpu"), shutdownAfterJobFinishes=False),
                  kind=RAYJOB_KIND)
    resp = answer(await post(app, "/validate-ray-io-v1-rayjob", sent), sent)
    assert resp["allowed"] is False and resp["status"]["code"] == 403
    assert "spec.shutdownAfterJobFinishes" in resp["status"]["message"]
    sent = review("CREATE", {"metadata": {"labels": {QUEUE: "lq"}}, "spec": {"suspend": 1}},
                  kind=RAYJOB_KIND)
    resp = answer(await post(app, "/mutate-ray-io-v1-rayjob", sent), sent)
    assert resp["allowed"] is False and 400 <= resp["status"]["code"] < 500


def rayservice(*groups: dict[str, Any], suspend: bool | None = True,
               **spec: Any) -> dict[str, Any]:
    config = cluster_spec(*groups)
    if suspend is not None:
        config["suspend"] = suspend
    return {"apiVersion": "ray.io/v1", "kind": "RayService",
            "metadata": {"name": "serve", "namespace": "ns", "uid": "u-3",
                         "labels": {QUEUE: "lq"}},
            "spec": {"rayClusterConfig": config, **spec}}


def test_rayservice_podsets_are_its_clusters() -> None:
    """Kueue v0.17.1 ``jobs/rayservice``: head 1 + each worker group (lower-cased name,
    replicas x numOfHosts); the Workload is named after the RayService kind."""
    svc = rayservice(group("GPU", 2), group("tpu", 2, numOfHosts=2))
    wl = RAYSERVICE.desired(svc)
    assert [(p.name, p.count) for p in wl.pod_sets] == [("head", 1), ("gpu", 2), ("tpu", 4)]
    assert wl.name.startswith("rayservice-serve-")
    assert RAYSERVICE.rules.mutate_path == "/mutate-ray-io-v1-rayservice"


@pytest.mark.parametrize(("svc", "field"), [
    (rayservice(group("head")), "spec.rayClusterConfig.workerGroupSpecs[0].groupName"),
    (rayservice(group("gpu")) | {"spec": {"rayClusterConfig": {
        **cluster_spec(group("gpu")), "suspend": True, "enableInTreeAutoscaling": True}}},
     "spec.rayClusterConfig.enableInTreeAutoscaling"),
])
def test_refused_rayservices_name_the_field(svc: dict[str, Any], field: str) -> None:
    (err,) = RAYSERVICE.spec_errors(svc)
    assert err.startswith(field), err
    (err,) = RAYSERVICE.rules.validate(None, svc, "alice", POLICY)
    assert field in err


def test_a_worker_group_named_submitter_is_a_rayservices_own() -> None:
    """Only a RayJob has a submitter podSet."""
    assert RAYSERVICE.spec_errors(rayservice(group("submitter"))) == []


def test_rayservice_suspend_lever_is_its_cluster_configs() -> None:
    """Webhook: a queued RayService is created with ``spec.rayClusterConfig.suspend``; start
    writes the flavor into the templates and lowers the lever; stop restores both."""
    svc = rayservice(group("gpu"), suspend=None)
    assert RAYSERVICE.rules.mutate(svc, "CREATE", POLICY) == [
        {"op": "add", "path": "/spec/rayClusterConfig/suspend", "value": True}]
    svc = rayservice(group("gpu"))
    assert RAYSERVICE.is_suspended(svc)
    started = RAYSERVICE.injected(svc, {"gpu": A100})
    assert started["spec"]["rayClusterConfig"]["suspend"] is False
    assert "suspend" not in started["spec"]
    worker = started["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]
    assert (worker["spec"]["nodeSelector"], worker["spec"]["tolerations"]) == A100
    assert RAYSERVICE.restored(started) == svc


def test_rayservice_never_finishes_and_is_ready_with_its_condition() -> None:
    svc = rayservice(group("gpu"), suspend=False)
    assert RAYSERVICE.finished(svc) == (False, "", "")
    assert not RAYSERVICE.pods_ready(svc) and RAYSERVICE.active_pods(svc) == 0
    svc["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    assert RAYSERVICE.pods_ready(svc) and RAYSERVICE.active_pods(svc) == 1
    svc["status"]["conditions"][0]["status"] = "False"
    assert not RAYSERVICE.pods_ready(svc)


def test_a_rayservices_raycluster_belongs_to_the_rayservice() -> None:
    """KubeRay copies the RayService's labels onto its RayCluster: not queued again; a tenant
    raising its workers is refused, naming the RayService's field."""
    owned = raycluster(group("gpu", 1), owner="RayService")
    owned["spec"]["suspend"] = False
    assert ray_owner(owned) == "RayService"
    assert RAYCLUSTER.queue_name(owned) == ""
    assert RAYCLUSTER.rules.mutate(owned, "CREATE", POLICY) == []
    raised = copy.deepcopy(owned)
    raised["spec"]["workerGroupSpecs"][0]["replicas"] = 3
    (err,) = RAYCLUSTER.rules.validate(owned, raised, "alice", POLICY)
    assert "belongs to a queued RayService" in err and "rayClusterConfig" in err, err
    # "submitter" is no other podSet of a RayService.
    added = copy.deepcopy(owned)
    added["spec"]["workerGroupSpecs"].append(group("submitter", 0))
    assert RAYCLUSTER.rules.validate(owned, added, "alice", POLICY) == []


def test_a_rayservices_cluster_template_is_set_back_to_the_rayservices() -> None:
    """``with_admitted_templates`` reads the parent's RayClusterSpec where its kind holds
    it (a RayService's ``spec.rayClusterConfig``)."""
    svc = rayservice(group("gpu", 1), suspend=False)
    wl = RAYSERVICE.workload_object(svc)
    rc = raycluster(group("gpu", 1, gpu=2), owner="RayService")
    out, fields = with_admitted_templates(rc, svc, wl, RAYSERVICE.cluster_at)
    assert fields == ["spec.workerGroupSpecs[0].template"] and out["spec"]["suspend"] is True
    assert out["spec"]["workerGroupSpecs"][0]["template"] == \
        svc["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]


class _RayCtx:
    """What ``RayService.stop`` and ``settle`` use: a RayCluster store, a client recording
    replaces and deletes, a recorder."""

    def __init__(self, *clusters: dict[str, Any]) -> None:
        self.replaced: list[dict[str, Any]] = []
        self.deleted: list[str] = []
        self.events: list[str] = []
        self.clusters = {c["metadata"]["name"]: c for c in clusters}
        outer = self

        class Store(dict):  # type: ignore[type-arg]
            def __iter__(self) -> Any:
                return iter(list(outer.clusters.values()))

            def put(self, obj: dict[str, Any]) -> None:
                outer.clusters[obj["metadata"]["name"]] = obj

            def get(self, key: str) -> dict[str, Any] | None:  # type: ignore[override]
                return outer.clusters.get(key.rsplit("/", 1)[-1])

        class Client:
            async def replace(self, res: Any, body: dict[str, Any]) -> dict[str, Any]:
                outer.replaced.append(body)
                return body

            async def delete(self, res: Any, name: str, ns: str, **_: Any) -> dict[str, Any]:
                outer.deleted.append(name)
                return {}

        class Recorder:
            def emit(self, obj: Any, kind: str, reason: str, message: str) -> None:
                outer.events.append(reason)

        class Informers:
            informers = {"raycluster": None}

        self._store, self.client, self.recorder = Store(), Client(), Recorder()
        self.informers = Informers()

    def store(self, key: str) -> Any:
        return self._store


def _service_cluster(name: str, suspend: bool) -> dict[str, Any]:
    rc = raycluster(group("gpu", 2))
    rc["metadata"].update(name=name, ownerReferences=[
        {"apiVersion": "ray.io/v1", "kind": "RayService", "name": "serve", "uid": "u-3",
         "controller": True}])
    rc["spec"]["suspend"] = suspend
    return rc


async def test_a_stopped_rayservice_stops_its_clusters_and_a_started_one_renews_them() -> None:
    """KubeRay v1.6.0 copies neither the raised lever nor the lowered one onto the cluster it
    made: ``stop`` suspends the RayService's running clusters (not another owner's), and
    ``settle`` on the started RayService deletes its suspended ones for KubeRay to make
    again."""
    other = _service_cluster("other", False)
    other["metadata"]["ownerReferences"][0]["uid"] = "u-9"
    ctx = _RayCtx(_service_cluster("serve-a", False), other)
    started = RAYSERVICE.injected(rayservice(group("gpu")), {"gpu": A100})
    await RAYSERVICE.stop(ctx, started, "test")  # type: ignore[arg-type]
    assert [(b["kind"], b["metadata"]["name"]) for b in ctx.replaced] == [
        ("RayService", "serve"), ("RayCluster", "serve-a")]
    assert ctx.clusters["serve-a"]["spec"]["suspend"] is True
    assert ctx.clusters["other"]["spec"]["suspend"] is False
    assert await RAYSERVICE.settle(ctx, rayservice(group("gpu")), 0) is None  # type: ignore
    assert await RAYSERVICE.settle(ctx, started, 0) == 10.0  # type: ignore[arg-type]
    assert ctx.deleted == ["serve-a"] and ctx.events[-1] == "StaleRayClusterDeleted"

"""``extender.flavor_nodes_for_admitted_only``: a GPU pod no admitted Workload covers is
refused on every ResourceFlavor's nodes (unresolvable), and passes elsewhere; off by default
(such a pod is scheduled as kube-scheduler alone would). The other half of keeping unqueued
pods off quota-managed GPUs (docs/security.md); the webhook half is tested in
test_unlabelled_pods.py."""

from __future__ import annotations

from types import SimpleNamespace

import httpx
import pytest

from app.config import ExtenderSettings, JobsSettings, ServerSettings, Settings
from app.controllers.admission_lookup import StoreExtenderState
from app.extender.nodestore import InMemoryExtenderState, NodeStore
from app.extender.placement import PodFacts
from app.integrations import default_registry, jobset
from app.integrations.framework import GROUP_WORKLOAD_ANNOTATION
from app.kube.client import JOBS
from app.kube.context import JOB, NS, WL
from app.kube.informers import Store
from app.main import create_app
from app.wire.owners import OwnerRef
from app.wire.workload import workload_name_for_owner
from tests.unit.test_extender import ALL, MODES, args, do_filter, make_state, pod


def _app(state: InMemoryExtenderState, on: bool):
    app = create_app(Settings(server=ServerSettings(metrics_auth=False),
                              extender=ExtenderSettings(flavor_nodes_for_admitted_only=on)))
    app.state.extender_state = state
    return app


async def _filter(state: InMemoryExtenderState, p: dict, mode: str, on: bool = True):
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=_app(state, on)),
                                 base_url="http://test") as c:
        return await do_filter(c, args(p, mode), mode)


@MODES
async def test_an_unqueued_gpu_pod_is_kept_off_every_flavor_node(mode: str) -> None:
    out = await _filter(make_state(), pod("bare", podset=None), mode)
    assert out.passing == ["cpu-0"]  # the only node no flavor's nodeLabels select
    assert set(out.unresolvable) == set(ALL) - {"cpu-0"} and not out.failed
    assert "node(s) of flavor a100-flavor run only pods of admitted Workloads" in \
        out.unresolvable["a100-0"]
    assert "research/bare has none" in out.unresolvable["l4-0"]


@MODES
async def test_off_by_default_and_a_covered_pod_passes(mode: str) -> None:
    assert (await _filter(make_state(), pod("bare", podset=None), mode, on=False)).passing \
        == ALL
    state = make_state()
    state.admitted_pods.add("research/bare")
    assert (await _filter(state, pod("bare", podset=None), mode)).passing == ALL


@MODES
async def test_a_managed_jobs_pod_keeps_its_own_rules(mode: str) -> None:
    """A pod of a Job pykueue queues is judged by its Workload, as before."""
    out = await _filter(make_state(), pod(job="waiting"), mode)
    assert out.passing == [] and set(out.unresolvable) == set(ALL)
    assert "is not admitted" in out.unresolvable["cpu-0"]


@pytest.mark.parametrize("on", [True, False])
async def test_before_sync_an_unqueued_gpu_pod_waits_only_with_the_setting(on: bool) -> None:
    state = make_state()
    state.is_synced = False
    out = await _filter(state, pod("bare", podset=None), "names", on=on)
    assert out.passing == ([] if on else ALL)


# ------------------------------------------------- StoreExtenderState.pod_admitted (stores)

def _admitted_wl(name: str, **meta: object) -> dict:
    return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": "1", **meta},
            "spec": {"queueName": "lq", "podSets": []},
            "status": {"admission": {"clusterQueue": "cq", "podSetAssignments": []},
                       "conditions": [{"type": "QuotaReserved", "status": "True"},
                                      {"type": "Admitted", "status": "True"}]}}


def _store_state(*objects: tuple[str, dict]) -> StoreExtenderState:
    stores: dict[str, Store] = {}
    for key, obj in objects:
        stores.setdefault(key, Store(JOBS)).put(obj)
    ctx = SimpleNamespace(store=lambda k: stores.get(k) or Store(JOBS), synced=True,
                          settings=Settings())
    return StoreExtenderState(ctx, NodeStore("nvidia.com/gpu"),  # type: ignore[arg-type]
                              default_registry())


def _facts(name: str = "p", uid: str = "pu", owner: tuple[str, str, str, str] | None = None,
           group: str | None = None) -> PodFacts:
    # ``owner``: (API group, kind, name, uid) of the pod's controller.
    ref = None if owner is None else OwnerRef(f"{owner[0]}/v1", *owner[1:])
    return PodFacts("ns", name, uid=uid, controller=ref, group=group)


def test_a_plain_pod_is_covered_by_its_own_admitted_workload_only() -> None:
    wl = _admitted_wl(workload_name_for_owner("Pod", "", "p", "pu"), ownerReferences=[
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "pu", "controller": True}])
    state = _store_state((WL, wl))
    assert state.pod_admitted(_facts())
    assert not state.pod_admitted(_facts(uid="other"))  # another pod of that name
    rs = ("apps", "ReplicaSet", "web-1", "r1")  # a Deployment's pod: its own Workload too
    assert state.pod_admitted(_facts(owner=rs))


def test_a_group_member_needs_an_admitted_group_workload() -> None:
    group = _admitted_wl("g", annotations={GROUP_WORKLOAD_ANNOTATION: "true"})
    jobs_wl = _admitted_wl("job-train-abcde")  # a Job's Workload, named as a group
    state = _store_state((WL, group), (WL, jobs_wl))
    assert state.pod_admitted(_facts(group="g"))
    assert not state.pod_admitted(_facts(group="job-train-abcde"))


def test_a_pod_of_a_queued_owner_is_covered_by_the_owners_or_ancestors_admission() -> None:
    train = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {
        "name": "train", "namespace": "ns", "uid": "js1", "resourceVersion": "1",
        "labels": {"kueue.x-k8s.io/queue-name": "lq"}}}
    child = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": "train-w-0", "namespace": "ns", "uid": "j1", "resourceVersion": "1",
        "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                             "name": "train", "uid": "js1", "controller": True}]}}
    wl = _admitted_wl(jobset.KIND.workload_name(train))
    state = _store_state((jobset.KIND.key, train), (JOB, child), (WL, wl))
    assert state.pod_admitted(_facts(owner=("batch", "Job", "train-w-0", "j1")))
    assert not state.pod_admitted(_facts(owner=("batch", "Job", "train-w-0", "forged")))
    assert not state.pod_admitted(_facts(owner=("batch", "Job", "unknown", "j9")))


def test_a_job_pykueue_leaves_alone_is_no_queued_jobs_pod() -> None:
    """With ``manage_jobs_without_queue_name`` the Job store holds every Job: one in a
    namespace outside the selector is not queued, so its pods get no Workload view (before:
    "its Workload has not been created yet", every node withheld)."""
    unqueued = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": "svc", "namespace": "kube-system", "uid": "j1", "resourceVersion": "1"}}
    system = {"metadata": {"name": "kube-system", "resourceVersion": "1",
                           "labels": {"kubernetes.io/metadata.name": "kube-system"}}}
    state = _store_state((JOB, unqueued), (NS, system))
    state.ctx.settings = Settings(jobs=JobsSettings(manage_jobs_without_queue_name=True))
    assert state.workload_for_pod("kube-system", "svc", "j1") is None
    queued = {**unqueued, "metadata": {**unqueued["metadata"], "namespace": "ns"}}
    state = _store_state((JOB, queued), (NS, {"metadata": {"name": "ns",
                                                           "resourceVersion": "1"}}))
    state.ctx.settings = Settings(jobs=JobsSettings(manage_jobs_without_queue_name=True))
    view = state.workload_for_pod("ns", "svc", "j1")
    assert view is not None and not view.admitted


# ------------------------------------- StoreExtenderState.withheld (a forged RayCluster)

def _rayservice(cluster: str | None) -> dict:
    status = {"activeServiceStatus": {"rayClusterName": cluster}} if cluster else {}
    return {"apiVersion": "ray.io/v1", "kind": "RayService",
            "metadata": {"namespace": "ns", "name": "serve", "uid": "su",
                         "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
            "spec": {"rayClusterConfig": {}}, "status": status}


def _raycluster(name: str, created: str, controller: str = "RayService") -> dict:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"namespace": "ns", "name": name, "uid": f"{name}-u",
                         "creationTimestamp": created,
                         "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": controller,
                                              "name": "serve", "uid": "su",
                                              "controller": True}]},
            "spec": {}}


def _ray_pod(cluster: str) -> PodFacts:
    return _facts(name=f"{cluster}-worker", owner=("ray.io", "RayCluster", cluster,
                                                   f"{cluster}-u"))


def test_pods_of_a_raycluster_forged_under_a_queued_rayservice_are_withheld() -> None:
    """The tenant's copy claims the admitted RayService as controller: the extender gives
    its pods no node (the reconciler suspends the copy; until then none may run). The
    cluster the RayService names passes; so do pods of a cluster no store holds yet."""
    from app.integrations.ray.ray import RAYCLUSTER, RAYSERVICE
    real = _raycluster("serve-raycluster-abc", "2026-12-04T10:00:00Z")
    forged = _raycluster("extra-a", "2026-12-04T10:05:00Z")
    svc = _rayservice("serve-raycluster-abc")
    state = _store_state((RAYSERVICE.key, svc), (RAYCLUSTER.key, real), (RAYCLUSTER.key, forged),
                         (WL, _admitted_wl(RAYSERVICE.workload_name(svc))))
    assert state.withheld(_ray_pod("serve-raycluster-abc")) == ""
    why = state.withheld(_ray_pod("extra-a"))
    assert "RayCluster extra-a claims RayService ns/serve" in why
    assert "runs on RayCluster serve-raycluster-abc" in why
    assert state.withheld(_ray_pod("not-stored-yet")) == ""
    # Another pod of that name under another uid: not the stored cluster's.
    assert state.withheld(_facts(owner=("ray.io", "RayCluster", "extra-a", "other"))) == ""


def test_before_the_rayservice_names_a_cluster_the_oldest_it_controls_is_its_own() -> None:
    from app.integrations.ray.ray import RAYCLUSTER, RAYSERVICE
    svc = _rayservice(None)
    clusters = ((RAYCLUSTER.key, _raycluster("first", "2026-12-04T10:00:00Z")),
                (RAYCLUSTER.key, _raycluster("second", "2026-12-04T10:00:01Z")))
    state = _store_state((RAYSERVICE.key, svc), *clusters,
                         (WL, _admitted_wl(RAYSERVICE.workload_name(svc))))
    assert state.withheld(_ray_pod("first")) == ""
    assert "RayCluster second claims RayService ns/serve" in state.withheld(_ray_pod("second"))
    # Not admitted (breaker14: a queue that does not exist): even the oldest gets no node.
    pending = _store_state((RAYSERVICE.key, svc), *clusters)
    assert state.withheld(_ray_pod("first")) == "" and pending.withheld(_ray_pod("first")) \
        == "RayCluster first runs under RayService ns/serve, whose Workload is not admitted"


@MODES
async def test_the_filter_withholds_every_node_from_a_withheld_pod(mode: str) -> None:
    state = make_state()
    p = pod("extra-a-worker", podset=None)
    plain = await _filter(state, p, mode, on=False)
    state.withheld_pods["research/extra-a-worker"] = "forged"
    out = await _filter(state, p, mode, on=False)
    assert plain.passing == ALL
    assert out.passing == [] and set(out.unresolvable) == set(ALL)
    assert out.unresolvable["a100-0"] == "node(s) withheld by pykueue: forged"


# --------------------------------- StoreExtenderState.withheld (a pod its Job does not count)

def test_a_pod_naming_a_job_that_does_not_select_it_is_withheld() -> None:
    """The forged-Pod gap's count: a pod whose controller ownerReference names the admitted
    Job ``j`` but without the labels its ``spec.selector`` takes is not counted by the Job
    controller (which deletes only its own pods beyond parallelism): no node. A pod the
    selector takes (the Job controller's, or a copy it counts and trims) is placed as before;
    so is a pod of a Job without a selector (never stored so by the API server)."""
    uid_label = "batch.kubernetes.io/controller-uid"
    j = {"apiVersion": "batch/v1", "kind": "Job",
         "metadata": {"namespace": "ns", "name": "j", "uid": "ju",
                      "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
         "spec": {"selector": {"matchLabels": {uid_label: "ju"}}, "template": {}}}
    state = _store_state((JOB, j), (WL, _admitted_wl("job-j-1")))
    ref = OwnerRef("batch/v1", "Job", "j", "ju")
    forged = PodFacts("ns", "extra", job_name="j", job_uid="ju", uid="pu", controller=ref)
    why = state.withheld(forged)
    assert why.startswith("pod ns/extra names Job j as its controller but does not match")
    counted = PodFacts("ns", "j-abc", job_name="j", job_uid="ju", uid="pu2", controller=ref,
                       labels={uid_label: "ju"})
    assert state.withheld(counted) == ""
    bare = {**j, "spec": {"template": {}}}
    assert _store_state((JOB, bare)).withheld(forged) == ""

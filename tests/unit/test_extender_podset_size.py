"""The scheduler extender holds a pod whose controller is a queued object of another kind
than a batch Job (a PyTorchJob, a RayCluster) to the GPUs of a pod of its podSet in the
admitted Workload (``StoreExtenderState._beyond_workload_podset``): a pod a tenant makes
under the object's name, as its controller, is placed no bigger than an admitted pod."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

from app.config import Settings
from app.controllers.admission_lookup import StoreExtenderState
from app.extender.nodestore import NodeStore
from app.extender.placement import pod_facts
from app.integrations import default_registry
from app.integrations.kubeflow.kubeflow import MPIJOB, PYTORCHJOB
from app.kube.client import JOBS
from app.kube.context import CHILD_JOBS, WL
from app.kube.informers import Store

GPU = "nvidia.com/gpu"
NS = "t"


def _template(gpus: int) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "c", "resources": {"limits": {GPU: str(gpus)}}}]}}


def _state(admitted: bool = True) -> StoreExtenderState:
    """PyTorchJob t/ddp (uid ``ddp-uid``): Master 1 x 1 GPU, Worker 2 x 2 GPUs, its Workload
    admitted (or only queued)."""
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"namespace": NS, "name": "ddp", "uid": "ddp-uid",
                        "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
           "spec": {"runPolicy": {"suspend": not admitted}, "pytorchReplicaSpecs": {
               "Master": {"replicas": 1, "template": _template(1)},
               "Worker": {"replicas": 2, "template": _template(2)}}}}
    conditions = [{"type": "QuotaReserved", "status": "True"},
                  {"type": "Admitted", "status": "True"}] if admitted else []
    wl = {"metadata": {"namespace": NS, "name": PYTORCHJOB.workload_name(job),
                       "resourceVersion": "1"},
          "spec": {"queueName": "lq", "podSets": [
              {"name": "master", "count": 1, "template": _template(1)},
              {"name": "worker", "count": 2, "template": _template(2)}]},
          "status": {"conditions": conditions}}
    if admitted:
        wl["status"]["admission"] = {"clusterQueue": "cq", "podSetAssignments": [
            {"name": "master", "count": 1, "flavors": {GPU: "a100"}},
            {"name": "worker", "count": 2, "flavors": {GPU: "a100"}}]}
    return _extender_state({PYTORCHJOB.key: job, WL: wl})


def _extender_state(objects: dict[str, dict[str, Any]]) -> StoreExtenderState:
    """``StoreExtenderState`` over stores holding one object each (store key -> object)."""
    stores = {key: Store(JOBS) for key in objects}
    for key, obj in objects.items():
        stores[key].put(obj)
    ctx = SimpleNamespace(store=lambda k: stores.get(k) or Store(JOBS), synced=True,
                          settings=Settings())
    return StoreExtenderState(ctx, NodeStore(GPU), default_registry())  # type: ignore[arg-type]


def _pod(gpus: int, podset: str | None, name: str = "ddp-worker-0") -> Any:
    labels = {"training.kubeflow.org/job-name": "ddp"}
    if podset is not None:
        labels["kueue.x-k8s.io/podset"] = podset
    return pod_facts({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": NS, "uid": f"{name}-uid", "labels": labels,
        "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                             "name": "ddp", "uid": "ddp-uid", "controller": True}]},
        "spec": {"containers": [{"name": "c", "resources": {
            "limits": {GPU: str(gpus)}, "requests": {GPU: str(gpus)}}}]}}, GPU)


def test_a_pod_no_bigger_than_its_podset_is_placed() -> None:
    state = _state()
    assert state.withheld(_pod(2, "worker")) == ""
    assert state.withheld(_pod(1, "master", "ddp-master-0")) == ""


def test_a_pod_bigger_than_its_podset_gets_no_node() -> None:
    state = _state()
    why = state.withheld(_pod(8, "worker"))
    assert "requests 8 nvidia.com/gpu, more than the 2 of a pod of podSet worker" in why, why
    assert "PyTorchJob t/ddp" in why
    why = state.withheld(_pod(2, "master", "ddp-master-0"))
    assert "more than the 1 of a pod of podSet master" in why, why


def test_without_a_known_podset_the_largest_bounds_it() -> None:
    state = _state()
    assert state.withheld(_pod(2, None)) == ""
    assert state.withheld(_pod(2, "other")) == ""
    why = state.withheld(_pod(3, "other"))
    assert "more than the 2 of a pod of any podSet" in why, why


def test_a_pod_of_an_object_not_admitted_is_left_to_pod_admitted() -> None:
    """Not admitted, the object's pods are not compared (there is no admission to compare
    with); under ``extender.flavor_nodes_for_admitted_only`` ``pod_admitted`` refuses them."""
    state = _state(admitted=False)
    assert state.withheld(_pod(8, "worker")) == ""
    assert not state.pod_admitted(_pod(1, "worker"))
    assert _state().pod_admitted(_pod(1, "worker"))


def test_a_launcher_raised_after_admission_is_sized_by_its_admitted_podset() -> None:
    """brk34 L2's other direction: MPIJob t/mj admitted with a 1-GPU launcher; its launcher
    template and its launcher Job both raised to 8 GPUs since. The launcher's pod is held to
    the admitted ``launcher`` podSet (1), not to the template as edited (8)."""
    def template(gpus: int) -> dict[str, Any]:
        return {"spec": {"containers": [{"name": "c", "resources": {"limits": {GPU: str(gpus)}}}]}}
    mpijob = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
              "metadata": {"namespace": NS, "name": "mj", "uid": "mj-uid",
                           "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
              "spec": {"runPolicy": {"suspend": False}, "mpiReplicaSpecs": {
                  "Launcher": {"replicas": 1, "template": template(8)},
                  "Worker": {"replicas": 1, "template": template(1)}}}}
    launcher = {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"namespace": NS, "name": "mj-launcher", "uid": "l-uid",
                             "ownerReferences": [{"apiVersion": "kubeflow.org/v2beta1",
                                                  "kind": "MPIJob", "name": "mj",
                                                  "uid": "mj-uid", "controller": True}]},
                "spec": {"parallelism": 1, "template": template(8)}}
    wl = {"metadata": {"namespace": NS, "name": MPIJOB.workload_name(mpijob),
                       "resourceVersion": "1"},
          "spec": {"queueName": "lq", "podSets": [
              {"name": "launcher", "count": 1, "template": template(1)},
              {"name": "worker", "count": 1, "template": template(1)}]},
          "status": {"admission": {"clusterQueue": "cq", "podSetAssignments": []},
                     "conditions": [{"type": "QuotaReserved", "status": "True"},
                                    {"type": "Admitted", "status": "True"}]}}
    state = _extender_state({MPIJOB.key: mpijob, CHILD_JOBS: launcher, WL: wl})
    pod = pod_facts({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "mj-launcher-x", "namespace": NS, "uid": "p-uid",
        "labels": {"training.kubeflow.org/job-role": "launcher"},
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "mj-launcher",
                             "uid": "l-uid", "controller": True}]},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {GPU: "8"}}}]}}, GPU)
    why = state.withheld(pod)
    assert "requests 8 nvidia.com/gpu, more than the 1" in why, why


def test_the_podset_sizes_follow_the_workloads_resource_version() -> None:
    """``_admitted_set_gpus`` keeps a Workload's podSet sizes per resourceVersion: the same
    version answers from the cache, a new one is read again."""
    state = _state()
    assert "more than the 2 of a pod of podSet worker" in state.withheld(_pod(3, "worker"))
    wl = copy.deepcopy(state.ctx.store(WL).list()[0])
    wl["spec"]["podSets"][1]["template"] = _template(4)
    state.ctx.store(WL).put(wl)  # same resourceVersion: the cached sizes stand
    assert state.withheld(_pod(3, "worker")) != ""
    wl["metadata"]["resourceVersion"] = "2"
    state.ctx.store(WL).put(wl)
    assert state.withheld(_pod(3, "worker")) == ""

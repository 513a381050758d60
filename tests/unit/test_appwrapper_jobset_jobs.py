"""The Jobs of an AppWrapper's JobSet component find the AppWrapper through pykueue's stores
(brk31 M3): the JobSet kind watches every JobSet besides its own labelled ones
(``CHILD_JOBSETS``, its ``side_stores``), and the ancestor walk reads an object its kind's
store lacks from any other store of its API group and kind (``framework.stored_object``).
So the Job webhook, the scheduler extender and the reconciler judge such a Job by the
component's template (the webhook test is ``test_brk31_findings.py``'s M3)."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

from app.config import Settings
from app.controllers.admission_lookup import StoreExtenderState
from app.extender.nodestore import NodeStore
from app.extender.placement import PodFacts
from app.integrations import default_registry
from app.integrations.appwrapper.appwrapper import KIND
from app.integrations.framework import stored_ancestor, stored_object
from app.integrations.jobset.jobset import JOBSETS
from app.integrations.jobset.jobset import KIND as JOBSET
from app.kube.client import JOBS
from app.kube.context import CHILD_JOBS, CHILD_JOBSETS, WL
from app.kube.informers import Store
from app.wire.owners import OwnerRef
from tests.unit.test_appwrapper_child_templates import _jobset_component
from tests.unit.test_brk30b_findings import _jobsets_job


def _ctx(*, jobsets: tuple[dict[str, Any], ...] = (), labelled: tuple[dict[str, Any], ...] = (),
         others: dict[str, list[dict[str, Any]]] | None = None) -> Any:
    """Stores as the manager builds them: the JobSet kind's own (``labelled``), the side store
    of every JobSet (``jobsets``), and ``others`` by key; the informers' index by kind."""
    stores: dict[str, Store] = {JOBSET.key: Store(JOBSETS), CHILD_JOBSETS: Store(JOBSETS)}
    for obj in labelled:
        stores[JOBSET.key].put(obj)
    for obj in jobsets:
        stores[CHILD_JOBSETS].put(obj)
    for key, objs in (others or {}).items():
        stores[key] = Store(JOBS)
        for obj in objs:
            stores[key].put(obj)
    by_kind = {(JOBSET.api_group, JOBSET.kind): (JOBSET.key, CHILD_JOBSETS)}
    return SimpleNamespace(store=lambda k: stores.get(k) or Store(JOBS), synced=True,
                           settings=Settings(),
                           informers=SimpleNamespace(informers=dict.fromkeys(stores),
                                                     keys_for=lambda g, k: by_kind.get((g, k), ())))


def test_the_jobset_kind_watches_every_jobset() -> None:
    assert (CHILD_JOBSETS, JOBSETS) in JOBSET.side_stores


def test_an_object_is_read_from_its_kinds_store_first_then_any_store_of_its_kind() -> None:
    _, made = _jobset_component()
    other = copy.deepcopy(made)
    other["metadata"]["uid"] = "uid-other"
    assert stored_object(JOBSET, _ctx(jobsets=(made,)), "t", "js")["metadata"]["uid"] == "uid-js"
    assert stored_object(JOBSET, _ctx(jobsets=(made,), labelled=(other,)), "t", "js")[
        "metadata"]["uid"] == "uid-other"
    assert stored_object(JOBSET, _ctx(jobsets=(made,)), "t", "nope") is None
    assert stored_object(JOBSET, _ctx(jobsets=(made,)), "elsewhere", "js") is None
    # A view without the informers' index (a bare store view) reads the kind's store only.
    bare = SimpleNamespace(store=_ctx(jobsets=(made,)).store)
    assert stored_object(JOBSET, bare, "t", "js") is None


def test_a_jobset_components_job_finds_the_appwrapper_through_the_jobset_store() -> None:
    running, made = _jobset_component()
    js_job = _jobsets_job(copy.deepcopy(made), "1")
    found = stored_ancestor(_ctx(jobsets=(made,), others={KIND.key: [running]}),
                            default_registry(), js_job)
    assert found is not None and found[0] is KIND and found[1]["metadata"]["name"] == "aw"
    # Not held anywhere, or a namesake of another uid: no ancestor (unknown).
    assert stored_ancestor(_ctx(others={KIND.key: [running]}), default_registry(),
                           js_job) is None
    namesake = copy.deepcopy(made)
    namesake["metadata"]["uid"] = "uid-namesake"
    assert stored_ancestor(_ctx(jobsets=(namesake,), others={KIND.key: [running]}),
                           default_registry(), js_job) is None


def _admitted_workload(appwrapper: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"namespace": "t", "name": KIND.workload_name(appwrapper),
                         "resourceVersion": "1"},
            "spec": {"queueName": "lq", "podSets": []},
            "status": {"admission": {"clusterQueue": "cq", "podSetAssignments": []},
                       "conditions": [{"type": "QuotaReserved", "status": "True"},
                                      {"type": "Admitted", "status": "True"}]}}


def test_the_extender_places_no_bigger_pod_of_a_jobset_components_job() -> None:
    """``js-w-0`` resumed with 8 GPUs a pod (whatever let it through: the label taken off its
    pod template first, so no webhook saw it): its 8-GPU pod gets no node on the AppWrapper's
    admission of 1 GPU a pod; a 1-GPU pod does. Before, the walk stopped at the unstored
    JobSet and the pod was left to its Job, which holds no Workload of its own."""
    running, made = _jobset_component()
    js_job = copy.deepcopy(_jobsets_job(made, "1"))
    js_job["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"nvidia.com/gpu": "8"}}
    ctx = _ctx(jobsets=(made,), others={KIND.key: [running], CHILD_JOBS: [js_job],
                                        WL: [_admitted_workload(running)]})
    state = StoreExtenderState(ctx, NodeStore("nvidia.com/gpu"), default_registry())

    def pod(gpus: int) -> PodFacts:
        return PodFacts("t", "js-w-0-abcde", job_name="js-w-0", job_uid="uid-js-w-0",
                        gpus=gpus, uid="pod-uid",
                        controller=OwnerRef("batch/v1", "Job", "js-w-0", "uid-js-w-0"))
    js_job["metadata"]["uid"] = "uid-js-w-0"
    ctx.store(CHILD_JOBS).put(js_job)
    why = state.withheld(pod(8))
    assert "requests 8 nvidia.com/gpu, more than the 1" in why and "AppWrapper t/aw" in why, why
    assert state.withheld(pod(1)) == ""
    assert state.pod_admitted(pod(1))
    # Without the JobSet in a store (before): nothing withheld, and nothing admits it.
    ctx.store(CHILD_JOBSETS).remove("t/js")
    assert state.withheld(pod(8)) == ""
    assert not state.pod_admitted(pod(1))

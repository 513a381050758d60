"""brk36b: breaking what session 36 built (4153668..): Spark executors held per driver
(f3d9e48), an AppWrapper's wrapped objects' pods counted by its podSets (d41a9e5), the
store of every JobSet and ``vappwrapper-wrapped-jobset-job`` (ed22cde), the AppWrapper
component queue-name check (55273c4). Each test FAILS on the code it names (strict xfail).
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from app.api.extender import _decide, _Parsed
from app.controllers.admission_lookup import StoreExtenderState
from app.extender.nodestore import NodeStore
from app.extender.placement import pod_facts
from app.integrations import default_registry
from app.integrations.appwrapper.appwrapper import KIND as APPWRAPPER
from app.integrations.kubeflow.kubeflow import PYTORCHJOB
from app.integrations.ray.ray import RAYCLUSTER, RAYJOB
from app.integrations.sparkapplication.sparkapplication import KIND as SPARK
from app.kube import context as kctx
from app.kube.client import NAMESPACES, PODS, RESOURCE_FLAVORS, WORKLOADS
from app.kube.context import POD, RF, WL
from app.wire.names import PODSET_LABEL
from tests.unit.fake_ctx import FakeCtx
from tests.unit.test_brk36_findings import AW_REF
from tests.unit.test_foreground_deletion import _admitted
from tests.unit.test_foreground_deletion import _reconciler as _fd_reconciler
from tests.unit.test_pod_create_check import NS, QUEUE, Stores, _pod, _template, _workload
from tests.unit.test_spark_executor_admission import _create, _ctx, _executor
from tests.unit.test_sparkapplication import app

GONE = "2026-12-07T16:00:00Z"
NEW_DRIVER_REF = {"apiVersion": "v1", "kind": "Pod", "name": "pi-driver", "uid": "pod-1",
                  "controller": True}


def _replaced_driver(ctx: Any, *, grace: int = 30) -> None:
    """The driver ``pi-driver`` (uid pod-0) deleted and made again (uid pod-1: spark-operator
    submits the application again under its ``restartPolicy``, or the tenant makes it): its
    2 executors, being deleted by the garbage collector with ``grace`` seconds (the pod's own
    ``terminationGracePeriodSeconds``, the tenant's choice; containers ignoring SIGTERM),
    still Running on their node under the gone driver."""
    store = ctx.store(POD)
    new = copy.deepcopy(store.get("ns/pi-driver"))
    new["metadata"]["uid"] = "pod-1"
    store.put(new)
    for i in range(2):
        pod = {**_executor(i), "status": {"phase": "Running"}}
        pod["spec"]["nodeName"] = "gpu-1"
        pod["spec"]["terminationGracePeriodSeconds"] = grace
        pod["metadata"].update(deletionTimestamp=GONE, deletionGracePeriodSeconds=grace)
        store.put(pod)


async def test_b1_a_new_drivers_executors_count_the_replaced_drivers_still_running() -> None:
    """Admitted for 2 one-GPU executors. The driver is replaced while its 2 executors run
    out their grace period: the new driver's first executor is a third one running on an
    admission of 2. Repeated (delete the driver, make it again, 2 more executors), k drivers
    run 2k executors for as long as the grace period the tenant gave its pods."""
    ctx = _ctx()
    _replaced_driver(ctx)
    assert ctx.store(POD).get("ns/pi-driver")["metadata"]["uid"] == "pod-1"
    allowed, _, why = await _create(ctx, _executor(5, controller=NEW_DRIVER_REF))
    assert not allowed, "a third executor Running on an admission of 2 was allowed"


def test_b1_the_backstop_leaves_a_replaced_drivers_executors_beside_the_new_ones() -> None:
    """The same with the executors' grace period a day (the tenant's pods, containers
    ignoring SIGTERM; the webhook compares no grace period): the new driver's 2 executors
    Running beside the 2 old ones, which neither count for the Workload (``killed_in_grace``:
    beyond the grace it allows) nor are deleted again with a shorter grace, as brk31 H2's
    rule does for a child Job's pods: the application's pass deletes nothing."""
    ctx = _ctx()
    _replaced_driver(ctx, grace=86400)
    for i in (5, 6):
        pod = {**_executor(i, controller=NEW_DRIVER_REF), "status": {"phase": "Running"}}
        pod["spec"]["nodeName"] = "gpu-2"
        ctx.store(POD).put(pod)
    obj = app(2)
    obj["spec"]["suspend"] = False
    wl = _admitted(SPARK.workload_object(obj), deleting=False)
    rec, rctx = _fd_reconciler(SPARK, "sparkoperator.k8s.io/sparkapplication",
                               {POD: ctx.store(POD).list(), SPARK.key: [obj], WL: [wl]})
    running = [p for p in rctx.store(POD).list()
               if (p["metadata"].get("labels") or {}).get("spark-role") == "executor"]
    assert len(running) == 4
    asyncio.run(rec._delete_excess(SPARK, obj))
    deletes = [w for w in rctx.writes if w[:2] == ("delete", "pods")]
    assert deletes, "4 one-GPU executors left Running on an admission of 2"


def _generate_named_pytorchjob(*, deployed: bool) -> Stores:
    """AppWrapper ``aw`` (admitted) wrapping one PyTorchJob by ``generateName: pt-`` (Master
    1, Worker 2: podSets ``aw-0`` 1, ``aw-1`` 2); the controller's ``pt-abcde`` and the
    tenant's ``pt-evil``, both controlled by ``aw``. ``deployed``: the name ``pt-abcde``
    recorded and ``ResourcesDeployed`` True; else phase ``Resuming``, nothing deployed yet
    (the window ``names_component`` leaves open; brk30b H1's remainder holds it open as long
    as an earlier component's create fails, a ResourceQuota of object counts the tenant
    fills)."""
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"generateName": "pt-"},
           "spec": {"pytorchReplicaSpecs": {
               "Master": {"replicas": 1, "template": _template(None)},
               "Worker": {"replicas": 2, "template": _template(None)}}}}
    aw = {"apiVersion": AW_REF["apiVersion"], "kind": "AppWrapper",
          "metadata": {"namespace": NS, "name": "aw", "uid": "aw-uid", "labels": QUEUE},
          "spec": {"suspend": False, "components": [{"template": job}]},
          "status": {"phase": "Running", "componentStatus": [
              {"name": "pt-abcde", "kind": "PyTorchJob", "apiVersion": "kubeflow.org/v1"}],
              "conditions": [{"type": "ResourcesDeployed", "status": "True"}]}
          if deployed else {"phase": "Resuming", "conditions": [
              {"type": "ResourcesDeployed", "status": "False"}]}}
    made = []
    for name in ("pt-abcde", "pt-evil"):
        obj = copy.deepcopy(job)
        obj["metadata"] = {"namespace": NS, "name": name, "uid": f"{name}-uid",
                           "ownerReferences": [dict(AW_REF)]}
        made.append(obj)
    wl = _workload(APPWRAPPER, aw,
                   {t.name: (t.count, _template(None)) for t in APPWRAPPER.templates(aw)})
    return Stores({APPWRAPPER.key: [aw], PYTORCHJOB.key: made, WL: [wl]})


def _pt_pod(job: str, name: str, podset: str) -> dict[str, Any]:
    pod = _pod(name, podset, claim=None,
               owner=("kubeflow.org/v1", "PyTorchJob", job, f"{job}-uid"))
    pod["metadata"]["labels"]["training.kubeflow.org/job-name"] = job
    return pod


def test_b2_a_second_pytorchjob_of_a_components_prefix_runs_no_second_set_of_pods() -> None:
    """aw-1 (workers) admitted for 2, both Running under the controller's ``pt-abcde``: a
    worker of the tenant's ``pt-evil`` (controlled by ``aw``, made in the window, so its
    prefix names the component too) would be a third one on an admission of 2: refused,
    the count being the component's over every PyTorchJob it names
    (``reconciler.component_pods``; counted per PyTorchJob uid before)."""
    s = _generate_named_pytorchjob(deployed=False)
    for i in range(2):
        pod = _pt_pod("pt-abcde", f"pt-abcde-worker-{i}", "aw-1")
        assert s.check.errors(pod) == []
        s.add_pod(pod)
    errors = s.check.errors(_pt_pod("pt-evil", "pt-evil-worker-0", "aw-1"))
    assert errors, "a third aw-1 worker allowed on an admission of 2"


def _backstop(deployed: bool, *jobs: str) -> set[str]:
    """``_generate_named_pytorchjob(deployed)`` with 3 Running pods (``aw-0`` master, 2
    ``aw-1`` workers) under each of ``pt-abcde`` and ``pt-evil``, the second's a minute
    later; ``_delete_excess`` run for each PyTorchJob of ``jobs``; the names of the pods
    deleted."""
    s = _generate_named_pytorchjob(deployed=deployed)
    pods = []
    for t, job in enumerate(("pt-abcde", "pt-evil")):
        for name, podset in (("master-0", "aw-0"), ("worker-0", "aw-1"), ("worker-1", "aw-1")):
            pod = _pt_pod(job, f"{job}-{name}", podset)
            pod["metadata"]["creationTimestamp"] = f"2026-12-07T00:0{t}:00Z"
            pod["status"] = {"phase": "Running"}
            pod["spec"]["nodeName"] = "gpu-1"
            pods.append(pod)
    objects = {k: s.stores[k].list() for k in (APPWRAPPER.key, PYTORCHJOB.key, WL)}
    rec, rctx = _fd_reconciler(PYTORCHJOB, "kubeflow.org/pytorchjob", {**objects, POD: pods},
                               extra=(APPWRAPPER.key,))
    rec.registry = default_registry(["kubeflow.org/pytorchjob",  # type: ignore[assignment]
                                     "workload.codeflare.dev/appwrapper"])
    for job in jobs:
        obj = rctx.store(PYTORCHJOB.key).get(f"t/{job}")
        assert obj is not None
        asyncio.run(rec._delete_excess(PYTORCHJOB, obj))
    return {w[2] for w in rctx.writes if w[:2] == ("delete", "pods")}


def test_b2_the_backstop_deletes_the_second_pytorchjobs_pods_in_the_window() -> None:
    """In the window (name not recorded) pt-abcde's 3 pods run and pt-evil's 3, made after
    them, carry the same podSet labels: the backstop counts the component over both
    PyTorchJobs and deletes the 3 newer ones (6 Running on an admission of 3 before)."""
    deleted = _backstop(False, "pt-abcde", "pt-evil")
    assert deleted, "pt-evil's 3 pods left Running beside pt-abcde's on an admission of 3"
    assert deleted == {"pt-evil-master-0", "pt-evil-worker-0", "pt-evil-worker-1"}, deleted


def test_b2_the_backstop_deletes_the_second_pytorchjobs_pods_once_the_name_is_recorded() -> None:
    """The same after the controller recorded ``pt-abcde`` (``ResourcesDeployed``): ``pt-evil``
    is no component any more (``child_podsets`` answers none), so ``_delete_excess`` deletes
    its 3 Running pods labelled ``aw-0``/``aw-1``: 6 pods Running on an admission of 3
    before."""
    deleted = _backstop(True, "pt-evil")
    assert deleted, "pt-evil's 3 pods left Running beside pt-abcde's on an admission of 3"
    assert deleted == {"pt-evil-master-0", "pt-evil-worker-0", "pt-evil-worker-1"}, deleted


def _two_flavors_ctx() -> tuple[FakeCtx, StoreExtenderState]:
    """``_ctx()`` (application ``pi`` admitted on flavor ``a100``: nodeLabels pool=a100)
    beside flavor ``l4`` (pool=l4), whose GPUs another team's admissions count on; nodes
    ``a100-0`` and ``l4-0``, 8 GPUs each."""
    base = _ctx()
    keys = {SPARK.key: SPARK.resource, WL: WORKLOADS, POD: PODS, kctx.NS: NAMESPACES,
            kctx.RCT: WORKLOADS, kctx.LR: WORKLOADS}
    ctx = FakeCtx({**keys, RF: RESOURCE_FLAVORS},
                  {**{k: base.store(k).list() for k in keys},
                   RF: [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                         "metadata": {"name": f}, "spec": {"nodeLabels": {"pool": f}}}
                        for f in ("a100", "l4")]})
    ctx.synced = True  # type: ignore[attr-defined]
    state = StoreExtenderState(ctx, NodeStore("nvidia.com/gpu"),  # type: ignore[arg-type]
                               default_registry())
    for node in ("a100-0", "l4-0"):
        state.nodes.update({"metadata": {"name": node, "labels": {"pool": node[:-2]}},
                            "status": {"allocatable": {"nvidia.com/gpu": "8"}}})
    return ctx, state


async def test_m1_an_executor_on_another_flavors_nodes_is_placed_there() -> None:
    """Strict setup (the Pod webhook sees every pod, ``flavor_nodes_for_admitted_only``).
    ``pi`` admitted for 2 one-GPU executors on ``a100``; the tenant makes executor 0 itself
    (it may create pods), no bigger than the template, within the count, but with
    ``nodeSelector: pool=l4``: the Pod webhook compares label, requests, claims and count,
    not placement, and the extender, which pins a batch Job's pods to their admitted flavor
    (``filter_pod`` with the Job's Workload view), has no view for a pod a pod made: it
    passes every node. The executor takes an L4 GPU no admission on ``l4`` counts (another
    team's pods admitted there then find the node full), while ``pi``'s quota is charged on
    ``a100``. brk31 M1 closed the same for a wrapped Job's pod template; a pod a tenant makes
    under an admitted PyTorchJob (``direct_podsets``) has the same gap."""
    ctx, state = _two_flavors_ctx()
    pod = _executor(0)
    pod["spec"]["nodeSelector"] = {"pool": "l4"}
    allowed, _, why = await _create(ctx, pod, strict=True)
    placed = _decide(_Parsed(pod_facts(pod, "nvidia.com/gpu"), ["a100-0", "l4-0"]), state,
                     admitted_only=True).passing
    assert not allowed or "l4-0" not in placed, \
        f"executor with nodeSelector pool=l4 created ({why}) and placed on {placed}"


def test_f1_the_pods_of_a_rayjob_an_appwrapper_wraps_are_allowed() -> None:
    """Strict setup. AppWrapper ``aw`` (admitted) wraps RayJob ``rj`` (appwrapper v1.2.0
    infers its podSets ``aw-0``, the head, and ``aw-1``, the ``gpu`` group, from
    ``spec.rayClusterSpec``, and labels those templates with them); KubeRay makes the
    RayCluster under ``rj`` from that spec, so its pods carry ``aw-0`` and ``aw-1``.
    ``podsets_under`` asks the AppWrapper's ``child_podsets`` for the cluster, which is no
    component (the RayJob is), so the cluster's own ``direct_podsets`` (``head``, ``gpu``)
    apply and both pods are refused: the job never runs (brk36 F1's RayJob case, which its
    module doc names but the fix does not cover)."""
    job = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "rj"},
           "spec": {"entrypoint": "x", "rayClusterSpec": {
               "headGroupSpec": {"rayStartParams": {}, "template": _template(None)},
               "workerGroupSpecs": [{"groupName": "gpu", "replicas": 1, "minReplicas": 0,
                                     "maxReplicas": 1, "rayStartParams": {},
                                     "template": _template(None)}]}}}
    aw = {"apiVersion": AW_REF["apiVersion"], "kind": "AppWrapper",
          "metadata": {"namespace": NS, "name": "aw", "uid": "aw-uid", "labels": QUEUE},
          "spec": {"suspend": False, "components": [{"template": job}]}}
    made = copy.deepcopy(job)
    made["metadata"] = {"namespace": NS, "name": "rj", "uid": "rj-uid",
                        "ownerReferences": [dict(AW_REF)]}
    made["status"] = {"rayClusterName": "rj-abc", "jobDeploymentStatus": "Running"}
    cluster = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {
        "namespace": NS, "name": "rj-abc", "uid": "rc-uid",
        "labels": {"ray.io/originated-from-crd": "RayJob", "ray.io/originated-from-cr-name": "rj"},
        "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "rj",
                             "uid": "rj-uid", "controller": True}]},
        "spec": copy.deepcopy(job["spec"]["rayClusterSpec"])}
    wl = _workload(APPWRAPPER, aw,
                   {t.name: (t.count, _template(None)) for t in APPWRAPPER.templates(aw)})
    s = Stores({APPWRAPPER.key: [aw], RAYJOB.key: [made], RAYCLUSTER.key: [cluster], WL: [wl]})
    errors = {}
    for name, podset in (("rj-abc-head", "aw-0"), ("rj-abc-gpu-worker", "aw-1")):
        pod = _pod(name, podset, claim=None, owner=("ray.io/v1", "RayCluster", "rj-abc",
                                                    "rc-uid"))
        pod["metadata"]["labels"] = {"ray.io/cluster": "rj-abc", PODSET_LABEL: podset}
        errors[name] = s.check.errors(pod)
    assert errors == {"rj-abc-head": [], "rj-abc-gpu-worker": []}, errors


def _pytorchjob_of(meta: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta,
            "spec": {"pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": _template(None)}}}}


def test_f2_a_fixed_name_component_is_not_taken_for_an_earlier_generate_name_one() -> None:
    """Strict setup. AppWrapper ``aw`` wraps two PyTorchJobs: component 0 by
    ``generateName: pt-`` (podSet ``aw-0``), component 1 named ``pt-b`` (``aw-1``). While
    ``aw`` is ``Resuming`` and nothing is deployed (the controller creates both, then sets
    ``ResourcesDeployed``), ``pt-b`` matches component 0's prefix first, so its master
    (labelled ``aw-1``) is refused until the store shows the condition: a transient refusal
    of the operator's own pod (training-operator retries with its backoff)."""
    aw = {"apiVersion": AW_REF["apiVersion"], "kind": "AppWrapper",
          "metadata": {"namespace": NS, "name": "aw", "uid": "aw-uid", "labels": QUEUE},
          "spec": {"suspend": False, "components": [
              {"template": _pytorchjob_of({"generateName": "pt-"})},
              {"template": _pytorchjob_of({"name": "pt-b"})}]},
          "status": {"phase": "Resuming"}}
    made = _pytorchjob_of({"namespace": NS, "name": "pt-b", "uid": "pt-b-uid",
                           "ownerReferences": [dict(AW_REF)]})
    wl = _workload(APPWRAPPER, aw,
                   {t.name: (t.count, _template(None)) for t in APPWRAPPER.templates(aw)})
    s = Stores({APPWRAPPER.key: [aw], PYTORCHJOB.key: [made], WL: [wl]})
    assert s.check.errors(_pt_pod("pt-b", "pt-b-master-0", "aw-1")) == []


async def test_m1_an_executor_selecting_its_admitted_flavor_is_allowed() -> None:
    """The fix's other side: the executor Spark makes carries the role's nodeSelector,
    which pykueue set to the admitted flavor's node labels (``pool=a100``): allowed; one
    selecting no flavor is refused, naming the labels it lacks."""
    ctx, _ = _two_flavors_ctx()
    pod = _executor(0)
    pod["spec"]["nodeSelector"] = {"pool": "a100", "other": "x"}
    allowed, _, why = await _create(ctx, pod, strict=True)
    assert allowed, why
    del pod["spec"]["nodeSelector"]
    allowed, _, why = await _create(ctx, _executor(1) | {"spec": pod["spec"]}, strict=True)
    assert not allowed and "pool=a100" in why, why

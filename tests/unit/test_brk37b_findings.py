"""brk37b: breaking session 37's webhook changes (359c0a7: the Pod CREATE count over the
holding-pods index; fa51bc5 / 270c326: an AppWrapper component's pods counted per component,
``reconciler.component_pods``; 1e38d34: ``_earlier_create_failed``). Each test FAILS on
f59615d for the reason it names (strict xfail). Closed the same session: P1 (no placement
rule with ``inject_node_selector`` off), R1 and R3 (a wrapped RayJob's RayCluster is judged
against that RayJob). Open: P2, R2.

P1 (ba67005 / 0228a64's placement rule): with ``scheduling.inject_node_selector`` off the
start puts no flavor nodeSelector in the templates, yet ``_placement_errors`` requires the
flavor's node labels in every pod's nodeSelector, so every pod the operator makes under a
PyTorchJob, RayCluster or SparkApplication admitted on a flavor with ``nodeLabels`` is
refused, for good: the job never runs. P2: the same rule reads the flavor's nodeLabels as
stored now; a label an administrator adds to a flavor (the CRD lets ``nodeLabels`` change)
refuses every later pod of the jobs started before, whose templates carry the old ones.

R1-R3 are one hole: a RayCluster under a RayJob that an AppWrapper wraps. Its controller is
the RayJob, not the AppWrapper, so ``component_pods`` answers None and its pods are counted
per RayCluster; and ``withholds`` / ``hold_to_ancestor`` are given the queued top (the
AppWrapper) as the parent, so the RayCluster rule that turns away a cluster its RayJob does
not run on (``RayCluster.is_owners_cluster``) never applies: the webhook and the extender
return early ("AppWrapper" is not the cluster's ray owner kind), and the reconciler raises
AttributeError (``AppWrapper.cluster_names`` does not exist) on every pass of such a cluster.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from app.config import SchedulingSettings, Settings
from app.integrations import default_registry
from app.integrations.appwrapper.appwrapper import KIND as APPWRAPPER
from app.integrations.kubeflow.kubeflow import PYTORCHJOB
from app.integrations.ray.ray import RAYCLUSTER, RAYJOB
from app.kube.context import POD, RF, WL
from app.wire.names import PODSET_LABEL
from tests.unit.test_brk36_findings import AW_REF
from tests.unit.test_foreground_deletion import _reconciler as _fd_reconciler
from tests.unit.test_pod_create_check import (
    NS,
    QUEUE,
    Stores,
    _pod,
    _pytorchjob,
    _template,
    _workload,
)

RJ_TEMPLATE = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"generateName": "rj-"},
               "spec": {"entrypoint": "x", "rayClusterSpec": {
                   "headGroupSpec": {"rayStartParams": {}, "template": _template(None)},
                   "workerGroupSpecs": [{"groupName": "gpu", "replicas": 1, "minReplicas": 0,
                                         "maxReplicas": 1, "rayStartParams": {},
                                         "template": _template(None)}]}}}
DEPLOYED = {"phase": "Running", "componentStatus": [
    {"name": "rj-abcde", "kind": "RayJob", "apiVersion": "ray.io/v1",
     "conditions": [{"type": "ResourcesDeployed", "status": "True"}]}],
    "conditions": [{"type": "ResourcesDeployed", "status": "True"}]}
# Being made: phase Resuming, the component's name not recorded (names_component's window).
MAKING = {"phase": "Resuming", "conditions": [{"type": "ResourcesDeployed", "status": "True"}]}


def _cluster(name: str, rayjob: str) -> dict[str, Any]:
    """RayCluster ``name`` controlled by RayJob ``rayjob`` (as KubeRay makes it, or as a
    tenant makes one naming that RayJob as its controller), of the wrapped RayJob's spec."""
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {
        "namespace": NS, "name": name, "uid": f"{name}-uid",
        "creationTimestamp": "2026-12-07T00:00:00Z",
        "labels": {"ray.io/originated-from-crd": "RayJob",
                   "ray.io/originated-from-cr-name": rayjob},
        "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": rayjob,
                             "uid": f"{rayjob}-uid", "controller": True}]},
        "spec": copy.deepcopy(RJ_TEMPLATE["spec"]["rayClusterSpec"])}


def _wrapped_rayjob(status: dict[str, Any], rayjobs: tuple[str, ...],
                    clusters: tuple[tuple[str, str], ...]) -> dict[str, list[dict[str, Any]]]:
    """AppWrapper ``aw`` (admitted) wrapping one RayJob by ``generateName: rj-`` (podSets
    ``aw-0``: the head, 1; ``aw-1``: the ``gpu`` group, 1), in ``status``; RayJobs
    ``rayjobs`` controlled by ``aw`` (each running on ``<name>-c``); RayClusters
    ``clusters`` as (name, controller RayJob)."""
    aw = {"apiVersion": AW_REF["apiVersion"], "kind": "AppWrapper",
          "metadata": {"namespace": NS, "name": "aw", "uid": "aw-uid", "labels": QUEUE},
          "spec": {"suspend": False, "components": [{"template": RJ_TEMPLATE}]},
          "status": copy.deepcopy(status)}
    rjs = []
    for name in rayjobs:
        rj = copy.deepcopy(RJ_TEMPLATE)
        rj["metadata"] = {"namespace": NS, "name": name, "uid": f"{name}-uid",
                          "ownerReferences": [dict(AW_REF)]}
        rj["status"] = {"rayClusterName": f"{name}-c", "jobDeploymentStatus": "Running"}
        rjs.append(rj)
    wl = _workload(APPWRAPPER, aw,
                   {t.name: (t.count, _template(None)) for t in APPWRAPPER.templates(aw)})
    return {APPWRAPPER.key: [aw], RAYJOB.key: rjs,
            RAYCLUSTER.key: [_cluster(c, rj) for c, rj in clusters], WL: [wl]}


def _worker(cluster: str) -> dict[str, Any]:
    """The ``gpu`` worker of RayCluster ``cluster`` as KubeRay makes it (podSet ``aw-1``)."""
    pod = _pod(f"{cluster}-gpu-worker", "aw-1", claim=None,
               owner=("ray.io/v1", "RayCluster", cluster, f"{cluster}-uid"))
    pod["metadata"]["labels"] = {"ray.io/cluster": cluster, PODSET_LABEL: "aw-1"}
    return pod


def _second_worker_errors(objects: dict[str, list[dict[str, Any]]], first: str,
                          second: str) -> list[str]:
    """The first cluster's worker allowed and Running; the errors for the second's."""
    s = Stores(objects)
    pod = _worker(first)
    assert s.check.errors(pod) == []  # strict setup: the operator's own worker runs
    s.add_pod(pod)
    return s.check.errors(_worker(second)) or []


def test_r1_a_tenants_raycluster_claiming_a_wrapped_rayjob_runs_no_second_worker() -> None:
    objects = _wrapped_rayjob(DEPLOYED, ("rj-abcde",),
                              (("rj-abcde-c", "rj-abcde"), ("evil", "rj-abcde")))
    errors = _second_worker_errors(objects, "rj-abcde-c", "evil")
    assert errors, "a second aw-1 worker (the tenant's cluster's) allowed on an admission of 1"


def test_control_a_queued_rayjobs_cluster_claimed_by_a_tenant_is_refused() -> None:
    """The rule R1 misses: the same tenant cluster under a RayJob queued itself (not
    wrapped) is refused, ``withholds`` naming the cluster the RayJob runs on."""
    rj = copy.deepcopy(RJ_TEMPLATE)
    rj["metadata"] = {"namespace": NS, "name": "rj-abcde", "uid": "rj-abcde-uid",
                      "labels": QUEUE}
    rj["spec"]["shutdownAfterJobFinishes"] = True
    rj["status"] = {"rayClusterName": "rj-abcde-c", "jobDeploymentStatus": "Running"}
    wl = _workload(RAYJOB, rj, {t.name: (t.count, _template(None))
                                for t in RAYJOB.templates(rj)})
    s = Stores({RAYJOB.key: [rj], WL: [wl], RAYCLUSTER.key: [
        _cluster("rj-abcde-c", "rj-abcde"), _cluster("evil", "rj-abcde")]})
    pods = {}
    for cluster in ("rj-abcde-c", "evil"):
        pods[cluster] = _worker(cluster)
        pods[cluster]["metadata"]["labels"][PODSET_LABEL] = "gpu"
    assert s.check.errors(pods["rj-abcde-c"]) == []
    s.add_pod(pods["rj-abcde-c"])
    assert "runs on RayCluster rj-abcde-c" in " ".join(s.check.errors(pods["evil"]) or [])


def _backstop(objects: dict[str, list[dict[str, Any]]], cluster: str) -> set[str]:
    """``objects`` with the Running worker of each RayCluster (the tenant's a minute
    later); ``_delete_excess`` run for RayCluster ``cluster``; the pods deleted."""
    pods = []
    for t, rc in enumerate(objects[RAYCLUSTER.key]):
        pod = _worker(rc["metadata"]["name"])
        pod["metadata"]["creationTimestamp"] = f"2026-12-07T00:0{t}:00Z"
        pod["status"] = {"phase": "Running"}
        pod["spec"]["nodeName"] = "gpu-1"
        pods.append(pod)
    rec, rctx = _fd_reconciler(RAYCLUSTER, "ray.io/raycluster", {**objects, POD: pods},
                               extra=(APPWRAPPER.key, RAYJOB.key))
    rec.registry = default_registry(["ray.io/raycluster", "ray.io/rayjob",  # type: ignore[assignment]
                                     "workload.codeflare.dev/appwrapper"])
    obj = rctx.store(RAYCLUSTER.key).get(f"{NS}/{cluster}")
    assert obj is not None
    asyncio.run(rec._delete_excess(RAYCLUSTER, obj))
    return {w[2] for w in rctx.writes if w[:2] == ("delete", "pods")}


def test_r1_the_backstop_deletes_the_tenants_clusters_worker() -> None:
    objects = _wrapped_rayjob(DEPLOYED, ("rj-abcde",),
                              (("rj-abcde-c", "rj-abcde"), ("evil", "rj-abcde")))
    assert _backstop(objects, "evil") == {"evil-gpu-worker"}


@pytest.mark.xfail(strict=True, reason=(
    "brk37b R2: fa51bc5 closed brk36b B2's window only for objects the AppWrapper controls "
    "(a PyTorchJob): in a generateName RayJob component's window the tenant's rj-evil is "
    "named by the prefix too, KubeRay makes its cluster, and each RayCluster's pods are "
    "counted alone, so the tenant runs a second set of pods in the window"))
def test_r2_a_second_rayjob_of_a_components_prefix_runs_no_second_worker() -> None:
    objects = _wrapped_rayjob(MAKING, ("rj-abcde", "rj-evil"),
                              (("rj-abcde-c", "rj-abcde"), ("rj-evil-c", "rj-evil")))
    errors = _second_worker_errors(objects, "rj-abcde-c", "rj-evil-c")
    assert errors, "a second aw-1 worker (rj-evil's cluster's) allowed on an admission of 1"


def test_r3_the_reconciler_passes_a_wrapped_rayjobs_cluster_without_raising() -> None:
    objects = _wrapped_rayjob(DEPLOYED, ("rj-abcde",), (("rj-abcde-c", "rj-abcde"),))
    wl = objects[WL][0]
    wl["status"] = {"admission": {"clusterQueue": "cq", "podSetAssignments": [
        {"name": ps["name"], "count": ps["count"], "flavors": {"cpu": "default"}}
        for ps in wl["spec"]["podSets"]]}, "conditions": [
        {"type": t, "status": "True", "reason": t, "message": ""}
        for t in ("QuotaReserved", "Admitted")]}
    rec, _ = _fd_reconciler(RAYCLUSTER, "ray.io/raycluster", {**objects, POD: []},
                            extra=(APPWRAPPER.key, RAYJOB.key))
    rec.registry = default_registry(["ray.io/raycluster", "ray.io/rayjob",  # type: ignore[assignment]
                                     "workload.codeflare.dev/appwrapper"])
    asyncio.run(rec.reconcile_object(RAYCLUSTER, NS, "rj-abcde-c"))


def _started_pytorchjob_errors(started_with: dict[str, str], flavor_now: dict[str, str],
                                inject: bool) -> list[str]:
    """PyTorchJob ``ddp`` admitted on flavor ``default`` and started by pykueue when the
    flavor's nodeLabels were ``started_with`` (``inject``: scheduling.inject_node_selector);
    the flavor as stored now has ``flavor_now``. The errors for the worker the
    training-operator makes from the started template."""
    job = _pytorchjob()
    started = PYTORCHJOB.injected(job, {"master": (started_with, []),
                                        "worker": (started_with, [])},
                                  inject_node_selector=inject)
    worker = started["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    rf = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
          "metadata": {"name": "default"}, "spec": {"nodeLabels": flavor_now}}
    wl = _workload(PYTORCHJOB, job, {"master": (1, _template()), "worker": (2, _template())})
    s = Stores({PYTORCHJOB.key: [started], RF: [rf], WL: [wl]},
               settings=Settings(scheduling=SchedulingSettings(inject_node_selector=inject)))
    pod = _pod("ddp-worker-0", "worker")
    pod["spec"] = copy.deepcopy(worker["spec"])  # as the operator makes it from the template
    return s.check.errors(pod) or []


def test_p1_without_node_selector_injection_the_operators_pods_are_allowed() -> None:
    assert _started_pytorchjob_errors({"pool": "a"}, {"pool": "a"}, inject=False) == []


def test_control_the_operators_pods_carry_the_injected_flavor_labels() -> None:
    assert _started_pytorchjob_errors({"pool": "a"}, {"pool": "a"}, inject=True) == []


@pytest.mark.xfail(strict=True, reason=(
    "brk37b P2: _placement_errors asks for the flavor's nodeLabels as stored now: a label "
    "added to flavor default after ddp started (zone=z) is in no template of ddp, so the "
    "training-operator's every later pod (a replacement worker) is refused"))
def test_p2_a_label_added_to_the_flavor_later_refuses_no_pod_of_a_started_job() -> None:
    assert _started_pytorchjob_errors({"pool": "a"}, {"pool": "a", "zone": "z"},
                                      inject=True) == []

"""A SparkApplication's executors are its own business at CREATE, as Kueue's ancestor walk
makes them (brk35 F2, and the same under the default setup).

Spark 4.0 makes each executor controlled by the driver pod, and spark-operator v2.5.0 gives
the executors the SparkApplication's labels (``submission.go``: ``app.Labels`` as
``spark.kubernetes.executor.label.*``), the queue name among them. Kueue v0.17.1's Pod
webhook walks the executor's controllers (``FindAncestorJobManagedByKueue``: the driver Pod,
then the queued SparkApplication) and leaves it to its ancestor. pykueue gated it as a plain
Pod of its own: a Workload per executor, under the default setup too, though the
application's ``executor`` podSet already counts it. Now such an executor is not gated, and
the Pod webhook's CREATE rule holds it to the ``executor`` podSet (its label, template and
admitted count, per driver); the scheduler extender places it on the application's
admission. A pod made by a pod that is not the queued application's driver is a plain Pod
as before.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
from typing import Any

from app.config import JobsSettings
from app.controllers.admission_lookup import StoreAdmissionLookup, StoreExtenderState
from app.controllers.pod_create_check import made_by_queued_pod
from app.extender.nodestore import NodeStore
from app.extender.placement import pod_facts
from app.integrations import default_registry
from app.integrations.sparkapplication.sparkapplication import KIND as SPARK
from app.kube.client import NAMESPACES, PODS, WORKLOADS
from app.kube.context import LR, NS, POD, RCT, WL
from tests.unit.fake_ctx import FakeCtx
from tests.unit.test_foreground_deletion import _admitted
from tests.unit.test_foreground_deletion import _reconciler as _fd_reconciler
from tests.unit.test_spark_executors import EXECUTOR_LABELS
from tests.unit.test_sparkapplication import app
from tests.unit.test_unlabelled_pods import POD_KIND_REF
from tests.unit.test_webhook import answer, apply_patch, make_app, post, review

QUEUE = "kueue.x-k8s.io/queue-name"
SPARK_USER = "system:serviceaccount:ns:spark"
DRIVER_REF = {"apiVersion": "v1", "kind": "Pod", "name": "pi-driver", "uid": "pod-0",
              "controller": True}


def _ctx(*, admitted: bool = True, executors: int = 2) -> FakeCtx:
    """SparkApplication ns/pi (queue ``lq``, ``executors`` one-GPU executors), its Workload
    (admitted when ``admitted``) and its driver ``pi-driver`` Running."""
    obj = app(executors)
    obj["spec"]["suspend"] = not admitted
    wl = SPARK.workload_object(obj)
    wl["metadata"].update(namespace="ns", resourceVersion="1")
    if admitted:
        wl = _admitted(wl, deleting=False)
    driver = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "pi-driver", "namespace": "ns", "uid": "pod-0",
        "labels": {"sparkoperator.k8s.io/app-name": "pi", "spark-role": "driver",
                   "kueue.x-k8s.io/podset": "driver", QUEUE: "lq"},
        "ownerReferences": [{"apiVersion": "sparkoperator.k8s.io/v1beta2",
                             "kind": "SparkApplication", "name": "pi", "uid": "u-1",
                             "controller": True}]},
        "spec": {"nodeName": "gpu-1", "containers": [{"name": "c"}]},
        "status": {"phase": "Running"}}
    ctx = FakeCtx({SPARK.key: SPARK.resource, WL: WORKLOADS, POD: PODS, NS: NAMESPACES,
                   RCT: WORKLOADS, LR: WORKLOADS},
                  {SPARK.key: [obj], WL: [wl], POD: [driver],
                   NS: [{"metadata": {"name": "ns", "labels": {}}}]})
    ctx.synced = True  # type: ignore[attr-defined]
    return ctx


def _executor(i: int, *, gpus: int = 1, podset: str = "executor",
              controller: dict[str, Any] | None = None) -> dict[str, Any]:
    """Executor ``i`` as the API server reviews its create: the application's labels (the
    queue name too), the driver its controller, asking ``gpus``."""
    labels = {**EXECUTOR_LABELS, QUEUE: "lq", "kueue.x-k8s.io/podset": podset}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": f"pi-exec-{i}", "namespace": "ns", "uid": f"ex-{i}", "labels": labels,
        "ownerReferences": [controller or DRIVER_REF]},
        "spec": {"containers": [{"name": "spark-kubernetes-executor", "image": "spark",
                                 "resources": {"requests": {"cpu": "1", "memory": "2Gi"},
                                               "limits": {"nvidia.com/gpu": str(gpus)}}}]}}


async def _create(ctx: FakeCtx, pod: dict[str, Any], *, strict: bool = False
                  ) -> tuple[bool, list[dict[str, Any]], str]:
    """The Pod webhooks' answer to the create of ``pod`` by Spark's driver: (allowed, the
    mutation's patch, the refusal's message), the patched pod validated."""
    lookup = StoreAdmissionLookup(ctx, default_registry())  # type: ignore[arg-type]
    application = make_app(admission=lookup,
                           jobs=JobsSettings(manage_jobs_without_queue_name=strict))
    sent = review("CREATE", pod, kind=POD_KIND_REF, user=SPARK_USER)
    mutated = answer(await post(application, "/mutate--v1-pod", sent), sent)
    patch = json.loads(base64.b64decode(mutated["patch"])) if mutated.get("patch") else []
    sent = review("CREATE", apply_patch(copy.deepcopy(pod), patch), kind=POD_KIND_REF,
                  user=SPARK_USER)
    validated = answer(await post(application, "/validate--v1-pod", sent), sent)
    return validated["allowed"], patch, str((validated.get("status") or {}).get("message"))


def _gated(patch: list[dict[str, Any]]) -> bool:
    return any(op["path"].startswith("/spec/schedulingGates") for op in patch)


async def test_an_admitted_applications_executor_is_its_own_under_the_default_setup() -> None:
    ctx = _ctx()
    allowed, patch, why = await _create(ctx, _executor(0))
    assert allowed, why
    assert not _gated(patch), patch


async def test_an_admitted_applications_executor_is_its_own_under_the_strict_setup() -> None:
    pod = _executor(0)
    del pod["metadata"]["labels"][QUEUE]
    allowed, patch, why = await _create(_ctx(), pod, strict=True)
    assert allowed, why
    assert not _gated(patch), patch


async def test_executors_beyond_the_admitted_count_per_driver_are_refused() -> None:
    """Admitted for 2 executors, 2 running under the driver: a third is refused; once one
    ends (Failed) its replacement is allowed."""
    ctx = _ctx()
    for i in range(2):
        allowed, _, why = await _create(ctx, _executor(i))
        assert allowed, why
        ctx.store(POD).put({**_executor(i), "status": {"phase": "Running"}})
    allowed, _, why = await _create(ctx, _executor(2))
    assert not allowed
    assert "podSet executor" in why and "2 pod(s)" in why, why
    done = copy.deepcopy(ctx.store(POD).get("ns/pi-exec-0"))
    done["status"] = {"phase": "Failed"}
    ctx.store(POD).put(done)
    allowed, _, why = await _create(ctx, _executor(3))
    assert allowed, why


async def test_an_executor_of_another_podset_or_bigger_is_refused() -> None:
    ctx = _ctx()
    allowed, _, why = await _create(ctx, _executor(0, podset="driver"))
    assert not allowed and "executor" in why, why
    allowed, _, why = await _create(ctx, _executor(0, gpus=4))
    assert not allowed and "nvidia.com/gpu: 4" in why, why


async def test_an_executor_asking_gpus_before_the_admission_is_refused() -> None:
    ctx = _ctx(admitted=False)
    allowed, patch, why = await _create(ctx, _executor(0))
    assert not _gated(patch)
    assert not allowed and "not admitted" in why, why


async def test_a_pod_made_by_another_pod_stays_a_plain_pod() -> None:
    """Made by a pod that is no queued application's driver (a tenant's bare pod; an
    executor, two hops from the application): gated as a Pod of its own, as before."""
    ctx = _ctx()
    bare = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "mine", "namespace": "ns", "uid": "mine-uid", "labels": {}},
        "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Running"}}
    ctx.store(POD).put(bare)
    ctx.store(POD).put({**_executor(0), "status": {"phase": "Running"}})
    for maker in (bare, ctx.store(POD).get("ns/pi-exec-0")):
        ref = {"apiVersion": "v1", "kind": "Pod", "name": maker["metadata"]["name"],
               "uid": maker["metadata"]["uid"], "controller": True}
        pod = _executor(5, controller=ref)
        assert made_by_queued_pod(ctx, default_registry(), pod) is None  # type: ignore[arg-type]
        allowed, patch, why = await _create(ctx, pod)
        assert allowed, why
        assert _gated(patch), f"made by {maker['metadata']['name']}: {patch}"


async def test_a_pod_naming_the_driver_by_a_stale_uid_stays_a_plain_pod() -> None:
    ctx = _ctx()
    pod = _executor(0, controller={**DRIVER_REF, "uid": "old-driver"})
    allowed, patch, why = await _create(ctx, pod)
    assert allowed, why
    assert _gated(patch), patch


def _extender(ctx: FakeCtx) -> StoreExtenderState:
    return StoreExtenderState(ctx, NodeStore("nvidia.com/gpu"),  # type: ignore[arg-type]
                              default_registry())


def test_the_extender_places_an_executor_on_its_applications_admission() -> None:
    """Not gated, an executor has no Workload of its own: the extender covers it with the
    application's, no bigger than a pod of the ``executor`` podSet."""
    ctx = _ctx()
    state = _extender(ctx)
    facts = pod_facts(_executor(0), "nvidia.com/gpu")
    assert state.pod_admitted(facts)
    assert state.withheld(facts) == ""
    bigger = pod_facts(_executor(0, gpus=4), "nvidia.com/gpu")
    assert "more than the 1" in state.withheld(bigger)
    assert not _extender(_ctx(admitted=False)).pod_admitted(facts)


def test_the_reconciler_deletes_executors_beyond_the_count_per_driver() -> None:
    """The backstop of the webhook's count (each replica's own): executors admitted for 2,
    4 Running under the driver; the 2 newest go. A pod the driver controls without the
    application's name label (not the application's, by ``pod_of``) is left alone."""
    obj = app(2)
    obj["spec"]["suspend"] = False
    wl = _admitted(SPARK.workload_object(obj), deleting=False)
    driver = _ctx().store(POD).get("ns/pi-driver")
    pods = [driver]
    for i, created in enumerate(("10:00:00", "10:00:01", "10:05:00", "10:05:01")):
        pod = {**_executor(i), "status": {"phase": "Running"}}
        pod["metadata"]["creationTimestamp"] = f"2026-12-07T{created}Z"
        pods.append(pod)
    stranger = {**_executor(9), "status": {"phase": "Running"}}
    del stranger["metadata"]["labels"]["sparkoperator.k8s.io/app-name"]
    pods.append(stranger)
    rec, ctx = _fd_reconciler(SPARK, "sparkoperator.k8s.io/sparkapplication",
                              {POD: pods, SPARK.key: [obj], WL: [wl]})
    assert asyncio.run(rec._delete_excess(SPARK, obj)) == 2
    assert sorted(w[2] for w in ctx.writes if w[:2] == ("delete", "pods")) == \
        ["pi-exec-2", "pi-exec-3"]

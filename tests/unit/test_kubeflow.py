"""Kubeflow's jobs as job kinds (issue 18; Kueue ``jobs/kubeflow`` and ``jobs/mpijob``): podSets
per replica type in Kueue's order, the Workload object, start/stop of each replica type's pod
template through ``spec.runPolicy.suspend``, finished and active pods, priority, the shared
webhook rules (``app.integrations.crdrules``) and their HTTP routes."""

from __future__ import annotations

import base64
import copy
import json
import logging
from typing import Any

import pytest

from app.integrations import BUILTIN_KINDS, CRD_RULES, default_registry
from app.integrations.batchjob.job import ORIGINAL_ANNOTATION
from app.integrations.crdrules import lever_op, read_lever
from app.integrations.kubeflow import MPIJOB
from app.integrations.kubeflow.kubeflow import JAXJOB, PYTORCHJOB, TFJOB
from app.integrations.podsets import InjectionConflict
from app.integrations.templated import Template
from app.integrations.webhook_toolkit import UnreadableObjectError, WebhookPolicy
from app.wire.fields import WorkloadSpecError
from app.wire.workload import workload_name_for_owner
from tests.unit.test_webhook import answer, make_app, post, review

QUEUE = "kueue.x-k8s.io/queue-name"
POLICY = WebhookPolicy(controller_usernames=frozenset({"system:serviceaccount:p:p"}))
A100 = ({"nvidia.com/gpu.product": "A100"},
        [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])


def replica(replicas: int | None, gpu: int = 1, **pod: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"template": {"spec": {"containers": [
        {"name": "pytorch", "resources": {"requests": {"nvidia.com/gpu": str(gpu)}}}], **pod}}}
    if replicas is not None:
        out["replicas"] = replicas
    return out


def job(field: str = "pytorchReplicaSpecs", kind: str = "PyTorchJob", queue: str = "lq",
        suspend: bool | None = True, **specs: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {field: specs}
    if suspend is not None:
        spec["runPolicy"] = {"suspend": suspend}
    return {"apiVersion": "kubeflow.org/v1", "kind": kind,
            "metadata": {"name": "ddp", "namespace": "ns", "uid": "u-1",
                         "creationTimestamp": "2026-12-01T06:00:00Z",
                         "labels": {QUEUE: queue} if queue else {}},
            "spec": spec}


def test_podsets_one_per_replica_type_in_kueues_order() -> None:
    # Written Worker first: the podSets follow Kueue's order (Master, Worker), not the map's.
    wl = PYTORCHJOB.desired(job(Worker=replica(3), Master=replica(None, gpu=0)))
    assert [(ps.name, ps.count) for ps in wl.pod_sets] == [("master", 1), ("worker", 3)]
    assert wl.pod_sets[1].requests == {"nvidia.com/gpu": 1}
    assert wl.queue_name == "lq"
    assert wl.name == workload_name_for_owner("PyTorchJob", "kubeflow.org", "ddp", "u-1")
    assert wl.name.startswith("pytorchjob-ddp-")
    tf = TFJOB.desired(job("tfReplicaSpecs", "TFJob", Evaluator=replica(1), Worker=replica(2),
                           PS=replica(1, gpu=0), Chief=replica(1)))
    assert [ps.name for ps in tf.pod_sets] == ["chief", "ps", "worker", "evaluator"]
    mpi = MPIJOB.desired(job("mpiReplicaSpecs", "MPIJob", Worker=replica(2),
                             Launcher=replica(1, gpu=0)))
    assert [(ps.name, ps.count) for ps in mpi.pod_sets] == [("launcher", 1), ("worker", 2)]
    assert [ps.name for ps in JAXJOB.desired(job("jaxReplicaSpecs", "JAXJob",
                                                 Worker=replica(4))).pod_sets] == ["worker"]


@pytest.mark.parametrize(("obj", "field", "why"), [
    (job(), "spec", "no pod template"),
    (job(Master=replica(1), Launcher=replica(1)), "spec.pytorchReplicaSpecs",
     "replica type(s) Launcher unknown: a PyTorchJob has Master, Worker"),
    (job(Worker=replica(-1)), "spec.pytorchReplicaSpecs.Worker.replicas", ">= 0"),
    (job(Worker={"replicas": 1}), "spec.pytorchReplicaSpecs.Worker.template", "required"),
    (job(Worker=replica(1), queue="Bad_Queue"), f"metadata.labels[{QUEUE}]", ""),
    ({"metadata": {"name": "x"}, "spec": {"pytorchReplicaSpecs": "x"}},
     "spec.pytorchReplicaSpecs", ""),
])
def test_unreadable_jobs_name_the_field(obj: dict[str, Any], field: str, why: str) -> None:
    with pytest.raises(WorkloadSpecError) as err:
        PYTORCHJOB.desired(obj)
    assert err.value.field == field
    assert why in str(err.value)


def test_workload_object_has_each_template_and_a_controller_reference() -> None:
    obj = job(Master=replica(1), Worker=replica(3))
    wl = PYTORCHJOB.workload_object(obj)
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("master", 1),
                                                                        ("worker", 3)]
    assert wl["spec"]["podSets"][1]["template"] == \
        obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    ref = wl["metadata"]["ownerReferences"][0]
    assert (ref["apiVersion"], ref["kind"], ref["name"], ref["controller"]) == (
        "kubeflow.org/v1", "PyTorchJob", "ddp", True)
    assert default_registry().owner_of(wl).kind is PYTORCHJOB  # type: ignore[union-attr]
    mpi_job = job("mpiReplicaSpecs", "MPIJob", Worker=replica(1))
    del mpi_job["apiVersion"]  # the object's own apiVersion wins; else the kind's
    mpi = MPIJOB.workload_object(mpi_job)
    assert mpi["metadata"]["ownerReferences"][0]["apiVersion"] == "kubeflow.org/v2beta1"


def test_priority_scheduling_policy_then_the_first_template_that_names_one() -> None:
    obj = job(Master=replica(1), Worker=replica(2, priorityClassName="high"))
    assert PYTORCHJOB.desired(obj, pod_priority_classes={"high": 7}).priority == 7
    obj["spec"]["runPolicy"]["schedulingPolicy"] = {"priorityClass": "low"}
    assert PYTORCHJOB.desired(obj, pod_priority_classes={"high": 7, "low": 1}).priority == 1
    with pytest.raises(WorkloadSpecError) as err:
        PYTORCHJOB.desired(obj, pod_priority_classes={"high": 7})
    assert err.value.field == "spec.runPolicy.schedulingPolicy.priorityClass"
    obj["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "wpc"
    assert PYTORCHJOB.desired(obj, priority_classes={"wpc": 3}).priority == 3


def test_start_injects_each_podsets_flavor_into_its_own_template_and_stop_restores() -> None:
    user_tol = [{"key": "team", "operator": "Exists"}]
    obj = job(Master=replica(1, gpu=0, nodeSelector={"zone": "a"}),
              Worker=replica(3, tolerations=user_tol))
    started = PYTORCHJOB.injected(obj, {"worker": A100, "master": ({"pool": "cpu"}, [])})
    assert started["spec"]["runPolicy"]["suspend"] is False
    master = started["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    worker = started["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    assert master["spec"]["nodeSelector"] == {"zone": "a", "pool": "cpu"}
    assert master["metadata"]["labels"] == {"kueue.x-k8s.io/podset": "master"}
    assert worker["spec"]["nodeSelector"] == A100[0]
    assert worker["spec"]["tolerations"] == user_tol + A100[1]
    assert PYTORCHJOB.is_started(started) and not PYTORCHJOB.is_suspended(started)
    assert PYTORCHJOB.injected(started, {"worker": A100, "master": ({"pool": "cpu"}, [])}) \
        == started
    stopped = PYTORCHJOB.restored(started)
    assert stopped["spec"]["runPolicy"]["suspend"] is True
    assert stopped["spec"]["pytorchReplicaSpecs"] == obj["spec"]["pytorchReplicaSpecs"]
    assert ORIGINAL_ANNOTATION not in stopped["metadata"].get("annotations", {})
    assert PYTORCHJOB.restored(stopped) == stopped
    # No runPolicy at all: start and stop create it.
    bare = job(suspend=None, Worker=replica(1))
    assert PYTORCHJOB.restored(bare)["spec"]["runPolicy"] == {"suspend": True}
    assert not PYTORCHJOB.is_suspended(bare)


def test_start_refuses_a_flavor_that_contradicts_the_users_node_selector() -> None:
    obj = job(Worker=replica(1, nodeSelector={"nvidia.com/gpu.product": "L4"}))
    with pytest.raises(InjectionConflict, match="contradicts"):
        PYTORCHJOB.injected(obj, {"worker": A100})


def test_finished_from_succeeded_or_failed_and_active_pods() -> None:
    obj = job(Worker=replica(1))
    assert PYTORCHJOB.finished(obj) == (False, "", "")
    obj["status"] = {"conditions": [{"type": "Running", "status": "False"},
                                    {"type": "Succeeded", "status": "True", "message": "done"}],
                     "replicaStatuses": {"Master": {"active": 1}, "Worker": {"active": 3},
                                         "Other": {}}}
    assert PYTORCHJOB.finished(obj) == (True, "Succeeded", "done")
    obj["status"]["conditions"] = [{"type": "Failed", "status": "True", "reason": "Backoff"}]
    assert PYTORCHJOB.finished(obj) == (True, "Failed", "Backoff")
    assert PYTORCHJOB.active_pods(obj) == 4


@pytest.mark.parametrize("kind", [PYTORCHJOB, TFJOB, JAXJOB, MPIJOB], ids=lambda k: k.key)
def test_pods_ready_is_the_operators_running_condition(kind: Any) -> None:
    """Kueue v0.17.1 ``KubeflowJob.PodsReady`` / ``MPIJob.PodsReady``: condition ``Running``
    True (replica counts alone do not say it)."""
    obj = {"status": {"replicaStatuses": {"Worker": {"active": 2}}}}
    assert kind.pods_ready(obj) is False
    obj["status"]["conditions"] = [{"type": "Created", "status": "True"},
                                   {"type": "Running", "status": "False", "reason": "Suspended"}]
    assert kind.pods_ready(obj) is False
    obj["status"]["conditions"][1] = {"type": "Running", "status": "True"}
    assert kind.pods_ready(obj) is True
    assert kind.pods_ready({}) is False


def test_template_field_names_list_indexes() -> None:
    t = Template("w", 1, ("spec", "workerGroupSpecs", 0, "template"), "w")
    assert t.field == "spec.workerGroupSpecs[0].template"


def test_every_operator_kind_is_registered_optional_with_its_webhook_rules() -> None:
    keys = {k.key for k in BUILTIN_KINDS}
    assert {"pytorchjob", "tfjob", "xgboostjob", "paddlejob", "jaxjob", "mpijob"} <= keys
    assert all(getattr(k, "optional", False) for k in BUILTIN_KINDS
               if k.api_group == "kubeflow.org")
    assert [r.mutate_path for r in CRD_RULES if r.kind in ("PyTorchJob", "MPIJob")] == [
        "/mutate-kubeflow-org-v1-pytorchjob", "/mutate-kubeflow-org-v2beta1-mpijob"]
    assert PYTORCHJOB.rules.validate_path == "/validate-kubeflow-org-v1-pytorchjob"


# ---------------------------------------------------------------------------------- webhook rules

RULES = PYTORCHJOB.rules


def test_lever_reads_and_patches_a_nested_suspend() -> None:
    path = ("spec", "runPolicy", "suspend")
    assert read_lever({}, path) is False
    assert read_lever({"spec": {"runPolicy": {"suspend": True}}}, path) is True
    with pytest.raises(UnreadableObjectError) as err:
        read_lever({"spec": {"runPolicy": "x"}}, path)
    assert err.value.field == "spec.runPolicy"
    with pytest.raises(UnreadableObjectError):
        read_lever({"spec": {"runPolicy": {"suspend": "yes"}}}, path)
    assert lever_op({}, path) == {"op": "add", "path": "/spec",
                                  "value": {"runPolicy": {"suspend": True}}}
    assert lever_op({"spec": {}}, path) == {"op": "add", "path": "/spec/runPolicy",
                                            "value": {"suspend": True}}
    assert lever_op({"spec": {"runPolicy": {"suspend": False}}}, path) == {
        "op": "add", "path": "/spec/runPolicy/suspend", "value": True}


def test_mutation_suspends_a_queued_job_on_create_only() -> None:
    assert RULES.mutate(job(suspend=None, Worker=replica(1)), "CREATE", POLICY) == [
        {"op": "add", "path": "/spec/runPolicy", "value": {"suspend": True}}]
    assert RULES.mutate(job(suspend=False, Worker=replica(1)), "CREATE", POLICY) == [
        {"op": "add", "path": "/spec/runPolicy/suspend", "value": True}]
    assert RULES.mutate(job(Worker=replica(1)), "CREATE", POLICY) == []
    assert RULES.mutate(job(queue="", suspend=False, Worker=replica(1)), "CREATE", POLICY) == []
    assert RULES.mutate(job(suspend=False, Worker=replica(1)), "UPDATE", POLICY) == []


def test_validation_queue_name_immutable_while_running() -> None:
    running = job(suspend=False, Worker=replica(1))
    moved = copy.deepcopy(running)
    moved["metadata"]["labels"][QUEUE] = "other"
    errors = RULES.validate(running, moved, "alice", POLICY)
    assert errors and errors[0].startswith(f"metadata.labels[{QUEUE}]: cannot change 'lq' to "
                                           "'other' while the PyTorchJob is not suspended")
    moved["spec"]["runPolicy"]["suspend"] = True
    assert RULES.validate(running, moved, "alice", POLICY) == []
    assert RULES.validate(None, job(suspend=False, Worker=replica(1)), "alice", POLICY)[0] \
        .startswith("spec.runPolicy.suspend: must be true")
    assert RULES.validate(None, job(suspend=False, Worker=replica(1)),
                          "system:serviceaccount:p:p", POLICY) == []
    assert RULES.validate(None, job(queue="", suspend=False, Worker=replica(1)), "alice",
                          POLICY) == []
    assert RULES.validate(None, job(Chief=replica(1)), "alice", POLICY) == [
        "spec.pytorchReplicaSpecs: replica type(s) Chief unknown: a PyTorchJob has Master, "
        "Worker"]
    assert "not a valid LocalQueue name" in RULES.validate(
        None, job(queue="Bad_Q", Worker=replica(1)), "alice", POLICY)[0]


PYTORCH_KIND = {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"}


async def test_routes_answer_reviews_and_refuse_malformed_objects_with_4xx() -> None:
    app = make_app()
    sent = review("CREATE", job(suspend=None, Worker=replica(1)), kind=PYTORCH_KIND)
    resp = answer(await post(app, "/mutate-kubeflow-org-v1-pytorchjob", sent), sent)
    assert json.loads(base64.b64decode(resp["patch"])) == [
        {"op": "add", "path": "/spec/runPolicy", "value": {"suspend": True}}]
    old = job(suspend=False, Worker=replica(1))
    new = copy.deepcopy(old)
    new["metadata"]["labels"][QUEUE] = "other"
    sent = review("UPDATE", new, old, kind=PYTORCH_KIND)
    resp = answer(await post(app, "/validate-kubeflow-org-v1-pytorchjob", sent), sent)
    assert resp["allowed"] is False and resp["status"]["code"] == 403
    sent = review("CREATE", {"metadata": {"labels": {QUEUE: "lq"}},
                             "spec": {"runPolicy": "oops"}}, kind=PYTORCH_KIND)
    resp = answer(await post(app, "/mutate-kubeflow-org-v1-pytorchjob", sent), sent)
    assert resp["allowed"] is False and 400 <= resp["status"]["code"] < 500
    assert "spec.runPolicy" in resp["status"]["message"]
    # Another kind sent to this path: allowed untouched (each path serves its own kind).
    sent = review("CREATE", job(suspend=None, Worker=replica(1)),
                  kind={"group": "kubeflow.org", "version": "v1", "kind": "TFJob"})
    resp = answer(await post(app, "/mutate-kubeflow-org-v1-pytorchjob", sent), sent)
    assert resp["allowed"] is True and "patch" not in resp


async def test_kinds_whose_crd_is_not_served_are_left_out(caplog: pytest.LogCaptureFixture
                                                          ) -> None:
    from app.controllers.manager import served_kinds
    from tests.recording_client import RecordingClient

    with caplog.at_level(logging.INFO, logger="app.controllers.manager"):
        kept = await served_kinds(RecordingClient(), default_registry())
    assert not {"pytorchjob", "mpijob"} & {k.key for k in kept.kinds()}
    assert "pytorchjobs kubeflow.org/v1 not served" in caplog.text

"""TrainJob (Kubeflow Trainer v2) as a job kind: podSets from the child JobSet the trainer would
build from the referenced runtime (numNodes, resourcesPerNode, steps' replicas), the Workload,
the start through Kueue's runtime patch keeping the runtime's own tolerations (kueue#15162),
the stop, finished, the webhook's suspend and the JobSet's Jobs as the TrainJob's children."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.integrations import default_registry, framework_of
from app.integrations.framework import child_share, child_sized_by
from app.integrations.podsets import InjectionConflict
from app.integrations.trainjob.trainjob import (
    CHILD_FIELD,
    KIND,
    KUEUE_MANAGER,
    child_jobset,
    kueue_patch,
    runtime_ref,
    trainjob_pods_ready,
)
from app.integrations.webhook_toolkit import WebhookPolicy
from app.wire.fields import WorkloadSpecError
from app.wire.names import ORIGINAL_ANNOTATION

QUEUE = "kueue.x-k8s.io/queue-name"
POLICY = WebhookPolicy(controller_usernames=frozenset({"system:serviceaccount:p:p"}))
RUNTIME_TOLERATION = {"key": "team", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
FLAVOR = ({"gpu": "a100"}, [{"key": "nvidia.com/gpu", "operator": "Exists",
                             "effect": "NoSchedule"}])


def runtime(num_nodes: int | None = 1, *, init: bool = False) -> dict[str, Any]:
    node = {"name": "node", "metadata": {"labels": {
        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
        "spec": {"template": {"spec": {
            "tolerations": [RUNTIME_TOLERATION],
            "containers": [{"name": "node", "image": "busybox",
                            "resources": {"requests": {"cpu": "1"}}}]}}}}
    rjobs = []
    if init:
        rjobs.append({"name": "dataset-initializer", "replicas": 3, "template": {
            "metadata": {"labels": {
                "trainer.kubeflow.org/trainjob-ancestor-step": "dataset-initializer"}},
            "spec": {"template": {"spec": {"containers": [
                {"name": "dataset-initializer", "image": "busybox",
                 "resources": {"requests": {"cpu": "2"}}}]}}}}})
    rjobs.append({"name": "node", "template": node})
    spec: dict[str, Any] = {"template": {"spec": {"replicatedJobs": rjobs}}}
    if num_nodes is not None:
        spec["mlPolicy"] = {"numNodes": num_nodes}
    return {"metadata": {"name": "rt"}, "spec": spec}


def trainjob(num_nodes: int | None = 2, gpus: int | None = 1, *, queue: str = "lq",
             suspend: bool | None = True) -> dict[str, Any]:
    trainer: dict[str, Any] = {}
    if num_nodes is not None:
        trainer["numNodes"] = num_nodes
    if gpus is not None:
        trainer["resourcesPerNode"] = {"requests": {"nvidia.com/gpu": str(gpus)},
                                       "limits": {"nvidia.com/gpu": str(gpus)}}
    spec: dict[str, Any] = {"runtimeRef": {"name": "rt"}, "trainer": trainer}
    if suspend is not None:
        spec["suspend"] = suspend
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "tj", "namespace": "ns", "uid": "u-1",
                         "creationTimestamp": "2026-12-01T06:00:00Z",
                         "labels": {QUEUE: queue} if queue else {}},
            "spec": spec}


def composed(tj: dict[str, Any], rt: dict[str, Any] | None = None) -> dict[str, Any]:
    return {**tj, CHILD_FIELD: child_jobset(tj, rt or runtime())}


def test_podsets_come_from_the_runtime_with_num_nodes_and_resources_per_node() -> None:
    wl = KIND.desired(composed(trainjob(num_nodes=2, gpus=1)))
    assert wl.queue_name == "lq"
    assert [(ps.name, ps.count) for ps in wl.pod_sets] == [("node", 2)]
    # resourcesPerNode replaces the node container's requests (the runtime's cpu is gone).
    assert wl.pod_sets[0].requests == {"nvidia.com/gpu": 1}


def test_num_nodes_defaults_to_the_runtime_ml_policy_then_one() -> None:
    assert KIND.desired(composed(trainjob(num_nodes=None), runtime(3))).pod_sets[0].count == 3
    assert KIND.desired(composed(trainjob(num_nodes=None), runtime(None))).pod_sets[0].count == 1


def test_steps_run_one_replica_each_in_runtime_order() -> None:
    wl = KIND.desired(composed(trainjob(num_nodes=4), runtime(init=True)))
    assert [(ps.name, ps.count) for ps in wl.pod_sets] == [("dataset-initializer", 1),
                                                          ("node", 4)]


def test_workload_object_names_the_trainjob_and_carries_the_runtime_template() -> None:
    body = KIND.workload_object(composed(trainjob()))
    assert body["metadata"]["name"].startswith("trainjob-tj-")
    ps = body["spec"]["podSets"][0]
    assert ps["count"] == 2
    assert ps["template"]["spec"]["tolerations"] == [RUNTIME_TOLERATION]
    assert CHILD_FIELD not in str(body["metadata"])


def test_missing_runtime_or_bad_reference_is_a_spec_error() -> None:
    with pytest.raises(WorkloadSpecError, match="spec.runtimeRef.*not found"):
        KIND.desired(trainjob())
    bad = trainjob()
    bad["spec"]["runtimeRef"]["kind"] = "Deployment"
    with pytest.raises(WorkloadSpecError, match="spec.runtimeRef"):
        runtime_ref(bad)
    assert runtime_ref(trainjob()) == ("ClusterTrainingRuntime", "rt")
    assert KIND.spec_errors(trainjob()) == []  # the runtime may come after the TrainJob


def test_start_writes_kueue_patch_keeping_the_runtime_toleration() -> None:
    obj = composed(trainjob())
    out = KIND.injected(obj, {"node": FLAVOR})
    assert out["spec"]["suspend"] is False
    assert CHILD_FIELD not in out
    assert ORIGINAL_ANNOTATION in out["metadata"]["annotations"]
    patch = kueue_patch(out)
    assert patch is not None and patch["manager"] == KUEUE_MANAGER
    [rj] = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert rj["name"] == "node"
    pod = rj["template"]["spec"]["template"]
    assert pod["metadata"]["labels"] == {"kueue.x-k8s.io/podset": "node"}
    assert pod["spec"]["nodeSelector"] == {"gpu": "a100"}
    # The trainer replaces the runtime's tolerations with the patch's: both must be there.
    assert pod["spec"]["tolerations"] == [RUNTIME_TOLERATION, *FLAVOR[1]]


def test_start_keeps_other_managers_patches_and_replaces_its_own() -> None:
    tj = trainjob()
    other = {"manager": "example.com/tool", "trainingRuntimeSpec": {}}
    tj["spec"]["runtimePatches"] = [other, {"manager": KUEUE_MANAGER, "trainingRuntimeSpec": {}}]
    out = KIND.injected(composed(tj), {"node": FLAVOR})
    assert [p["manager"] for p in out["spec"]["runtimePatches"]] == ["example.com/tool",
                                                                     KUEUE_MANAGER]


def test_flavor_contradicting_the_runtime_node_selector_cannot_start() -> None:
    rt = runtime()
    rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
        "spec"]["nodeSelector"] = {"gpu": "h100"}
    with pytest.raises(InjectionConflict):
        KIND.injected(composed(trainjob(), rt), {"node": FLAVOR})


def test_stop_suspends_and_drops_the_start_record() -> None:
    started = {**KIND.injected(composed(trainjob()), {"node": FLAVOR})}
    out = KIND.restored({**started, CHILD_FIELD: {}})
    assert out["spec"]["suspend"] is True
    assert not KIND.is_started(out)
    assert CHILD_FIELD not in out
    assert KIND.is_started(started) and not KIND.is_suspended(started)


def test_finished_active_and_ready_from_status() -> None:
    tj = trainjob()
    tj["status"] = {"conditions": [{"type": "Complete", "status": "True", "message": "done"}],
                    "jobsStatus": [{"name": "node", "active": 1, "ready": 1}]}
    assert KIND.finished(tj) == (True, "Succeeded", "done")
    assert KIND.active_pods(tj) == 1
    assert trainjob_pods_ready(tj)
    tj["status"] = {"conditions": [{"type": "Failed", "status": "True", "reason": "X"}]}
    assert KIND.finished(tj)[:2] == (True, "Failed")
    assert not trainjob_pods_ready(tj)


def test_jobs_of_the_trainer_jobset_are_the_trainjob_children() -> None:
    parent = composed(trainjob(num_nodes=2))
    assert KIND.child_jobs(parent) == {"tj-node-0": 2}

    def job(name: str, kind: str, owner: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "ownerReferences": [
            {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": kind, "name": owner,
             "uid": "js-uid", "controller": True}]}}

    assert child_share(KIND, parent, job("tj-node-0", "JobSet", "tj")) == 2
    assert child_share(KIND, parent, job("tj-node-0", "JobSet", "other")) == 0
    assert child_share(KIND, parent, job("tj-node-0", "Other", "tj")) == 0
    # The pods of tj-node-0 were admitted as the runtime's node template with
    # resourcesPerNode (brk32 H1/H3: what the extender and the Job rules hold them to).
    sized = child_sized_by(KIND, parent, job("tj-node-0", "JobSet", "tj"))
    node = next(c for c in sized["spec"]["containers"] if c["name"] == "node")
    assert node["resources"]["requests"] == {"nvidia.com/gpu": "1"}
    assert child_sized_by(KIND, parent, job("tj-node-1", "JobSet", "tj")) is None
    assert child_sized_by(KIND, parent, job("tj-node-0", "JobSet", "other")) is None


def test_webhook_suspends_a_queued_trainjob() -> None:
    tj = trainjob(suspend=False)
    ops = KIND.rules.mutate(tj, "CREATE", POLICY)
    assert {"op": "replace", "path": "/spec/suspend", "value": True} in ops \
        or {"op": "add", "path": "/spec/suspend", "value": True} in ops
    assert KIND.rules.validate(None, copy.deepcopy(tj), "someone", POLICY)


def test_registered_under_kueue_framework_name() -> None:
    kind = default_registry().get("trainjob")
    assert kind is KIND
    assert framework_of(KIND) == "trainer.kubeflow.org/trainjob"
    assert [r.path for r in KIND.rules.routes()] == [
        "/mutate-trainer-kubeflow-org-v1alpha1-trainjob",
        "/validate-trainer-kubeflow-org-v1alpha1-trainjob"]

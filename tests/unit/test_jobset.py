"""JobSet as a job kind (issue 18 on the job framework): podSets per replicatedJob, the Workload
object, start/stop of each replicatedJob's pod template, finished, the webhook rules and their
HTTP routes, and the optional-kind rule (a kind whose CRD is not served is left out)."""

from __future__ import annotations

import base64
import copy
import json
import logging
from typing import Any

import pytest

from app.integrations import default_registry
from app.integrations.batchjob.job import ORIGINAL_ANNOTATION
from app.integrations.jobset.jobset import (
    KIND,
    active_jobs,
    injected_jobset,
    jobset_finished,
    restored_jobset,
    workload_from_jobset,
    workload_object_for_jobset,
)
from app.integrations.jobset.webhook_rules import mutate_jobset, validate_jobset
from app.integrations.podsets import InjectionConflict
from app.integrations.webhook_toolkit import WebhookPolicy
from app.wire.fields import WorkloadSpecError
from app.wire.workload import workload_name_for_owner
from tests.unit.test_webhook import answer, make_app, post, review

QUEUE = "kueue.x-k8s.io/queue-name"
POLICY = WebhookPolicy(controller_usernames=frozenset({"system:serviceaccount:p:p"}))
A100 = ({"nvidia.com/gpu.product": "A100"},
        [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])


def rjob(name: str, replicas: int | None, parallelism: int | None, completions: int | None = None,
         gpu: int = 1, **pod: Any) -> dict[str, Any]:
    job: dict[str, Any] = {"template": {"spec": {"containers": [
        {"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpu)}}}], **pod}}}
    if parallelism is not None:
        job["parallelism"] = parallelism
    if completions is not None:
        job["completions"] = completions
    out: dict[str, Any] = {"name": name, "template": {"spec": job}}
    if replicas is not None:
        out["replicas"] = replicas
    return out


def jobset(*rjobs: dict[str, Any], queue: str = "lq", suspend: bool | None = True,
           **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "train", "namespace": "ns", "uid": "u-1",
                            "creationTimestamp": "2026-12-01T06:00:00Z",
                            "labels": {QUEUE: queue, **labels} if queue else dict(labels)}
    spec: dict[str, Any] = {"replicatedJobs": list(rjobs)}
    if suspend is not None:
        spec["suspend"] = suspend
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta,
            "spec": spec}


def test_podsets_one_per_replicated_job_counting_replicas_times_pods_per_job() -> None:
    js = jobset(rjob("Driver", None, None, gpu=0), rjob("workers", 2, 4, completions=3))
    wl = workload_from_jobset(js)
    assert [(ps.name, ps.count) for ps in wl.pod_sets] == [("driver", 1), ("workers", 6)]
    assert wl.pod_sets[1].requests == {"nvidia.com/gpu": 1}
    assert wl.queue_name == "lq"
    assert wl.name == workload_name_for_owner("JobSet", "jobset.x-k8s.io", "train", "u-1")
    assert wl.name.startswith("jobset-train-")


@pytest.mark.parametrize(("js", "field"), [
    (jobset(), "spec.replicatedJobs"),
    (jobset(*[rjob(f"r{i}", 1, 1) for i in range(9)]), "spec.replicatedJobs"),
    (jobset(rjob("a", -1, 1)), "spec.replicatedJobs[0].replicas"),
    (jobset(rjob("a", 1, 1), rjob("b", 1, "x")),  # type: ignore[arg-type]
     "spec.replicatedJobs[1].template.spec.parallelism"),
    (jobset(rjob("", 1, 1)), "spec.replicatedJobs[0].name"),
    (jobset(rjob("a", 1, 1), queue="Bad_Queue"), f"metadata.labels[{QUEUE}]"),
])
def test_unreadable_jobsets_name_the_field(js: dict[str, Any], field: str) -> None:
    with pytest.raises(WorkloadSpecError) as err:
        workload_from_jobset(js)
    assert err.value.field == field


def test_workload_object_has_each_template_and_a_controller_reference() -> None:
    js = jobset(rjob("driver", 1, 1, gpu=0), rjob("workers", 2, 2),
                **{"kueue.x-k8s.io/max-exec-time-seconds": "600"})
    wl = workload_object_for_jobset(js)
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("driver", 1),
                                                                        ("workers", 4)]
    assert wl["spec"]["podSets"][1]["template"] == js["spec"]["replicatedJobs"][1]["template"][
        "spec"]["template"]
    assert wl["spec"]["maximumExecutionTimeSeconds"] == 600
    ref = wl["metadata"]["ownerReferences"][0]
    assert (ref["apiVersion"], ref["kind"], ref["name"], ref["uid"], ref["controller"]) == (
        "jobset.x-k8s.io/v1alpha2", "JobSet", "train", "u-1", True)
    assert default_registry().owner_of(wl).kind is KIND  # type: ignore[union-attr]


def test_priority_from_the_label_else_the_first_template() -> None:
    js = jobset(rjob("a", 1, 1, priorityClassName="high"), rjob("b", 1, 1))
    assert workload_from_jobset(js, pod_priority_classes={"high": 7}).priority == 7
    js["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "wpc"
    assert workload_from_jobset(js, priority_classes={"wpc": 3},
                                pod_priority_classes={"high": 7}).priority == 3


def test_start_injects_each_podsets_flavor_into_its_own_template_and_stop_restores() -> None:
    user_tol = [{"key": "team", "operator": "Exists"}]
    js = jobset(rjob("driver", 1, 1, gpu=0, nodeSelector={"zone": "a"}),
                rjob("workers", 2, 2, tolerations=user_tol))
    started = injected_jobset(js, {"workers": A100, "driver": ({"pool": "cpu"}, [])})
    assert started["spec"]["suspend"] is False
    driver, workers = (rj["template"]["spec"]["template"]
                       for rj in started["spec"]["replicatedJobs"])
    assert driver["spec"]["nodeSelector"] == {"zone": "a", "pool": "cpu"}
    assert driver["metadata"]["labels"] == {"kueue.x-k8s.io/podset": "driver"}
    assert workers["spec"]["nodeSelector"] == A100[0]
    assert workers["spec"]["tolerations"] == user_tol + A100[1]
    assert KIND.is_started(started) and not KIND.is_suspended(started)
    assert injected_jobset(started, {"workers": A100, "driver": ({"pool": "cpu"}, [])}) == started
    stopped = restored_jobset(started)
    assert stopped["spec"]["suspend"] is True
    assert stopped["spec"]["replicatedJobs"] == js["spec"]["replicatedJobs"]
    assert ORIGINAL_ANNOTATION not in stopped["metadata"].get("annotations", {})
    assert restored_jobset(stopped) == stopped


def test_start_refuses_a_flavor_that_contradicts_the_users_node_selector() -> None:
    js = jobset(rjob("workers", 1, 1, nodeSelector={"nvidia.com/gpu.product": "L4"}))
    with pytest.raises(InjectionConflict, match="contradicts"):
        injected_jobset(js, {"workers": A100})


def test_finished_from_completed_or_failed_and_active_jobs() -> None:
    js = jobset(rjob("a", 1, 1))
    assert jobset_finished(js) == (False, "", "")
    js["status"] = {"conditions": [{"type": "Completed", "status": "True", "message": "done"}],
                    "replicatedJobsStatus": [{"name": "a", "active": 0}]}
    assert jobset_finished(js) == (True, "Succeeded", "done")
    js["status"]["conditions"] = [{"type": "Failed", "status": "True", "reason": "FailedJobs"}]
    assert jobset_finished(js) == (True, "Failed", "FailedJobs")
    js["status"]["replicatedJobsStatus"] = [{"name": "a", "active": 2}, {"name": "b"}]
    assert active_jobs(js) == 2


# ---------------------------------------------------------------------------------- webhook rules


def test_mutation_suspends_a_queued_jobset_on_create_only() -> None:
    assert mutate_jobset(jobset(rjob("a", 1, 1), suspend=None), "CREATE", POLICY) == [
        {"op": "add", "path": "/spec/suspend", "value": True}]
    assert mutate_jobset(jobset(rjob("a", 1, 1), suspend=False), "CREATE", POLICY) == [
        {"op": "add", "path": "/spec/suspend", "value": True}]
    assert mutate_jobset(jobset(rjob("a", 1, 1)), "CREATE", POLICY) == []
    assert mutate_jobset(jobset(rjob("a", 1, 1), queue="", suspend=False), "CREATE",
                         POLICY) == []
    assert mutate_jobset(jobset(rjob("a", 1, 1), suspend=False), "UPDATE", POLICY) == []


def test_validation_queue_name_immutable_while_running() -> None:
    running = jobset(rjob("a", 1, 1), suspend=False)
    moved = copy.deepcopy(running)
    moved["metadata"]["labels"][QUEUE] = "other"
    errors = validate_jobset(running, moved, "alice", POLICY)
    assert errors and errors[0].startswith(f"metadata.labels[{QUEUE}]: cannot change 'lq' to "
                                           "'other' while the JobSet is not suspended")
    moved["spec"]["suspend"] = True
    assert validate_jobset(running, moved, "alice", POLICY) == []
    assert validate_jobset(None, jobset(rjob("a", 1, 1), suspend=False), "alice", POLICY)[0] \
        .startswith("spec.suspend: must be true")
    assert validate_jobset(None, jobset(rjob("a", 1, 1), suspend=False),
                           "system:serviceaccount:p:p", POLICY) == []
    nine = jobset(*[rjob(f"r{i}", 1, 1) for i in range(9)])
    assert validate_jobset(None, nine, "alice", POLICY) == [
        "spec.replicatedJobs: 9 replicatedJobs; a queued JobSet may have at most 8 (one "
        "Workload podSet each)"]
    assert "not a valid LocalQueue name" in validate_jobset(
        None, jobset(rjob("a", 1, 1), queue="Bad_Q"), "alice", POLICY)[0]


JOBSET_KIND = {"group": "jobset.x-k8s.io", "version": "v1alpha2", "kind": "JobSet"}


async def test_routes_answer_reviews_and_refuse_malformed_objects_with_4xx() -> None:
    app = make_app()
    sent = review("CREATE", jobset(rjob("a", 1, 1), suspend=None), kind=JOBSET_KIND)
    resp = answer(await post(app, "/mutate-jobset-x-k8s-io-v1alpha2-jobset", sent), sent)
    assert json.loads(base64.b64decode(resp["patch"])) == [
        {"op": "add", "path": "/spec/suspend", "value": True}]
    old = jobset(rjob("a", 1, 1), suspend=False)
    new = copy.deepcopy(old)
    new["metadata"]["labels"][QUEUE] = "other"
    sent = review("UPDATE", new, old, kind=JOBSET_KIND)
    resp = answer(await post(app, "/validate-jobset-x-k8s-io-v1alpha2-jobset", sent), sent)
    assert resp["allowed"] is False and resp["status"]["code"] == 403
    sent = review("CREATE", {"metadata": {"labels": "oops"}, "spec": {}}, kind=JOBSET_KIND)
    resp = answer(await post(app, "/mutate-jobset-x-k8s-io-v1alpha2-jobset", sent), sent)
    assert resp["allowed"] is False and 400 <= resp["status"]["code"] < 500
    assert "metadata.labels" in resp["status"]["message"]


async def test_a_kind_whose_crd_is_not_served_is_left_out(caplog: pytest.LogCaptureFixture
                                                         ) -> None:
    from app.controllers.manager import served_kinds
    from tests.recording_client import RecordingClient

    with caplog.at_level(logging.INFO, logger="app.controllers.manager"):
        kept = await served_kinds(RecordingClient(), default_registry())
    assert "jobset" not in [k.key for k in kept.kinds()]
    assert "job" in [k.key for k in kept.kinds()]
    assert any("jobsets jobset.x-k8s.io/v1alpha2 not served" in r.message for r in caplog.records)


@pytest.mark.parametrize("ann", ["not json", "[1]", '{"workers": 5}', '{"workers": "{"}',
                                 '{"workers": "{\\"tolerations\\": 5}"}'])
def test_stop_suspends_whatever_the_tenant_wrote_into_the_start_record(ann: str) -> None:
    """The record is on the tenant's JobSet: an unreadable one is dropped unapplied, never an
    exception (which would leave an evicted or expired JobSet running)."""
    js = jobset(rjob("workers", 2, 4), suspend=False)
    js["metadata"]["annotations"] = {ORIGINAL_ANNOTATION: ann}
    stopped = restored_jobset(js)
    assert stopped["spec"]["suspend"] is True
    assert ORIGINAL_ANNOTATION not in (stopped["metadata"].get("annotations") or {})
    assert stopped["spec"]["replicatedJobs"] == js["spec"]["replicatedJobs"]

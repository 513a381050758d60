"""The pods of an AppWrapper's batch Job and JobSet components must be the components' (brk30b
H2, H3): a Job (its component's, or a Job of its JobSet component) created or resumed by
anyone but pykueue with pods asking other than its template's are refused (the Job webhook,
``child_job_template``); so is a JobSet created or resumed under the AppWrapper whose
replicatedJobs are not its JobSet component's (the JobSet webhook, ``child_object_errors``).
What the AppWrapper controller and the JobSet operator create from the components (labels,
nodeSelector, tolerations added; the same requests however written) is allowed."""

from __future__ import annotations

import copy
from typing import Any

from app.integrations.appwrapper.appwrapper import KIND
from tests.unit.test_appwrapper import aw, job
from tests.unit.test_appwrapper_wrapped import lookup
from tests.unit.test_brk30b_findings import (
    APPWRAPPER_CONTROLLER,
    DEPLOYED,
    JOBSET_CONTROLLER,
    _as_created,
    _job_review,
    _jobset,
    _jobset_review,
    _jobsets_job,
)
from tests.unit.test_webhook import CONTROLLER, make_app, post, review


def _running(obj: dict[str, Any], name: str, kind: str, api: str) -> dict[str, Any]:
    """``obj`` admitted and running, component 0 deployed as ``name``."""
    out = copy.deepcopy(obj)
    out["spec"]["suspend"] = False
    out["status"] = {"phase": "Running", "componentStatus": [
        {"name": name, "kind": kind, "apiVersion": api, "conditions": copy.deepcopy(DEPLOYED)}]}
    return out


def _with_gpus(obj: dict[str, Any], gpus: str) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"nvidia.com/gpu": gpus}}
    return out


def _app(*appwrappers: dict[str, Any]) -> Any:
    return make_app(admission=lookup(*appwrappers))


def _job_component() -> tuple[dict[str, Any], dict[str, Any]]:
    """AppWrapper t/aw wrapping Job ``j`` (1 pod asking 1 GPU), running; the Job as its
    controller creates it: labels, ownerReference, the flavor's nodeSelector and
    tolerations, and the GPU request written as a limit only (the same request)."""
    template = _with_gpus(job("j", 1), "1")
    running = _running(aw(template), "j", "Job", "batch/v1")
    made = _as_created(template, "t", "aw", "u1")
    pod = made["spec"]["template"]
    pod.setdefault("metadata", {})["labels"] = {"kueue.x-k8s.io/podset": "aw-0"}
    pod["spec"]["nodeSelector"] = {"gpu": "a100"}
    pod["spec"]["tolerations"] = [{"key": "gpu", "operator": "Exists"}]
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    return running, made


async def test_the_controllers_job_component_is_allowed() -> None:
    running, made = _job_component()
    out = await _job_review(_app(running), "CREATE", made, user=APPWRAPPER_CONTROLLER)
    assert out["allowed"], out


async def test_a_job_of_the_components_name_asking_more_is_refused_at_create() -> None:
    running, made = _job_component()
    for app_aw in (running, aw(_with_gpus(job("j", 1), "1"))):  # running, or still queued
        out = await _job_review(_app(app_aw), "CREATE", _with_gpus(made, "8"))
        assert not out["allowed"]
        msg = out["status"]["message"]
        assert "spec.template" in msg and "AppWrapper 'aw'" in msg \
            and "'nvidia.com/gpu': 8" in msg and "'nvidia.com/gpu': 1" in msg, msg


async def test_a_suspended_job_asking_more_is_refused_when_resumed_not_when_relabelled() -> None:
    """A Job made before this rule (or by pykueue itself) that asks more: its resume by the
    tenant is refused; an update that leaves it suspended is not checked (its finalizers and
    labels stay editable), and pykueue's own writes pass."""
    running, made = _job_component()
    big = _with_gpus(made, "8")
    big["spec"]["suspend"] = True
    relabelled = copy.deepcopy(big)
    relabelled["metadata"]["labels"]["team"] = "a"
    app = _app(running)
    assert (await _job_review(app, "UPDATE", relabelled, big))["allowed"]
    resumed = copy.deepcopy(big)
    resumed["spec"]["suspend"] = False
    out = await _job_review(app, "UPDATE", resumed, big)
    assert not out["allowed"] and "spec.template" in out["status"]["message"]
    assert (await _job_review(app, "UPDATE", resumed, big, user=CONTROLLER))["allowed"]


async def test_a_job_that_is_no_component_is_left_to_the_share_rule() -> None:
    """A Job under the AppWrapper named as no component has no share (its parallelism is
    held to 0 by the child-Job rule): no template to compare, the create passes here."""
    running, made = _job_component()
    other = _with_gpus(made, "8")
    other["metadata"]["name"] = "other"
    assert (await _job_review(_app(running), "CREATE", other))["allowed"]


def _jobset_component() -> tuple[dict[str, Any], dict[str, Any]]:
    """AppWrapper t/aw wrapping JobSet ``js`` (replicatedJob ``w``: 1 Job of 1 pod asking 1
    GPU), running; the JobSet as its controller creates it (labels, ownerReference, a
    podSet label and nodeSelector on the pods; the operator's defaults written out)."""
    template = _jobset("js", "1", suspend=False)
    running = _running(aw(template), "js", "JobSet", "jobset.x-k8s.io/v1alpha2")
    made = _as_created(template, "t", "aw", "u1")
    made["metadata"]["uid"] = "uid-js"
    rj = made["spec"]["replicatedJobs"][0]
    rj["template"]["spec"]["completions"] = 1
    rj["template"]["spec"]["template"]["spec"]["nodeSelector"] = {"gpu": "a100"}
    return running, made


async def test_the_controllers_jobset_component_and_its_jobs_are_allowed() -> None:
    running, made = _jobset_component()
    app = _app(running)
    assert await _jobset_review(app, "CREATE", made)  # alice: the shape decides, not who
    js_job = _jobsets_job(made, "1")
    out = await _job_review(app, "CREATE", js_job, user=JOBSET_CONTROLLER)
    assert out["allowed"], out


async def test_a_jobset_of_the_components_name_running_more_is_refused() -> None:
    """Bigger pods, more Jobs, more pods a Job, another replicatedJob: each refused, at
    create and at resume; a JobSet named as no component is left alone (its Jobs have no
    share)."""
    running, made = _jobset_component()
    app = _app(running)
    bigger = copy.deepcopy(made)
    bigger["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": "8"}}
    more_jobs = copy.deepcopy(made)
    more_jobs["spec"]["replicatedJobs"][0]["replicas"] = 3
    more_pods = copy.deepcopy(made)
    more_pods["spec"]["replicatedJobs"][0]["template"]["spec"].update(parallelism=4,
                                                                      completions=4)
    renamed = copy.deepcopy(made)
    renamed["spec"]["replicatedJobs"][0]["name"] = "x"
    for evil in (bigger, more_jobs, more_pods, renamed):
        assert not await _jobset_review(app, "CREATE", evil)
        suspended = copy.deepcopy(evil)
        suspended["spec"]["suspend"] = True
        assert await _jobset_review(app, "UPDATE", _labelled(suspended), suspended)
        assert not await _jobset_review(app, "UPDATE", evil, suspended)
    elsewhere = copy.deepcopy(bigger)
    elsewhere["metadata"]["name"] = "not-a-component"
    assert await _jobset_review(app, "CREATE", elsewhere)


def _labelled(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["labels"]["team"] = "a"
    return out


async def test_the_refusal_names_the_field_and_both_shapes() -> None:
    running, made = _jobset_component()
    bigger = copy.deepcopy(made)
    bigger["spec"]["replicatedJobs"][0]["replicas"] = 2
    errors = KIND.child_object_errors(running, "JobSet", bigger)
    assert len(errors) == 1 and errors[0].startswith("spec.replicatedJobs: JobSet js is "
                                                     "controlled by AppWrapper t/aw")
    assert "{'w': (1, 1, {'nvidia.com/gpu': 1})}" in errors[0]
    assert "{'w': (2, 1, {'nvidia.com/gpu': 1})}" in errors[0]
    assert KIND.child_object_errors(running, "JobSet", made) == []
    assert KIND.child_object_errors(running, "RayCluster", bigger) == []


async def test_a_malformed_job_under_the_appwrapper_is_a_4xx_not_a_500() -> None:
    running, made = _job_component()
    made["spec"]["template"]["spec"]["containers"] = "nope"
    sent = review("CREATE", made, None, user="alice")
    sent["request"]["namespace"] = "t"
    resp = await post(_app(running), "/validate-batch-v1-job", sent)
    assert resp.status_code < 500

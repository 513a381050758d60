"""AppWrapper as a job kind: podSets per component (inferred as the AppWrapper library does, or
declared), the Workload, the start through podSetInfos and the stop clearing them, finished,
the webhook's suspend and immutable components, and the wrapped Jobs as its children."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.integrations import default_registry, framework_of
from app.integrations.appwrapper.appwrapper import KIND, infer_pod_sets, parse_path
from app.integrations.framework import child_share
from app.integrations.podsets import InjectionConflict
from app.integrations.webhook_toolkit import WebhookPolicy
from app.wire.fields import WorkloadSpecError
from app.wire.names import ORIGINAL_ANNOTATION

QUEUE = "kueue.x-k8s.io/queue-name"
POLICY = WebhookPolicy(controller_usernames=frozenset({"system:serviceaccount:p:p"}))
POD = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}}
FLAVOR = ({"gpu": "a100"}, [{"key": "pool", "operator": "Exists", "effect": "NoSchedule"}])


def job(name: str, parallelism: int, completions: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"parallelism": parallelism, "template": copy.deepcopy(POD)}
    if completions is not None:
        spec["completions"] = completions
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


def jobset(name: str) -> dict[str, Any]:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name},
            "spec": {"replicatedJobs": [{"name": "w", "replicas": 2, "template": {"spec": {
                "parallelism": 3, "template": copy.deepcopy(POD)}}}]}}


def aw(*templates: dict[str, Any], podsets: list | None = None) -> dict[str, Any]:
    comps = [{"template": t} for t in templates]
    if podsets is not None:
        comps[0]["podSets"] = podsets
    return {"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
            "metadata": {"name": "aw", "namespace": "t", "uid": "u1", "labels": {QUEUE: "lq"}},
            "spec": {"suspend": True, "components": comps}}


def test_registered_under_kueues_framework_name() -> None:
    assert framework_of(KIND) == "workload.codeflare.dev/appwrapper"
    assert default_registry().kind_for("workload.codeflare.dev", "AppWrapper") is KIND


def test_paths_parse_as_the_appwrapper_library_reads_them() -> None:
    assert parse_path("template.spec.replicatedJobs[1].template", "p") == (
        "spec", "replicatedJobs", 1, "template")
    assert parse_path("template", "p") == ()
    with pytest.raises(WorkloadSpecError, match="template"):
        parse_path("spec.template", "p")


def test_podsets_one_per_component_podset_named_after_the_appwrapper() -> None:
    obj = aw(job("j", 4, 2), jobset("js"))
    wl = KIND.workload_object(obj, priority_classes={}, pod_priority_classes={})
    assert wl["metadata"]["name"].startswith("appwrapper-aw-")
    # Job: min(parallelism, completions); JobSet: replicas x pods per Job.
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("aw-0", 2), ("aw-1", 6)]
    assert infer_pod_sets({"apiVersion": "ray.io/v1", "kind": "RayCluster", "spec": {
        "headGroupSpec": {"template": POD},
        "workerGroupSpecs": [{"replicas": 3, "template": POD}]}}) == [
        ("template.spec.headGroupSpec.template", 1),
        ("template.spec.workerGroupSpecs[0].template", 3)]


def test_declared_podsets_must_count_what_the_component_runs() -> None:
    ok = aw(job("j", 2), podsets=[{"path": "template.spec.template", "replicas": 2}])
    assert [t.count for t in KIND.templates(ok)] == [2]
    low = aw(job("j", 4), podsets=[{"path": "template.spec.template", "replicas": 1}])
    assert KIND.spec_errors(low) and "spec.components[0].podSets" in KIND.spec_errors(low)[0]
    assert KIND.rules.validate(None, {**low, "spec": {**low["spec"], "suspend": True}}, "u",
                               POLICY)


def test_start_writes_podset_infos_and_stop_clears_them() -> None:
    obj = aw(job("j", 2), jobset("js"))
    started = KIND.injected(obj, {"aw-0": FLAVOR})
    assert started["spec"]["suspend"] is False and KIND.is_started(started)
    assert started["metadata"]["annotations"] == {ORIGINAL_ANNOTATION: "{}"}
    comps = started["spec"]["components"]
    assert comps[0]["podSetInfos"] == [{"labels": {"kueue.x-k8s.io/podset": "aw-0"},
                                        "nodeSelector": {"gpu": "a100"},
                                        "tolerations": FLAVOR[1]}]
    assert comps[1]["podSetInfos"] == [{"labels": {"kueue.x-k8s.io/podset": "aw-1"}}]
    # The templates are the user's: the AppWrapper controller applies the infos.
    assert comps[0]["template"] == obj["spec"]["components"][0]["template"]
    assert KIND.restored(started) == obj
    own = aw(job("j", 2))
    own["spec"]["components"][0]["template"]["spec"]["template"]["spec"]["nodeSelector"] = {
        "gpu": "h100"}
    with pytest.raises(InjectionConflict):
        KIND.injected(own, {"aw-0": FLAVOR})


def test_finished_from_phase_and_resources_deployed() -> None:
    obj = aw(job("j", 1))
    assert KIND.finished({**obj, "status": {"phase": "Succeeded"}})[:2] == (True, "Succeeded")
    deploying = {"phase": "Failed", "conditions": [
        {"type": "ResourcesDeployed", "status": "True"}]}
    assert KIND.finished({**obj, "status": deploying})[0] is False
    assert KIND.finished({**obj, "status": {"phase": "Failed"}})[:2] == (True, "Failed")
    assert KIND.pods_ready({**obj, "status": {"conditions": [
        {"type": "PodsReady", "status": "True"}]}})


def test_webhook_suspends_and_keeps_components_immutable() -> None:
    obj = aw(job("j", 2))
    obj["spec"]["suspend"] = False
    assert KIND.rules.mutate(obj, "CREATE", POLICY) == [
        {"op": "add", "path": "/spec/suspend", "value": True}]
    grown = copy.deepcopy(obj)
    grown["spec"]["components"][0]["template"]["spec"]["parallelism"] = 4
    errors = KIND.rules.validate(obj, grown, "u", POLICY)
    assert errors and "immutable" in errors[0]
    # pykueue's own start (podSetInfos, suspend) changes no component.
    assert KIND.rules.validate(obj, KIND.injected(obj, {"aw-0": FLAVOR}),
                               "system:serviceaccount:p:p", POLICY) == []


def test_wrapped_jobs_run_their_podsets_share() -> None:
    obj = aw(job("j", 2, 4), jobset("js"))
    assert KIND.child_jobs(obj) == {"j": 2, "js-w-0": 3, "js-w-1": 3}

    def child(name: str, kind: str, owner: str, uid: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "ownerReferences": [
            {"kind": kind, "name": owner, "uid": uid, "controller": True}]}}

    assert child_share(KIND, obj, child("j", "AppWrapper", "aw", "u1")) == 2
    assert child_share(KIND, obj, child("js-w-1", "JobSet", "js", "js1")) == 3
    # A Job hung under another JobSet, or under the AppWrapper by another name: no share.
    assert child_share(KIND, obj, child("js-w-1", "JobSet", "other", "x")) == 0
    assert child_share(KIND, obj, child("extra", "AppWrapper", "aw", "u1")) == 0


def _generated(template: dict[str, Any], prefix: str) -> dict[str, Any]:
    template["metadata"] = {"generateName": prefix}
    return template


def test_a_generate_name_components_jobs_have_a_share_under_the_recorded_name_only() -> None:
    """A ``generateName`` Job or JobSet component's Jobs have a share under the name the
    controller recorded only (brk30b: while the controller's create of a component is
    retried, a phase the tenant can make last up to its own ``admissionGracePeriodDuration``,
    every prefixed Job hung under the AppWrapper took the whole share). So, as before 87ed464,
    the controller's Job has none until the name is recorded (a known gap). A Job's share
    follows its controller: a JobSet component's Job name under the AppWrapper itself is
    no Job component's (brk30 L)."""
    obj = aw(_generated(job("j", 2), "j-"), _generated(jobset("js"), "js-"))

    def child(name: str, kind: str, owner: str, uid: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "ownerReferences": [
            {"kind": kind, "name": owner, "uid": uid, "controller": True}]}}

    def status(state: str, phase: str = "Resuming") -> dict[str, Any]:
        cond = [{"type": "ResourcesDeployed", "status": state}]
        return {"phase": phase, "componentStatus": [{"name": "j-old", "conditions": cond},
                                                    {"name": "js-old", "conditions": cond}]}
    for st in ({}, {"phase": "Resuming"}, status("False"), status("Unknown"),
               status("False", "Resetting"), status("True", "Running")):
        shown = {**obj, "status": st}
        assert child_share(KIND, shown, child("j-k2n4p", "AppWrapper", "aw", "u1")) == 0, st
        assert child_share(KIND, shown, child("js-q8r2z-w-1", "JobSet", "js-q8r2z", "x")) == 0
        assert child_share(KIND, shown, child("js-old-w-1", "AppWrapper", "aw", "u1")) == 0
    deployed = {**obj, "status": status("True", "Running")}
    assert KIND.child_jobs(deployed) == {"j-old": 2, "js-old-w-0": 3, "js-old-w-1": 3}
    assert child_share(KIND, deployed, child("j-old", "AppWrapper", "aw", "u1")) == 2
    assert child_share(KIND, deployed, child("js-old-w-1", "JobSet", "js-old", "x")) == 3

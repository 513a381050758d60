"""The pods of an AppWrapper's batch Job and JobSet components must be the components' (brk30b
H2, H3; brk31 M1, M2): a Job (its component's, or a Job of its JobSet component) created or
resumed by anyone but pykueue with pods asking other than its template's, claiming other DRA
devices, or placed otherwise than the component under its admission (nodeSelector, affinity,
tolerations, nodeName: the component's with the admitted flavor's nodeSelector and
tolerations added) is refused (the Job webhook, ``child_job_template``); so is a JobSet
created or resumed under the AppWrapper whose replicatedJobs are not its JobSet component's
(the JobSet webhook, ``child_object_errors``). What the AppWrapper controller and the JobSet
operator create from the components (labels, the admission's nodeSelector and tolerations,
Autopilot's anti-affinities added; the same requests however written) is allowed."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

from app.config import Settings
from app.controllers.admission_lookup import StoreAdmissionLookup
from app.integrations import default_registry
from app.integrations.appwrapper.appwrapper import KIND
from app.integrations.jobset.jobset import KIND as JOBSET
from app.kube.client import JOBS
from app.kube.informers import Store
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

# The flavor ``aw``'s podSet ``aw-0`` is admitted on: its nodeLabels and toleration.
FLAVOR = ({"gpu": "a100"}, [{"key": "gpu", "operator": "Exists"}])


def _running(obj: dict[str, Any], name: str, kind: str, api: str) -> dict[str, Any]:
    """``obj`` admitted on ``FLAVOR`` (started by pykueue: its podSetInfos) and running,
    component 0 deployed as ``name``."""
    out = KIND.injected(obj, {"aw-0": FLAVOR})
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


def _stored_app(appwrapper: dict[str, Any], jobset: dict[str, Any]) -> Any:
    """``_app`` whose stores hold the AppWrapper's JobSet too (the unlabelled JobSet is in
    one where unlabelled JobSets are queued, or a TrainJob's store of every JobSet is
    watched): the Jobs of that JobSet then find the AppWrapper as their ancestor."""
    stores = {KIND.key: Store(JOBS), JOBSET.key: Store(JOBS)}
    stores[KIND.key].put(appwrapper)
    stores[JOBSET.key].put(jobset)
    ctx = SimpleNamespace(store=lambda k: stores.get(k) or Store(JOBS), synced=True,
                          settings=Settings(),
                          informers=SimpleNamespace(informers=dict.fromkeys(stores)))
    return make_app(admission=StoreAdmissionLookup(ctx, default_registry()))  # type: ignore[arg-type]


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
    pod["spec"]["tolerations"] = [{"key": "gpu", "operator": "Exists", "value": ""}]
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
    rj["template"]["spec"]["template"]["spec"].update(nodeSelector={"gpu": "a100"},
                                                      tolerations=[{"key": "gpu",
                                                                    "operator": "Exists"}])
    return running, made


async def test_the_controllers_jobset_component_and_its_jobs_are_allowed() -> None:
    running, made = _jobset_component()
    app = _app(running)
    assert await _jobset_review(app, "CREATE", made)  # alice: the shape decides, not who
    js_job = _jobsets_job(made, "1")
    for with_app in (app, _stored_app(running, made)):
        out = await _job_review(with_app, "CREATE", js_job, user=JOBSET_CONTROLLER)
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


def _placed(obj: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """Job ``obj`` with its pod template's spec fields ``spec`` set (None: removed)."""
    out = copy.deepcopy(obj)
    pod = out["spec"]["template"]["spec"]
    for key, value in spec.items():
        if value is None:
            pod.pop(key, None)
        else:
            pod[key] = value
    return out


async def test_a_job_of_the_components_name_runs_where_the_admission_placed_it() -> None:
    """brk31 M1: under the admitted AppWrapper (``FLAVOR``), the Job's nodeSelector,
    affinity, tolerations and nodeName must be the component's with the flavor's added:
    another flavor, a dropped or an extra nodeSelector entry, an added toleration, an
    affinity, a nodeName are each refused, naming the field; under the queued AppWrapper
    nothing may be added to the component's."""
    running, made = _job_component()
    app = _app(running)
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "gpu", "operator": "In", "values": ["t4"]}]}]}}}
    for field, evil in (
            ("nodeSelector", _placed(made, nodeSelector={"gpu": "t4"})),
            ("nodeSelector", _placed(made, nodeSelector=None)),
            ("nodeSelector", _placed(made, nodeSelector={"gpu": "a100", "zone": "b"})),
            ("tolerations", _placed(made, tolerations=[
                {"key": "gpu", "operator": "Exists"}, {"operator": "Exists"}])),
            ("affinity", _placed(made, affinity=affinity)),
            ("nodeName", _placed(made, nodeName="t4-0"))):
        out = await _job_review(app, "CREATE", evil)
        assert not out["allowed"], field
        assert out["status"]["message"].startswith(f"spec.template.spec.{field}: "), out
    # The same tolerations repeated (the controller appends the flavor's to the
    # component's, which may hold them already) pass; none is not the Job as made.
    assert (await _job_review(app, "CREATE", _placed(made, tolerations=[
        {"key": "gpu", "operator": "Exists"}] * 2)))["allowed"]
    assert not (await _job_review(app, "CREATE", _placed(made, tolerations=None)))["allowed"]
    queued = aw(_with_gpus(job("j", 1), "1"))
    bare = _placed(made, nodeSelector=None, tolerations=None)
    bare["spec"]["suspend"] = True
    assert (await _job_review(_app(queued), "CREATE", bare))["allowed"]
    assert not (await _job_review(_app(queued), "CREATE", _placed(
        bare, nodeSelector={"gpu": "a100"})))["allowed"]


async def test_the_components_own_placement_is_kept_and_the_flavors_added() -> None:
    """A component with a nodeSelector and tolerations of its own: the controller's Job
    (the flavor's nodeSelector merged under them, its tolerations appended) passes; one
    without the component's own entry is refused."""
    template = _with_gpus(job("j", 1), "1")
    template["spec"]["template"]["spec"].update(
        nodeSelector={"zone": "a"}, tolerations=[{"key": "spot", "operator": "Exists"}])
    running = _running(aw(template), "j", "Job", "batch/v1")
    _, made = _job_component()
    made = _placed(made, nodeSelector={"zone": "a", "gpu": "a100"}, tolerations=[
        {"key": "spot", "operator": "Exists"}, {"key": "gpu", "operator": "Exists"}])
    app = _app(running)
    out = await _job_review(app, "CREATE", made, user=APPWRAPPER_CONTROLLER)
    assert out["allowed"], out
    assert not (await _job_review(app, "CREATE", _placed(
        made, nodeSelector={"gpu": "a100"})))["allowed"]


async def test_a_jobset_of_the_components_name_runs_where_the_admission_placed_it() -> None:
    """brk31 M1 for a JobSet: a replicatedJob's pods on another flavor are refused at
    create and at resume, naming the replicatedJob's field."""
    running, made = _jobset_component()
    evil = copy.deepcopy(made)
    evil["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "nodeSelector"] = {"gpu": "t4"}
    app = _app(running)
    assert not await _jobset_review(app, "CREATE", evil)
    suspended = copy.deepcopy(evil)
    suspended["spec"]["suspend"] = True
    assert not await _jobset_review(app, "UPDATE", evil, suspended)
    errors = KIND.child_object_errors(running, "JobSet", evil)
    assert len(errors) == 1 and errors[0].startswith(
        "spec.replicatedJobs[0].template.spec.template.spec.nodeSelector: JobSet js is "
        "controlled by AppWrapper t/aw"), errors
    assert "{'gpu': 'a100'}" in errors[0] and "{'gpu': 't4'}" in errors[0]


async def test_a_jobset_placed_by_node_selector_gets_its_jobs_placement() -> None:
    """jobset v0.11.1's exclusive placement by nodeSelector (annotations on the JobSet)
    adds a nodeSelector of the Job's own name and the toleration of its taint to each Job:
    the operator's Job passes; the same nodeSelector without the annotations is refused."""
    running, made = _jobset_component()
    exclusive = {"alpha.jobset.sigs.k8s.io/exclusive-topology": "zone",
                 "alpha.jobset.sigs.k8s.io/node-selector": "true"}
    component = running["spec"]["components"][0]["template"]
    component["metadata"]["annotations"] = dict(exclusive)
    js_job = _jobsets_job(made, "1")
    js_job = _placed(js_job, nodeSelector={
        "gpu": "a100", "alpha.jobset.sigs.k8s.io/namespaced-job": "t_js-w-0"}, tolerations=[
        {"key": "gpu", "operator": "Exists"},
        {"key": "alpha.jobset.sigs.k8s.io/no-schedule", "operator": "Exists",
         "effect": "NoSchedule"}])
    out = await _job_review(_stored_app(running, made), "CREATE", js_job,
                            user=JOBSET_CONTROLLER)
    assert out["allowed"], out
    component["metadata"]["annotations"] = {}
    out = await _job_review(_stored_app(running, made), "CREATE", js_job,
                            user=JOBSET_CONTROLLER)
    assert not out["allowed"]
    assert out["status"]["message"].startswith("spec.template.spec.nodeSelector: "), out


async def test_a_job_of_the_components_name_claims_the_components_devices() -> None:
    """brk31 M2: the component's DRA claims (by ResourceClaimTemplate name) are the Job's;
    the same claims written with empty fields pass, another template or none is refused."""
    template = _with_gpus(job("j", 1), "1")
    pod = template["spec"]["template"]["spec"]
    pod["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    pod["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    running = _running(aw(template), "j", "Job", "batch/v1")
    _, made = _job_component()
    mine = _placed(made, resourceClaims=[
        {"name": "gpu", "resourceClaimTemplateName": "one-gpu", "resourceClaimName": None}])
    mine["spec"]["template"]["spec"]["containers"][0]["resources"]["claims"] = [
        {"name": "gpu", "request": ""}]
    app = _app(running)
    assert (await _job_review(app, "CREATE", mine, user=APPWRAPPER_CONTROLLER))["allowed"]
    other = _placed(mine, resourceClaims=[
        {"name": "gpu", "resourceClaimTemplateName": "eight-gpus"}])
    for evil in (other, _placed(mine, resourceClaims=None)):
        out = await _job_review(app, "CREATE", evil)
        assert not out["allowed"]
        assert out["status"]["message"].startswith("spec.template.spec.resourceClaims: "), out


def _autopilot(affinity: dict[str, Any] | None) -> dict[str, Any]:
    """``affinity`` as appwrapper v1.2.0's Autopilot (``injectAntiAffinities``, its default
    resource taints) leaves it on a pod asking a GPU: a ``NotIn`` expression appended to
    each required node term (one made when there is none) and a preferred term."""
    out = copy.deepcopy(affinity or {})
    node = out.setdefault("nodeAffinity", {})
    terms = node.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {}).setdefault(
        "nodeSelectorTerms", [{}])
    for term in terms:
        term.setdefault("matchExpressions", []).append(
            {"key": "autopilot.ibm.com/gpuhealth", "operator": "NotIn",
             "values": ["TESTING", "EVICT"]})
    node["preferredDuringSchedulingIgnoredDuringExecution"] = [{"weight": 1, "preference": {
        "matchExpressions": [{"key": "autopilot.ibm.com/gpuhealth", "operator": "NotIn",
                              "values": ["WARN"]}]}}]
    return out


async def test_the_controllers_autopilot_anti_affinity_passes_a_wider_affinity_not() -> None:
    """What only takes nodes away from the component's required node affinity (Autopilot's
    ``NotIn`` expressions; preferred terms, which only rank nodes) passes, with the
    component's affinity or without one; an ``In`` expression, or one more term (terms are
    ORed: more nodes), does not."""
    running, made = _job_component()
    app = _app(running)
    out = await _job_review(app, "CREATE", _placed(made, affinity=_autopilot(None)),
                            user=APPWRAPPER_CONTROLLER)
    assert out["allowed"], out
    own = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["a"]}]}]}}}
    template = _with_gpus(job("j", 1), "1")
    template["spec"]["template"]["spec"]["affinity"] = own
    app = _app(_running(aw(template), "j", "Job", "batch/v1"))
    assert (await _job_review(app, "CREATE", _placed(made, affinity=_autopilot(own))))[
        "allowed"]
    wider = _autopilot(own)
    terms = wider["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    more_terms = copy.deepcopy(wider)
    more_terms["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"].append({"matchExpressions": [
            {"key": "gpu", "operator": "In", "values": ["t4"]}]})
    terms[0]["matchExpressions"].append({"key": "gpu", "operator": "In", "values": ["t4"]})
    for evil in (wider, more_terms, None):
        out = await _job_review(app, "CREATE", _placed(made, affinity=evil))
        assert not out["allowed"]
        assert out["status"]["message"].startswith("spec.template.spec.affinity: "), out

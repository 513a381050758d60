"""brk30b: a breaker's findings against 7175cb8 (a ``generateName`` component's prefix names
it only while appwrapper v1.2.0 creates it, phase ``Resuming``), by reading
(project-codeflare/appwrapper v1.2.0 ``internal/controller/appwrapper``; no lab). Default
settings (``webhook.child_job_creators`` empty, Kueue's behaviour) unless a test says.
Closed since (tests): a Job or JobSet component's Jobs have a share under its recorded name
only (H1's Jobs, H3's prefixed JobSets); no phase is no creating (H1 ``managed-elsewhere``);
a Job with a share of the AppWrapper's admission runs only its component template's pods,
and a JobSet under it only its JobSet component's replicatedJobs (H2, H3's fixed-name
JobSet; tests/unit/test_appwrapper_child_templates.py).
Open (strict xfails, docs/security.md Known gaps): H1's Deployments while the component's
own create, which the tenant makes fail, is retried in ``Resuming`` (since session 36 not
pykueue's own refusal of a component's invalid queue-name label: the AppWrapper is refused
when queued; since session 37 not an earlier component's failing create:
``_earlier_create_failed``); L.

H1 (``names_component`` / ``_creating``): the tenant keeps a ``generateName`` component
uncreated, and so its prefix open, for as long as it likes, two ways:
- ``create-refused``: a component whose create fails, non-fatally, every time. pykueue's own
  Job webhook refuses a Job component labelled ``kueue.x-k8s.io/queue-name: Not_A_Queue``
  (a valid label value: the API server and both AppWrapper webhooks accept the AppWrapper)
  with 403 ``Forbidden``, which ``createComponent`` reports as not fatal
  (``resource_management.go:389``: only NoMatch and Invalid are). ``Reconcile`` retries
  every second for the AppWrapper's ``admissionGracePeriodDuration``
  (``appwrapper_controller.go:219-226``; the tenant's annotation, up to
  ``gracePeriodCeiling``, 24 h by default), then resets (``resetOrFail``; the ``retryLimit``
  annotation is the tenant's too) and is back in ``Resuming`` after the
  ``retryPausePeriodDuration`` it also sets (0 s). ``createComponents`` stops at the first
  error (``resource_management.go:409-415``), so no later component is created either. The
  phase is ``Resuming`` and nothing is deployed, for as long as the tenant likes, not
  "milliseconds" (docs/security.md). (Where the AppWrapper controller runs on its own
  ClusterRole, a ConfigMap or Secret component, which it may not create, is a 403 too; the
  lab runs it on the admin kubeconfig.)
- ``managed-elsewhere``: ``spec.managedBy: example.com/other``. appwrapper v1.2.0 leaves it
  alone (``appwrapper_controller.go:108-110``: no status, phase ``""``), pykueue admits and
  unsuspends it as Kueue does (docs/operators.md), and ``_creating`` reads phase ``""``
  unsuspended as "about to create": for as long as the Workload is admitted.
Meanwhile every Job the tenant hangs under the AppWrapper with a ``generateName`` Job
component's prefix gets that component's whole share, and every Deployment with a
``generateName`` Deployment component's prefix joins as the component: brk30 H and M again.

H2 (a fixed-name Job component; ``child_job_pods``, the Job webhook): before the AppWrapper
is admitted, the tenant creates, suspended, the Job its component names (``j``) with a
controller ownerReference to the AppWrapper (its name and uid), pods asking 8 GPUs each.
Nothing refuses it (the "nothing joins a suspended AppWrapper" rule is the
Deployment/StatefulSet webhook's; a Job owned by a queued ancestor is checked only for its
queue label and, with ``child_job_creators`` set, who runs it); the reconciler leaves a
suspended child alone. Once admitted, the controller's create of ``j`` answers
AlreadyExists and, the existing Job's controller reference naming the AppWrapper by name
(``ctrlRef.Name == aw.Name``, ``resource_management.go:365-375``), it takes it as its
component (``ResourcesDeployed`` True). The tenant resumes it (allowed: its parallelism is
within the share) and the child-Job rule leaves it (its share is the podSet's pods): one pod
of 8 GPUs on an admission of 1. Per-pod requests are compared for a wrapped Deployment
(``joined_object_errors``) and a RayJob's cluster, never for a wrapped Job.

H3 (a JobSet under an AppWrapper, with ``webhook.child_job_creators`` set): nothing reviews
a JobSet a tenant puts under a queued AppWrapper (the wrapped-object webhook takes
Deployments and StatefulSets; ``child_job_creators`` is asked of batch Jobs; a JobSet
without a queue label passes the JobSet rules; ``JobSet.hold_to_ancestor`` leaves an
AppWrapper's JobSet "to that kind's rules"). Its Jobs are made by the JobSet operator, one
of ``child_job_creators``, and get the share of the JobSet component whose name their JobSet
has (``made_via``, ``child_job_pods``): a fixed name taken before admission and adopted (as
H2), or a ``generateName`` prefix held open (as H1, any number of JobSets). So H1 and H2
hold for JobSet components in the settings docs/security.md says close them.

L (liveness, ``_creating`` against a lagging store): after a reset the controller patches
phase ``Resuming`` and then creates a ``generateName`` Job component again under a new name
(its ``ResourcesDeployed`` condition is already there, so no status patch comes between,
``resource_management.go:351``). If pykueue's AppWrapper store still shows ``Resetting``
when the Job's ADD is reconciled, the Job's share is 0 and ``_hold_to_share`` sets its
parallelism to 0; once the store catches up its share is back, but nothing raises a
parallelism again: the AppWrapper runs no pod and the controller resets it after its grace
period, a retry spent, ``Failed`` after ``retryLimit`` such races. Before 7175cb8 the prefix
named the component in ``Resetting`` too."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import pytest

from app.config import ServerSettings, Settings, WebhookSettings
from app.integrations.appwrapper.appwrapper import KIND
from app.integrations.framework import child_share
from app.integrations.jobset.jobset import KIND as JOBSET
from app.integrations.reconciler import JobReconciler
from app.kube.client import PODS
from app.kube.context import POD
from app.kube.informers import Store
from app.main import create_app
from app.wire.names import HELD_PARALLELISM_ANNOTATION
from tests.unit.test_appwrapper import POLICY, aw, job
from tests.unit.test_appwrapper_wrapped import (
    create_review,
    decide,
    lookup,
    owned,
    queued_appwrapper,
)
from tests.unit.test_webhook import CONTROLLER, answer, make_app, post, review

APPWRAPPER_CONTROLLER = "system:serviceaccount:appwrapper-system:appwrapper-controller-manager"
QUEUE = "kueue.x-k8s.io/queue-name"
AW_LABEL = "workload.codeflare.dev/appwrapper"
ANNOTATIONS = {  # the tenant's own, on its AppWrapper (appwrapper v1.2.0 reads each)
    "workload.codeflare.dev.appwrapper/admissionGracePeriodDuration": "24h",
    "workload.codeflare.dev.appwrapper/retryLimit": "1000000",
    "workload.codeflare.dev.appwrapper/retryPausePeriodDuration": "0s"}
ERRORED = [{"type": "ResourcesDeployed", "status": "False",
            "reason": "ComponentCreationErrored"}]
DEPLOYED = [{"type": "ResourcesDeployed", "status": "True",
             "reason": "ComponentCreatedSuccessfully"}]


def _resuming(obj: dict[str, Any], status: list[dict[str, Any]]) -> dict[str, Any]:
    """``obj`` admitted and unsuspended, as appwrapper v1.2.0 keeps it while a component's
    create fails non-fatally: phase ``Resuming``, ``status`` its componentStatus."""
    out = copy.deepcopy(obj)
    out["spec"]["suspend"] = False
    out["metadata"]["annotations"] = dict(ANNOTATIONS)
    out["status"] = {"phase": "Resuming", "componentStatus": status}
    return out


HOLDS = ["create-refused", "managed-elsewhere"]
H1 = pytest.mark.xfail(strict=True, reason=(
    "brk30b H1: the tenant keeps an AppWrapper's generateName component's own create failing "
    "(a ResourceQuota it fills; an earlier component's failing create closes the prefix since "
    "session 37), so every Deployment with its prefix joins while the controller retries"))


def _held(obj: dict[str, Any], how: str, status: list[dict[str, Any]]) -> dict[str, Any]:
    """``obj`` admitted with its ``generateName`` components never created, for good:
    ``create-refused``, appwrapper v1.2.0 kept in ``Resuming`` (``_resuming``: a component's
    create refused, ``status`` its componentStatus); ``managed-elsewhere``, ``spec.managedBy``
    another controller's, which appwrapper v1.2.0 leaves alone (``appwrapper_controller.go:
    108-110``: no status, phase ``""``) while pykueue admits and unsuspends it as Kueue does
    (docs/operators.md)."""
    if how == "create-refused":
        return _resuming(obj, status)
    out = copy.deepcopy(obj)
    out["spec"].update(managedBy="example.com/other", suspend=False)
    return out


def _as_created(template: dict[str, Any], namespace: str, aw_name: str,
                uid: str) -> dict[str, Any]:
    """A component's object as the AppWrapper controller sends it to the API server: its
    label and controller ownerReference added (``createComponent``)."""
    obj = copy.deepcopy(template)
    meta = obj.setdefault("metadata", {})
    meta["namespace"] = namespace
    meta["labels"] = {**(meta.get("labels") or {}), AW_LABEL: aw_name}
    meta["ownerReferences"] = [{"apiVersion": "workload.codeflare.dev/v1beta2",
                                "kind": "AppWrapper", "name": aw_name, "uid": uid,
                                "controller": True, "blockOwnerDeletion": True}]
    return obj


async def _job_review(app: Any, operation: str, obj: dict[str, Any],
                      old: dict[str, Any] | None = None, user: str = "alice") -> dict[str, Any]:
    """pykueue's answer to a Job review, mutating then validating (namespace ``obj``'s)."""
    out: dict[str, Any] = {}
    for path in ("/mutate-batch-v1-job", "/validate-batch-v1-job"):
        sent = review(operation, obj, old, user=user)
        sent["request"]["namespace"] = obj["metadata"]["namespace"]
        out = answer(await post(app, path, sent), sent)
        if not out["allowed"]:
            return out
    return out


def _gated_job_appwrapper() -> dict[str, Any]:
    """AppWrapper t/aw wrapping one Job by ``generateName: j-`` (2 one-GPU pods), labelled
    with a queue name no LocalQueue may have."""
    template = job("j", 2)
    template["metadata"] = {"generateName": "j-", "labels": {QUEUE: "Not_A_Queue"}}
    return aw(template)


async def test_brk30b_h_the_controllers_create_is_refused_non_fatally() -> None:
    """The two facts brk30b H1 (``create-refused``) stood on. pykueue's Job webhook refuses
    the AppWrapper controller's create of a Job component carrying an invalid queue-name
    label with 403 ``Forbidden``, which appwrapper v1.2.0 retries as not fatal (it fails the
    AppWrapper at once only for NoMatch and Invalid, ``resource_management.go:389``). Since
    session 36 pykueue's AppWrapper rules refuse such an AppWrapper when it is queued
    (``component_queue_errors``), created so or labelled so by an update, so that hold cannot
    arise; one stored before, unchanged, is still accepted."""
    obj = _gated_job_appwrapper()
    errors = KIND.rules.validate(None, obj, "alice", POLICY)
    assert len(errors) == 1 and errors[0].startswith(
        "spec.components[0].template.metadata.labels[kueue.x-k8s.io/queue-name]: "
        "'Not_A_Queue' is not a valid LocalQueue name"), errors
    unqueued = copy.deepcopy(obj)
    unqueued["metadata"]["labels"] = {}
    assert KIND.rules.validate(None, unqueued, "alice", POLICY) == []
    assert KIND.rules.validate(unqueued, obj, "alice", POLICY) == errors  # queued by an update
    relabelled = copy.deepcopy(obj)
    relabelled["metadata"]["labels"]["team"] = "a"
    assert KIND.rules.validate(obj, relabelled, "alice", POLICY) == []  # stored before
    for value in ("", "lq"):  # empty: refused as every kind's webhook does; a valid name passes
        other = copy.deepcopy(obj)
        other["spec"]["components"][0]["template"]["metadata"]["labels"] = {QUEUE: value}
        assert bool(KIND.rules.validate(None, other, "alice", POLICY)) is (value == ""), value
    running = _resuming(obj, [{"name": "", "kind": "Job", "apiVersion": "batch/v1",
                               "conditions": copy.deepcopy(ERRORED)}])
    app = make_app(admission=lookup(running))
    template = obj["spec"]["components"][0]["template"]
    created = _as_created(template, "t", "aw", "u1")
    created["metadata"]["name"] = "j-x7k2p"  # the API server's generated name
    got = await _job_review(app, "CREATE", created, user=APPWRAPPER_CONTROLLER)
    assert got["allowed"] is False
    assert (got["status"]["code"], got["status"]["reason"]) == (403, "Forbidden")


@pytest.mark.parametrize("how", HOLDS)
async def test_jobs_with_the_prefix_get_no_share_while_the_tenant_holds_the_create(
        how: str) -> None:
    """AppWrapper t/aw wraps one Job by ``generateName: j-`` (2 one-GPU pods admitted),
    labelled with the queue name ``Not_A_Queue``: the controller's create of it is refused
    every second (the test above), the AppWrapper in ``Resuming`` for 24 h at a time, again
    and again; or the AppWrapper is managed by another controller, so none creates it and
    its phase stays ``""``, unsuspended. The tenant creates Jobs ``j-e0``..``j-e4``
    (parallelism 2, no such label) with a controller ownerReference to it: the Job webhook
    allows each, and each gets a share of 2, so the child-Job rule leaves 10 GPU pods
    running on an admission of 2, for as long as the tenant likes."""
    running = _held(_gated_job_appwrapper(), how, [
        {"name": "", "kind": "Job", "apiVersion": "batch/v1",
         "conditions": copy.deepcopy(ERRORED)}])
    app = make_app(admission=lookup(running))
    allowed, shares = [], []
    for i in range(5):
        evil = _as_created(job(f"j-e{i}", 2), "t", "aw", "u1")
        evil["metadata"]["labels"] = {}
        allowed.append((await _job_review(app, "CREATE", evil))["allowed"])
        shares.append(child_share(KIND, running, evil))
    assert not all(allowed) or sum(shares) <= 2, \
        f"5 tenant Jobs created under aw, shares {shares}: {sum(shares)} pods on 2 admitted"


@pytest.mark.parametrize("how", HOLDS)
async def test_deployments_with_the_prefix_cannot_join_while_the_tenant_holds_the_create(
        how: str) -> None:
    """AppWrapper research/dep: Job ``side`` labelled with the queue name ``Not_A_Queue``,
    then a Deployment by ``generateName: dep-`` (1 replica of 1 GPU). The controller's
    create of ``side`` is refused every second and it never gets to the Deployment (or no
    controller runs the AppWrapper). Since session 36 pykueue refuses such an AppWrapper
    when it is queued (``component_queue_errors``); the state stays reachable through a
    create that fails for another reason (a ResourceQuota of object counts the tenant fills:
    403 ``exceeded quota``, not fatal to appwrapper v1.2.0) or an AppWrapper stored before.
    The tenant (alice) creates ``dep-evil0``..``dep-evil3`` under it, each as the component
    would be: all allowed, 4 GPU pods on an admission of 1, and no name is ever recorded for
    the component, so none of them is ever found out."""
    obj = queued_appwrapper(generateName="dep-")
    obj["spec"]["components"][0]["template"]["metadata"]["labels"] = {QUEUE: "Not_A_Queue"}
    running = _held(obj, how, [
        {"name": "side", "kind": "Job", "apiVersion": "batch/v1",
         "conditions": copy.deepcopy(ERRORED)}, {}])
    joined = [(await decide(create_review(owned(1, name=f"dep-evil{i}")), running))["allowed"]
              for i in range(4)]
    assert joined.count(True) <= 1, f"{joined.count(True)} Deployments joined on 1 admitted"


@H1
async def test_deployments_with_the_prefix_cannot_join_while_the_components_own_create_fails(
        ) -> None:
    """The hold on the component itself: AppWrapper research/dep, Job ``side`` deployed,
    then a Deployment by ``generateName: dep-`` (1 replica of 1 GPU) whose create fails
    every second (a ResourceQuota ``count/deployments.apps`` the tenant keeps full, freeing
    one place at a time for its own create). No earlier component shows a failed create, so
    the prefix stays open in ``Resuming``: each of ``dep-evil0``..``dep-evil3`` joins as the
    component."""
    obj = queued_appwrapper(generateName="dep-")
    running = _held(obj, "create-refused", [
        {"name": "side", "kind": "Job", "apiVersion": "batch/v1",
         "conditions": copy.deepcopy(DEPLOYED)},
        {"name": "", "kind": "Deployment", "apiVersion": "apps/v1",
         "conditions": copy.deepcopy(ERRORED)}])
    joined = [(await decide(create_review(owned(1, name=f"dep-evil{i}")), running))["allowed"]
              for i in range(4)]
    assert joined.count(True) <= 1, f"{joined.count(True)} Deployments joined on 1 admitted"


async def test_a_job_of_the_components_name_made_before_admission_runs_no_bigger_pods() -> None:
    """AppWrapper t/aw wraps Job ``j`` (1 pod of 1 GPU). Queued and suspended, the tenant
    creates Job ``j`` suspended, controlled by the AppWrapper (its uid), its pod asking 8
    GPUs and labelled with the AppWrapper's name (so the controller counts it ready): allowed.
    Admitted, the controller's create answers AlreadyExists and it takes ``j`` as its
    component (phase ``Running``, ``j`` deployed). The tenant resumes ``j``: allowed, and its
    share is 1 pod, so the child-Job rule leaves it: 8 GPUs on an admission of 1."""
    queued = aw(job("j", 1))
    evil = _as_created(job("j", 1), "t", "aw", "u1")
    evil["metadata"]["labels"] = {}
    evil["spec"]["suspend"] = True
    evil["spec"]["template"] = {
        "metadata": {"labels": {AW_LABEL: "aw"}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]}}
    created = (await _job_review(make_app(admission=lookup(queued)), "CREATE", evil))["allowed"]
    running = copy.deepcopy(queued)
    running["spec"]["suspend"] = False
    running["status"] = {"phase": "Running", "componentStatus": [
        {"name": "j", "kind": "Job", "apiVersion": "batch/v1",
         "conditions": copy.deepcopy(DEPLOYED)}]}
    resumed = copy.deepcopy(evil)
    resumed["spec"]["suspend"] = False
    ran = (await _job_review(make_app(admission=lookup(running)), "UPDATE", resumed,
                             evil))["allowed"]
    share = child_share(KIND, running, resumed)
    assert not (created and ran and share >= 1), \
        f"j (8 GPUs a pod) created under the queued AppWrapper, resumed, share {share}"


class _Client:
    """The API client ``_hold_to_share`` writes with: each replaced Job, each pod DELETE
    (name, grace seconds)."""

    def __init__(self) -> None:
        self.replaced: list[dict[str, Any]] = []
        self.deleted: list[tuple[str, int | None]] = []

    async def replace(self, resource: Any, body: dict[str, Any]) -> dict[str, Any]:
        self.replaced.append(copy.deepcopy(body))
        return body

    async def delete(self, resource: Any, name: str, namespace: str, *, uid: Any = None,
                     resource_version: Any = None,
                     grace_period_seconds: int | None = None) -> None:
        self.deleted.append((name, grace_period_seconds))


class _Reconciler:
    """``JobReconciler``'s child-Job set-back (``_hold_to_share``) over ``ctx`` alone."""

    _hold_to_share = JobReconciler._hold_to_share
    _cut_grace_beyond_share = JobReconciler._cut_grace_beyond_share
    _remake_stale_child = JobReconciler._remake_stale_child
    _pods_holding_quota = JobReconciler._pods_holding_quota
    _pods_left = JobReconciler._pods_left
    _pods = JobReconciler._pods
    _replace_child_job = JobReconciler._replace_child_job

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.remade_children: dict[str, tuple[str, int]] = {}


def _reconciler(*pods: dict[str, Any]) -> Any:
    """The state ``JobReconciler._hold_to_share`` reads: a client, a Pod store of ``pods``,
    a recorder."""
    store = Store(PODS)
    for pod in pods:
        store.put(pod)
    events: list[tuple[Any, ...]] = []
    ctx = SimpleNamespace(client=_Client(), informers=SimpleNamespace(informers={POD: None}),
                          store=lambda key: store, events=events,
                          recorder=SimpleNamespace(emit=lambda *a: events.append(a)))
    return _Reconciler(ctx)


async def test_the_controllers_job_held_on_a_lagging_store_gets_its_share_back() -> None:
    """AppWrapper t/aw (a Job by ``generateName: j-``, 2 pods) is reset: its controller
    patches phase ``Resuming`` and creates ``j-n3w4x``. pykueue reconciles the Job's ADD while
    its store still holds the AppWrapper in ``Resetting`` (old name ``j-k2n4p``
    ``CompononetDeleted``): share 0, parallelism set to 0. Its store then shows the new name
    recorded and deployed (phase ``Running``), which re-queues the Job: share 2. brk30b L,
    closed: ``_hold_to_share`` only lowered, so the AppWrapper's Job ran no pod; it now sets
    a held Job back to the parallelism it had (``pykueue.dev/held-parallelism``), at most
    its share."""
    template = job("j", 2)
    template["metadata"] = {"generateName": "j-"}
    base = aw(template)
    base["spec"]["suspend"] = False
    stale = copy.deepcopy(base)
    stale["status"] = {"phase": "Resetting", "componentStatus": [
        {"name": "j-k2n4p", "conditions": [{"type": "ResourcesDeployed", "status": "False",
                                            "reason": "CompononetDeleted"}]}]}
    fresh = copy.deepcopy(base)
    fresh["status"] = {"phase": "Running", "componentStatus": [
        {"name": "j-n3w4x", "conditions": copy.deepcopy(DEPLOYED)}]}
    made = _as_created(template, "t", "aw", "u1")
    made["metadata"]["name"] = "j-n3w4x"
    rec = _reconciler()
    await rec._hold_to_share(made, KIND, stale)
    now = rec.ctx.client.replaced[-1] if rec.ctx.client.replaced else made
    await rec._hold_to_share(now, KIND, fresh)
    now = rec.ctx.client.replaced[-1] if rec.ctx.client.replaced else made
    assert now["spec"]["parallelism"] == child_share(KIND, fresh, made) == 2, \
        f"the controller's own Job left at parallelism {now['spec']['parallelism']}"



JOBSET_CONTROLLER = "system:serviceaccount:jobset-system:jobset-controller-manager"


def _hardened_app(*appwrappers: dict[str, Any]) -> Any:
    """The webhook app with ``webhook.child_job_creators`` naming the AppWrapper and JobSet
    controllers (docs/security.md's advice for tenants who write ownerReferences)."""
    app = create_app(Settings(
        controllers_enabled=False, server=ServerSettings(metrics_auth=False),
        webhook=WebhookSettings(controller_usernames=[CONTROLLER],
                                child_job_creators=[APPWRAPPER_CONTROLLER, JOBSET_CONTROLLER])))
    app.state.admission_lookup = lookup(*appwrappers)
    return app


def _jobset(name: str, gpus: str, *, suspend: bool, meta: dict[str, Any] | None = None
            ) -> dict[str, Any]:
    """JobSet ``name``: replicatedJob ``w``, 1 Job of 1 pod asking ``gpus`` GPUs, its pods
    labelled with AppWrapper ``aw``'s name."""
    pod = {"metadata": {"labels": {AW_LABEL: "aw"}}, "spec": {"containers": [
        {"name": "c", "resources": {"requests": {"nvidia.com/gpu": gpus}}}]}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": dict(meta or {"name": name}),
            "spec": {"suspend": suspend, "replicatedJobs": [{"name": "w", "replicas": 1,
                     "template": {"spec": {"parallelism": 1, "template": pod}}}]}}


async def _jobset_review(app: Any, operation: str, obj: dict[str, Any],
                         old: dict[str, Any] | None = None) -> bool:
    """Whether pykueue's JobSet webhooks (mutating, validating) allow alice's review."""
    for path in (JOBSET.rules.mutate_path, JOBSET.rules.validate_path):
        sent = review(operation, obj, old, user="alice",
                      kind={"group": "jobset.x-k8s.io", "version": "v1alpha2", "kind": "JobSet"})
        sent["request"]["namespace"] = "t"
        sent["request"]["resource"] = {"group": "jobset.x-k8s.io", "version": "v1alpha2",
                                       "resource": "jobsets"}
        if not answer(await post(app, path, sent), sent)["allowed"]:
            return False
    return True


def _jobsets_job(jobset: dict[str, Any], gpus: str) -> dict[str, Any]:
    """Job ``<jobset>-w-0`` as the JobSet operator creates it (controlled by the JobSet)."""
    name = jobset["metadata"]["name"]
    out = job(f"{name}-w-0", 1)
    out["metadata"].update(namespace="t", ownerReferences=[
        {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": name,
         "uid": f"uid-{name}", "controller": True}])
    out["spec"]["template"] = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert out["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] == {
        "nvidia.com/gpu": gpus}
    return out


async def test_a_jobset_of_the_components_name_runs_no_bigger_pods_in_hardened_settings(
        ) -> None:
    """AppWrapper t/aw wraps JobSet ``js`` (1 Job of 1 pod of 1 GPU), queued; settings
    with ``child_job_creators`` = the AppWrapper and JobSet controllers. The tenant creates
    JobSet ``js`` suspended under it (8 GPUs a pod): allowed. Admitted, the controller
    adopts it (AlreadyExists, ``resource_management.go:365-375``); the tenant resumes it:
    allowed; the JobSet operator creates ``js-w-0``: allowed (a creator), and its share is 1
    pod, so it runs: 8 GPUs on an admission of 1."""
    queued = aw(_jobset("js", "1", suspend=False))
    owner = {"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
             "name": "aw", "uid": "u1", "controller": True}
    evil = _jobset("js", "8", suspend=True,
                   meta={"name": "js", "namespace": "t", "uid": "uid-js",
                         "ownerReferences": [owner]})
    created = await _jobset_review(_hardened_app(queued), "CREATE", evil)
    running = copy.deepcopy(queued)
    running["spec"]["suspend"] = False
    running["status"] = {"phase": "Running", "componentStatus": [
        {"name": "js", "kind": "JobSet", "apiVersion": "jobset.x-k8s.io/v1alpha2",
         "conditions": copy.deepcopy(DEPLOYED)}]}
    app = _hardened_app(running)
    resumed = copy.deepcopy(evil)
    resumed["spec"]["suspend"] = False
    ran = await _jobset_review(app, "UPDATE", resumed, evil)
    made = _jobsets_job(resumed, "8")
    job_ok = (await _job_review(app, "CREATE", made, user=JOBSET_CONTROLLER))["allowed"]
    share = child_share(KIND, running, made)
    assert not (created and ran and job_ok and share >= 1), \
        f"js (8 GPUs a pod) made under the queued AppWrapper, resumed, js-w-0 share {share}"


@pytest.mark.parametrize("how", HOLDS)
async def test_jobsets_with_the_prefix_get_no_share_in_hardened_settings(how: str) -> None:
    """AppWrapper t/aw: Job ``side`` labelled with the queue name ``Not_A_Queue`` (its
    create refused, the AppWrapper held in ``Resuming``; or managed elsewhere), then a JobSet
    by ``generateName: js-`` (1 Job of 1 pod of 1 GPU); ``child_job_creators`` set. The
    tenant creates JobSets ``js-e0``..``js-e3`` under it, running: allowed; the JobSet
    operator makes their Jobs: allowed, each with a share of 1: 4 pods (of any size) on an
    admission of 1 GPU."""
    side = job("side", 1)
    side["metadata"]["labels"] = {QUEUE: "Not_A_Queue"}
    side["spec"]["template"] = {"spec": {"containers": [{"name": "c"}]}}
    obj = aw(side, _jobset("", "1", suspend=False, meta={"generateName": "js-"}))
    running = _held(obj, how, [{"name": "side", "kind": "Job", "apiVersion": "batch/v1",
                                "conditions": copy.deepcopy(ERRORED)}, {}])
    app = _hardened_app(running)
    owner = {"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
             "name": "aw", "uid": "u1", "controller": True}
    allowed, shares = [], []
    for i in range(4):
        evil = _jobset(f"js-e{i}", "1", suspend=False,
                       meta={"name": f"js-e{i}", "namespace": "t", "ownerReferences": [owner]})
        made = _jobsets_job(evil, "1")
        allowed.append(await _jobset_review(app, "CREATE", evil) and (await _job_review(
            app, "CREATE", made, user=JOBSET_CONTROLLER))["allowed"])
        shares.append(child_share(KIND, running, made))
    assert not all(allowed) or sum(shares) <= 1, \
        f"4 tenant JobSets under aw, their Jobs' shares {shares} on 1 admitted"


async def test_a_tenants_raise_is_held_to_the_share_and_never_restored_beyond_it() -> None:
    """AppWrapper t/aw running with Job component ``j`` (2 pods): a tenant raises the Job's
    parallelism to 5; it is set back to 2 with ``pykueue.dev/held-parallelism: "5:2"``.
    Later looks raise nothing beyond the share of 2, whatever the annotation says (a
    tenant's "50:2" included); a count the user wrote since (1) is left alone; a Job held
    to 0 whose share returns is raised to the share and keeps its record of 50."""
    base = aw(job("j", 2))
    base["spec"]["suspend"] = False
    base["status"] = {"phase": "Running", "componentStatus": [
        {"name": "j", "conditions": copy.deepcopy(DEPLOYED)}]}
    made = _as_created(job("j", 2), "t", "aw", "u1")
    made["spec"]["parallelism"] = 5
    rec = _reconciler()
    await rec._hold_to_share(made, KIND, base)
    held = rec.ctx.client.replaced[-1]
    assert held["spec"]["parallelism"] == 2
    assert held["metadata"]["annotations"][HELD_PARALLELISM_ANNOTATION] == "5:2"
    await rec._hold_to_share(held, KIND, base)
    held["metadata"]["annotations"][HELD_PARALLELISM_ANNOTATION] = "50:2"
    await rec._hold_to_share(held, KIND, base)
    lowered = copy.deepcopy(held)
    lowered["spec"]["parallelism"] = 1
    await rec._hold_to_share(lowered, KIND, base)
    assert len(rec.ctx.client.replaced) == 1, "raised beyond its share, or the user's count"
    stopped = copy.deepcopy(held)
    stopped["spec"]["parallelism"] = 0
    stopped["metadata"]["annotations"][HELD_PARALLELISM_ANNOTATION] = "50:0"
    await rec._hold_to_share(stopped, KIND, base)
    raised = rec.ctx.client.replaced[-1]
    assert raised["spec"]["parallelism"] == 2
    assert raised["metadata"]["annotations"][HELD_PARALLELISM_ANNOTATION] == "50:2"
    assert [e[2] for e in rec.ctx.events] == ["ExceedsAncestorAdmission", "RestoredParallelism"]

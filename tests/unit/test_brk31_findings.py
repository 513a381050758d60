"""brk31: a breaker's findings against 3a0239b. Closed since (tests; docs/security.md):
H1 (a running Job made a child by an UPDATE is refused, ``_adopted_running_errors``; a
JobSet given an AppWrapper controller by an UPDATE is checked as at CREATE), H2 (the count
is checked at CREATE for a share of at least 1 and at resume against the share,
``_child_share_errors``; a share of 0's Job is still allowed at CREATE, and the
reconciler's set-back deletes its pods with a grace of 1 s, ``_cut_grace_beyond_share``),
M1 and M2 (a Job or JobSet of a component's name must also claim the component's DRA
devices and be placed as the component made under the admission,
``template_differences``: nodeSelector, affinity, tolerations, nodeName; the admitted
flavor's nodeSelector and tolerations are the only additions, from the AppWrapper's
``podSetInfos``, ``made_component``), L1 (hack/test.sh makes certs/out once before the
lanes, and ``certs.pki`` holds a lock on the directory for each step), L2 (the lanes merge
pytest's ``cache/lastfailed``), M3 (session 36: the JobSet kind watches every JobSet,
``CHILD_JOBSETS``, where the ancestor walk finds an AppWrapper's unlabelled JobSet,
``framework.stored_object``; webhook ``vappwrapper-jobset-job`` sends the Jobs of such a
JobSet, their pod template labelled with the AppWrapper's name, to the Job rules).

Against 3a0239b (the pods of an AppWrapper's Job and JobSet
components are checked against the components' templates, at CREATE and at resume only:
``_child_template_errors``, ``CrdRules.routes`` ``child_object_errors``). Default settings
(``webhook.child_job_creators`` empty, Kueue's behaviour) unless a test says.

H1 (becoming a child while running): the template check runs at CREATE and when a
suspended Job (JobSet) is resumed. A Job that already runs and is then made the AppWrapper's
child by an UPDATE that adds the controller ownerReference is checked for its pod count only
(``_child_share_errors``: not above its share), never for what its pods ask; the same for a
running JobSet (``CrdRules.routes`` checks a JobSet under a queued ancestor only when
``old is None`` or on resume). The reconciler then holds such a child to its share's count
(``_hold_to_share``: parallelism only) and the extender vouches for its pods (the ancestor is
admitted, ``pod_admitted``): a pod of 8 GPUs runs on an admission of 1.
Steps (the AppWrapper ``aw``'s fixed-name Job component ``j``, 1 pod of 1 GPU, admitted but
``j`` not created by its controller yet: brk30b H1's ``create-refused`` hold, an earlier
component whose create pykueue refuses with 403, keeps phase ``Resuming`` for up to the
tenant's ``admissionGracePeriodDuration``): 1. create Job ``j`` without an ownerReference,
running, ``parallelism: 0``, its pod asking 8 GPUs (an unqueued Job running no pod: nothing
reviews it; in a namespace where unlabelled Jobs are queued, label it with a LocalQueue:
0 pods are admitted at once); 2. one UPDATE: add the controller ownerReference to ``aw``
(its uid) and set ``parallelism: 1``. Allowed (the Job webhook, routed by
``vappwrapper-wrapped-job``, or by ``vjob`` when labelled: no resume, 1 pod within the
share of 1); the appwrapper controller adopts ``j`` when it gets to it (its controller
reference names ``aw``). With ``webhook.child_job_creators`` set it is refused
(``_child_runner_errors``: a running Job made a child). Not the AppWrapper's only: a Job
made the child of a queued JobSet this way (``train-w-0``, made before the JobSet so that
the operator's own create fails, then adopted by the ownerReference) is checked for its
count only, as every child Job of a kind without ``child_job_template`` always is, and the
JobSet operator takes it as its Job.

H2 (a count checked on UPDATE only; a set-back the tenant's grace period outlasts): a Job
created running under an admitted AppWrapper, with the pods of the component's template, is
not checked for its count (``_child_share_errors`` reviews UPDATEs): ``parallelism: 8``
passes for a share of 1 (``j``, held as in H1) or 0 (a Job named as no component:
``test_appwrapper_child_templates`` expects that create to pass and leaves it to the
set-back); nor at resume against the share (``_child_share_errors`` compares the new count
with the suspended Job's own: a Job ``j`` made suspended with ``parallelism: 8`` before
admission, adopted by name, is resumed with 8; no hold needed). The Job controller makes 8
pods at once, the extender places them (it checks the
ancestor's admission, not how many pods use it: docs/security.md), and ``_hold_to_share``
sets ``parallelism`` back; the Job controller deletes the pods beyond it with their own
``terminationGracePeriodSeconds``, which the tenant sets (a day) and its containers outlive
by ignoring SIGTERM. Nothing shortens that grace on this path (``grace_allowed`` applies
where a controller is gone or an operator stopped). With ``webhook.child_job_creators`` set
such a create is refused (``_child_runner_errors``).

M1 (the flavor is not compared): a Job or JobSet of the component's name that the tenant
makes (suspended, before admission; adopted by name, brk30b H2/H3) must ask the component's
per-pod requests, but its nodeSelector, affinity and tolerations are its own: the
controller adds the admission's (the flavor's nodeLabels) only to the objects it creates
itself, and on AlreadyExists it changes nothing. So the tenant's pods ask the same 1 GPU on
a flavor the AppWrapper was not admitted on (an A100 instead of the admitted T4; a flavor
whose quota the tenant has not, or has used up); the extender does not look (a child of an
admitted ancestor passes every node, ``pod_admitted``).

M2 (DRA claims are not compared): the same checks compare per-pod requests
(``template_requests``), which leave out ``spec.resourceClaims`` and the containers'
``resources.claims``; the Workload counts a claim template's devices
(``resources.deviceClassMappings``, ``app.wire.dra``). A Job (or JobSet) of the component's
name claiming ResourceClaimTemplate ``eight-gpus`` where the component claims ``one-gpu``
passes. The RayCluster rules compare claims (``ray.template_claims``); the AppWrapper's do not.

M3 (Kubernetes v1.36 lets a suspended Job's container resources change,
``MutablePodResourcesForSuspendedJobs`` beta, on by default): the Jobs the JobSet operator
makes for an AppWrapper's JobSet component are reviewed by no Job webhook in the default
(labelled-only) webhook configuration, and the Job rules find their ancestor only through a
store holding the unlabelled JobSet. The tenant suspends the JobSet (allowed), sets
``js-w-0``'s container to 8 GPUs, resumes the JobSet (its replicatedJobs are unchanged) and
the operator resumes ``js-w-0``: 8 GPUs on a share of 1 GPU per pod, the count within the
share. Matters where unlabelled pods are otherwise kept off flavor GPUs by the extender
(``extender.flavor_nodes_for_admitted_only``: it places this pod, its ancestor admitted).
Closed (session 36): the resume is refused, and what the webhook does not see (the label
taken off the pod template first) the extender and the reconciler hold, through the same
walk.
Seen on the lab (Kubernetes v1.36.3, an ad hoc run, not kept): a Job that ran a 1-GPU pod,
suspended (its pod still terminating), its container patched to 2 GPUs (accepted) and
resumed ran a 2-GPU pod.

L1 (the lanes, CI): both lanes start a lab and call ``pykueue_up``, which runs
``python -m certs.generate --out certs/out`` (shared by both) without a lock. On a fresh
checkout (no certs/out: ``make test`` where the binaries are cached starts both lanes at
once) both may make a CA; the files are each written atomically, but the pair is not, so
``ca.crt`` can end up one lane's and ``tls.crt`` the other's: each lane's pykueue then fails
TLS (``/readyz``, the webhook calls). Two ``certs.generate`` processes started together left
such a pair once in 20 runs. Fix: make certs/out once in hack/test.sh before ``run_lanes``
(or lock in ``ensure_certs``).

L2 (the lanes, developers): both lanes' pytests keep pytest's cache on (hack/test.sh's
``PYTEST``), and each writes ``cache/lastfailed`` at its end from what it read at its start
and what it ran: the lane that ends last drops the other lane's failures, so ``pytest --lf``
after ``make test`` reruns only half of them (and may rerun ones the other lane fixed).
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature

from app.config import Settings
from app.controllers.admission_lookup import StoreAdmissionLookup
from app.integrations import default_registry
from app.integrations.appwrapper.appwrapper import KIND
from app.integrations.framework import child_share
from app.integrations.jobset.jobset import JOBSETS
from app.integrations.jobset.jobset import KIND as JOBSET
from app.integrations.reconciler import PODS_POLL
from app.kube.client import JOBS
from app.kube.context import CHILD_JOBSETS
from app.kube.informers import Store
from certs import pki
from tests.unit.test_appwrapper import aw, job
from tests.unit.test_appwrapper_child_templates import (
    _app,
    _job_component,
    _jobset_component,
    _with_gpus,
)
from tests.unit.test_brk30b_findings import (
    ERRORED,
    HOLDS,
    JOBSET_CONTROLLER,
    QUEUE,
    _hardened_app,
    _held,
    _job_review,
    _jobset_review,
    _jobsets_job,
    _reconciler,
)
from tests.unit.test_webhook import make_app


def _unowned(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` without the AppWrapper's ownerReference and label: the tenant's own."""
    out = copy.deepcopy(obj)
    out["metadata"].pop("ownerReferences", None)
    out["metadata"]["labels"] = {}
    out["metadata"]["uid"] = "uid-tenant"
    return out


def _held_with_j(how: str) -> dict[str, Any]:
    """AppWrapper t/aw admitted, its fixed-name Job component ``j`` (1 pod of 1 GPU) never
    created by its controller (brk30b H1's holds, ``_held``): ``create-refused``, an earlier
    component ``side`` labelled with the queue name ``Not_A_Queue`` whose create pykueue
    refuses (403, retried in ``Resuming`` for the tenant's grace period);
    ``managed-elsewhere``, ``spec.managedBy`` another controller's."""
    side = job("side", 1)
    side["metadata"]["labels"] = {QUEUE: "Not_A_Queue"}
    comps = (side, _with_gpus(job("j", 1), "1")) if how == "create-refused" \
        else (_with_gpus(job("j", 1), "1"),)
    return _held(aw(*comps), how, [{"name": "side", "kind": "Job", "apiVersion": "batch/v1",
                                    "conditions": copy.deepcopy(ERRORED)}, {}])


@pytest.mark.parametrize("how", HOLDS)
async def test_a_running_job_made_the_components_child_by_update_runs_no_bigger_pods(
        how: str) -> None:
    """The AppWrapper t/aw admitted (``_held_with_j``); the tenant's running Job ``j``
    (parallelism 0, pods of 8 GPUs, no owner) gets the controller ownerReference to aw and
    parallelism 1 in one UPDATE."""
    _, made = _job_component()
    made["metadata"]["uid"] = "uid-tenant"
    made["spec"]["suspend"] = False
    new = _with_gpus(made, "8")
    new["spec"]["parallelism"] = 1
    old = _unowned(new)
    old["spec"]["parallelism"] = 0
    out = await _job_review(_app(_held_with_j(how)), "UPDATE", new, old)
    assert not out["allowed"], "8-GPU pod made aw's component j while running: allowed"


@pytest.mark.parametrize("how", HOLDS)
async def test_a_job_created_running_under_an_admitted_appwrapper_runs_no_more_than_its_share(
        how: str) -> None:
    """The AppWrapper t/aw admitted, its Job component ``j`` (1 pod of 1 GPU) never
    created by its controller (``_held_with_j``). The tenant creates ``j`` running under
    aw, its pods as the component's (1 GPU) but ``parallelism: 8`` and
    ``terminationGracePeriodSeconds`` of a day: refused at CREATE (a share of 1). A Job
    named as no component (a share of 0) is not refused at CREATE (a ``generateName``
    component's Job has no share until its name is recorded): the reconciler holds it, its
    pods' grace cut (``test_the_pods_beyond_a_share_run_out_no_grace_of_the_tenants``)."""
    _, made = _job_component()
    made["spec"]["suspend"] = False
    made["spec"]["parallelism"] = 8
    made["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 86400
    out = await _job_review(_app(_held_with_j(how)), "CREATE", made)
    assert not out["allowed"], "a Job created running with 8 pods on a share <= 1: allowed"


def _pod(job: dict[str, Any], i: int, *, deleting: int | None = None) -> dict[str, Any]:
    """Pod ``<job>-<i>`` of Job ``job`` (its controller), running with the Job's grace
    period; ``deleting``: being deleted with that grace (seconds)."""
    meta = job["metadata"]
    pod = {"metadata": {"name": f"{meta['name']}-{i}", "namespace": meta["namespace"],
                        "uid": f"{meta['name']}-pod-{i}", "ownerReferences": [
                            {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"],
                             "uid": meta["uid"], "controller": True}]},
           "spec": copy.deepcopy(job["spec"]["template"]["spec"]),
           "status": {"phase": "Running"}}
    if deleting is not None:
        pod["metadata"].update(deletionTimestamp="2026-12-07T03:00:00Z",
                               deletionGracePeriodSeconds=deleting)
    return pod


async def test_the_pods_beyond_a_share_run_out_no_grace_of_the_tenants() -> None:
    """H2's rest (a share of 0): the AppWrapper t/aw admitted and running its Job ``j``; the
    tenant's Job ``other`` under it, created running with 8 pods of a day's grace (allowed:
    a share of 0 is not refused at CREATE). The reconciler sets it to parallelism 0 and
    deletes its pods with a grace of 1 s (``BEYOND_SHARE_GRACE_SECONDS``), those the Job
    controller is deleting with the day's grace too; no pod of ``j`` is touched. Before, the
    Job controller deleted them with their own grace: 8 GPUs for a day on an admission of
    1."""
    running, made = _job_component()
    other = copy.deepcopy(made)
    other["metadata"].update(name="other", uid="uid-other")
    other["spec"].update(suspend=False, parallelism=8)
    other["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 86400
    other["status"] = {"active": 8}
    mine = copy.deepcopy(made)
    mine["metadata"]["uid"] = "uid-j"
    pods = [_pod(other, i, deleting=86400 if i < 3 else None) for i in range(8)]
    rec = _reconciler(*pods, _pod(mine, 0))
    again = await rec._hold_to_share(other, KIND, running)
    assert rec.ctx.client.replaced[-1]["spec"]["parallelism"] == 0
    assert sorted(rec.ctx.client.deleted) == sorted((f"other-{i}", 1) for i in range(8))
    assert again == PODS_POLL  # looked at again while its status counts pods


async def test_pods_beyond_a_share_of_one_keep_no_grace_beyond_the_workloads() -> None:
    """With a share of 1 the Job controller chooses the pods it deletes after the set-back:
    those it deletes with a grace beyond the Workload's longest (here none stored: 30 s,
    Kubernetes' default) are deleted again with it; the pod left running is not touched."""
    running, made = _job_component()
    made["metadata"]["uid"] = "uid-j"
    made["spec"].update(suspend=False, parallelism=1)
    made["status"] = {"active": 1, "terminating": 2}
    pods = [_pod(made, 0), _pod(made, 1, deleting=86400), _pod(made, 2, deleting=20)]
    rec = _reconciler(*pods)
    again = await rec._hold_to_share(made, KIND, running)
    assert not rec.ctx.client.replaced
    assert rec.ctx.client.deleted == [("j-1", 30)]
    assert again == PODS_POLL


async def test_a_suspended_job_of_the_components_name_resumes_no_more_pods_than_its_share(
        ) -> None:
    """No hold needed: the tenant creates ``j`` suspended under the queued AppWrapper t/aw
    (Job ``j``: 1 pod of 1 GPU) with the component's pods but ``parallelism: 8`` (CREATE:
    no count check); appwrapper v1.2.0 adopts it by name once aw is admitted (brk30b H2);
    the tenant resumes it: the share rule compares 8 with the suspended Job's own 8
    (``have <= before``), so it passes, and H2's set-back and grace period follow."""
    running, made = _job_component()
    made["spec"]["parallelism"] = 8
    made["spec"]["suspend"] = True
    resumed = copy.deepcopy(made)
    resumed["spec"]["suspend"] = False
    app = _app(running)
    created = (await _job_review(_app(aw(_with_gpus(job("j", 1), "1"))), "CREATE",
                                 made))["allowed"]
    out = await _job_review(app, "UPDATE", resumed, made)
    assert not (created and out["allowed"]), "j resumed with 8 pods on a share of 1"



async def test_a_running_job_made_a_queued_jobsets_child_by_update_runs_no_bigger_pods(
        ) -> None:
    """Not the AppWrapper's only: a labelled JobSet ``train`` (replicatedJob ``w``, 1 Job of
    1 pod of 1 GPU) admitted. Before creating it the tenant made Job ``train-w-0`` (queued
    in its own LocalQueue, ``parallelism: 0``, pods of 8 GPUs: admitted at once, 0 pods), so
    the JobSet operator's create of it fails (AlreadyExists, retried: jobset v0.11.1
    ``createJobs``); then one UPDATE gives it the JobSet's controller ownerReference, the
    operator's ``restart-attempt`` label and ``parallelism: 1``: the Job webhook (``vjob``:
    it is labelled) finds its ancestor and checks its count (1, the share) and nothing else
    (``child_job_template`` is the AppWrapper's only), the JobSet operator lists it as its
    Job, the reconciler holds it to 1 pod: 8 GPUs on an admission of 1."""
    pod = {"spec": {"containers": [{"name": "c", "resources": {
        "requests": {"nvidia.com/gpu": "1"}}}]}}
    train = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
             "metadata": {"name": "train", "namespace": "t", "uid": "p1",
                          "labels": {QUEUE: "lq"}},
             "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {
                 "spec": {"parallelism": 1, "completions": 1, "template": pod}}}]}}
    jobsets = Store(JOBS)
    jobsets.put({**train, "metadata": {**train["metadata"], "resourceVersion": "1"}})
    stores = {JOBSET.key: jobsets}
    ctx = SimpleNamespace(store=lambda k: stores.get(k) or Store(JOBS), synced=True,
                          settings=Settings())
    app = make_app(admission=StoreAdmissionLookup(ctx, default_registry()))  # type: ignore[arg-type]
    new = _with_gpus(job("train-w-0", 1), "8")
    new["metadata"].update(namespace="t", uid="uid-tenant", labels={
        QUEUE: "mine", "jobset.sigs.k8s.io/restart-attempt": "0"}, ownerReferences=[
        {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "train",
         "uid": "p1", "controller": True}])
    new["spec"]["suspend"] = False
    assert child_share(JOBSET, train, new) == 1  # its share of train's admission
    old = copy.deepcopy(new)
    old["metadata"].pop("ownerReferences")
    old["metadata"]["labels"] = {QUEUE: "mine"}
    old["spec"]["parallelism"] = 0
    out = await _job_review(app, "UPDATE", new, old)
    assert not out["allowed"], "8-GPU pod made train's Job train-w-0 while running: allowed"


async def test_a_running_jobset_made_the_components_child_by_update_runs_no_bigger_pods(
        ) -> None:
    """The AppWrapper t/aw (JobSet ``js``: 1 Job of 1 pod of 1 GPU) admitted; the tenant's
    running JobSet ``js`` (pods of 8 GPUs, no owner) gets the controller ownerReference."""
    running, made = _jobset_component()
    bigger = copy.deepcopy(made)
    bigger["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": "8"}}
    assert not await _jobset_review(_app(running), "UPDATE", bigger, _unowned(bigger))


async def test_the_same_update_is_refused_with_child_job_creators() -> None:
    """With ``webhook.child_job_creators`` set, H1's Job UPDATE is refused
    (``_child_runner_errors``: a running Job made a child): the finding is the default
    settings' (passes: not the finding itself)."""
    running, made = _job_component()
    made["spec"]["suspend"] = False
    new = _with_gpus(made, "8")
    old = _unowned(new)
    old["spec"]["parallelism"] = 0
    app = _hardened_app(running)
    assert not (await _job_review(app, "UPDATE", new, old))["allowed"]


async def test_a_tenants_job_of_the_components_name_keeps_the_admitted_flavor() -> None:
    """AppWrapper t/aw (Job ``j``: 1 pod of 1 GPU) queued; the tenant creates ``j``
    suspended under it with 1 GPU per pod but ``nodeSelector`` of another flavor's nodes:
    allowed at CREATE, and at resume after admission (the admission's flavor is
    ``gpu: t4``, which pykueue's Workload would show; the tenant's pods go to ``a100``).
    Closed: refused at both (``spec.template.spec.nodeSelector``); the resume passes once
    the Job carries the admitted flavor's nodeSelector and toleration, as the controller's
    own would."""
    _, made = _job_component()
    queued = aw(_with_gpus(job("j", 1), "1"))
    evil = copy.deepcopy(made)
    evil["spec"]["suspend"] = True
    evil["spec"]["template"]["spec"]["nodeSelector"] = {"gpu": "a100"}
    app = _app(queued)
    out = await _job_review(app, "CREATE", evil)
    assert not out["allowed"] and out["status"]["message"].startswith(
        "spec.template.spec.nodeSelector: "), out
    admitted = KIND.injected(queued, {"aw-0": ({"gpu": "t4"}, [
        {"key": "gpu", "operator": "Equal", "value": "t4", "effect": "NoSchedule"}])})
    resumed = copy.deepcopy(evil)
    resumed["spec"]["suspend"] = False
    out = await _job_review(_app(admitted), "UPDATE", resumed, evil)
    assert not out["allowed"], "j with another flavor's nodeSelector ran"
    placed = copy.deepcopy(resumed)
    placed["spec"]["template"]["spec"].update(
        nodeSelector={"gpu": "t4"}, tolerations=copy.deepcopy(
            admitted["spec"]["components"][0]["podSetInfos"][0]["tolerations"]))
    assert (await _job_review(_app(admitted), "UPDATE", placed, evil))["allowed"]


def _claiming(obj: dict[str, Any], template: str, path: tuple[Any, ...]) -> dict[str, Any]:
    """``obj`` whose pod template at ``path`` claims ResourceClaimTemplate ``template``
    (one claim ``gpu``, used by the first container)."""
    out = copy.deepcopy(obj)
    pod = out
    for key in path:
        pod = pod[key]
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": template}]
    pod["spec"]["containers"][0].setdefault("resources", {})["claims"] = [{"name": "gpu"}]
    return out


async def test_a_job_of_the_components_name_claims_no_other_devices() -> None:
    """AppWrapper t/aw (Job ``j``: 1 pod claiming ResourceClaimTemplate ``one-gpu``) queued;
    the tenant creates ``j`` under it claiming ``eight-gpus`` (same container requests)."""
    pod = ("spec", "template")
    queued = aw(_claiming(_with_gpus(job("j", 1), "1"), "one-gpu", pod))
    _, made = _job_component()
    evil = _claiming(made, "eight-gpus", pod)
    evil["spec"]["suspend"] = True
    out = await _job_review(_app(queued), "CREATE", evil)
    assert not out["allowed"], "j claiming eight-gpus created under aw (admitted: one-gpu)"


async def test_a_jobset_of_the_components_name_claims_no_other_devices() -> None:
    """The same for JobSet component ``js``: the tenant's JobSet ``js`` claims ``eight-gpus``
    where the component claims ``one-gpu``."""
    rj = ("spec", "replicatedJobs", 0, "template", "spec", "template")
    running, made = _jobset_component()
    comp = running["spec"]["components"][0]
    comp["template"] = _claiming(comp["template"], "one-gpu", rj)
    evil = _claiming(made, "eight-gpus", rj)
    assert not await _jobset_review(_app(running), "CREATE", evil)


def _jobsets_app(appwrapper: dict[str, Any], jobset: dict[str, Any]) -> Any:
    """The webhook app over stores as pykueue watches them by default: the AppWrapper's, and
    the side store of every JobSet (``CHILD_JOBSETS``, the JobSet kind's ``side_stores``)
    holding the AppWrapper's unlabelled JobSet; the JobSet kind's own store (labelled JobSets)
    does not."""
    stores = {KIND.key: Store(JOBS), CHILD_JOBSETS: Store(JOBSETS)}
    stores[KIND.key].put(appwrapper)
    stores[CHILD_JOBSETS].put(jobset)
    by_kind = {(JOBSET.api_group, JOBSET.kind): (JOBSET.key, CHILD_JOBSETS)}
    ctx = SimpleNamespace(store=lambda k: stores.get(k) or Store(JOBS), synced=True,
                          settings=Settings(),
                          informers=SimpleNamespace(informers=dict.fromkeys(stores),
                                                    keys_for=lambda g, k: by_kind.get((g, k), ())))
    return make_app(admission=StoreAdmissionLookup(ctx, default_registry()))  # type: ignore[arg-type]


async def test_a_jobset_components_job_resumed_with_bigger_pods_is_refused() -> None:
    """brk31 M3, closed: AppWrapper t/aw running, its JobSet ``js`` made by the controller (1
    Job of 1 pod of 1 GPU); the JobSet operator's Job ``js-w-0``. The tenant suspends the
    JobSet (allowed: no resume), so the operator suspends ``js-w-0``; changes the Job's
    container to 8 GPUs (the API server allows a suspended Job's resources since v1.36:
    feature gate ``MutablePodResourcesForSuspendedJobs``, beta, on by default); resumes the
    JobSet (allowed: its replicatedJobs are still the component's), and the JobSet operator
    (or the tenant) resumes ``js-w-0``. Before, with the default webhooks the Job webhook was
    not even called (``vjob``: labelled Jobs; ``vappwrapper-wrapped-job``: a Job the
    AppWrapper controls itself, not its JobSet's), and when called it found the Job's
    ancestor only through a store holding the AppWrapper's unlabelled JobSet (with
    ``manage_jobs_without_queue_name``, or a TrainJob's store of every JobSet), so
    ``child_job_template`` answered unknown and the resume passed. Now the JobSet kind
    watches every JobSet (``CHILD_JOBSETS``), the ancestor walk reads the JobSet there
    (``framework.stored_object``), and ``vappwrapper-jobset-job`` sends such a Job (its pod
    template labelled with the AppWrapper's name) to the Job webhook: the resume is refused
    (the JobSet operator's too: the JobSet then stays with its Job suspended, which is the
    tenant's loss). Without the JobSet in any store the answer stays unknown (allowed); the
    reconciler and the extender hold such a Job through the same walk."""
    running, made = _jobset_component()
    suspended = copy.deepcopy(_jobsets_job(made, "1"))  # its template is the JobSet's
    suspended["spec"]["suspend"] = True
    suspended["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}
    resumed = copy.deepcopy(suspended)
    resumed["spec"]["suspend"] = False
    out = await _job_review(_jobsets_app(running, made), "UPDATE", resumed, suspended)
    assert not out["allowed"], "js-w-0 resumed with 8 GPUs a pod on js's share of 1 GPU"
    assert "'nvidia.com/gpu': 8" in out["status"]["message"], out["status"]["message"]
    # The same Job resumed as it was made passes (the JobSet operator's own resume).
    same = copy.deepcopy(_jobsets_job(made, "1"))
    same["spec"]["suspend"] = True
    unchanged = copy.deepcopy(same)
    unchanged["spec"]["suspend"] = False
    out = await _job_review(_jobsets_app(running, made), "UPDATE", unchanged, same,
                            user=JOBSET_CONTROLLER)
    assert out["allowed"], out
    # Without the JobSet in a store the ancestor is unknown: the rules cannot judge it.
    assert (await _job_review(_app(running), "UPDATE", resumed, suspended))["allowed"]


# ------------------------------------------------------------------------------ the lanes

# Seconds a lane waits for the other at a point of the certificate race (the other lane,
# unhindered, gets there in milliseconds).
PATIENCE = 1.0


def test_two_lanes_making_certs_at_once_leave_a_consistent_pair(tmp_path: Path) -> None:
    """brk31 L1, closed: the interleaving two lanes' ``pykueue_up`` could take on a missing
    certs/out (each runs ``python -m certs.generate --out certs/out``): both find no CA and
    make one; lane a writes its CA, lane b its CA and then its serving certificate, lane a
    its serving certificate last. tls.crt was then lane a's, signed by lane a's CA, and
    ca.crt lane b's: each lane's pykueue failed TLS verification (``/readyz``, the API
    server's webhook calls; a 20-fold run of two ``certs.generate`` processes started
    together showed it once). Each lane waits here for the other at those points, at most
    ``PATIENCE`` seconds: with the directory's lock (``pki._locked``) the other lane cannot
    get there, the waits lapse, and the pair is one lane's."""
    out = tmp_path / "out"
    real_write = pki._write
    both_made_ca = threading.Barrier(2, timeout=PATIENCE)
    a_wrote_ca, b_wrote_tls = threading.Event(), threading.Event()

    def write(path: Path, data: bytes, *, private: bool) -> None:
        lane = threading.current_thread().name
        if path.name == "ca.key":
            with contextlib.suppress(threading.BrokenBarrierError):
                both_made_ca.wait()
            if lane == "b":
                a_wrote_ca.wait(PATIENCE)
        if path.name == "tls.key" and lane == "a":
            b_wrote_tls.wait(PATIENCE)
        real_write(path, data, private=private)
        if path.name == "ca.crt" and lane == "a":
            a_wrote_ca.set()
        if path.name == "tls.crt" and lane == "b":
            b_wrote_tls.set()

    errors: list[BaseException] = []

    def lane_run() -> None:
        try:
            pki.ensure_certs(out)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    with mock.patch.object(pki, "_write", write):
        threads = [threading.Thread(target=lane_run, name=n) for n in ("a", "b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert not errors, errors
    ca = x509.load_pem_x509_certificate((out / "ca.crt").read_bytes())
    tls = x509.load_pem_x509_certificate((out / "tls.crt").read_bytes())
    try:
        tls.verify_directly_issued_by(ca)
    except (ValueError, InvalidSignature) as e:
        raise AssertionError("certs/out's tls.crt is not signed by its ca.crt") from e


_LF_CONFTEST = "from tests.lanes import pytest_runtestloop  # noqa: F401\n"
# Fails once both lanes have collected (so each lane takes a file, whatever their start).
_FAILING = """import os
import time
from pathlib import Path


def test_fails():
    lanes = Path(os.environ["PYKUEUE_TEST_LANES"])
    end = time.monotonic() + 60
    while time.monotonic() < end and not all(
            (lanes / f"collected-{lane}").exists() for lane in "ab"):
        time.sleep(0.1)
    time.sleep(1)
    assert False
"""


def test_lastfailed_after_two_lanes_names_every_failure(tmp_path: Path) -> None:
    """A suite of 4 files, each a test that fails once both lanes run, run as hack/test.sh runs
    its lanes (two pytests, ``PYKUEUE_TEST_LANE`` a and b, one lanes directory, pytest's
    cache on as ``make test`` has it): ``.pytest_cache/v/cache/lastfailed`` names the 4
    failures (brk31 L2, closed: it named only those of the lane that ended last; the lanes
    now merge it, ``tests.lanes._LastFailedMerge``)."""
    suite = tmp_path / "suite"
    (suite / "tests" / "unit").mkdir(parents=True)
    (suite / "conftest.py").write_text(_LF_CONFTEST)
    (suite / "pytest.ini").write_text("[pytest]\n")
    for i in range(4):
        (suite / "tests" / "unit" / f"test_f{i}.py").write_text(_FAILING)
    env = {**os.environ, "PYKUEUE_TEST_LANES": str(tmp_path / "lanes"),
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    procs = [subprocess.Popen([sys.executable, "-m", "pytest", "-q", str(suite)], cwd=suite,
                              env={**env, "PYKUEUE_TEST_LANE": lane},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for lane in ("a", "b")]
    for p in procs:
        p.wait(120)
    ran = [line for lane in ("a", "b") if (tmp_path / "lanes" / f"ran-{lane}").exists()
           for line in (tmp_path / "lanes" / f"ran-{lane}").read_text().split()]
    assert len(ran) == 4, ran
    cache = json.loads((suite / ".pytest_cache" / "v" / "cache" / "lastfailed").read_text())
    assert len(cache) == 4, f"lastfailed names {sorted(cache)} of 4 failures"

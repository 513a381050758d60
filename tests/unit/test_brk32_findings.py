"""brk32: a breaker's findings against 1e2faaa (the child-Job rules of 4505eb3, the lanes of
287472f and 1e2faaa). Default settings (``webhook.child_job_creators`` empty, Kueue's
behaviour) unless a test says. Strict xfails: each passes once its finding is closed.
Closed since: H2 (the webhooks compare the controller reference's group, kind, name and uid,
``framework.controller_identity``); H1 and H3 (``child_job_sized_by``: the pod template a
child Job's share was sized by, a JobSet's or TrainJob's replicatedJob's, an MPIJob's
launcher's, a RayJob's submitter's; the Job webhook refuses a create or resume whose pods ask
more, the reconciler sets such a running Job to parallelism 0, and the extender places no pod
of it asking more GPUs); M1 (lanes, 235c861); L1 (a lane stopped by ``-x`` makes
the other take no further file: ``<dir>/stop``); L2 (a collect-only run writes
``<dir>/collect-only``, and ``lanes_check`` then finds nothing to check). Open: H4 (a lab reproducer
in tests/e2e/test_brk32_findings.py).

H1 (adopted while suspended, resumed with bigger pods: the template is the AppWrapper's
only): ``_adopted_running_errors`` refuses an UPDATE that makes a *running* Job a managed
ancestor's child; a suspended one may be made so, "it is checked when resumed". At resume
``_child_share_errors`` checks the count and ``_child_template_errors`` the pods, but the
latter only for an ancestor that gives a template (``child_job_template``: an AppWrapper's
Job or JobSet component). A Job made a JobSet's (TrainJob's, MPIJob's, RayJob's) child while
suspended is checked for its count only when resumed. Steps (brk31 H1's JobSet case, split
in two writes): the tenant makes Job ``train-w-0`` (1 pod of 8 GPUs) suspended before the
JobSet ``train`` (1 Job of 1 pod of 1 GPU), so the JobSet operator's create fails
(AlreadyExists, jobset v0.11.1 ``createJobs`` retries); once ``train`` is admitted, an UPDATE
gives the suspended Job the JobSet's controller ownerReference and its
``jobset.sigs.k8s.io/restart-attempt``/``replicatedjob-name`` labels (allowed: suspended);
the JobSet operator lists it as its Job (the owner-uid index) and resumes it
(``resumeJobsIfNecessary``, merging the admission's nodeSelector and podset label): allowed
(share 1, count 1, no template), also with ``webhook.child_job_creators`` naming the JobSet
operator (it is the one resuming). ``_hold_to_share`` compares counts only. 8 GPUs run on an
admission of 1, on the admitted flavor's nodes. An unlabelled Job is reviewed by no Job
webhook at all in the default (labelled-only) configuration. The same at CREATE: a Job created
running under ``train`` with the name of one of its Jobs (after deleting the operator's, or
in a restart's delete-and-create) is checked for its count only. And the same for the other
kinds whose Jobs have a share without a template: a TrainJob's JobSet's Jobs, an MPIJob's
launcher, a RayJob's submitter.

H2 (a controller changed under the same uid): ``_adopted_running_errors`` and the CrdRules
check of 4505eb3 compare ``controller_uid`` only. A running Job whose controller
ownerReference carries the AppWrapper's uid under another kind (``AppWrapperX``: no
registered kind, so no ancestor; the garbage collector cannot map the kind, so it deletes
nothing) or another name is nobody's child; one UPDATE that rewrites the reference's kind
(and ``parallelism: 0`` to 1) makes it the AppWrapper component's Job with the uid
unchanged: no adoption seen, no resume (so no template check), the count within the share.
brk31 H1's 8-GPU pod on an admission of 1, by a different first write. The same for a
JobSet given the AppWrapper by such an UPDATE (CrdRules ``child_object_errors`` runs on a
changed uid only), and for a Deployment or StatefulSet (the wrapped-object webhook's
``joined_object_errors`` runs on a changed uid only): breaker14's re-created Deployment of 3
replicas, refused at CREATE since, is created with the reference under kind ``AppWrapperX``
(no webhook selects it) and then renamed: allowed, and no reconciler rule holds an
AppWrapper's Deployment. ``webhook.child_job_creators`` closes the Job form (a running Job
that had no managed ancestor is made a child: ``_child_runner_errors``), not the Deployment
form (its creators check is inside the skipped rule). A running Job in a namespace where
unlabelled Jobs are queued: brk31's way (queued in its own LocalQueue with parallelism 0,
admitted at once).

H3 (every queued JobSet's Jobs take bigger pods while it waits: brk31 M3 is not the
AppWrapper's only): jobset v0.11.1 makes a suspended JobSet's Jobs at once, suspended, never
started (``constructJob``), labelled with the replicatedJob template's labels only (no
``kueue.x-k8s.io/queue-name``). Kubernetes v1.36 lets a suspended, never-started Job's
container resources change (``MutablePodResourcesForSuspendedJobs``, beta, on by default:
``shouldAllowMutablePodTemplate``). While the tenant's labelled JobSet ``train`` (1 Job of 1
pod of 1 GPU) is queued, ``kubectl patch job train-w-0`` sets its container to 8 GPUs: no Job
webhook is called (``vjob`` selects labelled Jobs), and none refuses it when called (the
unlabelled overlay: a suspended child). pykueue admits ``train`` for 1 GPU (its Workload is the
JobSet's replicatedJobs, unchanged), jobset resumes ``train-w-0`` (``resumeJob`` merges the
admission's nodeSelector, tolerations and labels, not resources): the resume is checked for its
count only, ``_hold_to_share`` compares counts, the extender places the pod (its ancestor is
admitted). 8 GPUs on an admission of 1 on the admitted flavor, no race, no ownerReference
written. The same for a TrainJob's JobSet's Jobs, and for an MPIJob's launcher (mpi-operator
v0.8.0 makes it suspended at startup, ``launcherCreationPolicy: AtStartup``, and resumes it
syncing its scheduling directives only). A top-level Job so patched no longer matches its
Workload (``admission_mismatch``): stopped and queued again; a child Job is in no Workload.

The lanes (hack/test.sh, tests/lanes.py): M1, a file taken after a wait for the build in
another directory than the stand-in next item's failed its first setup ("previous item was
not torn down properly"), was found here at 4134910 and closed in main meanwhile (235c861,
after session 32's fresh run failed so; test_lanes.py's
``test_a_file_taken_after_waiting_runs_whatever_the_stand_in_was``). L1: with ``-x`` the
other lane runs on. L2: ``make test PYTEST_ARGS=--co`` exits 1.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from app.config import ServerSettings, Settings, WebhookSettings
from app.controllers.admission_lookup import StoreAdmissionLookup, StoreExtenderState
from app.extender.nodestore import NodeStore
from app.extender.placement import PodFacts
from app.integrations import default_registry
from app.integrations.batchjob.job import KIND as BATCH_JOB
from app.integrations.framework import child_share
from app.integrations.jobset.jobset import KIND as JOBSET
from app.integrations.reconciler import JobReconciler
from app.kube.client import JOBS
from app.kube.context import CHILD_JOBS, WL
from app.kube.informers import Store
from app.main import create_app
from app.wire.owners import OwnerRef
from tests.unit.test_appwrapper import job
from tests.unit.test_appwrapper_child_templates import (
    _app,
    _job_component,
    _jobset_component,
    _with_gpus,
)
from tests.unit.test_appwrapper_wrapped import decide, object_review, owned, queued_appwrapper
from tests.unit.test_brk30b_findings import (
    JOBSET_CONTROLLER,
    QUEUE,
    _job_review,
    _jobset_review,
    _reconciler,
)
from tests.unit.test_brk31_findings import _held_with_j
from tests.unit.test_lanes import CONFTEST, ROOT, waves
from tests.unit.test_webhook import CONTROLLER, make_app

JOBSET_REF = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "train",
              "uid": "p1", "controller": True, "blockOwnerDeletion": True}


def _train() -> dict[str, Any]:
    """JobSet t/train (labelled, replicatedJob ``w``: 1 Job of 1 pod of 1 GPU), running."""
    pod = {"spec": {"containers": [{"name": "c", "resources": {
        "requests": {"nvidia.com/gpu": "1"}}}]}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "train", "namespace": "t", "uid": "p1",
                         "labels": {QUEUE: "lq"}, "resourceVersion": "1"},
            "spec": {"suspend": False, "replicatedJobs": [{"name": "w", "replicas": 1,
                     "template": {"spec": {"parallelism": 1, "completions": 1,
                                           "template": pod}}}]}}


def _train_app(*, creators: tuple[str, ...] = ()) -> Any:
    """The webhook app with ``_train`` admitted in its store; ``creators``:
    ``webhook.child_job_creators``."""
    train = _train()
    jobsets = Store(JOBS)
    jobsets.put(train)
    stores = {JOBSET.key: jobsets}
    ctx = SimpleNamespace(store=lambda k: stores.get(k) or Store(JOBS), synced=True,
                          settings=Settings())
    admission = StoreAdmissionLookup(ctx, default_registry())  # type: ignore[arg-type]
    if not creators:
        return make_app(admission=admission)
    app = create_app(Settings(
        controllers_enabled=False, server=ServerSettings(metrics_auth=False),
        webhook=WebhookSettings(controller_usernames=[CONTROLLER],
                                child_job_creators=list(creators))))
    app.state.admission_lookup = admission
    return app


def _tenants_train_w_0() -> dict[str, Any]:
    """The tenant's Job ``train-w-0`` (queued in its own LocalQueue ``mine``), 1 pod of 8
    GPUs, suspended, made before the JobSet: no ownerReference."""
    out = _with_gpus(job("train-w-0", 1), "8")
    out["metadata"].update(namespace="t", uid="uid-tenant", labels={QUEUE: "mine"})
    out["spec"]["suspend"] = True
    return out


def _adopted(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` given the JobSet's controller ownerReference and the labels the JobSet
    operator reads (``restart-attempt``, ``replicatedjob-name``)."""
    out = copy.deepcopy(obj)
    out["metadata"]["labels"].update({"jobset.sigs.k8s.io/restart-attempt": "0",
                                      "jobset.sigs.k8s.io/replicatedjob-name": "w",
                                      "jobset.sigs.k8s.io/jobset-name": "train"})
    out["metadata"]["ownerReferences"] = [dict(JOBSET_REF)]
    return out


async def test_h1_the_one_update_adoption_while_running_is_refused() -> None:
    """What 4505eb3 closed (passes: not the finding): the same Job running, adopted and
    raised to 1 pod in one UPDATE, is refused (``_adopted_running_errors``)."""
    old = _tenants_train_w_0()
    old["spec"].update(suspend=False, parallelism=0)
    new = _adopted(old)
    new["spec"]["parallelism"] = 1
    out = await _job_review(_train_app(), "UPDATE", new, old)
    assert not out["allowed"]


@pytest.mark.parametrize(("creators", "resumer"), [
    ((), "alice"), ((), JOBSET_CONTROLLER), ((JOBSET_CONTROLLER,), JOBSET_CONTROLLER)],
    ids=["default-tenant-resumes", "default-operator-resumes",
         "child_job_creators-operator-resumes"])
async def test_h1_a_job_adopted_by_a_jobset_while_suspended_resumes_no_bigger_pods(
        resumer: str, creators: tuple[str, ...]) -> None:
    """Two writes instead of one: the suspended ``train-w-0`` (8 GPUs a pod) adopted by
    ``train`` (alice's UPDATE), then resumed (by alice, or by the JobSet operator's
    ``resumeJobsIfNecessary``)."""
    app = _train_app(creators=creators)
    old = _tenants_train_w_0()
    adopted = _adopted(old)
    assert child_share(JOBSET, {"metadata": {"uid": "p1", "name": "train"}, "spec": {
        "replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {
            "parallelism": 1}}}]}}, adopted) == 1
    first = await _job_review(app, "UPDATE", adopted, old)
    resumed = copy.deepcopy(adopted)
    resumed["spec"]["suspend"] = False
    resumed["spec"]["template"]["spec"]["nodeSelector"] = {"gpu": "a100"}  # the admission's
    second = await _job_review(app, "UPDATE", resumed, adopted, user=resumer)
    assert not (first["allowed"] and second["allowed"]), \
        "train-w-0 (8 GPUs a pod) adopted while suspended and resumed on train's 1 GPU"


async def test_h1_a_job_created_under_a_jobset_with_its_jobs_name_runs_no_bigger_pods() -> None:
    """The other way in: a Job the tenant creates running under the admitted ``train`` with
    the name of a Job its operator makes (``train-w-0``: share 1), in the moment between its
    deletion of the operator's Job and the operator's re-creation (or a JobSet restart's
    delete-and-create), 1 pod of 8 GPUs: checked for its count only (``_child_share_errors``
    at CREATE), as a JobSet's child never has a template."""
    made = _adopted(_tenants_train_w_0())
    made["spec"]["suspend"] = False
    out = await _job_review(_train_app(), "CREATE", made)
    assert not out["allowed"], "train-w-0 created running with 8 GPUs a pod under train"


def _renamed_ref(obj: dict[str, Any], field: str, value: str) -> dict[str, Any]:
    """``obj`` whose controller ownerReference names the same uid with ``field`` (``kind``,
    ``name``) set to ``value``."""
    out = copy.deepcopy(obj)
    for ref in out["metadata"]["ownerReferences"]:
        ref[field] = value
    return out


@pytest.mark.parametrize("how", ["create-refused", "managed-elsewhere"])
async def test_h2_brk31_h1s_update_from_no_owner_is_refused(how: str) -> None:
    """What 4505eb3 closed (passes): brk31 H1's UPDATE from a Job without an owner."""
    _, made = _job_component()
    made["metadata"]["uid"] = "uid-tenant"
    made["spec"]["suspend"] = False
    new = _with_gpus(made, "8")
    new["spec"]["parallelism"] = 1
    old = copy.deepcopy(new)
    old["metadata"].pop("ownerReferences")
    old["spec"]["parallelism"] = 0
    assert not (await _job_review(_app(_held_with_j(how)), "UPDATE", new, old))["allowed"]


@pytest.mark.parametrize("how", ["create-refused", "managed-elsewhere"])
@pytest.mark.parametrize(("field", "value"), [("kind", "AppWrapperX"), ("name", "aw-x")])
async def test_h2_a_running_job_whose_reference_changes_kind_under_the_same_uid_is_refused(
        how: str, field: str, value: str) -> None:
    """The AppWrapper t/aw admitted, its Job component ``j`` (1 pod of 1 GPU) never created
    by its controller (``_held_with_j``); the tenant's running Job ``j`` (parallelism 0, pods
    of 8 GPUs) names aw's uid as controller under kind ``AppWrapperX`` (or name ``aw-x``:
    the garbage collector then deletes the Job as dangling once it looks, so the UPDATE
    races it); one UPDATE names ``AppWrapper`` ``aw`` and sets parallelism 1."""
    _, made = _job_component()
    made["metadata"]["uid"] = "uid-tenant"
    made["spec"]["suspend"] = False
    new = _with_gpus(made, "8")
    new["spec"]["parallelism"] = 1
    old = _renamed_ref(new, field, value)
    old["spec"]["parallelism"] = 0
    out = await _job_review(_app(_held_with_j(how)), "UPDATE", new, old)
    assert not out["allowed"], "8-GPU pod made aw's component j while running: allowed"


async def test_h2_a_running_jobset_whose_reference_changes_kind_under_the_same_uid_is_checked(
        ) -> None:
    """The AppWrapper t/aw (JobSet ``js``: 1 Job of 1 pod of 1 GPU) admitted; the tenant's
    running JobSet ``js`` (pods of 8 GPUs) names aw's uid under kind ``AppWrapperX``; the
    UPDATE rewrites the kind."""
    running, made = _jobset_component()
    bigger = copy.deepcopy(made)
    bigger["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": "8"}}
    assert not await _jobset_review(_app(running), "UPDATE", bigger,
                                    _renamed_ref(bigger, "kind", "AppWrapperX"))


async def test_h2_a_jobset_adopted_from_no_owner_is_checked() -> None:
    """What 4505eb3 closed (passes): the same UPDATE from a JobSet without an owner."""
    running, made = _jobset_component()
    bigger = copy.deepcopy(made)
    bigger["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": "8"}}
    old = copy.deepcopy(bigger)
    old["metadata"].pop("ownerReferences")
    assert not await _jobset_review(_app(running), "UPDATE", bigger, old)


def _operators_train_w_0(gpus: str) -> dict[str, Any]:
    """Job ``train-w-0`` as jobset v0.11.1 makes it for the suspended JobSet ``train``
    (suspended, its controller reference, the jobset labels; no queue name), its container
    asking ``gpus`` GPUs."""
    out = _with_gpus(job("train-w-0", 1), gpus)
    out["metadata"].update(namespace="t", uid="uid-op", labels={
        "jobset.sigs.k8s.io/restart-attempt": "0",
        "jobset.sigs.k8s.io/replicatedjob-name": "w",
        "jobset.sigs.k8s.io/jobset-name": "train"}, ownerReferences=[dict(JOBSET_REF)])
    out["spec"]["suspend"] = True
    return out


async def test_h3_a_queued_jobsets_job_enlarged_while_suspended_is_not_resumed_bigger(
        ) -> None:
    """``train`` admitted (1 GPU a pod); its Job ``train-w-0`` was patched to 8 GPUs while
    the JobSet was queued (the patch itself passes pykueue: a suspended child, and the
    default webhooks do not even see it); the JobSet operator resumes it, and
    ``_hold_to_share`` leaves it at its count of 1."""
    app = _train_app()
    made = _operators_train_w_0("1")
    patched = _operators_train_w_0("8")
    edit = await _job_review(app, "UPDATE", patched, made)
    resumed = copy.deepcopy(patched)
    resumed["spec"]["suspend"] = False
    resumed["spec"]["template"]["spec"]["nodeSelector"] = {"gpu": "a100"}
    resume = await _job_review(app, "UPDATE", resumed, patched, user=JOBSET_CONTROLLER)
    rec = _reconciler()
    await JobReconciler._hold_to_share(rec, resumed, JOBSET, _train())  # type: ignore[arg-type]
    held = bool(rec.ctx.client.replaced)
    assert not (edit["allowed"] and resume["allowed"] and not held), \
        "train-w-0 enlarged to 8 GPUs a pod while queued, resumed on train's admission of 1"


async def test_h3_the_reconciler_sets_an_enlarged_jobset_job_to_no_pods() -> None:
    """Without any webhook (the default ones do not see an unlabelled Job): the JobSet
    operator resumed ``train-w-0`` enlarged to 8 GPUs a pod; ``_hold_to_share`` sets it to
    parallelism 0 (its share's podSet asks 1 GPU a pod), with a Warning saying so. The same
    Job as the operator made it keeps its pod."""
    resumed = _operators_train_w_0("8")
    resumed["spec"]["suspend"] = False
    rec = _reconciler()
    await JobReconciler._hold_to_share(rec, resumed, JOBSET, _train())  # type: ignore[arg-type]
    assert [j["spec"]["parallelism"] for j in rec.ctx.client.replaced] == [0]
    same = _operators_train_w_0("1")
    same["spec"]["suspend"] = False
    rec = _reconciler()
    await JobReconciler._hold_to_share(rec, same, JOBSET, _train())  # type: ignore[arg-type]
    assert rec.ctx.client.replaced == []


def _extender_state(child: dict[str, Any], store: str) -> Any:
    """``StoreExtenderState`` with ``_train`` admitted and ``child`` in ``store``."""
    train = _train()
    wl = {"metadata": {"namespace": "t", "name": JOBSET.workload_name(train),
                       "resourceVersion": "1"},
          "spec": {"queueName": "lq", "podSets": []},
          "status": {"admission": {"clusterQueue": "cq", "podSetAssignments": []},
                     "conditions": [{"type": "QuotaReserved", "status": "True"},
                                    {"type": "Admitted", "status": "True"}]}}
    stores = {JOBSET.key: Store(JOBS), store: Store(JOBS), WL: Store(JOBS)}
    stores[JOBSET.key].put(train)
    stores[store].put(child)
    stores[WL].put(wl)
    ctx = SimpleNamespace(store=lambda k: stores.get(k) or Store(JOBS), synced=True,
                          settings=Settings())
    return StoreExtenderState(ctx, NodeStore("nvidia.com/gpu"),  # type: ignore[arg-type]
                              default_registry())


def _pod_of(job: dict[str, Any], gpus: int) -> PodFacts:
    meta = job["metadata"]
    return PodFacts("t", f"{meta['name']}-abcde", job_name=meta["name"], job_uid=meta["uid"],
                    gpus=gpus, uid="pod-uid",
                    controller=OwnerRef("batch/v1", "Job", meta["name"], meta["uid"]))


@pytest.mark.parametrize("store", [CHILD_JOBS, BATCH_JOB.key], ids=["unlabelled", "labelled"])
def test_h1_h3_the_extender_places_no_pod_of_a_child_job_bigger_than_its_podset(
        store: str) -> None:
    """Whatever let the Job through (no webhook called, bypassed, or down), a pod of
    ``train-w-0`` asking 8 GPUs gets no node on ``train``'s admission of 1 GPU a pod; one
    asking 1 does. The Job unlabelled (a JobSet's own: the child Job store), or labelled by
    the tenant (H1: the Job kind's store)."""
    child = _operators_train_w_0("8")
    child["spec"]["suspend"] = False
    state = _extender_state(child, store)
    why = state.withheld(_pod_of(child, 8))
    assert "requests 8 nvidia.com/gpu, more than the 1" in why, why
    assert "JobSet t/train" in why
    assert state.withheld(_pod_of(child, 1)) == ""
    assert state.workload_for_pod("t", "train-w-0", "uid-op") is None  # placed as its ancestor


def test_the_extender_holds_an_unlabelled_child_jobs_pods_until_its_ancestor_is_admitted(
        ) -> None:
    """A JobSet's unlabelled Job found in the child Job store: while ``train``'s Workload is
    not admitted its pods get no node (before, a Job outside the Job kind's store covered
    nothing and its pods passed)."""
    child = _operators_train_w_0("1")
    state = _extender_state(child, CHILD_JOBS)
    state.ctx.store(WL).remove(f"t/{JOBSET.workload_name(_train())}")
    assert "whose Workload is not admitted" in state.withheld(_pod_of(child, 1))


# ------------------------------------------------------------------------------ the lanes

def _lanes_suite(tmp: Path, files: dict[str, str]) -> Path:
    """A suite at ``tmp/suite`` run through tests/lanes.py (test_lanes.py's CONFTEST: the
    session, module and test records), its files ``path -> body``."""
    suite = tmp / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (suite / "pytest.ini").write_text("[pytest]\n")
    for path, body in files.items():
        (suite / path).parent.mkdir(parents=True, exist_ok=True)
        (suite / path).write_text(body)
    return suite


def test_l1_with_x_the_other_lane_takes_no_file_after_a_failure(tmp_path: Path) -> None:
    """``make test -x`` (hack/test.sh gives both lanes the arguments): the conformance file,
    lane a's first (``lane_a_only``), fails at once; 8 other files of 1.5 s each. Lane a
    stops; lane b runs every one of the 8, about 12 s, where one or two (those it had taken
    when lane a failed) would do."""
    files = {"tests/conformance/test_pinned.py": "def test_fails():\n    assert False\n"}
    for i in range(8):
        files[f"tests/unit/test_s{i}.py"] = "import time\n\n\ndef test_s():\n    time.sleep(1.5)\n"
    suite, lanes, log = _lanes_suite(tmp_path, files), tmp_path / "lanes", tmp_path / "log"
    procs = []
    for lane in ("a", "b"):
        env = {**os.environ, "PYKUEUE_TEST_LANE": lane, "PYKUEUE_TEST_LANES": str(lanes),
               "LANES_TEST_LOG": str(log), "PYTHONPATH": str(ROOT)}
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", str(suite)],
            cwd=suite, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    for p in procs:
        p.wait(120)
    ran_b = (lanes / "ran-b").read_text().split() if (lanes / "ran-b").exists() else []
    assert procs[0].returncode == 1
    assert len(ran_b) <= 4, f"lane b ran {len(ran_b)} files after lane a's -x failure"


@pytest.mark.parametrize(("replicas", "gpus"), [(1, "8"), (3, "1")], ids=["bigger", "more"])
async def test_h2_a_deployment_whose_reference_changes_kind_under_the_same_uid_is_refused(
        replicas: int, gpus: str) -> None:
    """The wrapped-object webhook has the same test (``controller_uid(old) !=
    controller_uid(new)``): AppWrapper research/dep (running) wraps Deployment ``dep-d`` (1
    replica of 1 GPU); the tenant's running Deployment ``dep-d`` (8 GPUs a pod, or 3
    replicas) names dep's uid under kind ``AppWrapperX`` (no webhook selected it: not an
    AppWrapper's), then an UPDATE rewrites the kind: ``joined_object_errors`` is skipped, the
    replicas rule sees no raise (3 to 3) and the template rule no change. No reconciler rule
    holds an AppWrapper's Deployment (docs/security.md Known gaps). Where the webhook has
    ``webhook.child_job_creators`` the same holds: that check is in the skipped rule."""
    new = owned(replicas, gpus=gpus, labelled=True)
    resp = await decide(object_review(_renamed_ref(new, "kind", "AppWrapperX"), new),
                        queued_appwrapper())
    assert resp["allowed"] is False, f"dep-d ({replicas} x {gpus} GPU) joined dep by a rename"


async def test_h2_the_same_deployment_from_no_owner_is_refused() -> None:
    """What the uid test catches (passes): the same UPDATE from a Deployment without an
    owner."""
    new = owned(1, gpus="8", labelled=True)
    old = copy.deepcopy(new)
    old["metadata"].pop("ownerReferences")
    assert (await decide(object_review(old, new), queued_appwrapper()))["allowed"] is False


def test_l2_a_collect_only_run_of_the_lanes_passes_lanes_check(tmp_path: Path) -> None:
    """hack/test.sh where every binary is built runs lanes-check after lanes that ended 0;
    with ``--co`` each lane returns from ``pytest_runtestloop`` before writing
    ``collected-<lane>``, so ``lanes_check`` reports "no lane collected a file" and the
    script exits 1 (seen: a copy of hack/test.sh over two files, 'exit 1')."""
    suite = _lanes_suite(tmp_path, {"tests/unit/test_x.py": "def test_x():\n    pass\n"})
    lanes = tmp_path / "lanes"
    env = {**os.environ, "PYKUEUE_TEST_LANE": "a", "PYKUEUE_TEST_LANES": str(lanes),
           "LANES_TEST_LOG": str(tmp_path / "log"), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "--co", "-p", "no:cacheprovider",
                        str(suite)], cwd=suite, env=env, capture_output=True, timeout=120)
    assert r.returncode == 0, r.stdout.decode()[-2000:]
    lanes.mkdir(exist_ok=True)
    assert waves.lanes_check(lanes) == []

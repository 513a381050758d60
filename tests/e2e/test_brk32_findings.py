"""brk32 on the lab (tests/unit/test_brk32_findings.py has the unit reproducers and the rules).

H1: a Job the tenant made suspended before its JobSet (so the JobSet operator's create of it
fails, AlreadyExists), given the admitted JobSet's controller ownerReference while suspended
(``_adopted_running_errors`` refuses that for a running Job only), is resumed by the JobSet
operator (``resumeJobsIfNecessary``): its resume is checked for its count only.

H2: a Deployment wrapped by an AppWrapper, deleted by the tenant and created again with 3
replicas and a controller ownerReference naming the AppWrapper's uid under kind
``AppWrapperX`` (no webhook selects it; the garbage collector cannot map the kind, so it
deletes nothing), is made the AppWrapper's by an UPDATE that rewrites the kind: the
wrapped-object webhook compares the controller's uid only (breaker14's re-create, refused at
CREATE since, in two writes).

H3: a queued JobSet's Job, suspended and never started (jobset v0.11.1 makes them at once),
patched by the tenant (``edit``) to bigger pods (Kubernetes v1.36
``MutablePodResourcesForSuspendedJobs``, beta, on), is resumed by the JobSet operator once
pykueue admits the JobSet for its own (smaller) pods: no Job webhook sees the patch or the
resume (the Job carries no queue name), and ``_hold_to_share`` compares counts only.

H4: an admitted Job's pod deleted by the tenant is replaced at once by the Job controller
(``podReplacementPolicy`` ``TerminatingOrFailed``, the default without a
``podFailurePolicy``) while it runs out the termination grace period the tenant gave it
(kept Running here by kwok's ``lab.pykueue.dev/stops-slowly`` and the test's finalizer, as a
container ignoring SIGTERM for a day would be): every deletion adds a GPU pod Running on
the admission of one; the extender places each replacement (its Job is admitted).

Closed since: H1 and H3 (the extender places no pod of a child Job asking more GPUs than a
pod of the template its share was sized by, ``child_job_sized_by``; the reconciler sets such
a running Job to parallelism 0; the Job webhook, when it sees the Job, refuses the resume)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator

import pytest

from tests.e2e import test_jobset as js
from tests.e2e.conftest import operators_running
from tests.e2e.test_appwrapper import aw_operator, aw_queue  # noqa: F401 (fixtures)
from tests.e2e.test_breaker14_findings import wrapped  # noqa: F401 (a fixture)
from tests.e2e.test_deleted_job_quota_held import SLOWLY, release
from tests.e2e.test_job_being_deleted_stopped import HOLD, JOB_NAME, QUEUE
from tests.e2e.test_jobset import jobset_operator, pykueue_with_jobset  # noqa: F401 (fixtures)
from tests.e2e.test_workload_kinds import LONG, TOLERATION, gpu_container, gpu_queue
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module", autouse=True)
def _operators(lab: LabHandle) -> Iterator[None]:
    """AppWrapper's and JobSet's controllers before this module's pykueue starts (a CRD
    installed later is seen at its next discovery poll only)."""
    with operators_running(lab, "appwrapper", "jobset"):
        yield


def test_h2_a_deployment_whose_reference_changes_kind_joins_no_appwrapper(
        lab: LabHandle, wrapped: tuple[str, tuple[str, str]]) -> None:  # noqa: F811
    """AppWrapper ``dep`` (Deployment ``dep-d``, 1 one-GPU replica) admitted and running;
    the tenant (``edit``) deletes ``dep-d`` and creates it again with 3 replicas and the
    reference under kind ``AppWrapperX``; 20 s later (the garbage collector has looked) it
    patches the reference's kind to ``AppWrapper``."""
    ns, tenant = wrapped
    old = lab.get("deployment", "dep-d", "-n", ns)
    uid = lab.get("appwrapper", "dep", "-n", ns)["metadata"]["uid"]
    ref = {"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapperX",
           "name": "dep", "uid": uid, "controller": True}
    lab.kubectl(*tenant, "delete", "deployment", "dep-d", "-n", ns, "--wait=true")
    try:
        lab.kubectl(*tenant, "create", "-f", "-", input=json.dumps({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "dep-d", "namespace": ns,
                         "labels": old["metadata"].get("labels") or {},
                         "ownerReferences": [ref]},
            "spec": {**old["spec"], "replicas": 3}}))
        time.sleep(20)
        assert lab.get("deployment", "dep-d", "-n", ns)["metadata"]["ownerReferences"] == [
            ref], "the garbage collector took the Deployment (the premise fails)"
        r = lab.kubectl(*tenant, "patch", "deployment", "dep-d", "-n", ns, "--type=merge",
                        "-p", json.dumps({"metadata": {"ownerReferences": [
                            {**ref, "kind": "AppWrapper"}]}}), check=False)
        assert r.returncode != 0, "dep-d (3 replicas) made AppWrapper dep's by the rename"
    finally:
        lab.kubectl("delete", "deployment", "dep-d", "-n", ns, "--wait=false", check=False)


def _gpus(pod: dict) -> int:
    return sum(int((c.get("resources") or {}).get("requests", {}).get("nvidia.com/gpu", 0))
               for c in pod["spec"]["containers"])


def _running(lab: LabHandle, ns: str, selector: str) -> list[dict]:
    """The Running pods (being deleted or not: each holds its GPUs) matching ``selector``."""
    return [p for p in lab.get("pods", "-n", ns, "-l", selector)["items"]
            if p["status"].get("phase") == "Running"]


def _gpus_once_running(lab: LabHandle, ns: str, selector: str, seconds: float) -> int:
    """The GPUs the Running pods matching ``selector`` ask, once one runs; 0 when none runs
    within ``seconds`` (the finding closed)."""
    try:
        wait_for(lambda: _running(lab, ns, selector), seconds, f"a pod of {selector} Running")
    except AssertionError:
        return 0
    return sum(_gpus(p) for p in _running(lab, ns, selector))


def test_h3_a_queued_jobsets_job_enlarged_while_queued_runs_no_bigger_pod(
        lab: LabHandle, pykueue_with_jobset) -> None:  # noqa: F811
    """A 1-GPU ClusterQueue; the tenant's JobSet ``train`` (1 Job of one 1-GPU pod) queued in
    LocalQueue ``later``, which does not exist yet, so it waits; jobset makes
    ``train-workers-0`` suspended. The tenant patches that Job's container to 4 GPUs; then
    ``later`` is created: pykueue admits ``train`` (1 GPU) and jobset resumes the Job."""
    with js.queue(lab, "brk32-h3", 1) as ns:
        as_tenant = js.tenant(lab, ns)
        train = json.loads(js._long_jobset("train", ns, 1))
        train["metadata"]["labels"][QUEUE] = "later"
        lab.kubectl(*as_tenant, "apply", "-f", "-", input=json.dumps(train))
        job = wait_for(lambda: next(iter(lab.get("jobs", "-n", ns)["items"]), None), 60,
                       "train-workers-0 made (suspended)")
        assert job["metadata"]["name"] == "train-workers-0" and job["spec"]["suspend"]
        four = {"requests": {"nvidia.com/gpu": "4"}, "limits": {"nvidia.com/gpu": "4"}}
        patched = lab.kubectl(*as_tenant, "patch", "job", "train-workers-0", "-n", ns,
                              "--type=json", "-p", json.dumps([{
                                  "op": "replace", "value": four,
                                  "path": "/spec/template/spec/containers/0/resources"}]),
                              check=False)
        assert patched.returncode == 0, f"the API server refused the patch: {patched.stderr}"
        cq = lab.get("localqueue", "lq", "-n", ns)["spec"]["clusterQueue"]
        lab.apply(json.dumps({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                              "metadata": {"name": "later", "namespace": ns},
                              "spec": {"clusterQueue": cq}}))
        wait_for(lambda: js.admitted(lab, ns, "JobSet", "train"), 60, "train admitted")
        gpus = _gpus_once_running(lab, ns, "jobset.sigs.k8s.io/jobset-name=train", 60)
        assert gpus <= 1, f"{gpus} GPUs Running for train, admitted for 1"


def adopted_train_workers_0(lab: LabHandle, as_tenant: list[str], ns: str, pod: dict,
                            backoff_limit: int = 0) -> None:
    """The tenant makes Job ``train-workers-0`` (no queue name, suspended, 1 pod of ``pod``),
    then JobSet ``train`` (1 Job of one 1-GPU pod); once ``train`` is admitted it gives the
    Job ``train``'s controller ownerReference and the labels jobset reads (still
    suspended): the adoption must be allowed."""
    lab.kubectl(*as_tenant, "create", "-f", "-", input=json.dumps({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "train-workers-0", "namespace": ns},
        "spec": {"suspend": True, "parallelism": 1, "completions": 1,
                 "backoffLimit": backoff_limit, "template": pod}}))
    lab.kubectl(*as_tenant, "apply", "-f", "-", input=js._long_jobset("train", ns, 1))
    wait_for(lambda: js.admitted(lab, ns, "JobSet", "train"), 60, "train admitted")
    uid = lab.get("jobset", "train", "-n", ns)["metadata"]["uid"]
    adopt = {"metadata": {
        "labels": {"jobset.sigs.k8s.io/restart-attempt": "0",
                   "jobset.sigs.k8s.io/replicatedjob-name": "workers",
                   "jobset.sigs.k8s.io/jobset-name": "train",
                   "jobset.sigs.k8s.io/jobset-uid": uid},
        "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                             "name": "train", "uid": uid, "controller": True}]}}
    r = lab.kubectl(*as_tenant, "patch", "job", "train-workers-0", "-n", ns,
                    "--type=merge", "-p", json.dumps(adopt), check=False)
    assert r.returncode == 0, f"the adoption was refused: {r.stderr}"


def test_h1_a_job_adopted_by_a_jobset_while_suspended_runs_no_bigger_pod(
        lab: LabHandle, pykueue_with_jobset) -> None:  # noqa: F811
    """A 1-GPU ClusterQueue; the tenant makes Job ``train-workers-0`` (no queue name,
    suspended, 1 pod of 4 GPUs), then JobSet ``train`` (1 Job of one 1-GPU pod). Once
    ``train`` is admitted, the tenant patches the Job: ``train``'s controller
    ownerReference and the labels jobset reads (still suspended). jobset lists it as its
    Job and resumes it; if it does not within 30 s, the tenant does."""
    with js.queue(lab, "brk32-h1", 1) as ns:
        as_tenant = js.tenant(lab, ns)
        four = {"nvidia.com/gpu": "4"}
        pod = {"metadata": LONG, "spec": {"restartPolicy": "Never", "tolerations": [TOLERATION],
                                          "containers": [{**gpu_container(), "resources": {
                                              "requests": four, "limits": four}}]}}
        adopted_train_workers_0(lab, as_tenant, ns, pod)
        selector = f"{JOB_NAME}=train-workers-0"
        gpus, by = _gpus_once_running(lab, ns, selector, 30), "the JobSet operator"
        if not gpus:  # jobset did not resume it: the tenant does
            lab.kubectl(*as_tenant, "patch", "job", "train-workers-0", "-n", ns,
                        "--type=merge", "-p", '{"spec": {"suspend": false}}', check=False)
            gpus, by = _gpus_once_running(lab, ns, selector, 60), "the tenant"
        assert gpus <= 1, f"{gpus} GPUs Running for train (resumed by {by}), admitted for 1"


def _slow_job(name: str, ns: str) -> str:
    """A queued Job of one 1-GPU pod that runs an hour and, once deleted, stays Running until
    the test's finalizer is taken off (a long grace period, SIGTERM ignored)."""
    meta = {**LONG, "annotations": {**LONG["annotations"], SLOWLY: "true"},
            "finalizers": [HOLD]}
    return json.dumps({"apiVersion": "batch/v1", "kind": "Job",
                       "metadata": {"name": name, "namespace": ns, "labels": {QUEUE: "lq"}},
                       "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 10,
                                "template": {"metadata": meta, "spec": {
                                    "restartPolicy": "Never",
                                    "containers": [gpu_container()],
                                    "tolerations": [TOLERATION]}}}})


@pytest.mark.xfail(strict=True, reason=(
    "brk32 H4 (Kueue v0.17.1 the same; closed by the opt-in jobs.pod_replacement_policy: "
    "Failed, tests/e2e/test_pod_replacement_policy.py): an admitted Job's pods deleted by the "
    "tenant are replaced at once while they run out their grace period: 3 GPUs Running on an "
    "admission of 1"))
def test_h4_deleting_an_admitted_jobs_pod_runs_no_more_pods_than_admitted(
        lab: LabHandle, pykueue_in_lab: object) -> None:
    """With the default settings (Kueue's)."""
    assert h4_gpus_running(lab, "brk32-h4") <= 1


def h4_gpus_running(lab: LabHandle, prefix: str,
                    on_job: Callable[[str], None] = lambda ns: None) -> int:
    """A 1-GPU ClusterQueue; the tenant's Job ``j`` (1 pod of 1 GPU) admitted and Running;
    the tenant deletes its Running pod twice (``kubectl delete pod --wait=false``), each time
    once a live pod of ``j`` runs: the GPUs of ``j``'s pods Running then (at most 60 s
    waiting for a third pod to run beside them). ``on_job(namespace)`` is called once ``j``
    is created."""
    ns, cq = gpu_queue(lab, prefix, 1)
    selector = f"{JOB_NAME}=j"
    try:
        lab.apply(_slow_job("j", ns))
        on_job(ns)
        for round_ in range(2):
            try:
                pod = wait_for(lambda: [p for p in _running(lab, ns, selector)
                                        if not p["metadata"].get("deletionTimestamp")],
                               30 if round_ else 90, "j's live pod Running")[0]
            except AssertionError:
                if not round_:
                    raise
                break  # no replacement runs while the deleted pod runs out its grace
            lab.kubectl("delete", "pod", pod["metadata"]["name"], "-n", ns, "--wait=false")
        try:
            wait_for(lambda: len(_running(lab, ns, selector)) >= 3, 30, "3 pods Running")
        except AssertionError:
            pass  # the replacement did not run beside the deleted ones
        return sum(_gpus(p) for p in _running(lab, ns, selector))
    finally:
        drop_held_pods(lab, ns, cq)


def drop_held_pods(lab: LabHandle, ns: str, cq: str) -> None:
    """Clean up after a Job whose pods carry the test's finalizer: delete the namespace's
    Jobs first, so that no replacement is made once a pod's finalizer goes (with
    ``podReplacementPolicy: Failed`` the Job controller makes it only then, and that pod,
    with the finalizer from the template, would hold its GPU for good), take the finalizer
    off every pod (and any other finalizer) until none is left, then delete the namespace
    and the ClusterQueue (before this helper, a pod under ``Failed`` stayed Terminating on
    a100-0 for good, and the seed scenario later found 7 of its 8 A100 GPUs)."""
    lab.kubectl("delete", "jobs", "--all", "-n", ns, "--wait=false", check=False)

    def gone() -> bool:
        pods = lab.get("pods", "-n", ns)["items"]
        # Every finalizer: the Job controller's job-tracking one too, which under
        # ``podReplacementPolicy: Failed`` it keeps until the pod is terminal, and a
        # ``stops-slowly`` pod (tests/e2e, hack/lab/stages.yaml) is not while one is left.
        release(lab, pods, keep_others=False)
        return not pods

    try:
        wait_for(gone, 120, f"every pod of {ns} gone")
    finally:
        lab.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=90s", check=False)
        lab.kubectl("delete", "clusterqueue", cq, "--wait=false", check=False)

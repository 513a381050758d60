"""A pod of an admitted job keeps the labels its controller selects it by: removing
``batch.kubernetes.io/controller-uid`` (and the other selector labels) from a running pod made
the Job controller release it and start a replacement, 4 GPU pods for an admission of 2
(breaker9). The rule (``owner_label_errors``) and the route ``/validate--v1-pod-owner``."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from app.config import OWNER_REFERENCE_RELEASERS, Settings, WebhookSettings
from app.integrations.webhook_toolkit import (
    WebhookPolicy,
    owner_label_errors,
    owner_reference_errors,
)
from app.main import create_app

PYKUEUE = "system:serviceaccount:pykueue-system:pykueue"
TENANT = "system:serviceaccount:team-a:dev"
JOB_LABELS = {"batch.kubernetes.io/controller-uid": "u1", "controller-uid": "u1",
              "batch.kubernetes.io/job-name": "train", "job-name": "train",
              "kueue.x-k8s.io/podset": "main", "app": "train"}


def pod(labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "train-x", "namespace": "team-a", "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "x"}]}}


def without(*keys: str) -> dict[str, str]:
    return {k: v for k, v in JOB_LABELS.items() if k not in keys}


POLICY = WebhookPolicy(controller_usernames=frozenset({PYKUEUE}))


@pytest.mark.parametrize("new_labels", [
    without("batch.kubernetes.io/controller-uid", "controller-uid", "job-name",
            "batch.kubernetes.io/job-name"),
    without("controller-uid"),
    {**JOB_LABELS, "batch.kubernetes.io/job-name": "other"},
    without("kueue.x-k8s.io/podset"),
])
def test_removing_or_changing_a_selector_label_is_refused(new_labels: dict[str, str]) -> None:
    errors = owner_label_errors(pod(JOB_LABELS), pod(new_labels), TENANT, POLICY)
    assert errors and "cannot be removed or changed on a pod of an admitted job" in errors[0]


def test_operator_labels_are_guarded_too() -> None:
    labels = {"kueue.x-k8s.io/podset": "worker", "training.kubeflow.org/job-name": "ddp",
              "ray.io/cluster": "rc", "jobset.sigs.k8s.io/jobset-name": "js"}
    for key in ("training.kubeflow.org/job-name", "ray.io/cluster",
                "jobset.sigs.k8s.io/jobset-name"):
        new = {k: v for k, v in labels.items() if k != key}
        assert owner_label_errors(pod(labels), pod(new), TENANT, POLICY), key


def test_a_spark_pods_labels_are_guarded() -> None:
    """A SparkApplication's driver: pykueue counts its pods by the operator's app-name label
    (an orphaned driver stripped of it held no quota while it ran), Spark finds executors by
    ``spark-role`` and ``spark-app-selector``."""
    labels = {"kueue.x-k8s.io/podset": "driver", "sparkoperator.k8s.io/app-name": "pi",
              "sparkoperator.k8s.io/launched-by-spark-operator": "true",
              "spark-role": "driver", "spark-app-selector": "spark-1", "spark-app-name": "pi"}
    for key in labels:
        new = {k: v for k, v in labels.items() if k != key}
        assert owner_label_errors(pod(labels), pod(new), TENANT, POLICY), key
    assert owner_label_errors(pod(labels), pod({**labels, "spark-role": "executor"}), TENANT,
                              POLICY)


def test_other_changes_and_pykueue_and_unadmitted_pods_pass() -> None:
    assert owner_label_errors(pod(JOB_LABELS), pod({**JOB_LABELS, "extra": "1"}), TENANT,
                              POLICY) == []
    assert owner_label_errors(pod(JOB_LABELS), pod(without("app")), TENANT, POLICY) == []
    assert owner_label_errors(pod(JOB_LABELS), pod(without("controller-uid")), PYKUEUE,
                              POLICY) == []
    plain = {k: v for k, v in JOB_LABELS.items() if k != "kueue.x-k8s.io/podset"}
    assert owner_label_errors(pod(plain), pod({}), TENANT, POLICY) == []


async def test_the_route_answers_a_review() -> None:
    app = create_app(Settings(controllers_enabled=False))
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u", "operation": "UPDATE", "namespace": "team-a", "name": "train-x",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "userInfo": {"username": TENANT},
        "object": pod(without("controller-uid")), "oldObject": pod(JOB_LABELS)}}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="https://t") as c:
        r = await c.post("/validate--v1-pod-owner", json=review)
    response = r.json()["response"]
    assert r.status_code == 200 and response["allowed"] is False
    assert response["status"]["code"] == 403 and "controller-uid" in response["status"]["message"]


JOB_REF = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u1",
           "controller": True, "blockOwnerDeletion": True}
DECOY = {"apiVersion": "v1", "kind": "ConfigMap", "name": "decoy", "uid": "c1",
         "controller": True}


def owned(refs: list[dict[str, Any]] | None, labels: dict[str, str] = JOB_LABELS
          ) -> dict[str, Any]:
    p = pod(labels)
    if refs is not None:
        p["metadata"]["ownerReferences"] = refs
    return p


@pytest.mark.parametrize("new_refs", [
    [DECOY],  # another controller: the Job controller ignores the pod and starts another
    [{**JOB_REF, "controller": False}, DECOY],
    [{**JOB_REF, "uid": "u2"}],
])
def test_taking_a_running_pod_from_its_controller_is_refused(
        new_refs: list[dict[str, Any]]) -> None:
    """breakdel23: a tenant's patch of the pod's controller ownerReference to a ConfigMap of
    its own (no label changed) made the Job controller start a replacement: 2 GPU pods
    Running on an admission of 1 (lab)."""
    errors = owner_reference_errors(owned([JOB_REF]), owned(new_refs), TENANT, POLICY)
    assert errors and "controller ownerReference" in errors[0], new_refs


def test_a_job_pod_without_a_controller_may_get_only_its_job_back() -> None:
    """Removed first (here by anyone: no ``owner_reference_releasers``, the setting empty),
    then another controller set: refused for a Job's pod (its uid label names the Job), so
    the two writes do not free it either; the Job controller's adoption back is allowed."""
    assert owner_reference_errors(owned([JOB_REF]), owned(None), TENANT, POLICY) == []
    assert owner_reference_errors(owned(None), owned([DECOY]), TENANT, POLICY)
    assert owner_reference_errors(owned(None), owned([JOB_REF]), TENANT, POLICY) == []


def test_other_owner_reference_changes_pass() -> None:
    other = {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "c2"}
    assert owner_reference_errors(owned([JOB_REF]), owned([JOB_REF, other]), TENANT,
                                  POLICY) == []
    assert owner_reference_errors(owned([JOB_REF]), owned([DECOY]), PYKUEUE, POLICY) == []
    # A pod no Job selects by uid (a Deployment's, an operator's): adopted by anyone.
    labels = without("batch.kubernetes.io/controller-uid", "controller-uid")
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "r1",
          "controller": True}
    assert owner_reference_errors(owned(None, labels), owned([rs], labels), TENANT,
                                  POLICY) == []
    assert owner_reference_errors(owned([rs], labels), owned([DECOY], labels), TENANT, POLICY)
    # Not a pod of an admitted job (no podset label): not pykueue's business.
    labels = without("kueue.x-k8s.io/podset")
    assert owner_reference_errors(owned([JOB_REF], labels), owned([DECOY], labels), TENANT,
                                  POLICY) == []


# brk27 M3: the releasers by default (app/config.py WebhookSettings.owner_reference_releasers).
RELEASING = WebhookPolicy(controller_usernames=frozenset({PYKUEUE}),
                          owner_reference_releasers=frozenset(OWNER_REFERENCE_RELEASERS))
DRIVER_REF = {"apiVersion": "v1", "kind": "Pod", "name": "pi-driver", "uid": "d1",
              "controller": True}
EXECUTOR_LABELS = {"kueue.x-k8s.io/podset": "executor", "spark-role": "executor",
                   "spark-app-selector": "spark-1", "sparkoperator.k8s.io/app-name": "pi"}


@pytest.mark.parametrize("new_refs", [
    None,  # the reference removed
    [],
    [{**DRIVER_REF, "controller": False}],  # kept, but no longer the controller
    [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "c2"}],
])
def test_a_tenant_cannot_free_a_pod_of_an_admitted_job_from_its_controller(
        new_refs: list[dict[str, Any]] | None) -> None:
    """brk27 M3: a tenant removed the controller reference from its running Spark executors
    (controlled by the driver pod); a pod without a controller counts only for an orphaned
    Workload, so once the application was preempted they ran on uncounted."""
    old = owned([DRIVER_REF], EXECUTOR_LABELS)
    errors = owner_reference_errors(old, owned(new_refs, EXECUTOR_LABELS), TENANT, RELEASING)
    assert len(errors) == 1 and errors[0].startswith("metadata.ownerReferences: "), errors
    assert "cannot be removed by 'system:serviceaccount:team-a:dev'" in errors[0]
    assert "system:serviceaccount:kube-system:generic-garbage-collector" in errors[0]
    assert PYKUEUE in errors[0] and "webhook.owner_reference_releasers" in errors[0]
    # The same for a batch Job's pod.
    assert owner_reference_errors(owned([JOB_REF]), owned(None), TENANT, RELEASING)


@pytest.mark.parametrize("username", [*OWNER_REFERENCE_RELEASERS, PYKUEUE])
def test_the_garbage_collector_and_the_releasing_controllers_may_remove_it(
        username: str) -> None:
    """The garbage collector orphans the pods of an owner deleted with
    ``--cascade=orphan``; the ReplicaSet, ReplicationController, StatefulSet, Job and
    DaemonSet controllers release a pod their selector stops matching. Each under its
    kube-system ServiceAccount (``--use-service-account-credentials=true``) or as
    ``system:kube-controller-manager`` (``=false``, the lab's)."""
    assert owner_reference_errors(owned([JOB_REF]), owned(None), username, RELEASING) == []
    assert owner_reference_errors(owned([DRIVER_REF], EXECUTOR_LABELS),
                                  owned([], EXECUTOR_LABELS), username, RELEASING) == []


def test_the_default_releasers_are_kube_controller_managers_identities() -> None:
    assert set(WebhookSettings().owner_reference_releasers) == {
        "system:kube-controller-manager",
        "system:serviceaccount:kube-system:generic-garbage-collector",
        "system:serviceaccount:kube-system:replicaset-controller",
        "system:serviceaccount:kube-system:replication-controller",
        "system:serviceaccount:kube-system:statefulset-controller",
        "system:serviceaccount:kube-system:job-controller",
        "system:serviceaccount:kube-system:daemon-set-controller"}


def test_with_no_releasers_anyone_may_remove_it_and_other_pods_are_unaffected() -> None:
    """``owner_reference_releasers: []``: anyone (the previous rule, for a cluster whose
    garbage collector runs under another identity). A pod without the podset label is not a
    pod of an admitted job: not pykueue's business."""
    anyone = WebhookPolicy(controller_usernames=frozenset({PYKUEUE}))
    assert owner_reference_errors(owned([DRIVER_REF], EXECUTOR_LABELS),
                                  owned(None, EXECUTOR_LABELS), TENANT, anyone) == []
    plain = {k: v for k, v in EXECUTOR_LABELS.items() if k != "kueue.x-k8s.io/podset"}
    assert owner_reference_errors(owned([DRIVER_REF], plain), owned(None, plain), TENANT,
                                  RELEASING) == []
    # Unchanged or only other references changed: allowed to a tenant.
    assert owner_reference_errors(owned([DRIVER_REF], EXECUTOR_LABELS),
                                  owned([DRIVER_REF], EXECUTOR_LABELS), TENANT, RELEASING) == []
    assert owner_reference_errors(owned(None), owned(None), TENANT, RELEASING) == []


async def test_the_route_refuses_a_tenants_removal_with_the_default_settings() -> None:
    """The setting flows from ``Settings.webhook`` to the route (a review as kube-apiserver
    sends it); with ``owner_reference_releasers: []`` the same removal is allowed."""
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u", "operation": "UPDATE", "namespace": "team-a", "name": "train-x",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "userInfo": {"username": TENANT},
        "object": owned(None), "oldObject": owned([JOB_REF])}}
    answers = []
    for settings in (Settings(controllers_enabled=False),
                     Settings(controllers_enabled=False,
                              webhook=WebhookSettings(owner_reference_releasers=[]))):
        transport = httpx.ASGITransport(app=create_app(settings))
        async with httpx.AsyncClient(transport=transport, base_url="https://t") as c:
            r = await c.post("/validate--v1-pod-owner", json=review)
        answers.append(r.json()["response"])
    refused_answer, allowed_answer = answers
    assert refused_answer["allowed"] is False and refused_answer["status"]["code"] == 403
    assert "metadata.ownerReferences" in refused_answer["status"]["message"]
    assert allowed_answer["allowed"] is True

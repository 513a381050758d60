"""Issue 5 on the lab: the real kube-apiserver calls the real webhook (`pykueue serve`, a
subprocess with controllers disabled) over TLS, through the rendered lab webhook configurations.

Isolation in a shared lab: the configurations get test-only names and a namespaceSelector for
this module's namespace, so other tests' Jobs never depend on this server (the webhooks of
cluster-scoped kinds, which a namespaceSelector cannot confine, are left out); they are deleted
at the end. The CA is a fresh one in a temporary folder (its PEM goes into caBundle)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from certs.pki import ensure_certs
from tests.labfixture import LabHandle, wait_for
from tests.pykueue_server import PykueueServer

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]
LABEL = "kueue.x-k8s.io/queue-name"
CONTROLLER = "pykueue-itest-controller"  # pykueue's identity for this test (impersonated)
NS = f"itest-webhook-{uuid.uuid4().hex[:6]}"


def job(name: str, queue: str | None, suspend: bool | None = False, **meta: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"namespace": NS, **meta}
    if name:
        metadata["name"] = name
    if queue is not None:
        metadata["labels"] = {LABEL: queue}
    spec: dict[str, Any] = {
        "parallelism": 1,
        "completions": 1,
        "backoffLimit": 0,
        "template": {
            "metadata": {"annotations": {"lab.pykueue.dev/run-duration": "600s"}},
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox", "command": ["true"]}],
            },
        },
    }
    if suspend is not None:
        spec["suspend"] = suspend
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec}


def create(lab: LabHandle, obj: dict[str, Any], *args: str, check: bool = True):
    return lab.kubectl("create", "-f", "-", "-o", "json", *args, input=json.dumps(obj), check=check)


def get_job(lab: LabHandle, name: str) -> dict[str, Any]:
    return lab.get("job", name, "-n", NS)


def pods(lab: LabHandle, name: str) -> list[dict[str, Any]]:
    return lab.get("pods", "-n", NS, "-l", f"batch.kubernetes.io/job-name={name}")["items"]


def patch(lab: LabHandle, name: str, body: dict[str, Any], *as_user: str, check: bool = False):
    return lab.kubectl(
        *as_user, "patch", "job", name, "-n", NS, "--type=merge", "-p", json.dumps(body),
        check=check,
    )  # fmt: skip


AS_PYKUEUE = ("--as", CONTROLLER, "--as-group", "system:masters")


def denied(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode != 0, f"expected a refusal, got: {result.stdout}"
    assert "denied the request" in result.stderr, result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


@pytest.fixture(scope="module")
def pykueue(lab: LabHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PykueueServer]:
    tmp = tmp_path_factory.mktemp("webhook")
    certs = tmp / "certs"
    ensure_certs(certs)
    server = PykueueServer(
        certs, tmp / "pykueue.log", env=lab.env, controller_usernames=[CONTROLLER]
    )
    server.start()
    rendered = tmp / "webhooks.yaml"
    subprocess.run(
        [sys.executable, "hack/render_webhooks.py", "--variant", "lab",
         "--port", str(server.port), "--ca", str(certs / "ca.crt"), "--out", str(rendered)],
        cwd=ROOT, check=True, capture_output=True,
    )  # fmt: skip
    docs = [d for d in yaml.safe_load_all(rendered.read_text()) if d]
    for doc in docs:
        doc["metadata"]["name"] += f"-{NS}"
        # A namespaceSelector cannot keep a cluster-scoped kind's webhook (ClusterQueue,
        # ResourceFlavor) to this module: left out, not to hold other tests' queues.
        doc["webhooks"] = [w for w in doc["webhooks"]
                           if all(r.get("scope") != "Cluster" for r in w["rules"])]
        for webhook in doc["webhooks"]:
            webhook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": NS}}
    lab.create_namespace(NS)
    lab.apply(yaml.safe_dump_all(docs))

    def mutated() -> bool:  # the configuration takes effect after a few seconds (informer lag)
        r = create(lab, job("probe", "lq1"), "--dry-run=server", check=False)
        return r.returncode == 0 and json.loads(r.stdout)["spec"].get("suspend") is True

    try:
        wait_for(mutated, 30, "the webhook configuration to take effect", interval=0.5)
        yield server
    finally:
        for doc in docs:
            lab.kubectl("delete", doc["kind"], doc["metadata"]["name"], "--ignore-not-found",
                        check=False)  # fmt: skip
        server.stop()
        lab.kubectl("delete", "namespace", NS, "--wait=false", check=False)
        if os.environ.get("PYKUEUE_ITEST_SHOW_LOG"):
            print(server.log.read_text())


# ---------------------------------------------------------------------------------- mutation


def test_KQ_22_labelled_job_created_unsuspended_is_stored_suspended_and_has_no_pods(
    lab: LabHandle, pykueue: PykueueServer
) -> None:
    created = json.loads(create(lab, job("kq22", "lq-cq", suspend=False)).stdout)
    assert created["spec"]["suspend"] is True
    assert get_job(lab, "kq22")["spec"]["suspend"] is True
    time.sleep(10)
    assert pods(lab, "kq22") == []
    assert get_job(lab, "kq22")["status"].get("active", 0) == 0


def test_labelled_job_without_suspend_is_stored_suspended(
    lab: LabHandle, pykueue: PykueueServer
) -> None:
    create(lab, job("omitted", "lq1", suspend=None))
    assert get_job(lab, "omitted")["spec"]["suspend"] is True


def test_KQ_22_control_unlabelled_job_is_not_modified_and_runs(
    lab: LabHandle, pykueue: PykueueServer
) -> None:
    create(lab, job("plain", None, suspend=False))
    assert get_job(lab, "plain")["spec"]["suspend"] is False
    wait_for(lambda: pods(lab, "plain"), 60, "pods of the unlabelled Job")


def test_generate_name_job_is_suspended(lab: LabHandle, pykueue: PykueueServer) -> None:
    created = json.loads(create(lab, job("", "lq1", generateName="gen-")).stdout)
    name = created["metadata"]["name"]
    assert name.startswith("gen-") and len(name) > len("gen-")
    assert get_job(lab, name)["spec"]["suspend"] is True


def test_server_dry_run_is_mutated_and_not_stored(lab: LabHandle, pykueue: PykueueServer) -> None:
    dry = json.loads(create(lab, job("dry", "lq1"), "--dry-run=server").stdout)
    assert dry["spec"]["suspend"] is True
    missing = lab.kubectl("get", "job", "dry", "-n", NS, check=False)
    assert missing.returncode != 0 and "NotFound" in missing.stderr


# ---------------------------------------------------------------------------------- validation


def test_invalid_local_queue_name_is_refused_at_create(
    lab: LabHandle, pykueue: PykueueServer
) -> None:
    r = create(lab, job("badname", "Bad_Queue"), check=False)
    denied(r, f"metadata.labels[{LABEL}]", "DNS-1123")


def test_user_cannot_unsuspend_a_queued_job(lab: LabHandle, pykueue: PykueueServer) -> None:
    create(lab, job("sneaky", "lq1"))
    r = patch(lab, "sneaky", {"spec": {"suspend": False}})
    denied(r, "spec.suspend", "only pykueue", CONTROLLER)
    assert get_job(lab, "sneaky")["spec"]["suspend"] is True


def test_KQ_24_queue_label_rules_on_update(lab: LabHandle, pykueue: PykueueServer) -> None:
    create(lab, job("kq24", "lq1"))
    # Suspended (pending): the queue may change (KQ-24 2).
    lab.kubectl("label", "--overwrite", "job", "kq24", "-n", NS, f"{LABEL}=lq2")
    # pykueue's own identity unsuspends it (what the scheduler does at admission).
    assert patch(lab, "kq24", {"spec": {"suspend": False}}, *AS_PYKUEUE).returncode == 0
    assert get_job(lab, "kq24")["spec"]["suspend"] is False
    # Running: changing or removing the queue is refused (KQ-24 1).
    r = lab.kubectl("label", "--overwrite", "job", "kq24", "-n", NS, f"{LABEL}=lq3", check=False)
    denied(r, f"metadata.labels[{LABEL}]", "immutable", "'lq2'", "'lq3'")
    r = lab.kubectl("label", "job", "kq24", "-n", NS, f"{LABEL}-", check=False)
    denied(r, f"metadata.labels[{LABEL}]", "cannot be removed")
    assert get_job(lab, "kq24")["metadata"]["labels"][LABEL] == "lq2"


def test_KQ_24_adding_a_queue_to_a_running_job_needs_suspend(
    lab: LabHandle, pykueue: PykueueServer
) -> None:
    create(lab, job("adopt", None, suspend=False))
    r = lab.kubectl("label", "job", "adopt", "-n", NS, f"{LABEL}=lq1", check=False)
    denied(r, f"metadata.labels[{LABEL}]", "cannot be added")
    both = {"metadata": {"labels": {LABEL: "lq1"}}, "spec": {"suspend": True}}
    assert patch(lab, "adopt", both).returncode == 0
    stored = get_job(lab, "adopt")
    assert (stored["metadata"]["labels"][LABEL], stored["spec"]["suspend"]) == ("lq1", True)


# ---------------------------------------------------------------------------------- fail closed


def test_with_pykueue_stopped_labelled_jobs_are_refused_and_unlabelled_created(
    lab: LabHandle, pykueue: PykueueServer
) -> None:
    pykueue.stop()
    try:
        r = create(lab, job("closed", "lq1"), check=False)
        assert r.returncode != 0
        assert "failed calling webhook" in r.stderr, r.stderr
        assert lab.kubectl("get", "job", "closed", "-n", NS, check=False).returncode != 0
        create(lab, job("open", None))
        assert get_job(lab, "open")["spec"]["suspend"] is False
    finally:
        pykueue.start()


def test_scaling_a_running_queued_job_suspends_it_in_the_same_write(
    lab: LabHandle, pykueue: PykueueServer
) -> None:
    """Issue 14.1: the tenant's ``spec.parallelism: 64`` lands with ``spec.suspend: true``, so
    the Job controller never makes more pods than were admitted."""
    body = job("scaler", "lq1")
    del body["spec"]["completions"]  # a work-queue Job: its pod count is its parallelism
    create(lab, body)
    assert patch(lab, "scaler", {"spec": {"suspend": False}}, *AS_PYKUEUE).returncode == 0
    wait_for(lambda: len(pods(lab, "scaler")) == 1, 60, "the admitted pod")
    r = patch(lab, "scaler", {"spec": {"parallelism": 64}}, check=True)
    stored = json.loads(lab.kubectl("get", "job", "scaler", "-n", NS, "-o", "json").stdout)
    assert r.returncode == 0
    assert (stored["spec"]["parallelism"], stored["spec"]["suspend"]) == (64, True)
    # Suspended: its one pod goes and no other was ever created.
    wait_for(lambda: not [p for p in pods(lab, "scaler")
                          if not p["metadata"].get("deletionTimestamp")], 60, "pods gone")
    created = [e for e in lab.get("events", "-n", NS)["items"]
               if e["reason"] == "SuccessfulCreate" and e["involvedObject"]["name"] == "scaler"]
    assert sum(e.get("count", 1) for e in created) == 1, created


def _pod(name: str, queue: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS}
    if queue is not None:
        meta["labels"] = {LABEL: queue}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def test_a_queued_pod_is_stored_gated_and_only_pykueue_lifts_the_gate(
    lab: LabHandle, pykueue: PykueueServer
) -> None:
    """Issue 17: the Pod webhook gates a queued Pod; a tenant cannot ungate it."""
    lab.apply(json.dumps(_pod("gated", "lq1")))
    stored = lab.get("pod", "gated", "-n", NS)
    assert [g["name"] for g in stored["spec"]["schedulingGates"]] == ["kueue.x-k8s.io/admission"]
    assert stored["metadata"]["labels"]["kueue.x-k8s.io/managed"] == "true"
    ungate = json.dumps([{"op": "remove", "path": "/spec/schedulingGates"}])
    r = lab.kubectl("patch", "pod", "gated", "-n", NS, "--type=json", "-p", ungate, check=False)
    denied(r, "spec.schedulingGates", "only pykueue may remove")
    ok = lab.kubectl(*AS_PYKUEUE, "patch", "pod", "gated", "-n", NS, "--type=json", "-p",
                     ungate, check=False)
    assert ok.returncode == 0, ok.stderr
    # An unqueued Pod is untouched, and a queue label cannot be added once it runs.
    lab.apply(json.dumps(_pod("free", None)))
    assert not lab.get("pod", "free", "-n", NS)["spec"].get("schedulingGates")
    r = lab.kubectl("label", "pod", "free", "-n", NS, f"{LABEL}=lq1", check=False)
    denied(r, f"metadata.labels[{LABEL}]", "cannot be added")

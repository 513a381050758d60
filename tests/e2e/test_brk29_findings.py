"""brk29: a decoy against the stray-pod rule (brk28 H's fix,
``framework.stray_pod``, ``JobReconciler._delete_strays``).

A tenant (``edit``) creates, after its admitted JobSet ``train``, a queued plain Pod labelled
with ``kueue.x-k8s.io/podset`` and then the JobSet's ``jobset-name`` and ``jobset-uid``
(adding labels to a pod is allowed). It is gated and its own Workload is pending (the queue
is full). Before the fix ``stray_pod`` took it for a stray of the JobSet, so it counted for
the JobSet (``pod_of``), but ``_delete_strays`` left it, as its own Workload owns it: once the
JobSet's Workload was evicted its release waited for that pod (held the 39.6 s watched,
released 0.5 s after the decoy's deletion). Now a pod a Workload owns is no stray
(``owned_by_workload``): the evicted Workload is released once the JobSet's own pod is gone,
and the decoy is left to its own Workload."""

from __future__ import annotations

import json
import time

import pytest

from tests.e2e.test_jobset import (  # noqa: F401  (fixtures)
    QUEUE,
    _long_jobset,
    admitted,
    condition,
    jobset_operator,
    owned_workload,
    pykueue_with_jobset,
    queue,
    tenant,
)
from tests.e2e.test_workload_kinds import TOLERATION, gpu_container, live
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab


def _decoy(ns: str) -> str:
    """A queued plain Pod (1 GPU, ``lq``) carrying a podset label, no controller."""
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "decoy", "namespace": ns, "labels": {
            QUEUE: "lq", "kueue.x-k8s.io/podset": "workers"}},
        "spec": {"restartPolicy": "Never", "containers": [gpu_container()],
                 "tolerations": [TOLERATION]}})


def _train_pods(lab: LabHandle, ns: str) -> list[dict]:
    return [p for p in live(lab.get("pods", "-n", ns, "-l",
                                    "batch.kubernetes.io/job-name=train-workers-0")["items"])
            if p["status"].get("phase") in ("Pending", "Running")]


def _reserved(wl: dict | None) -> bool:
    c = condition(wl, "QuotaReserved")
    return bool(c and c["status"] == "True")


def test_a_decoy_plain_pod_labelled_as_a_stray_does_not_hold_an_evicted_jobset(
        lab: LabHandle, pykueue_with_jobset) -> None:  # noqa: F811
    with queue(lab, "brk29-decoy", 1) as ns:
        as_tenant = tenant(lab, ns)
        lab.kubectl(*as_tenant, "apply", "-f", "-", input=_long_jobset("train", ns, 1))
        wl = wait_for(lambda: admitted(lab, ns, "JobSet", "train"), 60, "train admitted")
        wait_for(lambda: len(_train_pods(lab, ns)) == 1, 90, "train-workers-0's pod")
        js_uid = lab.get("jobset", "train", "-n", ns)["metadata"]["uid"]
        lab.kubectl(*as_tenant, "apply", "-f", "-", input=_decoy(ns))
        wait_for(lambda: owned_workload(lab, ns, "Pod", "decoy"), 60, "the decoy's Workload")
        # Then the JobSet's labels (adding labels to a pod is allowed): created with them,
        # the decoy is deleted as a stray before its Workload exists.
        lab.kubectl(*as_tenant, "label", "pod", "decoy", "-n", ns,
                    "jobset.sigs.k8s.io/jobset-name=train",
                    f"jobset.sigs.k8s.io/jobset-uid={js_uid}")
        # The Pod watch delivers events in order: the label change reaches pykueue before
        # the deletion of train's pod below, so the release is decided with the decoy seen.
        lab.kubectl("patch", "workloads.kueue.x-k8s.io", wl["metadata"]["name"], "-n", ns,
                    "--type=merge", "-p", '{"spec": {"active": false}}')
        wait_for(lambda: not _train_pods(lab, ns), 60, "train's own pod gone")
        t0 = time.monotonic()
        wait_for(lambda: not _reserved(owned_workload(lab, ns, "JobSet", "train")), 60,
                 "the evicted JobSet's Workload released (the decoy is not its stray)")
        print(f"\nreleased {time.monotonic() - t0:.1f} s after train's own pod went")
        # The decoy, its own Workload's, is left alone.
        assert live(lab.get("pods", "-n", ns, "--field-selector",
                            "metadata.name=decoy")["items"])

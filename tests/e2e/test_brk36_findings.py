"""brk36 (session 36, against 4153668): false positives of the Pod webhook's CREATE rule
(``app.controllers.pod_create_check``) and the reconciler's backstop
(``JobReconciler._delete_excess``) with the real operators, under docs/security.md's strict
setup ("Keeping every unqueued pod off flavor GPUs"), where the Pod webhook sees every pod.
The unit twins are ``tests/unit/test_brk36_findings.py``.

F1: an AppWrapper wrapping a PyTorchJob (appwrapper v1.2.0, training-operator v1.9.3), the
wrapper's documented use: appwrapper injects the AppWrapper's podSet names
(``<aw>-0``, ``<aw>-1``) as the ``kueue.x-k8s.io/podset`` label of the PyTorchJob's
templates, and the rule holds a pod controlled by the PyTorchJob to the PyTorchJob's own
``direct_podsets`` (``master``, ``worker``): every pod is refused, the job never runs."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import pytest

from tests.e2e.test_brk34b_findings import strict_dra
from tests.e2e.test_jobset import QUEUE, admitted, drop
from tests.e2e.test_kubeflow import template
from tests.e2e.test_workload_kinds import gpu_queue
from tests.labfixture import ROOT, LabHandle, wait_for

sys.path.insert(0, str(ROOT / "hack"))
import lab as labmod  # noqa: E402

pytestmark = pytest.mark.lab
PODSET = "kueue.x-k8s.io/podset"


@pytest.fixture(scope="module")
def strict(lab: LabHandle) -> Iterator[labmod.Lab]:
    """appwrapper, the training-operator and KubeRay under the strict setup."""
    with strict_dra(lab, "appwrapper", "training-operator", "kuberay") as handle:
        yield handle


def _events(lab: LabHandle, ns: str, reason: str) -> list[dict]:
    return [e for e in lab.get("events", "-n", ns)["items"] if e.get("reason") == reason]


def _running(lab: LabHandle, ns: str) -> list[dict]:
    return [p for p in lab.get("pods", "-n", ns)["items"]
            if p["status"].get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")]


def _wrapped_pytorchjob(ns: str) -> str:
    """AppWrapper ``aw`` queued in ``lq`` wrapping PyTorchJob ``ddp`` (Master 1 + Worker 1,
    1 GPU each)."""
    def replica() -> dict:
        return {"replicas": 1, "restartPolicy": "OnFailure",
                "template": template(1, name="pytorch")}
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "ddp"},
           "spec": {"pytorchReplicaSpecs": {"Master": replica(), "Worker": replica()}}}
    return json.dumps({"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
                       "metadata": {"name": "aw", "namespace": ns, "labels": {QUEUE: "lq"}},
                       "spec": {"suspend": False, "components": [{"template": job}]}})


@pytest.mark.xfail(strict=True, reason="brk36 F1: a PyTorchJob an AppWrapper wraps has every "
                   "pod refused (its podset label is the AppWrapper's podSet)")
def test_f1_an_appwrapper_wrapping_a_pytorchjob_runs_its_pods(
        lab: LabHandle, strict: labmod.Lab) -> None:
    """F1 (module doc): both pods of the wrapped PyTorchJob run within 60 s of the
    admission."""
    ns, cq = gpu_queue(lab, "b36-awpt", 2)
    try:
        lab.apply(_wrapped_pytorchjob(ns))
        wait_for(lambda: admitted(lab, ns, "AppWrapper", "aw"), 60, "aw admitted")
        wait_for(lambda: lab.get("pytorchjobs", "-n", ns)["items"], 60, "ddp made")
        try:
            wait_for(lambda: len(_running(lab, ns)) == 2, 60, "ddp's 2 pods running")
        finally:
            refused = [e["message"] for e in _events(lab, ns, "FailedCreatePod")]
            pods = [(p["metadata"]["name"], p["status"].get("phase"))
                    for p in lab.get("pods", "-n", ns)["items"]]
            print(f"\nF1: pods {pods}; {len(refused)} FailedCreatePod: {refused[:1]}")
    finally:
        drop(lab, ns, cq)

"""brk36 (session 36, against 4153668): false positives of the Pod webhook's CREATE rule
(``app.controllers.pod_create_check``) and the reconciler's backstop
(``JobReconciler._delete_excess``) with the real operators, under docs/security.md's strict
setup ("Keeping every unqueued pod off flavor GPUs"), where the Pod webhook sees every pod.
The unit twins are ``tests/unit/test_brk36_findings.py``.

F1: an AppWrapper wrapping a PyTorchJob (training-operator v1.9.3) or a RayCluster (KubeRay
v1.6.0), the wrapper's documented use: appwrapper v1.2.0 injects the AppWrapper's podSet
names (``<aw>-0``, ``<aw>-1``) as the ``kueue.x-k8s.io/podset`` label of the wrapped
object's templates, and the rule holds a pod controlled by that object to its own
``direct_podsets`` (``master``, ``worker``; ``head``, ``gpu``): every pod is refused, the
job never runs. Lab (brk36): the PyTorchJob's master and worker creates denied by
``vpod.pykueue.io`` ("got 'aw-0'"), the RayCluster's head likewise, no pod in 60 s. Outside
the strict setup the Pod webhook does not see these pods and they run (the backstop counts
only podSets the wrapped kind names).

No false positive found (strict setup, lab, ad hoc runs): a JobSet restart
(``failurePolicy.maxRestarts``) back Running in 2.0 s; an Indexed Job's failed index
(``backoffLimitPerIndex``) replaced in 9.7 s and a ``podFailurePolicy`` Ignore failure in
8.9 s (the Job controller's own backoff, no refusal Event); ``podReplacementPolicy:
TerminatingOrFailed`` with the deleted pod held Running by a finalizer: replacement made in
0.6 s and Running beside it (a Job's pods are not counted); a RayJob ``backoffLimit`` retry:
the new cluster's worker Running 1.6 s after the old cluster went; a RayCluster worker held
Terminating for 30 s: KubeRay makes no replacement itself while one is being deleted, so no
refusal; PyTorchJob and RayCluster deactivated and re-activated twice: Running again in
0.8-2.4 s; RayJob starts 0.8-1.3 s; an AppWrapper Pod component Running in 0.9 s; no
``FailedCreate`` or ``DeletedExcessPods`` Event in any of them."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator

import pytest

from tests.e2e.test_brk34b_findings import strict_dra
from tests.e2e.test_jobset import QUEUE, admitted
from tests.e2e.test_kubeflow import template
from tests.e2e.test_ray import ray_queue, rayjob
from tests.labfixture import ROOT, LabHandle, wait_for

sys.path.insert(0, str(ROOT / "hack"))
import lab as labmod  # noqa: E402

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def strict(lab: LabHandle) -> Iterator[labmod.Lab]:
    """appwrapper, the training-operator and KubeRay under the strict setup."""
    with strict_dra(lab, "appwrapper", "training-operator", "kuberay") as handle:
        yield handle


def _running(lab: LabHandle, ns: str) -> list[dict]:
    return [p for p in lab.get("pods", "-n", ns)["items"]
            if p["status"].get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")]


def _wrapped(ns: str, component: dict) -> str:
    """AppWrapper ``aw`` queued in ``lq`` wrapping ``component``."""
    return json.dumps({"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
                       "metadata": {"name": "aw", "namespace": ns, "labels": {QUEUE: "lq"}},
                       "spec": {"suspend": False, "components": [{"template": component}]}})


def _pytorchjob() -> dict:
    """PyTorchJob ``ddp``: Master 1 + Worker 1, 1 GPU each."""
    def replica() -> dict:
        return {"replicas": 1, "restartPolicy": "OnFailure",
                "template": template(1, name="pytorch")}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "ddp"},
            "spec": {"pytorchReplicaSpecs": {"Master": replica(), "Worker": replica()}}}


def _raycluster() -> dict:
    """RayCluster ``rc``: a head asking 1 CPU, worker group ``gpu`` of one 1-GPU pod."""
    spec = json.loads(rayjob("rc", "x", 1))["spec"]["rayClusterSpec"]
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "rc"},
            "spec": spec}


@pytest.mark.parametrize(("component", "resource"), [(_pytorchjob, "pytorchjobs"),
                                                     (_raycluster, "rayclusters")])
def test_f1_an_appwrapper_wrapping_an_operator_kind_runs_its_pods(
        lab: LabHandle, strict: labmod.Lab, component: Callable[[], dict],
        resource: str) -> None:
    """F1 (module doc): both pods of the wrapped object run within 60 s of the admission."""
    with ray_queue(lab, "b36-aw", 2) as ns:
        lab.apply(_wrapped(ns, component()))
        wait_for(lambda: admitted(lab, ns, "AppWrapper", "aw"), 60, "aw admitted")
        wait_for(lambda: lab.get(resource, "-n", ns)["items"], 60, f"the wrapped {resource}")
        try:
            wait_for(lambda: len(_running(lab, ns)) == 2, 60, "its 2 pods running")
        finally:
            refused = [e["message"] for e in lab.get("events", "-n", ns)["items"]
                       if "denied the request" in e.get("message", "")]
            pods = [(p["metadata"]["name"], p["status"].get("phase"))
                    for p in lab.get("pods", "-n", ns)["items"]]
            print(f"\nF1 {resource}: pods {pods}; {len(refused)} refusals: {refused[:1]}")

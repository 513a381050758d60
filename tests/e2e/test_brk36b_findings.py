"""brk36b B1 on the lab (spark-operator v2.5.0, the unit reproducers are in
tests/unit/test_brk36b_findings.py): the executors of a SparkApplication are counted per
driver uid, so a replaced driver's executors, being deleted by the garbage collector with
the grace period the tenant gave them (a day; ``lab.pykueue.dev/stops-slowly``: containers
ignoring SIGTERM, and a finalizer of the test's so the pods stay readable), run on beside
the new driver's full count. The driver is replaced by spark-operator itself
(``restartPolicy: OnFailure``) after the tenant deletes it. The kwok driver runs no Spark, so
the executors are made as Spark 4.0 makes them (``test_spark_executors.executor``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.test_brk36_findings import _running, _wrapped, strict  # noqa: F401 - fixture
from tests.e2e.test_jobset import admitted as aw_admitted
from tests.e2e.test_ray import ray_queue, rayjob
from tests.e2e.test_spark_executors import (  # noqa: F401 - the CRDs' and operator's fixtures
    executor,
    spark_crd,
    spark_operator,
)
from tests.e2e.test_sparkapplication import admitted, drivers, get_app, spark_namespace, sparkapp
from tests.e2e.test_sparkbreak_findings import running_driver
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab
KEEP = "brk36b.example/keep"


def slow_executor(app: dict[str, Any], wl: dict[str, Any], driver: dict[str, Any],
                  i: int) -> str:
    pod = json.loads(executor(app, wl, driver, i))
    pod["metadata"]["annotations"] = {"lab.pykueue.dev/stops-slowly": "true"}
    pod["metadata"]["finalizers"] = [KEEP]
    pod["spec"]["terminationGracePeriodSeconds"] = 86400
    return json.dumps(pod)


def holding_executors(lab: LabHandle, ns: str) -> list[dict[str, Any]]:
    return [p for p in lab.get("pods", "-n", ns, "-l", "spark-role=executor")["items"]
            if p["status"].get("phase") == "Running" and p["spec"].get("nodeName")]


def test_b1_a_replaced_drivers_executors_run_beside_the_new_drivers(
        lab: LabHandle, spark_operator: None, pykueue_in_lab: object) -> None:  # noqa: F811
    with spark_namespace(lab, "brk36b", gpus=3) as (ns, _cq):
        try:
            lab.apply(sparkapp("pi", ns, 2, restartPolicy={
                "type": "OnFailure", "onFailureRetries": 3, "onFailureRetryInterval": 1,
                "onSubmissionFailureRetries": 3, "onSubmissionFailureRetryInterval": 1}))
            first = running_driver(lab, ns, "pi")
            wl = wait_for(lambda: admitted(lab, ns, "pi"), 60, "pi admitted")
            app = get_app(lab, ns, "pi")
            for i in (1, 2):
                lab.apply(slow_executor(app, wl, first, i))
            wait_for(lambda: len(holding_executors(lab, ns)) == 2, 60, "2 executors Running")
            lab.kubectl("delete", "pod", first["metadata"]["name"], "-n", ns, "--wait=false")
            second = wait_for(lambda: (d := drivers(lab, ns, "pi")) and d[0]["metadata"]["uid"]
                              != first["metadata"]["uid"] and d[0]["status"].get("phase")
                              == "Running" and d[0], 180, "a new driver Running")
            wl = wait_for(lambda: admitted(lab, ns, "pi"), 60, "pi admitted again")
            old = holding_executors(lab, ns)
            assert len(old) == 2 and all(p["metadata"].get("deletionTimestamp") for p in old), \
                [(p["metadata"]["name"], p["metadata"].get("deletionTimestamp")) for p in old]
            app = get_app(lab, ns, "pi")
            made = [lab.kubectl("apply", "-f", "-", input=executor(app, wl, second, i),
                                check=False) for i in (3, 4)]
            allowed = [r.returncode == 0 for r in made]
            running = wait_for(lambda: len(holding_executors(lab, ns)) >= 2 + sum(allowed) and
                               holding_executors(lab, ns), 60, "the new executors Running")
            assert not any(allowed) and "podSet executor" in made[0].stderr, \
                (f"{sum(allowed)} more 1-GPU executor(s) allowed under the new driver: "
                 f"{len(running)} Running on an admission of 2 "
                 f"({[p['metadata']['name'] for p in running]})")
        finally:
            for p in lab.get("pods", "-n", ns)["items"]:
                if KEEP in (p["metadata"].get("finalizers") or []):
                    lab.kubectl("patch", "pod", p["metadata"]["name"], "-n", ns, "--type=json",
                                "-p", '[{"op":"remove","path":"/metadata/finalizers"}]',
                                check=False)


def _summary(lab: LabHandle, ns: str) -> str:
    """The namespace's pods (name: phase) and the webhook refusals its Events report."""
    events = lab.get("events", "-n", ns)["items"]
    denied = [e["message"] for e in events if "denied the request" in e.get("message", "")]
    phases = {p["metadata"]["name"]: p["status"].get("phase")
              for p in lab.get("pods", "-n", ns)["items"]}
    return f"pods {phases}; {len(denied)} refusal(s): {denied[:1]}"


def test_f1_an_appwrapper_wrapping_a_rayjob_runs_its_pods(
        lab: LabHandle, strict: object) -> None:  # noqa: F811
    """brk36b F1 (unit twin in tests/unit/test_brk36b_findings.py): AppWrapper ``aw`` wraps
    RayJob ``rj`` (a 1-CPU head, one 1-GPU worker; appwrapper v1.2.0 labels its
    ``rayClusterSpec`` templates ``aw-0``, ``aw-1``). Under the strict setup the Pod webhook
    refuses the head and the worker of the cluster KubeRay makes for ``rj`` (their podSet
    labels are none of the cluster's own), so they never run; the submitter waits."""
    rj = json.loads(rayjob("rj", "x", 1))
    del rj["metadata"]["namespace"], rj["metadata"]["labels"]
    with ray_queue(lab, "b36b-aw", 2) as ns:
        lab.apply(_wrapped(ns, rj))
        wait_for(lambda: aw_admitted(lab, ns, "AppWrapper", "aw"), 60, "aw admitted")
        wait_for(lambda: lab.get("rayclusters", "-n", ns)["items"], 60, "rj's RayCluster")
        try:
            wait_for(lambda: {p["metadata"].get("labels", {}).get("ray.io/node-type")
                              for p in _running(lab, ns)} >= {"head", "worker"}, 60,
                     "the cluster's head and worker Running")
        finally:
            print(f"\nF1 rayjob: {_summary(lab, ns)}")

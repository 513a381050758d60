"""A SparkApplication's executors run on its admission, ungated, and no more of them than
admitted (session 36, brk35 F2 and its default-setup twin).

Spark 4.0's driver makes each executor controlled by the driver pod, with the application's
labels (spark-operator v2.5.0 passes them as ``spark.kubernetes.executor.label.*``: the
queue name among them) and the executor role's. Before, pykueue's Pod webhook gated such a
pod as a plain queued Pod (a Workload of its own per executor): the application's executors
never ran on its admission. On the lab (kwok) the driver never runs Spark, so the test makes
the executors as Spark would, from the started application's executor role and the
Workload's ``executor`` podSet template, as the driver's ServiceAccount would (the test's
admin identity: any identity but pykueue's is held to the same rule)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.test_jobset import A100, owned_workload
from tests.e2e.test_sparkapplication import (  # noqa: F401 - the CRDs' and operator's fixtures
    APP_LABEL,
    KIND,
    admitted,
    get_app,
    spark_crd,
    spark_namespace,
    spark_operator,
    sparkapp,
)
from tests.e2e.test_sparkbreak_findings import running_driver
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab
GATE = "kueue.x-k8s.io/admission"


def executor(app: dict[str, Any], wl: dict[str, Any], driver: dict[str, Any], i: int) -> str:
    """Executor ``i`` of ``app`` as Spark 4.0 makes it under spark-operator v2.5.0: the
    application's labels and its executor role's, Spark's, the driver pod its controller,
    the role's nodeSelector and tolerations, the container resources of the Workload's
    ``executor`` podSet template."""
    role = app["spec"]["executor"]
    template = next(p["template"] for p in wl["spec"]["podSets"] if p["name"] == "executor")
    labels = {**(app["metadata"].get("labels") or {}), **(role.get("labels") or {}),
              APP_LABEL: app["metadata"]["name"], "spark-role": "executor",
              "spark-exec-id": str(i), "spark-app-selector": "spark-e2e",
              "sparkoperator.k8s.io/launched-by-spark-operator": "true"}
    meta = driver["metadata"]
    return json.dumps({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"pi-exec-{i}", "namespace": meta["namespace"], "labels": labels,
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Pod",
                                          "name": meta["name"], "uid": meta["uid"],
                                          "controller": True}]},
        "spec": {"nodeSelector": role.get("nodeSelector") or {},
                 "tolerations": role.get("tolerations") or [],
                 "containers": [{"name": "spark-kubernetes-executor", "image": "spark:4.0.1",
                                 "resources": template["spec"]["containers"][0]["resources"]}]}})


def test_an_admitted_applications_executors_run_on_its_admission_up_to_its_count(
        lab: LabHandle, spark_operator: None, pykueue_in_lab: object) -> None:  # noqa: F811
    """SparkApplication ``pi`` (driver + 2 executors, 1 GPU each) admitted on 3 GPUs, its
    driver Running: both executors are created ungated and Running on the flavor's node, no
    Workload but the application's; a third is refused at create, naming the podSet."""
    with spark_namespace(lab, "sparkexec", gpus=3) as (ns, _cq):
        lab.apply(sparkapp("pi", ns, 2))
        driver = running_driver(lab, ns, "pi")
        wl = wait_for(lambda: admitted(lab, ns, "pi"), 60, "pi admitted")
        app = get_app(lab, ns, "pi")
        for i in (1, 2):
            lab.apply(executor(app, wl, driver, i))
        for i in (1, 2):
            pod = wait_for(lambda i=i: (p := lab.get("pod", f"pi-exec-{i}", "-n", ns))
                           ["status"].get("phase") == "Running" and p, 60,
                           f"pi-exec-{i} Running")
            assert GATE not in [g["name"] for g in pod["spec"].get("schedulingGates") or []]
            node = lab.get("node", pod["spec"]["nodeName"])["metadata"]["labels"]
            assert A100.items() <= node.items(), (pod["spec"]["nodeName"], node)
        workloads = lab.get("workloads.kueue.x-k8s.io", "-n", ns)["items"]
        assert [w["metadata"]["name"] for w in workloads] == \
            [owned_workload(lab, ns, KIND, "pi")["metadata"]["name"]], workloads
        r = lab.kubectl("apply", "-f", "-", input=executor(app, wl, driver, 3), check=False)
        assert r.returncode != 0 and "podSet executor" in r.stderr, (r.stdout, r.stderr)

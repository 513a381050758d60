"""SparkApplication as a job kind: the driver and executor podSets Kueue v0.17.1 builds from
the roles' fields, the start writing each role's flavor into its own fields (or into
``spec.nodeSelector`` when the object sets it) and the stop restoring them, finished and
running states, and Kueue's webhook refusals (client mode, dynamic allocation)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.integrations import default_registry, framework_of
from app.integrations.podsets import InjectionConflict
from app.integrations.sparkapplication.sparkapplication import KIND, java_memory, role_template
from app.integrations.webhook_toolkit import WebhookPolicy
from app.wire.fields import WorkloadSpecError
from app.wire.names import ORIGINAL_ANNOTATION

QUEUE = "kueue.x-k8s.io/queue-name"
POLICY = WebhookPolicy(controller_usernames=frozenset({"system:serviceaccount:p:p"}))
TOL = {"key": "pool", "operator": "Exists", "effect": "NoSchedule"}
FLAVOR = ({"gpu": "a100"}, [TOL])


def app(executors: int | None = 2, **spec: Any) -> dict[str, Any]:
    executor: dict[str, Any] = {"coreRequest": "1", "memory": "2g",
                                "gpu": {"name": "nvidia.com/gpu", "quantity": 1}}
    if executors is not None:
        executor["instances"] = executors
    return {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
            "metadata": {"name": "pi", "namespace": "ns", "uid": "u-1",
                         "labels": {QUEUE: "lq"}},
            "spec": {"mode": "cluster", "type": "Scala", "suspend": True,
                     "driver": {"coreRequest": "500m", "memory": "512m", "coreLimit": "1",
                                "labels": {"team": "a"},
                                "template": {"metadata": {"annotations": {"x": "y"}}}},
                     "executor": executor, **spec}}


def test_registered_under_kueues_framework_name() -> None:
    assert framework_of(KIND) == "sparkoperator.k8s.io/sparkapplication"
    assert default_registry(["sparkoperator.k8s.io/sparkapplication"]).kinds() == (KIND,)
    assert KIND.optional


def test_podsets_driver_one_and_executors_as_instances() -> None:
    wl = KIND.workload_object(app())
    sets = wl["spec"]["podSets"]
    assert [(s["name"], s["count"]) for s in sets] == [("driver", 1), ("executor", 2)]
    driver = sets[0]["template"]
    assert driver["metadata"] == {"labels": {"team": "a"}, "annotations": {"x": "y"}}
    assert driver["spec"]["containers"] == [{"name": "spark-kubernetes-driver", "resources": {
        "requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": "1"}}}]
    executor = sets[1]["template"]["spec"]["containers"][0]
    assert executor["resources"] == {"requests": {"cpu": "1", "memory": "2Gi"},
                                     "limits": {"nvidia.com/gpu": 1}}
    assert wl["metadata"]["name"].startswith("sparkapplication-pi-")
    # Kueue's count of initial executors: instances, default 0.
    assert [p.count for p in KIND.desired(app(None)).pod_sets] == [1, 0]


def test_java_memory_sizes() -> None:
    assert [java_memory(v) for v in ("512m", "2G", "1024", "3k")] == ["512Mi", "2Gi", "1024",
                                                                     "3Ki"]


def test_bad_fields_name_themselves() -> None:
    with pytest.raises(WorkloadSpecError, match="spec.executor.instances"):
        KIND.templates(app(-1))
    bad = app()
    bad["spec"]["driver"] = "x"
    with pytest.raises(WorkloadSpecError, match="spec.driver"):
        KIND.templates(bad)
    assert role_template(app(), "driver")["spec"]["containers"][0]["name"] == \
        "spark-kubernetes-driver"


def test_start_writes_each_roles_fields_and_stop_restores_them() -> None:
    obj = app()
    started = KIND.injected(obj, {"driver": FLAVOR, "executor": FLAVOR})
    assert started["spec"]["suspend"] is False
    driver = started["spec"]["driver"]
    assert driver["nodeSelector"] == {"gpu": "a100"}
    assert driver["tolerations"] == [TOL]
    assert driver["labels"] == {"team": "a", "kueue.x-k8s.io/podset": "driver"}
    assert started["spec"]["executor"]["labels"] == {"kueue.x-k8s.io/podset": "executor"}
    assert ORIGINAL_ANNOTATION in started["metadata"]["annotations"]
    assert KIND.injected(started, {"driver": FLAVOR, "executor": FLAVOR}) == started
    assert KIND.restored(started) == obj
    # The start changes no podSet: the admitted Workload still matches.
    assert KIND.desired(started).pod_sets[1].count == 2


def test_an_app_level_node_selector_takes_the_flavors() -> None:
    obj = app(nodeSelector={"zone": "z1"})
    started = KIND.injected(obj, {"driver": FLAVOR, "executor": FLAVOR})
    assert started["spec"]["nodeSelector"] == {"zone": "z1", "gpu": "a100"}
    assert "nodeSelector" not in started["spec"]["driver"]
    assert KIND.restored(started) == obj
    with pytest.raises(InjectionConflict):
        KIND.injected(app(nodeSelector={"gpu": "l4"}), {"driver": FLAVOR})


def test_finished_and_running_states() -> None:
    def state(s: str, msg: str = "") -> dict[str, Any]:
        return {**app(), "status": {"applicationState": {"state": s, "errorMessage": msg}}}
    assert KIND.finished(state("COMPLETED"))[:2] == (True, "Succeeded")
    assert KIND.finished(state("FAILED", "boom")) == (True, "Failed", "boom")
    assert KIND.finished(state("SUBMISSION_FAILED"))[:2] == (True, "Failed")
    assert not KIND.finished(state("RUNNING"))[0]
    assert KIND.pods_ready(state("RUNNING")) and not KIND.pods_ready(state("SUBMITTED"))
    assert KIND.active_pods(state("RUNNING")) == 3 and KIND.active_pods(state("SUSPENDED")) == 0


def test_webhook_suspends_and_refuses_what_kueue_refuses() -> None:
    obj = app()
    obj["spec"]["suspend"] = False
    assert KIND.rules.mutate(obj, "CREATE", POLICY) == [
        {"op": "add", "path": "/spec/suspend", "value": True}]
    ok = app()
    assert KIND.rules.validate(None, ok, "u", POLICY) == []
    client = app(mode="client")
    assert any("only Cluster mode" in e for e in KIND.rules.validate(None, client, "u", POLICY))
    dyn = app(dynamicAllocation={"enabled": True})
    errors = KIND.rules.validate(None, dyn, "u", POLICY)
    assert any("dynamicAllocation" in e for e in errors)
    assert any("dynamicAllocation" in e for e in KIND.rules.validate(ok, dyn, "u", POLICY))
    # pykueue's own start is allowed.
    assert KIND.rules.validate(ok, KIND.injected(copy.deepcopy(ok), {"driver": FLAVOR}),
                               "system:serviceaccount:p:p", POLICY) == []


@pytest.mark.parametrize("conf", [
    {"spark.driver.resource.gpu.amount": "4", "spark.driver.resource.gpu.vendor": "nvidia.com"},
    {"spark.executor.resource.gpu.amount": "2"},
    {"spark.executor.instances": "8"},
    {"spark.dynamicAllocation.enabled": "true"},
    {"spark.kubernetes.executor.podTemplateFile": "/tmp/t.yaml"},
    {"spark.kubernetes.driver.request.cores": "64"},
    {"spark.executor.memory": "200g"},
])
def test_spark_conf_that_the_podsets_do_not_count_is_refused(conf: dict[str, str]) -> None:
    """Spark reads these from sparkConf where a typed field is not set; the Workload counts
    the typed fields only (a driver asked 4 GPUs on an admission of none, on the lab)."""
    ok = app()
    bad = app(sparkConf={**conf, "spark.eventLog.enabled": "false"})
    for errors in (KIND.rules.validate(None, bad, "u", POLICY),
                   KIND.rules.validate(ok, bad, "u", POLICY)):
        assert {e.split("]")[0] for e in errors} == {f"spec.sparkConf[{k}" for k in conf}, errors
    # A stored object that already had them may still be changed otherwise (and started).
    assert KIND.rules.validate(bad, copy.deepcopy(bad), "u", POLICY) == []
    assert KIND.rules.validate(None, app(sparkConf={"spark.eventLog.enabled": "false"}), "u",
                               POLICY) == []


def test_resources_in_a_roles_template_are_refused() -> None:
    obj = app()
    obj["spec"]["executor"]["template"] = {"spec": {
        "containers": [{"name": "spark-kubernetes-executor",
                        "resources": {"limits": {"nvidia.com/gpu": "4"}}}],
        "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "8"}}}],
        "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "eight"}]}}
    errors = KIND.rules.validate(None, obj, "u", POLICY)
    assert [e.split(":")[0] for e in errors] == [
        "spec.executor.template.spec.resourceClaims",
        "spec.executor.template.spec.containers[0].resources",
        "spec.executor.template.spec.initContainers[0].resources"], errors
    # Metadata and other fields of a template are fine (the driver's in app()).
    assert KIND.rules.validate(None, app(), "u", POLICY) == []

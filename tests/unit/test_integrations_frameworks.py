"""``settings.integrations.frameworks`` (Kueue v1beta2 Configuration ``integrations.frameworks``):
the names accepted and refused, the Manager's registry of the kinds listed, and the webhooks of
a kind not listed allowing every request unchanged (real ASGI app, no cluster)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from app.config import KUEUE_FRAMEWORKS, IntegrationsSettings, ServerSettings, Settings
from app.controllers.manager import Manager
from app.integrations import BUILTIN_KINDS, CRD_RULES, default_registry, framework_of
from app.main import create_app
from tests.unit.test_kubeflow import job as pytorchjob
from tests.unit.test_kubeflow import replica
from tests.unit.test_webhook import answer, job, post, review


def test_every_builtin_kind_has_a_kueue_framework_name() -> None:
    names = {framework_of(k) for k in BUILTIN_KINDS}
    # Deployment, StatefulSet and LeaderWorkerSet are webhooks only (their Pods are the "pod" kind).
    assert names == set(KUEUE_FRAMEWORKS) - {"deployment", "statefulset",
                                            "leaderworkerset.x-k8s.io/leaderworkerset"}
    assert framework_of(default_registry().get("job")) == "batch/job"  # type: ignore[arg-type]


def test_default_is_every_framework() -> None:
    assert Settings().integrations.frameworks == list(KUEUE_FRAMEWORKS)
    assert len(default_registry(KUEUE_FRAMEWORKS).kinds()) == len(BUILTIN_KINDS)


def test_an_unknown_name_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValidationError) as err:
        IntegrationsSettings(frameworks=["batch/job", "kubeflow.org/pytorchjobs"])
    text = str(err.value)
    assert "unknown framework(s) 'kubeflow.org/pytorchjobs'" in text
    assert "known: batch/job, pod, deployment" in text and "ray.io/raycluster" in text


def test_deployment_without_pod_is_refused() -> None:
    with pytest.raises(ValidationError, match="'deployment' needs 'pod'"):
        IntegrationsSettings(frameworks=["batch/job", "deployment"])


def test_duplicates_are_dropped_and_order_kept() -> None:
    s = IntegrationsSettings(frameworks=["ray.io/rayjob", "batch/job", "ray.io/rayjob"])
    assert s.frameworks == ["ray.io/rayjob", "batch/job"]


def test_the_environment_sets_the_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYKUEUE_INTEGRATIONS__FRAMEWORKS", '["batch/job","jobset.x-k8s.io/jobset"]')
    assert Settings().integrations.frameworks == ["batch/job", "jobset.x-k8s.io/jobset"]


def test_the_manager_registers_only_the_kinds_listed() -> None:
    settings = Settings(controllers_enabled=False, integrations=IntegrationsSettings(
        frameworks=["batch/job", "pod", "kubeflow.org/pytorchjob", "ray.io/raycluster"]))
    keys = {k.key for k in Manager(settings).registry.kinds()}
    pod_keys = {k.key for k in BUILTIN_KINDS if framework_of(k) == "pod"}
    assert len(pod_keys) == 2  # Pods and pod groups are one Kueue integration
    expected = {"job", *pod_keys} | {k.key for k in BUILTIN_KINDS if framework_of(k) in (
        "kubeflow.org/pytorchjob", "ray.io/raycluster")}
    assert keys == expected and len(keys) == 5


def _app(frameworks: list[str]) -> Any:
    return create_app(Settings(controllers_enabled=False,
                               server=ServerSettings(metrics_auth=False),
                               integrations=IntegrationsSettings(frameworks=frameworks)))


PYTORCH_RULES = next(r for r in CRD_RULES if r.kind == "PyTorchJob")


def _pytorch_review() -> dict[str, Any]:
    sent = review("CREATE", pytorchjob(suspend=False, Worker=replica(2)))
    sent["request"]["kind"] = {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"}
    sent["request"]["resource"] = {"group": "kubeflow.org", "version": "v1",
                                   "resource": "pytorchjobs"}
    return sent


async def test_the_webhooks_of_a_kind_not_listed_allow_everything_unchanged() -> None:
    off = _app(["pod", "deployment"])
    sent = _pytorch_review()
    got = answer(await post(off, PYTORCH_RULES.mutate_path, sent), sent)
    assert got["allowed"] is True and "patch" not in got  # not suspended: not queued
    got = answer(await post(off, PYTORCH_RULES.validate_path, sent), sent)
    assert got["allowed"] is True  # a running queued object: refused when managed (below)
    job_sent = review("CREATE", job(suspend=False))
    got = answer(await post(off, "/mutate-batch-v1-job", job_sent), job_sent)
    assert got["allowed"] is True and "patch" not in got


async def test_the_webhooks_of_a_kind_listed_still_act() -> None:
    on = _app(["kubeflow.org/pytorchjob", "batch/job"])
    sent = _pytorch_review()
    got = answer(await post(on, PYTORCH_RULES.mutate_path, sent), sent)
    assert got["allowed"] is True and got["patchType"] == "JSONPatch"
    got = answer(await post(on, PYTORCH_RULES.validate_path, sent), sent)
    assert got["allowed"] is False and got["status"]["code"] == 403
    job_sent = review("CREATE", job(suspend=False))
    got = answer(await post(on, "/mutate-batch-v1-job", job_sent), job_sent)
    assert got["patchType"] == "JSONPatch"

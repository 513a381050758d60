"""A Job's stop when the API server refuses the template restore because the Job controller
has not settled the suspension yet ("field is immutable"): retried quietly as a Conflict, and
the workqueue's log line for a refused write stays short (a 422 quotes the whole object)."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from app.integrations.batchjob.job import KIND, ORIGINAL_ANNOTATION
from app.kube.errors import Conflict, Permanent
from app.kube.workqueue import _short


class _Store:
    def put(self, obj: dict[str, Any]) -> None:
        pass


class _Client:
    def __init__(self, refuse: Exception) -> None:
        self.refuse = refuse
        self.replaced: list[dict[str, Any]] = []

    async def replace(self, resource: Any, obj: dict[str, Any]) -> dict[str, Any]:
        self.replaced.append(obj)
        raise self.refuse


class _Ctx:
    def __init__(self, client: _Client) -> None:
        self.client = client
        self.recorder = None

    def store(self, key: Any) -> _Store:
        return _Store()


def _suspended_injected_job() -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "research", "annotations": {
                ORIGINAL_ANNOTATION: json.dumps({"nodeSelector": {}})}},
            "spec": {"suspend": True, "template": {"spec": {
                "nodeSelector": {"gpu": "a100"}, "containers": [{"name": "c"}]}}},
            "status": {}}


def test_a_restore_refused_as_immutable_is_retried_as_a_conflict() -> None:
    refused = Permanent(422, "Invalid", 'Job.batch "train" is invalid: spec.template: Invalid '
                        "value: {...}: field is immutable")
    client = _Client(refused)
    with pytest.raises(Conflict) as got:
        asyncio.run(KIND.stop(_Ctx(client), _suspended_injected_job(), "evicted"))
    assert got.value.reason == "NotSettled" and got.value.__cause__ is refused
    # The write tried was the restore: the recorded (empty) nodeSelector back in place.
    assert client.replaced[0]["spec"]["template"]["spec"]["nodeSelector"] == {}


def test_a_restore_refused_for_its_content_drops_the_record() -> None:
    client = _Client(Permanent(422, "Invalid", "spec.template.spec.tolerations[0]: bad"))
    with pytest.raises(Permanent):  # the second write (record dropped) is refused here too
        asyncio.run(KIND.stop(_Ctx(client), _suspended_injected_job(), "evicted"))
    assert len(client.replaced) == 2
    assert ORIGINAL_ANNOTATION not in client.replaced[1]["metadata"].get("annotations", {})


def test_a_long_api_error_is_cut_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    exc = Permanent(422, "Invalid", "x" * 5000)
    text = _short(exc)
    assert len(text) < 500 and text.endswith(f"({len(str(exc))} characters)")
    assert _short(Permanent(404, "NotFound", "gone")) == "HTTP 404 NotFound: gone"
    logging.getLogger("t").warning("%s", text)
    assert "x" * 1000 not in caplog.text

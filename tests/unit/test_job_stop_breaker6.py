"""breaker6: a tenant's start record that makes the API server's refusal quote "field is
immutable" must not make the stop retry for ever (the evicted Job's quota would never be
released, and a preemptor of another team waiting for it would wait for ever).

The refusals are the API server's ``metav1.Status`` bodies (reason Invalid, with
``details.causes``) as kube-apiserver writes them for a batch/v1 Job update, parsed by
``app.kube.errors.from_status`` as the client does; their text was taken from the
lab's kube-apiserver v1.36.3 (``kubectl replace -v=8`` / a PUT through ``kubectl proxy``)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from app.integrations.batchjob.job import KIND, ORIGINAL_ANNOTATION, refused_as_immutable
from app.kube.errors import Conflict, Permanent, from_status
from tests.unit.test_job_stop_retry import _Client, _Ctx


def _status(message: str, causes: list[dict[str, str]]) -> bytes:
    return json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                       "message": message, "reason": "Invalid",
                       "details": {"name": "train", "group": "batch", "kind": "Job",
                                   "causes": causes}, "code": 422}).encode()


# kube-apiserver v1.36.3 (the lab's), PUT of a suspended Job whose template labels hold
# {"x": "field is immutable"} (a cause per label rule; the second one cut here).
_LABEL_RULE = ("a valid label must be an empty string or consist of alphanumeric characters, "
               "'-', '_' or '.', and must start and end with an alphanumeric character (e.g. "
               "'MyValue',  or 'my_value',  or '12345', regex used for validation is "
               "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")
SPOOFED = from_status(422, _status(
    'Job.batch "train" is invalid: spec.template.labels: Invalid value: "field is immutable": '
    + _LABEL_RULE,
    [{"reason": "FieldValueInvalid", "field": "spec.template.labels",
      "message": 'Invalid value: "field is immutable": ' + _LABEL_RULE}]))

# The same server, PUT of a started Job (status.startTime set) with another nodeSelector: one
# cause on the whole template, quoting it (shortened here).
NOT_SETTLED = from_status(422, _status(
    'Job.batch "train" is invalid: spec.template: Invalid value: {"labels":{"app":"t"},'
    '"Spec":{"SchedulingGroup":null}}: field is immutable',
    [{"reason": "FieldValueInvalid", "field": "spec.template",
      "message": 'Invalid value: {"labels":{"app":"t"},"Spec":{"SchedulingGroup":null}}: '
                 "field is immutable"}]))


def test_only_the_whole_templates_refusal_reads_as_not_settled() -> None:
    assert refused_as_immutable(NOT_SETTLED)
    assert not refused_as_immutable(SPOOFED)
    # Without causes, from the message's first error only.
    assert refused_as_immutable(Permanent(422, "Invalid", 'Job.batch "train" is invalid: '
                                          "spec.template: Invalid value: {...}: field is "
                                          "immutable"))
    assert not refused_as_immutable(Permanent(
        422, "Invalid", 'Job.batch "train" is invalid: spec.template.spec.tolerations[0].key: '
        'Invalid value: "spec.template: Invalid value: x: field is immutable"'))


def _job_with_record(record: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "research",
                         "annotations": {ORIGINAL_ANNOTATION: json.dumps(record)}},
            "spec": {"suspend": True, "template": {"spec": {
                "nodeSelector": {"gpu": "a100"}, "containers": [{"name": "c"}]}}},
            "status": {}}


def test_a_record_whose_refusal_quotes_field_is_immutable_is_dropped_not_retried() -> None:
    """The tenant edited the record on its running Job: template labels
    {"x": "field is immutable"}. The restore is refused for that content; the stop drops the
    record (second write) instead of raising a Conflict for ever."""
    client = _Client(SPOOFED)
    with pytest.raises(Permanent) as got:  # the fake refuses the second write too
        asyncio.run(KIND.stop(_Ctx(client), _job_with_record(
            {"labels": {"x": "field is immutable"}}), "evicted"))
    assert not isinstance(got.value, Conflict)
    assert len(client.replaced) == 2
    assert ORIGINAL_ANNOTATION not in client.replaced[1]["metadata"].get("annotations", {})


def test_the_whole_templates_refusal_is_still_retried_as_a_conflict() -> None:
    client = _Client(NOT_SETTLED)
    with pytest.raises(Conflict):
        asyncio.run(KIND.stop(_Ctx(client), _job_with_record({"nodeSelector": {}}), "evicted"))
    assert len(client.replaced) == 1

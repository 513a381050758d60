"""app.wire.owners: the one reader of an object's controller ownerReference."""

from __future__ import annotations

import pytest

from app.extender.placement import ExtenderInputError, pod_facts
from app.wire.fields import WorkloadSpecError
from app.wire.owners import OwnerRef, controller_of_object, controller_ref

JOB_REF = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u-1",
           "controller": True}
CM_REF = {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "uid": "u-2"}


def test_the_controller_reference_is_the_one_with_controller_true():
    meta = {"ownerReferences": [CM_REF, JOB_REF]}
    ref = controller_ref(meta)
    assert ref == OwnerRef("batch/v1", "Job", "train", "u-1")
    assert ref.group == "batch"
    assert controller_of_object({"metadata": meta}) == ref


def test_a_reference_that_is_not_the_controller_is_no_controller():
    assert controller_ref({"ownerReferences": [CM_REF]}) is None
    # Only a JSON true counts, as the API server stores it; a string is not a controller.
    assert controller_ref({"ownerReferences": [{**JOB_REF, "controller": "true"}]}) is None
    assert controller_ref({}) is None
    assert controller_of_object(None) is None


def test_the_core_group_is_the_empty_group():
    ref = controller_ref({"ownerReferences": [{**CM_REF, "controller": True}]})
    assert ref is not None and ref.group == "" and ref.kind == "ConfigMap"


def test_lenient_reading_skips_wrong_shapes():
    assert controller_ref({"ownerReferences": "x"}) is None
    assert controller_ref({"ownerReferences": [1, JOB_REF]}) == OwnerRef(
        "batch/v1", "Job", "train", "u-1")
    assert controller_ref("metadata") is None


def test_strict_reading_names_the_field():
    with pytest.raises(WorkloadSpecError) as e:
        controller_ref({"ownerReferences": [1]}, strict=True, where="Pod.metadata")
    assert e.value.field == "Pod.metadata.ownerReferences[0]"
    with pytest.raises(WorkloadSpecError) as e:
        controller_ref({"ownerReferences": {}}, strict=True, where="Pod.metadata")
    assert e.value.field == "Pod.metadata.ownerReferences"


def test_the_extender_refuses_a_malformed_reference_and_reads_a_good_one():
    pod = {"metadata": {"name": "p", "namespace": "ns", "ownerReferences": [JOB_REF]},
           "spec": {"containers": []}}
    assert pod_facts(pod, "nvidia.com/gpu").controller == OwnerRef(
        "batch/v1", "Job", "train", "u-1")
    bad = {"metadata": {"name": "p", "ownerReferences": ["x", JOB_REF]},
           "spec": {"containers": []}}
    with pytest.raises(ExtenderInputError):
        pod_facts(bad, "nvidia.com/gpu")

"""Findings of the attack on the pod-group path (issue 17 review): each test failed before
its fix.

F1: a fast-admission pod group (a StatefulSet's, or forged by a tenant) was compared with its
admission using only its first pod's shape, so members with larger requests ran on the first
pod's quota. F3: a controller ownerReference written by the tenant lifted the Pod rules. F4:
removing ``kueue.x-k8s.io/managed`` hid a running member. F5: a huge total count was parsed.
"""

from __future__ import annotations

import pytest

from app.core.workload import admission_mismatch
from app.integrations.pod.group import KIND
from app.integrations.pod.webhook_rules import ROLE_HASH_ANNOTATION, role_hash, validate_pod
from app.wire.fields import WorkloadSpecError
from app.wire.names import FAST_ADMISSION_ANNOTATION
from app.wire.workload import workload_from_object
from tests.unit.test_pod_group import group, member
from tests.unit.test_pod_integration import KINDS, POLICY


def fast(p):
    p["metadata"]["annotations"][FAST_ADMISSION_ANNOTATION] = "true"
    return p


def test_fast_admission_group_member_with_bigger_requests_is_a_mismatch():
    admitted_body = KIND.workload_object(group(fast(member("a-0", total="4", cpu="1"))),
                                         priority_classes={}, pod_priority_classes={})
    admitted = workload_from_object(admitted_body)
    # the same group later: members 1..3 ask for 8 CPUs each (other role hash)
    later = group(fast(member("a-0", total="4", cpu="1")),
                  *(fast(member(f"a-{i}", total="4", cpu="8")) for i in (1, 2, 3)))
    # The reconciler treats a group it cannot compose as not matching its admission: stopped.
    with pytest.raises(WorkloadSpecError, match="differ in shape"):
        KIND.desired(later, priority_classes={}, pod_priority_classes={})
    same = group(*(fast(member(f"a-{i}", total="4", cpu="1")) for i in range(4)))
    want = KIND.desired(same, priority_classes={}, pod_priority_classes={})
    assert admission_mismatch(want.pod_sets, admitted, fewer_ok=True) is None


def test_a_tenant_cannot_forge_the_fast_admission_annotation():
    p = fast(member("a-0", total="4"))
    p["spec"].pop("schedulingGates")
    p["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    p["metadata"]["annotations"][ROLE_HASH_ANNOTATION] = role_hash(p)
    errors = validate_pod(None, p, "system:serviceaccount:research:tenant", POLICY, KINDS)
    assert errors, "a user Pod (no StatefulSet) may not claim fast admission"


def test_an_owner_reference_added_by_the_tenant_does_not_lift_the_pod_rules():
    """F3: ``is_managed(old)`` trusts the Pod's (mutable) controller ownerReference, so a
    tenant first points a gated group member at any Job of its namespace (one update, allowed)
    and then rewrites the immutable role hash (or removes the admission gate)."""
    tenant = "system:serviceaccount:research:tenant"
    small = member("a", total="2", cpu="1")
    big = member("b", total="2", cpu="8")
    owned = {**big, "metadata": {**big["metadata"], "ownerReferences": [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "decoy", "uid": "u-decoy",
         "controller": True}]}}
    errors = validate_pod(big, owned, tenant, POLICY, KINDS)
    assert any("ownerReferences" in e for e in errors), errors  # step 1 is refused now
    # Even if it got through, the managed label keeps the rules in force.
    forged = {**owned, "metadata": {**owned["metadata"], "annotations": {
        **owned["metadata"]["annotations"],
        ROLE_HASH_ANNOTATION: small["metadata"]["annotations"][ROLE_HASH_ANNOTATION]}}}
    assert validate_pod(owned, forged, tenant, POLICY, KINDS), "role hash must stay immutable"
    ungated = {**owned, "spec": {**owned["spec"], "schedulingGates": []}}
    assert validate_pod(owned, ungated, tenant, POLICY, KINDS), "only pykueue may ungate"


def test_the_managed_label_cannot_be_removed_from_a_queued_pod():
    """F4: pykueue's Pod informer selects ``kueue.x-k8s.io/managed=true``; a tenant who drops
    the label from a running group member hides it, and the group takes more members."""
    tenant = "system:serviceaccount:research:tenant"
    running = member("b", total="2")
    running["spec"]["schedulingGates"] = []
    hidden = {**running, "metadata": {**running["metadata"], "labels": {
        k: v for k, v in running["metadata"]["labels"].items()
        if k != "kueue.x-k8s.io/managed"}}}
    assert validate_pod(running, hidden, tenant, POLICY, KINDS), \
        "removing kueue.x-k8s.io/managed must be refused"


def test_a_huge_total_count_is_refused_without_parsing_it():
    p = member("a", total="9" * 5000)
    errors = validate_pod(None, p, "system:serviceaccount:research:tenant", POLICY, KINDS)
    assert any("from 1 to 100000" in e for e in errors), errors


def test_a_member_resized_in_place_no_longer_matches():
    """Same role hash (set at creation), other requests now: the group must not match."""
    import pytest

    from app.wire.fields import WorkloadSpecError

    a, b = member("a", total="2"), member("b", total="2")
    b["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "8"
    with pytest.raises(WorkloadSpecError, match="requests other resources"):
        KIND.desired(group(a, b), priority_classes={}, pod_priority_classes={})

"""brk29: reproducers of open findings (strict xfails: each fails once its finding is fixed,
and then joins the suite with its marker removed; docs/security.md Known gaps).

H (``framework.stray_pod`` against ``JobReconciler._delete_strays``): a tenant's queued plain
Pod labelled with a living JobSet's ``jobset-name`` and ``jobset-uid`` and a podset label
counts for the JobSet as its stray, but is never deleted (its own Workload owns it,
``_others_pods``), so the JobSet's evicted Workload waits for it for good. Lab:
tests/e2e/test_brk29_findings.py.

L (``_delete_strays``' wait for a batch Job's adoption): a pod without a controller whose
``controller-uid`` and ``job-name`` labels name a living Job that never adopts it (a Job with
``manualSelector``, a finished one) makes its object's reconcile come back every
``PODS_POLL`` for as long as it stays.

L (webhook ``vappwrapper-wrapped-owned``): while an AppWrapper's ``generateName`` component
is not recorded yet, any name with its prefix passes as that component, so a tenant's extra
Deployment created then under the AppWrapper is no component once the controller records its
own, and its replicas are then held to nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.integrations.framework import pod_of
from app.integrations.reconciler import PODS_POLL
from app.kube.context import CHILD_JOBS, POD, WL
from app.wire.workload import workload_name_for_owner
from tests.unit.test_appwrapper_wrapped import (
    create_review,
    decide,
    object_review,
    owned,
    queued_appwrapper,
)
from tests.unit.test_orphaned_child_pods import JOBSET, NS, _job, _obj, _pod, _reconciler


def _decoy_workload() -> dict[str, Any]:
    """The plain Pod ``decoy``'s own Workload (pending: no admission)."""
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": workload_name_for_owner("Pod", "", "decoy", "uid-decoy"),
                         "namespace": NS, "uid": "wl-decoy",
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod",
                                              "name": "decoy", "uid": "uid-decoy",
                                              "controller": True}]},
            "spec": {"podSets": [{"name": "workers", "count": 1}], "queueName": "lq"}}


def test_a_pod_the_stray_rule_leaves_does_not_count_for_the_object() -> None:
    """The JobSet is stopped (suspended after an eviction; its own pods are gone). The decoy:
    gated, Pending, labelled ``queue-name``, ``kueue.x-k8s.io/podset`` and the JobSet's name
    and uid labels (all written by the tenant), no controller, its own Workload pending. What
    the stray rule does not delete must not count for the JobSet either: on main the release
    of the JobSet's Workload waits for it (1 pod) while nothing deletes it."""
    rec, ctx = _reconciler()
    js = _obj(JOBSET, "train", "js-uid")
    js["spec"] = {"suspend": True}
    ctx.store("jobset").put(js)
    decoy = _pod("decoy", {"jobset.sigs.k8s.io/jobset-name": "train",
                           "jobset.sigs.k8s.io/jobset-uid": "js-uid",
                           "kueue.x-k8s.io/queue-name": "lq",
                           "kueue.x-k8s.io/managed": "true"}, phase="Pending")
    decoy["spec"] = {"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]}
    ctx.store(POD).put(decoy)
    ctx.store(WL).put(_decoy_workload())
    assert asyncio.run(rec._delete_strays(JOBSET, js)) is None
    assert ctx.deleted == []  # its own Workload's: rightly left
    assert not pod_of(JOBSET, decoy, "train", "js-uid", ctx=ctx)  # type: ignore[arg-type]
    assert rec._pods_holding_quota(JOBSET, js) == 0


def test_a_pod_groups_member_is_not_a_stray_but_an_unowned_decoy_is() -> None:
    """The same decoy as a member of a pod group ``grp`` (label
    ``kueue.x-k8s.io/pod-group-name``) whose Workload ``grp`` owns it: not the JobSet's
    stray, neither counted nor deleted. A second decoy no Workload owns (the group's
    Workload names only the first) is a stray: counted and deleted."""
    rec, ctx = _reconciler()
    js = _obj(JOBSET, "train", "js-uid")
    js["spec"] = {"suspend": True}
    ctx.store("jobset").put(js)
    labels = {"jobset.sigs.k8s.io/jobset-name": "train",
              "jobset.sigs.k8s.io/jobset-uid": "js-uid",
              "kueue.x-k8s.io/pod-group-name": "grp"}
    member, loose = _pod("member", labels), _pod("loose", labels)
    ctx.store(POD).put(member)
    ctx.store(POD).put(loose)
    group_wl = _decoy_workload()
    group_wl["metadata"]["name"] = "grp"
    group_wl["metadata"]["ownerReferences"][0].update(name="member", uid="uid-member")
    ctx.store(WL).put(group_wl)
    assert not pod_of(JOBSET, member, "train", "js-uid", ctx=ctx)  # type: ignore[arg-type]
    assert pod_of(JOBSET, loose, "train", "js-uid", ctx=ctx)  # type: ignore[arg-type]
    asyncio.run(rec._delete_strays(JOBSET, js))
    assert [d for d in map(str, ctx.deleted) if "member" in d] == []
    assert any("loose" in str(d) for d in ctx.deleted), ctx.deleted


def test_a_pod_no_job_will_adopt_does_not_keep_its_object_polled() -> None:
    """A bare pod of the tenant (Pending, no node, no quota) with the podset label, a
    JobSet's name label and the ``job-name`` / ``controller-uid`` labels of its Job
    ``keeper`` (``manualSelector``, a selector no pod of these matches; or a finished Job,
    which the Job controller no longer syncs): ``adopted_by_job`` says the Job takes it back,
    so ``_delete_strays`` answers ``PODS_POLL`` on every pass (a lab probe: 400 such JobSets,
    queued to a LocalQueue that does not exist, kept pykueue at 0.26 cores against 0.007
    idle). The wait for an adoption must end (a bound from when the pod was first seen
    without a controller, or a back-off)."""
    rec, ctx = _reconciler()
    js = _obj(JOBSET, "train", "js-uid")
    ctx.store("jobset").put(js)
    ctx.store(CHILD_JOBS).put(_job("keeper", "keeper-uid"))
    pod = _pod("p0", {"jobset.sigs.k8s.io/jobset-name": "train",
                      "batch.kubernetes.io/job-name": "keeper",
                      "batch.kubernetes.io/controller-uid": "keeper-uid"}, phase="Pending")
    pod["spec"] = {"nodeSelector": {"no": "such-node"}}
    ctx.store(POD).put(pod)
    now = iter(range(1_000_000, 1_000_120))
    ctx.clock = lambda: float(next(now))  # passes a second apart
    answers = [asyncio.run(rec._delete_strays(JOBSET, js)) for _ in range(120)]
    assert answers.count(PODS_POLL) < 120, "re-queued every PODS_POLL for 120 s"


@pytest.mark.xfail(strict=True, reason="brk29 L: an extra Deployment created under an "
                   "AppWrapper while its generateName component is unrecorded is no component "
                   "once the controller records its own, and may then be scaled at will")
async def test_an_extra_deployment_under_a_generate_name_appwrapper_is_held() -> None:
    """The AppWrapper (1 replica of 1 GPU) names its Deployment by ``generateName: dep-``.
    Before the controller records the name it generated, the tenant creates ``dep-evil`` (1
    replica) under it: allowed as that component. The controller then creates and records
    ``dep-x7k2p``; ``dep-evil``, still controlled by the AppWrapper, is no component any
    more, so raising it to 8 replicas is allowed: 9 GPU pods under an admission of 1
    (``wrapped_component`` matches the prefix only until the name is recorded). One of the
    two must be refused."""
    unrecorded = queued_appwrapper(generateName="dep-")
    created = (await decide(create_review(owned(1, name="dep-evil")), unrecorded))["allowed"]
    recorded = queued_appwrapper(generateName="dep-")
    recorded["status"] = {"componentStatus": [{"name": "side"}, {"name": "dep-x7k2p"}]}
    review = object_review(owned(1, name="dep-evil"), owned(8, name="dep-evil"))
    review["request"]["name"] = "dep-evil"
    scaled = (await decide(review, recorded))["allowed"]
    assert not (created and scaled), "dep-evil created under the AppWrapper, then raised to 8"

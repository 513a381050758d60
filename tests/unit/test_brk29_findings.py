"""brk29: the findings of a breaker's pass over session 29's fixes, each closed
(docs/security.md).

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
is not recorded yet, any name with its prefix passed as that component, so a tenant's extra
Deployment created then under the AppWrapper was no component once the controller recorded
its own, and its replicas were then held to nothing. Now nothing joins a suspended
AppWrapper, a deployed component is only its recorded name, and with
``webhook.child_job_creators`` only the controller creates. Found on the way: a
``generateName`` component created again after a suspension (a new name, the old one still
recorded) was refused, so an evicted AppWrapper of one never ran again."""

from __future__ import annotations

import asyncio
from typing import Any

from app.config import ServerSettings, Settings, WebhookSettings
from app.integrations.appwrapper.wrapped import PATH
from app.integrations.framework import pod_of
from app.integrations.reconciler import PODS_POLL
from app.kube.context import CHILD_JOBS, POD, WL
from app.main import create_app
from app.wire.workload import workload_name_for_owner
from tests.unit.test_appwrapper_wrapped import (
    create_review,
    decide,
    lookup,
    object_review,
    owned,
    queued_appwrapper,
    unowned,
)
from tests.unit.test_orphaned_child_pods import JOBSET, NS, _job, _obj, _pod, _reconciler
from tests.unit.test_webhook import CONTROLLER, answer, post


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


AW_CONTROLLER = "system:serviceaccount:appwrapper-system:appwrapper-controller-manager"


def _deployed(aw: dict[str, Any], name: str, status: str = "True",
              reason: str = "ComponentCreatedSuccessfully") -> dict[str, Any]:
    """``aw`` with ``status.componentStatus`` as appwrapper v1.2.0 records it: the side Job
    and the Deployment ``name``, each with condition ``ResourcesDeployed`` ``status``."""
    cond = [{"type": "ResourcesDeployed", "status": status, "reason": reason}]
    return {**aw, "status": {"phase": "Running" if status == "True" else "Resuming",
                             "componentStatus": [{"name": "side", "conditions": cond},
                                                 {"name": name, "conditions": cond}]}}


async def test_nothing_joins_a_suspended_appwrapper() -> None:
    """A queued AppWrapper is suspended until admitted, and again once evicted; its controller
    creates its components only once resumed. The tenant's ``dep-evil`` (the generateName
    prefix, 1 replica, the component's requests) created under it then: refused, so it is
    never there to be left over, uncounted, once the controller records its own. The same
    for the fixed-name component itself (the controller would adopt the tenant's object)."""
    suspended = queued_appwrapper(generateName="dep-")
    suspended["spec"]["suspend"] = True
    resp = await decide(create_review(owned(1, name="dep-evil")), suspended)
    assert resp["allowed"] is False, resp
    assert "which is suspended" in resp["status"]["message"]
    fixed = queued_appwrapper()
    fixed["spec"]["suspend"] = True
    assert (await decide(create_review(owned(1)), fixed))["allowed"] is False
    assert (await decide(object_review(unowned(1), owned(1)), fixed))["allowed"] is False


async def test_a_deployed_generate_name_component_is_only_its_recorded_name() -> None:
    """Once the controller has recorded ``dep-x7k2p`` as deployed, ``dep-evil`` under the
    AppWrapper is no component: refused at CREATE; the recorded one passes."""
    aw = _deployed(queued_appwrapper(generateName="dep-"), "dep-x7k2p")
    resp = await decide(create_review(owned(1, name="dep-evil")), aw)
    assert resp["allowed"] is False and "which wraps no Deployment" in resp["status"]["message"]
    assert (await decide(create_review(owned(1, name="dep-x7k2p"), AW_CONTROLLER),
                         aw))["allowed"] is True


async def test_a_generate_name_component_is_created_again_after_a_suspension() -> None:
    """Evicted and admitted again, the AppWrapper controller deletes its components
    (``ResourcesDeployed`` False, ``CompononetDeleted``, the old name kept) and then creates
    them again, a ``generateName`` one under a new name, recorded only after the create. On
    main that create was refused (the old name recorded), so the AppWrapper never ran again.
    The side Job before it is deployed again: the controller creates in order and stops at
    the first failed create (``_earlier_create_failed``)."""
    for status, reason in (("False", "CompononetDeleted"), ("False", "ComponentCreationErrored"),
                           ("Unknown", "ComponentCreationInitiated")):
        aw = _deployed(queued_appwrapper(generateName="dep-"), "dep-x7k2p", status, reason)
        aw["status"]["componentStatus"][0]["conditions"] = [
            {"type": "ResourcesDeployed", "status": "True",
             "reason": "ComponentCreatedSuccessfully"}]
        resp = await decide(create_review(owned(1, name="dep-q9z8r"), AW_CONTROLLER), aw)
        assert resp["allowed"] is True, (reason, resp)


async def test_with_child_job_creators_only_they_create_under_an_appwrapper() -> None:
    """The moments of the controller's own create (its name not recorded yet) remain: with
    ``webhook.child_job_creators`` naming the AppWrapper controller, a tenant's ``dep-evil``
    is refused even then; the controller's create passes."""
    settings = Settings(controllers_enabled=False, server=ServerSettings(metrics_auth=False),
                        webhook=WebhookSettings(controller_usernames=[CONTROLLER],
                                                child_job_creators=[AW_CONTROLLER]))
    app = create_app(settings)
    unrecorded = {**queued_appwrapper(generateName="dep-"), "status": {"phase": "Resuming"}}
    app.state.admission_lookup = lookup(unrecorded)
    sent = create_review(owned(1, name="dep-evil"))
    resp = answer(await post(app, PATH, sent), sent)
    assert resp["allowed"] is False, resp
    assert "webhook.child_job_creators" in resp["status"]["message"]
    sent = create_review(owned(1, name="dep-x7k2p"), AW_CONTROLLER)
    assert answer(await post(app, PATH, sent), sent)["allowed"] is True


def test_a_recorded_component_name_reconciles_the_appwrappers_jobs_again() -> None:
    """A Job with a ``generateName`` component's prefix has that component's share until the
    controller records the name it generated; the record is an AppWrapper status change,
    no event of the Job's, so the AppWrapper's Jobs are queued again then (and only then:
    another status change, e.g. its phase, queues only the AppWrapper)."""
    rec, ctx = _reconciler()
    aw = queued_appwrapper(generateName="dep-")
    aw["metadata"]["namespace"] = NS
    ctx.store("appwrapper").put(aw)
    job = _job("dep-k2n4p", "j-uid")
    job["metadata"]["ownerReferences"] = [{"apiVersion": "workload.codeflare.dev/v1beta2",
                                           "kind": "AppWrapper", "name": "dep",
                                           "uid": aw["metadata"]["uid"], "controller": True}]
    ctx.store(CHILD_JOBS).put(job)
    handler = rec.on_object(rec.registry.get("appwrapper"))  # type: ignore[arg-type]
    handler("MODIFIED", aw, {**aw, "status": {"phase": "Running"}})
    assert f"{CHILD_JOBS}:{NS}/dep-k2n4p" not in rec.queue.keys  # type: ignore[attr-defined]
    recorded = _deployed(aw, "dep-x7k2p")
    handler("MODIFIED", aw, recorded)
    assert f"{CHILD_JOBS}:{NS}/dep-k2n4p" in rec.queue.keys  # type: ignore[attr-defined]

"""breaker15's attacks on today's MultiKueue changes (issue 29): the TrainJob and AppWrapper
adapters, the redo of admission after an eviction on a worker, and the DeactivationTarget
condition turned into ``spec.active: false``."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from app.core.multikueue import MULTIKUEUE_CONTROLLER as MK
from app.integrations import jobset
from app.integrations.appwrapper.appwrapper import KIND as AW_KIND
from app.integrations.kubeflow.kubeflow import MPIJOB
from app.integrations.webhook_toolkit import WebhookPolicy
from app.kube.client import JOBS
from tests.recording_client import OBJECTS
from tests.unit.test_appwrapper import aw, job
from tests.unit.test_jobset import jobset as make_jobset
from tests.unit.test_jobset import rjob
from tests.unit.test_quota_integrity import (
    NS,
    _admitted_workload,
    _child_job,
    _leading,
    _ServesJobSets,
)

POLICY = WebhookPolicy(controller_usernames=frozenset({"system:serviceaccount:p:p"}))
AW_CONTROLLER = "workload.codeflare.dev/appwrapper-controller"
MPI_OPERATOR = "kubeflow.org/mpi-operator"


def _dispatched_appwrapper() -> dict[str, Any]:
    """A queued AppWrapper the manager admitted and started (``spec.suspend`` false), its
    ``spec.managedBy`` MultiKueue's: its pods run on a worker only."""
    out = aw(job("j", 1))
    out["spec"].update(managedBy=MK, suspend=False)
    return out


def _mpijob(managed_by: str | None) -> dict[str, Any]:
    run_policy: dict[str, Any] = {"suspend": False}
    if managed_by is not None:
        run_policy["managedBy"] = managed_by
    pod = {"spec": {"containers": [{"name": "c", "image": "i"}]}}
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
            "metadata": {"name": "mpi", "namespace": "t", "uid": "u2",
                         "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
            "spec": {"runPolicy": run_policy,
                     "mpiReplicaSpecs": {"Launcher": {"replicas": 1, "template": pod},
                                         "Worker": {"replicas": 1, "template": pod}}}}


@pytest.mark.parametrize("to", [AW_CONTROLLER, None])
def test_a_tenant_cannot_hand_a_dispatched_appwrapper_back_to_the_managers_controller(
        to: str | None) -> None:
    """Attack (tenant with edit in its namespace on the manager): the manager started its
    AppWrapper (the copy runs on a worker); the tenant sets ``spec.managedBy`` to the
    AppWrapper controller's name (or removes it), so the manager's AppWrapper controller
    deploys the components there too: the admission runs twice. AppWrapper v1.2.0's own
    webhook refuses any change of ``spec.managedBy`` ("attempt to change immutable
    field"), but pykueue's deployment runs the AppWrapper controller without it (its CRD
    has no rule either), and pykueue's AppWrapper webhook did not refuse it."""
    old = _dispatched_appwrapper()
    new = copy.deepcopy(old)
    if to is None:
        del new["spec"]["managedBy"]
    else:
        new["spec"]["managedBy"] = to
    errors = AW_KIND.rules.validate(old, new, "tenant", POLICY)
    assert any("managedBy" in e for e in errors), errors


def test_a_tenant_cannot_take_an_mpijob_out_of_multikueue() -> None:
    """The same with an MPIJob: its CRD documents ``spec.runPolicy.managedBy`` as immutable
    without a rule, and mpi-operator v0.8.0 serves no webhook."""
    errors = MPIJOB.rules.validate(_mpijob(MK), _mpijob(MPI_OPERATOR), "tenant", POLICY)
    assert any("runPolicy.managedBy" in e for e in errors), errors


def test_managed_by_unset_and_the_operators_own_stay_interchangeable() -> None:
    """What the fix still allows: updates that keep ``managedBy``, and unset <-> the
    operator's own value (the same meaning: an operator's defaulting may write it)."""
    old = _dispatched_appwrapper()
    touched = copy.deepcopy(old)
    touched["metadata"]["annotations"] = {"a": "b"}
    assert AW_KIND.rules.validate(old, touched, "tenant", POLICY) == []
    assert MPIJOB.rules.validate(_mpijob(None), _mpijob(MPI_OPERATOR), "tenant", POLICY) == []
    assert MPIJOB.rules.validate(_mpijob(MPI_OPERATOR), _mpijob(None), "tenant", POLICY) == []


async def test_a_child_forged_under_a_dispatched_jobset_does_not_run_on_the_manager(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Attack (tenant with edit in its namespace on the manager): its JobSet ``train`` is
    dispatched (``managedBy`` MultiKueue, its Workload admitted with the check Ready and
    ``status.clusterName`` worker1) and runs on worker1; the manager's jobset controller
    leaves it alone, so it has no Job on the manager. The tenant creates Job
    ``train-workers-0`` (within the JobSet's share) with a controller ownerReference to it:
    pykueue held it to the ancestor's admission and let it run, so the manager's Job
    controller ran the admission a second time beside worker1. A child of an ancestor that
    MultiKueue dispatched runs nowhere on the manager: it is suspended. (Kueue v0.17.1's
    ``shouldSuspendChildJob`` lets any child of an admitted ancestor run.)"""
    js = make_jobset(rjob("workers", 2, 1), suspend=False)
    js["metadata"]["namespace"] = NS
    js["spec"]["managedBy"] = MK
    wl = _admitted_workload(js, jobset.KIND.workload_name(js))
    wl["status"]["clusterName"] = "worker1"
    forged = _child_job("train-workers-0", 1, js)
    client = _ServesJobSets({**OBJECTS, "jobsets": [js], "workloads": [wl],
                              JOBS.plural: [forged]})
    m = _leading(monkeypatch, client)
    await m.start()
    try:
        await m.wait_ready(10)
        suspended: list[str] = []
        for _ in range(60):
            suspended = [b["metadata"]["name"] for v, r, b in client.bodies
                         if (v, r) == ("replace", "jobs") and b["spec"].get("suspend")]
            if suspended:
                break
            await asyncio.sleep(0.05)
    finally:
        await m.stop()
    assert suspended[:1] == ["train-workers-0"], client.bodies


def test_the_manager_deletes_no_worker_job_it_did_not_create() -> None:
    """Namespace ``ns`` on worker2 holds the team's own Job ``j`` (submitted there directly,
    no ``kueue.x-k8s.io/multikueue-origin`` label); the manager's Job ``j`` is dispatched to
    both workers and its copy wins on worker1. The manager deleted worker2's Job ``j`` with
    the loser's copy, though it never created it (Kueue v0.17.1 ``RemoveRemoteObjects``
    deletes by name too). It deletes only objects that carry its origin label: the copy of
    the Workload on worker2 goes, the team's Job stays."""
    from tests.unit.test_multikueue_worker_eviction import ADMITTED, _all_at_once, _pass

    mk, store, workers = _all_at_once()
    own_job = {"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": "j", "namespace": "ns", "uid": "local"},
               "spec": {"suspend": False}}

    async def run() -> None:
        workers["worker2"].objs[("jobs", "ns", "j")] = own_job
        await _pass(mk, store)  # a copy of the Workload to each worker
        assert workers["worker1"].created == ["wl"] and workers["worker2"].created == ["wl"]
        won = workers["worker1"].objs[("workloads", "ns", "wl")]
        won["status"] = copy.deepcopy(ADMITTED["status"])
        wl = await _pass(mk, store)
        assert wl["status"]["clusterName"] == "worker1"
        assert workers["worker2"].deleted == ["wl"]  # the loser's copy only
        assert workers["worker2"].objs[("jobs", "ns", "j")] is own_job
    asyncio.run(run())

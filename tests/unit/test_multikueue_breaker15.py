"""breaker15's attacks on today's MultiKueue changes (issue 29): the TrainJob and AppWrapper
adapters, the redo of admission after an eviction on a worker, and the DeactivationTarget
condition turned into ``spec.active: false``."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.core.multikueue import MULTIKUEUE_CONTROLLER as MK
from app.integrations.appwrapper.appwrapper import KIND as AW_KIND
from app.integrations.kubeflow.kubeflow import MPIJOB
from app.integrations.webhook_toolkit import WebhookPolicy
from tests.unit.test_appwrapper import aw, job

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

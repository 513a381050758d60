"""MultiKueue for Kubeflow Trainer's TrainJob and AppWrapper (Kueue v0.17.1
``pkg/controller/jobs/trainjob/trainjob_multikueue_adapter.go``,
``pkg/controller/jobs/appwrapper/appwrapper_multikueue_adapter.go`` and the kinds'
``CanDefaultManagedBy``; trainer v2.2.0 and AppWrapper v1.2.0 ``spec.managedBy``). Both kinds:
the operator's own managedBy value, the webhook's default over it, the worker's copy (a
TrainJob's without Kueue's runtime patch), the whole status mirrored, which status fields an
eviction on the manager clears, and the prebuilt Workload adopted on the worker."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.core.multikueue import ADAPTERS as ALL_ADAPTERS
from app.core.multikueue import APPWRAPPER, TRAINJOB, Adapter, adapter_for
from app.core.multikueue import MULTIKUEUE_CONTROLLER as MK
from app.core.multikueue import ORIGIN_LABEL as ORIGIN
from app.core.multikueue import PREBUILT_LABEL as PREBUILT
from app.integrations.appwrapper.appwrapper import KIND as AW_KIND
from app.integrations.trainjob.trainjob import CHILD_FIELD, KUEUE_MANAGER
from app.integrations.trainjob.trainjob import KIND as TJ_KIND
from app.integrations.unsupported import adoptable_copy, adopts_prebuilt, unsupported_errors
from tests.unit.test_appwrapper import aw, job
from tests.unit.test_multikueue_ray import _as_stored
from tests.unit.test_multikueue_webhook import MultiKueueLookups
from tests.unit.test_trainjob import FLAVOR, composed, trainjob
from tests.unit.test_webhook import answer, decoded_patch, make_app, post, review

TRAINER = "trainer.kubeflow.org/trainjob-controller"
AW_CONTROLLER = "workload.codeflare.dev/appwrapper-controller"
OTHER_PATCH = {"manager": "example.com/tool", "trainingRuntimeSpec": {"template": {}}}


def _trainjob(**spec: Any) -> dict[str, Any]:
    out = trainjob()
    out["spec"].update(spec)
    return out


def _appwrapper(**spec: Any) -> dict[str, Any]:
    out = aw(job("j", 2))
    out["spec"].update(spec)
    return out


KINDS = [(TRAINJOB, TJ_KIND, _trainjob, TRAINER), (APPWRAPPER, AW_KIND, _appwrapper,
                                                    AW_CONTROLLER)]
IDS = ["TrainJob", "AppWrapper"]


def test_the_kinds_have_adapters_with_their_operators_managed_by() -> None:
    """Kueue registers an adapter for both; ``spec.managedBy``, and the operators' own names
    (Kueue ``TrainJobControllerName``, AppWrapper ``AppWrapperControllerName``)."""
    tj = adapter_for("trainer.kubeflow.org/v1alpha1", "TrainJob")
    awa = adapter_for("workload.codeflare.dev/v1beta2", "AppWrapper")
    assert tj is TRAINJOB and awa is APPWRAPPER
    assert TRAINJOB in ALL_ADAPTERS and APPWRAPPER in ALL_ADAPTERS
    assert (tj.plural, tj.managed_by, tj.operator, tj.suspend) == (
        "trainjobs", ("spec", "managedBy"), TRAINER, ("spec", "suspend"))
    assert (awa.plural, awa.managed_by, awa.operator, awa.suspend) == (
        "appwrappers", ("spec", "managedBy"), AW_CONTROLLER, ("spec", "suspend"))
    assert adapter_for("workload.codeflare.dev/v1beta1", "AppWrapper") is None
    assert adapter_for("kubeflow.org/v1", "TrainJob") is None
    # The runtime patch the copy drops is the one pykueue's TrainJob start writes.
    assert KUEUE_MANAGER == "kueue.x-k8s.io/manager"


@pytest.mark.parametrize(("managed_by", "can"), [
    (None, True), ("own", True), (MK, False), ("example.com/other", False)])
@pytest.mark.parametrize(("adapter", "kind", "make", "own"), KINDS, ids=IDS)
def test_managed_by_is_defaulted_over_the_operators_own_only(
        adapter: Adapter, kind: Any, make: Any, own: str, managed_by: str | None,
        can: bool) -> None:
    """Kueue ``TrainJob.CanDefaultManagedBy`` / ``AppWrapper.CanDefaultManagedBy``: unset or
    the kind's own controller (the trainer's CRD defaults the field to its own name, so a
    TrainJob reaches the webhook with it set)."""
    obj = make(managedBy=own if managed_by == "own" else managed_by) if managed_by \
        else make()
    assert adapter.can_default_managed_by(obj) is can
    op = kind.rules.managed_by_op(obj)
    assert op == ({"op": "add", "path": "/spec/managedBy", "value": MK} if can else None)


@pytest.mark.parametrize(("adapter", "kind", "make", "own"), KINDS, ids=IDS)
def test_dispatch_is_refused_unless_managed_by_multikueue(adapter: Adapter, kind: Any,
                                                          make: Any, own: str) -> None:
    """Kueue ``IsJobManagedByKueue``'s message, for the kind's own controller too."""
    assert adapter.not_managed_message(make(managedBy=own)) == (
        f'The owner is not managed by Kueue: Expecting spec.managedBy to be "{MK}" '
        f'not "{own}"')
    assert adapter.not_managed_message(make()) is not None
    assert adapter.not_managed_message(make(managedBy=MK)) is None


def _cloned_meta(local: dict[str, Any]) -> dict[str, Any]:
    return {"name": local["metadata"]["name"], "namespace": local["metadata"]["namespace"],
            "labels": {**local["metadata"]["labels"], PREBUILT: "wl-1",
                       ORIGIN: "multikueue"},
            "annotations": {"team": "a"}}


def test_the_trainjob_copy_drops_managed_by_and_kueues_runtime_patch() -> None:
    """Kueue ``SyncJob``: metadata cloned with the prebuilt and origin labels, ``spec`` copied
    with ``managedBy`` cleared (the worker's CRD defaults it to the trainer's) and the runtime
    patch of manager ``kueue.x-k8s.io/manager`` removed ("so the remote webhook can add its
    own": a copy made after the manager started its TrainJob would carry the manager's
    flavor); other managers' patches stay. pykueue also suspends it and drops its start
    record."""
    started = TJ_KIND.injected(composed(_trainjob(runtimePatches=[OTHER_PATCH])),
                               {"node": FLAVOR})
    local = _as_stored({k: v for k, v in started.items() if k != CHILD_FIELD})
    assert [p["manager"] for p in local["spec"]["runtimePatches"]] == [
        "example.com/tool", KUEUE_MANAGER]
    out = TRAINJOB.remote(local, "multikueue", "wl-1")
    assert (out["apiVersion"], out["kind"]) == ("trainer.kubeflow.org/v1alpha1", "TrainJob")
    assert out["metadata"] == _cloned_meta(local)
    want = copy.deepcopy(local["spec"])
    del want["managedBy"]
    want["runtimePatches"] = [OTHER_PATCH]
    want["suspend"] = True
    assert out["spec"] == want and "status" not in out
    # Only Kueue's patch: the list goes with it; the manager's object is not changed.
    only = _as_stored(TJ_KIND.injected(composed(_trainjob()), {"node": FLAVOR}))
    only.pop(CHILD_FIELD, None)
    assert "runtimePatches" not in TRAINJOB.remote(only, "multikueue", "wl-1")["spec"]
    assert only["spec"]["runtimePatches"][0]["manager"] == KUEUE_MANAGER
    assert only["spec"]["managedBy"] == MK
    # Not started yet (the usual case: the copy is made before the manager admits).
    fresh = _as_stored(_trainjob())
    assert "runtimePatches" not in TRAINJOB.remote(fresh, "multikueue", "wl-1")["spec"]


def test_the_appwrapper_copy_is_its_spec_without_managed_by() -> None:
    """Kueue ``SyncJob``: metadata cloned, ``spec`` copied as it is but for ``managedBy``
    (the worker's AppWrapper controller runs it); suspended for the worker's pykueue."""
    local = _as_stored(_appwrapper(suspend=False))
    out = APPWRAPPER.remote(local, "multikueue", "wl-1")
    assert (out["apiVersion"], out["kind"]) == ("workload.codeflare.dev/v1beta2", "AppWrapper")
    assert out["metadata"] == _cloned_meta(local)
    want = copy.deepcopy(local["spec"])
    del want["managedBy"]
    want["suspend"] = True
    assert out["spec"] == want and "status" not in out
    assert local["spec"]["managedBy"] == MK and local["spec"]["suspend"] is False


@pytest.mark.parametrize(("adapter", "remote"), [
    (TRAINJOB, {"conditions": [{"type": "Complete", "status": "True"}],
                "jobsStatus": [{"name": "node", "active": 0, "succeeded": 1}]}),
    (APPWRAPPER, {"phase": "Succeeded", "conditions": [
        {"type": "QuotaReserved", "status": "False"}],
        "componentStatus": [{"name": "j", "kind": "Job", "apiVersion": "batch/v1"}]}),
], ids=IDS)
def test_the_workers_whole_status_is_mirrored(adapter: Adapter, remote: dict) -> None:
    """Kueue: ``localJob.Status = remoteJob.Status`` (a merge patch here: fields the worker's
    status lacks are removed), also while the manager's object is suspended."""
    local = {"spec": {"suspend": True},
             "status": {"conditions": [{"type": "Suspended", "status": "True"}], "x": 1}}
    patch = adapter.status_to_mirror(local, {"status": remote})
    assert patch == {**remote, "x": None}
    assert adapter.status_to_mirror({"status": remote}, {"status": remote}) is None


def test_clearing_the_running_status_ends_the_mirrored_trainjob_pods() -> None:
    """After an eviction on the manager the controller clears ``running_status``
    (``_clear_running``): what the TrainJob's ``active_pods`` reads must be among it."""
    running = {"conditions": [{"type": "Suspended", "status": "False"}],
               "jobsStatus": [{"name": "node", "active": 2, "ready": 2}]}
    obj = {**_trainjob(), "status": running}
    assert TJ_KIND.active_pods(obj) == 2 and TJ_KIND.pods_ready(obj)
    cleared = {k: v for k, v in running.items() if k not in TRAINJOB.running_status}
    obj = {**_trainjob(), "status": cleared}
    assert TJ_KIND.active_pods(obj) == 0 and not TJ_KIND.pods_ready(obj)
    assert TJ_KIND.finished(obj)[0] is False


def test_clearing_the_running_status_ends_the_mirrored_appwrapper_pods() -> None:
    """The AppWrapper's ``active_pods`` reads its ``QuotaReserved`` condition; the phase goes
    too, so a worker's ``Failed`` phase still deploying (``ResourcesDeployed`` True: not
    finished) does not read as finished on the manager once the conditions are gone."""
    running = {"phase": "Failed", "conditions": [
        {"type": "QuotaReserved", "status": "True"},
        {"type": "ResourcesDeployed", "status": "True"},
        {"type": "PodsReady", "status": "True"}],
        "componentStatus": [{"name": "j", "kind": "Job", "apiVersion": "batch/v1"}]}
    obj = {**_appwrapper(), "status": running}
    assert AW_KIND.active_pods(obj) == 2 and AW_KIND.pods_ready(obj)
    assert AW_KIND.finished(obj)[0] is False
    cleared = {k: v for k, v in running.items() if k not in APPWRAPPER.running_status}
    obj = {**_appwrapper(), "status": cleared}
    assert AW_KIND.active_pods(obj) == 0 and not AW_KIND.pods_ready(obj)
    assert AW_KIND.finished(obj)[0] is False


def _sent(obj: dict[str, Any], group: str, version: str, plural: str) -> dict[str, Any]:
    sent = review("CREATE", obj, kind={"group": group, "version": version,
                                       "kind": obj["kind"]})
    sent["request"]["resource"] = {"group": group, "version": version, "resource": plural}
    return sent


@pytest.mark.parametrize(("uses", "want"), [(True, [MK]), (False, []), (None, [])])
@pytest.mark.parametrize(("adapter", "kind", "make", "own"), KINDS, ids=IDS)
async def test_a_queued_object_gets_managed_by_when_its_queue_uses_multikueue(
        adapter: Adapter, kind: Any, make: Any, own: str, uses: bool | None,
        want: list[str]) -> None:
    """Through the HTTP route: the mutating webhook asks whether the LocalQueue's
    ClusterQueue has a MultiKueue AdmissionCheck (None: unknown, not synced); the operator's
    own value (the trainer's CRD default) is replaced."""
    lookups = MultiKueueLookups(uses)
    obj = make(managedBy=own, suspend=False)
    sent = _sent(obj, adapter.group, adapter.version, adapter.plural)
    path = f"/mutate-{adapter.group.replace('.', '-')}-{adapter.version}-{adapter.kind.lower()}"
    assert path == kind.rules.mutate_path
    response = answer(await post(make_app(admission=lookups), path, sent), sent)
    assert response["allowed"]
    ops = decoded_patch(response)
    assert [o["value"] for o in ops if o["path"] == "/spec/managedBy"] == want
    assert {"op": "add", "path": "/spec/suspend", "value": True} in ops
    assert lookups.asked_mk == [(sent["request"]["namespace"], "lq")]


@pytest.mark.parametrize(("adapter", "kind", "make", "own"), KINDS, ids=IDS)
def test_the_worker_adopts_the_prebuilt_workload(adapter: Adapter, kind: Any, make: Any,
                                                 own: str) -> None:
    """On a worker, a TrainJob or AppWrapper labelled ``prebuilt-workload-name`` is queued
    under that Workload (the MultiKueue copy, adopted: ``adoptable_copy``) instead of Kueue's
    name for it; the label is allowed on its own metadata."""
    copy_ = {"metadata": {"name": "wl-1", "labels": {ORIGIN: "multikueue"}}}
    obj = make()
    before = kind.workload_name(obj)
    assert not adopts_prebuilt({"apiVersion": "v1", "kind": "Pod"})
    obj["metadata"]["labels"][PREBUILT] = "wl-1"
    assert adopts_prebuilt(obj)
    assert kind.workload_name(obj) == "wl-1" != before
    assert adoptable_copy(obj, copy_)
    assert not adoptable_copy(obj, {"metadata": {"name": "wl-1", "labels": {}}})
    assert unsupported_errors(None, obj) == []


def test_the_prebuilt_label_is_still_refused_in_a_wrapped_template() -> None:
    """Only the AppWrapper's own metadata may name a prebuilt Workload: a wrapped Job's pod
    template carrying it is refused, as before."""
    obj = _appwrapper()
    obj["spec"]["components"][0]["template"]["spec"]["template"]["metadata"] = {
        "labels": {PREBUILT: "wl-1"}}
    errors = unsupported_errors(None, obj)
    assert len(errors) == 1 and PREBUILT in errors[0], errors


def test_the_mpijob_refusal_names_its_run_policy_path() -> None:
    """Kueue v0.17.1's MPIJob adapter (``mpijob_multikueue_adapter.go``, not the kubeflowjob
    one) says ``Expecting spec.runPolicy.managedBy``; the other Kubeflow jobs' say
    ``spec.managedBy`` although the field is ``spec.runPolicy.managedBy`` too."""
    mpi = adapter_for("kubeflow.org/v2beta1", "MPIJob")
    pytorch = adapter_for("kubeflow.org/v1", "PyTorchJob")
    assert mpi is not None and pytorch is not None
    obj = {"spec": {"runPolicy": {"managedBy": "kubeflow.org/mpi-operator"}}}
    assert mpi.not_managed_message(obj) == (
        "The owner is not managed by Kueue: Expecting spec.runPolicy.managedBy to be "
        f'"{MK}" not "kubeflow.org/mpi-operator"')
    assert pytorch.not_managed_message(obj) == (
        "The owner is not managed by Kueue: Expecting spec.managedBy to be "
        f'"{MK}" not "kubeflow.org/mpi-operator"')

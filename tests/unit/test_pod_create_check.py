"""The Pod webhook at CREATE holds a pod made under a queued object (its controller
ownerReference) to that object's admission (``app.controllers.pod_create_check``): its DRA
claims (which kube-scheduler never sends to the extender), its podSet label and how many pods
of its podSet run (brk34b H1 and the count of copies)."""

from __future__ import annotations

import asyncio
import copy
from types import SimpleNamespace
from typing import Any

from app.config import DeviceClassMapping, ResourcesSettings, Settings
from app.controllers.admission_lookup import StoreAdmissionLookup
from app.controllers.pod_create_check import LEDGER_SECONDS, PodCreateCheck
from app.integrations import default_registry
from app.integrations.admitted_pods import admitted_counts
from app.integrations.batchjob.job import KIND as BATCH_JOB
from app.integrations.jobset.jobset import KIND as JOBSET
from app.integrations.kubeflow.kubeflow import PYTORCHJOB
from app.kube.client import JOBS
from app.kube.context import JOB, POD, RCT, WL
from app.kube.informers import Store
from tests.unit.test_foreground_deletion import _admitted as _fd_admitted
from tests.unit.test_foreground_deletion import _reconciler as _fd_reconciler
from tests.unit.test_unlabelled_pods import POD_KIND_REF
from tests.unit.test_webhook import CONTROLLER, answer, make_app, post, review

NS = "t"
QUEUE = {"kueue.x-k8s.io/queue-name": "lq"}
PODSET = "kueue.x-k8s.io/podset"


def _template(claim: str | None = "one") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}
    if claim:
        spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": claim}]
        spec["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    return {"spec": spec}


def _pytorchjob() -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"namespace": NS, "name": "ddp", "uid": "ddp-uid", "labels": QUEUE},
            "spec": {"runPolicy": {"suspend": False}, "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": _template()},
                "Worker": {"replicas": 2, "template": _template()}}}}


def _workload(kind: Any, obj: dict[str, Any], podsets: dict[str, tuple[int, dict]], *,
              admitted: bool = True, counts: dict[str, int] | None = None) -> dict[str, Any]:
    wl: dict[str, Any] = {
        "metadata": {"namespace": NS, "name": kind.workload_name(obj), "resourceVersion": "1"},
        "spec": {"queueName": "lq", "podSets": [
            {"name": n, "count": c, "template": t} for n, (c, t) in podsets.items()]},
        "status": {"conditions": []}}
    if admitted:
        wl["status"]["conditions"] = [{"type": "QuotaReserved", "status": "True"},
                                      {"type": "Admitted", "status": "True"}]
        wl["status"]["admission"] = {"clusterQueue": "cq", "podSetAssignments": [
            {"name": n, "count": (counts or {}).get(n, c), "flavors": {"cpu": "default"}}
            for n, (c, _) in podsets.items()]}
    return wl


class Stores:
    """Stores of one object kind each, a Pod store and a clock the test moves."""

    def __init__(self, objects: dict[str, list[dict[str, Any]]],
                 settings: Settings | None = None) -> None:
        self.stores: dict[str, Store] = {}
        for key, objs in objects.items():
            self.stores[key] = Store(JOBS)
            for o in objs:
                self.stores[key].put(o)
        self.stores.setdefault(POD, Store(JOBS))
        self.now = 100.0
        ctx = SimpleNamespace(store=lambda k: self.stores.get(k) or Store(JOBS), synced=True,
                              settings=settings or Settings())
        self.check = PodCreateCheck(ctx, default_registry(),  # type: ignore[arg-type]
                                    clock=lambda: self.now)

    def add_pod(self, pod: dict[str, Any], phase: str = "Running") -> None:
        """``pod`` in the Pod store, as the informer puts it (its handlers told)."""
        pod = copy.deepcopy(pod)
        pod["status"] = {"phase": phase}
        old = self.stores[POD].get(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}")
        self.stores[POD].put(pod)
        self.check.on_pod("MODIFIED" if old else "ADDED", old, pod)

    def remove_pod(self, key: str) -> None:
        """Pod ``namespace/name`` gone from the Pod store (its handlers told)."""
        old = self.stores[POD].get(key)
        self.stores[POD].remove(key)
        self.check.on_pod("DELETED", old, None)


def _pytorch_stores(*, admitted: bool = True, counts: dict[str, int] | None = None) -> Stores:
    job = _pytorchjob()
    return Stores({PYTORCHJOB.key: [job], WL: [_workload(
        PYTORCHJOB, job, {"master": (1, _template()), "worker": (2, _template())},
        admitted=admitted, counts=counts)]})


def _pod(name: str, podset: str | None, claim: str | None = "one", *,
         owner: tuple[str, str, str, str] = ("kubeflow.org/v1", "PyTorchJob", "ddp", "ddp-uid")
         ) -> dict[str, Any]:
    labels = {"training.kubeflow.org/job-name": "ddp"}
    if podset is not None:
        labels[PODSET] = podset
    api_version, kind, owner_name, uid = owner
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": NS, "uid": f"{name}-uid", "labels": labels,
        "ownerReferences": [{"apiVersion": api_version, "kind": kind, "name": owner_name,
                             "uid": uid, "controller": True}]},
        "spec": _template(claim)["spec"]}


def test_the_operators_pods_of_an_admitted_object_are_allowed() -> None:
    s = _pytorch_stores()
    for name, podset in (("ddp-master-0", "master"), ("ddp-worker-0", "worker"),
                         ("ddp-worker-1", "worker")):
        assert s.check.errors(_pod(name, podset)) == []


def test_a_pod_claiming_other_devices_than_its_podset_is_refused() -> None:
    """brk34b H1: kube-scheduler sends a DRA-only pod to no extender."""
    s = _pytorch_stores()
    (why,) = s.check.errors(_pod("big", "master", claim="four")) or [""]
    assert why.startswith("spec.resourceClaims: the pod claims ") and "four" in why, why
    assert "podSet master's template in PyTorchJob t/ddp's admission" in why, why
    # A second claim beside the admitted one is beyond it too.
    two = _pod("two", "worker")
    two["spec"]["resourceClaims"].append({"name": "more", "resourceClaimTemplateName": "one"})
    assert s.check.errors(two)
    # Fewer claims than the template (none) is no more than admitted.
    assert s.check.errors(_pod("none", "worker", claim=None)) == []


def test_a_pod_claiming_devices_under_an_object_not_admitted_is_refused() -> None:
    s = _pytorch_stores(admitted=False)
    (why,) = s.check.errors(_pod("early", "master")) or [""]
    assert "under PyTorchJob t/ddp, whose Workload is not admitted" in why, why
    # Without claims, its GPUs are asked in requests: the extender's business.
    assert s.check.errors(_pod("early", "master", claim=None)) == []


def test_a_pod_of_no_podset_the_operator_makes_is_refused() -> None:
    s = _pytorch_stores()
    for podset in (None, "chief", "launcher"):
        (why,) = s.check.errors(_pod("x", podset, claim=None)) or [""]
        assert why.startswith("metadata.labels[kueue.x-k8s.io/podset]: ") \
            and "(master, worker)" in why, why


def test_copies_of_an_admitted_worker_beyond_its_count_are_refused() -> None:
    """The count gap: training-operator v1.9.3 keeps pods that repeat a replica index."""
    s = _pytorch_stores()
    s.add_pod(_pod("ddp-worker-0", "worker"))
    s.add_pod(_pod("ddp-worker-1", "worker"))
    (why,) = s.check.errors(_pod("copy0", "worker")) or [""]
    assert why.startswith("metadata.ownerReferences: podSet worker of PyTorchJob t/ddp is "
                          "admitted for 2 pod(s) and 2 not terminal already run"), why
    # A terminal worker holds no place: its replacement is allowed.
    s.add_pod(_pod("ddp-worker-1", "worker"), phase="Failed")
    assert s.check.errors(_pod("ddp-worker-1b", "worker")) == []


def test_a_partial_admission_counts_the_admitted_pods() -> None:
    s = _pytorch_stores(counts={"worker": 1})
    assert admitted_counts(s.stores[WL].list()[0]) == {"master": 1, "worker": 1}
    s.add_pod(_pod("ddp-worker-0", "worker"))
    assert s.check.errors(_pod("ddp-worker-1", "worker"))


def test_creates_faster_than_the_pod_store_take_their_places() -> None:
    """A burst of creates the Pod store has not shown yet: each allowed one holds a place
    for ``LEDGER_SECONDS``; a dry run holds none; a place lapses or moves to the store."""
    s = _pytorch_stores()
    assert s.check.errors(_pod("a", "worker"), dry_run=True) == []
    assert s.check.errors(_pod("a", "worker")) == []
    assert s.check.errors(_pod("b", "worker")) == []
    assert s.check.errors(_pod("c", "worker"))  # a and b hold the places
    s.add_pod(_pod("a", "worker"))  # shown by the store: counted there, not twice
    assert s.check.errors(_pod("c", "worker"))
    s.now += LEDGER_SECONDS + 1  # b's create failed after this webhook: its place lapses
    assert s.check.errors(_pod("c", "worker")) == []


def test_a_pod_controlled_by_a_kind_whose_operator_makes_none_is_refused() -> None:
    """A JobSet's pods run under its Jobs; one naming the admitted JobSet itself is a
    tenant's."""
    js = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
          "metadata": {"namespace": NS, "name": "js", "uid": "js-uid", "labels": QUEUE},
          "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {
              "parallelism": 1, "completions": 1, "template": _template(None)}}}]}}
    s = Stores({JOBSET.key: [js], WL: [_workload(JOBSET, js, {"w": (1, _template(None))})]})
    pod = _pod("x", "w", claim=None, owner=("jobset.x-k8s.io/v1alpha2", "JobSet", "js", "js-uid"))
    (why,) = s.check.errors(pod) or [""]
    assert "no operator makes a pod controlled by JobSet js itself" in why, why


def test_a_batch_jobs_pod_is_held_to_the_jobs_claims_and_selector() -> None:
    """The Job controller counts the pods its selector takes (and trims them to
    parallelism); one it does not take is refused (brk35 H1), and the claims of one it
    takes are held to the Job's template, which the Job rules hold to the admission."""
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"namespace": NS, "name": "j", "uid": "j-uid", "labels": QUEUE},
           "spec": {"parallelism": 1, "template": _template(), "selector": {
               "matchLabels": {"training.kubeflow.org/job-name": "ddp"}}}}
    s = Stores({JOB: [job], WL: [_workload(BATCH_JOB, job, {"main": (1, _template())})]})
    owner = ("batch/v1", "Job", "j", "j-uid")
    s.add_pod(_pod("j-0", "main", owner=owner))
    assert s.check.errors(_pod("j-1", "main", owner=owner)) == []
    assert s.check.errors(_pod("j-2", "main", claim="four", owner=owner))
    stray = _pod("j-3", "main", owner=owner)
    stray["metadata"]["labels"] = {}
    (why,) = s.check.errors(stray) or [""]
    assert "does not match the spec.selector of Job j" in why, why


def test_pods_outside_a_queued_object_are_left_to_other_rules() -> None:
    s = _pytorch_stores()
    # Another uid than the stored PyTorchJob's, asking no devices: left to the extender and
    # the pod rules (one asking devices is refused: brk35b H1).
    other = ("kubeflow.org/v1", "PyTorchJob", "ddp", "other-uid")
    assert s.check.errors(_pod("x", "master", None, owner=other)) == []
    assert s.check.errors(_pod("x", "master", "four", owner=other))
    # Not synced: unknown.
    s.check.ctx.synced = False  # type: ignore[attr-defined]
    assert s.check.errors(_pod("x", "master", "four")) is None


async def test_the_pod_webhook_refuses_such_a_create_and_lets_pykueue_through() -> None:
    s = _pytorch_stores()
    s.add_pod(_pod("ddp-master-0", "master"))
    lookup = StoreAdmissionLookup(s.check.ctx, default_registry())
    lookup.pod_create = s.check
    app = make_app(admission=lookup)
    sent = review("CREATE", _pod("copy", "master"), kind=POD_KIND_REF)
    response = answer(await post(app, "/validate--v1-pod", sent), sent)
    assert response["allowed"] is False, response
    assert "podSet master of PyTorchJob t/ddp is admitted for 1 pod(s)" in \
        response["status"]["message"]
    sent = review("CREATE", _pod("copy", "master"), kind=POD_KIND_REF, user=CONTROLLER)
    assert answer(await post(app, "/validate--v1-pod", sent), sent)["allowed"] is True


def _running_pytorchjob() -> dict[str, Any]:
    """``ddp`` started by pykueue (unsuspended) with Master 1 + Worker 2."""
    job = _pytorchjob()
    job["metadata"]["namespace"] = "ns"
    return job


def _excess_pass(pods: list[dict[str, Any]], *, admitted: bool = True
                 ) -> tuple[int, list[tuple[str, str, str]]]:
    """``_delete_excess`` of the PyTorchJob ``ns/ddp`` (admitted, or only queued) with
    ``pods`` in the Pod store: (pods deleted, the writes)."""
    job = _running_pytorchjob()
    wl = PYTORCHJOB.workload_object(job)
    wl = _fd_admitted(wl, deleting=False) if admitted else {**wl, "status": {}}
    rec, ctx = _fd_reconciler(PYTORCHJOB, "kubeflow.org/pytorchjob",
                              {POD: pods, PYTORCHJOB.key: [job], WL: [wl]})
    deleted = asyncio.run(rec._delete_excess(PYTORCHJOB, job))
    return deleted, ctx.writes


def _stored_pod(name: str, podset: str, created: str, **meta: Any) -> dict[str, Any]:
    pod = _pod(name, podset, claim=None)
    pod["metadata"].update(namespace="ns", creationTimestamp=created, **meta)
    pod["status"] = {"phase": "Running"}
    return pod


def test_the_reconciler_deletes_the_newest_pods_beyond_a_podsets_count() -> None:
    """The backstop of the webhook's count (each replica's own): worker admitted for 2, 4
    Running under ``ddp``: the 2 newest go, uid as precondition; the master is left."""
    pods = [_stored_pod("ddp-master-0", "master", "2026-12-07T10:00:00Z"),
            _stored_pod("ddp-worker-0", "worker", "2026-12-07T10:00:00Z"),
            _stored_pod("ddp-worker-1", "worker", "2026-12-07T10:00:01Z"),
            _stored_pod("copy-b", "worker", "2026-12-07T10:05:00Z"),
            _stored_pod("copy-a", "worker", "2026-12-07T10:05:00Z")]
    deleted, writes = _excess_pass(pods)
    assert deleted == 2
    assert sorted(w[2] for w in writes if w[:2] == ("delete", "pods")) == ["copy-a", "copy-b"]


def test_terminal_and_deleting_pods_are_not_deleted_again() -> None:
    """Worker admitted for 2: a Failed pod holds nothing, one being deleted on its node
    holds its place until gone but is not chosen again; with a third holder, the newest
    Running one goes (the pod being deleted still holds)."""
    pods = [_stored_pod("ddp-worker-0", "worker", "2026-12-07T10:00:00Z"),
            _stored_pod("old", "worker", "2026-12-07T09:00:00Z"),
            _stored_pod("going", "worker", "2026-12-07T10:09:00Z",
                        deletionTimestamp="2026-12-07T10:10:00Z")]
    pods[1]["status"]["phase"] = "Failed"
    for p in pods:
        p["spec"]["nodeName"] = "a100-0"
    deleted, writes = _excess_pass(pods)
    assert deleted == 0 and not [w for w in writes if w[1] == "pods"]
    late = _stored_pod("ddp-worker-1", "worker", "2026-12-07T10:09:30Z")
    late["spec"]["nodeName"] = "a100-0"
    deleted, writes = _excess_pass([*pods, late])
    assert [w[2] for w in writes if w[:2] == ("delete", "pods")] == ["ddp-worker-1"]


def test_nothing_is_deleted_while_the_object_is_not_admitted() -> None:
    pods = [_stored_pod(f"w{i}", "worker", f"2026-12-07T10:00:0{i}Z") for i in range(4)]
    assert _excess_pass(pods, admitted=False)[0] == 0
    assert _excess_pass(pods)[0] == 2


def test_a_claim_template_made_again_bigger_after_the_admission_is_refused() -> None:
    """brk35 H5: the podSet was admitted for 1 device a pod (ResourceClaimTemplate ``one``
    of 1 device then); the tenant deletes ``one`` and makes it again with 4: a pod claiming
    it now takes 4, beyond what a pod of its podSet was admitted for."""
    settings = Settings(resources=ResourcesSettings(device_class_mappings=[
        DeviceClassMapping(name="example.com/gpu", deviceClassNames=["gpu.example.com"])]))
    job = _pytorchjob()
    wl = _workload(PYTORCHJOB, job, {"master": (1, _template()), "worker": (2, _template())})
    for psa in wl["status"]["admission"]["podSetAssignments"]:
        psa["resourceUsage"] = {"example.com/gpu": str(psa["count"])}

    def rct(devices: int) -> dict[str, Any]:
        return {"metadata": {"namespace": NS, "name": "one"}, "spec": {"spec": {"devices": {
            "requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.example.com",
                                                   "count": devices}}]}}}}
    s = Stores({PYTORCHJOB.key: [job], WL: [wl], RCT: [rct(1)]}, settings)
    assert s.check.errors(_pod("ddp-worker-0", "worker")) == []
    s.stores[RCT].put(rct(4))
    (why,) = s.check.errors(_pod("ddp-worker-1", "worker")) or [""]
    assert "take example.com/gpu: 4" in why and "podSet worker of PyTorchJob t/ddp" in why, why


def test_a_copy_made_the_same_second_as_the_operators_pod_goes_first() -> None:
    """creationTimestamp has whole seconds: the copy ``big`` (not placed: the extender
    withholds it) and the operator's ``ddp-worker-0`` (Running) made the same second; the
    copy is the one beyond the count, whatever the names."""
    worker = _stored_pod("ddp-worker-0", "worker", "2026-12-07T13:47:00Z")
    worker["spec"]["nodeName"] = "a100-0"
    copies = [_stored_pod(n, "worker", "2026-12-07T13:47:00Z") for n in ("big", "a0")]
    deleted, writes = _excess_pass([worker, *copies])
    # Worker count 2: the Running worker and one copy stay; of the copies, by name.
    assert deleted == 1
    assert [w[2] for w in writes if w[:2] == ("delete", "pods")] == ["big"]

"""The generic reconciler of the job framework: every registered ``JobKind`` with its
Workloads (Kueue ``jobframework.ReconcileGenericJob``, kueue-integrations.md 1.3-1.4).

Keys ``<kind key>:<ns>/<name>`` (``job:research/train``) and ``wl:<ns>/<name>`` go through one
``WorkQueue`` processed by ``workers`` tasks; handlers on each kind's informer and on the
Workload informer enqueue them. Writes happen only while ``ctx.may_write`` (leader and
synced); on gaining leadership every object and Workload is enqueued again.

Per object (in order): gone (deleted, or no longer queued) -> delete its Workloads (their
quota returns); queued, Workloads of an earlier object of its name (another uid) -> deleted
as a gone object's, then on; a Workload of its name that another object owns -> left alone,
the object waits (``WorkloadNameConflict``); Workload Finished -> its
``RESOURCE_IN_USE_FINALIZER`` off (deleted or not); Workload deleted -> object stopped, the
finalizer off (``_workload_deleted``); finished -> Workload Finished (Succeeded/Failed); no
Workload -> stop a running object, then create the Workload once no pod is active; Workload
admitted -> start the object with the admission, unless its pods no longer match the
admission (another pod count or other requests, or the object cannot be read): then stop it
and, once its pods are gone, replace the Workload (Kueue ``NoMatchingWorkload``); Workload
evicted or deactivated -> stop the object, then release the quota once no pod is left;
Workload pending -> a running object is stopped ("Not admitted by cluster queue"), a
suspended one whose shape changed gets its Workload rebuilt in place. An object being deleted
gets no Workload and is never started: suspended, its Workload is deleted (once its pods are
gone when it holds quota), so it is not admitted. Pending or admitted, a
changed ``kueue.x-k8s.io/priority-class`` label re-resolves the Workload's priority.

Quota follows the pods: it is released (Workload finished, released or deleted) only once
the object's pods are gone or terminal, counted from the object's status and, for a kind with
``pod_labels``, from the Pod store too (a stopped operator's status may say 0 active while its
pods still run or are being killed).

A Workload whose controller is no registered object (created by a user or another controller):
an eviction releases its quota at once (it has no pods to wait for); its creator marks it
Finished. Not one whose controller is of an enabled kind not managed yet (``awaited``: its
discovery failed at start, so its objects may run): that keeps its quota until the kind is
managed, which stops the object first, and a job such an object made is left alone (not
taken for an orphaned child or a queued job of its own) until then. One that pykueue created
for an object that went with its owner reference (label ``kueue.x-k8s.io/job-uid``, no
ownerReference: ``kubectl delete --cascade=orphan``) is Finished with reason
``OwnerNotFound`` once no object of that uid exists (kueue#12820: not while it is being
deleted) and none of its pods holds resources any more; evicted or deactivated, its pods are
deleted first. Kueue v0.17.1's ``FinishOrphanedWorkloads`` finishes only a Workload whose
controller reference names a gone object, so it leaves this one holding its quota; Kueue
v0.18's ``isOrphanedWorkload`` finishes it at once (the wait for its pods is pykueue's).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import re
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from app.core.multikueue import ADAPTERS as MULTIKUEUE_ADAPTERS
from app.core.multikueue import MULTIKUEUE_CONTROLLER, Adapter
from app.core.multikueue import ORIGIN_LABEL as MULTIKUEUE_ORIGIN_LABEL
from app.core.workload import admission_mismatch
from app.integrations.admitted_pods import admitted, admitted_counts, excess_pods
from app.integrations.framework import (
    JobKind,
    KindDefaults,
    Owner,
    Registry,
    StartError,
    adopted_by_job,
    child_share,
    child_sized_by,
    controller_uid,
    delete_pods,
    grace_allowed,
    lookup,
    made_pods_of,
    made_via_ancestor,
    manages_unlabelled_in,
    namespace_being_deleted,
    object_key,
    own_running_pods,
    own_stored,
    pod_blocks_restart,
    pod_holds_quota,
    pod_labels,
    pods_in,
    pods_of,
    pods_of_workload,
    pods_once_ignored,
    podsets_under,
    queued_top,
    source_of,
    stop_pods_left,
    stored_ancestor,
    stray_pod,
    trim,
)
from app.integrations.unsupported import adoptable_copy, adopts_prebuilt
from app.kube.client import JOBS, WORKLOADS
from app.kube.context import CHILD_JOB_STORES, CHILD_JOBS, JOB, PC, POD, WL, WPC, Context
from app.kube.errors import Conflict, NotFound, Permanent, namespace_terminating
from app.kube.events import NORMAL, WARNING
from app.kube.informers import DELETED
from app.kube.workqueue import WorkQueue, acting_lane, work
from app.wire.fields import Obj, WorkloadSpecError
from app.wire.names import (
    ADOPTED_BY_ANNOTATION,
    HELD_PARALLELISM_ANNOTATION,
    JOB_UID_LABEL,
    KUEUE_GROUP,
    ORPHAN_FINALIZER,
    PODSET_LABEL,
    PREBUILT_WORKLOAD_LABEL,
    PRIORITY_CLASS_LABEL,
    RESOURCE_IN_USE_FINALIZER,
)
from app.wire.owners import controller_of_object, controller_ref
from app.wire.podtemplate import requests_beyond, template_claims, template_requests
from app.wire.workload import job_pod_count, workload_from_object
from app.wire.workload_status import (
    ADMITTED,
    has_admission,
    is_active,
    is_evicted,
    is_finished,
    is_true,
    with_finished,
    with_pods_ready,
    with_released,
)

WPC_REF = (KUEUE_GROUP, "WorkloadPriorityClass")  # a priorityClassRef to a WorkloadPriorityClass
log = logging.getLogger(__name__)

WL_PREFIX = "wl:"
UID_INDEX = "uid"
# Store index: the uid an object's controller ownerReference names (``_controlled_by``).
CONTROLLER_UID_INDEX = "controller-uid"
# Pods only: the controller uid of a pod that holds quota (``holding_pods_controlled_by``).
HOLDING_CONTROLLER_UID_INDEX = "holding-controller-uid"
# Store index: ``<namespace>/<Workload name>`` an object's own
# ``kueue.x-k8s.io/prebuilt-workload-name`` label names (``_enqueue_adopters``).
PREBUILT_INDEX = "prebuilt"
OWNER_NOT_FOUND = "OwnerNotFound"  # Kueue v1beta2 WorkloadFinishedReasonOwnerNotFound
# Seconds between looks at a job whose pods still hold its quota (the Pod store's events
# reach the reconciler only for a pod without a controller or one of an object in its
# operator's stopped state: ``on_pod``).
PODS_POLL = 1.0
# Seconds a pod without a controller is waited for while a living batch Job may adopt it
# (``adopted_by_job``): the Job controller adopts within moments; one that never does (a
# ``manualSelector`` not matching, a finished Job) must not keep its object polled.
ADOPTION_WAIT_SECONDS = 10.0
# The grace period (seconds) of the pods of a child Job beyond a share of 0 of its ancestor's
# admission (``_cut_grace_beyond_share``): they never ran on an admission. 1, not 0: 0 asks
# the API server for an immediate (forced) deletion, before the kubelet has stopped them.
BEYOND_SHARE_GRACE_SECONDS = 1
# Stale child Jobs remembered as deleted for their operator to make again
# (``_remake_stale_child``): one per edited queued object in flight is enough to stop a loop.
REMADE_CHILDREN_KEPT = 4096
# HELD_PARALLELISM_ANNOTATION's form: "<had>:<set>", ASCII digits only (str.isdigit takes
# others, which int() refuses).
_HELD_FORM = re.compile(r"([0-9]{1,9}):([0-9]{1,9})")



def _with_own_class(wl: Obj, wpc: dict[str, int], pc: dict[str, int]
                    ) -> tuple[dict[str, int], dict[str, int]]:
    """``wpc`` and ``pc`` (WorkloadPriorityClass and PriorityClass values by name) with the
    class of ``wl``'s ``spec.priorityClassRef`` added at its ``spec.priority`` when absent."""
    spec = wl.get("spec") or {}
    ref = spec.get("priorityClassRef") or {}
    name = ref.get("name")
    if not isinstance(name, str) or not name:
        return wpc, pc
    value = int(spec.get("priority") or 0)
    if ref.get("kind") == "WorkloadPriorityClass" and name not in wpc:
        return {**wpc, name: value}, pc
    if ref.get("kind") == "PriorityClass" and name not in pc:
        return wpc, {**pc, name: value}
    return wpc, pc

def _adapter_of(kind: JobKind) -> Adapter | None:
    """The MultiKueue adapter of ``kind`` (``app.core.multikueue.ADAPTERS``), or None."""
    return next((a for a in MULTIKUEUE_ADAPTERS if a.kind == kind.kind
                 and a.group == kind.api_group), None)


def _dispatched_elsewhere(parent_kind: JobKind, parent: Mapping[str, Any]) -> bool:
    """Whether ``parent`` is a MultiKueue manager's object (its ``managedBy`` is
    ``kueue.x-k8s.io/multikueue``): its admission runs on a worker, so none of it is left
    for a child on this cluster (its operator here makes none; one a tenant hangs under it
    would run the admission a second time). Beyond Kueue v0.17.1, whose
    ``shouldSuspendChildJob`` lets any child of an admitted ancestor run (breaker15)."""
    adapter = _adapter_of(parent_kind)
    return adapter is not None and adapter.managed_by_of(parent) == MULTIKUEUE_CONTROLLER


def _share_of(job: Mapping[str, Any], parent_kind: JobKind, parent: Mapping[str, Any],
              workload: Mapping[str, Any] | None = None) -> tuple[int, str]:
    """Batch Job ``job``'s share of its managed ancestor ``parent``'s admission
    (``child_share``: pods at once) and, when its pod template asks more of any resource
    than the template that share was sized by (``child_sized_by``: ``requests_beyond``;
    milli-CPU, bytes, counts) or claims other DRA devices (``template_claims``), a sentence
    saying so ("" when it does not, or no sizing template is known). ``workload``:
    ``parent``'s admitted Workload, whose podSet then sizes the Job where the kind names
    one (``child_sized_by``). Raises ``WorkloadSpecError`` when the ancestor cannot be
    read."""
    allowed = child_share(parent_kind, parent, job)
    sized = child_sized_by(parent_kind, parent, job, workload) if allowed else None
    if not isinstance(sized, Mapping):
        return allowed, ""
    template = (job.get("spec") or {}).get("template")
    theirs, want = template_requests(template), template_requests(sized)
    claims, wanted = template_claims(template), template_claims(sized)
    over = requests_beyond(theirs, want)
    if not over and claims == wanted:
        return allowed, ""
    said = f"spec.template's pods request {theirs}, {'beyond' if over else 'within'} the " \
        f"{want} (milli-CPU, bytes, counts)"
    if claims != wanted:
        said += f", and claim {claims or 'no devices'}, not the {wanted or 'no devices'}"
    return allowed, said


def _held_parallelism(job: Mapping[str, Any]) -> tuple[int, int] | None:
    """(the ``spec.parallelism`` a child Job had before ``_hold_to_share`` lowered it, the
    one it set) from ``HELD_PARALLELISM_ANNOTATION`` (``"<had>:<set>"``, counts of at most
    nine ASCII digits, as an int32 parallelism is), or None (none recorded, or not in that
    form: a tenant's value never stops the set-back, brk34b H2)."""
    value = ((job.get("metadata") or {}).get("annotations") or {}).get(
        HELD_PARALLELISM_ANNOTATION)
    found = _HELD_FORM.fullmatch(value) if isinstance(value, str) else None
    return (int(found[1]), int(found[2])) if found else None


def _prebuilt_key(obj: Obj) -> str | None:
    """``PREBUILT_INDEX``'s value of ``obj``: ``<namespace>/<the Workload its own prebuilt
    label names>``, or None (no such label, or a kind that does not adopt one)."""
    name = JobReconciler._prebuilt(obj)
    return f"{(obj.get('metadata') or {}).get('namespace', '')}/{name}" if name else None


def _sooner(a: float | None, b: float | None) -> float | None:
    """The sooner of two "look again in" answers (None: no need)."""
    return b if a is None else a if b is None else min(a, b)


class OwnerIndex:
    """Workload keys by the object that controls them (``<kind key>:<ns>/<name>``)."""

    def __init__(self) -> None:
        self._by_owner: dict[str, set[str]] = defaultdict(set)
        self._owner_of: dict[str, str] = {}

    def update(self, key: str, owner: Owner | None) -> None:
        """Record (or with ``None`` forget) the owner of Workload ``key``."""
        prev = self._owner_of.pop(key, None)
        if prev is not None:
            self._by_owner[prev].discard(key)
            if not self._by_owner[prev]:
                del self._by_owner[prev]
        if owner is not None:
            okey = f"{owner.kind.key}:{owner.key}"
            self._owner_of[key] = okey
            self._by_owner[okey].add(key)

    def workloads_of(self, owner_key: str) -> set[str]:
        return set(self._by_owner.get(owner_key, ()))


def objects_controlled_by(ctx: Context, store_key: str, ns: str, uid: str) -> list[Obj]:
    """The objects of store ``store_key`` in namespace ``ns`` whose controller
    ownerReference (``app.wire.owners``) names ``uid``, from the store's index
    ``CONTROLLER_UID_INDEX``: built from the store once (O(store)), then kept by every
    change the informer makes to the store (an object added, re-parented, deleted), so a
    look costs its answer."""
    store = ctx.store(store_key)
    store.index(CONTROLLER_UID_INDEX, lambda o: controller_uid(o) or None)
    return [o for o in store.by_index(CONTROLLER_UID_INDEX, uid)
            if (o.get("metadata") or {}).get("namespace") == ns]


def holding_pods_controlled_by(ctx: Context, ns: str, uid: str) -> list[Obj]:
    """The pods of namespace ``ns`` controlled by ``uid`` that hold quota
    (``pod_holds_quota``), from the Pod store's ``HOLDING_CONTROLLER_UID_INDEX`` (kept by
    every change as ``objects_controlled_by``'s): the cost is the pods that run, not the
    terminal ones a tenant may leave under its own object by the thousand."""
    store = ctx.store(POD)
    store.index(HOLDING_CONTROLLER_UID_INDEX,
                lambda o: (controller_uid(o) or None) if pod_holds_quota(o) else None)
    return [o for o in store.by_index(HOLDING_CONTROLLER_UID_INDEX, uid)
            if (o.get("metadata") or {}).get("namespace") == ns]


def component_pods(ctx: Context, kind: JobKind, obj: Obj,
                   top: tuple[JobKind, Mapping[str, Any]], sets: frozenset[str] | None
                   ) -> list[Obj] | None:
    """The pods counted against podSets ``sets`` of ``top``'s admission for ``obj`` (of
    ``kind``, controlled by the queued object ``top`` itself: an AppWrapper's wrapped
    PyTorchJob): those controlled by every object of ``kind`` that ``top`` controls and whose
    ``podsets_under`` shares one of ``sets``, so the count is per component, not per object.
    While an AppWrapper's ``generateName`` component is being made, every object with its
    prefix names it (brk36b B2): each one's count alone would let a tenant's second
    object run a second set of pods. None when ``obj`` is ``top``, ``sets`` is empty or
    None, or ``obj``'s controller is not ``top`` (count per object, as before)."""
    top_obj = top[1]
    top_meta = top_obj.get("metadata") or {}
    top_uid = str(top_meta.get("uid") or "")
    if top_obj is obj or not sets or not top_uid or controller_uid(obj) != top_uid:
        return None
    ns = str((obj.get("metadata") or {}).get("namespace", ""))
    pods: list[Obj] = []
    for sibling in objects_controlled_by(ctx, kind.key, ns, top_uid):
        try:
            if not sets & (podsets_under(kind, sibling, top) or frozenset()):
                continue
        except WorkloadSpecError:
            continue
        uid = str((sibling.get("metadata") or {}).get("uid") or "")
        if uid:
            pods.extend(objects_controlled_by(ctx, POD, ns, uid))
    return pods


class JobReconciler:
    """Reconciles the objects of every kind in ``registry`` with their Workloads (module doc).
    ``reconciles`` counts passes (tests and metrics)."""

    # (API group, kind) of the enabled kinds not managed yet (``Manager._await_crds``:
    # discovery did not say they are served). Their objects may exist and run (discovery
    # answered 503 at start): a Workload they control keeps its quota and a job they made is
    # left alone until the kind is registered (``_of_awaited_kind``).
    # A class default for a reconciler made without ``__init__`` (tests); each has its own.
    awaited: set[tuple[str, str]] = set()
    # The same for the owner index (empty: a reconciler made without ``__init__`` is told of
    # no Workload).
    owners: OwnerIndex = OwnerIndex()

    def __init__(self, ctx: Context, registry: Registry, *, workers: int = 4) -> None:
        self.ctx = ctx
        self.registry = registry
        self.queue = WorkQueue(base=ctx.settings.scheduling.requeue_backoff_seconds / 4,
                               cap=ctx.settings.scheduling.requeue_backoff_max_seconds)
        self.workers = workers
        self.owners = OwnerIndex()
        # Pod uid -> when ``_delete_strays`` first saw it waiting for a Job's adoption.
        self.adoption_waits: dict[str, float] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self.reconciles = 0
        self.awaited = set()
        # "<ns>/<Job name>" -> (ancestor uid, its generation) of the stale child Jobs
        # deleted for their operator to make again (``_remake_stale_child``), oldest first.
        self.remade_children: dict[str, tuple[str, int]] = {}

    # ----------------------------------------------------------------- wiring

    def on_object(self, kind: JobKind) -> Any:
        """The informer handler for ``kind``'s objects."""
        def handler(etype: str, old: Obj | None, new: Obj | None) -> None:
            for obj in (old, new):
                key = object_key(kind, obj) if obj is not None else None
                if key is not None:
                    self.queue.add(f"{kind.key}:{key}")
            if old is not None and new is not None and (
                    kind.child_shares_changed(old, new) or kind.remakes_deleted_child_jobs
                    and old.get("spec") != new.get("spec")):
                self._enqueue_children(new)
        return handler

    def on_workload(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        obj = new or old
        if obj is None:
            return
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        owner = self.registry.owner_of(obj)
        self.owners.update(key, owner if new is not None else None)
        if owner is not None:
            self.queue.add(f"{owner.kind.key}:{owner.key}")
        elif etype != DELETED:
            self.queue.add(f"{WL_PREFIX}{key}")
            self._enqueue_adopters(key)

    def _enqueue_adopters(self, key: str) -> None:
        """Queue the objects whose own ``kueue.x-k8s.io/prebuilt-workload-name`` label names
        the ownerless Workload ``key`` (``ns/name``, just created or changed): such an object
        waits for its Workload without looking again (``_without_workload``), and this event
        is what wakes it to adopt it. Kueue v0.17.1 returns ``ErrPrebuiltWorkloadNotFound``
        instead, and its controller retries with backoff (5 ms doubling up to 1000 s). The
        objects are found through ``PREBUILT_INDEX`` on the stores of the kinds MultiKueue
        dispatches (the only ones that adopt: ``adopts_prebuilt``)."""
        for kind in self.registry.kinds():
            store_key = source_of(kind)
            if _adapter_of(kind) is None or store_key not in self.ctx.informers.informers:
                continue
            store = self.ctx.store(store_key)
            store.index(PREBUILT_INDEX, _prebuilt_key)
            for obj in store.by_index(PREBUILT_INDEX, key):
                okey = object_key(kind, obj)
                if okey is not None:
                    self.queue.add(f"{kind.key}:{okey}")

    def on_child_job(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        """The handler of the informers of the unlabelled batch Jobs and of those labelled
        with an empty queue name (``CHILD_JOB_STORES``): one with a controller may be a
        managed ancestor's child (queued as ``CHILD_JOBS:<ns>/<name>`` from either)."""
        obj = new or old
        meta = (obj or {}).get("metadata") or {}
        job_kind = self.registry.get(JOB)
        if meta.get("ownerReferences") or (old or {}).get("metadata", {}).get(
                "ownerReferences") or (new is not None and job_kind is not None
                                       and job_kind.carries_admission(new)):
            self.queue.add(f"{CHILD_JOBS}:{meta.get('namespace', '')}/{meta.get('name', '')}")

    def on_pod(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        """The Pod store's handler: a pod holding resources that carries
        ``kueue.x-k8s.io/podset`` and has no controller ownerReference (the garbage
        collector just removed it: its owner was deleted with ``--cascade=orphan``) may be a
        stray of a stored object (``framework.stray_pod``, brk28): queue every stored object
        one of the kinds' name labels on it names, whose pass deletes it
        (``_delete_strays``). A pod (made, changed or gone) whose controller ownerReference
        names an object of a registered kind that the store shows in its operator's stopped
        state (``operator_stopped``) queues that object, whose pass deletes what pods it
        still controls (``framework.stop_pods_left``) and releases its evicted Workload once
        they are gone: a pod made in that state is seen at once, whatever the object does.
        Every other pod event is ignored (the reconciler reads pods from the store when it
        needs them)."""
        self._queue_stopped_owner(new or old)
        if old is None and new is not None:
            self._queue_counted_owner(new)
        meta = (new or {}).get("metadata") or {}
        labels = meta.get("labels") or {}
        if new is None or PODSET_LABEL not in labels or controller_ref(meta) is not None \
                or meta.get("deletionTimestamp") or not pod_holds_quota(new):
            return
        for kind in self.registry.kinds():
            label = pod_labels(kind)[0]
            obj = own_stored(self.ctx, kind, new, str(labels[label])) \
                if label and labels.get(label) else None
            key = object_key(kind, obj) if obj is not None else None
            if key is not None:
                self.queue.add(f"{kind.key}:{key}")

    def _queue_counted_owner(self, pod: Obj) -> None:
        """Queue the object a new ``pod``'s controller ownerReference names when it carries
        the podset label and that object's kind makes its pods itself
        (``KindDefaults.direct_podsets``), or, for a pod made by a pod (a Spark executor),
        the object whose pods make pods (``pods_make_pods``) that controls its maker: its
        pass deletes pods beyond its podSets' admitted counts (``_delete_excess``)."""
        meta = pod.get("metadata") or {}
        if PODSET_LABEL not in (meta.get("labels") or {}):
            return
        ns = str(meta.get("namespace", ""))
        ref = controller_ref(meta)
        if ref is not None and ref.is_pod:
            # Made by a pod (a Spark executor): the object whose pod made it counts it.
            maker = self.ctx.store(POD).get(f"{ns}/{ref.name}")
            found = self.registry.kind_of_controller(maker) if maker is not None else None
            if found is not None and getattr(found[0], "pods_make_pods", False):
                self.queue.add(f"{found[0].key}:{ns}/{found[1]}")
            return
        found = self.registry.kind_of_controller(pod)
        if found is None:
            return
        kind, name = found
        if kind.resource is None \
                or getattr(type(kind), "direct_podsets", None) is KindDefaults.direct_podsets:
            return  # its pods are not counted per podSet
        self.queue.add(f"{kind.key}:{ns}/{name}")

    def _queue_stopped_owner(self, pod: Obj | None) -> None:
        """Queue the object ``pod``'s controller ownerReference names when it is of a
        registered kind and stored in its operator's stopped state (``on_pod``)."""
        found = self.registry.kind_of_controller(pod) if pod is not None else None
        if pod is None or found is None:
            return
        kind, name = found
        ns = str((pod.get("metadata") or {}).get("namespace", ""))
        if kind.resource is None or source_of(kind) not in self.ctx.informers.informers:
            return
        obj = lookup(kind, self.ctx, ns, name)
        if obj is not None and kind.operator_stopped(obj):  # type: ignore[attr-defined]
            self.queue.add(f"{kind.key}:{ns}/{name}")

    def on_made_object(self, store: str) -> Any:
        """The handler of a kind's ``made_store`` (every JobSet, for the TrainJob's): an
        object with an ownerReference may be one an operator made for a queued object
        (``reconcile_made``)."""
        def handler(etype: str, old: Obj | None, new: Obj | None) -> None:
            meta = (new or old or {}).get("metadata") or {}
            if new is not None and meta.get("ownerReferences"):
                self.queue.add(f"{store}:{meta.get('namespace', '')}/{meta.get('name', '')}")
        return handler

    def notify(self, workload: Obj | None, key: str) -> None:
        """Something happened to Workload ``key`` (admitted, evicted, failed to write):
        reconcile its owner, or the Workload itself when no registered object owns it. Told
        while ``acting_for`` a namespace (a preemption's eviction, for its preemptor), the
        key is served in that namespace's turns until its quota is released."""
        owner = self.registry.owner_of(workload) if workload is not None else None
        self.queue.add(f"{owner.kind.key}:{owner.key}" if owner else f"{WL_PREFIX}{key}",
                       lane=acting_lane())

    def owner_object(self, workload: Obj) -> Obj | None:
        """The stored object that controls ``workload`` (Events about it go there)."""
        owner = self.registry.owner_of(workload)
        return lookup(owner.kind, self.ctx, owner.namespace, owner.name) if owner else None

    def enqueue_all(self) -> None:
        for kind in self.registry.kinds():
            handler = self.on_object(kind)
            for obj in self.ctx.store(source_of(kind)):
                handler("SYNC", None, obj)
        for wl in self.ctx.store(WL):
            self.on_workload("SYNC", None, wl)
        for key in CHILD_JOB_STORES:
            if key in self.ctx.informers.informers:
                for job in self.ctx.store(key):
                    self.on_child_job("SYNC", None, job)
        for store in {getattr(k, "made_store", "") for k in self.registry.kinds()}:
            if store in self.ctx.informers.informers:
                made = self.on_made_object(store)
                for obj in self.ctx.store(store):
                    made("SYNC", None, obj)

    @property
    def tasks(self) -> list[asyncio.Task[None]]:
        """The running worker tasks."""
        return list(self._tasks)

    def start(self) -> None:
        for i in range(self.workers):
            self._tasks.append(asyncio.create_task(self._worker(), name=f"job-worker-{i}"))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        self.queue.close()

    async def _worker(self) -> None:
        await work(self.queue, self._reconcile_key, may_write=lambda: self.ctx.may_write,
                   log=log, what="reconcile")

    def _of_awaited_kind(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj``'s controller ownerReference names a kind in ``awaited``: its
        reconciler is not running yet, so its object may run whatever its Workload says
        (evicted: its quota stays until the kind is managed and stops it; a job it made runs
        on its admission, not an ancestor's gone with --cascade=orphan)."""
        ref = controller_of_object(obj)
        return ref is not None and (ref.group, ref.kind) in self.awaited

    async def _reconcile_key(self, key: str) -> float | None:
        self.reconciles += 1
        prefix, _, rest = key.partition(":")
        ns, _, name = rest.partition("/")
        kind = self.registry.get(prefix)
        if kind is not None:
            return await self.reconcile_object(kind, ns, name)
        if prefix == CHILD_JOBS:
            return await self.reconcile_child_job(ns, name)
        if any(getattr(k, "made_store", "") == prefix for k in self.registry.kinds()):
            return await self.reconcile_made(prefix, ns, name)
        return await self.reconcile_workload(ns, name)

    # ----------------------------------------------------------------- helpers

    def _priority_maps(self) -> tuple[dict[str, int], dict[str, int]]:
        wpc = {o["metadata"]["name"]: int(o.get("value") or 0) for o in self.ctx.store(WPC)}
        pc = {o["metadata"]["name"]: int(o.get("value") or 0) for o in self.ctx.store(PC)}
        return wpc, pc

    def _pods(self, ns: str) -> list[Obj]:
        """The pods of namespace ``ns`` (``framework.pods_in``)."""
        return pods_in(self.ctx, ns)

    def _pods_holding_quota(self, kind: JobKind, obj: Obj) -> int:
        """The object's pods still holding resources, for its quota: its status's count
        (``kind.active_pods``) or, when more, the Pod store's (``framework.pods_of`` with
        ``pod_holds_quota``: a pod Succeeded or Failed no longer counts, even while being
        deleted). What a release of its Workload's quota (Finished, evicted, replaced,
        deleted) waits for: Kueue KEP-10076 ``OnTerminal``."""
        return self._pods_left(kind, obj, pod_holds_quota)

    def _pods_blocking_restart(self, kind: JobKind, obj: Obj) -> int:
        """The object's pods that keep it from being started again (``pod_blocks_restart``:
        those ``_pods_holding_quota`` counts and the killed ones still being deleted)."""
        return self._pods_left(kind, obj, pod_blocks_restart)

    def _pods_left(self, kind: JobKind, obj: Obj,
                   counts: Callable[[Mapping[str, Any]], bool]) -> int:
        """``kind.active_pods`` or, when more, the Pod store's pods of ``obj`` that
        ``counts``; the Pod store's alone for an object being deleted whose operator ignores
        it (``ignored_once_deleted``)."""
        active = kind.active_pods(obj)
        meta = obj.get("metadata") or {}
        ignored = getattr(kind, "ignored_once_deleted", False) \
            and bool(meta.get("deletionTimestamp")) and POD in self.ctx.informers.informers
        if not pod_labels(kind)[0]:
            wl = self.ctx.store(WL).get(f"{meta.get('namespace', '')}/{kind.workload_name(obj)}")
            if ignored and wl is not None:
                # Its status is never written again (a RayJob): what its operator made runs
                # its pods, when the kind knows (``pods_once_deleted``).
                made = kind.pods_once_deleted(  # type: ignore[attr-defined]
                    self.ctx, wl, obj, self._pods(str(meta.get("namespace", ""))))
                if made is not None:
                    return int(made)
            return active
        pods = self._pods(str(meta.get("namespace", "")))
        if ignored:
            # Its operator ignores an object being deleted: the status's count is the last
            # one written before, never settled again; the Pod store's is the count, pods
            # whose ownerReference a tenant removed or replaced included.
            return len(pods_once_ignored(kind, pods, obj, counts=counts, ctx=self.ctx))
        return max(active, len(pods_of(kind, pods, obj, counts=counts, ctx=self.ctx)))

    def _restart_waits(self, kind: JobKind, obj: Obj) -> bool:
        """True when the suspended object, admitted, must not be started yet: pods of its
        own that a stop killed are still there (``pod_blocks_restart``, from the Pod store;
        a kind without ``pod_labels`` is not held). Its quota may have been released before
        (an eviction waits for ``_pods_holding_quota`` only), so the Workload can be admitted
        again while they go; Event ``WaitingForPods`` while it waits."""
        if not pod_labels(kind)[0] or not kind.is_suspended(obj):
            return False
        ns = str((obj.get("metadata") or {}).get("namespace", ""))
        left = len(pods_of(kind, self._pods(ns), obj, counts=pod_blocks_restart,
                           ctx=self.ctx))
        if left:
            self.ctx.recorder.emit(obj, NORMAL, "WaitingForPods",
                                   f"{left} pod(s) of the {kind.kind} are still being "
                                   "killed: it is started once they are gone")
        return left > 0

    def _to_stop(self, kind: JobKind, obj: Obj) -> bool:
        """Whether a stop of ``obj`` has something to do: it runs (not suspended), or it
        carries pykueue's start record (``is_started``: its template is still to restore),
        or it is a batch Job being deleted, suspended, whose pods still run: the Job
        controller stops the pods of a suspended Job only while it is not being deleted
        (Kubernetes v1.36 ``syncJob`` calls ``manageJob`` only without a
        ``deletionTimestamp``), so a Job suspended by pykueue and deleted before the Job
        controller acted on the suspension (a tenant's own finalizer keeping it) would run
        on, its Workload holding the quota; ``BatchJob.stop`` deletes them then."""
        if not kind.is_suspended(obj) or kind.is_started(obj):
            return True
        meta = obj.get("metadata") or {}
        if not meta.get("deletionTimestamp") or not pod_labels(kind)[0]:
            return False
        pods = self._pods(str(meta.get("namespace", "")))
        if kind.key != JOB:
            # An operator that ignores an object being deleted (``ignored_once_deleted``) did
            # not stop its pods: they are deleted (``framework.delete_own_pods``).
            return getattr(kind, "ignored_once_deleted", False) \
                and bool(own_running_pods(kind, pods, obj, ctx=self.ctx))
        return any(not (p.get("metadata") or {}).get("deletionTimestamp")
                   for p in pods_of(kind, pods, obj, ctx=self.ctx))

    def _holds_pods(self, kind: JobKind, obj: Obj, what: str, wl: Obj | None = None) -> bool:
        """True when the object still has pods holding resources (``_pods_holding_quota``;
        with ``wl``, the Workload whose release waits, ``_pods_for_release``): its quota
        stays, and an Event ``WaitingForPods`` says so (deduplicated by the recorder).
        ``what``: what waits for them."""
        left = self._pods_holding_quota(kind, obj) if wl is None \
            else self._pods_for_release(kind, obj, wl)
        if left > 0:
            self.ctx.recorder.emit(obj, NORMAL, "WaitingForPods",
                                   f"{left} pod(s) of the {kind.kind} still run or are being "
                                   f"killed: {what} once they are gone")
        return left > 0

    def _pods_for_release(self, kind: JobKind, obj: Obj, wl: Obj) -> int:
        """``_pods_holding_quota`` of ``obj`` for the release of its Workload ``wl``, except
        for an object being deleted (``_being_deleted``) whose count trusts its status (a
        kind not ``ignored_once_deleted``) while the Pod store is watched: the Pod store's
        alone then (``pods_holding``, as for an object that is gone). Its operator may never
        write that status again (spark-operator v2.5.0 leaves a deleted application
        ``RUNNING``; Trainer v2.2.0's ``jobsStatus`` stays as it was once its JobSet is
        gone), and with ``kubectl delete --cascade=foreground`` (Argo CD's default) the
        object waits for its Workload (ownerReference ``blockOwnerDeletion``), so a count
        from it would hold the Workload, the object and the quota forever. Not for a kind
        whose operator keeps its status true until its own finalizer goes
        (``status_kept_once_deleted``: AppWrapper, whose status covers a wrapped object's
        pods the Pod store cannot name)."""
        if not self._being_deleted(kind, obj) or getattr(kind, "ignored_once_deleted", False) \
                or getattr(kind, "status_kept_once_deleted", False) \
                or POD not in self.ctx.informers.informers:
            return self._pods_holding_quota(kind, obj)
        return self.pods_holding(wl, str((obj.get("metadata") or {}).get("uid") or "")) or 0

    async def _put_wl_status(self, wl: Obj) -> Obj:
        out = await self.ctx.client.replace(WORKLOADS, wl, subresource="status")
        self.ctx.store(WL).put(out)
        return out

    async def _release_finalizer(self, wl: Obj) -> None:
        """Take ``RESOURCE_IN_USE_FINALIZER`` off ``wl`` (an update guarded by its
        resourceVersion: a stale copy is a Conflict, retried), keeping every other; nothing
        when it does not carry it. Kueue v0.17.1 ``workload.RemoveFinalizer``."""
        meta = wl.get("metadata") or {}
        finalizers = list(meta.get("finalizers") or [])
        if RESOURCE_IN_USE_FINALIZER not in finalizers:
            return
        body = copy.deepcopy(wl)
        body["metadata"]["finalizers"] = [f for f in finalizers
                                          if f != RESOURCE_IN_USE_FINALIZER]
        try:
            out = await self.ctx.client.replace(WORKLOADS, body)
        except NotFound:
            return
        if (out.get("metadata") or {}).get("deletionTimestamp") and \
                not (out.get("metadata") or {}).get("finalizers"):
            return  # the API server deletes it now; the watch removes it from the store
        self.ctx.store(WL).put(out)

    def _pods_still_hold(self, wl: Obj, uid: str) -> int:
        """With ``jobs.deleted_quota_release: WhenPodsGone``, how many pods of the Workload's
        owner (uid ``uid``) still hold resources (``pods_holding``; 0 without the Pod
        watch); 0 with ``Immediately`` (Kueue v0.17.1: the finalizer goes at once) or when
        ``wl`` holds no quota."""
        if self.ctx.settings.jobs.deleted_quota_release != "WhenPodsGone" \
                or not has_admission(wl) or is_finished(wl):
            return 0
        return self.pods_holding(wl, uid) or 0

    # ----------------------------------------------------------------- objects

    async def reconcile_object(self, kind: JobKind, ns: str, name: str) -> float | None:
        """One pass over ``kind``'s object ``ns/name``; returns seconds to look again."""
        ctx = self.ctx
        obj = lookup(kind, ctx, ns, name)
        if obj is not None and self.awaited and self._of_awaited_kind(obj):
            return None  # a child of a kind not managed yet: reconciled once it is
        strays = await self._delete_strays(kind, obj) if obj is not None else None
        if obj is not None:
            await self._delete_excess(kind, obj)
        if obj is not None and not kind.top_level:
            ancestor = await self._managed_ancestor(obj)
            if ancestor is not None:
                # Its ancestor's business (a JobSet's Job carrying the queue label of its
                # template): no Workload of its own, ever.
                again = await self._gone(kind, ns, name)
                return _sooner(strays, await self._child(kind, obj, *ancestor) or again)
        # An empty queue name is no queue, unless unlabelled jobs are managed.
        if obj is None or not (kind.queue_name(obj) or self._manages_unlabelled(kind, obj, ns)):
            if obj is not None and (kind.key != JOB or CHILD_JOBS not in ctx.informers.informers):
                # With CHILD_JOBS, unlabelled Jobs are reconciled from that store.
                await self._orphaned_child(kind, obj)
            return _sooner(strays, await self._gone(kind, ns, name))
        again = strays
        uid = str((obj.get("metadata") or {}).get("uid") or "")
        if kind.resource is not None and uid and not self._prebuilt(obj) \
                and self._workloads_of_others(kind, ns, name, uid):
            again = _sooner(again, await self._drop_predecessors(kind, ns, name))
        return _sooner(again, await self._reconcile_queued(kind, obj, ns, name))

    async def _delete_excess(self, kind: JobKind, obj: Obj) -> int:
        """Delete the pods ``obj`` controls beyond its podSets' admitted counts
        (``admitted_pods.excess_pods``: placed, Running and older pods kept first; uid as
        precondition), and the pods its pods made, of every maker (``made_pods_of``),
        beyond the counts of the podSets its pods make (``KindDefaults.made_podsets``: a
        Spark driver's executors); for a child of another object's admission that names
        none of its podSets (``podsets_under`` empty), every pod it controls carrying one
        of that admission's podSet labels; when the queued object above ``obj`` (or
        itself) is admitted: the Pod webhook refuses such a create
        (``app.controllers.pod_create_check``), but its count is each replica's own and it
        is not called while unregistered, so a tenant's burst across replicas could pass.
        One Warning Event ``DeletedExcessPods`` on ``obj``; returns the count deleted.
        Nothing without the Pod store or for an object being deleted. Beyond Kueue
        v0.17.1, which leaves such pods to the operator."""
        meta = obj.get("metadata") or {}
        if meta.get("deletionTimestamp") or POD not in self.ctx.informers.informers:
            return 0
        ns, uid = str(meta.get("namespace", "")), str(meta.get("uid") or "")
        top = queued_top(self.ctx, self.registry, kind, obj)
        if top is None:
            return 0
        try:
            direct = podsets_under(kind, obj, top)
            made = kind.made_podsets(obj)  # type: ignore[attr-defined]
        except WorkloadSpecError:
            return 0
        # A child of another object's admission naming none of its podSets (a tenant's
        # PyTorchJob under an AppWrapper, no component): pods it controls carrying any of
        # that admission's podSet labels run on nothing (brk36b B2).
        unnamed = top[1] is not obj and (
            direct == frozenset()
            # or one the object above refuses (a tenant's RayCluster under an AppWrapper's
            # wrapped RayJob: not the cluster that RayJob runs on, brk37b R1)
            or bool(kind.withholds(self.ctx, obj, *top)))  # type: ignore[attr-defined]
        if not direct and not made and not unnamed:
            return 0
        wl = self.ctx.store(WL).get(f"{ns}/{top[0].workload_name(top[1])}")
        if not admitted(wl):
            return 0
        assert wl is not None
        counts = admitted_counts(wl)
        # Per component of an AppWrapper: every object its generateName prefix names.
        own = component_pods(self.ctx, kind, obj, top, direct) \
            if not unnamed else None
        if own is None:
            own = self._controlled_by(POD, ns, uid)
        extra = excess_pods(own, dict.fromkeys(counts, 0) if unnamed else
                            {ps: n for ps, n in counts.items() if ps in (direct or ())})
        if made:
            # A Spark driver's executors, of every driver the object had (``made_pods_of``:
            # a replaced driver's may still run out their grace period).
            extra += excess_pods(made_pods_of(self.ctx, kind, obj),
                                 {ps: n for ps, n in counts.items() if ps in made})
        deleted = await delete_pods(self.ctx, extra)
        if deleted:
            names = ", ".join(sorted(str((p.get("metadata") or {}).get("name")) for p in deleted))
            self.ctx.recorder.emit(obj, WARNING, "DeletedExcessPods",
                                   f"{len(deleted)} pod(s) beyond the admitted count of their "
                                   f"podSet deleted ({names}): only the pods admitted run")
        return len(deleted)

    async def _delete_strays(self, kind: JobKind, obj: Obj) -> float | None:
        """Delete the strays of ``obj`` (``framework.stray_pod``, brk28: pods of its run that
        lost their controller with an owner its operator made again, deleted with
        ``--cascade=orphan``, and that run on beside their replacements outside any
        admission), with their uids as preconditions (``delete_pods``), but one another
        Workload of the namespace owns or counts (``_others_pods``: an orphaned predecessor's
        of the same name). One Normal Event ``DeletedOrphanedPods`` on ``obj`` naming the
        count. Returns ``PODS_POLL`` while a pod without a controller that would otherwise
        be a stray waits for a batch Job's adoption (``adopted_by_job``: the Job controller
        takes it within moments, or the Job, being deleted, releases it; neither changes the
        pod once more), for at most ``ADOPTION_WAIT_SECONDS`` (``_adoption_awaited``), else
        None. Nothing for an object being deleted (its Workload is then
        orphaned, ``owner_gone``) or without the Pod store. Kueue v0.17.1 counts no pods and
        leaves such a pod running: beyond it."""
        label = pod_labels(kind)[0]
        meta = obj.get("metadata") or {}
        if not label or meta.get("deletionTimestamp") or POD not in self.ctx.informers.informers:
            return None
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        uid = str(meta.get("uid") or "")
        unowned = [p for p in self._pods(ns)
                   if ((p.get("metadata") or {}).get("labels") or {}).get(label) == name
                   and PODSET_LABEL in ((p.get("metadata") or {}).get("labels") or {})
                   and controller_ref(p.get("metadata") or {}) is None
                   and not (p.get("metadata") or {}).get("deletionTimestamp")
                   and pod_holds_quota(p)]
        if not unowned:
            return None
        strays = [p for p in unowned if stray_pod(self.ctx, kind, p, name, uid)]
        waiting = self._adoption_awaited(
            [p for p in unowned if p not in strays and adopted_by_job(self.ctx, p)
             and kind.leaves_orphans(self.ctx, p, name, uid)])  # type: ignore[attr-defined]
        if strays:
            # Its own Workloads: the one of its name, and one it adopted (a MultiKueue copy,
            # named after the manager's object).
            own = {kind.workload_name(obj)}
            for key in self.owners.workloads_of(f"{kind.key}:{ns}/{name}"):
                wl = self.ctx.store(WL).get(key)
                owner = self.registry.owner_of(wl) if wl is not None else None
                if owner is not None and owner.uid == uid:
                    own.add(key.partition("/")[2])
            others = self._others_pods({"metadata": {"namespace": ns, "name": ""}}, strays,
                                       skip=own)
            strays = [p for p in strays
                      if str((p.get("metadata") or {}).get("uid", "")) not in others]
        deleted = len(await delete_pods(self.ctx, strays))
        if deleted:
            self.ctx.recorder.emit(
                obj, NORMAL, "DeletedOrphanedPods",
                f"{deleted} pod(s) of the {kind.kind} deleted: they lost their controller "
                "(an owner deleted with --cascade=orphan) and its operator made their "
                "owner again, so they ran beside their replacements outside the admission")
        return PODS_POLL if waiting else None

    def _adoption_awaited(self, pods: list[Mapping[str, Any]]) -> bool:
        """Whether any of ``pods`` (waiting for a batch Job's adoption) is still worth
        looking at again in ``PODS_POLL``: first seen waiting less than
        ``ADOPTION_WAIT_SECONDS`` ago (``ctx.clock``). Past that, the object is not polled
        for it (its pod events still queue it, ``on_pod``); it counts for nothing, as a pod
        the Job controller never adopts is no run of the object's. Entries of pods no longer
        waiting are forgotten once the map outgrows the pods seen waiting now."""
        now = self.ctx.clock()
        waits = self.adoption_waits
        awaited = False
        for p in pods:
            first = waits.setdefault(str((p.get("metadata") or {}).get("uid", "")), now)
            awaited = awaited or now - first < ADOPTION_WAIT_SECONDS
        if len(waits) > 4 * len(pods) + 1000:
            keep = {str((p.get("metadata") or {}).get("uid", "")) for p in pods}
            stale = [u for u, t in waits.items()
                     if u not in keep and now - t >= ADOPTION_WAIT_SECONDS]
            for u in stale:
                del waits[u]
        return awaited

    def _workloads_of_others(self, kind: JobKind, ns: str, name: str, uid: str) -> set[str]:
        """The keys of the stored Workloads controlled by an object ``ns/name`` whose uid is
        not ``uid`` (and not empty: a pod group's)."""
        stale = set()
        for key in self.owners.workloads_of(f"{kind.key}:{ns}/{name}"):
            wl = self.ctx.store(WL).get(key)
            owner = self.registry.owner_of(wl) if wl is not None else None
            if owner is not None and owner.uid and owner.uid != uid:
                stale.add(key)
        return stale

    async def _drop_predecessors(self, kind: JobKind, ns: str, name: str) -> float | None:
        """The queued object ``ns/name`` was created again (``kubectl delete job train`` then
        ``kubectl create -f train.yaml`` while the first one's pods were still going): the
        Workloads of its predecessors (another uid, in their names too, so never its own)
        lose ``RESOURCE_IN_USE_FINALIZER`` and are deleted as ``_gone`` does
        (``_drop_workloads``). The object of that name is read from the API first, so that a
        store behind it never takes its own Workload for one of a predecessor. Not for a
        composed object (a pod group: no uid of its own) nor one adopting a prebuilt
        Workload (Kueue v0.17.1 lists none by owner for it: ``reconcile_object``)."""
        live = await self._live(kind, ns, name)
        uid = str(((live or {}).get("metadata") or {}).get("uid") or "")
        keys = self._workloads_of_others(kind, ns, name, uid)
        return await self._drop_workloads(kind, ns, name, keys, live) if keys else None

    async def _reconcile_queued(self, kind: JobKind, obj: Obj, ns: str, name: str
                                ) -> float | None:
        """``reconcile_object`` for queued ``obj`` (module doc, per object from "a Workload
        of its name that another object owns" on)."""
        ctx = self.ctx
        wl = ctx.store(WL).get(f"{ns}/{kind.workload_name(obj)}")
        if wl is not None and adoptable_copy(obj, wl) and self.registry.owner_of(wl) is None:
            wl = await self._adopt(kind, obj, wl)
        if wl is not None and not self._owns(kind, obj, ns, name, wl):
            # The name is taken by a Workload of another object (a pod group named like a
            # Job's Workload, say): never finish, stop, start or delete for it.
            ctx.recorder.emit(obj, WARNING, "WorkloadNameConflict",
                              f"Workload {ns}/{wl['metadata']['name']} belongs to another "
                              f"object; this {kind.kind} is not queued until it is gone")
            return 30.0
        if kind.operator_stopped(obj) and not (  # type: ignore[attr-defined]
                getattr(kind, "ignored_once_deleted", False)
                and (obj.get("metadata") or {}).get("deletionTimestamp")):
            # Its operator deletes no pod of it in that state, which its status claims (a
            # tenant may forge it): pykueue deletes those left, and they count until gone.
            # Being deleted, such a kind's pods are ``delete_own_pods``' (``stop``).
            await stop_pods_left(ctx, kind, obj)
        if wl is not None and is_finished(wl):
            # Kueue v0.17.1's order: a Finished Workload loses the finalizer first, being
            # deleted or not, and its job is not stopped (a completed Job was suspended, its
            # startTime cleared and its template restored before): Finished, it holds no
            # quota any more.
            await self._release_finalizer(wl)
            return None
        if wl is not None and (wl.get("metadata") or {}).get("deletionTimestamp"):
            return await self._workload_deleted(kind, obj, wl)
        finished, reason, message = kind.finished(obj)
        if finished:
            if wl is not None:
                if self._holds_pods(kind, obj, "its Workload is Finished"):
                    # Its pods still run (a Kubeflow job Failed with cleanPodPolicy None
                    # leaves them): they hold the GPUs, so the Workload keeps the quota.
                    return PODS_POLL
                await self._put_wl_status(with_finished(wl, reason, message, ctx.clock()))
                ctx.recorder.emit(obj, NORMAL, "FinishedWorkload",
                                  f"Workload '{ns}/{wl['metadata']['name']}' is declared finished")
                ctx.wake()
            return None
        # Members beyond the group's count go first (Kueue deletes excess pods and admits
        # the rest, rather than refusing the whole group).
        obj = await trim(kind, ctx, obj, wl)
        if wl is None:
            return await self._without_workload(kind, obj)
        if self._being_deleted(kind, obj) and kind.is_suspended(obj):
            return await self._never_to_start(kind, obj, wl)
        wl = await self._sync_priority(kind, obj, wl)
        if has_admission(wl) and not is_evicted(wl) and is_active(wl):
            why = self._admission_mismatch(kind, obj, wl)
            if why is not None:
                return await self._stop_mismatched(kind, obj, wl, why)
            if not is_true(wl, ADMITTED):
                # Quota reserved, admission checks not all Ready: the object waits (Kueue
                # starts a job only once its Workload is Admitted).
                if self._to_stop(kind, obj):
                    await kind.stop(ctx, obj, "Not admitted by cluster queue")
                return None
            if self._restart_waits(kind, obj):
                return PODS_POLL
            await self._start(kind, obj, wl)
            await self._sync_pods_ready(kind, obj, wl)
            return await kind.settle(ctx, obj, self._pods_blocking_restart(kind, obj))
        if has_admission(wl) and not is_evicted(wl):
            # Deactivated, its eviction not written yet: stop the object now, release the
            # quota only after Evicted=True (Kueue: the release follows the eviction, so a
            # deactivated Workload always shows why it lost its quota).
            if self._to_stop(kind, obj):
                await kind.stop(ctx, obj, "The workload is deactivated")
            return 1.0
        if has_admission(wl):  # evicted while holding quota
            return await self._stop_then_release(kind, obj, wl)
        if f"{ns}/{wl['metadata']['name']}" in ctx.inflight:
            return None  # its admission is being written right now
        if self._to_stop(kind, obj):
            await kind.stop(ctx, obj, "Not admitted by cluster queue")
            return None
        await self._maybe_rebuild(kind, obj, wl)
        return None

    async def reconcile_child_job(self, ns: str, name: str) -> float | None:
        """A batch Job unlabelled or labelled with an empty queue name (``CHILD_JOB_STORES``;
        Kueue v0.17.1's ``QueueName`` reads both as none): when an ancestor queues it, the
        rules of a child (``_child``), as for a labelled one. The ancestor is looked for in
        the stores (no API read per unlabelled Job's event); for a Job that carries an
        admission (``carries_admission``) the walk may also read its controller from the API
        server (``_managed_ancestor``): an unlabelled object in between (the JobSet an
        AppWrapper wraps) is in no store."""
        kind = self.registry.get(JOB)
        obj = self._child_job(f"{ns}/{name}")
        if kind is None or obj is None or self.awaited and self._of_awaited_kind(obj):
            return None  # its controller's kind, once managed, reconciles it (enqueue_all)
        ancestor = stored_ancestor(self.ctx, self.registry, obj) or \
            made_via_ancestor(self.ctx, self.registry, obj)
        if ancestor is None and kind.carries_admission(obj) and not kind.finished(obj)[0]:
            ancestor = await self._managed_ancestor(obj)
        if ancestor is None:
            return await self._orphaned_child(kind, obj)
        return await self._child(kind, obj, *ancestor)

    def _child_job(self, key: str) -> Obj | None:
        """The batch Job ``key`` (``ns/name``) as ``CHILD_JOB_STORES`` hold it (at most one
        does: their selectors exclude each other), or None."""
        for store in CHILD_JOB_STORES:
            if store in self.ctx.informers.informers:
                obj = self.ctx.store(store).get(key)
                if obj is not None:
                    return obj
        return None

    async def reconcile_made(self, store: str, ns: str, name: str) -> float | None:
        """An object of a kind's ``made_store`` (a JobSet) whose controller is that kind's
        queued object (a TrainJob: the JobSet its trainer made, unlabelled): the rules of a
        child (``_child``: suspended while the parent's Workload is not admitted, else held
        to its admission by ``made_kind.hold_to_ancestor``). One the made kind's own informer
        holds (labelled) is reconciled there, by the same rules."""
        obj = self.ctx.store(store).get(f"{ns}/{name}")
        made = next((k for k in self.registry.kinds()
                     if getattr(k, "made_store", "") == store), None)
        kind = self.registry.get(str(getattr(made, "made_kind", "")))
        if obj is None or kind is None or made is None:
            return None
        if kind.key in self.ctx.informers.informers and lookup(kind, self.ctx, ns, name):
            return None
        ref = controller_of_object(obj)
        if ref is None or ref.kind != made.kind or ref.group != made.api_group:
            return None
        parent = lookup(made, self.ctx, ns, ref.name)
        if parent is None or (parent.get("metadata") or {}).get("uid") != ref.uid \
                or not (made.queue_name(parent)
                        or manages_unlabelled_in(self.ctx, ns)):
            return None
        return await self._child(kind, obj, made, parent)

    async def _orphaned_child(self, kind: JobKind, obj: Obj) -> float | None:
        """A Job (or RayCluster) whose pod templates carry an admission it holds none of
        (``carries_admission``: copied by an ancestor's operator) and that no managed
        ancestor covers any more (the ancestor deleted with ``--cascade=orphan``, which
        removes the ownerReference; a controller a tenant adds, of another kind or an
        unqueued object, covers nothing; one whose controller is gone is left to the garbage
        collector): it ran on that ancestor's admission, which ends with it, so it is stopped
        with the admission's scheduling taken out (``stop_orphaned``; Warning Event
        ``AncestorGone``). A controller of a managed kind that runs (the JobSet a deleted
        TrainJob made) is stopped too, or it would resume the Job. Its pods go, and the
        ancestor's orphaned Workload is Finished once they are gone. Goes beyond Kueue, which
        leaves such a Job running unmanaged."""
        meta = obj.get("metadata") or {}
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        if not kind.carries_admission(obj) or kind.finished(obj)[0] \
                or meta.get("deletionTimestamp") \
                or self.owners.workloads_of(f"{kind.key}:{ns}/{name}") \
                or await self._managed_ancestor(obj) is not None:
            return None
        found = self.registry.kind_of_controller(obj)
        if found is not None and found[0].resource is not None:
            owner = lookup(found[0], self.ctx, ns, found[1])
            try:
                owner = owner or await self.ctx.client.get(found[0].resource, found[1], ns)
            except NotFound:
                return None  # its controller is gone: the garbage collector deletes it
            if (owner.get("metadata") or {}).get("uid") != controller_uid(obj):
                return None  # names a uid that does not exist: likewise
        why = (f"its pod template carries the admission of an ancestor that is gone (deleted "
               f"with --cascade=orphan?): the {kind.kind} is stopped and the admission's "
               "nodeSelector, tolerations and podset label removed")
        if found is not None and found[0].resource is not None \
                and not found[0].is_suspended(owner):
            # Its controller (the JobSet a TrainJob made, left by --cascade=orphan) would
            # resume it with the admission's scheduling again (jobset's
            # resumeJobsIfNecessary): that controller is stopped too, first, so that a failed
            # write is retried while the Job still carries the admission.
            await found[0].stop(self.ctx, owner, why)
        written = await kind.stop_orphaned(self.ctx, obj, why)  # type: ignore[attr-defined]
        self.ctx.recorder.emit(written, WARNING, "AncestorGone", why)
        return None

    async def _managed_ancestor(self, obj: Obj) -> tuple[JobKind, Mapping[str, Any]] | None:
        """``Registry.managed_ancestor`` over the stores (Kueue v0.17
        ``FindAncestorJobManagedByKueue``). A controller the store has not shown yet (it is
        created just before its children) is read from the API server once, so a child is
        never taken for a job of its own in that window."""
        manage = manages_unlabelled_in(self.ctx, str(obj["metadata"].get("namespace", "")))
        fetched: dict[str, Mapping[str, Any] | None] = {}

        def get(kind: JobKind, ns: str, name: str) -> Mapping[str, Any] | None:
            key = f"{kind.key}:{ns}/{name}"
            return fetched[key] if key in fetched else lookup(kind, self.ctx, ns, name)

        found = self.registry.kind_of_controller(obj)
        if found is not None and found[0].resource is not None:
            ns = str(obj["metadata"].get("namespace", ""))
            if lookup(found[0], self.ctx, ns, found[1]) is None:
                try:
                    fetched[f"{found[0].key}:{ns}/{found[1]}"] = await self.ctx.client.get(
                        found[0].resource, found[1], ns)
                except NotFound:
                    fetched[f"{found[0].key}:{ns}/{found[1]}"] = None
        return self.registry.managed_ancestor(obj, get, manage_unlabelled=manage)

    async def _child(self, kind: JobKind, obj: Obj, parent_kind: JobKind,
                     parent: Mapping[str, Any]) -> float | None:
        """A job whose ancestor ``parent`` queues it (Kueue v0.17 ``shouldSuspendChildJob``):
        while it runs unfinished and the ancestor's Workload is missing, finished or not
        admitted, or the ancestor is suspended and being deleted (JobSet v0.11.1 and KubeRay
        v1.6.0 ignore an object being deleted: they do not stop its children), it is
        suspended (event ``Suspended``); otherwise left to its ancestor's operator. An
        ancestor MultiKueue dispatched (``_dispatched_elsewhere``) leaves it nothing:
        suspended too.

        A child being deleted (a tenant's own finalizer keeps it) is stopped also while the
        ancestor's Workload is evicted (still Admitted until its quota is released), and
        stopped again while suspended with running pods (``_to_stop``): neither the Job
        controller nor KubeRay stops the pods of an object being deleted (the JobSet operator
        suspends such a child Job, which kills none), so they would run on through the
        ancestor's preemption, its Workload holding the quota for good. The stop deletes them
        (``BatchJob.stop``, ``framework.delete_own_pods``). Beyond Kueue v0.17.1, whose
        reconciler skips an object being deleted; a child not being deleted keeps Kueue's
        rule (``!IsAdmitted``): its ancestor's operator stops it."""
        finished, _, _ = kind.finished(obj)
        deleting = self._being_deleted(kind, obj)
        if kind.key == JOB and not finished and not deleting \
                and parent_kind.remakes_deleted_child_jobs \
                and await self._remake_stale_child(kind, obj, parent_kind, parent):
            return None
        if finished or kind.is_suspended(obj) and not (deleting and self._to_stop(kind, obj)):
            return None
        ns = str(obj["metadata"].get("namespace", ""))
        wl = self.ctx.store(WL).get(f"{ns}/{parent_kind.workload_name(parent)}")
        if _dispatched_elsewhere(parent_kind, parent):
            await kind.stop(self.ctx, obj, "its ancestor's admission runs on a MultiKueue "
                                           "worker: no child of it runs on this cluster")
            return None
        parent_stopped = bool((parent.get("metadata") or {}).get("deletionTimestamp")) \
            and parent_kind.is_suspended(parent)
        if wl is not None and not is_finished(wl) and is_true(wl, ADMITTED) \
                and not parent_stopped and not (deleting and is_evicted(wl)):
            if kind.is_suspended(obj):
                return None  # being deleted, pods running: its operator resumes it
            if kind.key == JOB:
                return await self._hold_to_share(obj, parent_kind, parent)
            await kind.hold_to_ancestor(self.ctx, obj, parent_kind, parent, wl)
            return None
        await kind.stop(self.ctx, obj, "Kueue managed child job suspended")
        return None

    async def _remake_stale_child(self, kind: JobKind, job: Obj, parent_kind: JobKind,
                                  parent: Mapping[str, Any]) -> bool:
        """For an ancestor kind whose operator makes a deleted child Job again from the
        object's current template (``remakes_deleted_child_jobs``: mpi-operator v0.8.0's
        launcher, made at the MPIJob's creation, ``AtStartup``, and on resume synced in its
        scheduling fields only): a child Job whose pods ask beyond the template its share is
        sized by now (``_share_of``: the object's template was lowered while it was queued,
        brk33b F2) and that holds no pod (``_pods_holding_quota`` of ``kind``, the batch Job
        kind: suspended, or set to parallelism 0 by ``_hold_to_share`` and drained) is
        deleted (uid and resourceVersion preconditions:
        one resumed since it was read is left alone, brk34 L1; propagation Background), so
        that the operator makes it from its current template. Once per Job name, ancestor
        uid and ancestor ``metadata.generation``: a Job made again that still asks beyond
        is held by ``_hold_to_share`` instead. Returns whether it was deleted. Beyond Kueue
        v0.17.1, which runs the old launcher (beyond its admission)."""
        meta, pmeta = job.get("metadata") or {}, parent.get("metadata") or {}
        if pmeta.get("deletionTimestamp"):
            return False
        try:
            _, beyond = _share_of(job, parent_kind, parent)
        except WorkloadSpecError:
            return False
        if not beyond:
            return False
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        stamp = (str(pmeta.get("uid", "")), int(pmeta.get("generation") or 0))
        if self.remade_children.get(f"{ns}/{name}") == stamp:
            return False
        suspended = bool((job.get("spec") or {}).get("suspend"))
        if not suspended and job_pod_count(job) > 0 or self._pods_holding_quota(kind, job):
            return False  # _hold_to_share sets it to 0 first, and its pods go
        try:
            # The Job as read: resumed since (its pod made), it is left to _hold_to_share.
            await self.ctx.client.delete(JOBS, name, ns, uid=str(meta.get("uid", "")),
                                         resource_version=str(meta.get("resourceVersion") or "")
                                         or None)
        except NotFound:
            return True
        except Conflict:
            return False  # changed since it was read: looked at again on its own event
        self.remade_children[f"{ns}/{name}"] = stamp
        while len(self.remade_children) > REMADE_CHILDREN_KEPT:
            self.remade_children.pop(next(iter(self.remade_children)))
        self.ctx.recorder.emit(
            parent, NORMAL, "DeletedStaleChildJob",
            f"Job {ns}/{name} was made from an earlier template: {beyond} of a pod this "
            f"{parent_kind.kind} is sized for now; deleted, for its operator to make it again "
            "from the current template")
        return True

    async def _hold_to_share(self, job: Obj, parent_kind: JobKind,
                             parent: Mapping[str, Any]) -> float | None:
        """A running batch Job of an admitted ancestor runs at most the pods the ancestor's
        admission gives it (``child_jobs`` of the ancestor's kind: a JobSet's
        ``<jobset>-<replicatedJob>-<i>`` its replicatedJob's pods per Job, an MPIJob's
        launcher and a RayJob's submitter their podSet's count; a Job the ancestor's operator
        does not make, or one it controls through another object, none): a higher
        ``spec.parallelism`` (raised by a tenant: the operators never change it) is set back
        to that share, and the Job controller deletes the pods beyond it, whose grace period
        pykueue shortens (``_cut_grace_beyond_share``; returns the seconds to the next look,
        or None). Goes beyond Kueue v0.17.1 (``shouldSuspendChildJob`` leaves an admitted
        ancestor's children alone); parallelism rather than suspend, because the ancestor's
        operator resumes a child it finds suspended (jobset v0.11.1
        ``resumeJobsIfNecessary``). A Job whose template asks more per pod than the template
        its share was sized by (``child_sized_by``, the admitted Workload's podSet where the
        kind names one: ``requests_beyond``), or claims other DRA
        devices (``template_claims``), gets a share of 0 (brk32 H1/H3, brk33 M2).

        A Job held below its ``spec.parallelism`` keeps that count and the one set in
        annotation ``HELD_PARALLELISM_ANNOTATION``; once its share is larger again (an
        AppWrapper's ``generateName`` Job reconciled while the store still showed the old
        component's name: brk30b L) and its parallelism is still the one set, it is set back
        up to that count, at most to the share (event ``RestoredParallelism``). A tenant
        writing the annotation gains nothing: the share bounds it, and the webhook lets the
        tenant raise parallelism to the share anyway."""
        meta = job["metadata"]
        wl = self.ctx.store(WL).get(
            f"{meta.get('namespace', '')}/{parent_kind.workload_name(parent)}")
        try:
            have = job_pod_count(job)
            allowed, beyond = _share_of(job, parent_kind, parent,
                                        wl if wl is not None and has_admission(wl) else None)
        except WorkloadSpecError:
            return None  # the ancestor's own reconcile stops it: it no longer matches
        if beyond:
            allowed = 0  # its pods would use more than its share's podSet was admitted for
        owner = f"{parent_kind.kind} {meta.get('namespace')}/{parent['metadata'].get('name')}"
        parallelism = job["spec"].get("parallelism")
        held = _held_parallelism(job)
        if have > allowed:
            body = copy.deepcopy(job)
            body["spec"]["parallelism"] = allowed
            had = held[0] if held else parallelism if isinstance(parallelism, int) else 1
            body["metadata"]["annotations"] = {**(body["metadata"].get("annotations") or {}),
                                               HELD_PARALLELISM_ANNOTATION: f"{had}:{allowed}"}
            message = (f"{beyond} of a pod its {owner} was admitted for: spec.parallelism "
                       f"{parallelism} set to 0"
                       if beyond else f"spec.parallelism {parallelism} runs {have} pods, more "
                       f"than the {allowed} its {owner} was admitted for: set back to "
                       f"{allowed}")
            job = await self._replace_child_job(body, WARNING, "ExceedsAncestorAdmission",
                                                message)
        elif held is not None and parallelism == held[1] and parallelism < min(held[0], allowed):
            # Only the count pykueue set is raised: one a user wrote since stays theirs.
            up = min(held[0], allowed)
            body = copy.deepcopy(job)
            body["spec"]["parallelism"] = up
            annotations = body["metadata"]["annotations"]
            if held[0] <= allowed:
                del annotations[HELD_PARALLELISM_ANNOTATION]
            else:
                annotations[HELD_PARALLELISM_ANNOTATION] = f"{held[0]}:{up}"
            job = await self._replace_child_job(
                body, NORMAL, "RestoredParallelism",
                f"spec.parallelism {parallelism} set back to {up}: its {owner}'s admission "
                f"gives it {allowed} pod(s) (spec.parallelism was {held[0]} before pykueue "
                "held it)")
        return await self._cut_grace_beyond_share(job, allowed, parent_kind, parent)

    async def _replace_child_job(self, body: Obj, etype: str, reason: str, message: str
                                 ) -> Obj:
        """PUT child Job ``body``, keep the stores that hold it current, and emit Event
        ``reason`` on it; returns the Job as written. Raises the client's errors."""
        meta = body["metadata"]
        written = await self.ctx.client.replace(JOBS, body)
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        for store in (JOB, *CHILD_JOB_STORES):
            if store in self.ctx.informers.informers and self.ctx.store(store).get(key):
                self.ctx.store(store).put(written)
        self.ctx.recorder.emit(written, etype, reason, message)
        return written

    async def _cut_grace_beyond_share(self, job: Obj, allowed: int, parent_kind: JobKind,
                                      parent: Mapping[str, Any]) -> float | None:
        """The pods of child Job ``job`` (running, held to its share ``allowed`` of its
        admitted ancestor ``parent``'s admission) that are beyond that share do not run out
        a grace period of the tenant's choosing (brk31 H2: a Job's
        ``terminationGracePeriodSeconds`` of a day, its containers ignoring SIGTERM, kept
        the pods the set-back removes running that long). With a share of 0 (a Job the
        ancestor's operator does not make) every pod of it is beyond: those not yet
        deleted, or being deleted with a longer grace, are deleted with
        ``BEYOND_SHARE_GRACE_SECONDS``. With a share of at least 1 the Job controller chooses
        the pods it deletes; those being deleted with a grace beyond what the ancestor's
        Workload gives its pods (``grace_allowed``, as for the pods of a stopped object) are
        deleted again with that grace, which shortens it. A DELETE with a uid precondition
        (``delete_pods``); Normal Event ``DeletedPods`` on the Job. Read from the Pod store
        (nothing without one), whose events do not wake the Job: while the Job's status
        counts pods that may be beyond (any with a share of 0, terminating ones otherwise)
        it is looked at again after ``PODS_POLL`` (the returned seconds; None when none).
        Beyond Kueue v0.17.1, which holds no child Job to a share."""
        meta = job.get("metadata") or {}
        status = job.get("status") or {}
        if meta.get("deletionTimestamp") or not (
                allowed == 0 and (status.get("active") or status.get("terminating"))
                or status.get("terminating")):
            return None
        ns, uid = str(meta.get("namespace", "")), str(meta.get("uid", ""))
        cap = BEYOND_SHARE_GRACE_SECONDS if allowed == 0 else grace_allowed(
            self.ctx, parent_kind, ns, str(parent["metadata"].get("name", "")),
            str(parent["metadata"].get("uid", "")))
        grace: dict[str, int] = {}
        pods = []
        for pod in pods_in(self.ctx, ns):
            pmeta = pod.get("metadata") or {}
            ref = controller_ref(pmeta)
            if ref is None or ref.kind != "Job" or ref.uid != uid \
                    or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            killing = pmeta.get("deletionGracePeriodSeconds")
            if pmeta.get("deletionTimestamp") and not (isinstance(killing, int)
                                                       and killing > cap) \
                    or not pmeta.get("deletionTimestamp") and allowed > 0:
                continue
            pods.append(pod)
            grace[str(pmeta.get("uid", ""))] = cap
        deleted = await delete_pods(self.ctx, pods, grace)
        if deleted:
            self.ctx.recorder.emit(job, NORMAL, "DeletedPods",
                                   f"{len(deleted)} pod(s) beyond the {allowed} pod(s) of its "
                                   f"{parent_kind.kind}'s admission deleted with a grace "
                                   f"period of {cap} s")
        return PODS_POLL

    def _manages_unlabelled(self, kind: JobKind, obj: Obj, ns: str) -> bool:
        """Kueue ``manageJobsWithoutQueueName``: a job without a queue name is queued (its
        Workload waits for a LocalQueue) when the setting is on, its kind takes part
        (``manages_unlabelled`` and ``takes_unlabelled(obj)``), its
        namespace matches ``managedJobsNamespaceSelector`` and no other job kind controls it
        (Kueue's managed-ancestor rule)."""
        if not kind.manages_unlabelled or not kind.takes_unlabelled(obj):
            return False  # e.g. a Pod the webhook did not mark, or a pod group's member
        return manages_unlabelled_in(self.ctx, ns) \
            and not self.registry.controlled_by_a_kind(obj)

    def _owns(self, kind: JobKind, obj: Obj, ns: str, name: str, wl: Obj) -> bool:
        """True when ``wl`` is the Workload of ``kind``'s object ``ns/name`` (its controller
        ownerReference, or its group stamp, names this object and UID)."""
        owner = self.registry.owner_of(wl)
        if owner is None or owner.kind is not kind or owner.key != f"{ns}/{name}":
            return False
        uid = str((obj.get("metadata") or {}).get("uid", ""))
        return not owner.uid or owner.uid == uid

    def _admission_mismatch(self, kind: JobKind, obj: Obj, wl: Obj) -> str | None:
        """Why the object's pods no longer match its admitted Workload
        (``admission_mismatch``), or None. An object that cannot be read any more counts as
        not matching. The priority takes no part in it (Kueue ``EquivalentToWorkload``
        compares pod sets only): a priority class the Workload names but this cluster lacks
        (a MultiKueue copy whose class exists on the manager only) stands at the Workload's
        own ``spec.priority`` instead of making the object unreadable."""
        wpc, pc = _with_own_class(wl, *self._priority_maps())
        try:
            want = kind.desired(obj, priority_classes=wpc, pod_priority_classes=pc)
            have = workload_from_object(wl)
        except WorkloadSpecError as exc:
            return f"the {kind.kind} cannot be read: {exc}"
        if kind.is_suspended(obj) and not kind.is_started(obj) \
                and kind.partial_admission:
            # Not started yet: it matches the Workload's spec (a partial admission's count
            # is applied when it starts), as Kueue's EquivalentToWorkload for a suspended job.
            have = replace(have, admission=None)
        return admission_mismatch(want.pod_sets, have,
                                  fewer_ok=kind.fewer_pods_match)

    async def _start(self, kind: JobKind, obj: Obj, wl: Obj) -> None:
        ctx = self.ctx
        try:
            await kind.start(ctx, obj, wl)
        except StartError as exc:
            await self._put_wl_status(with_finished(wl, "FailedToStart", str(exc), ctx.clock()))
            ctx.recorder.emit(obj, WARNING, "FailedToStart", str(exc))
            ctx.wake()

    async def _sync_pods_ready(self, kind: JobKind, obj: Obj, wl: Obj) -> None:
        """waitForPodsReady: write the Workload's PodsReady condition from the object's pods
        (Kueue's job reconciler, ``generatePodsReadyCondition``; ``JobKind.pods_ready``)."""
        if not self.ctx.settings.wait_for_pods_ready.enable:
            return
        body, changed = with_pods_ready(wl, bool(kind.pods_ready(obj)), self.ctx.clock())
        if changed:
            await self._put_wl_status(body)

    async def _stop_mismatched(self, kind: JobKind, obj: Obj, wl: Obj,
                               why: str) -> float | None:
        """The object was changed after admission (a Job's ``spec.parallelism`` raised, say):
        stop it as Kueue does (``NoMatchingWorkload``), and once none of its pods is left
        delete the old Workload, whose quota then returns; the object is queued again with a
        new Workload for its new shape. The quota is held until the pods are gone."""
        ctx = self.ctx
        meta = wl["metadata"]
        if self._to_stop(kind, obj):
            obj = await kind.stop(ctx, obj, "No matching Workload; restoring pod templates "
                                            f"according to existent Workload ({why})")
            ctx.recorder.emit(wl, WARNING, "NoMatchingWorkload",
                              f"The {kind.kind} no longer matches its admission: {why}")
        if self._holds_pods(kind, obj, "its Workload is replaced"):
            return PODS_POLL
        try:
            await ctx.client.delete(WORKLOADS, meta["name"], meta["namespace"],
                                    uid=meta.get("uid"))
        except NotFound:
            pass
        ctx.recorder.emit(obj, NORMAL, "DeletedWorkload",
                          f"Deleted not matching Workload: {meta['namespace']}/{meta['name']}")
        ctx.wake()
        return 0.5  # the watch removes it; then a Workload for the new shape is created

    async def _gone(self, kind: JobKind, ns: str, name: str) -> float | None:
        """The object left the store (deleted, or no longer queued): delete the Workloads it
        controls once it is really gone (GET 404 or another uid), or no longer queued and
        stopped (suspended, no active pod: nothing holds the quota any more, and no event of
        it reaches pykueue again, so its Workload would keep the quota, even through a
        preemption, forever). One that runs unqueued (its label removed behind the webhook's
        back) keeps its Workload, which accounts for its pods; returns seconds to look
        again then."""
        keys = self.owners.workloads_of(f"{kind.key}:{ns}/{name}")
        if not keys:
            return None
        return await self._drop_workloads(kind, ns, name, keys, await self._live(kind, ns, name))

    async def _live(self, kind: JobKind, ns: str, name: str) -> Obj | None:
        """``kind``'s object ``ns/name`` read from the API (not the store, which may be behind),
        or None: gone, or a composed object (no resource of its own)."""
        if kind.resource is None:
            return None
        try:
            return await self.ctx.client.get(kind.resource, name, ns)
        except NotFound:
            return None

    async def _drop_workloads(self, kind: JobKind, ns: str, name: str, keys: set[str],
                              live: Obj | None) -> float | None:
        """``_gone``'s handling of Workloads ``keys`` of the object ``ns/name`` (``live``: the
        object of that name now, or None): each whose owner is not ``live`` (another uid) or
        is ``live`` stopped loses ``RESOURCE_IN_USE_FINALIZER`` once no pod of its owner holds
        resources (``_pods_still_hold``; at once with ``Immediately``) and is deleted (not
        when being deleted already: the garbage collector's); a Finished one loses it at
        once, its object running or not, as a queued object's (``_reconcile_queued``), so a
        deletion by hand completes (beyond Kueue v0.17.1, which ignores an object without a
        queue name until it is deleted). Kueue v0.17.1 the same for a job gone, and for a
        job of that name that exists (``ensureOneWorkload``: the Workloads listed by owner
        name that do not match lose the finalizer, then are deleted). Returns seconds to
        look again while pods hold."""
        again: float | None = None
        for key in keys:
            wl = self.ctx.store(WL).get(key)
            if wl is None:
                continue
            owner = self.registry.owner_of(wl)
            if is_finished(wl):
                # Finished, it holds no quota: the finalizer goes at once, whatever its object
                # does (one running unqueued keeps it as its record, below).
                await self._release_finalizer(wl)
            if owner is not None and self.ctx.settings.jobs.deleted_quota_release \
                    == "Immediately" and (live is None or owner.uid != live["metadata"].get(
                        "uid")):
                await self._release_finalizer(wl)  # Kueue v0.17.1: it goes with the job
            if live is not None and owner and owner.uid == live["metadata"].get("uid"):
                if not kind.is_suspended(live):
                    again = 30.0  # runs without its label: its Workload accounts for it
                    continue
                if self._pods_holding_quota(kind, live) > 0:
                    again = PODS_POLL  # stopped: its pods are going
                    continue
            elif owner is not None and pod_labels(kind)[0] and pods_of(
                    kind, self._pods(ns), {"metadata": {"name": name, "uid": owner.uid}},
                    ctx=self.ctx):
                again = PODS_POLL  # gone, its pods orphaned: they still hold the quota
                continue
            # The stores of Jobs and Workloads are separate watches: the object's deletion
            # may be seen before its Workload lost the owner reference (``kubectl delete
            # --cascade=orphan``: the garbage collector removes it first). An orphaned
            # Workload is not this object's to delete: the orphan rules finish it once its
            # pods are gone (``reconcile_workload``).
            if owner is None:
                continue
            try:
                fresh = await self.ctx.client.get(WORKLOADS, wl["metadata"]["name"], ns)
                now_owner = self.registry.owner_of(fresh)
                if now_owner is None or now_owner.uid != owner.uid:
                    continue
                if RESOURCE_IN_USE_FINALIZER in (fresh["metadata"].get("finalizers") or []):
                    # Kueue's: the finalizer goes with the owner; pykueue's
                    # (``WhenPodsGone``): once no pod of the owner holds resources, which
                    # the Workload object keeps accounting for meanwhile (a restart too).
                    if self._pods_still_hold(fresh, owner.uid):
                        again = PODS_POLL
                        continue
                    await self._release_finalizer(fresh)
                if fresh["metadata"].get("deletionTimestamp"):
                    continue  # the garbage collector's deletion, under way
                await self.ctx.client.delete(WORKLOADS, wl["metadata"]["name"], ns,
                                             uid=wl["metadata"].get("uid"))
            except NotFound:
                pass
            self.ctx.wake()
        return again

    @staticmethod
    def _prebuilt(obj: Obj) -> str | None:
        """The Workload ``obj`` adopts (label ``kueue.x-k8s.io/prebuilt-workload-name``, on
        the kinds whose webhook lets it through: those MultiKueue dispatches,
        ``adopts_prebuilt``), or None."""
        return ((obj.get("metadata") or {}).get("labels") or {}).get(PREBUILT_WORKLOAD_LABEL) \
            if adopts_prebuilt(obj) else None

    async def _adopt(self, kind: JobKind, obj: Obj, wl: Obj) -> Obj:
        """Make ``obj`` the controller of the ownerless Workload its prebuilt label names
        (Kueue ``EnsurePrebuiltWorkloadOwnership``), with label ``kueue.x-k8s.io/job-uid``."""
        meta = obj["metadata"]
        body = copy.deepcopy(wl)
        bmeta = body["metadata"]
        bmeta.setdefault("ownerReferences", []).append({
            "apiVersion": obj.get("apiVersion", "batch/v1"), "kind": kind.kind,
            "name": meta["name"], "uid": meta.get("uid", ""), "controller": True,
            "blockOwnerDeletion": True})
        bmeta.setdefault("labels", {})[JOB_UID_LABEL] = str(meta.get("uid", ""))
        # No other Job adopts it after this one (adoptable_copy), even once ownerless.
        bmeta.setdefault("annotations", {})[ADOPTED_BY_ANNOTATION] = str(meta.get("uid", ""))
        out = await self.ctx.client.replace(WORKLOADS, body)
        self.ctx.store(WL).put(out)
        return out

    async def _without_workload(self, kind: JobKind, obj: Obj) -> float | None:
        ctx = self.ctx
        if self._to_stop(kind, obj):
            # A prebuilt one too: its Workload deleted (the manager's clean-up of a copy a
            # tenant's own Job had adopted), it must not run on without an admission.
            await kind.stop(ctx, obj, "No matching Workload; restoring pod templates according "
                                      "to existent Workload")
            return None
        if self._prebuilt(obj):
            # Its prebuilt Workload is not there (yet): never create one. Its creation
            # queues this object again (``_enqueue_adopters``), so no look before that.
            return None
        if self._being_deleted(kind, obj):
            # Being deleted: no new Workload (Kueue v0.17.1 ReconcileGenericJob); one made
            # now would be the garbage collector's once the object is gone. Not a composed
            # object (a pod group: its first member's metadata; Kueue's Pod.Load drops a
            # group's finalizers only when none of its pods is left).
            return None
        left = self._pods_blocking_restart(kind, obj)
        if left > 0:
            # The pods of the stopped object, killed ones too (``pod_blocks_restart``): its
            # new Workload could be admitted and started while they are still there.
            ctx.recorder.emit(obj, NORMAL, "WaitingForPods",
                              f"{left} pod(s) of the {kind.kind} still run or are being "
                              "killed: its Workload is created once they are gone")
            return PODS_POLL
        meta = obj.get("metadata") or {}
        where = f"{kind.kind} {meta.get('namespace', '')}/{meta.get('name', '')}"
        if namespace_being_deleted(ctx, str(meta.get("namespace", ""))):
            # The API server would refuse the create (403 NamespaceTerminating) and the
            # object goes with its namespace: no Workload, no retry.
            log.debug("no Workload for %s: its namespace is being deleted", where)
            return None
        wpc, pc = self._priority_maps()
        try:
            body = kind.workload_object(obj, priority_classes=wpc, pod_priority_classes=pc)
        except WorkloadSpecError as exc:
            ctx.recorder.emit(obj, WARNING, "ErrWorkloadCompose", str(exc))
            return 30.0
        if ctx.settings.jobs.workload_finalizer:
            finalizers = body["metadata"].setdefault("finalizers", [])
            if RESOURCE_IN_USE_FINALIZER not in finalizers:
                finalizers.append(RESOURCE_IN_USE_FINALIZER)
        try:
            out = await ctx.client.create(WORKLOADS, body)
        except Conflict as exc:
            if exc.already_exists:
                return 0.5  # the watch has not shown it yet
            raise
        except Permanent as exc:
            if not namespace_terminating(exc):
                raise
            # Its namespace is being deleted (the Namespace store has not shown it yet): final
            # for this object, which goes with the namespace.
            log.info("no Workload for %s: its namespace is being deleted (%s)", where,
                     exc.message)
            return None
        ctx.store(WL).put(out)
        ctx.recorder.emit(obj, NORMAL, "CreatedWorkload",
                          f"Created Workload: {out['metadata']['namespace']}/"
                          f"{out['metadata']['name']}")
        return None

    @staticmethod
    def _being_deleted(kind: JobKind, obj: Obj) -> bool:
        """Whether ``obj`` (an object of its own, not a composed pod group) is being deleted
        (``deletionTimestamp``: held by a finalizer, a tenant's or the garbage collector's
        ``foregroundDeletion``): it never runs again."""
        return kind.resource is not None \
            and bool((obj.get("metadata") or {}).get("deletionTimestamp"))

    async def _never_to_start(self, kind: JobKind, obj: Obj, wl: Obj) -> float | None:
        """``obj`` is suspended and being deleted: it is not started (Kueue v0.17.1's
        reconciler does nothing for a job being deleted), and its Workload is not left to be
        admitted, which would hold quota for a job that never runs: a stop still to finish
        is finished (``_to_stop``: a start record, or a Job's running pods, which
        ``BatchJob.stop`` deletes), then the Workload is deleted, once none of the object's
        pods holds resources when it holds quota (which returns then). Pending, it leaves the
        queue at once. Event ``DeletedWorkload`` on the object. No Workload is created
        for it again (``_without_workload``); the garbage collector would delete this one only
        once the object is gone, which a finalizer may put off for long."""
        ctx = self.ctx
        meta = wl["metadata"]
        if self._to_stop(kind, obj):
            obj = await kind.stop(ctx, obj, f"The {kind.kind} is being deleted")
        if has_admission(wl) and self._holds_pods(kind, obj, "its Workload is deleted", wl):
            self._enqueue_children(obj)
            return PODS_POLL
        try:
            await ctx.client.delete(WORKLOADS, meta["name"], meta["namespace"],
                                    uid=meta.get("uid"))
        except NotFound:
            return None
        ctx.recorder.emit(obj, NORMAL, "DeletedWorkload",
                          f"Deleted Workload {meta['namespace']}/{meta['name']}: the "
                          f"{kind.kind} is being deleted, it is not started again")
        ctx.wake()
        return None

    async def _workload_deleted(self, kind: JobKind, obj: Obj, wl: Obj) -> float | None:
        """The object's Workload is being deleted (by hand; with the object, which a
        finalizer of its own keeps): the object is stopped (Kueue v0.17.1
        ``StopReasonWorkloadDeleted``, "Workload is deleted"), and ``RESOURCE_IN_USE_FINALIZER``
        goes once its pods no longer hold resources (``_holds_pods``; at once with
        ``jobs.deleted_quota_release: Immediately``, as Kueue), so that the quota stays held
        in the API meanwhile, through a restart of pykueue too. At once also for an object
        MultiKueue dispatched (``managedBy: kueue.x-k8s.io/multikueue``, as Kueue): its pods
        run on a worker, whose copy goes with this Workload, and its status's pod counts are
        mirrored from there, cleared by the MultiKueue controller only once the copies are
        removed (``MultiKueueController._workload_gone``). A Workload without it is
        gone for the API already: its event then queues the object again. (A Finished one
        never comes here: ``reconcile_object`` takes its finalizer off first.)"""
        ctx = self.ctx
        if self._to_stop(kind, obj):
            obj = await kind.stop(ctx, obj, "Workload is deleted")
        if RESOURCE_IN_USE_FINALIZER not in (wl["metadata"].get("finalizers") or []):
            return None
        if ctx.settings.jobs.deleted_quota_release == "WhenPodsGone" and has_admission(wl) \
                and not _dispatched_elsewhere(kind, obj) \
                and self._holds_pods(kind, obj, "its Workload's deletion completes", wl):
            return PODS_POLL
        await self._release_finalizer(wl)
        return None

    def _enqueue_children(self, obj: Obj) -> None:
        """Reconcile the stored objects ``obj`` controls (its uid in their controller
        ownerReference: a JobSet's Jobs, a RayJob's RayCluster), which the child rule stops
        (``_child``) when ``obj``'s operator, ignoring it once it is being deleted, does not:
        a change of ``obj`` is no event of theirs. Found through each store's controller-uid
        index (``_controlled_by``): called on every ``PODS_POLL`` while a stopped object's
        pods go, it costs its children, not the stores' size."""
        meta = obj.get("metadata") or {}
        ns, uid = str(meta.get("namespace", "")), str(meta.get("uid") or "")
        if not uid:
            return
        informers = self.ctx.informers.informers
        for kind in self.registry.kinds():
            if source_of(kind) in informers:
                handler = self.on_object(kind)
                for child in self._controlled_by(source_of(kind), ns, uid):
                    handler("SYNC", None, child)
        for key in CHILD_JOB_STORES:
            if key in informers:
                for job in self._controlled_by(key, ns, uid):
                    self.on_child_job("SYNC", None, job)
        for store in {getattr(k, "made_store", "") for k in self.registry.kinds()}:
            if store and store in informers:
                for made in self._controlled_by(store, ns, uid):
                    self.queue.add(f"{store}:{ns}/{made['metadata']['name']}")

    def _controlled_by(self, store_key: str, ns: str, uid: str) -> list[Obj]:
        """``objects_controlled_by`` in this reconciler's stores."""
        return objects_controlled_by(self.ctx, store_key, ns, uid)

    async def _stop_then_release(self, kind: JobKind, obj: Obj, wl: Obj) -> float | None:
        """The Workload is evicted while holding quota: stop the object, then release the
        quota once none of its pods holds resources (``_holds_pods``). Its children are
        reconciled on every pass (``_enqueue_children``): one being deleted, which the
        child rule stops (``_child``), gets no event of its own from the eviction."""
        ctx = self.ctx
        if self._to_stop(kind, obj):
            ev = next((c for c in (wl.get("status") or {}).get("conditions", [])
                       if c.get("type") == "Evicted"), {})
            obj = await kind.stop(ctx, obj, str(ev.get("message") or "Evicted"))
        self._enqueue_children(obj)
        if self._holds_pods(kind, obj, "its quota is released"):
            return PODS_POLL
        await self._put_wl_status(with_released(wl, ctx.clock()))
        ctx.wake()
        return None

    async def _sync_priority(self, kind: JobKind, obj: Obj, wl: Obj) -> Obj:
        """The Workload with its priority re-resolved when the object's
        ``kueue.x-k8s.io/priority-class`` label no longer names its ``priorityClassRef``
        (Kueue v0.17.1 ``UpdateWorkloadPriority``, pending or admitted: only a Workload
        without a class or with a WorkloadPriorityClass; one whose priority came from a pod
        PriorityClass keeps it). Event ``UpdatedWorkload``. Returns ``wl`` unchanged when
        nothing changed or the class cannot be read (event ``ErrWorkloadCompose``)."""
        label = str(((obj.get("metadata") or {}).get("labels") or {}).get(
            PRIORITY_CLASS_LABEL) or "")
        ref = (wl.get("spec") or {}).get("priorityClassRef")
        if ref is not None and (ref.get("group"), ref.get("kind")) != WPC_REF:
            return wl
        if label == str((ref or {}).get("name") or ""):
            return wl
        wpc, pc = self._priority_maps()
        try:
            spec = kind.workload_object(obj, priority_classes=wpc,
                                        pod_priority_classes=pc)["spec"]
        except WorkloadSpecError as exc:
            self.ctx.recorder.emit(obj, WARNING, "ErrWorkloadCompose", str(exc))
            return wl
        updated = copy.deepcopy(wl)
        for field in ("priorityClassRef", "priority"):
            if field in spec:
                updated["spec"][field] = spec[field]
            else:
                updated["spec"].pop(field, None)
        out = await self.ctx.client.replace(WORKLOADS, updated)
        self.ctx.store(WL).put(out)
        meta = wl["metadata"]
        self.ctx.recorder.emit(obj, NORMAL, "UpdatedWorkload",
                               f"Updated workload priority class: {meta['namespace']}/"
                               f"{meta['name']}")
        self.ctx.wake()
        return out

    async def _maybe_rebuild(self, kind: JobKind, obj: Obj, wl: Obj) -> None:
        """A suspended object whose shape no longer matches its pending Workload: update the
        Workload's spec (queueName, podSets, priority) in place (Kueue: a stale Workload
        without a quota reservation is updated, event ``UpdatedWorkload``)."""
        wpc, pc = self._priority_maps()
        try:
            want = kind.desired(obj, priority_classes=wpc, pod_priority_classes=pc)
            have = workload_from_object(wl)
        except WorkloadSpecError as exc:
            self.ctx.recorder.emit(obj, WARNING, "ErrWorkloadCompose", str(exc))
            return
        if (want.queue_name, want.priority, want.pod_sets) == \
                (have.queue_name, have.priority, have.pod_sets):
            return
        body = kind.workload_object(obj, priority_classes=wpc, pod_priority_classes=pc)
        updated = copy.deepcopy(wl)
        updated["spec"] = {**(wl.get("spec") or {}), **body["spec"]}
        if "priorityClassRef" not in body["spec"]:
            updated["spec"].pop("priorityClassRef", None)
            updated["spec"].pop("priority", None)
        try:
            out = await self.ctx.client.replace(WORKLOADS, updated)
        except Permanent:
            await self.ctx.client.delete(WORKLOADS, wl["metadata"]["name"],
                                         wl["metadata"]["namespace"],
                                         uid=wl["metadata"].get("uid"))
            self.ctx.store(WL).remove(f"{wl['metadata']['namespace']}/{wl['metadata']['name']}")
            return
        self.ctx.store(WL).put(out)
        self.ctx.recorder.emit(obj, NORMAL, "UpdatedWorkload",
                               f"Updated not matching Workload for suspended {kind.kind.lower()}: "
                               f"{wl['metadata']['namespace']}/{wl['metadata']['name']}")
        self.ctx.wake()

    # ----------------------------------------------------------------- Workload without owner

    async def reconcile_workload(self, ns: str, name: str) -> float | None:
        """A Workload no registered object controls: an eviction releases its quota at once
        (it has no pods to wait for); its creator marks it Finished. An orphaned one (module
        doc, ``_orphaned``) is Finished here once its object and its pods are gone."""
        wl = self.ctx.store(WL).get(f"{ns}/{name}")
        if wl is None or self.registry.owner_of(wl) is not None:
            return None
        if self.awaited and self._of_awaited_kind(wl):
            return None  # its object may still run: released once its kind is managed
        if is_finished(wl):
            await self._release_finalizer(wl)
            return None
        meta = wl.get("metadata") or {}
        if meta.get("deletionTimestamp") \
                and RESOURCE_IN_USE_FINALIZER in (meta.get("finalizers") or []):
            # Deleted by hand, or its owner gone: Kueue v0.17.1 drops the finalizer of a
            # Workload with no owner being deleted; pykueue (``WhenPodsGone``) once no pod of
            # the object it was made for holds resources.
            uid = controller_uid(wl) or str((meta.get("labels") or {}).get(JOB_UID_LABEL) or "")
            left = self._pods_still_hold(wl, uid)
            if left:
                self.ctx.recorder.emit(wl, NORMAL, "WaitingForPods",
                                       f"{left} pod(s) of its owner still run: its deletion "
                                       "completes once they are gone")
                return PODS_POLL
            await self._release_finalizer(wl)
            return None
        uid = self._orphaned(wl)
        if uid:
            return await self._finish_orphan(wl, uid)
        if has_admission(wl) and (is_evicted(wl) or not is_active(wl)):
            await self._put_wl_status(with_released(wl, self.ctx.clock()))
            self.ctx.wake()
        return None

    @staticmethod
    def _orphaned(wl: Obj) -> str:
        """The uid of the object a Workload was made for when that object went with its
        owner reference, else ``""``. Rule (Kueue v0.18 ``isOrphanedWorkload`` with
        ``FinishOrphanedWorkloads``; not in v0.17.1): no ownerReference at all, the label
        ``kueue.x-k8s.io/job-uid`` set, not being deleted. A Workload created without an
        owner and that label (Kueue's performance runner's) is not orphaned, nor is a
        MultiKueue copy (label ``kueue.x-k8s.io/multikueue-origin``) waiting for its Job:
        Kueue's manager copies every label of its Workload (``cloneForCreate``), so its
        ``job-uid`` names the manager's Job, which never exists on the worker (Kueue v0.17.1
        finishes only a Workload whose controller reference names a missing object). A copy
        a worker's Job adopted (annotation ``pykueue.dev/adopted-by``) and lost with its owner
        reference (``--cascade=orphan``) is orphaned from that Job's uid: it keeps its quota
        while that Job's pods run, then is Finished (``OwnerNotFound``), which the manager
        mirrors."""
        meta = wl.get("metadata") or {}
        labels = meta.get("labels") or {}
        if meta.get("ownerReferences") or meta.get("deletionTimestamp"):
            return ""
        if MULTIKUEUE_ORIGIN_LABEL in labels:
            return str((meta.get("annotations") or {}).get(ADOPTED_BY_ANNOTATION) or "")
        return str(labels.get(JOB_UID_LABEL) or "")

    def _object_with_uid(self, ns: str, uid: str) -> Obj | None:
        """The stored object of a registered kind in ``ns`` whose uid is ``uid``, or None."""
        for kind in self.registry.kinds():
            if kind.resource is None or source_of(kind) not in self.ctx.informers.informers:
                continue
            store = self.ctx.store(source_of(kind))
            store.index(UID_INDEX, lambda o: str((o.get("metadata") or {}).get("uid", "")))
            for obj in store.by_index(UID_INDEX, uid):
                if (obj.get("metadata") or {}).get("namespace") == ns:
                    return obj
        return None

    def _owner_orphans(self, wl: Obj, uid: str) -> bool:
        """Whether the pods of ``wl``'s owner (uid ``uid``) may have lost their controller
        reference with it: ``wl`` names no owner any more (``kubectl delete
        --cascade=orphan``: the garbage collector removed its reference), or the stored
        owner carries the garbage collector's ``orphan`` finalizer (it is removing them).
        Otherwise a pod of the owner keeps its reference until it is gone, and one without
        any is a tenant's (``pod_of``)."""
        if not wl["metadata"].get("ownerReferences"):
            return True
        obj = self._object_with_uid(str(wl["metadata"].get("namespace", "")), uid)
        return obj is not None and ORPHAN_FINALIZER in (obj["metadata"].get("finalizers") or [])

    def pods_holding(self, wl: Obj, uid: str) -> int | None:
        """How many pods of Workload ``wl``'s owner, the object with ``uid`` (gone, or
        going), still hold resources (``pod_holds_quota``: not Succeeded or Failed, being
        deleted or not; ``pods_of_workload``, and those of objects its operator made:
        ``made_pods``), from the Pod store; None when this process watches
        no pods. The orphaned Workload (``_finish_orphan``) and the deleted one whose quota
        the core holds (``InformerFeed``) both wait for this to reach 0."""
        if POD not in self.ctx.informers.informers:
            return None
        pods = self._pods(str(wl["metadata"].get("namespace", "")))
        # A plain Pod's Workload (the Pod its controller) or a pod group's (every member an
        # owner): its owners are the pods themselves, which carry no job's labels.
        owners = {str(ref.get("uid")) for ref in wl["metadata"].get("ownerReferences") or []
                  if isinstance(ref, dict) and ref.get("kind") == "Pod"
                  and ref.get("apiVersion") == "v1" and ref.get("uid")}
        if uid:
            owners.add(uid)
        own = [p for p in pods if str((p.get("metadata") or {}).get("uid", "")) in owners
               and pod_holds_quota(p)]
        if not uid:
            return len(own)
        return len(own) + len(pods_of_workload(self.registry.kinds(), pods, wl, uid,
                                                owner_gone=self._owner_orphans(wl, uid),
                                                ctx=self.ctx)) + sum(
            k.made_pods(self.ctx, wl, uid, pods) for k in self.registry.kinds())

    async def _finish_orphan(self, wl: Obj, uid: str) -> float | None:
        """Finish orphaned ``wl`` (reason ``OwnerNotFound``) once no object with ``uid``
        exists and none of its pods (``pods_of_workload``, or of objects its owner's
        operator made: ``made_pods``) holds resources; else look again in ``PODS_POLL``
        (Event ``WaitingForPods`` on the Workload while pods hold). An evicted or
        deactivated one has its pods deleted first (``_stop_orphaned_pods``)."""
        ns = str(wl["metadata"].get("namespace", ""))
        if self._object_with_uid(ns, uid) is not None:
            return PODS_POLL  # still there, being deleted (kueue#12820): not finished yet
        for k in self.registry.kinds():
            await k.stop_made(self.ctx, wl, uid)
        if is_evicted(wl) or not is_active(wl):
            await self._stop_orphaned_pods(wl, uid)
        left = self.pods_holding(wl, uid) or 0
        if left:
            # Its orphaned pods still run on the GPUs it accounts for.
            self.ctx.recorder.emit(wl, NORMAL, "WaitingForPods",
                                   f"{left} pod(s) of its owner, which is gone, still run or "
                                   "are being killed: Finished once they are gone")
            return PODS_POLL
        message = "The workload's owner no longer exists"
        await self._put_wl_status(with_finished(wl, OWNER_NOT_FOUND, message, self.ctx.clock()))
        self.ctx.recorder.emit(wl, NORMAL, "FinishedWorkload",
                               f"Workload '{ns}/{wl['metadata']['name']}' is declared "
                               f"finished: {message}")
        self.ctx.wake()
        return None

    def _others_pods(self, wl: Obj, pods: list[Mapping[str, Any]], *,
                     skip: frozenset[str] | set[str] = frozenset()) -> set[str]:
        """The uids of the pods among ``pods`` (``wl``'s namespace's) that a Workload of that
        namespace other than ``wl`` (and than those named in ``skip``) owns (a plain Pod's, a
        pod group's) or counts as its object's (``pods_of_workload``, from its owner's uid or
        its ``job-uid`` label)."""
        meta = wl.get("metadata") or {}
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        out: set[str] = set()
        for other in self.ctx.store(WL):
            ometa = other.get("metadata") or {}
            if ometa.get("namespace") != ns or ometa.get("name") == name \
                    or ometa.get("name") in skip:
                continue
            out |= {str(ref.get("uid")) for ref in ometa.get("ownerReferences") or []
                    if isinstance(ref, Mapping) and ref.get("kind") == "Pod"}
            ouid = controller_uid(other) or str((ometa.get("labels") or {}).get(JOB_UID_LABEL)
                                                or "")
            if ouid:
                out |= {str((p.get("metadata") or {}).get("uid", "")) for p in pods_of_workload(
                    self.registry.kinds(), pods, other, ouid,
                    owner_gone=self._owner_orphans(other, ouid), ctx=self.ctx)}
        return out

    async def _stop_orphaned_pods(self, wl: Obj, uid: str) -> int:
        """Delete the running pods (not being deleted) of orphaned ``wl``'s object with
        ``uid`` (``pods_of_workload``: with ``--cascade=orphan`` no controller is left to stop
        them), the Workload being evicted (preempted, say) or deactivated: they would
        otherwise hold its quota for as long as they run, out of reach of any preemption
        (break26 F3). Pods are deleted as a stopped job's are (``framework.delete_pods``, by
        uid; Event ``DeletedPods`` on the Workload); returns the count deleted. Beyond Kueue
        v0.17.1, which finishes only a Workload whose controller reference names a missing
        object (``FinishOrphanedWorkloads``): one left with no owner keeps its quota, evicted
        or not, and its pods run on unmanaged (v0.18 finishes it at once, its pods running
        on). Only a pod whose ``kueue.x-k8s.io/podset`` label names one of ``wl``'s podSets
        (every pod of its admitted run), and that no other Workload of the namespace owns or
        counts (``_others_pods``: the Kubeflow kinds share one name label, so an orphaned
        TFJob ``train``'s pods pass the PyTorchJob ``train``'s rule; a plain Pod carrying
        that label is its own Workload's), is deleted."""
        ns = str(wl["metadata"].get("namespace", ""))
        podsets = {str(ps.get("name")) for ps in (wl.get("spec") or {}).get("podSets") or []
                   if isinstance(ps, Mapping)}
        running = [p for p in pods_of_workload(self.registry.kinds(), self._pods(ns), wl, uid,
                                               owner_gone=self._owner_orphans(wl, uid),
                                               ctx=self.ctx)
                   if not (p.get("metadata") or {}).get("deletionTimestamp")
                   and ((p.get("metadata") or {}).get("labels") or {}).get(PODSET_LABEL)
                   in podsets]
        if running:
            others = self._others_pods(wl, running)
            running = [p for p in running
                       if str((p.get("metadata") or {}).get("uid", "")) not in others]
        deleted = len(await delete_pods(self.ctx, running))
        if deleted:
            why = "evicted" if is_evicted(wl) else "deactivated"
            self.ctx.recorder.emit(wl, NORMAL, "DeletedPods",
                                   f"{deleted} pod(s) of its owner, which is gone, deleted: "
                                   f"the Workload is {why}")
        return deleted

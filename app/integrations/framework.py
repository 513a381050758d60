"""The job framework (Kueue's ``jobframework``): one ``JobKind`` adapter per job kind, a
``Registry`` of them, and the rules every kind gets from the generic reconciler
(``app.integrations.reconciler``).

A kind says how to read its object (queue name, podSets, finished, active pods), how to name
and build its Workload, and how to start it with an admission and stop it again (Kueue's
GenericJob: ``IsSuspended``, ``Suspend``/``Stop``, ``RunWithPodSetsInfo``, ``Finished``,
``PodSets``, ``PodsReady``). Everything else is the reconciler's, for every kind alike: one
Workload per object, created once no pod runs; started only when admitted; stopped when it
is not; stopped and re-queued when its pods no longer match the admission
(``app.core.workload.admission_mismatch``, Kueue ``EquivalentToWorkload``); Finished when
the object finishes; its Workloads deleted when it goes.

A kind class derives from ``KindDefaults``, which declares every optional member with its
default, and defines every member ``JobKind`` declares, which have none; ``Registry.register``
refuses a kind lacking either (``missing_members``, ``missing_defaults``), so a kind that
forgot ``pods_ready`` fails at registration (and in the unit tests), not for a user.

Shared readers: ``label_queue_name`` (the queue-name label), ``job_finished`` (Kueue's
Finished reasons ``Succeeded``/``Failed`` from an object's conditions), ``MANAGED_JOBS`` (the
informer selector of queued objects).

Adding a kind = one folder under ``app/integrations/`` whose package exposes ``KINDS`` and
``ROUTES`` (its webhook endpoints), and one line in ``app/integrations/__init__.py:PACKAGES``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from app.core.workload import Workload
from app.kube.client import PODS
from app.kube.context import NS, POD, WL, in_namespace
from app.kube.errors import NotFound
from app.kube.events import NORMAL
from app.wire.fields import Obj
from app.wire.names import (
    ADOPTED_BY_ANNOTATION,
    GROUP_LABEL,
    JOB_NAME_LABELS,
    JOB_UID_LABELS,
    ORPHAN_FINALIZER,
    PODSET_LABEL,
    QUEUE_NAME_LABEL,
)
from app.wire.owners import OwnerRef, controller_of_object, controller_ref
from app.wire.workload import workload_name_for_owner
from app.wire.workload_status import parse_time

if TYPE_CHECKING:
    from app.kube.client import Resource
    from app.kube.context import Context



class StartError(Exception):
    """The admission cannot be applied to the object (e.g. a flavor's nodeLabels contradict
    the object's own nodeSelector): permanent, the Workload is Finished with reason
    ``FailedToStart`` (Kueue ``startJob``)."""


class KindDefaults:
    """Every optional member of a job kind, with its default: each kind class derives from
    it and overrides what applies to it (``JobKind`` declares the required members).

    For kinds made of other objects (Kueue's ComposableJob): ``source`` (the store whose
    events concern the kind; default its ``key``), ``object_key(obj)``, ``lookup(ctx, ns,
    name)``, ``group_workloads``, ``fewer_pods_match`` and ``trim``. For kinds whose operator
    labels its pods: ``pod_labels`` (and ``pods_make_pods``); under
    ``manageJobsWithoutQueueName``: ``manages_unlabelled``, ``unlabelled_selector``,
    ``takes_unlabelled``; and
    ``top_level``, ``partial_admission``, ``optional``, ``child_jobs`` (``child_job_pods``,
    ``child_job_template``, ``child_job_sized_by``, ``child_shares_changed``,
    ``child_object_errors``), ``rules``;
    for
    operators that need a nudge ``settle``; for objects an ancestor's operator makes
    ``hold_to_ancestor``, ``carries_admission`` and ``stop_orphaned``; for kinds whose
    operator makes other objects that run its pods ``made_pods`` and ``made_via``, and
    through batch Jobs ``runs_batch_jobs`` and ``runs_pods_through`` (each documented below).
    """

    # Its Workloads carry GROUP_WORKLOAD_ANNOTATION instead of a controller ownerReference.
    group_workloads: bool = False
    # Pods that finished or went count as still matching the admission; only more pods, or
    # other requests, do not.
    fewer_pods_match: bool = False
    # (name label, uid label) naming the object (and its uid, "" when the operator writes
    # none) on each of its pods (``pods_of``); ("", ""): its pods are unknown. With them the
    # reconciler counts the object's pods from the Pod store as well as from its status (its
    # quota is released only once they are gone or terminal) and finds the pods of a
    # Workload whose owner went (``pods_of_workload``: ``kubectl delete --cascade=orphan``).
    pod_labels: tuple[str, str] = ("", "")
    # Its operator does nothing for an object being deleted (no pod stopped on a suspension,
    # no status written): the reconciler then deletes the running pods the object controls
    # (``delete_own_pods``) and counts its pods from the Pod store alone (``pod_labels``).
    ignored_once_deleted: bool = False
    # Its operator keeps its status true while it is being deleted, until its own finalizer
    # goes, and that status covers pods the Pod store cannot name (a wrapped object's): the
    # release of its Workload then keeps counting the status too (``_pods_for_release``).
    status_kept_once_deleted: bool = False
    # Its pods make pods of their own, each controlled by the pod that made it (a Spark
    # driver's executors, Spark 4.0 ``ExecutorPodsAllocator``): ``pod_of`` counts such a pod
    # through that controller (``_made_by_own_pod``), never by its labels alone.
    pods_make_pods: bool = False
    # Its operator makes pods the object itself controls. False: every pod of it is
    # controlled by something its operator made (JobSet v0.11.1's by its Jobs, Trainer
    # v2.2.0's by its JobSet's Jobs), so a pod whose controller ownerReference names the
    # object itself is a tenant's (the API server takes that reference at create) and no
    # operator deletes it on a suspension: ``pod_of`` never counts it.
    controls_pods_directly: bool = True
    # Its operator makes batch Jobs that run (some of) its pods: a JobSet's Jobs, a
    # TrainJob's JobSet's, an AppWrapper's wrapped ones, an MPIJob's launcher. While such a
    # kind is served and the Pod store watched, every batch Job is in some store
    # (``Manager``), so a pod whose Job no store holds is one whose Job is gone (``pod_of``).
    runs_batch_jobs: bool = False
    # Its operator makes a deleted child Job again from the object's current template, and
    # one it resumes keeps the template it was made with but for its scheduling fields
    # (mpi-operator v0.8.0's launcher): the reconciler deletes such a Job made from an
    # earlier template that asks beyond the current one (``_remake_stale_child``).
    remakes_deleted_child_jobs: bool = False
    # Kueue ``TopLevelJob``: never a managed ancestor's child (the webhook decides that).
    top_level: bool = False
    # Kueue manageJobsWithoutQueueName: objects without a queue name are queued too when the
    # setting is on (and ``takes_unlabelled(obj)``); the informer then lists
    # ``unlabelled_selector`` (None: every object) instead of ``label_selector``. Every kind,
    # as in Kueue (the webhook side: ``WebhookEnv.unqueued_defaults``).
    manages_unlabelled: bool = True
    unlabelled_selector: str | None = None
    # Partial admission: start() applies an admitted count below the spec's (so an object not
    # yet started matches its Workload's spec, not the smaller admission). Kinds without it
    # must match the admission itself.
    partial_admission: bool = False
    # Its CRD (an operator's) may be absent: the manager then leaves the kind out at start-up.
    optional: bool = False
    # Its webhook rules (``app.integrations.crdrules.CrdRules``) when it has generic ones.
    rules: Any = None
    # Other objects the kind reads (store key, ``Resource``), every one watched while the kind
    # is served (a TrainJob's runtimes): ``lookup`` composes them into the object it returns.
    side_stores: tuple[tuple[str, Any], ...] = ()
    # The kind of the object, named as the kind's own, through which its operator makes its
    # batch Jobs (a TrainJob's JobSet); "": it controls them itself (``child_share``).
    child_via: str = ""
    # The side store (a key of ``side_stores``) holding every object of kind ``child_via``,
    # and that kind's registry key (``"jobset"``; nothing is held while it is not served):
    # such an object whose controller is the kind's queued object is reconciled as its
    # child (``JobReconciler.reconcile_made``), labelled or not.
    made_store: str = ""
    made_kind: str = ""

    @property
    def source(self) -> str:
        """The store whose events concern the kind: its own (``key``)."""
        return str(self.key)  # type: ignore[attr-defined]

    def object_key(self, obj: Mapping[str, Any]) -> str | None:
        """``ns/name`` of the kind's object that ``obj`` (from ``source``) belongs to, or None
        (not one of the kind's)."""
        meta = obj.get("metadata") or {}
        return f"{meta.get('namespace', '')}/{meta.get('name', '')}"

    def lookup(self, ctx: Context, ns: str, name: str) -> Obj | None:
        """The kind's object ``ns/name`` as stored (or composed), or None."""
        return ctx.store(self.key).get(f"{ns}/{name}")  # type: ignore[attr-defined, no-any-return]

    async def trim(self, ctx: Context, obj: Obj, workload: Mapping[str, Any] | None) -> Obj:
        """Delete the members the object may not have (e.g. a pod group's excess pods);
        returns the object without them."""
        return obj

    def child_jobs(self, obj: Mapping[str, Any]) -> dict[str, int]:
        """The batch Jobs the kind's operator makes for ``obj``, by name, with the pods each
        may run at once under ``obj``'s admission (``{}``: it makes none; a Job it controls
        then runs no pod). Raises ``WorkloadSpecError``."""
        return {}

    def child_shares_changed(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        """Whether an update of the object from ``old`` to ``new`` may change which of its
        batch Jobs get a share (``child_job_pods``) though its spec did not: its children
        are then reconciled again. Default False (the shares follow the spec only)."""
        return False

    def child_job_pods(self, obj: Mapping[str, Any], job: Mapping[str, Any]) -> int:
        """The pods batch Job ``job`` (made by the kind's operator for ``obj``) may run at
        once: its name's entry in ``child_jobs``, else 0. Raises ``WorkloadSpecError``."""
        return int(self.child_jobs(obj).get(str((job.get("metadata") or {}).get("name", "")), 0))

    def child_job_template(self, obj: Mapping[str, Any], job: Mapping[str, Any]) -> Any:
        """The pod template (a Job's ``spec.template``) the kind's operator makes batch Job
        ``job`` from for ``obj``, whose per-pod requests ``obj``'s admission covers; None
        (the default) when the kind does not give one: the Job's pods are then held to
        their count only (``child_job_pods``). Raises ``WorkloadSpecError``."""
        return None

    def child_job_sized_by(self, obj: Mapping[str, Any], job: Mapping[str, Any]) -> Any:
        """The pod template whose per-pod requests ``obj``'s admission gave batch Job ``job``
        its pods by (the podSet its share ``child_job_pods`` comes from: a JobSet's
        replicatedJob, an MPIJob's launcher), placement not implied; None when unknown (the
        Job's pods are then held to their count only). Default: ``child_job_template``'s.
        Raises ``WorkloadSpecError``."""
        return self.child_job_template(obj, job)

    def child_job_podset(self, obj: Mapping[str, Any], job: Mapping[str, Any]) -> str | None:
        """The name of ``obj``'s own podSet whose template ``child_job_sized_by`` gives for
        batch Job ``job`` (an MPIJob's ``launcher``, a RayJob's ``submitter``), None (the
        default) when the template is no single podSet's. With it, an admitted Workload's
        podSet of that name sizes the Job (``child_sized_by(workload=)``): what the admission
        covers, not the object as edited since. Raises ``WorkloadSpecError``."""
        return None

    def direct_podsets(self, obj: Mapping[str, Any]) -> frozenset[str] | None:
        """The podSets whose pods the kind's operator makes controlled by ``obj`` itself,
        each from its template with the ``kueue.x-k8s.io/podset`` label the start injects
        and as many as the podSet was admitted for (a PyTorchJob's replica types, a
        RayCluster's head and worker groups, a SparkApplication's driver); the Pod webhook
        refuses a pod created under an admitted ``obj`` of any other podSet, or one more
        than its podSet's admitted count (``PodCreateCheck``). ``frozenset()``: the
        operator makes no pod controlled by ``obj`` (``controls_pods_directly`` False: a
        JobSet's run under its Jobs). None (the default for a kind that controls pods):
        not known, only the pods' DRA claims are checked. Raises ``WorkloadSpecError``."""
        return None if self.controls_pods_directly else frozenset()

    def child_podsets(self, obj: Mapping[str, Any], kind: JobKind,
                      child: Mapping[str, Any]) -> frozenset[str] | None:
        """The podSets of ``obj``'s admission whose pods ``child`` (of ``kind``, an object
        ``obj``'s operator made: an AppWrapper's wrapped PyTorchJob) controls, each labelled
        with ``obj``'s podSet names; None (the default): ``obj`` names none, the child's own
        (``direct_podsets``) apply. Raises ``WorkloadSpecError``."""
        return None

    def made_podsets(self, obj: Mapping[str, Any]) -> frozenset[str]:
        """For a kind whose pods make pods (``pods_make_pods``): the podSets of ``obj``
        whose pods its own pods make, each controlled by the pod that made it (a
        SparkApplication's ``executor``: Spark 4.0's driver makes them); the Pod webhook
        refuses a pod made under such a pod of any other podSet, or one more than the
        podSet's admitted count over the object's made pods of every maker
        (``made_pods_of``, ``PodCreateCheck``). ``frozenset()`` (the default): none."""
        return frozenset()

    def child_object_errors(self, obj: Mapping[str, Any], kind: str,
                            child: Mapping[str, Any]) -> list[str]:
        """Errors for ``child``, an object of another kind (``kind``: ``"JobSet"``, ...)
        created or resumed under ``obj``, whose pods would run other than what ``obj``'s
        admission was sized for; ``[]`` (the default) to allow."""
        return []

    def takes_unlabelled(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` without a queue name is queued (``manages_unlabelled``)."""
        return True

    async def settle(self, ctx: Context, obj: Obj, pods: int) -> float | None:
        """Called after each pass over a started, admitted object (``pods``: the count of its
        pods still there, ``pod_blocks_restart``), for an operator that may need a nudge;
        returns seconds until the next look, or None (the default: no nudge)."""
        return None

    async def hold_to_ancestor(self, ctx: Context, obj: Obj, parent_kind: Any,
                               parent: Mapping[str, Any], workload: Mapping[str, Any]) -> None:
        """Set a running object an ancestor's operator made back to the ancestor's admitted
        ``workload`` (default: the kind has no such objects; nothing to do)."""
        return None

    def wrapped_replicas(self, obj: Mapping[str, Any], kind: str, name: str) -> int | None:
        """The pods (count) ``obj`` was sized for in the apps/v1 ``kind`` (Deployment,
        StatefulSet) named ``name`` that its operator makes from it, or None (the default:
        it wraps no such object)."""
        return None

    def withholds(self, ctx: Context, obj: Mapping[str, Any], parent_kind: Any,
                  parent: Mapping[str, Any]) -> str:
        """Why the pods of ``obj``, an object whose queued ancestor is ``parent`` (of
        ``parent_kind``), must not be placed even while the ancestor is admitted (the
        scheduler extender withholds every node), or ``""`` (the default: the ancestor's
        admission covers them)."""
        return ""

    def selects_own_pod(self, ctx: Context | None, pod: Mapping[str, Any], name: str) -> bool:
        """Whether ``pod``, whose controller ownerReference names the kind's object ``name``
        itself, is one its operator manages as that object's, and so deletes while the
        object is suspended (``pod_of`` counts no other: a tenant's pod the operator ignores,
        kept Pending by a nodeSelector no node has, would hold a preempted object's quota for
        good). ``ctx``: the stores (None: the object's spec is not read). Default True (the
        batch Job controller selects its pods by the ``controller-uid`` label that
        ``pod_labels`` requires, and on every sync of a suspended Job deletes the active
        pods it selects, Kubernetes v1.36 ``manageJob``: one made later too)."""
        return True

    def operator_stopped(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` (as stored) is in its operator's stopped state: suspended, every
        pod of it deleted by that operator, which deletes (and makes) none until the object
        is resumed, so a pod it still controls is one nothing but pykueue stops (the
        reconciler deletes it: ``stop_pods_left``). Its status says so, which a tenant
        allowed to write the kind's status subresource may forge, so no pod counts for less
        in that state (brk28). Default False (the operator deletes a suspended object's pods
        on every pass)."""
        return False

    def made_pods(self, ctx: Context, workload: Mapping[str, Any], uid: str,
                  pods: list[Mapping[str, Any]]) -> int:
        """Pods among ``pods`` (``workload``'s namespace's) still holding resources that
        objects the kind's operator made for its object with ``uid`` run, after that object
        went with its owner reference (``workload``: its orphaned Workload). Default: 0 (its
        pods carry its own name label: ``pod_labels``)."""
        return 0

    def pods_once_deleted(self, ctx: Context, workload: Mapping[str, Any], obj: Mapping[str, Any],
                          pods: list[Mapping[str, Any]]) -> int | None:
        """For a kind without ``pod_labels`` whose operator ignores an object being deleted
        (``ignored_once_deleted``: its status is never written again): the pods among
        ``pods`` holding resources that ``obj`` (being deleted; ``workload`` its Workload)
        runs through what its operator made, or None when unknown (its status then
        counts). Default: None."""
        return None

    async def stop_made(self, ctx: Context, workload: Mapping[str, Any], uid: str) -> None:
        """Stop what the kind's operator made for its object with ``uid``, which is gone
        (``workload``: its orphaned Workload), whatever labels those objects lost meanwhile.
        Default: nothing (the orphaned-child rule finds a kind's children by their marks)."""
        return None

    def runs_pods_through(self, ctx: Context, job: Mapping[str, Any] | None,
                          pod: Mapping[str, Any], name: str, uid: str, *,
                          owner_gone: bool = False) -> bool:
        """Whether the batch Job ``job`` (as stored; the controller of ``pod``, which carries
        the name label of the kind's object ``name``) was made by the kind's operator for that
        object, with ``uid``, to run its pods (an MPIJob's launcher), so ``pod`` is the
        object's (``pod_of``). ``job`` None: no store holds it, so it is gone, and ``pod`` is
        being deleted (``pod_of`` asks nothing else then): the answer comes from what ``pod``
        carries (its controller reference's name, its labels). ``owner_gone``: the object
        went with its ownerReference (``kubectl delete --cascade=orphan``), so ``job`` may
        have lost its controller reference too. Only ``job``'s name, namespace, uid and
        controller reference may be read: with the Job kind not served, its store keeps no
        more of a Job (``informers.identity_only``). Default: never (the operator runs the
        kind's pods itself)."""
        return False

    def leaves_orphans(self, ctx: Context, pod: Mapping[str, Any], name: str,
                       uid: str) -> bool:
        """Whether ``pod``, with no controller ownerReference, carrying the kind's name label
        (and uid label) of its stored object ``name`` with ``uid``, which lives, is one of
        that object's pods made through an owner its operator made and makes again (a
        JobSet's Job, an MPIJob's launcher Job, a Spark driver), so that deleting that owner
        with ``--cascade=orphan`` left it running, and which the object's operator neither
        adopts back nor manages by its labels alone (``stray_pod``: such a pod is the
        object's and pykueue deletes it). ``ctx``: the stores. Default: never (an operator
        that adopts by its selector, training-operator v1.9.3 ``ClaimPods``; one that manages
        its pods by label, KubeRay v1.6.0 and appwrapper v1.2.0; a kind whose pods it controls
        itself, orphaned only with the object: ``owner_gone``)."""
        return False

    def label_kin(self) -> tuple[Any, ...]:
        """The other kinds whose operators label their pods with the kind's name label
        (``pod_labels``): the Kubeflow kinds all write ``training.kubeflow.org/job-name``, so
        a PyTorchJob and a TFJob of one name in one namespace label their pods alike
        (``pods_once_ignored``). Default: none."""
        return ()

    def made_via(self, parent: Mapping[str, Any], ref: Mapping[str, Any]) -> bool:
        """Whether a batch Job whose controller ownerReference is ``ref`` was made for
        ``parent`` (the kind's object) through another object (``child_share``). Default: the
        object of kind ``child_via`` named as ``parent`` (the JobSet a TrainJob's operator
        makes, named as the TrainJob)."""
        return bool(self.child_via) and ref.get("kind") == self.child_via \
            and ref.get("name") == (parent.get("metadata") or {}).get("name")

    def carries_admission(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` was made from a started ancestor's template (it carries that
        admission's podSet label and scheduling, with no start record of its own). Default:
        never."""
        return False

    async def stop_orphaned(self, ctx: Context, obj: Obj, why: str) -> Obj:
        """Stop an object that ``carries_admission`` and whose ancestor is gone, taking what
        the admission injected out of it. Raises NotImplementedError for a kind whose
        ``carries_admission`` is never true (the default)."""
        raise NotImplementedError(f"{self.__class__.__name__} makes no orphaned children")


class JobKind(Protocol):
    """One job kind (Kueue's GenericJob): the required members. Object arguments are the API
    objects as dicts; the optional members and their defaults are ``KindDefaults``'.

    ``key``: informer/store key and work-queue prefix (``"job"``); ``resource``: its API
    resource (None: a kind made of other objects, such as a pod group, with no informer of
    its own); ``api_group``/``kind``: what a Workload's controller ownerReference names;
    ``label_selector``: which objects the informer lists (the managed ones). Every member
    declared below is required, with no default (``Registry.register`` refuses a kind lacking
    one: ``missing_members``).
    """

    key: str
    resource: Resource | None
    api_group: str
    kind: str
    label_selector: str | None

    def queue_name(self, obj: Mapping[str, Any]) -> str:
        """The LocalQueue name (``""``: not queued)."""
        ...

    def workload_name(self, obj: Mapping[str, Any]) -> str:
        """The deterministic name of the object's Workload (Kueue's naming)."""
        ...

    def workload_object(self, obj: Mapping[str, Any], *, priority_classes: Mapping[str, int],
                        pod_priority_classes: Mapping[str, int]) -> Obj:
        """The Workload to create (owner reference to ``obj``). Raises
        ``WorkloadSpecError`` naming the field that cannot be read."""
        ...

    def desired(self, obj: Mapping[str, Any], *, priority_classes: Mapping[str, int],
                pod_priority_classes: Mapping[str, int]) -> Workload:
        """The domain Workload the object needs now (podSets, queue, priority). Raises
        ``WorkloadSpecError``."""
        ...

    def is_suspended(self, obj: Mapping[str, Any]) -> bool:
        """True when the object makes no pods (its suspend lever is on)."""
        ...

    def is_started(self, obj: Mapping[str, Any]) -> bool:
        """True when pykueue started it with an admission (its start record is on it)."""
        ...

    def finished(self, obj: Mapping[str, Any]) -> tuple[bool, str, str]:
        """(finished, reason ``Succeeded``/``Failed``, message)."""
        ...

    def active_pods(self, obj: Mapping[str, Any]) -> int:
        """Pods of the object still holding resources."""
        ...

    def pods_ready(self, obj: Mapping[str, Any]) -> bool:
        """True when every pod of the admitted object is Ready (or succeeded): Kueue's
        ``PodsReady``, read for waitForPodsReady (the Workload's ``PodsReady`` condition)."""
        ...

    async def start(self, ctx: Context, obj: Obj, workload: Mapping[str, Any]) -> bool:
        """Unsuspend ``obj`` with ``workload``'s admission applied to every podSet (flavor
        nodeSelector/tolerations). Idempotent; returns True when it wrote. Raises
        ``StartError`` (permanent)."""
        ...

    async def stop(self, ctx: Context, obj: Obj, why: str) -> Obj:
        """Suspend ``obj`` and restore what the user wrote; returns the object as stored."""
        ...


GROUP_WORKLOAD_ANNOTATION = "kueue.x-k8s.io/is-group-workload"

# Jobs with a non-empty queue-name label: an empty value is no queue, for the webhook too
# (one rule everywhere; Kueue's QueueName "" is unmanaged). "k" selects the label's presence,
# "k!=" (empty value) its non-empty values; together, present and non-empty.
MANAGED_JOBS = f"{QUEUE_NAME_LABEL},{QUEUE_NAME_LABEL}!="


def label_queue_name(obj: Mapping[str, Any]) -> str:
    """The object's ``kueue.x-k8s.io/queue-name`` label (``""``: none)."""
    return str(((obj.get("metadata") or {}).get("labels") or {}).get(QUEUE_NAME_LABEL, ""))


def job_finished(job: Mapping[str, Any], *, complete: str = "Complete", kind: str = "Job"
                 ) -> tuple[bool, str, str]:
    """(finished, reason, message) from the object's ``complete`` / ``Failed`` conditions:
    reason ``Succeeded`` or ``Failed`` (Kueue's Finished reasons), message copied (else one
    naming ``kind``)."""
    for c in ((job.get("status") or {}).get("conditions")) or []:
        if c.get("status") != "True":
            continue
        if c.get("type") == complete:
            return True, "Succeeded", c.get("message") or f"{kind} finished successfully"
        if c.get("type") == "Failed":
            return True, "Failed", c.get("message") or c.get("reason") or f"{kind} failed"
    return False, "", ""



def controller_uid(obj: Mapping[str, Any]) -> str:
    """The uid ``obj``'s controller ownerReference names ("" when none): an ancestor read by
    name is ``obj``'s only when its uid is this one (a forged reference names another)."""
    ref = controller_of_object(obj)
    return ref.uid if ref is not None else ""


def controller_identity(obj: Mapping[str, Any]) -> tuple[str, str, str, str]:
    """(API group, kind, name, uid) of ``obj``'s controller ownerReference (empty strings
    when none): what the webhooks compare to tell whether an UPDATE gave ``obj`` another
    controller. The uid alone is not enough: a reference of a kind nobody maps
    (``AppWrapperX``) or of another name carrying an AppWrapper's uid, rewritten to name the
    AppWrapper by a second write, names a new controller under the same uid (brk32 H2). The
    version is left out: an operator may move its references to a newer version of its
    API."""
    ref = controller_of_object(obj)
    return (ref.group, ref.kind, ref.name, ref.uid) if ref is not None else ("", "", "", "")
def manages_unlabelled_in(ctx: Context, namespace: str) -> bool:
    """Whether objects without a queue name are queued in ``namespace``:
    ``jobs.manage_jobs_without_queue_name`` and ``managed_jobs_namespace_selector`` matches
    the Namespace's labels (Kueue ``manageJobsWithoutQueueName`` with
    ``managedJobsNamespaceSelector``). A Namespace the store has not shown yet is judged by
    the label every Namespace carries, ``kubernetes.io/metadata.name`` (as the webhooks do).
    Outside such namespaces an unlabelled object is no managed ancestor either (Kueue
    reconciles no job there: ``ManagedJobsNamespaceSelectorAlwaysRespected``)."""
    jobs = ctx.settings.jobs
    if not jobs.manage_jobs_without_queue_name:
        return False
    stored = ctx.store(NS).get(namespace)
    labels = (stored["metadata"].get("labels") or {}) if stored is not None \
        else {"kubernetes.io/metadata.name": namespace}
    return bool(jobs.namespace_managed(labels))


def namespace_being_deleted(ctx: Context, namespace: str) -> bool:
    """Whether the Namespace store shows ``namespace`` being deleted (``deletionTimestamp``
    or phase ``Terminating``): the API server refuses to create anything in it
    (``errors.namespace_terminating``), and what it holds is going. False when this process
    watches no Namespaces or has not seen this one."""
    if NS not in ctx.informers.informers:
        return False
    stored = ctx.store(NS).get(namespace)
    if stored is None:
        return False
    return bool((stored.get("metadata") or {}).get("deletionTimestamp")) \
        or (stored.get("status") or {}).get("phase") == "Terminating"


def stored_ancestor(ctx: Context, registry: Registry, obj: Mapping[str, Any]
                    ) -> tuple[JobKind, Mapping[str, Any]] | None:
    """``registry.managed_ancestor`` of ``obj`` read from the stores only (an ancestor they
    have not shown yet does not count), unlabelled ancestors counting where
    ``manages_unlabelled_in`` ``obj``'s namespace. An ancestor its kind's own store does not
    hold is read from any other store of its API group and kind (``stored_object``)."""
    return registry.managed_ancestor(
        obj, lambda kind, ns, name: stored_object(kind, ctx, ns, name),
        manage_unlabelled=manages_unlabelled_in(
            ctx, str((obj.get("metadata") or {}).get("namespace", ""))))


def stored_object(kind: JobKind, ctx: Context, ns: str, name: str) -> Obj | None:
    """``kind``'s object ``ns/name`` as its own store holds it (``lookup``), else as another
    store of the kind's API group and kind holds it (``InformerSet.keys_for``): the side
    store of every JobSet (``CHILD_JOBSETS``, watched while the JobSet kind is served)
    holds the unlabelled JobSet an AppWrapper wraps or a TrainJob's trainer made, which the
    JobSet kind's store (labelled ones only, by default) does not, so the Jobs of that
    JobSet find their queued ancestor (brk31 M3). None when no store holds it. The walk
    that reads it checks the uid its child's controller reference names."""
    found = lookup(kind, ctx, ns, name)
    informers = getattr(ctx, "informers", None)
    if found is not None or not hasattr(informers, "keys_for"):
        return found
    for key in informers.keys_for(kind.api_group, kind.kind):  # type: ignore[union-attr]
        if key != kind.key:
            found = ctx.store(key).get(f"{ns}/{name}")
            if found is not None:
                return found  # type: ignore[no-any-return]
    return None


def queued_top(ctx: Context, registry: Registry, kind: JobKind, obj: Mapping[str, Any]
               ) -> tuple[JobKind, Mapping[str, Any]] | None:
    """The queued object whose admission covers ``obj`` (of ``kind``), read from the stores:
    its top-most queued ancestor (``stored_ancestor``), else ``obj`` itself when it is
    queued (a queue name, or unlabelled where ``manages_unlabelled_in`` its namespace);
    None when nothing queues it."""
    top = stored_ancestor(ctx, registry, obj)
    if top is not None:
        return top
    ns = str((obj.get("metadata") or {}).get("namespace", ""))
    return (kind, obj) if kind.queue_name(obj) or manages_unlabelled_in(ctx, ns) else None


def podsets_under(kind: JobKind, obj: Mapping[str, Any],
                  top: tuple[JobKind, Mapping[str, Any]]) -> frozenset[str] | None:
    """The podSets of ``top``'s admission (the queued object covering ``obj``,
    ``queued_top``) whose pods ``kind``'s operator makes controlled by ``obj``:
    ``top``'s ``child_podsets`` for ``obj`` when it names them (an AppWrapper's wrapped
    PyTorchJob: the AppWrapper's podSet names, which its pods carry), else
    ``kind.direct_podsets(obj)``. Raises ``WorkloadSpecError``."""
    top_kind, top_obj = top
    if top_obj is not obj:
        sets = top_kind.child_podsets(top_obj, kind, obj)  # type: ignore[attr-defined]
        if sets is not None:
            return sets  # type: ignore[no-any-return]
    return kind.direct_podsets(obj)  # type: ignore[attr-defined, no-any-return]


def made_via_ancestor(ctx: Context, registry: Registry, obj: Mapping[str, Any]
                      ) -> tuple[JobKind, Mapping[str, Any]] | None:
    """The queued object whose operator makes ``obj``'s controller, read from the stores:
    a stored object, of a kind whose ``child_via`` is that controller's kind, named as the
    controller (a TrainJob for the JobSet the trainer makes, named as the TrainJob), with a
    queue name or where ``manages_unlabelled_in`` ``obj``'s namespace; else None. For a Job
    whose controller no store holds (an unlabelled JobSet is outside the JobSet informer),
    where ``stored_ancestor`` stops."""
    meta = obj.get("metadata") or {}
    ns = str(meta.get("namespace", ""))
    ref = controller_ref(meta)
    if ref is None:
        return None
    manage = manages_unlabelled_in(ctx, ns)
    for kind in registry.kinds():
        via = str(getattr(kind, "child_via", ""))
        if via and via == ref.kind:
            parent = lookup(kind, ctx, ns, ref.name)
            if parent is not None and (manage or kind.queue_name(parent)):
                return kind, parent
    return None


def child_share(parent_kind: JobKind, parent: Mapping[str, Any], job: Mapping[str, Any]) -> int:
    """Pods the batch Job ``job`` may run at once under its managed ancestor ``parent``'s
    admission: its share by ``parent_kind.child_job_pods`` (the Jobs the ancestor's
    operator makes, by name) when ``parent`` is its direct controller, else 0 (a Job hung
    under the ancestor, or under another of its objects, is in no podSet). Raises
    ``WorkloadSpecError`` when the ancestor cannot be read."""
    if not _made_for(parent_kind, parent, job):
        return 0
    return int(parent_kind.child_job_pods(parent, job))


def child_template(parent_kind: JobKind, parent: Mapping[str, Any], job: Mapping[str, Any]
                   ) -> Any:
    """The pod template batch Job ``job`` runs its pods from under its managed ancestor
    ``parent``'s admission (``parent_kind.child_job_template``, as ``child_share`` finds
    the share), None when none is known. Raises ``WorkloadSpecError``."""
    if not _made_for(parent_kind, parent, job):
        return None
    return parent_kind.child_job_template(parent, job)


def child_sized_by(parent_kind: JobKind, parent: Mapping[str, Any], job: Mapping[str, Any],
                   workload: Mapping[str, Any] | None = None) -> Any:
    """The pod template whose per-pod requests batch Job ``job``'s share of its managed
    ancestor ``parent``'s admission was sized by (``parent_kind.child_job_sized_by``, as
    ``child_share`` finds the share), None when none is known. With ``parent``'s admitted
    Workload ``workload``, the template of its podSet the Job is sized by
    (``child_job_podset``), when it has one: an MPIJob's launcher template lowered or
    raised after the admission then changes nothing until it is admitted again (brk34 L2).
    Raises ``WorkloadSpecError``."""
    if not _made_for(parent_kind, parent, job):
        return None
    name = parent_kind.child_job_podset(parent, job) if workload is not None else None
    if name:
        for ps in (workload or {}).get("spec", {}).get("podSets") or []:
            if isinstance(ps, Mapping) and ps.get("name") == name \
                    and isinstance(ps.get("template"), Mapping):
                return ps["template"]
    return parent_kind.child_job_sized_by(parent, job)


def _made_for(parent_kind: JobKind, parent: Mapping[str, Any], job: Mapping[str, Any]) -> bool:
    """``parent`` is ``job``'s direct controller, or ``job``'s controller was made for it."""
    meta = parent.get("metadata") or {}
    return controller_uid(job) == meta.get("uid") or _made_via(parent_kind, parent, job)


def _made_via(parent_kind: JobKind, parent: Mapping[str, Any], job: Mapping[str, Any]) -> bool:
    """True when ``job``'s controller is an object ``parent_kind.made_via`` says was made
    for ``parent`` (the JobSet a TrainJob's operator makes, an AppWrapper's JobSet)."""
    return any(
        isinstance(ref, Mapping) and ref.get("controller") is True
        and parent_kind.made_via(parent, ref)  # type: ignore[attr-defined]
        for ref in (job.get("metadata") or {}).get("ownerReferences") or [])


# How far up the controller ownerReferences an ancestor is looked for (Kueue's
# ``managedOwnersChainLimit``).
ANCESTOR_DEPTH = 10


def source_of(kind: JobKind) -> str:
    """The store whose events concern ``kind`` (``KindDefaults.source``)."""
    return str(kind.source)  # type: ignore[attr-defined]


def object_key(kind: JobKind, obj: Mapping[str, Any]) -> str | None:
    """``ns/name`` of ``kind``'s object that ``obj`` (from ``source_of(kind)``) belongs to."""
    return kind.object_key(obj)  # type: ignore[attr-defined, no-any-return]


def lookup(kind: JobKind, ctx: Context, ns: str, name: str) -> Obj | None:
    """``kind``'s object ``ns/name`` as stored (or composed), or None."""
    return kind.lookup(ctx, ns, name)  # type: ignore[attr-defined, no-any-return]


async def trim(kind: JobKind, ctx: Context, obj: Obj, workload: Mapping[str, Any] | None) -> Obj:
    """``kind.trim`` (``KindDefaults.trim``: nothing to delete)."""
    return await kind.trim(ctx, obj, workload)  # type: ignore[attr-defined, no-any-return]


TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def pod_holds_quota(pod: Mapping[str, Any]) -> bool:
    """True while ``pod`` (core/v1) may still hold its node's resources, for its Workload's
    quota: its phase is not ``Succeeded``/``Failed``. A pod being deleted holds while it runs
    out its termination grace period, and no longer once it is ``Succeeded`` or ``Failed``
    (killed), even while a finalizer keeps the object: Kueue's quota release rule
    (KEP-10076 "Quota Release Strategy", ``OnTerminal``: held until all pods physically
    reach ``Succeeded`` or ``Failed``), so that no finalizer a tenant puts on its pods keeps
    a deleted or evicted job's quota (borrowed quota included) held. Nor does a pod being
    deleted that no node was given (no ``spec.nodeName``): it never runs, as the API server
    refuses to bind a pod being deleted and kube-scheduler skips one, so a finalizer of the
    tenant's on a Pending pod holds no quota either (break26)."""
    if (pod.get("metadata") or {}).get("deletionTimestamp") \
            and not (pod.get("spec") or {}).get("nodeName"):
        return False
    return (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES


def pod_blocks_restart(pod: Mapping[str, Any]) -> bool:
    """True while ``pod`` (core/v1) keeps its stopped job from being started again: it holds
    resources (``pod_holds_quota``) or, whatever its phase, it is being deleted (a pod killed
    by a stop shows ``Failed`` until it is removed; started before, the job's operator counts
    that failure against the new run)."""
    return pod_holds_quota(pod) or bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def pod_labels(kind: JobKind) -> tuple[str, str]:
    """``kind.pod_labels`` (name label, uid label), or ``("", "")`` (its pods unknown)."""
    name, uid = kind.pod_labels  # type: ignore[attr-defined]
    return str(name), str(uid)


def _names_kind(ref: OwnerRef, kind: JobKind) -> bool:
    """Whether ownerReference ``ref`` names an object of ``kind`` (its kind and API group)."""
    return ref.kind == kind.kind and ref.group == kind.api_group


def _names_batch_job(ref: OwnerRef | None) -> bool:
    """Whether ownerReference ``ref`` names a batch/v1 Job (an operator's launcher, a
    JobSet's child)."""
    return ref is not None and ref.kind == "Job" and ref.api_version == "batch/v1"


def stored_controller(ctx: Context, obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The object ``obj``'s controller ownerReference names, as a store of ``ctx`` holds it
    (``obj``'s namespace, the reference's API group, kind, name and uid), or None: no store
    watching that kind holds it (not created yet, gone, or outside every informer's
    selector), or ``obj`` has no controller. The stores of that kind are found through the
    informers' index by API group and kind (``InformerSet.keys_for``), in the order they
    were added: a look costs the stores of that kind, not every store."""
    ref = controller_of_object(obj)
    if ref is None:
        return None
    ns = str((obj.get("metadata") or {}).get("namespace", ""))
    for key in ctx.informers.keys_for(ref.group, ref.kind):
        got = ctx.store(key).get(f"{ns}/{ref.name}")
        if got is not None and (got.get("metadata") or {}).get("uid") == ref.uid:
            return got  # type: ignore[no-any-return]
    return None


def controlled_by(obj: Mapping[str, Any] | None, kind: JobKind, name: str, uid: str, *,
                  owner_gone: bool = False) -> bool:
    """Whether ``obj``'s controller ownerReference names ``kind``'s object ``name`` with
    ``uid``; with ``owner_gone``, also when ``obj`` has no controller (the garbage collector
    removes the reference from what an object deleted with ``--cascade=orphan`` owned)."""
    if obj is None:
        return False
    ref = controller_of_object(obj)
    if ref is None:
        return owner_gone
    return _names_kind(ref, kind) and ref.name == name and ref.uid == uid


def pod_of(kind: JobKind, pod: Mapping[str, Any], name: str, uid: str, *,
           owner_gone: bool = False, ctx: Context | None = None) -> bool:
    """True when ``pod`` is one of the pods of ``kind``'s object ``name`` with ``uid``.

    Its name label must name the object. A kind whose operator writes a uid label (the batch
    Job's ``controller-uid``, JobSet's ``jobset-uid``) needs that label to name ``uid``: a pod
    without it is not the object's. The pod also needs a controller ownerReference leading
    back to the object: the object itself (its uid; only for a kind whose operator makes
    such pods, ``controls_pods_directly``, and one it deletes on a suspension,
    ``selects_own_pod``), or a batch Job run for it, read from
    ``ctx``'s batch Job stores, which hold every batch Job while a kind that runs pods
    through them is served (``KindDefaults.runs_batch_jobs``; ``Manager``), a Job labelled
    with an empty queue name included: a Job no store holds is gone (or ``ctx`` is None).
    Of a stored Job only its name, uid and controller are read (the store of every batch
    Job, ``OTHER_JOBS``, keeps no more: ``informers.identity_only``).
    The garbage collector deletes the pods of a gone Job after it, and a pod whose forged
    reference names no object, so such a pod does not run on for long. For a uid-labelled
    kind, a batch Job the object controls (a JobSet's child), or one no store holds. For
    another kind, one its operator made for the object (``runs_pods_through``: an MPIJob's
    launcher, controlled by the MPIJob), or one no store holds that its operator would have
    made (``runs_pods_through`` with no Job: after a background deletion the pods of a
    TrainJob's, an AppWrapper's or a launcher Job are marked by the collector after the Job
    went and run out their grace period, and still hold the quota; being deleted, only
    within the grace period its Workload allows, ``killed_in_grace``); any other batch Job
    is not the
    object's: a tenant's unqueued Job whose pods carry a job's name label would otherwise keep
    that job's evicted Workload holding its quota for as long as the tenant likes, and one
    the tenant deleted holds it only while its pods are killed.
    For a kind whose pods make pods (``pods_make_pods``: a SparkApplication's driver makes
    its executors), a pod whose controller is a core Pod counts through that pod
    (``_made_by_own_pod``).
    A pod whose controller is anything else (a tenant's own object) is not the object's,
    whatever labels it carries. A pod with no controller counts only when ``owner_gone``
    (``kubectl delete --cascade=orphan`` removed its ownerReference with the object) and
    its operator would have taken it (``selects_own_pod``): a pod a tenant creates with a
    job's name and uid labels (the uid is on its Workload's
    ``kueue.x-k8s.io/job-uid`` label) and no owner must not hold that job's quota once the
    job is deleted (the batch Job controller adopts such a pod while the Job exists and is
    not being deleted: it is then the Job's, by its ownerReference). Or, the object living,
    when it is a stray of it (``stray_pod``, with ``ctx``: an owner between them, which its
    operator makes again, deleted with ``--cascade=orphan``; brk28).
    """
    name_label, uid_label = pod_labels(kind)
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    if not name_label or labels.get(name_label) != name:
        return False
    if uid_label and labels.get(uid_label) != uid:
        return False
    ref = controller_ref(meta)
    if ref is None:
        # Orphaned, it must still be one its operator would have taken: the Kubeflow kinds
        # share one name label, and only the operator-name label tells their pods apart.
        # Or, its object living, a stray of it (an intermediate owner orphaned).
        return (owner_gone and kind.selects_own_pod(ctx, pod, name)  # type: ignore[attr-defined]
                ) or stray_pod(ctx, kind, pod, name, uid)
    if _names_kind(ref, kind):
        return ref.uid == uid and kind.controls_pods_directly \
            and kind.selects_own_pod(ctx, pod, name)  # type: ignore[attr-defined]
    if getattr(kind, "pods_make_pods", False) and ref.is_pod:
        return _made_by_own_pod(kind, pod, name, uid, owner_gone=owner_gone, ctx=ctx)
    if not _names_batch_job(ref):
        return False
    job = stored_controller(ctx, pod) if ctx is not None else None
    if job is None:
        # A Job no store holds is gone: the garbage collector deletes its pods (and a pod
        # whose forged reference names no object), so such a pod does not run on for long.
        # A uid-labelled kind's pods all run through batch Jobs it controls (a JobSet's),
        # and the uid label names the object's run; another kind's pod counts only for a
        # Job its operator would have made, and, being deleted, within the grace period
        # its Workload allows. Not yet being deleted counts too: a background deletion
        # removes the Job before the collector marks its pods, and a release in between
        # would be for good.
        if uid_label:
            return True
        if ctx is None or not kind.runs_pods_through(  # type: ignore[attr-defined]
                ctx, None, pod, name, uid, owner_gone=owner_gone):
            return False
        return not meta.get("deletionTimestamp") or killed_in_grace(ctx, kind, pod, name, uid)
    if uid_label:
        return controlled_by(job, kind, name, uid, owner_gone=owner_gone)
    return bool(kind.runs_pods_through(  # type: ignore[attr-defined]
        ctx, job, pod, name, uid, owner_gone=owner_gone))


DEFAULT_GRACE_SECONDS = 30  # core/v1 PodSpec terminationGracePeriodSeconds default


def killed_in_grace(ctx: Context, kind: JobKind, pod: Mapping[str, Any], name: str,
                     uid: str) -> bool:
    """Whether ``pod``, counted only while it is being deleted because what controlled it is
    gone, is being deleted with a grace period (``metadata.deletionGracePeriodSeconds``)
    no longer than the longest ``terminationGracePeriodSeconds`` among the podSet templates
    of the Workload of ``kind``'s object ``name`` with ``uid``, and never below
    ``DEFAULT_GRACE_SECONDS`` (a template without one, or no Workload stored): a tenant's
    pod with a grace period of years would otherwise hold that Workload's quota while it
    "stops" (brk27). A pod being deleted with no grace period recorded counts."""
    meta = pod.get("metadata") or {}
    if not meta.get("deletionTimestamp"):
        return False
    grace = meta.get("deletionGracePeriodSeconds")
    if not isinstance(grace, int):
        return True
    return grace <= grace_allowed(ctx, kind, str(meta.get("namespace", "")), name, uid)


def grace_allowed(ctx: Context, kind: JobKind, namespace: str, name: str, uid: str) -> int:
    """The longest termination grace period (seconds) the Workload of ``kind``'s object
    ``namespace/name`` with ``uid`` gives its pods: the largest
    ``terminationGracePeriodSeconds`` among its podSet templates, never below
    ``DEFAULT_GRACE_SECONDS`` (a template without one, or no Workload stored)."""
    wl = None
    if WL in ctx.informers.informers:
        owner = {"metadata": {"name": name, "uid": uid, "namespace": namespace}}
        wl = ctx.store(WL).get(f"{namespace}/{kind.workload_name(owner)}")
    longest = DEFAULT_GRACE_SECONDS
    for ps in ((wl or {}).get("spec") or {}).get("podSets") or []:
        spec = ((ps.get("template") or {}).get("spec") or {}) if isinstance(ps, Mapping) else {}
        tgps = spec.get("terminationGracePeriodSeconds")
        longest = max(longest, tgps if isinstance(tgps, int) else DEFAULT_GRACE_SECONDS)
    return longest


def adopted_by_job(ctx: Context, pod: Mapping[str, Any]) -> bool:
    """Whether the batch Job controller may take ``pod`` (no controller ownerReference) back:
    Kubernetes v1.36 (``getPodsForJob``, ``ClaimPods`` with ``canAdopt``) adopts a pod its
    selector takes (the Job's uid in ``batch.kubernetes.io/controller-uid``) while that Job
    exists and is not being deleted. So: ``pod`` carries a Job uid label and a Job of the
    name its job-name label gives, with that uid and no ``deletionTimestamp``, is in a
    store of ``ctx``; also True when that cannot be told (no store of batch Jobs watched;
    the manager watches every Job while the Pod store is and a kind running pods through
    Jobs is served), so that nothing a Job would adopt is taken for a stray. A Job being
    deleted (``--cascade=orphan``: the garbage collector removes the references while the
    ``orphan`` finalizer keeps it) or gone, or one made again under the name (another uid),
    adopts nothing. False for a pod without both labels (the Job controller writes both on
    every pod, and the owner-label webhook keeps them)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    juid = next((str(labels[k]) for k in JOB_UID_LABELS if labels.get(k)), "")
    jname = next((str(labels[k]) for k in JOB_NAME_LABELS if labels.get(k)), "")
    if not juid or not jname:
        return False
    keys = ctx.informers.keys_for("batch", "Job")
    if not keys:
        return True
    ns = str((pod.get("metadata") or {}).get("namespace", ""))
    for key in keys:
        job = ctx.store(key).get(f"{ns}/{jname}")
        jmeta = (job or {}).get("metadata") or {}
        if jmeta.get("uid") == juid:
            return not jmeta.get("deletionTimestamp")
    return False


def stray_pod(ctx: Context | None, kind: JobKind, pod: Mapping[str, Any], name: str,
              uid: str) -> bool:
    """Whether ``pod``, with no controller ownerReference, is a stray of ``kind``'s object
    ``name`` with ``uid`` (brk28): an owner between them that its operator makes (a JobSet's
    child Job, an MPIJob's launcher Job, a Spark driver) was deleted with
    ``--cascade=orphan`` while the object lives; the garbage collector removed ``pod``'s
    reference, the operator made the owner again, and the pod runs on beside its
    replacement, outside any admission. Such a pod counts for the object (``pod_of``), so
    a release waits for it, and the reconciler deletes it (``JobReconciler._delete_strays``).
    All of: it carries ``kueue.x-k8s.io/podset`` (it ran on an admission) and the kind's
    name label naming ``name`` (and uid label naming ``uid``, ``pod_labels``); ``kind``'s object
    ``name`` is stored with ``uid`` and is neither being deleted nor carrying the ``orphan``
    finalizer (then the object itself is going and its Workload is orphaned: ``owner_gone``);
    ``pod`` was created no earlier than that object (a pod of a predecessor of the name,
    deleted with ``--cascade=orphan``, is its orphaned Workload's); the kind says it is
    such a pod (``leaves_orphans``); no batch Job takes it back (``adopted_by_job``: the
    Job controller's adoption); no Workload owns it (``owned_by_workload``: a plain Pod's or
    a pod group's). A pod being deleted counts only within the grace period its
    Workload allows (``killed_in_grace``). Kueue v0.17.1 counts no pods and has the same
    gap; this is beyond it. False without ``ctx``."""
    if ctx is None:
        return False
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    name_label, uid_label = pod_labels(kind)
    if PODSET_LABEL not in labels or controller_ref(meta) is not None or not name_label \
            or labels.get(name_label) != name or (uid_label and labels.get(uid_label) != uid):
        return False
    obj = own_stored(ctx, kind, pod, name)
    ometa = (obj or {}).get("metadata") or {}
    if obj is None or ometa.get("uid") != uid or ometa.get("deletionTimestamp") \
            or ORPHAN_FINALIZER in (ometa.get("finalizers") or []):
        return False
    made, born = parse_time(ometa.get("creationTimestamp")), parse_time(
        meta.get("creationTimestamp"))
    if made is None or born is None or born < made:
        return False
    if not kind.leaves_orphans(ctx, pod, name, uid) or adopted_by_job(  # type: ignore[attr-defined]
            ctx, pod) or owned_by_workload(ctx, pod):
        return False
    return not meta.get("deletionTimestamp") or killed_in_grace(ctx, kind, pod, name, uid)


def owned_by_workload(ctx: Context, pod: Mapping[str, Any]) -> bool:
    """Whether a stored Workload lists ``pod`` among its ownerReferences (by uid): the
    Workload of a plain Pod (named as Kueue names it, ``workload_name_for_owner("Pod", ...)``)
    or of its pod group (named by the ``kueue.x-k8s.io/pod-group-name`` label). Such a pod is
    that Workload's, never another object's stray (brk29: a tenant's queued Pod labelled as a
    JobSet's would otherwise count for the JobSet, which does not delete it, and hold its
    evicted Workload's quota for as long as the tenant likes). False without the Workload
    store."""
    if WL not in ctx.informers.informers:
        return False
    meta = pod.get("metadata") or {}
    ns, name, uid = (str(meta.get(k) or "") for k in ("namespace", "name", "uid"))
    group = ((meta.get("labels") or {}).get(GROUP_LABEL))
    names = [workload_name_for_owner("Pod", "", name, uid)] + ([str(group)] if group else [])
    for wl_name in names:
        wl = ctx.store(WL).get(f"{ns}/{wl_name}")
        if wl is not None and any(
                isinstance(r, Mapping) and r.get("uid") == uid
                for r in (wl.get("metadata") or {}).get("ownerReferences") or []):
            return True
    return False


def own_stored(ctx: Context | None, kind: JobKind, pod: Mapping[str, Any],
               name: str) -> Mapping[str, Any] | None:
    """``kind``'s stored object ``name`` in ``pod``'s namespace, or None (not stored, the
    kind's store not watched, or no ``ctx``)."""
    if ctx is None or kind.key not in ctx.informers.informers:  # type: ignore[attr-defined]
        return None
    meta = pod.get("metadata") or {}
    return ctx.store(kind.key).get(  # type: ignore[attr-defined]
        f"{meta.get('namespace', '')}/{name}")


def _made_by_own_pod(kind: JobKind, pod: Mapping[str, Any], name: str, uid: str, *,
                     owner_gone: bool, ctx: Context | None) -> bool:
    """For a kind whose pods make pods (``pods_make_pods``): whether ``pod``, which carries
    the name label of ``kind``'s object ``name`` and whose controller ownerReference names a
    core Pod, was made by one of that object's own pods (a SparkApplication's executor, made
    and controlled by its driver: Spark 4.0 sets only that reference, spark-operator v2.5.0
    only the labels). The controller, read from ``ctx``'s Pod store, must itself be the
    object's pod by ``pod_of``'s rule (with ``owner_gone``), one hop only: a pod the object
    controls, never one made by another made pod (a tenant's chain of references), nor a pod
    of another object. A controller no store holds is gone (the garbage collector then
    deletes ``pod``, and Spark's driver deletes its executors as it stops): ``pod`` counts
    while it is being deleted, through a grace period its Workload allows
    (``killed_in_grace``; a pod whose reference names no pod
    at all is deleted by the collector too), and not before (one whose driver is not seen
    yet). Labels alone (``spark-app-selector``, ``spark-role``) prove nothing: a tenant's
    bare pod carrying them does not count. False without ``ctx`` or its Pod store."""
    if ctx is None or POD not in ctx.informers.informers:
        return False
    driver = stored_controller(ctx, pod)
    if driver is None:
        return killed_in_grace(ctx, kind, pod, name, uid)
    above = controller_of_object(driver)
    if above is not None and above.is_pod:
        return False
    return pod_of(kind, driver, name, uid, owner_gone=owner_gone, ctx=ctx)


def made_pods_of(ctx: Context, kind: JobKind, obj: Mapping[str, Any]) -> list[Obj]:
    """For a kind whose pods make pods (``pods_make_pods``): the pods of ``obj``'s namespace
    (``pods_in``) that carry its name label (``pod_labels``) and whose controller is a core
    Pod, not terminal (``pod_holds_quota``), whichever pod made them: a replaced driver's
    executors, deleted by the garbage collector and running out the grace period they were
    given, still run beside the new driver's and hold places of their podSet (brk36b B1).
    ``[]`` for a kind without a name label."""
    label = pod_labels(kind)[0]
    meta = obj.get("metadata") or {}
    name = str(meta.get("name", ""))
    if not label:
        return []
    out = []
    for p in pods_in(ctx, str(meta.get("namespace", ""))):
        pm = p.get("metadata") or {}
        ref = controller_ref(pm)
        if ((pm.get("labels") or {}).get(label) == name and ref is not None
                and ref.is_pod and pod_holds_quota(p)):
            out.append(p)
    return out


def pods_in(ctx: Context, namespace: str) -> list[Obj]:
    """The pods of ``namespace`` from the Pod store through its namespace index
    (``in_namespace``: the cost of the answer, not of the store), or ``[]`` when this
    process watches no pods (then only the objects' status counts)."""
    return in_namespace(ctx, POD, namespace)


def pods_of(kind: JobKind, pods: Iterable[Mapping[str, Any]],
            obj: Mapping[str, Any], *, owner_gone: bool = False,
            counts: Callable[[Mapping[str, Any]], bool] = pod_holds_quota,
            ctx: Context | None = None) -> list[Mapping[str, Any]]:
    """The pods among ``pods`` (one namespace's) of ``kind``'s object ``obj`` that ``counts``
    (default ``pod_holds_quota``; ``pod_blocks_restart`` for the restart gate); ``[]`` for a
    kind without ``pod_labels``. ``owner_gone`` and ``ctx`` (the stores a batch Job
    controlling a pod is read from): as ``pod_of``'s."""
    meta = obj.get("metadata") or {}
    name, uid = str(meta.get("name", "")), str(meta.get("uid", ""))
    return [p for p in pods if pod_of(kind, p, name, uid, owner_gone=owner_gone, ctx=ctx)
            and counts(p)]


def _kins_pod(ctx: Context | None, kind: JobKind, pod: Mapping[str, Any], name: str) -> bool:
    """Whether ``pod`` is, by its own kind's rule (``pod_of``), a pod of the stored object
    ``name`` of a kind labelling its pods as ``kind`` does (``label_kin``): a TFJob's pods
    carry the name label of the PyTorchJob of the same name."""
    if ctx is None:
        return False
    ns = str((pod.get("metadata") or {}).get("namespace", ""))
    for other in kind.label_kin():  # type: ignore[attr-defined]
        if other.resource is None or source_of(other) not in ctx.informers.informers:
            continue
        live = lookup(other, ctx, ns, name)
        if live is not None and pod_of(other, pod, name, str(
                (live.get("metadata") or {}).get("uid", "")), ctx=ctx):
            return True
    return False


def pods_once_ignored(kind: JobKind, pods: Iterable[Mapping[str, Any]],
                      obj: Mapping[str, Any], *,
                      counts: Callable[[Mapping[str, Any]], bool] = pod_blocks_restart,
                      ctx: Context | None = None) -> list[Mapping[str, Any]]:
    """The pods among ``pods`` (``obj``'s namespace's) that ``counts`` (default
    ``pod_blocks_restart``: still there, even killed) that ran on ``obj``'s admission,
    ``obj`` being deleted and its operator ignoring it (``ignored_once_deleted``: it adopts
    no pod back): ``pods_of``'s, and those with ``obj``'s
    name label (and uid label, where the kind has one) whose controller ownerReference a
    tenant removed, or replaced (the pod webhook lets a pod without one get any) on a pod
    that carries the admission's ``kueue.x-k8s.io/podset`` label; never another object's of
    the same kind (another uid), nor, with ``ctx`` (the stores), one that is by its own
    kind's rule the pod of a stored object of a kind labelling its pods alike
    (``label_kin``: the TFJob of the PyTorchJob's name, an MPIJob's launcher). A pod taken
    only by those last two clauses (no controller, or another's) counts only when it was
    created no later than ``obj``'s deletion: the operator makes no pod for an object it
    ignores, and a pod the tenant moved keeps its creation time, while a tenant's
    ReplicaSet or Job stamping out pods with ``obj``'s labels would otherwise keep ``obj``'s
    quota for good (each pod deleted, the next one made at once; break26)."""
    name_label, uid_label = pod_labels(kind)
    meta = obj.get("metadata") or {}
    name, uid = str(meta.get("name", "")), str(meta.get("uid") or "")
    deleted_at = parse_time(meta.get("deletionTimestamp"))
    out = []
    for p in pods:
        pmeta = p.get("metadata") or {}
        labels = pmeta.get("labels") or {}
        if not name_label or labels.get(name_label) != name or not counts(p) \
                or (uid_label and labels.get(uid_label) != uid):
            continue
        if pod_of(kind, p, name, uid, ctx=ctx):
            out.append(p)
            continue
        created = parse_time(pmeta.get("creationTimestamp"))
        if deleted_at is not None and created is not None and created > deleted_at:
            continue
        ref = controller_of_object(p)
        if pod_of(kind, p, name, uid, owner_gone=True, ctx=ctx) or (
                PODSET_LABEL in labels and ref is not None
                and not _names_kind(ref, kind) and not _kins_pod(ctx, kind, p, name)):
            out.append(p)
    return out



def own_running_pods(kind: JobKind, pods: Iterable[Mapping[str, Any]],
                     obj: Mapping[str, Any], *, ctx: Context | None = None
                     ) -> list[Mapping[str, Any]]:
    """The pods of ``obj`` (being deleted, its operator ignoring it) that only that operator
    would delete: ``pods_once_ignored``'s not being deleted, but for those a child batch Job
    of ``obj`` runs, as a store of ``ctx`` holds it (a JobSet's pods, an MPIJob's launcher:
    a Job ``obj`` controls, or one its operator made for it, ``runs_pods_through``), which
    the child's own rules stop (``JobReconciler._child``). A pod a tenant gave to a batch Job
    of its own (one a finalizer keeps being deleted, so the Job controller neither deletes
    nor releases it) is deleted, and so is one whose Job no store holds (a Job that is gone,
    or the batch Job kind not served and no store of every batch Job, ``OTHER_JOBS``,
    watched): the pod carries
    ``obj``'s name and podSet labels and is no stored kin's (``pods_once_ignored``), so it
    counts for ``obj``'s quota, and left running it would hold that quota for good."""
    meta = obj.get("metadata") or {}
    name, uid = str(meta.get("name", "")), str(meta.get("uid") or "")
    out = []
    for p in pods_once_ignored(kind, pods, obj, counts=pod_holds_quota, ctx=ctx):
        if (p.get("metadata") or {}).get("deletionTimestamp"):
            continue
        job = stored_controller(ctx, p) \
            if ctx is not None and _names_batch_job(controller_of_object(p)) else None
        if job is not None and (
                controlled_by(job, kind, name, uid)
                or kind.runs_pods_through(ctx, job, p, name, uid)):  # type: ignore[attr-defined]
            continue
        out.append(p)
    return out


async def delete_own_pods(ctx: Context, kind: JobKind, obj: Mapping[str, Any], why: str) -> int:
    """Delete the running pods ``obj`` (being deleted) controls itself (``own_running_pods``):
    the operators of the kinds with such pods (training-operator v1.9.3, mpi-operator v0.8.0,
    KubeRay v1.6.0's RayCluster) do nothing for an object being deleted, so suspending it
    kills none, and one a finalizer keeps (a tenant's own) would run on through a preemption,
    an eviction or a deactivation, its Workload holding the quota. One Normal Event
    ``DeletedPods`` on ``obj``; returns the count deleted."""
    ns = str((obj.get("metadata") or {}).get("namespace", ""))
    deleted = len(await delete_pods(ctx, own_running_pods(kind, pods_in(ctx, ns), obj,
                                                         ctx=ctx)))
    if deleted:
        ctx.recorder.emit(obj, NORMAL, "DeletedPods",
                          f"{deleted} pod(s) deleted: the {kind.kind} is being deleted, so its "
                          f"operator does not stop them ({why})")
    return deleted


def pods_left(ctx: Context, kind: JobKind, obj: Mapping[str, Any]
              ) -> list[tuple[Mapping[str, Any], int]]:
    """The pods ``obj`` (in its operator's stopped state, ``operator_stopped``) controls
    itself that pykueue must delete, each with the grace period (seconds) to delete it with:
    those of ``pods_of`` (holding resources, ``pod_holds_quota``) whose controller
    ownerReference names ``obj``, not being deleted, or being deleted with a grace period
    beyond what its Workload allows (``grace_allowed``; a second DELETE with a shorter one
    shortens it, so a tenant's pod cannot run for years as it "stops"). The grace: the pod's
    own ``terminationGracePeriodSeconds`` (default ``DEFAULT_GRACE_SECONDS``), capped so.
    Pods another object controls (an AppWrapper's wrapped Job's) are left to their own
    rules."""
    meta = obj.get("metadata") or {}
    ns, name, uid = (str(meta.get(k) or "") for k in ("namespace", "name", "uid"))
    cap = grace_allowed(ctx, kind, ns, name, uid)
    out = []
    for pod in pods_of(kind, pods_in(ctx, ns), obj, ctx=ctx):
        pmeta = pod.get("metadata") or {}
        ref = controller_ref(pmeta)
        if ref is None or not _names_kind(ref, kind) or ref.uid != uid:
            continue
        killing = pmeta.get("deletionGracePeriodSeconds")
        if pmeta.get("deletionTimestamp") and (not isinstance(killing, int) or killing <= cap):
            continue
        own = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
        out.append((pod, min(own if isinstance(own, int) else DEFAULT_GRACE_SECONDS, cap)))
    return out


async def stop_pods_left(ctx: Context, kind: JobKind, obj: Mapping[str, Any]) -> int:
    """Delete the pods ``obj``, in its operator's stopped state (``operator_stopped``),
    still controls (``pods_left``: with its uid as precondition and the grace period given
    there; a pod already gone skipped). That state means its operator deleted every pod of
    it and deletes none until it is resumed (KubeRay v1.6.0's ``RayClusterSuspended``,
    appwrapper v1.2.0's phase ``Suspended``), so such a pod is a tenant's made afterwards
    (kept Pending, it would hold an evicted Workload's quota for good) or one running under
    a status the tenant forged (it would run on uncounted once the quota went): the pods
    count as in any other state until they are gone (brk28). Beyond Kueue v0.17.1, which
    counts no pods of these kinds (it releases once the status says they are inactive).
    One Normal Event ``DeletedPods`` on ``obj``; returns the count deleted."""
    left = pods_left(ctx, kind, obj)
    deleted = len(await delete_pods(ctx, [pod for pod, _ in left], grace={
        str((pod.get("metadata") or {}).get("uid", "")): g for pod, g in left}))
    if deleted:
        ctx.recorder.emit(obj, NORMAL, "DeletedPods",
                          f"{deleted} pod(s) deleted: the {kind.kind} is stopped, so its "
                          "operator deletes no pod of it until it is resumed")
    return deleted


_Pod = TypeVar("_Pod", bound=Mapping[str, Any])


async def delete_pods(ctx: Context, pods: Iterable[_Pod],
                      grace: Mapping[str, int] | None = None) -> list[_Pod]:
    """Delete each of ``pods`` (with its uid as precondition: a pod re-created under the name
    is not touched), with the grace period (seconds) ``grace`` gives its uid, else its own;
    returns those deleted, a pod already gone (NotFound) skipped."""
    deleted: list[_Pod] = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        seconds = (grace or {}).get(str(meta.get("uid", "")))
        extra = {} if seconds is None else {"grace_period_seconds": seconds}
        try:
            await ctx.client.delete(PODS, meta["name"], meta["namespace"], uid=meta.get("uid"),
                                    **extra)
        except NotFound:
            continue
        deleted.append(pod)
    return deleted


def pods_of_workload(kinds: Iterable[JobKind], pods: Iterable[Mapping[str, Any]],
                     workload: Mapping[str, Any], uid: str, *, owner_gone: bool = True,
                     ctx: Context | None = None) -> list[Mapping[str, Any]]:
    """The pods among ``pods`` (the Workload's namespace's) holding quota (``pod_holds_quota``)
    of the object with ``uid`` whose Workload is ``workload``, of whichever kind in ``kinds``: a
    pod's name label names an object of that kind whose Workload name (Kueue's, a hash of
    kind, name and uid) is ``workload``'s. For a Workload whose owner went with its owner
    reference (``kubectl delete --cascade=orphan``), so only its uid is known. A MultiKueue
    copy adopted by that object (annotation ``pykueue.dev/adopted-by: <uid>``) is named after
    the manager's object, not this one: its pods are those of the object with ``uid``.
    ``owner_gone``: the object went with its owner reference, so a pod without a controller
    counts (``pod_of``); False for a Workload that still names its owner (deleted in the
    background or foreground: its pods keep their ownerReferences until they are gone).
    ``ctx``: the stores a batch Job controlling a pod is read from (``pod_of``)."""
    meta = workload.get("metadata") or {}
    wl_name, ns = str(meta.get("name", "")), str(meta.get("namespace", ""))
    adopted = (meta.get("annotations") or {}).get(ADOPTED_BY_ANNOTATION) == uid
    labelled = [(k, pod_labels(k)[0]) for k in kinds if pod_labels(k)[0]]
    out = []
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        for kind, label in labelled:
            name = labels.get(label)
            if name and (adopted or kind.workload_name({"metadata": {
                    "name": name, "uid": uid, "namespace": ns}}) == wl_name) \
                    and pod_of(kind, pod, name, uid, owner_gone=owner_gone, ctx=ctx):
                if pod_holds_quota(pod):
                    out.append(pod)
                break
    return out


@dataclass(frozen=True, slots=True)
class Owner:
    """The object of a registered kind that controls a Workload."""

    kind: JobKind
    namespace: str
    name: str
    uid: str

    @property
    def key(self) -> str:
        """``namespace/name`` of the object."""
        return f"{self.namespace}/{self.name}"


def _members(cls: type) -> frozenset[str]:
    return frozenset(n for n in (*cls.__annotations__, *vars(cls)) if not n.startswith("_"))


def required_members() -> frozenset[str]:
    """The attributes and methods ``JobKind`` declares, which every kind must define itself:
    none has a default (a kind without ``pods_ready`` would otherwise count as always ready
    and never be timed out by waitForPodsReady)."""
    return _members(JobKind)


def optional_members() -> frozenset[str]:
    """The members ``KindDefaults`` declares with their defaults."""
    return _members(KindDefaults)


def _lacking(kind: object, cls: type, names: frozenset[str]) -> list[str]:
    methods = {n for n, v in vars(cls).items() if callable(v)}
    return sorted(n for n in names
                  if not hasattr(kind, n) or (n in methods and not callable(getattr(kind, n))))


def missing_members(kind: object) -> list[str]:
    """The ``required_members`` that ``kind`` lacks (sorted; methods must be callable)."""
    return _lacking(kind, JobKind, required_members())


def missing_defaults(kind: object) -> list[str]:
    """The ``optional_members`` that ``kind`` lacks (sorted): a kind not built on
    ``KindDefaults``."""
    return _lacking(kind, KindDefaults, optional_members())


class Registry:
    """The registered ``JobKind``s, found by key or by a Workload's controller ownerReference."""

    def __init__(self, kinds: Iterable[JobKind] = ()) -> None:
        self._by_key: dict[str, JobKind] = {}
        self._by_gk: dict[tuple[str, str], JobKind] = {}
        for k in kinds:
            self.register(k)

    def register(self, kind: JobKind) -> None:
        """Add ``kind``. Raises ``TypeError`` naming what it lacks of ``JobKind``
        (``missing_members``) or of ``KindDefaults`` (``missing_defaults``), ``ValueError``
        when its key or group/kind is taken."""
        missing = missing_members(kind)
        if missing:
            raise TypeError(f"job kind {getattr(kind, 'key', kind)!r} does not define "
                            f"{', '.join(missing)} (JobKind)")
        missing = missing_defaults(kind)
        if missing:
            raise TypeError(f"job kind {kind.key!r} lacks {', '.join(missing)}: derive it "
                            "from KindDefaults, which gives every optional member its default")
        if kind.key in self._by_key or (kind.api_group, kind.kind) in self._by_gk:
            raise ValueError(f"job kind {kind.key} ({kind.api_group}/{kind.kind}) is "
                             "registered twice")
        self._by_key[kind.key] = kind
        self._by_gk[(kind.api_group, kind.kind)] = kind

    def kinds(self) -> tuple[JobKind, ...]:
        return tuple(self._by_key.values())

    def get(self, key: str) -> JobKind | None:
        return self._by_key.get(key)

    def kind_for(self, api_group: str, kind: str) -> JobKind | None:
        """The registered kind of objects ``api_group``/``kind``, or None."""
        return self._by_gk.get((api_group, kind))

    def kind_of_controller(self, obj: Mapping[str, Any]) -> tuple[JobKind, str] | None:
        """(registered kind, name) of ``obj``'s controller ownerReference when it names a
        registered kind, else None (Kueue ``getJobTypeForOwner``: enabled kinds only)."""
        ref = controller_of_object(obj)
        kind = self._by_gk.get((ref.group, ref.kind)) if ref is not None else None
        return (kind, ref.name) if kind is not None and ref is not None else None

    def managed_ancestor(self, obj: Mapping[str, Any],
                         get: Callable[[JobKind, str, str], Mapping[str, Any] | None], *,
                         manage_unlabelled: bool = False
                         ) -> tuple[JobKind, Mapping[str, Any]] | None:
        """The top-most ancestor of ``obj`` that queues it, as (its kind, the object), or None:
        ``obj`` is then its own job. Rule: Kueue v0.17 ``FindAncestorJobManagedByKueue``:
        follow controller ownerReferences while they name a registered (enabled) kind, at most
        ``ANCESTOR_DEPTH`` levels (and never round a cycle; one back to ``obj`` itself means
        no ancestor, or two Jobs controlling each other would each wait for the other's
        Workload); an ancestor counts when it has a queue name or ``manage_unlabelled``
        (``manageJobsWithoutQueueName``). ``get(kind,
        namespace, name)`` reads an ancestor (None: unknown, the walk stops there). Kueue also
        walks through kinds it knows but has disabled; pykueue cannot read those and stops."""
        ns = str((obj.get("metadata") or {}).get("namespace", ""))
        own_uid = str((obj.get("metadata") or {}).get("uid", ""))
        seen = {own_uid}
        top: tuple[JobKind, Mapping[str, Any]] | None = None
        cur = obj
        for _ in range(ANCESTOR_DEPTH):
            found = self.kind_of_controller(cur)
            if found is None:
                break
            parent = get(found[0], ns, found[1])
            uid = str(((parent or {}).get("metadata") or {}).get("uid", ""))
            if own_uid and uid == own_uid:
                return None  # a cycle through obj itself: no ancestor (Kueue: an error)
            if parent is None or uid in seen or controller_uid(cur) not in ("", uid):
                break  # unknown, a cycle, or a namesake of the owner the reference names
            seen.add(uid)
            if manage_unlabelled or found[0].queue_name(parent):
                top = (found[0], parent)
            cur = parent
        return top

    def controlled_by_a_kind(self, obj: Mapping[str, Any]) -> bool:
        """True when ``obj``'s controller ownerReference names a registered kind (Kueue's
        "managed ancestor": such an object is its owner's business)."""
        ref = controller_of_object(obj)
        return ref is not None and (ref.group, ref.kind) in self._by_gk

    def owner_of(self, workload: Mapping[str, Any]) -> Owner | None:
        """The registered object controlling ``workload`` (its controller ownerReference, or
        for a group Workload the group it is named after), or None (a Workload created by
        someone else)."""
        meta = workload.get("metadata") or {}
        if (meta.get("annotations") or {}).get(GROUP_WORKLOAD_ANNOTATION) == "true":
            for k in self._by_key.values():
                if k.group_workloads:  # type: ignore[attr-defined]
                    return Owner(k, str(meta.get("namespace", "")), str(meta.get("name", "")), "")
        ref = controller_ref(meta)
        kind = self._by_gk.get((ref.group, ref.kind)) if ref is not None else None
        if kind is None or ref is None:
            return None
        return Owner(kind, str(meta.get("namespace", "")), ref.name, ref.uid)

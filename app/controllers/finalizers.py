"""The ``kueue.x-k8s.io/resource-in-use`` finalizer on ClusterQueues and ResourceFlavors.

Kueue v1beta2 puts this finalizer on every ClusterQueue and ResourceFlavor (its mutating
webhooks, kueue-semantics.md 1.1/1.2) and removes it only when the object is no longer in use,
so deleting a queue cannot free quota that running pods still hold:

- a ClusterQueue being deleted stays (inactive, reason ``Terminating``; its usage still counts
  in its cohort) until no Workload is admitted in it: finished Workloads were released, and an
  evicted or deactivated one counts until its pods are gone and its quota released;
- a ResourceFlavor being deleted stays until no ClusterQueue names it in ``resourceGroups``.

Adding it, as Kueue v0.17.1: at CREATE, by the mutating webhooks ``ROUTES`` (Kueue's paths
``/mutate-kueue-x-k8s-io-v1beta2-clusterqueue`` and ``-resourceflavor``, served by
``app.api.webhook``; ``finalizer_json_patch``), so the object is stored with it and no write
follows. ``FinalizerController`` is the fallback: it adds the finalizer to any live
object still without it (created while the webhook was not registered or before pykueue was
installed; one merge patch per object, once) and finds nothing to do for the others. Kueue
puts no finalizer on LocalQueues (a deleted LocalQueue's admitted Workloads keep their
ClusterQueue's quota through their ``status.admission``), and neither does pykueue.

Removing it is the controller's alone. Writes are merge patches of ``metadata.finalizers``
guarded by ``metadata.resourceVersion`` (a 409 means somebody else changed the list: re-read
from the watch and decide again), made only while ``ctx.may_write`` (leader and synced).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from app.core.types import ClusterQueueName
from app.integrations.webhook_toolkit import (
    ALLOW,
    JsonPatchOp,
    UnreadableObjectError,
    Verdict,
    WebhookEnv,
    WebhookRoute,
    json_type,
    optional_object,
    patched,
    review_of,
)
from app.kube.client import CLUSTER_QUEUES, MERGE_PATCH, RESOURCE_FLAVORS, Resource
from app.kube.context import CQ, RF, Context
from app.kube.errors import NotFound
from app.kube.workqueue import WorkQueue, work
from app.models.admissionreview import AdmissionRequest
from app.wire.fields import Obj
from app.wire.names import RESOURCE_IN_USE_FINALIZER as RESOURCE_IN_USE

log = logging.getLogger(__name__)

KUEUE_GROUP = "kueue.x-k8s.io"


def finalizer_json_patch(obj: object, kind: str) -> list[JsonPatchOp]:
    """The JSONPatch that adds ``RESOURCE_IN_USE`` to the ``kind`` object ``obj`` under
    review, keeping every other finalizer: ``[]`` when it is there already; the list (or
    ``metadata``) added whole when absent, else the finalizer appended. Raises
    ``UnreadableObjectError`` (field under ``request.object``) when the object, its
    ``metadata`` or ``metadata.finalizers`` has the wrong JSON type."""
    if not isinstance(obj, Mapping):
        raise UnreadableObjectError("request.object", f"expected a {kind} object, got "
                                                      f"{json_type(obj)}")
    meta = optional_object(obj.get("metadata"), "request.object.metadata")
    if meta is None:
        return [{"op": "add", "path": "/metadata", "value": {"finalizers": [RESOURCE_IN_USE]}}]
    current = meta.get("finalizers")
    if current is None:
        return [{"op": "add", "path": "/metadata/finalizers", "value": [RESOURCE_IN_USE]}]
    if not isinstance(current, list):
        raise UnreadableObjectError("request.object.metadata.finalizers",
                                    f"expected an array, got {json_type(current)}")
    for i, item in enumerate(current):
        if not isinstance(item, str):
            raise UnreadableObjectError(f"request.object.metadata.finalizers[{i}]",
                                        f"expected a string, got {json_type(item)}")
    if RESOURCE_IN_USE in current:
        return []
    return [{"op": "add", "path": "/metadata/finalizers/-", "value": RESOURCE_IN_USE}]


def _adds_finalizer(kind: str) -> Callable[[AdmissionRequest, WebhookEnv], Verdict]:
    """The decider of ``kind``'s mutating webhook (Kueue's ``Default``): the finalizer at
    CREATE; any other operation, or a review of another kind, allowed unchanged."""
    def decide(req: AdmissionRequest, env: WebhookEnv) -> Verdict:
        if req.operation != "CREATE" or req.sub_resource \
                or not review_of(req, KUEUE_GROUP, kind):
            return ALLOW
        return patched(finalizer_json_patch(req.object, kind))
    return decide


# Kueue's paths; no framework: served whatever ``integrations.frameworks`` says.
ROUTES = (
    WebhookRoute("/mutate-kueue-x-k8s-io-v1beta2-clusterqueue", None,
                 _adds_finalizer("ClusterQueue")),
    WebhookRoute("/mutate-kueue-x-k8s-io-v1beta2-resourceflavor", None,
                 _adds_finalizer("ResourceFlavor")),
)


def finalizer_patch(obj: Mapping[str, Any], want: bool) -> Obj | None:
    """The merge patch that adds (``want``) or removes ``RESOURCE_IN_USE``, keeping every other
    finalizer and guarded by the object's resourceVersion; None when nothing changes."""
    meta = obj.get("metadata") or {}
    current = list(meta.get("finalizers") or [])
    if (RESOURCE_IN_USE in current) == want:
        return None
    new = [*current, RESOURCE_IN_USE] if want else [f for f in current if f != RESOURCE_IN_USE]
    return {"metadata": {"finalizers": new, "resourceVersion": meta.get("resourceVersion")}}


def flavors_in_use(cluster_queues: Iterable[Mapping[str, Any]]) -> set[str]:
    """Names of the ResourceFlavors named in any ClusterQueue's ``spec.resourceGroups``."""
    out: set[str] = set()
    for cq in cluster_queues:
        for g in (cq.get("spec") or {}).get("resourceGroups") or []:
            for f in (g or {}).get("flavors") or []:
                if isinstance(f, Mapping) and f.get("name"):
                    out.add(str(f["name"]))
    return out


class FinalizerController:
    """Adds ``RESOURCE_IN_USE`` to live ClusterQueues and ResourceFlavors and removes it from
    deleted ones no longer in use (module doc). ``admitted_in(cq)``: how many Workloads hold an
    admission (or an in-flight one) in ClusterQueue ``cq`` (the core's tally)."""

    def __init__(self, ctx: Context, admitted_in: Callable[[ClusterQueueName], int]) -> None:
        self.ctx = ctx
        self.admitted_in = admitted_in
        self.queue = WorkQueue(base=0.2, cap=30.0)
        self._task: asyncio.Task[None] | None = None

    # handlers
    def on_cluster_queue(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        obj = new or old
        if obj is not None:
            self.queue.add(f"cq:{obj['metadata']['name']}")
            # A ClusterQueue change may free (or take) a flavor being deleted.
            for rf in self.ctx.store(RF):
                if rf["metadata"].get("deletionTimestamp"):
                    self.queue.add(f"rf:{rf['metadata']['name']}")

    def on_flavor(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        obj = new or old
        if obj is not None:
            self.queue.add(f"rf:{obj['metadata']['name']}")

    def on_workload(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        """A Workload released or deleted may let a terminating ClusterQueue go."""
        for obj in (old, new):
            cq = (((obj or {}).get("status") or {}).get("admission") or {}).get("clusterQueue")
            if cq:
                stored = self.ctx.store(CQ).get(cq)
                if stored is not None and stored["metadata"].get("deletionTimestamp"):
                    self.queue.add_after(f"cq:{cq}", 0.2)

    def enqueue_all(self) -> None:
        for o in self.ctx.store(CQ):
            self.queue.add(f"cq:{o['metadata']['name']}")
        for o in self.ctx.store(RF):
            self.queue.add(f"rf:{o['metadata']['name']}")

    # lifecycle
    @property
    def tasks(self) -> list[asyncio.Task[None]]:
        return [self._task] if self._task is not None else []

    def start(self) -> None:
        self._task = asyncio.create_task(self._worker(), name="finalizers")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self.queue.close()

    async def _worker(self) -> None:
        await work(self.queue, self.reconcile, may_write=lambda: self.ctx.may_write, log=log,
                   what="finalizer")

    async def reconcile(self, key: str) -> float | None:
        """Add or remove the finalizer of ``cq:<name>`` / ``rf:<name>``; seconds to look again
        (a terminating ClusterQueue still in use) or None."""
        kind, _, name = key.partition(":")
        if kind == "cq":
            obj = self.ctx.store(CQ).get(name)
            res: Resource = CLUSTER_QUEUES
            in_use = obj is not None and self.admitted_in(ClusterQueueName(name)) > 0
        else:
            obj = self.ctx.store(RF).get(name)
            res = RESOURCE_FLAVORS
            in_use = name in flavors_in_use(self.ctx.store(CQ))
        if obj is None:
            return None
        deleting = bool(obj["metadata"].get("deletionTimestamp"))
        patch = finalizer_patch(obj, want=not deleting or in_use)
        if patch is None:
            return 2.0 if deleting and in_use and kind == "cq" else None
        try:
            out = await self.ctx.client.patch(res, name, patch, content_type=MERGE_PATCH)
        except NotFound:
            return None
        if out.get("metadata", {}).get("deletionTimestamp") and not out["metadata"].get(
                "finalizers"):
            return None  # the API server deletes it now; the watch says so
        self.ctx.store(CQ if kind == "cq" else RF).put(out)
        return None

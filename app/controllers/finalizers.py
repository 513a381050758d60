"""The ``kueue.x-k8s.io/resource-in-use`` finalizer on ClusterQueues and ResourceFlavors.

Kueue v1beta2 puts this finalizer on every ClusterQueue and ResourceFlavor (its mutating
webhooks, kueue-semantics.md 1.1/1.2) and removes it only when the object is no longer in use,
so deleting a queue cannot free quota that running pods still hold:

- a ClusterQueue being deleted stays (inactive, reason ``Terminating``; its usage still counts
  in its cohort) until no Workload is admitted in it: finished Workloads were released, and an
  evicted or deactivated one counts until its pods are gone and its quota released;
- a ResourceFlavor being deleted stays until no ClusterQueue names it in ``resourceGroups``.

pykueue adds the finalizer from this controller instead of a webhook on the Kueue kinds (one
merge patch per object, once). Kueue puts no finalizer on LocalQueues (a deleted LocalQueue's
admitted Workloads keep their ClusterQueue's quota through their ``status.admission``), and
neither does pykueue.

Writes are merge patches of ``metadata.finalizers`` guarded by ``metadata.resourceVersion``
(a 409 means somebody else changed the list: re-read from the watch and decide again), made
only while ``ctx.may_write`` (leader and synced).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from app.core.types import ClusterQueueName
from app.kube.client import CLUSTER_QUEUES, MERGE_PATCH, RESOURCE_FLAVORS, Resource
from app.kube.context import CQ, RF, Context
from app.kube.errors import NotFound
from app.kube.workqueue import WorkQueue, work
from app.wire.fields import Obj
from app.wire.names import RESOURCE_IN_USE_FINALIZER as RESOURCE_IN_USE

log = logging.getLogger(__name__)




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

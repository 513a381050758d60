"""What the scheduler extender reads: Nodes in memory, GPU usage per node, and the
``ExtenderState`` protocol the reconciler implements.

- ``NodeStore``: plain store fed by a Node watch (``add`` / ``update`` / ``delete``) and a Pod
  watch (``upsert_pod`` / ``delete_pod``, for the GPUs requested by pods bound to each node).
  No I/O here: the informers (``app.kube.informers``) call these methods.
- ``ExtenderState``: what ``app.api.extender`` asks per request; the app finds it at
  ``app.state.extender_state``. ``InMemoryExtenderState`` is the plain implementation (unit
  tests, ``bench/extender_latency.py``); the reconciler's ``StoreExtenderState``
  (``app.controllers.admission_lookup``) extends it with lookups in the informers' stores.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from app.extender.placement import (
    FlavorView,
    NodeIndex,
    PodFacts,
    PodWorkloadView,
    node_facts,
    pod_facts,
)

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


@runtime_checkable
class ExtenderState(Protocol):
    """What the extender needs from the reconciler's caches. All calls are synchronous and
    cheap (dict lookups): they run on the event loop inside a 2 ms budget."""

    def synced(self) -> bool:
        """True once every informer has listed (design.md: nothing decided before sync)."""
        ...

    def workload_for_pod(self, namespace: str, job_name: str,
                         job_uid: str = "") -> PodWorkloadView | None:
        """The Workload of batch/v1 Job ``namespace/job_name``; ``None`` when pykueue does not
        manage that Job. A managed Job without a Workload yet gives a non-admitted view, and
        so does a pod whose ``job_uid`` (when known) is not the managed Job's: a Job deleted
        and created again under the same name is another Job."""
        ...

    def flavors(self) -> tuple[FlavorView, ...]:
        """Every ResourceFlavor known (used to name the flavor of a rejected node)."""
        ...

    def pod_admitted(self, pod: PodFacts) -> bool:
        """True when an admitted Workload covers ``pod`` (its own, its pod group's, or that of
        the queued object, or top-most queued ancestor, controlling it, checked by uid);
        asked only with ``extender.flavor_nodes_for_admitted_only``."""
        ...

    def withheld(self, pod: PodFacts) -> str:
        """Why ``pod`` may be placed on no node whatever its Workload says (its controller
        is an object a queued ancestor's admission does not cover, such as a RayCluster
        forged under an admitted RayService; a pod of a batch Job its selector does not
        take), or ``""``. Asked for every pod before its Workload view."""
        ...

    def node(self, name: str) -> dict[str, Any] | None:
        """The core/v1 Node object last seen by the watch, or ``None``."""
        ...

    def node_index(self) -> NodeIndex:
        """The watched nodes as a ``NodeIndex`` (labels, hard taints, allocatable GPUs)."""
        ...

    def gpu_used(self, node_name: str) -> int:
        """GPUs (count) requested by non-terminal pods bound to ``node_name``."""
        ...

    def free_gpus(self) -> Mapping[str, int]:
        """Node name -> allocatable GPUs minus ``gpu_used`` (may be negative), known nodes only."""
        ...

    def bound_pods(self, job_uid: str) -> int:
        """GPU pods (count) of batch Job ``job_uid`` bound and not terminal, those being
        deleted included (``NodeStore.bound_pods``)."""
        ...


class NodeStore:
    """Nodes by name (raw objects and parsed ``NodeFacts``) and GPU usage per node.

    ``gpu_resource``: the extended resource counted (``nvidia.com/gpu``). Malformed objects
    raise ``app.extender.placement.ExtenderInputError`` and leave the store unchanged.
    """

    def __init__(self, gpu_resource: str = "nvidia.com/gpu") -> None:
        self.gpu_resource = gpu_resource
        self._objects: dict[str, dict[str, Any]] = {}
        self._index = NodeIndex()
        # pod uid -> (node, gpus, its Job's uid: PodFacts.job_uid, "" for none)
        self._pods: dict[str, tuple[str, int, str]] = {}
        self._by_owner: dict[str, set[str]] = {}
        self._used: dict[str, int] = {}
        self._free: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._objects)

    @property
    def index(self) -> NodeIndex:
        """The nodes as a ``NodeIndex``."""
        return self._index

    def add(self, node: dict[str, Any]) -> None:
        """A Node ADDED event (same as ``update``)."""
        self.update(node)

    def update(self, node: dict[str, Any]) -> None:
        """A Node ADDED/MODIFIED event: store the object and its facts."""
        facts = node_facts(node, self.gpu_resource)
        self._objects[facts.name] = node
        self._index.upsert(facts)
        self._free[facts.name] = facts.gpus - self._used.get(facts.name, 0)

    def delete(self, node: dict[str, Any] | str) -> None:
        """A Node DELETED event (object or name); unknown names are ignored."""
        name = node if isinstance(node, str) else (node.get("metadata") or {}).get("name", "")
        self._objects.pop(name, None)
        self._index.remove(name)
        self._free.pop(name, None)

    def node(self, name: str) -> dict[str, Any] | None:
        """The last Node object seen under ``name``."""
        return self._objects.get(name)

    @staticmethod
    def _pod_key(pod: Mapping[str, Any]) -> str:
        meta = pod.get("metadata") or {}
        return str(meta.get("uid") or f"{meta.get('namespace', '')}/{meta.get('name', '')}")

    def upsert_pod(self, pod: dict[str, Any]) -> None:
        """A Pod ADDED/MODIFIED event: count its GPUs on ``spec.nodeName`` while it is bound and
        not Succeeded/Failed."""
        key = self._pod_key(pod)
        self._release(key)
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        if not node or phase in TERMINAL_PHASES:
            return
        facts = pod_facts(pod, self.gpu_resource)
        if facts.gpus:
            self._pods[key] = (node, facts.gpus, facts.job_uid)
            self._adjust(node, facts.gpus)
            if facts.job_uid:
                self._by_owner.setdefault(facts.job_uid, set()).add(key)

    def delete_pod(self, pod: dict[str, Any]) -> None:
        """A Pod DELETED event."""
        self._release(self._pod_key(pod))

    def _release(self, key: str) -> None:
        prev = self._pods.pop(key, None)
        if prev is None:
            return
        node, gpus, owner = prev
        self._adjust(node, -gpus)
        pods = self._by_owner.get(owner)
        if pods is not None:
            pods.discard(key)
            if not pods:
                del self._by_owner[owner]

    def _adjust(self, node: str, delta: int) -> None:
        used = self._used.get(node, 0) + delta
        if used:
            self._used[node] = used
        else:
            self._used.pop(node, None)
        facts = self._index.get(node)
        if facts is not None:
            self._free[node] = facts.gpus - used

    def gpu_used(self, node_name: str) -> int:
        """GPUs (count) requested by bound, non-terminal pods on ``node_name``."""
        return self._used.get(node_name, 0)

    def free_gpus(self) -> Mapping[str, int]:
        """Node name -> allocatable minus used GPUs (count), known nodes only. Read-only view."""
        return self._free

    def bound_pods(self, job_uid: str) -> int:
        """GPU pods (count) of the batch Job of uid ``job_uid`` (``PodFacts.job_uid``) bound
        to a node and not Succeeded/Failed, those being deleted included."""
        return len(self._by_owner.get(job_uid, ()))


class NodeStoreBacked:
    """The node half of ``ExtenderState``, served from ``self.nodes`` (a ``NodeStore``).
    Mix into any ``ExtenderState`` implementation that keeps its nodes in a ``NodeStore``."""

    nodes: NodeStore

    def node(self, name: str) -> dict[str, Any] | None:
        return self.nodes.node(name)

    def node_index(self) -> NodeIndex:
        return self.nodes.index

    def gpu_used(self, node_name: str) -> int:
        return self.nodes.gpu_used(node_name)

    def free_gpus(self) -> Mapping[str, int]:
        return self.nodes.free_gpus()

    def bound_pods(self, job_uid: str) -> int:
        return self.nodes.bound_pods(job_uid)


@dataclass
class InMemoryExtenderState(NodeStoreBacked):
    """A plain ``ExtenderState``: a ``NodeStore`` plus Workload views keyed by
    ``(namespace, job name)`` and the known flavors. ``is_synced`` starts True so tests and the
    benchmark need no ceremony; a reconciler sets it False until its informers have listed."""

    nodes: NodeStore = field(default_factory=NodeStore)
    workloads: dict[tuple[str, str], PodWorkloadView] = field(default_factory=dict)
    known_flavors: tuple[FlavorView, ...] = ()
    is_synced: bool = True
    admitted_pods: set[str] = field(default_factory=set)  # "ns/name" of covered pods
    withheld_pods: dict[str, str] = field(default_factory=dict)  # "ns/name" -> why

    def set_workload(self, namespace: str, job_name: str, view: PodWorkloadView | None) -> None:
        """Record (or with ``None`` forget) the Workload of Job ``namespace/job_name``."""
        if view is None:
            self.workloads.pop((namespace, job_name), None)
        else:
            self.workloads[(namespace, job_name)] = view

    def synced(self) -> bool:
        return self.is_synced

    def workload_for_pod(self, namespace: str, job_name: str,
                         job_uid: str = "") -> PodWorkloadView | None:
        return self.workloads.get((namespace, job_name))

    def flavors(self) -> tuple[FlavorView, ...]:
        return self.known_flavors

    def pod_admitted(self, pod: PodFacts) -> bool:
        return pod.key in self.admitted_pods

    def withheld(self, pod: PodFacts) -> str:
        return self.withheld_pods.get(pod.key, "")

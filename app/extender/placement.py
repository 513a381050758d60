"""kube-scheduler extender rules: which nodes may run a pod of a pykueue-managed Job.

Pure and synchronous (standard library and ``app.core`` only). The HTTP adapter
(``app.api.extender``) parses ``ExtenderArgs``, builds the facts below and calls
``filter_pod`` / ``gpu_scores``; the reconciler supplies ``PodWorkloadView`` and ``FlavorView``.

Rules (Kueue v1beta2 ``startJob``/``RunWithPodSetsInfo`` injects the same
constraints into the pod template, kueue-semantics.md 4.4):

- A pod no pykueue Workload owns (``view is None``): every candidate node passes, unchanged.
- A pod of a managed Workload that is not admitted: every node is *unresolvable*, the reason
  names the Workload and why it waits.
- A pod of an admitted Workload asking more GPUs than a pod of its podSet was admitted with
  (a pod made under the Job's name, not from its template): every node is unresolvable.
- A pod of an admitted Workload: a node passes only if its labels contain every ``nodeLabels``
  entry of every flavor assigned to the pod's podSet, and each of its ``NoSchedule`` /
  ``NoExecute`` taints is tolerated by those flavors' ``tolerations`` or the pod's own.
  Other nodes fail (resolvable) with a reason a person can act on.

Reasons never contain the node name: kube-scheduler already keys them by node and its
``FitError`` message counts identical reasons ("0/9 nodes are available: 5 node(s) belong to
flavor l4; ..."), so shared strings keep events short at 5,000 nodes.

Scores (``gpu_scores``): 0-10 (``MinExtenderPriority``..``MaxExtenderPriority``,
k8s.io/kube-scheduler/extender/v1), higher where the pod's GPUs leave fewer free GPUs behind
(bin packing keeps whole nodes free for large gangs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import filterfalse
from typing import Any

from app.core.quantity import QuantityError, parse_quantity
from app.core.workload import Taint, Toleration
from app.core.workload import Workload as DomainWorkload
from app.wire.fields import WorkloadSpecError
from app.wire.names import (
    GROUP_LABEL,
    JOB_NAME_LABELS,
    JOB_UID_LABELS,
    PODSET_LABEL,
    QUEUE_NAME_LABEL,
)
from app.wire.owners import OwnerRef, controller_ref
from app.wire.podtemplate import tolerations

HARD_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
MAX_SCORE = 10
NOT_SYNCED_REASON = "node(s) withheld by pykueue: pykueue is starting: state not synced"

Selector = tuple[tuple[str, str], ...]
"""Required node labels as sorted ``(key, value)`` pairs (hashable)."""

_SCORE_BY_LEFT = {left: MAX_SCORE - left for left in range(MAX_SCORE + 1)}
_CACHE_LIMIT = 512


class ExtenderInputError(ValueError):
    """A Pod or Node object in ``ExtenderArgs`` has a field of the wrong shape.

    The message names the field (e.g. ``Pod.spec.tolerations[1]``); the adapter answers 400.
    """


# ----------------------------------------------------------------------------------- facts


@dataclass(frozen=True, slots=True)
class FlavorView:
    """What the extender needs of a ResourceFlavor (Kueue v1beta2 ``spec.nodeLabels``,
    ``spec.tolerations``). ``node_labels``: sorted ``(key, value)`` pairs."""

    name: str
    node_labels: Selector = ()
    tolerations: tuple[Toleration, ...] = ()

    @staticmethod
    def of(
        name: str,
        node_labels: Mapping[str, str] | None = None,
        tolerations: Iterable[Toleration] = (),
    ) -> FlavorView:
        """Build from a ``nodeLabels`` mapping (order-insensitive)."""
        return FlavorView(name, tuple(sorted((node_labels or {}).items())), tuple(tolerations))


@dataclass(frozen=True, slots=True)
class PodWorkloadView:
    """The Workload that owns a pod's Job, as the extender sees it.

    ``key``: ``namespace/name`` of the Workload. ``admitted``: it has ``status.admission``.
    ``pending_reason``: why it waits (Kueue's QuotaReserved=False message), "" when admitted.
    ``pod_set_flavors``: podSet name -> the flavors assigned to it (one per distinct flavor
    across its resources, Kueue ``status.admission.podSetAssignments[].flavors``).
    ``pod_set_gpus``: podSet name -> the GPUs (count) one of its pods was admitted with
    (``spec.podSets[].template``'s per-pod request); a podSet missing here is not checked.
    ``pod_set_counts``: podSet name -> the pods admitted (``podSetAssignments[].count``).
    A pod with no view (``None``) is not managed by pykueue.
    """

    key: str
    admitted: bool
    pending_reason: str = ""
    pod_set_flavors: Mapping[str, tuple[FlavorView, ...]] = field(default_factory=dict)
    pod_set_gpus: Mapping[str, int] = field(default_factory=dict)
    pod_set_counts: Mapping[str, int] = field(default_factory=dict)


def view_from_workload(
    workload: DomainWorkload, flavors: Mapping[str, FlavorView], pending_reason: str = "",
    gpu_resource: str = "nvidia.com/gpu", pod_set_gpus: Mapping[str, int] | None = None,
) -> PodWorkloadView:
    """Build a ``PodWorkloadView`` from a domain Workload and the known ResourceFlavors;
    ``gpu_resource``: the resource ``PodFacts.gpus`` counts (``extender.gpu_resource``).
    ``pod_set_gpus``: the GPUs a pod of each podSet asks when the caller knows better than
    the domain Workload's requests (the namespace's LimitRange defaults applied as the API
    server applies them); default: those requests.

    A flavor named in the admission but missing from ``flavors`` (deleted since) is taken as
    a flavor without nodeLabels or tolerations.
    """
    admission = workload.admission
    if admission is None:
        return PodWorkloadView(workload.key, False, pending_reason or "waiting for quota")
    per_pod_set: dict[str, tuple[FlavorView, ...]] = {}
    for psa in admission.pod_set_assignments:
        names = dict.fromkeys(psa.flavors.values())  # distinct, in resource order
        per_pod_set[psa.name] = tuple(flavors.get(n) or FlavorView(n) for n in names)
    gpus = pod_set_gpus if pod_set_gpus is not None else {
        ps.name: int(ps.requests.get(gpu_resource, 0)) for ps in workload.pod_sets}
    counts = {psa.name: psa.count for psa in admission.pod_set_assignments}
    return PodWorkloadView(workload.key, True, "", per_pod_set, gpus, counts)


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """A Node as the extender sees it (core/v1 Node).

    ``labels``: ``metadata.labels`` (do not mutate). ``hard_taints``: the ``NoSchedule`` and
    ``NoExecute`` entries of ``spec.taints``. ``gpus``: ``status.allocatable[<gpu resource>]``
    as a count (0 when absent).
    """

    name: str
    labels: Mapping[str, str]
    hard_taints: tuple[Taint, ...] = ()
    gpus: int = 0


@dataclass(frozen=True, slots=True)
class PodFacts:
    """A Pod as the extender sees it (core/v1 Pod).

    ``job_name``: the owning batch/v1 Job (controller ownerReference of kind Job, else the
    ``batch.kubernetes.io/job-name`` / ``job-name`` label), ``None`` when not a Job's pod;
    ``job_uid``: that Job's UID (the ownerReference's, else the
    ``batch.kubernetes.io/controller-uid`` / ``controller-uid`` label), ``""`` when unknown.
    ``pod_set``: label ``kueue.x-k8s.io/podset`` (injected at admission). ``gpus``: the pod's
    effective request of the GPU resource as a count (Kubernetes': max of the containers'
    and sidecars' sum and each init container with the sidecars started before it; a limit
    stands in for a missing request). ``uid``; ``controller``: its
    controller ownerReference (``app.wire.owners.OwnerRef``), None when it has none;
    ``group``: label ``kueue.x-k8s.io/pod-group-name`` (for ``filter_unadmitted``);
    ``labels``: ``metadata.labels`` (do not mutate).
    """

    namespace: str
    name: str
    job_name: str | None = None
    job_uid: str = ""
    pod_set: str | None = None
    queue_name: str | None = None
    tolerations: tuple[Toleration, ...] = ()
    gpus: int = 0
    uid: str = ""
    controller: OwnerRef | None = None
    group: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """``namespace/name`` of the pod."""
        return f"{self.namespace}/{self.name}"


def _mapping(obj: Any, where: str) -> Mapping[str, Any]:
    if obj is None:
        return {}
    if not isinstance(obj, Mapping):
        raise ExtenderInputError(f"{where} must be an object")
    return obj


def _list(obj: Any, where: str) -> list[Any]:
    if obj is None:
        return []
    if not isinstance(obj, list):
        raise ExtenderInputError(f"{where} must be a list")
    return obj


def _str_map(obj: Any, where: str) -> dict[str, str]:
    m = _mapping(obj, where)
    for k, v in m.items():
        if not isinstance(v, str):
            raise ExtenderInputError(f"{where}[{k!r}] must be a string")
    return dict(m)


def _count(value: Any, resource: str, where: str) -> int:
    if isinstance(value, str) and value.isdigit():
        return int(value)  # fast path: "8"
    try:
        return parse_quantity(value, resource, field=where)
    except QuantityError as exc:
        raise ExtenderInputError(str(exc)) from exc


@lru_cache(maxsize=1024)
def _hard_taints(taints: tuple[tuple[str, str, str], ...]) -> tuple[Taint, ...]:
    """The NoSchedule/NoExecute taints of ``(key, value, effect)`` triples, shared between
    nodes that carry the same taints (most nodes of a pool do)."""
    return tuple(Taint(k, v, e) for k, v, e in taints if e in HARD_EFFECTS)


def make_node_facts(
    name: str,
    labels: Mapping[str, str],
    taints: Sequence[tuple[str, str, str]],
    gpu_quantity: str | int | None,
    gpu_resource: str,
) -> NodeFacts:
    """Build ``NodeFacts`` from already-typed fields: ``taints`` as ``(key, value, effect)``
    (only NoSchedule/NoExecute are kept), ``gpu_quantity`` the allocatable quantity or None.
    Raises ``ExtenderInputError`` for a malformed quantity."""
    hard = _hard_taints(tuple(taints)) if taints else ()
    gpus = 0
    if gpu_quantity is not None:
        gpus = _count(gpu_quantity, gpu_resource, f"Node {name} allocatable")
    return NodeFacts(name, labels, hard, gpus)


def node_facts(node: Mapping[str, Any], gpu_resource: str) -> NodeFacts:
    """Read a core/v1 Node dict. Raises ``ExtenderInputError`` for wrong shapes or no name."""
    meta = _mapping(node.get("metadata"), "Node.metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ExtenderInputError("Node.metadata.name must be a non-empty string")
    labels = _str_map(meta.get("labels"), f"Node {name} metadata.labels")
    spec = _mapping(node.get("spec"), f"Node {name} spec")
    taints = []
    for i, t in enumerate(_list(spec.get("taints"), f"Node {name} spec.taints")):
        t = _mapping(t, f"Node {name} spec.taints[{i}]")
        taints.append((str(t.get("key") or ""), str(t.get("value") or ""), t.get("effect") or ""))
    status = _mapping(node.get("status"), f"Node {name} status")
    alloc = _mapping(status.get("allocatable"), f"Node {name} status.allocatable")
    return make_node_facts(name, labels, taints, alloc.get(gpu_resource), gpu_resource)


def _container_gpus(c: Any, gpu_resource: str, where: str) -> int:
    res = _mapping(_mapping(c, where).get("resources"), f"{where}.resources")
    requests = _mapping(res.get("requests"), f"{where}.resources.requests")
    limits = _mapping(res.get("limits"), f"{where}.resources.limits")
    raw = requests.get(gpu_resource, limits.get(gpu_resource))
    return 0 if raw is None else _count(raw, gpu_resource, f"{where}.resources")


def job_uid_of(meta: Mapping[str, Any], labels: Mapping[str, str], job_name: str | None) -> str:
    """The UID of the pod's Job ``job_name``: its ownerReference's, else the Job controller's
    label; ``""`` when unknown."""
    for ref in _list(meta.get("ownerReferences"), "Pod.metadata.ownerReferences"):
        if isinstance(ref, Mapping) and ref.get("kind") == "Job" \
                and ref.get("name") == job_name and isinstance(ref.get("uid"), str):
            return ref["uid"]
    for label in JOB_UID_LABELS:
        if labels.get(label):
            return labels[label]
    return ""


def job_name_of(meta: Mapping[str, Any], labels: Mapping[str, str]) -> str | None:
    """The batch/v1 Job owning a pod: controller ownerReference of kind Job, else the label."""
    refs = _list(meta.get("ownerReferences"), "Pod.metadata.ownerReferences")
    fallback = None
    for i, ref in enumerate(refs):
        ref = _mapping(ref, f"Pod.metadata.ownerReferences[{i}]")
        if ref.get("kind") == "Job" and str(ref.get("apiVersion", "")).startswith("batch/"):
            if ref.get("controller"):
                return str(ref.get("name") or "") or None
            fallback = fallback or (str(ref.get("name") or "") or None)
    if fallback:
        return fallback
    for label in JOB_NAME_LABELS:
        if labels.get(label):
            return labels[label]
    return None


def pod_facts(pod: Mapping[str, Any], gpu_resource: str) -> PodFacts:
    """Read a core/v1 Pod dict. Raises ``ExtenderInputError`` for wrong shapes."""
    meta = _mapping(pod.get("metadata"), "Pod.metadata")
    labels = _str_map(meta.get("labels"), "Pod.metadata.labels")
    spec = _mapping(pod.get("spec"), "Pod.spec")
    try:
        tols = tolerations(spec.get("tolerations"), "Pod.spec.tolerations")
        controller = controller_ref(meta, strict=True, where="Pod.metadata")
    except WorkloadSpecError as exc:
        raise ExtenderInputError(str(exc)) from exc
    main = sum(
        _container_gpus(c, gpu_resource, f"Pod.spec.containers[{i}]")
        for i, c in enumerate(_list(spec.get("containers"), "Pod.spec.containers"))
    )
    # Kubernetes' effective request: sidecars (init containers with restartPolicy Always)
    # run beside the main containers and every init container started after them.
    init = sidecars = 0
    for i, c in enumerate(_list(spec.get("initContainers"), "Pod.spec.initContainers")):
        gpus = _container_gpus(c, gpu_resource, f"Pod.spec.initContainers[{i}]")
        if c.get("restartPolicy") == "Always":
            sidecars += gpus
        else:
            init = max(init, sidecars + gpus)
    main += sidecars
    return PodFacts(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or meta.get("generateName") or ""),
        job_name=(job_name := job_name_of(meta, labels)),
        job_uid=job_uid_of(meta, labels, job_name) if job_name else "",
        pod_set=labels.get(PODSET_LABEL),
        queue_name=labels.get(QUEUE_NAME_LABEL) or None,  # "" is no queue, as in the webhook
        tolerations=tols,
        gpus=max(main, init),
        uid=str(meta.get("uid") or ""),
        controller=controller,
        group=labels.get(GROUP_LABEL) or None,
        labels=labels,
    )


# ----------------------------------------------------------------------------------- index


class NodeIndex:
    """Nodes by name with cached answers to "which nodes carry these labels / taints".

    Caches are dropped when a node's labels or hard taints change (not on GPU or status-only
    changes), so a steady cluster answers a 5,000-node filter with set operations only.
    Not thread-safe; meant for one event loop.
    """

    __slots__ = ("_nodes", "_cache", "_all")

    def __init__(self, nodes: Iterable[NodeFacts] = ()) -> None:
        self._nodes: dict[str, NodeFacts] = {}
        self._cache: dict[tuple[Any, ...], Any] = {}
        self._all: frozenset[str] | None = None
        for n in nodes:
            self._nodes[n.name] = n

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, name: object) -> bool:
        return name in self._nodes

    def get(self, name: str) -> NodeFacts | None:
        """The node named ``name`` or ``None``."""
        return self._nodes.get(name)

    def upsert(self, facts: NodeFacts) -> bool:
        """Insert or replace a node; True when its labels or hard taints changed."""
        old = self._nodes.get(facts.name)
        self._nodes[facts.name] = facts
        changed = (
            old is None or old.labels != facts.labels or old.hard_taints != facts.hard_taints
        )
        if changed:
            self._invalidate()
        return changed

    def remove(self, name: str) -> bool:
        """Drop a node; True when it was present."""
        if self._nodes.pop(name, None) is None:
            return False
        self._invalidate()
        return True

    def _invalidate(self) -> None:
        self._cache.clear()
        self._all = None

    def _cached(self, key: tuple[Any, ...]) -> Any:
        return self._cache.get(key)

    def _store(self, key: tuple[Any, ...], value: Any) -> Any:
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[key] = value
        return value

    def names(self) -> frozenset[str]:
        """All node names."""
        if self._all is None:
            self._all = frozenset(self._nodes)
        return self._all

    def matching(self, selector: Selector) -> frozenset[str]:
        """Names of the nodes whose labels contain every ``(key, value)`` of ``selector``."""
        if not selector:
            return self.names()
        key = ("m", selector)
        hit = self._cached(key)
        if hit is None:
            hit = self._store(
                key,
                frozenset(
                    n
                    for n, f in self._nodes.items()
                    if all(f.labels.get(k) == v for k, v in selector)
                ),
            )
        return hit

    def hard_taints(self) -> dict[Taint, frozenset[str]]:
        """Every NoSchedule/NoExecute taint present -> names of the nodes carrying it."""
        hit = self._cached(("t",))
        if hit is None:
            acc: dict[Taint, set[str]] = {}
            for n, f in self._nodes.items():
                for t in f.hard_taints:
                    acc.setdefault(t, set()).add(n)
            hit = self._store(("t",), {t: frozenset(s) for t, s in acc.items()})
        return hit

    def untolerated(self, tolerations: tuple[Toleration, ...]) -> frozenset[str]:
        """Names of the nodes with a hard taint that no toleration in ``tolerations`` covers."""
        key = ("u", tolerations)
        hit = self._cached(key)
        if hit is None:
            blocked: set[str] = set()
            for taint, names in self.hard_taints().items():
                if not any(tol.tolerates(taint) for tol in tolerations):
                    blocked |= names
            hit = self._store(key, frozenset(blocked))
        return hit

    def schedulable(
        self, selector: Selector, tolerations: tuple[Toleration, ...]
    ) -> frozenset[str]:
        """Names of the nodes that carry ``selector`` and whose hard taints are tolerated."""
        key = ("s", selector, tolerations)
        hit = self._cached(key)
        if hit is None:
            hit = self._store(key, self.matching(selector) - self.untolerated(tolerations))
        return hit

    def flavor_members(self, flavors: tuple[FlavorView, ...]) -> dict[str, frozenset[str]]:
        """Flavor name -> nodes that belong to it, each node to its most specific flavor.

        A node belongs to a flavor when it carries all of the flavor's (non-empty) nodeLabels;
        when several match, the one with the most nodeLabels wins (ties: by name). Flavors
        without nodeLabels claim no node.
        """
        key = ("f", flavors)
        hit = self._cached(key)
        if hit is None:
            taken: set[str] = set()
            out: dict[str, frozenset[str]] = {}
            for f in sorted(flavors, key=lambda f: (-len(f.node_labels), f.name)):
                if not f.node_labels or f.name in out:
                    continue
                members = self.matching(f.node_labels) - taken
                out[f.name] = members
                taken |= members
            hit = self._store(key, out)
        return hit


# ---------------------------------------------------------------------------------- filter


@dataclass(slots=True)
class FilterDecision:
    """Outcome of ``filter_pod``: ``passing`` node names in request order; ``failed`` and
    ``unresolvable`` map node name -> reason (``ExtenderFilterResult.FailedNodes`` /
    ``FailedAndUnresolvableNodes``)."""

    passing: list[str]
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)


def _flavor_list(flavors: Iterable[str]) -> str:
    names = list(flavors)
    return ("flavor " if len(names) == 1 else "flavors ") + " and ".join(names)


def filter_unsynced(pod: PodFacts, names: Sequence[str], *,
                    admitted_only: bool = False) -> FilterDecision:
    """Decide without pykueue state (not started or not synced).

    A pod carrying ``kueue.x-k8s.io/queue-name`` or ``kueue.x-k8s.io/podset`` may belong to a
    managed Workload whose flavor is unknown yet: every node is unresolvable with
    ``NOT_SYNCED_REASON``. Any other pod passes everywhere, unless ``admitted_only``
    (``extender.flavor_nodes_for_admitted_only``: which nodes are a flavor's is not known yet
    either).
    """
    if pod.queue_name is None and pod.pod_set is None and not admitted_only:
        return FilterDecision(list(names))
    return FilterDecision([], unresolvable=dict.fromkeys(names, NOT_SYNCED_REASON))


def filter_unadmitted(pod: PodFacts, names: Sequence[str], index: NodeIndex,
                      flavors: tuple[FlavorView, ...]) -> FilterDecision:
    """A GPU pod that no admitted pykueue Workload covers, with
    ``extender.flavor_nodes_for_admitted_only``: every node of a ResourceFlavor (one carrying
    all of a flavor's nodeLabels, ``NodeIndex.flavor_members``) is unresolvable (preempting
    pods there would not help), so that quota-managed GPUs run admitted pods only; other
    nodes pass."""
    members = index.flavor_members(flavors)
    owner = {n: f for f, nodes in members.items() for n in nodes}
    passing = [n for n in names if n not in owner]
    unresolvable = {
        n: f"node(s) of flavor {owner[n]} run only pods of admitted Workloads "
           f"(pykueue extender.flavor_nodes_for_admitted_only): pod {pod.key} has none; "
           "queue it (label kueue.x-k8s.io/queue-name)"
        for n in names if n in owner}
    return FilterDecision(passing, unresolvable=unresolvable)


def withhold(names: Sequence[str], why: str) -> FilterDecision:
    """Every node of ``names`` unresolvable: ``node(s) withheld by pykueue: <why>``."""
    reason = f"node(s) withheld by pykueue: {why}"
    return FilterDecision([], unresolvable=dict.fromkeys(names, reason))


def filter_pod(
    pod: PodFacts,
    view: PodWorkloadView | None,
    names: Sequence[str],
    index: NodeIndex,
    flavors: tuple[FlavorView, ...] = (),
) -> FilterDecision:
    """Split the candidate ``names`` into passing, failed and unresolvable nodes.

    ``view``: the pod's Workload (``None``: not managed). ``index``: the nodes known (from the
    Node watch, or built from the request's Node objects). ``flavors``: every ResourceFlavor
    known, only used to say which flavor a rejected node belongs to. Names missing from
    ``index`` fail with an "unknown" reason for admitted pods (they pass for unmanaged ones).
    """
    if view is None:
        return FilterDecision(list(names))
    wl = f"Workload {view.key}"
    if not view.admitted:
        return withhold(names, f"{wl} is not admitted: {view.pending_reason or 'pending'}")
    pod_set = pod.pod_set
    if pod_set is None:
        if len(view.pod_set_flavors) != 1:
            sets = ", ".join(sorted(view.pod_set_flavors)) or "none"
            return withhold(names, f"pod has no label {PODSET_LABEL} and {wl} has podSets {sets}")
        pod_set = next(iter(view.pod_set_flavors))
    assigned = view.pod_set_flavors.get(pod_set)
    if assigned is None:
        return withhold(names, f"podSet {pod_set} of pod {pod.key} is not in {wl}")
    admitted_gpus = view.pod_set_gpus.get(pod_set)
    if admitted_gpus is not None and pod.gpus > admitted_gpus:
        # A pod made under the Job's name, not from its template (the template itself is
        # held to the Workload: admission_mismatch): its admission covers no more.
        return withhold(names, f"pod {pod.key} requests {pod.gpus} GPU(s), more than the "
                               f"{admitted_gpus} a pod of podSet {pod_set} of {wl} was "
                               "admitted with")
    required: dict[str, str] = {}
    label_owner: dict[tuple[str, str], str] = {}
    for f in assigned:
        for k, v in f.node_labels:
            if required.setdefault(k, v) != v:
                return withhold(
                    names,
                    f"{_flavor_list(x.name for x in assigned)} of podSet {pod_set} of {wl} "
                    f"require label {k} to be both {required[k]} and {v}",
                )
            label_owner.setdefault((k, v), f.name)
    selector: Selector = tuple(sorted(required.items()))
    tolerations = pod.tolerations + tuple(t for f in assigned for t in f.tolerations)
    ok = index.schedulable(selector, tolerations)
    if ok.issuperset(names):  # the usual case (the injected nodeSelector narrowed the list)
        return FilterDecision(list(names))
    passing = list(filter(ok.__contains__, names))  # a C-level loop, no Python per node
    target = _flavor_list(f.name for f in assigned)
    failing = set(filterfalse(ok.__contains__, names))
    failed: dict[str, str] = {}
    unknown = failing.difference(index.names())
    if unknown:
        failed.update(
            dict.fromkeys(unknown, f"node(s) unknown to pykueue's node cache; {wl} needs {target}")
        )
        failing.difference_update(unknown)
    # Carry the labels but a hard taint is not tolerated.
    tainted = failing & index.matching(selector)
    if tainted:
        failing -= tainted
        for taint, carriers in index.hard_taints().items():
            part = tainted & carriers
            if part and not any(t.tolerates(taint) for t in tolerations):
                spelled = f"{taint.key}={taint.value}" if taint.value else taint.key
                why = (
                    f"node(s) had untolerated taint {{{spelled}:{taint.effect}}}; "
                    f"pykueue admitted {wl} to {target}"
                )
                failed.update(dict.fromkeys(part, why))
                tainted -= part
    # Nodes of another flavor.
    assigned_names = {f.name for f in assigned}
    for fname, members in index.flavor_members(flavors).items():
        if fname in assigned_names or not failing:
            continue
        part = failing & members
        if part:
            why = f"node(s) belong to flavor {fname}; pykueue admitted {wl} to {target}"
            failed.update(dict.fromkeys(part, why))
            failing -= part
    # The rest lack one of the required labels.
    for k, v in selector:
        if not failing:
            break
        part = failing - index.matching(((k, v),))
        if part:
            why = (
                f"node(s) lack label {k}={v} of flavor {label_owner[(k, v)]}, "
                f"to which pykueue admitted {wl}"
            )
            failed.update(dict.fromkeys(part, why))
            failing -= part
    return FilterDecision(passing, failed)


# ------------------------------------------------------------------------------ prioritize


def gpu_scores(pod_gpus: int, names: Sequence[str], free_gpus: Mapping[str, int]) -> dict[str, int]:
    """Score each node 0-10 for packing GPUs: ``10 - left`` where ``left`` is the free GPUs
    (count) the node would keep after placing the pod; 0 when ``left`` > 10, when the pod does
    not fit (``left`` < 0) or when the node is missing from ``free_gpus``.

    ``free_gpus``: node name -> allocatable GPUs minus GPUs requested by pods bound there.
    """
    table = _SCORE_BY_LEFT
    free = free_gpus.get
    return {n: table.get(free(n, -1) - pod_gpus, 0) for n in names}

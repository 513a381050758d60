"""HTTP adapter: kube-scheduler extender (``POST /scheduler/filter``, ``/scheduler/prioritize``).

Thin: parse ``ExtenderArgs`` -> facts -> ``app.extender.placement`` -> ``ExtenderFilterResult``
/ ``HostPriorityList`` (Go field casing, controlplane.md 5.2; models in
``app.models.extender``). Both request modes: ``NodeNames`` (``nodeCacheCapable: true``; nodes
come from the Node watch behind ``app.state.extender_state``) and full ``Nodes`` objects
(``nodeCacheCapable: false``; passing objects are echoed byte for byte).

Answers: malformed body -> HTTP 400 with a JSON ``detail``; everything else -> HTTP 200, never
5xx. An unexpected bug answers 200 with ``Error`` set (filter: the scheduler fails this attempt
and retries the pod) or an empty list (prioritize: the scheduler ignores the extender's scores).

Without ``app.state.extender_state`` (pykueue starting) or before it has synced, the extender
cannot know a pod's Workload: pods carrying ``kueue.x-k8s.io/queue-name`` or
``kueue.x-k8s.io/podset`` get every node as unresolvable ("pykueue is starting: state not
synced"), other pods pass unchanged. Chosen so a restart never lets an admitted Job's pod land
outside its flavor, while unmanaged pods are never held up by pykueue.

Callers: with ``Settings.server.client_ca_file`` set, both routes answer
only a TLS client certificate that chains to that CA (checked in the handshake,
``app.serving``) and whose subject common name is one of ``Settings.extender.client_names``
(default ``system:kube-scheduler``; kube-scheduler presents it with the extender's
``tlsConfig.certFile``/``keyFile``); anyone else gets 403 before the body is read. Without a
client CA the routes are open to whoever reaches the port (the NetworkPolicy is the fence).

Latency is observed in the histogram ``pykueue_extender_request_duration_seconds`` (labels
``verb``: filter/prioritize, ``mode``: names/nodes/invalid) in the app's registry
(``app.state.metrics_registry``, exposed at ``/metrics``); should that registry already hold
the name, in a registry of its own (``app.state.extender_metrics_registry``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import msgspec
from fastapi import APIRouter, Request, Response
from prometheus_client import CollectorRegistry, Histogram

from app.api.callers import refuse_unless_named
from app.api.health import metrics_registry
from app.extender.nodestore import ExtenderState
from app.extender.placement import (
    ExtenderInputError,
    FilterDecision,
    NodeFacts,
    NodeIndex,
    PodFacts,
    filter_pod,
    filter_unadmitted,
    filter_unsynced,
    gpu_scores,
    make_node_facts,
    pod_facts,
    withhold,
)
from app.models.extender import ExtenderFilterResult, HostPriorityList

log = logging.getLogger(__name__)
router = APIRouter(prefix="/scheduler", tags=["extender"])

DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
HISTOGRAM_NAME = "pykueue_extender_request_duration_seconds"
_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 2.0)
_JSON = "application/json"

# ------------------------------------------------------------------------------------ wire
# The wire of app.models.extender as msgspec structs for the hot path: decoding skips the Node
# fields the rules do not read, and passing Node objects are echoed as the raw bytes the
# scheduler sent (msgspec.Raw), never re-encoded. Field names are the Go ones; a unit test
# keeps them equal to the pydantic models' fields.


class _WireTaint(msgspec.Struct):
    key: str = ""
    value: str = ""
    effect: str = ""


class _WireNodeMeta(msgspec.Struct):
    name: str = ""
    labels: dict[str, str] = {}


class _WireNodeSpec(msgspec.Struct):
    taints: list[_WireTaint] = []


class _WireNodeStatus(msgspec.Struct):
    allocatable: dict[str, str] = {}


class _WireNode(msgspec.Struct):
    """The fields of a core/v1 Node the rules read; the rest is skipped unparsed."""

    metadata: _WireNodeMeta = msgspec.field(default_factory=_WireNodeMeta)
    spec: _WireNodeSpec = msgspec.field(default_factory=_WireNodeSpec)
    status: _WireNodeStatus = msgspec.field(default_factory=_WireNodeStatus)


class _WireNodeList(msgspec.Struct, omit_defaults=True):
    """``NodeList``: items kept raw."""

    metadata: dict[str, Any] | None = None
    items: list[msgspec.Raw] | None = None


class _WireArgs(msgspec.Struct):
    """``ExtenderArgs``. ``NodeNames`` stays raw (``_NamesCache`` decodes it)."""

    Pod: dict[str, Any]
    Nodes: _WireNodeList | None = None
    NodeNames: msgspec.Raw = msgspec.Raw()


class _WireFilterResult(msgspec.Struct):
    """``ExtenderFilterResult``."""

    Nodes: _WireNodeList | None
    NodeNames: list[str] | None
    FailedNodes: dict[str, str]
    FailedAndUnresolvableNodes: dict[str, str]
    Error: str = ""


class _WireHostPriority(msgspec.Struct):
    """``HostPriority``."""

    Host: str
    Score: int


_decode_args = msgspec.json.Decoder(_WireArgs).decode
_decode_names = msgspec.json.Decoder(list[str] | None).decode
_decode_node = msgspec.json.Decoder(_WireNode).decode
_encode = msgspec.json.Encoder().encode
_READ_ERRORS = (ExtenderInputError, msgspec.DecodeError)  # ValidationError is a DecodeError

# -------------------------------------------------------------------------------- helpers


def _new_histogram(registry: CollectorRegistry) -> Histogram:
    return Histogram(
        HISTOGRAM_NAME,
        "Latency of kube-scheduler extender requests served by pykueue.",
        ["verb", "mode"],
        registry=registry,
        buckets=_BUCKETS,
    )


def _histogram(request: Request) -> Histogram:
    """The latency histogram of this app, registered on first use in the app's registry
    (``app.api.health.metrics_registry``, served at ``/metrics``)."""
    state = request.app.state
    hist = getattr(state, "extender_histogram", None)
    if hist is None:
        try:
            hist = _new_histogram(metrics_registry(request.app))
        except ValueError:  # the name is taken there (a registry shared by two apps)
            state.extender_metrics_registry = CollectorRegistry()
            hist = _new_histogram(state.extender_metrics_registry)
        state.extender_histogram = hist
    return hist


def _gpu_resource(request: Request) -> str:
    settings = getattr(request.app.state, "settings", None)
    return getattr(getattr(settings, "extender", None), "gpu_resource", DEFAULT_GPU_RESOURCE)


def _extender_state(request: Request) -> ExtenderState | None:
    """The reconciler's state when present and synced, else ``None``."""
    state = getattr(request.app.state, "extender_state", None)
    if state is None or not state.synced():
        return None
    return state


def _json(content: Any, status_code: int = 200) -> Response:
    return Response(_encode(content), status_code=status_code, media_type=_JSON)


class _Parsed:
    """A parsed request: the pod, the candidate names, and in full mode the raw Node objects
    by name and a ``NodeIndex`` of them."""

    __slots__ = ("pod", "names", "objects", "index")

    def __init__(
        self,
        pod: PodFacts,
        names: list[str],
        objects: dict[str, msgspec.Raw] | None = None,
        index: NodeIndex | None = None,
    ) -> None:
        self.pod = pod
        self.names = names
        self.objects = objects
        self.index = index

    @property
    def mode(self) -> str:
        return "names" if self.objects is None else "nodes"


# Bytes counted per cache entry on top of its key: the dict slot, the bytes object header and
# the NodeFacts. tracemalloc measures about 280 bytes per entry in all for a node with only a
# name; 600 leaves room for label and taint tuples. Without it a flood of tiny distinct nodes
# fills memory while the key bytes stay under the bound.
_ENTRY_OVERHEAD = 600


class _FullModeCache:
    """Facts of full-mode Node objects keyed by their exact JSON bytes, and the last
    ``NodeIndex`` built from them.

    kube-scheduler sends the same Node objects (same bytes) to every filter call until a node
    changes, so a 5,000-node request costs one ``bytes`` copy + dict lookup per node instead of
    a decode and a ``NodeFacts`` (and, when every node is the same as last time, no new
    ``NodeIndex``: its per-selector answers stay cached). The facts are a pure function of the
    bytes and ``gpu_resource``, so a hit is exact.

    Bounded twice, so that tiny distinct Nodes cannot grow it without limit: at most
    ``max_entries`` entries and at most ``max_bytes`` bytes, counting each entry as its key
    length plus ``_ENTRY_OVERHEAD``. Past either bound the cache starts over (the next request
    of an unchanged cluster refills it), so its memory stays below about ``max_bytes``.
    """

    __slots__ = ("gpu_resource", "max_bytes", "max_entries", "_facts", "_size", "_last_facts",
                 "_last_index")

    def __init__(self, gpu_resource: str, max_bytes: int = 64 * 1024 * 1024,
                 max_entries: int = 16_384) -> None:
        if max_bytes < 1 or max_entries < 1:
            raise ValueError("max_bytes and max_entries must be >= 1")
        self.gpu_resource = gpu_resource
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self._facts: dict[bytes, NodeFacts] = {}
        self._size = 0
        self._last_facts: list[NodeFacts] = []
        self._last_index: NodeIndex | None = None

    def __len__(self) -> int:
        return len(self._facts)

    @property
    def size_bytes(self) -> int:
        """Bytes accounted to the entries (key lengths + ``_ENTRY_OVERHEAD`` each)."""
        return self._size

    def facts(self, raw: msgspec.Raw, i: int) -> NodeFacts:
        """``NodeFacts`` of ``Nodes.items[i]``. Raises ``ExtenderInputError``."""
        key = bytes(raw)
        hit = self._facts.get(key)
        if hit is not None:
            return hit
        try:
            n = _decode_node(key)
        except msgspec.DecodeError as exc:
            raise ExtenderInputError(f"Nodes.items[{i}]: {exc}") from exc
        name = n.metadata.name
        if not name:
            raise ExtenderInputError(f"Nodes.items[{i}].metadata.name must be a non-empty string")
        taints = tuple((t.key, t.value, t.effect) for t in n.spec.taints) if n.spec.taints else ()
        gpu = n.status.allocatable.get(self.gpu_resource)
        facts = make_node_facts(name, n.metadata.labels, taints, gpu, self.gpu_resource)
        cost = len(key) + _ENTRY_OVERHEAD
        if cost > self.max_bytes:
            return facts  # larger than the whole cache: answer it, keep nothing
        if self._size + cost > self.max_bytes or len(self._facts) >= self.max_entries:
            self._facts.clear()
            self._size = 0
        self._facts[key] = facts
        self._size += cost
        return facts

    def index(self, facts: list[NodeFacts]) -> NodeIndex:
        """A ``NodeIndex`` of ``facts``: the previous one when the nodes are the same objects
        in the same order (identity comparison first, so this is cheap)."""
        if self._last_index is None or facts != self._last_facts:
            self._last_facts = facts
            self._last_index = NodeIndex(facts)
        return self._last_index


_full_mode_caches: dict[str, _FullModeCache] = {}


def _full_mode_cache(gpu_resource: str) -> _FullModeCache:
    cache = _full_mode_caches.get(gpu_resource)
    if cache is None:
        cache = _full_mode_caches[gpu_resource] = _FullModeCache(gpu_resource)
    return cache


class _NamesCache:
    """The last ``NodeNames`` array: its exact bytes and the decoded list.

    kube-scheduler sends the same candidate list for pod after pod (the pods of one Job, until
    a node fills up); reusing the decoded strings skips the decode and, since Python caches a
    string's hash, the hashing of every name in the set lookups that follow. The list is
    shared between requests: read-only.
    """

    __slots__ = ("raw", "names")

    def __init__(self) -> None:
        self.raw = b""
        self.names: list[str] | None = None

    def decode(self, raw: msgspec.Raw) -> list[str] | None:
        """``NodeNames`` as a list (None when absent or null). Raises ``ExtenderInputError``."""
        key = bytes(raw)
        if key == self.raw:
            return self.names
        if not key:
            return None
        try:
            names = _decode_names(key)
        except msgspec.DecodeError as exc:
            raise ExtenderInputError(f"NodeNames: {exc}") from exc
        self.raw, self.names = key, names
        return names


_names_cache = _NamesCache()


def _parse(body: bytes, gpu_resource: str) -> _Parsed:
    """Parse ``ExtenderArgs``. Raises ``ExtenderInputError`` or ``msgspec.DecodeError``."""
    args = _decode_args(body)
    pod = pod_facts(args.Pod, gpu_resource)
    names = _names_cache.decode(args.NodeNames)
    if names is not None:
        return _Parsed(pod, names)
    if args.Nodes is None:
        raise ExtenderInputError("ExtenderArgs needs NodeNames or Nodes")
    cache = _full_mode_cache(gpu_resource)
    objects: dict[str, msgspec.Raw] = {}
    facts: list[NodeFacts] = []
    for i, raw in enumerate(args.Nodes.items or ()):
        f = cache.facts(raw, i)
        facts.append(f)
        objects[f.name] = raw
    return _Parsed(pod, list(objects), objects, cache.index(facts))


async def _read(request: Request) -> _Parsed | Response:
    """The parsed request, or a 400 response saying what is malformed."""
    try:
        return _parse(await request.body(), _gpu_resource(request))
    except Exception as exc:  # anything unreadable in the request is the caller's error
        if not isinstance(exc, _READ_ERRORS):
            log.warning("unreadable extender request", exc_info=exc)
        return _json({"detail": f"malformed ExtenderArgs: {exc}"}, 400)


def _decide(req: _Parsed, state: ExtenderState | None,
            admitted_only: bool = False, count_bound: bool = False) -> FilterDecision:
    """``admitted_only``: ``extender.flavor_nodes_for_admitted_only`` (``filter_unadmitted``
    for a pod no pykueue Workload view covers and ``pod_admitted`` does not vouch for).
    ``count_bound``: ``jobs.pod_replacement_policy: Failed``: a pod of an admitted batch Job
    that has as many GPU pods bound and not terminal (those being deleted included) as its
    admission's pods gets no node, whoever made it (brk33b B1: a tenant's own replacement
    beside its deleted pod)."""
    if state is None:
        return filter_unsynced(req.pod, req.names, admitted_only=admitted_only)
    pod = req.pod
    view = (state.workload_for_pod(pod.namespace, pod.job_name, pod.job_uid)
            if pod.job_name else None)
    index = req.index if req.index is not None else state.node_index()
    why = state.withheld(pod)
    if why:
        return withhold(req.names, why)
    if count_bound and view is not None and view.admitted and pod.job_uid:
        admitted, bound = sum(view.pod_set_counts.values()), state.bound_pods(pod.job_uid)
        if admitted and bound >= admitted:
            return withhold(req.names, f"Job {pod.namespace}/{pod.job_name} has {bound} pod(s) "
                                       f"bound and not terminal (being deleted included), the "
                                       f"{admitted} its admission gives "
                                       "(jobs.pod_replacement_policy: Failed)")
    if view is None and admitted_only and not state.pod_admitted(pod):
        return filter_unadmitted(pod, req.names, index, state.flavors())
    return filter_pod(pod, view, req.names, index, state.flavors())


def _free_gpus(req: _Parsed, state: ExtenderState | None) -> Mapping[str, int]:
    """Free GPUs per candidate node: the watched nodes (names mode), or the request's Node
    objects minus the GPUs the state knows are used there (full mode)."""
    if req.index is None:
        return state.free_gpus() if state is not None else {}
    used = state.gpu_used if state is not None else (lambda _name: 0)
    free: dict[str, int] = {}
    for name in req.names:
        facts = req.index.get(name)
        if facts is not None:
            free[name] = facts.gpus - used(name)
    return free


_BAD_REQUEST = {400: {"description": "malformed ExtenderArgs", "content": {_JSON: {}}},
                403: {"description": "not kube-scheduler's client certificate",
                      "content": {_JSON: {}}}}


def _refuse_caller(request: Request) -> Response | None:
    """403 unless the caller may use the extender (see the module doc); None when it may."""
    settings = getattr(request.app.state, "settings", None)
    if settings is None or settings.server.client_ca_file is None:
        return None
    return refuse_unless_named(request, settings.extender.client_names,
                               "the scheduler extender (kube-scheduler's)")

# -------------------------------------------------------------------------------- routes


async def _serve(
    request: Request, verb: str, answer: Callable[[Request, _Parsed], Response]
) -> Response:
    """Read the request (400 when malformed), ``answer`` it, and time it in the histogram."""
    refused = _refuse_caller(request)
    if refused is not None:
        return refused
    start = time.perf_counter()
    mode = "invalid"
    try:
        req = await _read(request)
        if isinstance(req, Response):
            return req
        mode = req.mode
        return answer(request, req)
    finally:
        _histogram(request).labels(verb, mode).observe(time.perf_counter() - start)


def _answer_filter(request: Request, req: _Parsed) -> Response:
    try:
        settings = getattr(request.app.state, "settings", None)
        d = _decide(req, _extender_state(request), settings is not None
                    and settings.extender.flavor_nodes_for_admitted_only,
                    settings is not None and settings.jobs.pod_replacement_policy == "Failed")
    except Exception as exc:  # never 5xx: answer an Error the scheduler reports
        log.exception("extender filter failed for pod %s", req.pod.key)
        why = f"pykueue extender internal error: {type(exc).__name__}: {exc}"
        return _json(_WireFilterResult(None, None, {}, {}, why))
    if req.objects is None:
        return _json(_WireFilterResult(None, d.passing, d.failed, d.unresolvable))
    objects = req.objects
    items = _WireNodeList(items=[objects[n] for n in d.passing])
    return _json(_WireFilterResult(items, None, d.failed, d.unresolvable))


def _answer_prioritize(request: Request, req: _Parsed) -> Response:
    state = getattr(request.app.state, "extender_state", None)
    try:
        scores = gpu_scores(req.pod.gpus, req.names, _free_gpus(req, state))
    except Exception:  # the scheduler ignores prioritize failures; give no scores
        log.exception("extender prioritize failed for pod %s", req.pod.key)
        return _json([])
    return _json([_WireHostPriority(h, s) for h, s in scores.items()])


@router.post(
    "/filter",
    responses={200: {"model": ExtenderFilterResult}, **_BAD_REQUEST},
    response_class=Response,
)
async def filter_nodes(request: Request) -> Response:
    """``ExtenderArgs`` -> ``ExtenderFilterResult``; passing nodes are returned explicitly
    (``NodeNames`` or ``Nodes.items``, as the request came)."""
    return await _serve(request, "filter", _answer_filter)


@router.post(
    "/prioritize",
    responses={200: {"model": HostPriorityList}, **_BAD_REQUEST},
    response_class=Response,
)
async def prioritize_nodes(request: Request) -> Response:
    """``ExtenderArgs`` -> ``HostPriorityList``: 0-10 per node, GPU bin packing."""
    return await _serve(request, "prioritize", _answer_prioritize)

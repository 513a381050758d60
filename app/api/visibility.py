"""HTTP adapter: Kueue's visibility API, served to kube-apiserver's aggregation layer.

Kueue v0.17.1 serves ``visibility.kueue.x-k8s.io`` (v1beta2, and v1beta1 with the same shape)
from an aggregated API server on a port of its own (8082); pykueue serves the same paths from
a listener of its own too (``visibility.port``, default 8082, ``app.serving``; the main port
does not serve them), registered with the APIServices ``v1beta2.visibility.kueue.x-k8s.io``
and ``v1beta1...`` (manifests/visibility):

- ``GET /apis/visibility.kueue.x-k8s.io/{v}/clusterqueues/{name}/pendingworkloads``
- ``GET /apis/visibility.kueue.x-k8s.io/{v}/namespaces/{ns}/localqueues/{name}/pendingworkloads``

Query ``offset`` (default 0) and ``limit`` (default 1000; 0 means the default, as Kueue's
defaulting). The answer is a ``PendingWorkloadsSummary`` (``kind``, ``apiVersion``,
``metadata: {}``, ``items``), each item a ``PendingWorkload``: ``metadata`` (``name``,
``namespace``, ``creationTimestamp``, ``ownerReferences`` with apiVersion/kind/name/uid),
``priority``, ``localQueueName``, ``positionInClusterQueue``, ``positionInLocalQueue``
(0-based, Kueue ``apis/visibility/v1beta2/types.go``). A ClusterQueue list is the slice
``[offset, offset+limit)`` of its pending Workloads in admission order; a LocalQueue list the
same slice of that queue's own Workloads (``positionInLocalQueue`` = offset + index). Positions
in a LocalQueue count Workloads of the same namespace and name; Kueue's counts by name only, so
two namespaces' LocalQueues of one name share positions and each other's Workloads there
(pykueue's departure: a LocalQueue's list never shows another namespace's Workloads).

Also served: the discovery documents ``/apis/visibility.kueue.x-k8s.io`` (APIGroup) and
``/apis/visibility.kueue.x-k8s.io/{v}`` (APIResourceList, which kube-apiserver's discovery
reads when ``/apis`` is not an aggregated discovery document: here it is 404), and minimal
OpenAPI documents at ``/openapi/v2`` and ``/openapi/v3`` (no schemas: kube-apiserver's
OpenAPI aggregation then merges nothing, ``kubectl explain`` knows no visibility kinds).

Who may call (as an aggregated API server must, Kubernetes "request header" authentication,
``app.api.requestheader``): the request's TLS client certificate must be issued by the
request-header CA (kube-apiserver's front-proxy CA; ``RequestHeaderAuth``) and, when allowed
names are set, its common name one of them; the user is then read from ``X-Remote-User`` /
``X-Remote-Group`` / ``X-Remote-Extra-*``. Otherwise 401. Pending lists then need a
SubjectAccessReview (through ``app.state.access_reviewer``, ``app.api.access``): ``get`` on
``clusterqueues/pendingworkloads`` (cluster scope) or ``localqueues/pendingworkloads`` in the
namespace, in ``visibility.kueue.x-k8s.io``, as Kueue's roles grant; else 403. Discovery and
OpenAPI need the certificate and a user only (kube-apiserver reads them as
``system:kube-aggregator``). Reviews are rate-limited per user, not per address: every request
comes from kube-apiserver. Errors are Kubernetes ``Status`` objects (401, 403, 404, 400 for a
bad limit or offset, 429, 503 while pykueue starts or cannot review).

State read: ``app.state.visibility_auth`` (``RequestHeaderAuth`` or None: 503),
``app.state.cluster`` through ``app.api.status.cluster_view``, and
``app.state.workload_store`` (the Workload informer's store, for creationTimestamp and
ownerReferences; without it the core's creation time and no owners).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse

from app.api.access import (
    VISIBILITY_GROUP,
    AccessReviewer,
    ResourceAccess,
    ReviewUnavailable,
    TooManyReviews,
    UserInfo,
    local_queue_pending_workloads_access,
    pending_workloads_access,
)
from app.api.requestheader import RequestHeaderAuth, Unauthenticated
from app.api.status import cluster_view, rfc3339
from app.controllers.cluster_view import ClusterView, local_queue_positions_of
from app.core.quota_state import PendingWorkloadInfo
from app.core.types import ClusterQueueName, WorkloadKey

VERSIONS = ("v1beta2", "v1beta1")  # preferred first
DEFAULT_LIMIT = 1000
PREFIX = f"/apis/{VISIBILITY_GROUP}"

router = APIRouter(include_in_schema=False)


# ------------------------------------------------------------------------------ Status


class StatusError(Exception):
    """An answer as a Kubernetes ``Status`` (``meta/v1``): ``code``, ``reason``, ``message``,
    optional ``details`` and response ``headers``."""

    def __init__(self, code: int, reason: str, message: str,
                 details: Mapping[str, Any] | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.details = dict(details or {})
        self.headers = dict(headers or {})

    def response(self) -> JSONResponse:
        body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                "status": "Failure", "message": self.message,
                                "reason": self.reason}
        if self.details:
            body["details"] = self.details
        body["code"] = self.code
        return JSONResponse(body, status_code=self.code, headers=self.headers)


def _not_found(kind: str, name: str) -> StatusError:
    return StatusError(404, "NotFound", f'{kind}.{VISIBILITY_GROUP} "{name}" not found',
                       {"name": name, "group": VISIBILITY_GROUP, "kind": kind})


def _user(request: Request) -> UserInfo:
    auth: RequestHeaderAuth | None = getattr(request.app.state, "visibility_auth", None)
    if auth is None:
        raise StatusError(503, "ServiceUnavailable", "the visibility API is not configured: "
                          "no request-header CA (see docs/status.md)")
    tls = (request.scope.get("extensions") or {}).get("tls") or {}
    try:
        return auth.authenticate(tls.get("client_cert_chain") or [], request.headers)
    except Unauthenticated as exc:
        raise StatusError(401, "Unauthorized", str(exc)) from exc


async def _authorize(request: Request, user: UserInfo, access: ResourceAccess,
                     kind: str, name: str) -> None:
    reviewer: AccessReviewer | None = getattr(request.app.state, "access_reviewer", None)
    if reviewer is None:
        raise StatusError(503, "ServiceUnavailable", "access review is not configured")
    try:
        decision = await reviewer.authorize(user, access, client=f"user:{user.username}")
    except ReviewUnavailable as exc:
        raise StatusError(503, "ServiceUnavailable", f"cannot check access now: {exc}") from exc
    except TooManyReviews as exc:
        raise StatusError(429, "TooManyRequests", str(exc), headers={
            "Retry-After": str(max(1, math.ceil(exc.retry_after)))}) from exc
    if not decision.allowed:
        scope = (f'in the namespace "{access.namespace}"' if access.namespace is not None
                 else "at the cluster scope")
        why = f": {decision.reason}" if decision.reason else ""
        raise StatusError(
            403, "Forbidden",
            f'{kind}.{VISIBILITY_GROUP} "{name}" is forbidden: User "{user.username}" cannot '
            f'get resource "{access.rbac_resource}" in API group "{VISIBILITY_GROUP}" '
            f"{scope}{why}", {"name": name, "group": VISIBILITY_GROUP, "kind": kind})


def _view(request: Request) -> ClusterView:
    try:
        return cluster_view(request)
    except HTTPException as exc:
        raise StatusError(exc.status_code, "ServiceUnavailable", str(exc.detail)) from exc


def _version(version: str) -> str:
    if version not in VERSIONS:
        raise StatusError(404, "NotFound", f"the server could not find the requested resource "
                          f"(group version {VISIBILITY_GROUP}/{version} is not served)")
    return version


# ------------------------------------------------------------------------------ paging


@dataclass(frozen=True, slots=True)
class Page:
    """``offset`` and ``limit`` of a pending list (Kueue ``PendingWorkloadOptions``)."""

    offset: int = 0
    limit: int = DEFAULT_LIMIT

    @classmethod
    def parse(cls, query: Mapping[str, str]) -> Page:
        """From the query; a missing or 0 ``limit`` is 1000. 400 ``StatusError`` for a value
        that is not a non-negative integer."""
        values = {}
        for key in ("offset", "limit"):
            raw = query.get(key)
            if raw is None or raw == "":
                values[key] = 0
                continue
            # Unsigned decimal digits only: int() alone would also take "1_000" and spaces,
            # and Kueue's own server fails on a negative limit rather than refusing it. More
            # than an int64's 19 digits is out of range before int() (whose 4,300-digit
            # limit raises ValueError) is asked.
            digits = raw.lstrip("0") or "0"
            ok = raw.isascii() and raw.isdigit() and len(digits) <= 19
            values[key] = int(digits) if ok else -1
            if values[key] < 0 or values[key] > 2**63 - 1:
                shown = raw if len(raw) <= 40 else f"{raw[:40]}..."
                raise StatusError(400, "BadRequest", f'{key}: Invalid value: "{shown}": must '
                                  "be a non-negative 64-bit integer")
        return cls(values["offset"], values["limit"] or DEFAULT_LIMIT)


# ------------------------------------------------------------------------------ summaries

# (creationTimestamp as RFC 3339, ownerReferences) of a Workload, by key.
MetaOf = Callable[[WorkloadKey], tuple[str | None, list[dict[str, Any]]]]


def pending_workload(entry: PendingWorkloadInfo, position_in_local_queue: int,
                     meta_of: MetaOf) -> dict[str, Any]:
    """One ``PendingWorkload`` (Kueue ``apis/visibility/v1beta2``)."""
    namespace, name = entry.workload.split("/", 1)
    created, owners = meta_of(entry.workload)
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if created:
        meta["creationTimestamp"] = created
    if owners:
        meta["ownerReferences"] = owners
    return {"metadata": meta, "priority": entry.priority, "localQueueName": entry.local_queue,
            "positionInClusterQueue": entry.position,
            "positionInLocalQueue": position_in_local_queue}


def summary(version: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    """A ``PendingWorkloadsSummary`` of ``items``."""
    return {"kind": "PendingWorkloadsSummary",
            "apiVersion": f"{VISIBILITY_GROUP}/{version}", "metadata": {}, "items": items}


def cluster_queue_items(entries: Sequence[PendingWorkloadInfo], page: Page,
                        meta_of: MetaOf) -> list[dict[str, Any]]:
    """The ``[offset, offset+limit)`` slice of a ClusterQueue's pending list (admission
    order); LocalQueue positions counted over the list from its start."""
    head = list(entries[:page.offset + page.limit])
    lqpos = local_queue_positions_of(head)
    return [pending_workload(e, lqpos[e.workload], meta_of) for e in head[page.offset:]]


def local_queue_items(chunk: Sequence[PendingWorkloadInfo], page: Page,
                      meta_of: MetaOf) -> list[dict[str, Any]]:
    """The items of ``chunk``, the ``[offset, offset+limit)`` slice of one LocalQueue's
    pending Workloads (only that queue's, in the ClusterQueue's order)."""
    return [pending_workload(e, page.offset + i, meta_of) for i, e in enumerate(chunk)]


def store_meta_of(request: Request, view: ClusterView) -> MetaOf:
    """``MetaOf`` from ``app.state.workload_store`` (the Workload as stored: its
    creationTimestamp string, ownerReferences reduced to apiVersion/kind/name/uid as Kueue's),
    else from the core (its creation time, no owners)."""
    store = getattr(request.app.state, "workload_store", None)

    def meta_of(key: WorkloadKey) -> tuple[str | None, list[dict[str, Any]]]:
        obj = store.get(key) if store is not None else None
        if obj is not None:
            meta = obj.get("metadata") or {}
            owners = [{k: ref[k] for k in ("apiVersion", "kind", "name", "uid") if k in ref}
                      for ref in meta.get("ownerReferences") or [] if isinstance(ref, dict)]
            return meta.get("creationTimestamp"), owners
        wl = view.cluster.domain_workload(key)
        return (rfc3339(wl.creation) if wl is not None else None), []

    return meta_of


# ------------------------------------------------------------------------------ endpoints


def _answer(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn ``StatusError`` raised by an endpoint into its ``Status`` response."""

    @functools.wraps(fn)
    async def wrapped(*args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(*args, **kwargs)
        except StatusError as exc:
            return exc.response()

    return wrapped


def _group_version(version: str) -> dict[str, str]:
    return {"groupVersion": f"{VISIBILITY_GROUP}/{version}", "version": version}


def api_group() -> dict[str, Any]:
    """The ``APIGroup`` discovery document."""
    return {"kind": "APIGroup", "apiVersion": "v1", "name": VISIBILITY_GROUP,
            "versions": [_group_version(v) for v in VERSIONS],
            "preferredVersion": _group_version(VERSIONS[0])}


def api_resource_list(version: str) -> dict[str, Any]:
    """The ``APIResourceList`` of one version, as Kueue's server lists it: the queues (no
    verbs of their own) and their ``pendingworkloads`` subresources (``get``)."""
    def res(name: str, singular: str, namespaced: bool, verbs: list[str]) -> dict[str, Any]:
        return {"name": name, "singularName": singular, "namespaced": namespaced,
                "kind": "PendingWorkloadsSummary", "verbs": verbs}

    return {"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": f"{VISIBILITY_GROUP}/{version}",
            "resources": [res("clusterqueues", "clusterqueue", False, []),
                          res("clusterqueues/pendingworkloads", "", False, ["get"]),
                          res("localqueues", "localqueue", True, []),
                          res("localqueues/pendingworkloads", "", True, ["get"])]}


@router.get(PREFIX)
@_answer
async def get_api_group(request: Request) -> JSONResponse:
    _user(request)
    return JSONResponse(api_group())


@router.get(PREFIX + "/{version}")
@_answer
async def get_api_resources(request: Request, version: str) -> JSONResponse:
    _user(request)
    return JSONResponse(api_resource_list(_version(version)))


@router.get("/openapi/v2")
@_answer
async def get_openapi_v2(request: Request) -> JSONResponse:
    _user(request)
    return JSONResponse({"swagger": "2.0", "info": {"title": "pykueue visibility",
                                                    "version": VERSIONS[0]}, "paths": {}})


@router.get("/openapi/v3")
@_answer
async def get_openapi_v3(request: Request) -> JSONResponse:
    _user(request)
    return JSONResponse({"paths": {}})


@router.get(PREFIX + "/{version}/clusterqueues/{name}/pendingworkloads")
@_answer
async def cluster_queue_pending(request: Request, version: str, name: str) -> JSONResponse:
    _version(version)
    user = _user(request)
    await _authorize(request, user, pending_workloads_access(name), "clusterqueues", name)
    page = Page.parse(request.query_params)
    view = _view(request)
    # The head of the list up to the page's end: LocalQueue positions count from the head.
    entries = view.pending(ClusterQueueName(name), 0, page.offset + page.limit)
    if entries is None:
        raise _not_found("clusterqueue", name)
    items = cluster_queue_items(entries, page, store_meta_of(request, view))
    return JSONResponse(summary(version, items))


@router.get(PREFIX + "/{version}/namespaces/{namespace}/localqueues/{name}/pendingworkloads")
@_answer
async def local_queue_pending(request: Request, version: str, namespace: str,
                              name: str) -> JSONResponse:
    _version(version)
    user = _user(request)
    await _authorize(request, user, local_queue_pending_workloads_access(namespace, name),
                     "localqueues", name)
    page = Page.parse(request.query_params)
    view = _view(request)
    found = view.local_queue_pending(namespace, name, page.offset, page.offset + page.limit)
    if found is None:
        raise _not_found("localqueue", name)
    items = local_queue_items(found[1], page, store_meta_of(request, view))
    return JSONResponse(summary(version, items))

"""HTTP adapter: the queue status API (thin: authorise -> read the view -> build the response).

Endpoints (JSON, models in ``app.models.status``; OpenAPI at ``/docs`` when
``Settings.server.openapi`` is on):

- ``GET /api/v1/clusterqueues``                       every ClusterQueue
- ``GET /api/v1/clusterqueues/{name}``                one ClusterQueue
- ``GET /api/v1/clusterqueues/{name}/pending``        its pending Workloads, admission order
- ``GET /api/v1/cohorts``                             every cohort of the tree
- ``GET /api/v1/cohorts/{name}``                      one cohort
- ``GET /api/v1/namespaces/{ns}/localqueues``         the namespace's LocalQueues
- ``GET /api/v1/namespaces/{ns}/localqueues/{name}/pending``  pending Workloads of one
- ``GET /api/v1/namespaces/{ns}/workloads/{name}``    where one Workload stands

Pending lists are paged: ``limit`` (default 100, 1..1000) and ``continue`` (the opaque
``metadata.continue`` of the previous page). A page resumes after the last Workload it
returned when that Workload is still pending, else at the same offset; Workloads that move
between pages may be skipped or repeated (there is no snapshot, as in Kueue's visibility API).

Pending Workloads carry ``eta`` (``app.core.eta`` through ``app.state.eta``, the scheduling
loop's ``EtaBoard``; absent when ETAs are disabled).

Served from memory, never a list call per request: ``app.state.cluster`` is the reconciler's
admission core (``app.controllers.manager.Manager.cluster``), read through
``app.controllers.cluster_view.ClusterView`` on the event loop (every handler is ``async``).
Optional ``app.state.cluster_ready``: a ``() -> (ok, message)`` callable; while not ok the
API answers 503 (the core is still being filled from the first list).

Access (``app.api.access``): ``Authorization: Bearer <token>`` checked by
``app.state.access_reviewer`` (TokenReview + SubjectAccessReview, cached). ClusterQueue views
need ``get`` on ``clusterqueues.kueue.x-k8s.io`` (with the name when one is in the path), the
cohort views ``get`` on ``cohorts.kueue.x-k8s.io`` (cluster-scoped, as ClusterQueues), the
ClusterQueue pending list ``get`` on ``clusterqueues/pendingworkloads`` in
``visibility.kueue.x-k8s.io`` instead (Kueue's visibility API permission), namespace views
``get`` on ``localqueues.kueue.x-k8s.io`` in that namespace. Answers: 401 (no token, or the
token is rejected), 403 (naming the permission that is missing), 503 (no
reviewer configured, or the API server cannot review now), 429 (this client address sent too
many requests needing a review; ``Retry-After`` says when to retry), then 404 / 400 / 422.
Errors are FastAPI's ``{"detail": "<message>"}``.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import time
from collections.abc import Awaitable, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, HTTPException, Query, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.api.access import (
    AccessReviewer,
    ResourceAccess,
    ReviewUnavailable,
    TooManyReviews,
    UserInfo,
    cluster_queue_access,
    cohort_access,
    local_queue_access,
    pending_workloads_access,
)
from app.controllers.cluster_view import (
    ClusterQueueView,
    ClusterView,
    CohortView,
    LocalQueueView,
    PendingView,
    local_queue_positions_of,
)
from app.controllers.queue_status import weighted_share
from app.core.decisions import QuotaShortfall as CoreShortfall
from app.core.eta import Eta as CoreEta
from app.core.quantity import format_quantity
from app.core.quota_state import PendingWorkloadInfo
from app.core.types import ClusterQueueName, CohortName, FlavorResource
from app.models.status import (
    ClusterQueueList,
    ClusterQueueSummary,
    CohortList,
    CohortResource,
    CohortSummary,
    Eta,
    EtaRange,
    FlavorResourceQuota,
    ListMeta,
    LocalQueueList,
    LocalQueueSummary,
    PendingWorkload,
    PendingWorkloadList,
    PodSetAssignment,
    QuotaShortfall,
    ResourceUsage,
    WorkloadStatus,
)

router = APIRouter(prefix="/api/v1", tags=["status"])

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000

_bearer = HTTPBearer(auto_error=False, description="A Kubernetes bearer token "
                     "(e.g. `kubectl create token NAME`), checked with a TokenReview.")

T = TypeVar("T")

_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "Invalid continue token"},
    401: {"description": "No bearer token, or the token was rejected by the TokenReview"},
    403: {"description": "The user may not get the Kueue object behind this view"},
    429: {"description": "Too many requests needing a token review from this address"},
    404: {"description": "No such ClusterQueue, cohort, LocalQueue or Workload in pykueue's "
               "state"},
    503: {"description": "pykueue is starting, or the API server cannot review tokens now"},
}


# ------------------------------------------------------------------------------ access


async def authenticate(request: Request, credentials: HTTPAuthorizationCredentials | None,
                       ) -> tuple[AccessReviewer, UserInfo]:
    """The reviewer and the user of the bearer token; raise the 401/503 ``HTTPException``
    when there is no token, it is rejected, or it cannot be reviewed now."""
    reviewer: AccessReviewer | None = getattr(request.app.state, "access_reviewer", None)
    if reviewer is None:
        raise HTTPException(503, "status API access review is not configured "
                                 "(app.state.access_reviewer is not set)")
    if credentials is None or not credentials.credentials:
        raise HTTPException(
            401, "missing bearer token: send 'Authorization: Bearer <token>' "
                 "(for example a token from `kubectl create token <serviceaccount>`)",
            headers={"WWW-Authenticate": "Bearer"})
    client = request.client.host if request.client else ""
    result = await _reviewed(reviewer.authenticate(credentials.credentials, client=client))
    if result.user is None:
        why = f": {result.error}" if result.error else ""
        raise HTTPException(401, f"invalid bearer token: rejected by the TokenReview{why}",
                            headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})
    return reviewer, result.user


async def _reviewed(review: Awaitable[T]) -> T:
    """``review``'s answer; 503 ``HTTPException`` when the API server cannot review now, 429
    (with ``Retry-After``) when this address sends too many reviews."""
    try:
        return await review
    except ReviewUnavailable as exc:
        raise HTTPException(503, f"cannot check access now: {exc}") from exc
    except TooManyReviews as exc:
        raise HTTPException(429, str(exc), headers={
            "Retry-After": str(max(1, math.ceil(exc.retry_after)))}) from exc


async def allowed(reviewer: AccessReviewer, user: UserInfo, access: ResourceAccess,
                  client: str = "") -> bool:
    """Whether ``user`` has ``access`` (503/429 ``HTTPException`` when it cannot be checked);
    ``client``: the caller's address, for the per-address review limit."""
    return (await _reviewed(reviewer.authorize(user, access, client=client))).allowed


async def authorize(request: Request, credentials: HTTPAuthorizationCredentials | None,
                    access: ResourceAccess) -> UserInfo:
    """Authenticate the bearer token and check ``access``; raise the 401/403/429/503
    ``HTTPException`` otherwise. Returns the user."""
    reviewer, user = await authenticate(request, credentials)
    client = request.client.host if request.client else ""
    decision = await _reviewed(reviewer.authorize(user, access, client=client))
    if not decision.allowed:
        why = f": {decision.reason}" if decision.reason else ""
        raise HTTPException(
            403, f'user "{user.username}" cannot {access.describe()}; the status API '
                 f"needs that permission for this view{why}")
    return user


def cluster_view(request: Request) -> ClusterView:
    """The view of ``app.state.cluster``; 503 while pykueue is not ready to answer."""
    state = request.app.state
    cluster = getattr(state, "cluster", None)
    if cluster is None:
        raise HTTPException(503, "pykueue is starting: the admission state is not available "
                                 "yet (the reconciler has not started)")
    ready = getattr(state, "cluster_ready", None)
    if ready is not None:
        ok, message = ready()
        if not ok:
            raise HTTPException(503, f"pykueue is starting: {message}")
    return ClusterView(cluster, eta=getattr(state, "eta", None),
                       awaiting_checks=getattr(state, "awaiting_checks", frozenset()),
                       eta_advance=not getattr(state, "eta_refreshed", False))


# ------------------------------------------------------------------------------ conversions


def _q(amount: int | None, resource: str) -> str | None:
    return None if amount is None else format_quantity(amount, resource)


def _qs(amount: int, resource: str) -> str:
    return format_quantity(amount, resource)


def rfc3339(seconds: float) -> str:
    """Seconds since the epoch as an RFC 3339 UTC time (``2026-01-02T03:04:05Z``); a time
    past year 9999 as ``9999-12-31T23:59:59Z`` (before year 1: ``0001-01-01T00:00:00Z``).
    An ETA can be that far: a tenant's queue of ~120 Workloads each with the largest
    ``maximumExecutionTimeSeconds`` (int32, 68 years) run one after another puts every
    Workload behind them past year 9999; the pending lists must still answer 200."""
    try:
        t = datetime.fromtimestamp(seconds, UTC)
    except (ValueError, OverflowError, OSError):
        return "9999-12-31T23:59:59Z" if seconds > 0 else "0001-01-01T00:00:00Z"
    if t.microsecond:
        return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _usage_list(usage: dict[FlavorResource, int] | Any) -> list[ResourceUsage]:
    return [ResourceUsage(flavor=fr.flavor, resource=fr.resource, used=_qs(v, fr.resource))
            for fr, v in sorted(usage.items())]


def cluster_queue_summary(v: ClusterQueueView) -> ClusterQueueSummary:
    """Wire model of a ClusterQueue view."""
    st = v.status
    return ClusterQueueSummary(
        name=st.name, cohort=st.cohort, queueing_strategy=v.queueing_strategy,
        active=st.active, reason=st.reason, message=st.message,
        pending_workloads=st.pending, inadmissible_workloads=v.pending_inadmissible,
        reserving_workloads=v.reserving, admitted_workloads=v.admitted,
        evicting_workloads=st.evicting,
        resources=[
            FlavorResourceQuota(
                flavor=r.flavor, resource=r.resource,
                nominal_quota=_qs(r.nominal, r.resource),
                borrowing_limit=_q(r.borrowing_limit, r.resource),
                lending_limit=_q(r.lending_limit, r.resource),
                used=_qs(r.usage, r.resource), borrowed=_qs(r.borrowed, r.resource),
                lent=_qs(r.lent, r.resource), available=_qs(r.available, r.resource),
            ) for r in st.resources
        ],
    )


def cohort_summary(v: CohortView) -> CohortSummary:
    """Wire model of a cohort view."""
    st = v.status
    resources = []
    for r in st.resources:
        borrowing, lending = v.limits.get(FlavorResource(r.flavor, r.resource), (None, None))
        resources.append(CohortResource(
            flavor=r.flavor, resource=r.resource, nominal_quota=_qs(r.nominal, r.resource),
            borrowing_limit=_q(borrowing, r.resource), lending_limit=_q(lending, r.resource),
            subtree_quota=_qs(r.subtree_quota, r.resource), used=_qs(r.usage, r.resource),
            borrowed=_qs(r.borrowed, r.resource)))
    return CohortSummary(
        name=st.name, parent=st.parent, explicit=st.explicit, active=st.active,
        reason=st.reason, message=st.message, cohorts=list(v.child_cohorts),
        cluster_queues=list(v.cluster_queues), subtree_cluster_queues=list(st.cluster_queues),
        fair_sharing_weight=format_quantity(v.weight_milli, "cpu"),  # milli-units
        weighted_share=None if v.weighted_share is None else weighted_share(v.weighted_share),
        resources=resources)


def shortfall(s: CoreShortfall) -> QuotaShortfall:
    """Wire model of the numbers behind a quota reason."""
    r = s.resource
    return QuotaShortfall(
        pod_set=s.pod_set, flavor=s.flavor, resource=r, requested=_qs(s.requested, r),
        available=_qs(s.available, r), maximum=_qs(s.maximum, r),
        nominal_quota=_qs(s.nominal, r), used=_qs(s.usage, r), borrowed=_qs(s.borrowed, r),
        borrowing_limit=_q(s.borrowing_limit, r), limited_by=s.limit, cohort=s.cohort,
        message=s.describe(),
    )


def eta(e: CoreEta | None, computed_at: float | None) -> Eta | None:
    """Wire model of an ETA (None stays None: the server computes no ETAs); the wait is
    counted from now."""
    if e is None:
        return None
    now = time.time()
    wait = e.wait(now)
    span = None
    if e.start is not None and e.earliest is not None:
        span = EtaRange(
            earliest=rfc3339(e.earliest), earliest_wait_seconds=round(max(0.0, e.earliest - now)),
            latest=None if e.latest is None else rfc3339(e.latest),
            latest_wait_seconds=None if e.latest is None else round(max(0.0, e.latest - now)))
    return Eta(start=None if e.start is None else rfc3339(e.start),
               wait_seconds=None if wait is None else round(wait),
               confidence=e.confidence,  # type: ignore[arg-type]
               basis=e.basis,
               computed_at=None if computed_at is None else rfc3339(computed_at),
               range=span)


def pending_workload(p: PendingView) -> PendingWorkload:
    """Wire model of a pending Workload."""
    return PendingWorkload(
        name=p.name, namespace=p.namespace, local_queue_name=p.local_queue,
        cluster_queue=p.cluster_queue, position_in_cluster_queue=p.position,
        position_in_local_queue=p.position_in_local_queue, priority=p.priority,
        created=rfc3339(p.created), inadmissible=p.inadmissible, reason=p.reason,
        condition_reason=p.condition_reason, message=p.message,
        shortfalls=[shortfall(s) for s in p.shortfalls], eta=eta(p.eta, p.eta_at),
    )


def local_queue_summary(v: LocalQueueView) -> LocalQueueSummary:
    """Wire model of a LocalQueue view."""
    return LocalQueueSummary(
        name=v.name, namespace=v.namespace, cluster_queue=v.cluster_queue, active=v.active,
        reason=v.reason, message=v.message, pending_workloads=v.pending,
        inadmissible_workloads=v.pending_inadmissible, reserving_workloads=v.reserving,
        admitted_workloads=v.admitted, usage=_usage_list(dict(v.usage)),
    )


# ------------------------------------------------------------------------------ paging


def _encode_token(scope: str, last: str, index: int) -> str:
    raw = json.dumps({"s": scope, "k": last, "i": index}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_token(token: str, scope: str) -> tuple[str, int]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw)
        key, index, where = data["k"], data["i"], data["s"]
        if not isinstance(key, str) or not isinstance(index, int) or index < 0:
            raise ValueError("bad fields")
    # RecursionError: json.loads of deeply nested arrays; it is the
    # caller's malformed token like any other, not a server error.
    except (binascii.Error, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise HTTPException(400, "invalid continue token: pass metadata.continue of the "
                                 "previous page unchanged") from exc
    if where != scope:
        raise HTTPException(400, f"continue token belongs to another list ({where}), "
                                 f"not {scope}")
    return key, index


def page(entries: Sequence[PendingWorkloadInfo], limit: int, token: str | None,
         scope: str) -> tuple[Sequence[PendingWorkloadInfo], ListMeta]:
    """One page of ``entries`` and its ``ListMeta`` (see the module doc for resumption)."""
    start = 0
    if token:
        last, index = _decode_token(token, scope)
        start = min(index, len(entries))
        for i, e in enumerate(entries):
            if e.workload == last:
                start = i + 1
                break
    chunk = entries[start:start + limit]
    end = start + len(chunk)
    remaining = len(entries) - end
    cont = _encode_token(scope, chunk[-1].workload, end) if remaining > 0 and chunk else None
    return chunk, ListMeta(continue_=cont, remaining_item_count=remaining,
                           total_items=len(entries))


# ------------------------------------------------------------------------------ endpoints

Credentials = Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)]
Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description=f"Page size (1..{MAX_LIMIT}).")]
Continue = Annotated[str | None, Query(alias="continue",
                                       description="metadata.continue of the previous page.")]


@router.get("/clusterqueues", response_model=ClusterQueueList, responses=_ERRORS)
async def list_cluster_queues(
    request: Request, credentials: Credentials,
) -> ClusterQueueList:
    """Every ClusterQueue: cohort, strategy, active or why not, per flavor and resource the
    nominal quota, borrowing and lending limits, used, borrowed, lent and available; counts of
    pending, reserving and admitted Workloads. Needs `get` on clusterqueues."""
    await authorize(request, credentials, cluster_queue_access())
    view = cluster_view(request)
    return ClusterQueueList(items=[cluster_queue_summary(v) for v in view.cluster_queues()])


@router.get("/clusterqueues/{name}", response_model=ClusterQueueSummary, responses=_ERRORS)
async def get_cluster_queue(
    request: Request, name: str,
    credentials: Credentials,
) -> ClusterQueueSummary:
    """One ClusterQueue (see the list). Needs `get` on that clusterqueue."""
    await authorize(request, credentials, cluster_queue_access(name))
    v = cluster_view(request).cluster_queue(ClusterQueueName(name))
    if v is None:
        raise HTTPException(404, f'ClusterQueue "{name}" not found')
    return cluster_queue_summary(v)


@router.get("/clusterqueues/{name}/pending", response_model=PendingWorkloadList,
            responses=_ERRORS)
async def cluster_queue_pending(
    request: Request, name: str, credentials: Credentials, limit: Limit = DEFAULT_LIMIT,
    continue_: Continue = None,
) -> PendingWorkloadList:
    """Pending Workloads of a ClusterQueue in admission order, with positions, priority,
    creation time and the reason each waits (with numbers). Paged. Needs `get` on
    `clusterqueues/pendingworkloads` in `visibility.kueue.x-k8s.io` for that ClusterQueue,
    as Kueue's visibility API: the list names Workloads of every namespace."""
    await authorize(request, credentials, pending_workloads_access(name))
    view = cluster_view(request)
    cq = ClusterQueueName(name)
    entries = view.pending(cq)
    if entries is None:
        raise HTTPException(404, f'ClusterQueue "{name}" not found')
    chunk, meta = page(entries, limit, continue_, f"clusterqueues/{name}")
    lqpos = local_queue_positions_of(entries)
    items = [pending_workload(p) for p in view.details(list(chunk), cq, lqpos)]
    return PendingWorkloadList(metadata=meta, items=items)


@router.get("/cohorts", response_model=CohortList, responses=_ERRORS)
async def list_cohorts(request: Request, credentials: Credentials) -> CohortList:
    """Every cohort of the tree (Cohort objects and cohorts named only by ClusterQueues):
    parent, whether its ClusterQueues can admit (or the cycle or invalid spec that stops
    them), direct members, every ClusterQueue of its subtree, fair sharing weight and share,
    and per flavor and resource its own quota, limits, subtree quota, usage and what it
    borrows from its parent. Needs `get` on cohorts."""
    await authorize(request, credentials, cohort_access())
    view = cluster_view(request)
    return CohortList(items=[cohort_summary(v) for v in view.cohorts()])


@router.get("/cohorts/{name}", response_model=CohortSummary, responses=_ERRORS)
async def get_cohort(request: Request, name: str, credentials: Credentials) -> CohortSummary:
    """One cohort (see the list). Needs `get` on that cohort."""
    await authorize(request, credentials, cohort_access(name))
    v = cluster_view(request).cohort(CohortName(name))
    if v is None:
        raise HTTPException(404, f'cohort "{name}" not found (no Cohort object or '
                                 "ClusterQueue names it)")
    return cohort_summary(v)


@router.get("/namespaces/{namespace}/localqueues", response_model=LocalQueueList,
            responses=_ERRORS)
async def list_local_queues(
    request: Request, namespace: str,
    credentials: Credentials,
) -> LocalQueueList:
    """LocalQueues of a namespace: ClusterQueue, active or why not, counts and the quota
    their Workloads hold. Needs `get` on localqueues in the namespace."""
    await authorize(request, credentials, local_queue_access(namespace))
    view = cluster_view(request)
    return LocalQueueList(items=[local_queue_summary(v) for v in view.local_queues(namespace)])


@router.get("/namespaces/{namespace}/localqueues/{name}/pending",
            response_model=PendingWorkloadList, responses=_ERRORS)
async def local_queue_pending(
    request: Request, namespace: str, name: str, credentials: Credentials,
    limit: Limit = DEFAULT_LIMIT, continue_: Continue = None,
) -> PendingWorkloadList:
    """Pending Workloads of a LocalQueue in admission order (positions in the ClusterQueue
    and in the LocalQueue). Paged. Needs `get` on that localqueue."""
    await authorize(request, credentials, local_queue_access(namespace, name))
    view = cluster_view(request)
    found = view.local_queue_pending(namespace, name)
    if found is None:
        raise HTTPException(404, f'LocalQueue "{name}" not found in namespace "{namespace}"')
    cq, entries = found
    chunk, meta = page(entries, limit, continue_, f"localqueues/{namespace}/{name}")
    lqpos = {e.workload: i for i, e in enumerate(entries)}
    items = [pending_workload(p) for p in view.details(list(chunk), cq, lqpos)]
    return PendingWorkloadList(metadata=meta, items=items)


@router.get("/namespaces/{namespace}/workloads/{name}", response_model=WorkloadStatus,
            responses=_ERRORS)
async def get_workload(
    request: Request, namespace: str, name: str,
    credentials: Credentials,
) -> WorkloadStatus:
    """Where one Workload stands: state, ClusterQueue, flavors and usage once admitted;
    position and reason while pending. Needs `get` on localqueues in the namespace."""
    await authorize(request, credentials, local_queue_access(namespace))
    view = cluster_view(request)
    v = view.workload(namespace, name)
    if v is None:
        raise HTTPException(404, f'Workload "{name}" not found in namespace "{namespace}" '
                                 "(pykueue forgets finished and deleted Workloads)")
    info, p = v.info, v.pending
    assignments = []
    if info.admission is not None:
        for a in info.admission.pod_set_assignments:
            assignments.append(PodSetAssignment(
                name=a.name, count=a.count, flavors=dict(a.flavors),
                resource_usage={r: _qs(q, r) for r, q in a.resource_usage.items()}))
    reason = info.reason
    return WorkloadStatus(
        name=v.name, namespace=v.namespace, local_queue_name=v.local_queue,
        cluster_queue=info.cluster_queue, state=info.state, priority=v.priority,
        created=rfc3339(v.created), admission_in_flight=info.assumed,
        awaiting_admission_checks=info.admission is not None
        and f"{namespace}/{name}" in view.awaiting_checks,
        inadmissible=info.inadmissible,
        position_in_cluster_queue=p.position if p else None,
        position_in_local_queue=p.position_in_local_queue if p else None,
        reason=None if reason is None else reason.value,
        condition_reason=None if reason is None else reason.condition_reason,
        message=info.message, shortfalls=[shortfall(s) for s in info.shortfalls],
        pod_set_assignments=assignments, usage=_usage_list(dict(v.usage)),
        eta=eta(p.eta, p.eta_at) if p else None,
    )


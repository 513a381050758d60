"""Who may read the status API: bearer tokens checked the Kubernetes way.

A request carries ``Authorization: Bearer <token>`` (e.g. from ``kubectl create token``).
The token is authenticated with a TokenReview (``authentication.k8s.io/v1``) and the user
authorised with a SubjectAccessReview (``authorization.k8s.io/v1``) for the Kueue object the
view shows: ClusterQueue views need ``get`` on ``clusterqueues.kueue.x-k8s.io``, namespace
views ``get`` on ``localqueues.kueue.x-k8s.io`` in that namespace. This is what
the API server itself does for a webhook-authenticated, webhook-authorised client.

The checks sit behind ``AccessReviewer`` (two async methods) with three implementations:

- ``KubeAccessReviewer``: the real reviews through kubernetes-asyncio
  (``AuthenticationV1Api.create_token_review``,
  ``AuthorizationV1Api.create_subject_access_review``). pykueue's identity needs ``create`` on
  ``tokenreviews`` and ``subjectaccessreviews`` (ClusterRole ``system:auth-delegator``).
- ``StaticAccessReviewer``: a table of tokens and RBAC-like grants, in process. Tests use it;
  it is a faithful implementation of the protocol, not a mock of the API server.
- ``CachedAccessReviewer``: wraps another one and keeps answers for ``ttl`` seconds (default
  10 s), at most ``max_entries`` of each kind (least recently used dropped first). Rejected
  tokens are kept apart, for ``negative_ttl`` seconds (default 5 s) in a cache of their own,
  so a flood of random tokens cannot evict the tokens of real users. Tokens
  are cached under their SHA-256, never in clear. Failures to reach the API server are not
  cached. With a ``ClientLimiter`` every review it would send (a cache miss) is charged to
  the caller's address: past its budget it raises ``TooManyReviews`` (the HTTP side answers
  429) without asking the API server.

The reviews go through an API client of their own (``app.main``), with its own rate limit
(``AccessReviewSettings``), so they never delay the controllers' requests or the Lease
renewal.

Errors: the reviewers raise ``ReviewUnavailable`` when the API server cannot answer (the
HTTP side answers 503) and ``TooManyReviews`` past a client's budget (429); a rejected token
is a result (``TokenResult.user is None``), not an exception.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubernetes_asyncio import client as k8s

from app.wire.names import KUEUE_GROUP

VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"


class ReviewUnavailable(Exception):
    """The TokenReview or SubjectAccessReview could not be made (API server unreachable,
    pykueue not allowed to create reviews, timeout). Retry later."""


class TooManyReviews(Exception):
    """This client has sent more requests needing a review than its budget allows;
    ``retry_after``: seconds until it may send one again."""

    def __init__(self, client: str, retry_after: float) -> None:
        super().__init__(f"too many requests from {client} needing a token review; retry in "
                         f"{retry_after:.1f}s")
        self.client = client
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class UserInfo:
    """An authenticated user (Kubernetes ``UserInfo``)."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TokenResult:
    """Outcome of a TokenReview: ``user`` when authenticated, else ``error`` says why."""

    user: UserInfo | None
    error: str = ""


@dataclass(frozen=True, slots=True)
class ResourceAccess:
    """What a request needs (SubjectAccessReview ``resourceAttributes``); ``namespace`` None
    for cluster-scoped objects, ``name`` None for "any object of the kind", ``subresource``
    e.g. ``pendingworkloads``. With ``path`` set it is a non-resource URL instead
    (``nonResourceAttributes``: ``verb`` on ``path``; group and resource unused)."""

    verb: str
    group: str
    resource: str
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None
    path: str | None = None

    @property
    def rbac_resource(self) -> str:
        """The resource as an RBAC rule names it: ``clusterqueues/pendingworkloads``."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource

    def describe(self) -> str:
        """Kubernetes' wording, e.g. 'get resource "localqueues" in API group
        "kueue.x-k8s.io" in the namespace "team-a"'; 'get path "/metrics"'."""
        if self.path is not None:
            return f'{self.verb} path "{self.path}"'
        res = self.rbac_resource
        what = f'{self.verb} resource "{res}" in API group "{self.group}"'
        if self.name:
            what = f'{self.verb} resource "{res}" named "{self.name}" in API group ' \
                   f'"{self.group}"'
        if self.namespace is not None:
            return f'{what} in the namespace "{self.namespace}"'
        return f"{what} at the cluster scope"


@dataclass(frozen=True, slots=True)
class AccessDecision:
    """Outcome of a SubjectAccessReview; ``reason`` from the authorizer (may be empty)."""

    allowed: bool
    reason: str = ""


class AccessReviewer(Protocol):
    """Authenticates bearer tokens and authorises users (see the module doc)."""

    async def authenticate(self, token: str, client: str = "") -> TokenResult:
        """Check ``token`` sent from ``client`` (its address; reviewers without per-client
        limits ignore it); raise ``ReviewUnavailable`` when it cannot be checked."""
        ...

    async def authorize(self, user: UserInfo, access: ResourceAccess,
                        client: str = "") -> AccessDecision:
        """May ``user`` do ``access``? Raise ``ReviewUnavailable`` when it cannot be asked.
        ``client`` as for ``authenticate``."""
        ...


def cluster_queue_access(name: str | None = None) -> ResourceAccess:
    """``get`` on ClusterQueue ``name`` (any when None)."""
    return ResourceAccess("get", KUEUE_GROUP, "clusterqueues", None, name)


def cohort_access(name: str | None = None) -> ResourceAccess:
    """``get`` on Cohort ``name`` (any when None): cluster-scoped, as ClusterQueues."""
    return ResourceAccess("get", KUEUE_GROUP, "cohorts", None, name)


def local_queue_access(namespace: str, name: str | None = None) -> ResourceAccess:
    """``get`` on LocalQueue ``name`` (any when None) in ``namespace``."""
    return ResourceAccess("get", KUEUE_GROUP, "localqueues", namespace, name)


def pending_workloads_access(cluster_queue: str) -> ResourceAccess:
    """``get`` on ``clusterqueues/pendingworkloads`` in ``visibility.kueue.x-k8s.io`` for
    ``cluster_queue``: the permission Kueue's visibility API asks before it lists a
    ClusterQueue's pending Workloads (which name Workloads of every namespace)."""
    return ResourceAccess("get", VISIBILITY_GROUP, "clusterqueues", None, cluster_queue,
                          subresource="pendingworkloads")


def local_queue_pending_workloads_access(namespace: str, local_queue: str) -> ResourceAccess:
    """``get`` on ``localqueues/pendingworkloads`` in ``visibility.kueue.x-k8s.io`` for
    ``local_queue`` in ``namespace``: what Kueue's visibility API asks before it lists a
    LocalQueue's pending Workloads."""
    return ResourceAccess("get", VISIBILITY_GROUP, "localqueues", namespace, local_queue,
                          subresource="pendingworkloads")


def metrics_access() -> ResourceAccess:
    """``get`` on the non-resource URL ``/metrics``, as Kueue's metrics endpoint asks."""
    return ResourceAccess("get", "", "", path="/metrics")


# ------------------------------------------------------------------------------ Kubernetes


class KubeAccessReviewer:
    """TokenReview + SubjectAccessReview through a kubernetes-asyncio ``ApiClient``.

    ``audiences``: TokenReview ``spec.audiences`` (None: the API server's own audiences, which
    is what ``kubectl create token`` issues for).
    """

    def __init__(self, api_client: Any, audiences: Iterable[str] | None = None) -> None:
        self._authn = k8s.AuthenticationV1Api(api_client)
        self._authz = k8s.AuthorizationV1Api(api_client)
        self._audiences = list(audiences) if audiences else None

    async def authenticate(self, token: str, client: str = "") -> TokenResult:
        body = k8s.V1TokenReview(spec=k8s.V1TokenReviewSpec(token=token,
                                                             audiences=self._audiences))
        try:
            review = await self._authn.create_token_review(body)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure means "cannot check now"
            raise ReviewUnavailable(f"TokenReview failed: {_api_error(exc)}") from exc
        st = review.status
        if st is None or not st.authenticated or st.user is None:
            return TokenResult(None, (st.error if st is not None else "") or "")
        u = st.user
        extra = {k: tuple(v or ()) for k, v in (u.extra or {}).items()}
        return TokenResult(UserInfo(u.username or "", u.uid or "", tuple(u.groups or ()), extra))

    async def authorize(self, user: UserInfo, access: ResourceAccess,
                        client: str = "") -> AccessDecision:
        attrs = non_resource = None
        if access.path is not None:
            non_resource = k8s.V1NonResourceAttributes(path=access.path, verb=access.verb)
        else:
            attrs = k8s.V1ResourceAttributes(verb=access.verb, group=access.group,
                                             resource=access.resource,
                                             subresource=access.subresource,
                                             namespace=access.namespace, name=access.name)
        spec = k8s.V1SubjectAccessReviewSpec(
            user=user.username, uid=user.uid or None, groups=list(user.groups) or None,
            extra={k: list(v) for k, v in user.extra.items()} or None,
            resource_attributes=attrs, non_resource_attributes=non_resource,
        )
        try:
            review = await self._authz.create_subject_access_review(
                k8s.V1SubjectAccessReview(spec=spec))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise ReviewUnavailable(f"SubjectAccessReview failed: {_api_error(exc)}") from exc
        st = review.status
        if st is None:
            return AccessDecision(False, "no status in the SubjectAccessReview")
        return AccessDecision(bool(st.allowed) and not st.denied,
                              st.reason or st.evaluation_error or "")


def _api_error(exc: Exception) -> str:
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None)
    if status is not None:
        return f"HTTP {status} {reason or ''}".strip()
    return f"{type(exc).__name__}: {exc}"


# ------------------------------------------------------------------------------ static table


@dataclass(frozen=True, slots=True)
class Grant:
    """An RBAC-like rule: ``subject`` (a username, or ``group:<name>``) may ``verbs`` on
    ``resources`` of ``group`` (a subresource as ``clusterqueues/pendingworkloads``);
    ``namespace`` None = every namespace and cluster scope; ``names`` empty = every object;
    ``non_resource_urls``: the paths it allows (for non-resource accesses only)."""

    subject: str
    verbs: tuple[str, ...]
    group: str
    resources: tuple[str, ...]
    namespace: str | None = None
    names: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()

    def allows(self, user: UserInfo, access: ResourceAccess) -> bool:
        """True when this rule covers ``user`` doing ``access`` (RBAC rule matching)."""
        if self.subject.startswith("group:"):
            if self.subject[len("group:"):] not in user.groups:
                return False
        elif self.subject != user.username:
            return False
        if access.verb not in self.verbs and "*" not in self.verbs:
            return False
        if access.path is not None:
            return access.path in self.non_resource_urls or "*" in self.non_resource_urls
        if self.group not in (access.group, "*"):
            return False
        if access.rbac_resource not in self.resources and "*" not in self.resources:
            return False
        if self.namespace is not None and access.namespace != self.namespace:
            return False
        return not self.names or access.name in self.names


class StaticAccessReviewer:
    """``AccessReviewer`` from a table: ``tokens`` maps a token to its user; ``grants`` say
    who may do what. Counts its calls (``authentications``, ``authorizations``)."""

    def __init__(self, tokens: Mapping[str, UserInfo], grants: Iterable[Grant] = ()) -> None:
        self.tokens = dict(tokens)
        self.grants = tuple(grants)
        self.authentications = 0
        self.authorizations = 0

    async def authenticate(self, token: str, client: str = "") -> TokenResult:
        self.authentications += 1
        user = self.tokens.get(token)
        if user is None:
            return TokenResult(None, "unknown token")
        return TokenResult(user)

    async def authorize(self, user: UserInfo, access: ResourceAccess,
                        client: str = "") -> AccessDecision:
        self.authorizations += 1
        for g in self.grants:
            if g.allows(user, access):
                return AccessDecision(True, f"allowed by grant to {g.subject}")
        return AccessDecision(False, "")


# ------------------------------------------------------------------------------ cache


class _TTLCache:
    """Bounded LRU mapping whose entries expire ``ttl`` seconds after they were stored."""

    def __init__(self, ttl: float, max_entries: int, clock: Callable[[], float]) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self.clock = clock
        self._data: OrderedDict[Any, tuple[float, Any]] = OrderedDict()

    def get(self, key: Any) -> Any | None:
        hit = self._data.get(key)
        if hit is None:
            return None
        expires, value = hit
        if self.clock() >= expires:
            del self._data[key]
            return None
        self._data.move_to_end(key)
        return value

    def put(self, key: Any, value: Any) -> None:
        self._data[key] = (self.clock() + self.ttl, value)
        self._data.move_to_end(key)
        while len(self._data) > self.max_entries:
            self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)


class ClientLimiter:
    """A token bucket per client address: ``qps`` reviews per second, ``burst`` at once, at
    most ``max_clients`` addresses tracked (least recently seen forgotten first, which only
    ever gives a forgotten client a full bucket again). ``clock``: monotonic seconds."""

    def __init__(self, qps: float, burst: int, *, max_clients: int = 4096,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if qps <= 0 or burst < 1 or max_clients < 1:
            raise ValueError("qps must be > 0, burst and max_clients >= 1")
        self.qps, self.burst, self.max_clients, self.clock = qps, burst, max_clients, clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # tokens, time

    def take(self, client: str) -> None:
        """Charge one review to ``client``; raise ``TooManyReviews`` when it has none left."""
        now = self.clock()
        tokens, last = self._buckets.pop(client, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - last) * self.qps)
        if tokens < 1:
            self._buckets[client] = (tokens, now)
            raise TooManyReviews(client, (1 - tokens) / self.qps)
        self._buckets[client] = (tokens - 1, now)
        while len(self._buckets) > self.max_clients:
            self._buckets.popitem(last=False)


class CachedAccessReviewer:
    """Caches another reviewer's answers and limits reviews per client (see the module doc).
    ``clock``: monotonic seconds."""

    def __init__(self, inner: AccessReviewer, *, ttl: float = 10.0, max_entries: int = 1024,
                 negative_ttl: float = 5.0, limiter: ClientLimiter | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if ttl <= 0 or negative_ttl <= 0 or max_entries < 1:
            raise ValueError("ttl and negative_ttl must be > 0 and max_entries >= 1")
        self.inner = inner
        self.limiter = limiter
        self._tokens = _TTLCache(ttl, max_entries, clock)
        self._rejected = _TTLCache(negative_ttl, max_entries, clock)
        self._decisions = _TTLCache(ttl, max_entries, clock)

    def _charge(self, client: str) -> None:
        if self.limiter is not None:
            self.limiter.take(client)

    async def authenticate(self, token: str, client: str = "") -> TokenResult:
        key = hashlib.sha256(token.encode()).digest()
        hit = self._tokens.get(key) or self._rejected.get(key)
        if hit is not None:
            return hit
        self._charge(client)
        result = await self.inner.authenticate(token)
        (self._tokens if result.user is not None else self._rejected).put(key, result)
        return result

    async def authorize(self, user: UserInfo, access: ResourceAccess,
                        client: str = "") -> AccessDecision:
        key = (user.username, user.uid, user.groups,
               tuple(sorted((k, v) for k, v in user.extra.items())), access)
        hit = self._decisions.get(key)
        if hit is not None:
            return hit
        self._charge(client)
        decision = await self.inner.authorize(user, access)
        self._decisions.put(key, decision)
        return decision

"""The Kubernetes API client of the controllers: raw JSON over kubernetes-asyncio's ApiClient.

Objects are plain ``dict``s exactly as the API server sends them (so fields pykueue does not
know survive a write-back, and CRDs and built-in kinds are handled alike). Every request goes
through a token bucket (``ClientSettings.qps`` requests/second, ``burst`` at once; client-go's
rate limiter) and gets ``ClientSettings.request_timeout_seconds`` unless it is a watch.
Errors are raised as ``app.kube.errors`` types (NotFound, Conflict, Gone, Throttled,
Retryable, Permanent).

Connection: ``ClientSettings.kubeconfig`` if set; otherwise in-cluster (service account) when
``KUBERNETES_SERVICE_HOST`` is set; otherwise ``$KUBECONFIG`` / ``~/.kube/config``.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import aiohttp
import msgspec
from aiohttp.helpers import get_env_proxy_for_url
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config
from yarl import URL

from app.config import ClientSettings
from app.kube.errors import (
    ApiError,
    Permanent,
    Retryable,
    Throttled,
    from_exception,
    from_status,
)
from app.kube.workqueue import Lanes, acting_lane, in_background
from app.wire.names import KUEUE_GROUP

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@dataclass(frozen=True, slots=True)
class Resource:
    """A REST resource: ``group`` ("" for core), ``version``, ``plural``, scope and ``kind``."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """``group/version`` (or ``v1`` for the core group) as written in ``apiVersion``."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None,
             subresource: str | None = None) -> str:
        """URL path, e.g. ``/apis/batch/v1/namespaces/ns/jobs/j/status``."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base



KUEUE_VERSION = "v1beta2"
RESOURCE_FLAVORS = Resource(KUEUE_GROUP, KUEUE_VERSION, "resourceflavors", "ResourceFlavor", False)
CLUSTER_QUEUES = Resource(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", "ClusterQueue", False)
COHORTS = Resource(KUEUE_GROUP, KUEUE_VERSION, "cohorts", "Cohort", False)
ADMISSION_CHECKS = Resource(KUEUE_GROUP, KUEUE_VERSION, "admissionchecks", "AdmissionCheck",
                            False)
LOCAL_QUEUES = Resource(KUEUE_GROUP, KUEUE_VERSION, "localqueues", "LocalQueue")
WORKLOADS = Resource(KUEUE_GROUP, KUEUE_VERSION, "workloads", "Workload")
WORKLOAD_PRIORITY_CLASSES = Resource(
    KUEUE_GROUP, KUEUE_VERSION, "workloadpriorityclasses", "WorkloadPriorityClass", False
)
JOBS = Resource("batch", "v1", "jobs", "Job")
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", False)
PODS = Resource("", "v1", "pods", "Pod")
STATEFULSETS = Resource("apps", "v1", "statefulsets", "StatefulSet")
NODES = Resource("", "v1", "nodes", "Node", False)
EVENTS = Resource("", "v1", "events", "Event")
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False)
SECRETS = Resource("", "v1", "secrets", "Secret")
MULTIKUEUE_CONFIGS = Resource(KUEUE_GROUP, KUEUE_VERSION, "multikueueconfigs", "MultiKueueConfig",
                              False)
MULTIKUEUE_CLUSTERS = Resource(KUEUE_GROUP, KUEUE_VERSION, "multikueueclusters",
                               "MultiKueueCluster", False)
RESOURCE_CLAIM_TEMPLATES = Resource("resource.k8s.io", "v1", "resourceclaimtemplates",
                                    "ResourceClaimTemplate")
LIMIT_RANGES = Resource("", "v1", "limitranges", "LimitRange")
RUNTIME_CLASSES = Resource("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", False)


class TokenBucket:
    """client-go's token-bucket rate limiter: ``qps`` tokens/second, at most ``burst`` saved,
    handed out in fair turns across lanes, foreground before background.

    ``acquire(lane)`` waits until a token is available. Waiters are served round-robin across
    lanes (``app.kube.workqueue.Lanes``), first come first served within a lane: the
    client passes the namespace of each request (``lane_of_path``), so one namespace's
    backlog of writes takes every other token at most while another namespace waits, not all
    of them (client-go's limiter is one FIFO for the whole process; with one lane this one is
    too). A caller arriving while others wait queues behind them.

    ``acquire(lane, background=True)`` (requests made inside ``app.kube.workqueue.background``:
    queue status, Events) waits, first come first served, until no foreground caller waits,
    or until it has waited ``background_max_wait`` seconds (then it takes the next token):
    under a full budget the writes that decide what runs (admissions, evictions, a job's
    release) go first, and a background write is still never held longer than that. ``clock``
    returns seconds (monotonic); ``sleep`` is awaited for waits (both injectable for tests).
    Raises ``ValueError`` for ``qps`` <= 0, ``burst`` < 1 or a negative ``background_max_wait``.
    """

    def __init__(self, qps: float, burst: int,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Any] = asyncio.sleep, *,
                 background_max_wait: float = 5.0) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("qps must be > 0 and burst >= 1")
        if background_max_wait < 0:
            raise ValueError("background_max_wait must be >= 0")
        self.qps = qps
        self.burst = burst
        self.background_max_wait = background_max_wait
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._last = clock()
        self._waiters: Lanes[asyncio.Future[None]] = Lanes()
        # Background waiters, oldest first, with the time each started waiting.
        self._background: deque[tuple[float, asyncio.Future[None]]] = deque()
        self._pump: asyncio.Task[None] | None = None

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now

    def try_acquire(self) -> bool:
        """Take a token if one is available now; never waits (nor queues)."""
        self._refill()
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        return False

    @property
    def waiting(self) -> int:
        """Callers waiting for a token (cancelled ones until their turn comes)."""
        return len(self._waiters) + len(self._background)

    async def acquire(self, lane: str = "", *, background: bool = False) -> None:
        """Wait for and take one token, in ``lane``'s turn, after the foreground callers when
        ``background`` (see the class doc)."""
        if not self._waiters and not self._background and self.try_acquire():
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if background:
            self._background.append((self._clock(), fut))
        else:
            self._waiters.push(lane, fut)
        if self._pump is None or self._pump.done():
            self._pump = asyncio.create_task(self._hand_out(), name="token-bucket")
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                # Granted as the caller was cancelled: the token goes back.
                self._tokens = min(float(self.burst), self._tokens + 1)
            raise

    def _next_waiter(self) -> asyncio.Future[None] | None:
        """The waiter whose turn it is (see the class doc), removed; None when all left."""
        bg = self._background
        while bg and bg[0][1].done():  # cancelled while waiting
            bg.popleft()
        if bg and (not self._waiters
                   or self._clock() - bg[0][0] >= self.background_max_wait):
            return bg.popleft()[1]
        while self._waiters:
            fut = self._waiters.pop()
            if not fut.done():
                return fut
        while bg:
            fut = bg.popleft()[1]
            if not fut.done():
                return fut
        return None

    async def _hand_out(self) -> None:
        """Give tokens to the waiters in turn as tokens come (the turn is chosen when the
        token is there, so a lane that starts waiting meanwhile is not passed over); ends
        when none waits."""
        while self._waiters or self._background:
            while not self.try_acquire():
                await self._sleep((1 - self._tokens) / self.qps)
            fut = self._next_waiter()
            if fut is None:
                self._tokens = min(float(self.burst), self._tokens + 1)  # nobody left
            else:
                fut.set_result(None)
            await asyncio.sleep(0)  # let the granted caller go before the next grant


def _bucket_for(settings: ClientSettings) -> TokenBucket:
    """The token bucket of a client made from ``settings`` (qps, burst, background wait)."""
    return TokenBucket(settings.qps, settings.burst,
                       background_max_wait=settings.background_max_wait_seconds)


def lane_of_path(path: str) -> str:
    """The namespace of a request path (``/apis/g/v/namespaces/<ns>/...``), ``""`` for a
    cluster-scoped or all-namespaces one: the request's lane in ``TokenBucket``, unless it is
    made ``acting_for`` another lane (``app.kube.workqueue``: a preemption's writes wait in
    the preemptor's namespace's lane)."""
    _, sep, rest = path.partition("/namespaces/")
    return rest.partition("/")[0] if sep else ""


class RateLimitedApiClient(k8s_client.ApiClient):
    """kubernetes-asyncio ``ApiClient`` whose every call takes a token and has a timeout.

    Used by typed API classes too. The controllers share one (``KubeClient.api``); traffic
    that must not queue behind them gets a companion with a bucket and connection pool of its
    own (``KubeClient.companion``): the Lease of leader election and the access reviews of the
    status API. ``max_wait``: seconds a call may wait for a token before it
    fails with ``Throttled`` (None: wait as long as it takes).
    """

    def __init__(self, configuration: k8s_client.Configuration, bucket: TokenBucket,
                 default_timeout: float, max_wait: float | None = None) -> None:
        super().__init__(configuration)
        self.bucket = bucket
        self.default_timeout = default_timeout
        self.max_wait = max_wait
        self.user_agent = "pykueue/0.1.0"
        _no_env_lookups(self.rest_client, configuration.host)

    async def call_api(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        await self._token()
        if kwargs.get("_request_timeout") is None:
            kwargs["_request_timeout"] = self.default_timeout
        return await super().call_api(*args, **kwargs)

    async def send(self, method: str, path: str, *, params: list[tuple[str, str]],
                   data: bytes | None, content_type: str,
                   timeout: float | aiohttp.ClientTimeout | None = None) -> aiohttp.ClientResponse:
        """One raw request after a token, as ``call_api(..., _preload_content=False)`` sends
        it (same session, TLS, proxy, default headers and bearer token, refreshed by the
        configuration's hook) without its per-call sanitising and re-encoding of the body:
        ``data`` is the encoded body. Returns the unread response (the caller releases it);
        aiohttp's exceptions pass through."""
        await self._token(lane_of_path(path))
        headers = {"Accept": JSON, "Content-Type": content_type}
        headers.update(self.default_headers)
        await self.update_params_for_auth(headers, params, ["BearerToken"])
        rc = self.rest_client
        url = self.configuration.host + path
        if params:
            url += "?" + urlencode(params)
        t = timeout if timeout is not None else self.default_timeout
        kwargs: dict[str, Any] = {}
        if rc.proxy:
            kwargs["proxy"] = rc.proxy
        if rc.proxy_headers:
            kwargs["proxy_headers"] = rc.proxy_headers
        if rc.server_hostname:
            kwargs["server_hostname"] = rc.server_hostname
        return await rc.pool_manager.request(
            method, url, data=data, headers=headers,
            timeout=t if isinstance(t, aiohttp.ClientTimeout) else aiohttp.ClientTimeout(total=t),
            **kwargs)

    async def _token(self, lane: str = "") -> None:
        """Take a token in ``lane``, or in the lane the caller works for
        (``app.kube.workqueue.acting_for``: a preemption's writes for the preemptor), after
        the foreground callers inside ``app.kube.workqueue.background``."""
        acting = acting_lane()
        if acting is not None:
            lane = acting
        bg = in_background()
        if self.max_wait is None:
            await self.bucket.acquire(lane, background=bg)
        else:
            try:
                await asyncio.wait_for(self.bucket.acquire(lane, background=bg), self.max_wait)
            except TimeoutError:
                raise Throttled(429, "TooManyRequests", f"client-side rate limit: no token "
                                f"within {self.max_wait:g}s") from None


def _no_env_lookups(rest: Any, host: str) -> None:
    """Swap kubernetes-asyncio's session (``trust_env=True``) for one that reads the
    environment once, here, instead of per request.

    With ``trust_env`` aiohttp looks up the proxy variables and parses ``~/.netrc`` in a
    worker thread for every request (two thread hand-offs per request, a large share of the
    controller's CPU: docs/benchmarks.md, "Controller CPU"). The variables do not change
    while the process runs, so the proxy for the API server (``HTTPS_PROXY`` / ``NO_PROXY``,
    as client-go's ``http.ProxyFromEnvironment``) is resolved once and given per request;
    netrc credentials are not used (client-go has none; the API server authenticates by the
    bearer token or client certificate). A proxy set in the configuration wins.
    The connector (pool and TLS context) is kept.
    """
    old: aiohttp.ClientSession = rest.pool_manager
    connector = old.connector
    old.detach()
    # read_bufsize: kubernetes-asyncio's (a watch event may be up to etcd's 1.5 MiB).
    rest.pool_manager = aiohttp.ClientSession(connector=connector, trust_env=False,
                                              read_bufsize=2**21)
    if rest.proxy:
        return
    try:
        proxy, auth = get_env_proxy_for_url(URL(host))
    except LookupError:
        return
    # Credentials stay in the proxy URL: aiohttp then sends Proxy-Authorization both on the
    # CONNECT of an https API server and on each request to a plain-http one (a
    # Proxy-Authorization in proxy_headers reaches only the CONNECT).
    if auth is not None:
        proxy = proxy.with_user(auth.login).with_password(auth.password)
    rest.proxy = str(proxy)


async def load_configuration(settings: ClientSettings) -> k8s_client.Configuration:
    """Build a client ``Configuration`` (see the module doc for the lookup order)."""
    cfg = k8s_client.Configuration()
    if settings.kubeconfig is not None:
        await k8s_config.load_kube_config(config_file=str(settings.kubeconfig),
                                          client_configuration=cfg, persist_config=False)
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        k8s_config.load_incluster_config(client_configuration=cfg)
    else:
        await k8s_config.load_kube_config(client_configuration=cfg, persist_config=False)
    return cfg


class KubeClient:
    """Raw-JSON access to the API server. Every method raises ``ApiError`` subclasses.

    ``writes`` counts successful mutating requests (POST/PUT/PATCH/DELETE) for tests and
    metrics.
    """

    def __init__(self, api: RateLimitedApiClient, settings: ClientSettings) -> None:
        self.api = api
        self.settings = settings
        self.writes = 0

    @classmethod
    async def from_settings(cls, settings: ClientSettings) -> KubeClient:
        """Connect as described in the module doc; the caller must ``await close()``."""
        cfg = await load_configuration(settings)
        cfg.connection_pool_maxsize = max(cfg.connection_pool_maxsize, settings.burst + 16)
        bucket = _bucket_for(settings)
        return cls(RateLimitedApiClient(cfg, bucket, settings.request_timeout_seconds), settings)

    @classmethod
    async def from_kubeconfig_dict(cls, config: dict[str, Any],
                                   settings: ClientSettings) -> KubeClient:
        """A client for the cluster of a parsed kubeconfig (its current context), e.g. a
        MultiKueue worker's from a Secret; certificate data goes to temporary files of the
        library. Raises what the loader raises on a malformed config (ConfigException,
        ValueError...); the caller must ``await close()``."""
        cfg = k8s_client.Configuration()
        await k8s_config.load_kube_config_from_dict(config, client_configuration=cfg)
        bucket = _bucket_for(settings)
        return cls(RateLimitedApiClient(cfg, bucket, settings.request_timeout_seconds), settings)

    async def close(self) -> None:
        await self.api.close()

    def companion(self, qps: float, burst: int, *, max_wait: float | None = None,
                  timeout: float | None = None) -> RateLimitedApiClient:
        """A new ``RateLimitedApiClient`` to the same API server as the same identity, with a
        token bucket (``qps``, ``burst``) and connection pool of its own, so its calls never
        wait behind this client's. ``timeout``: per-request seconds (default: this client's).
        The caller must ``await close()`` it."""
        cfg = self.api.configuration
        return RateLimitedApiClient(cfg, TokenBucket(qps, burst),
                                    timeout or self.settings.request_timeout_seconds, max_wait)

    # ------------------------------------------------------------------ raw requests

    async def _send(self, method: str, path: str, *, query: dict[str, Any] | None = None,
                    body: Any = None, content_type: str = JSON,
                    timeout: Any = None) -> aiohttp.ClientResponse:
        params = [(k, _qv(v)) for k, v in (query or {}).items() if v is not None]
        try:
            return await self.api.send(method, path, params=params, data=_encode(body),
                                       content_type=content_type, timeout=timeout)
        except ApiError:
            raise
        except Exception as exc:  # noqa: BLE001 - mapped into a typed error
            raise from_exception(exc) from exc

    async def request(self, method: str, path: str, *, query: dict[str, Any] | None = None,
                      body: Any = None, content_type: str = JSON) -> dict[str, Any]:
        """Send one request and return the decoded JSON body (``{}`` when empty)."""
        resp = await self._send(method, path, query=query, body=body, content_type=content_type)
        try:
            data = await resp.read()
        except Exception as exc:  # noqa: BLE001
            raise from_exception(exc) from exc
        finally:
            resp.release()
        if not 200 <= resp.status <= 299:
            raise from_status(resp.status, data)
        if method != "GET":
            self.writes += 1
        return _decode_body(resp.status, data) if data else {}

    # ------------------------------------------------------------------ verbs

    async def get(self, res: Resource, name: str, namespace: str | None = None,
                  subresource: str | None = None) -> dict[str, Any]:
        return await self.request("GET", res.path(namespace, name, subresource))

    async def list(self, res: Resource, namespace: str | None = None, *,
                   label_selector: str | None = None, field_selector: str | None = None,
                   page_size: int = 500) -> tuple[list[dict[str, Any]], str]:
        """List every object (following ``continue``); returns (items, list resourceVersion)."""
        items: list[dict[str, Any]] = []
        cont: str | None = None
        while True:
            page = await self.request("GET", res.path(namespace), query={
                "labelSelector": label_selector, "fieldSelector": field_selector,
                "limit": page_size, "continue": cont,
            })
            for it in page.get("items") or []:
                it.setdefault("apiVersion", res.api_version)
                it.setdefault("kind", res.kind)
                items.append(it)
            meta = page.get("metadata") or {}
            cont = meta.get("continue")
            if not cont:
                return items, str(meta.get("resourceVersion", ""))

    async def watch(self, res: Resource, namespace: str | None = None, *,
                    resource_version: str, label_selector: str | None = None,
                    timeout_seconds: int = 300) -> AsyncIterator[dict[str, Any]]:
        """Yield raw watch events ``{"type": ..., "object": {...}}`` until the server ends
        the stream (after about ``timeout_seconds``). Bookmarks are requested and yielded.
        Raises ``Gone`` when ``resource_version`` is too old (HTTP 410 at start)."""
        timeout = aiohttp.ClientTimeout(total=None,
                                        sock_connect=self.settings.request_timeout_seconds,
                                        sock_read=timeout_seconds + 30)
        resp = await self._send("GET", res.path(namespace), query={
            "watch": True, "resourceVersion": resource_version,
            "allowWatchBookmarks": True, "labelSelector": label_selector,
            "timeoutSeconds": timeout_seconds,
        }, timeout=timeout)
        try:
            if resp.status != 200:
                raise from_status(resp.status, await resp.read())
            while True:
                try:
                    line = await resp.content.readline()
                except Exception as exc:  # noqa: BLE001
                    raise from_exception(exc) from exc
                if not line:
                    return
                line = line.strip()
                if line:
                    yield _decode_body(resp.status, line)
        finally:
            resp.close()

    async def create(self, res: Resource, body: dict[str, Any],
                     namespace: str | None = None) -> dict[str, Any]:
        ns = namespace or (body.get("metadata") or {}).get("namespace")
        return await self.request("POST", res.path(ns), body=body)

    async def replace(self, res: Resource, body: dict[str, Any],
                      subresource: str | None = None) -> dict[str, Any]:
        """PUT the object (optimistic concurrency on ``metadata.resourceVersion``)."""
        meta = body["metadata"]
        return await self.request("PUT", res.path(meta.get("namespace"), meta["name"], subresource),
                                  body=body)

    async def patch(self, res: Resource, name: str, patch: Any, namespace: str | None = None, *,
                    content_type: str = MERGE_PATCH,
                    subresource: str | None = None) -> dict[str, Any]:
        """PATCH (merge by default; ``JSON_PATCH`` for a list of operations)."""
        return await self.request("PATCH", res.path(namespace, name, subresource), body=patch,
                                  content_type=content_type)

    async def delete(self, res: Resource, name: str, namespace: str | None = None, *,
                     uid: str | None = None, resource_version: str | None = None,
                     propagation: str | None = "Background",
                     grace_period_seconds: int | None = None) -> dict[str, Any]:
        """DELETE with optional preconditions (``uid``, ``resource_version``) and grace
        period (seconds; None: the object's own, a pod's ``terminationGracePeriodSeconds``;
        a shorter one than a pod being deleted has shortens it)."""
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        pre = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v}
        if pre:
            body["preconditions"] = pre
        if propagation:
            body["propagationPolicy"] = propagation
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        return await self.request("DELETE", res.path(namespace, name), body=body)


_encoder = msgspec.json.Encoder()
_decode = msgspec.json.Decoder().decode  # plain dicts, lists, str, int, float, bool, None


def _encode(body: Any) -> bytes | None:
    """The request body as JSON bytes (``None``: no body; ``bytes`` as given). Bodies are
    plain JSON values (objects as the API server sent them or built as dicts).

    Raises ``Permanent`` (400 ``BadRequest``) for a NaN or infinite float, which JSON cannot
    hold: msgspec writes it as ``null``, and in a merge patch ``null`` deletes the field, so
    a NaN would silently remove what it meant to set (``json.dumps`` wrote ``NaN``, which the
    API server refuses with 400)."""
    if body is None or isinstance(body, bytes):
        return body
    data = _encoder.encode(body)
    if b"null" in data and _non_finite(body):
        raise Permanent(400, "BadRequest", "the request body holds a NaN or infinite number, "
                        "which JSON cannot represent")
    return data


def _non_finite(value: Any) -> bool:
    """Whether ``value`` (a plain JSON value) holds a float that is NaN or infinite."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_non_finite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_non_finite(v) for v in value)
    return False


def _decode_body(status: int, data: bytes) -> Any:
    """Decode a successful response's JSON body or watch line. Anything else (an HTML page
    from a proxy or a wrong host answering 200) raises ``Retryable`` rather than a raw
    ``msgspec.DecodeError`` that callers handling ``ApiError`` would not expect."""
    try:
        return _decode(data)
    except msgspec.DecodeError as exc:
        raise Retryable(status, "InvalidResponse",
                        f"response is not JSON ({exc}): {data[:200]!r}") from exc


def _qv(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)

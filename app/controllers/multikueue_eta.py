"""The workers' ETAs for MultiKueue's soonest dispatcher (``pykueue.dev/multikueue-dispatcher-
soonest``, docs/multikueue.md): the I/O half; the decision is ``app.core.multikueue.
soonest_keep``.

A MultiKueueCluster whose worker runs pykueue names that pykueue's status API with the
annotation ``pykueue.dev/status-api: https://<host>:<port>``; the bearer token for it is
key ``status-api-token`` of the cluster's kubeconfig Secret (in ``multikueue.namespace``,
the Secret its ``kubeConfig.location`` names), with optionally ``status-api-ca.crt`` (PEM)
to verify the API's serving certificate (else the system's trust store). The token needs
``get`` on ``localqueues`` in the Workloads' namespaces on the worker (the status API's
rule). Both are read again every ``multikueue.probe_period_seconds``.

``eta(worker, ns, name)`` asks ``GET /api/v1/namespaces/{ns}/workloads/{name}`` and returns
its ``WorkerEta``; a worker without the annotation or token, an unusable URL
(``status_api_problem``), an error or a timeout gives none (``wait`` None), which the
dispatcher treats as AllAtOnce for that worker. The token is sent to that URL only, in a
header, and is never logged (nor is the Secret).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import ssl
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx

from app.core.multikueue import (
    STATUS_API_ANNOTATION,
    STATUS_CA_KEY,
    STATUS_TOKEN_KEY,
    WorkerEta,
    status_api_problem,
    worker_eta,
)
from app.kube.client import SECRETS, KubeClient
from app.kube.errors import ApiError, NotFound
from app.wire.fields import Obj

TIMEOUT = 3.0  # seconds for one status API request
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StatusApi:
    """Where one worker's status API is and how to reach it (the token kept out of repr)."""

    url: str
    token: str = field(repr=False)
    ca: str | None = field(default=None, repr=False)


def _decoded(data: Any) -> str | None:
    if not isinstance(data, str):
        return None
    try:
        return base64.b64decode(data, validate=True).decode().strip() or None
    except (binascii.Error, UnicodeDecodeError):
        return None


def status_api_of(cluster: Obj, secret: Obj | None) -> StatusApi | str:
    """The ``StatusApi`` of a MultiKueueCluster object and its kubeconfig Secret, or why
    there is none (no annotation, a refused URL, no token in the Secret)."""
    url = ((cluster.get("metadata") or {}).get("annotations") or {}).get(STATUS_API_ANNOTATION)
    if not url:
        return f"no {STATUS_API_ANNOTATION} annotation"
    problem = status_api_problem(str(url))
    if problem is not None:
        return problem
    data = (secret or {}).get("data") or {}
    token = _decoded(data.get(STATUS_TOKEN_KEY))
    if token is None:
        return f"no key {STATUS_TOKEN_KEY} in its Secret"
    return StatusApi(str(url).rstrip("/"), token, _decoded(data.get(STATUS_CA_KEY)))


class WorkerEtas:
    """Per worker (MultiKueueCluster name): its status API and an HTTP client for it (module
    doc). ``client``: the manager's API client (to read the Secrets); ``namespace``: where
    the Secrets are; ``period``: how often a cluster's annotation and Secret are read again
    (monotonic seconds); ``transport``: an httpx transport for tests."""

    def __init__(self, client: KubeClient, namespace: str, period: float,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.client = client
        self.namespace = namespace
        self.period = period
        self.transport = transport
        self.apis: dict[str, StatusApi] = {}
        self.why: dict[str, str] = {}
        self._http: dict[str, httpx.AsyncClient] = {}
        # Cluster name -> when its annotation and Secret were read, and the annotation then.
        self._seen: dict[str, tuple[float, str | None]] = {}

    async def refresh(self, clusters: list[Obj], now: float) -> None:
        """Read each cluster's annotation and Secret again when ``period`` passed or its
        annotation changed; forget the clusters that are gone."""
        names = {c["metadata"]["name"] for c in clusters}
        for gone in [n for n in self._seen if n not in names]:
            await self._forget(gone)
            self._seen.pop(gone, None)
        for c in clusters:
            name = c["metadata"]["name"]
            url = (c["metadata"].get("annotations") or {}).get(STATUS_API_ANNOTATION)
            read_at, read_url = self._seen.get(name, (-1e9, None))
            if now - read_at < self.period and read_url == url:
                continue
            self._seen[name] = (now, url)
            got = status_api_of(c, await self._secret(c) if url else None)
            if isinstance(got, str):
                if self.why.get(name) != got and url:
                    log.warning("multikueue: cluster %s gives no ETA: %s", name, got)
                await self._forget(name)
                self.why[name] = got
            elif got != self.apis.get(name):
                await self._forget(name)
                self.apis[name] = got

    async def _secret(self, cluster: Obj) -> Obj | None:
        ref = ((cluster.get("spec") or {}).get("clusterSource") or {}).get("kubeConfig") or {}
        if ref.get("locationType", "Secret") != "Secret" or not ref.get("location"):
            return None
        try:
            return await self.client.get(SECRETS, str(ref["location"]), self.namespace)
        except NotFound:
            return None
        except ApiError as exc:
            log.info("multikueue: reading the Secret of cluster %s: %s",
                     cluster["metadata"]["name"], type(exc).__name__)
            return None

    async def _forget(self, name: str) -> None:
        self.apis.pop(name, None)
        self.why.pop(name, None)
        http = self._http.pop(name, None)
        if http is not None:
            await http.aclose()

    def _client(self, name: str, api: StatusApi) -> httpx.AsyncClient:
        http = self._http.get(name)
        if http is None:
            verify: ssl.SSLContext | bool = True
            if api.ca:
                verify = ssl.create_default_context(cadata=api.ca)
            http = self._http[name] = httpx.AsyncClient(
                base_url=api.url, verify=verify, timeout=TIMEOUT, transport=self.transport,
                headers={"Authorization": f"Bearer {api.token}"}, follow_redirects=False)
        return http

    async def eta(self, worker: str, namespace: str, name: str) -> WorkerEta:
        """What ``worker``'s status API says of Workload ``namespace/name``'s start."""
        api = self.apis.get(worker)
        if api is None:
            return WorkerEta(None, self.why.get(worker, "no status API"))
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/workloads/{quote(name, safe='')}"
        try:
            r = await self._client(worker, api).get(path)
        except (httpx.HTTPError, ssl.SSLError, OSError, ValueError) as exc:
            log.info("multikueue: status API of %s: %s", worker, type(exc).__name__)
            return WorkerEta(None, f"status API unreachable ({type(exc).__name__})")
        if r.status_code == 404:
            # Not queued there yet (the copy was just created): asked again.
            return WorkerEta(None, "not known to the worker yet", later=True)
        if r.status_code != 200:
            log.info("multikueue: status API of %s answered %d", worker, r.status_code)
            return WorkerEta(None, f"status API answered {r.status_code}")
        try:
            body = r.json()
        except ValueError:
            return WorkerEta(None, "status API answered no JSON")
        return worker_eta(body)

    async def etas(self, workers: list[str], namespace: str, name: str
                   ) -> dict[str, WorkerEta]:
        """``eta`` of each of ``workers``, asked at once."""
        got = await asyncio.gather(*(self.eta(w, namespace, name) for w in workers))
        return dict(zip(workers, got, strict=True))

    async def close(self) -> None:
        for name in list(self._http):
            await self._forget(name)

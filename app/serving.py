"""How `pykueue serve` listens: uvicorn with TLS hardened and slow connections closed.

``uvicorn_config(app, server)`` builds the ``uvicorn.Config`` that ``app.cli.main.serve`` runs;
``serve(main, others)`` runs it and the other listeners in one event loop:

- **Two listeners**, as Kueue: the main port (``server.port``: webhooks, extender, status API,
  dashboard, health, metrics) and the visibility API's own (``visibility.port``, Kueue's
  visibility server listens on 8082), because the TLS layer decides which client certificates
  a connection may present before any route is known. The visibility listener asks every
  client for a certificate and trusts only the request-header (front-proxy) CA; the main
  port's TLS is what ``server.client_ca_file`` says, whatever the visibility API does. Both
  share the application's state; the main one runs the lifespan (the controllers, leader
  election) and owns SIGINT/SIGTERM: when it stops, the others stop too.

- **TLS** (``tls_context``): TLS 1.2 and 1.3 only; for TLS 1.2 only ECDHE key exchange with
  AEAD ciphers (AES-GCM, ChaCha20-Poly1305), no CBC suites (the TLS 1.3 suites are AEAD by
  definition; OpenSSL's ``set_ciphers`` does not touch them). With ``server.client_ca_file``
  the server asks every client for a certificate (``CERT_OPTIONAL``): a certificate that does
  not chain to that CA fails the handshake, no certificate is allowed here and each route
  decides (the scheduler extender requires one, ``app.api.extender``). Optional, not required,
  because the status API's users and the probes present none.
- **Header read timeout** (uvicorn has none of its own): a connection whose request headers are
  not complete ``server.header_timeout_seconds`` after the connection was made, or after the
  first byte of a request on a kept-alive connection, is closed (``GuardedHTTPProtocol``).
  Idle kept-alive connections are closed by uvicorn after ``server.keep_alive_seconds``.
  The body read timeout is ASGI middleware (``app.api.limits.BodyLimitMiddleware``).
- **Concurrency**: past ``server.limit_concurrency`` open connections or running requests
  uvicorn answers 503. Idle connections (no request under way: after the handshake, while
  headers trickle in, or kept alive between requests) do not get to hold those slots: once
  the open connections come within ``IDLE_HEADROOM`` of the limit, each new connection closes
  the longest-idle ones to keep that headroom. Without it a few hundred anonymous clients
  that only open TLS connections, reconnecting when closed, hold every slot for as long as
  they like: every webhook call gets 503 (labelled Job creation refused cluster-wide, fail
  closed), the extender too, and ``/healthz`` (the liveness probe) 503.
- **Peer certificate to the app**: the ASGI TLS extension (``scope["extensions"]["tls"]``,
  asgiref's "TLS extension": ``client_cert_chain`` PEM list, ``client_cert_name`` RFC 4514,
  ``tls_version``) is filled per connection, since uvicorn does not provide it.

Not bounded here: the TLS handshake itself, which asyncio gives 60 s (its default
``ssl_handshake_timeout``; uvicorn does not pass another).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Awaitable, Callable, Iterator, MutableMapping, Sequence
from typing import Any

import uvicorn
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from app.config import ServerSettings

log = logging.getLogger(__name__)

# ECDHE key exchange, AEAD only (Mozilla's "intermediate" TLS 1.2 list is this set).
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"
_TLS_VERSIONS = {"TLSv1.2": 0x0303, "TLSv1.3": 0x0304}

# Connections kept free for newcomers below ``limit_concurrency`` (at most a quarter of it).
IDLE_HEADROOM = 16

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Any, Any], Awaitable[None]]


def tls_context(server: ServerSettings, client_cas: Sequence[str] | None = None
                ) -> ssl.SSLContext:
    """A listener's ``SSLContext`` (see the module doc) with ``server``'s certificate.
    ``client_cas``: None (the main port) asks for client certificates of
    ``server.client_ca_file`` when it is set; a sequence of PEM CAs (the visibility listener:
    the request-header CA) asks for certificates of those CAs only, none when it is empty.
    Asked, not required (``CERT_OPTIONAL``): a certificate no listed CA issued fails the
    handshake, none at all reaches the routes, which decide. Raises
    ``OSError``/``ssl.SSLError`` when a certificate cannot be read."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(TLS12_CIPHERS)
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    ctx.load_cert_chain(str(server.cert_file), str(server.key_file))
    if client_cas is None:
        if server.client_ca_file is not None:
            ctx.load_verify_locations(cafile=str(server.client_ca_file))
            ctx.verify_mode = ssl.CERT_OPTIONAL
        return ctx
    for pem in client_cas:
        ctx.load_verify_locations(cadata=pem)
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


def _rfc4514(subject: tuple[tuple[tuple[str, str], ...], ...]) -> str:
    """``getpeercert()["subject"]`` as an RFC 4514 string (most specific RDN first)."""
    short = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU",
             "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST"}

    def esc(v: str) -> str:
        out = "".join("\\" + c if c in ',+"\\<>;=' else c for c in v)
        if out.startswith(("#", " ")):
            out = "\\" + out
        return out[:-1] + "\\ " if out.endswith(" ") else out

    return ",".join("+".join(f"{short.get(k, k)}={esc(v)}" for k, v in rdn)
                    for rdn in reversed(subject))


def tls_extension(transport: asyncio.BaseTransport) -> dict[str, Any] | None:
    """The ASGI TLS extension for a connection, or None when it is not TLS. Only a client
    certificate the ``SSLContext`` verified appears (``getpeercert`` is empty otherwise)."""
    obj = transport.get_extra_info("ssl_object")
    if obj is None:
        return None
    peer = obj.getpeercert() or {}
    der = obj.getpeercert(binary_form=True) if peer else None
    return {
        "server_cert": None,
        "client_cert_chain": [ssl.DER_cert_to_PEM_cert(der)] if der else [],
        "client_cert_name": _rfc4514(peer["subject"]) if peer.get("subject") else None,
        "client_cert_error": None,
        "tls_version": _TLS_VERSIONS.get(obj.version() or ""),
        "cipher_suite": None,  # Python exposes the suite's name, not its IANA number
    }


def _with_tls(app: ASGIApp, tls: dict[str, Any]) -> ASGIApp:
    async def wrapped(scope: Scope, receive: Any, send: Any) -> None:
        scope.setdefault("extensions", {})["tls"] = tls
        await app(scope, receive, send)

    return wrapped


def guarded_protocol(header_timeout: float,
                     base: type[asyncio.Protocol] = AutoHTTPProtocol) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class ``base`` with a header read timeout (seconds) and the
    ASGI TLS extension (see the module doc)."""
    proto: Any = base
    _evicted = [0, float("-inf")]  # idle connections closed since the last log line, its time

    class GuardedHTTPProtocol(proto):  # type: ignore[misc, valid-type]
        _pk_timer: asyncio.TimerHandle | None = None
        _pk_seen: Any = None
        _pk_last = 0.0  # loop time of the connection or of its last bytes

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._pk_last = self.loop.time()
            self._pk_arm()  # idle after the handshake counts as waiting for headers
            self._pk_make_room()
            tls = tls_extension(transport)
            if tls is not None:
                self.app = _with_tls(self.app, tls)

        def data_received(self, data: bytes) -> None:
            self._pk_last = self.loop.time()
            if self._pk_timer is None and (self.cycle is None or self.cycle.response_complete):
                self._pk_arm()  # first bytes of the next request on a kept-alive connection
            super().data_received(data)
            if self.cycle is not None and self.cycle is not self._pk_seen:
                self._pk_seen = self.cycle  # a new request cycle: its headers are complete
                self._pk_disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._pk_disarm()
            super().connection_lost(exc)

        def _pk_idle(self) -> bool:
            """No request under way and nothing left to write."""
            cycle = getattr(self, "cycle", None)
            return (cycle is None or bool(cycle.response_complete)) \
                and not self.transport.is_closing() \
                and self.transport.get_write_buffer_size() == 0

        def _pk_make_room(self) -> None:
            """Close the longest-idle other connections so that ``IDLE_HEADROOM`` slots
            below ``limit_concurrency`` stay free (see the module doc)."""
            limit = self.limit_concurrency
            if limit is None:
                return
            excess = len(self.connections) - (limit - min(IDLE_HEADROOM, max(1, limit // 4)))
            if excess <= 0:
                return
            idle = sorted((p for p in self.connections
                           if p is not self and getattr(p, "_pk_idle", lambda: False)()),
                          key=lambda p: getattr(p, "_pk_last", 0.0))
            for p in idle[:excess]:
                # abort, not close: a TLS close waits up to 30 s for the peer's close_notify,
                # and the slot stays taken until connection_lost.
                p.transport.abort()
            _evicted[0] += len(idle[:excess])
            now = self.loop.time()
            if now - _evicted[1] >= 10:  # one line per 10 s: a flood must not flood the log
                log.info("closed %d idle connections to keep %d of %d slots free (%d open)",
                         _evicted[0], min(IDLE_HEADROOM, max(1, limit // 4)), limit,
                         len(self.connections))
                _evicted[:] = [0, now]

        def _pk_arm(self) -> None:
            self._pk_disarm()
            self._pk_timer = self.loop.call_later(header_timeout, self._pk_expire)

        def _pk_disarm(self) -> None:
            if self._pk_timer is not None:
                self._pk_timer.cancel()
                self._pk_timer = None

        def _pk_expire(self) -> None:
            self._pk_timer = None
            if not self.transport.is_closing():
                peer = f"{self.client[0]}:{self.client[1]}" if self.client else "?"
                log.info("closing connection from %s: request headers not complete within "
                         "%gs", peer, header_timeout)
                self.transport.close()

    return GuardedHTTPProtocol


def uvicorn_config(app: Any, server: ServerSettings, log_level: str = "info", *,
                   port: int | None = None, client_cas: Sequence[str] | None = None,
                   lifespan: str = "auto") -> uvicorn.Config:
    """The ``uvicorn.Config`` of a `pykueue serve` listener for ``app`` (see the module doc)
    on ``server.host``: the main port by default; the visibility listener with ``port``,
    ``client_cas`` (as for ``tls_context``) and ``lifespan="off"`` (the main one runs it)."""
    return uvicorn.Config(
        app,
        host=server.host,
        port=server.port if port is None else port,
        lifespan=lifespan,
        http=guarded_protocol(server.header_timeout_seconds),
        ssl_certfile=str(server.cert_file),  # uvicorn's is_ssl flag; the context is ours
        ssl_keyfile=str(server.key_file),
        ssl_context_factory=lambda _config, _default: tls_context(server, client_cas),
        log_level=log_level.lower(),
        access_log=False,  # one structured line per admission review instead (app.api.webhook)
        timeout_keep_alive=server.keep_alive_seconds,  # kube-apiserver reuses connections
        limit_concurrency=server.limit_concurrency,
    )


class _Follower(uvicorn.Server):
    """A listener beside the main one: the main server owns the process's signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class _Main(uvicorn.Server):
    """The main listener: its shutdown stops the followers too, before uvicorn hands a
    captured SIGTERM back to the process (which ends it)."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.followers: list[tuple[_Follower, asyncio.Task[None]]] = []

    async def stop_followers(self) -> None:
        for f, _ in self.followers:
            f.should_exit = True
        await asyncio.gather(*(t for _, t in self.followers), return_exceptions=True)

    async def shutdown(self, sockets: list[Any] | None = None) -> None:
        await asyncio.gather(super().shutdown(sockets), self.stop_followers())


async def serve(main: uvicorn.Config, others: Sequence[uvicorn.Config] = ()) -> None:
    """Run the main listener and ``others`` (lifespan off) in the running event loop.

    The others' sockets are bound first: a port in use ends the process (exit status 3, as
    uvicorn's own bind) before anything started. The main server handles SIGINT/SIGTERM and
    the lifespan; when it stops (a signal, or its startup failed) the others stop with it,
    finishing the requests under way; when another stops by itself, the main server stops
    too."""
    bound = [(_Follower(c), c.bind_socket()) for c in others]
    server = _Main(main)

    def lost(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("a listener stopped: %r; stopping", task.exception())
        server.should_exit = True

    for f, sock in bound:
        task = asyncio.create_task(f.serve(sockets=[sock]))
        task.add_done_callback(lost)
        server.followers.append((f, task))
    try:
        await server.serve()
    finally:
        for _, task in server.followers:
            task.remove_done_callback(lost)
        await server.stop_followers()

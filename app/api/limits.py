"""ASGI middleware that bounds how a request body is read, in bytes and seconds:

- **size**: a body over ``max_bytes`` gets HTTP 413 with a JSON error before it is buffered, so
  one large POST cannot exhaust pykueue's memory. The API server never sends an
  AdmissionReview over ~3 MiB (its request limit) and kube-scheduler's ExtenderArgs with node
  names stay far below that, so the default cap of 8 MiB (``Settings.server.max_body_bytes``)
  only refuses abuse. ExtenderArgs with full Node objects for thousands of nodes can exceed it:
  raise the setting for that mode.
- **time**: a body not complete ``body_timeout`` seconds after the request's headers
  (``Settings.server.body_timeout_seconds``) gets HTTP 408 and the connection is closed, so a
  client sending 1 byte every 10 s cannot hold a connection and a task. (The header read
  timeout is in ``app.serving``: uvicorn has none.)
- **bodies in flight** (memory across requests): the bytes of every body being read or
  handled at once, beyond the first ``FREE_BYTES_PER_REQUEST`` (64 KiB) of each, stay under
  ``in_flight_bytes`` (``Settings.server.max_body_bytes_in_flight``); a body that would pass
  it gets HTTP 503 with ``Retry-After: 1`` and the connection is closed. Without it anyone
  reaching the port could hold ``limit_concurrency`` x ``max_body_bytes`` (2 GiB) in memory
  with unauthenticated bodies each one byte short, past the Deployment's 512 MiB limit
  (measured: docs/benchmarks.md, "HTTP limits"). A body is charged
  as it arrives (and by its ``Content-Length`` up front) and released when its request ends.
  Reviews of ordinary objects fit in the free part, so a flood of large bodies does not
  refuse them.
- **loop share** (``LoopShare``, used by ``app.api.webhook``): a body over 64 KiB is parsed
  and judged one at a time and, together, in at most ``Settings.server.large_body_loop_share``
  of the event loop's time; one that would wait over ``large_body_max_wait_seconds`` gets 503.
- **disconnect**: a client that goes away before its body is complete is logged in one INFO
  line, not a traceback; nothing is answered (nobody is listening).

The three are raised inside the wrapped ``receive`` as ``BaseException`` subclasses so that no
handler catching ``Exception`` can turn them into an answer of its own.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


log = logging.getLogger(__name__)

FREE_BYTES_PER_REQUEST = 64 * 1024  # of each body, not charged to the in-flight budget


class BodyTooLarge(BaseException):  # noqa: N818 - not an Exception: handlers must not swallow it
    """The body passed ``max_bytes`` (answered 413)."""


class BodyTimeout(BaseException):  # noqa: N818
    """The body was not complete within ``body_timeout`` seconds (answered 408)."""


class BodyOverBudget(BaseException):  # noqa: N818
    """Bodies in flight would pass ``in_flight_bytes`` (answered 503)."""


class ClientGone(BaseException):  # noqa: N818
    """The client disconnected before its body was complete (logged, not answered)."""


def _client(scope: Scope) -> str:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else "?"


class BodyLimitMiddleware:
    """Bound HTTP request bodies by ``max_bytes`` (bytes, 413), ``body_timeout`` (seconds
    after the headers, 408; None: no limit) and, together, by ``in_flight_bytes`` (bytes
    beyond the first 64 KiB of each, 503; None: no limit), and log a client that disconnects
    mid-body in one line (see the module doc)."""

    def __init__(self, app: ASGIApp, max_bytes: int, body_timeout: float | None = None,
                 in_flight_bytes: int | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.body_timeout = body_timeout
        self.in_flight_bytes = in_flight_bytes
        self.charged = 0  # bytes charged by the requests now running (one event loop)

    def _charge(self, held: int, wanted: int) -> int:
        """Raise this request's charge from ``held`` to ``wanted`` bytes (beyond its free
        part); the new charge, or ``BodyOverBudget`` (nothing changed) past the budget."""
        wanted = max(held, wanted - FREE_BYTES_PER_REQUEST)
        if self.in_flight_bytes is None or wanted == held:
            return held
        if self.charged - held + wanted > self.in_flight_bytes:
            raise BodyOverBudget
        self.charged += wanted - held
        return wanted

    async def _answer(self, send: Send, status: int, detail: str, close: bool = False,
                      retry_after: bool = False) -> None:
        body = json.dumps({"detail": detail}).encode()
        headers = [(b"content-type", b"application/json"),
                   (b"content-length", str(len(body)).encode())]
        if close:  # the rest of the body may still be on its way: do not read it as a request
            headers.append((b"connection", b"close"))
        if retry_after:
            headers.append((b"retry-after", b"1"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_big = f"request body larger than {self.max_bytes} bytes"
        announced = 0
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    announced = int(value)
                except ValueError:
                    announced = 0
                if announced > self.max_bytes:
                    await self._answer(send, 413, too_big)
                    return
        loop = asyncio.get_running_loop()
        deadline = None if self.body_timeout is None else loop.time() + self.body_timeout
        seen = 0
        held = 0  # this request's share of self.charged
        complete = False
        started = False

        async def limited_receive() -> Message:
            nonlocal seen, complete, held
            if complete or deadline is None:
                message = await receive()
            else:
                try:
                    message = await asyncio.wait_for(receive(), deadline - loop.time())
                except TimeoutError:
                    raise BodyTimeout from None
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge
                held = self._charge(held, seen)
                complete = complete or not message.get("more_body", False)
            elif message["type"] == "http.disconnect" and not complete:
                raise ClientGone
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            held = self._charge(held, announced)
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge:
            if not started:
                await self._answer(send, 413, too_big)
        except BodyOverBudget:
            log.info("%s %s from %s: request bodies in flight would pass %d bytes: 503",
                     scope.get("method"), scope.get("path"), _client(scope),
                     self.in_flight_bytes)
            if not started:
                await self._answer(send, 503, "too many request bodies in flight; retry "
                                              "later", close=True, retry_after=True)
        except BodyTimeout:
            log.info("%s %s from %s: body not complete within %gs (%d bytes read): 408",
                     scope.get("method"), scope.get("path"), _client(scope), self.body_timeout,
                     seen)
            if not started:
                await self._answer(send, 408, f"request body not complete within "
                                              f"{self.body_timeout:g} seconds", close=True)
        except ClientGone:
            log.info("%s %s from %s: client disconnected after %d bytes of its body",
                     scope.get("method"), scope.get("path"), _client(scope), seen)
        finally:
            self.charged -= held


class LoopBusy(Exception):  # noqa: N818 - an answer (503), not a failure
    """A large body would wait longer than ``LoopShare.max_wait`` for its turn."""


class LoopShare:
    """Paces work on a large request body (parse and rules: synchronous, on the event loop the
    controllers share) so that such work takes at most ``share`` of the loop's time: after
    one piece that ran ``t`` seconds, the next large body starts no sooner than
    ``t * (1 / share - 1)`` seconds later, one at a time. A body that would wait more than
    ``max_wait`` seconds raises ``LoopBusy`` (the caller answers 503).

    Why: parsing and judging a multi-megabyte AdmissionReview of small objects holds the loop
    for most of a second and needs no credentials; unpaced, a few dozen in flight run back to
    back and delay every admission and the leader's Lease renewal toward its deadline
    (measured: docs/benchmarks.md, "HTTP limits"). Paced, one piece still holds the loop for
    its own duration (bounded by ``max_body_bytes``), but pieces do not queue up behind each
    other on the loop. Bodies up to ``FREE_BYTES_PER_REQUEST`` (every ordinary review) are not
    paced."""

    def __init__(self, share: float, max_wait: float) -> None:
        self.share = share
        self.max_wait = max_wait
        self._lock = asyncio.Lock()
        self._free_at = 0.0  # loop time before which the next large body does not start

    async def run(self, size: int, work: Callable[[], Any]) -> Any:
        """``work()``'s result; paced when ``size`` (bytes) is over the free part."""
        if size <= FREE_BYTES_PER_REQUEST:
            return work()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_wait
        try:
            # asyncio.timeout, not wait_for: an acquire that completes as the time runs out
            # must not leave the lock held with nobody to release it.
            async with asyncio.timeout(self.max_wait):
                await self._lock.acquire()
        except TimeoutError:
            raise LoopBusy from None
        try:
            if self._free_at > deadline:
                raise LoopBusy
            if self._free_at > loop.time():
                await asyncio.sleep(self._free_at - loop.time())
            started = time.perf_counter()
            try:
                return work()
            finally:
                spent = time.perf_counter() - started
                self._free_at = loop.time() + spent * (1 / self.share - 1)
        finally:
            self._lock.release()

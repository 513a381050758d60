"""ASGI middleware that bounds how a request body is read (issue 14, items 6 and 8):

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
- **disconnect**: a client that goes away before its body is complete is logged in one INFO
  line, not a traceback; nothing is answered (nobody is listening).

The three are raised inside the wrapped ``receive`` as ``BaseException`` subclasses so that no
handler catching ``Exception`` can turn them into an answer of its own.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


log = logging.getLogger(__name__)


class BodyTooLarge(BaseException):  # noqa: N818 - not an Exception: handlers must not swallow it
    """The body passed ``max_bytes`` (answered 413)."""


class BodyTimeout(BaseException):  # noqa: N818
    """The body was not complete within ``body_timeout`` seconds (answered 408)."""


class ClientGone(BaseException):  # noqa: N818
    """The client disconnected before its body was complete (logged, not answered)."""


def _client(scope: Scope) -> str:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else "?"


class BodyLimitMiddleware:
    """Bound HTTP request bodies by ``max_bytes`` (bytes, 413) and ``body_timeout`` (seconds
    after the headers, 408; None: no limit), and log a client that disconnects mid-body in one
    line (see the module doc)."""

    def __init__(self, app: ASGIApp, max_bytes: int, body_timeout: float | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.body_timeout = body_timeout

    async def _answer(self, send: Send, status: int, detail: str, close: bool = False) -> None:
        body = json.dumps({"detail": detail}).encode()
        headers = [(b"content-type", b"application/json"),
                   (b"content-length", str(len(body)).encode())]
        if close:  # the rest of the body may still be on its way: do not read it as a request
            headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_big = f"request body larger than {self.max_bytes} bytes"
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    over = int(value) > self.max_bytes
                except ValueError:
                    over = False
                if over:
                    await self._answer(send, 413, too_big)
                    return
        loop = asyncio.get_running_loop()
        deadline = None if self.body_timeout is None else loop.time() + self.body_timeout
        seen = 0
        complete = False
        started = False

        async def limited_receive() -> Message:
            nonlocal seen, complete
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
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge:
            if not started:
                await self._answer(send, 413, too_big)
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

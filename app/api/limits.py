"""ASGI middleware that caps request bodies: a body over the limit gets HTTP 413 with a JSON
error before it is buffered, so one large POST cannot exhaust pykueue's memory.

The API server never sends an AdmissionReview over ~3 MiB (its request limit) and
kube-scheduler's ExtenderArgs with node names stay far below that, so the default cap of
8 MiB (``Settings.server.max_body_bytes``) only refuses abuse. ExtenderArgs with full Node
objects for thousands of nodes can exceed it: raise the setting for that mode.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BodyTooLarge(BaseException):  # noqa: N818 - not an Exception: handlers must not swallow it
    """Raised inside the wrapped ``receive`` when the body passes the limit (a BaseException so
    that handlers catching Exception cannot turn it into their own answer)."""


class BodyLimitMiddleware:
    """Refuse HTTP request bodies over ``max_bytes`` (bytes) with 413 and a JSON message."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def _reject(self, send: Send) -> None:
        body = json.dumps({"detail": f"request body larger than {self.max_bytes} bytes"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    too_big = int(value) > self.max_bytes
                except ValueError:
                    too_big = False
                if too_big:
                    await self._reject(send)
                    return
        seen = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge
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
                await self._reject(send)

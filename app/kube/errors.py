"""Errors from the Kubernetes API server, typed by what the caller should do next.

design.md "Errors that say whether to retry" (kopf's permanent / temporary errors):

- ``NotFound`` (404): the object is gone; drop work about it.
- ``Conflict`` (409): our copy is stale (resourceVersion mismatch) or the object already exists;
  re-read and re-decide, never blindly retry the same write.
- ``Gone`` (410): a watch's resourceVersion is too old; relist.
- ``Throttled`` (429) and ``Retryable`` (5xx, timeouts, connection errors): retry with backoff.
- ``Permanent`` (400, 401, 403, 422, ...): the request itself is wrong; retrying does not help.

``from_status`` maps an HTTP status and body; ``from_exception`` maps whatever a client call
raised (``kubernetes_asyncio`` ``ApiException``, aiohttp errors, timeouts) and returns an
``ApiError`` (never raises).
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass
from typing import Any


class ApiError(Exception):
    """Base of the typed API errors. ``status``: HTTP status (0 for transport errors)."""

    def __init__(self, status: int, reason: str = "", message: str = "",
                 details: dict[str, Any] | None = None) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        self.details = details or {}
        super().__init__(f"HTTP {status} {reason}: {message}".strip())


class NotFound(ApiError):
    """404: the object (or its kind) does not exist."""


class Conflict(ApiError):
    """409: stale resourceVersion or AlreadyExists. Re-read the object and re-decide."""

    @property
    def already_exists(self) -> bool:
        """True for a create that found the name taken (reason ``AlreadyExists``)."""
        return self.reason == "AlreadyExists"


class Gone(ApiError):
    """410: the resourceVersion is older than the API server keeps; relist."""


class Retryable(ApiError):
    """5xx, timeouts and connection errors: retry the same request after a backoff."""


class Throttled(Retryable):
    """429 Too Many Requests (API priority and fairness or a rate limit)."""


class Permanent(ApiError):
    """4xx other than the above (400, 401, 403, 422, ...): the request is wrong as written."""


def from_status(status: int, body: bytes | str | None) -> ApiError:
    """Map an HTTP ``status`` and a response ``body`` (a ``metav1.Status`` JSON if any)."""
    reason, message, details = "", "", {}
    if body:
        try:
            data = json.loads(body)
        except (ValueError, TypeError):
            message = body.decode(errors="replace") if isinstance(body, bytes) else str(body)
        else:
            if isinstance(data, dict):
                reason = str(data.get("reason", ""))
                message = str(data.get("message", ""))
                details = data.get("details") or {}
    if len(message) > 2000:
        # An Invalid's message echoes the whole object before the reason: keep both ends.
        message = f"{message[:600]} ... {message[-1200:]}"
    if status == 404:
        return NotFound(status, reason or "NotFound", message, details)
    if status == 409:
        return Conflict(status, reason or "Conflict", message, details)
    if status == 410:
        return Gone(status, reason or "Expired", message, details)
    if status == 429:
        return Throttled(status, reason or "TooManyRequests", message, details)
    if status >= 500 or status == 0:
        return Retryable(status, reason or "ServerError", message, details)
    return Permanent(status, reason or "Invalid", message, details)


NAMESPACE_TERMINATING = "NamespaceTerminating"  # core/v1 NamespaceTerminatingCause


def namespace_terminating(exc: BaseException) -> bool:
    """True for the API server's refusal to create an object in a namespace being deleted:
    the NamespaceLifecycle admission plugin's 403 Forbidden ("unable to create new content in
    namespace X because it is being terminated") with the cause ``NamespaceTerminating``
    (``details.causes[].reason``). Final for that object: the namespace and everything in it
    are going, so a retry can only be refused again. Read from the cause, as Kubernetes'
    controllers do (``apierrors.HasStatusCause``): a webhook's 403 carries none."""
    if not isinstance(exc, ApiError) or exc.status != 403:
        return False
    causes = exc.details.get("causes") or []
    return any(isinstance(c, dict) and c.get("reason") == NAMESPACE_TERMINATING for c in causes)


def from_exception(exc: BaseException) -> ApiError:
    """Map any exception a client call raised to an ``ApiError`` (returned, not raised).

    ``ApiException`` -> by status; aiohttp client errors, ``asyncio.TimeoutError``, ``OSError``
    -> ``Retryable`` (status 0); an ``ApiError`` is returned as is; anything else -> ``Permanent``.
    """
    if isinstance(exc, ApiError):
        return exc
    status = getattr(exc, "status", None)
    if isinstance(status, int) and hasattr(exc, "body"):
        return from_status(status, getattr(exc, "body", None))
    if isinstance(exc, asyncio.TimeoutError | TimeoutError | OSError):
        return Retryable(0, type(exc).__name__, str(exc))
    try:
        import aiohttp
    except ImportError:  # pragma: no cover - aiohttp comes with kubernetes-asyncio
        aiohttp = None  # type: ignore[assignment]
    if aiohttp is not None and isinstance(exc, aiohttp.ClientError):
        return Retryable(0, type(exc).__name__, str(exc))
    return Permanent(0, type(exc).__name__, str(exc))


@dataclass
class Backoff:
    """Exponential backoff with full jitter: ``base * 2**n`` capped at ``cap`` seconds.

    ``next()`` returns the delay (seconds) for the current attempt and counts it; ``reset()``
    after a success. ``jitter`` in [0, 1]: the fraction of the delay that is randomised.
    """

    base: float = 0.2
    cap: float = 30.0
    jitter: float = 0.2
    attempts: int = 0

    def next(self) -> float:
        delay = min(self.cap, self.base * (2 ** min(self.attempts, 30)))
        self.attempts += 1
        if self.jitter:
            delay *= 1 - self.jitter * random.random()
        return delay

    def reset(self) -> None:
        self.attempts = 0

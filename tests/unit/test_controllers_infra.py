"""Pure parts of the controllers' infrastructure: error mapping, backoff, token bucket,
informer store semantics (no cluster)."""

from __future__ import annotations

import json

import pytest

from app.kube.client import JOBS, NAMESPACES, WORKLOADS, TokenBucket
from app.kube.errors import (
    Backoff,
    Conflict,
    Gone,
    NotFound,
    Permanent,
    Retryable,
    Throttled,
    from_exception,
    from_status,
)
from app.kube.informers import Store, object_key


def _status(code: int, reason: str) -> bytes:
    return json.dumps({"kind": "Status", "code": code, "reason": reason,
                       "message": f"m{code}"}).encode()


@pytest.mark.parametrize(
    ("status", "reason", "cls", "retryable"),
    [
        (404, "NotFound", NotFound, False),
        (409, "Conflict", Conflict, False),
        (409, "AlreadyExists", Conflict, False),
        (410, "Expired", Gone, False),
        (429, "TooManyRequests", Throttled, True),
        (500, "InternalError", Retryable, True),
        (503, "ServiceUnavailable", Retryable, True),
        (504, "Timeout", Retryable, True),
        (400, "BadRequest", Permanent, False),
        (403, "Forbidden", Permanent, False),
        (422, "Invalid", Permanent, False),
    ],
    ids=lambda v: str(v) if not isinstance(v, type) else v.__name__,
)
def test_status_maps_to_a_typed_error(status: int, reason: str, cls: type,
                                      retryable: bool) -> None:
    err = from_status(status, _status(status, reason))
    assert type(err) is cls
    assert isinstance(err, Retryable) is retryable
    assert err.reason == reason and err.message == f"m{status}"


def test_already_exists_is_told_apart_from_a_stale_write() -> None:
    assert from_status(409, _status(409, "AlreadyExists")).already_exists
    assert not from_status(409, _status(409, "Conflict")).already_exists


def test_non_json_body_is_kept_as_message() -> None:
    err = from_status(502, b"<html>bad gateway</html>")
    assert isinstance(err, Retryable) and "bad gateway" in err.message


def test_exceptions_map_by_kind() -> None:
    from kubernetes_asyncio.client.exceptions import ApiException

    exc = ApiException(status=409, reason="Conflict")
    exc.body = _status(409, "Conflict").decode()
    assert isinstance(from_exception(exc), Conflict)
    assert isinstance(from_exception(TimeoutError()), Retryable)
    assert isinstance(from_exception(ConnectionRefusedError()), Retryable)
    assert isinstance(from_exception(ValueError("x")), Permanent)


def test_backoff_grows_to_the_cap_and_resets() -> None:
    b = Backoff(base=0.1, cap=1.0, jitter=0)
    assert [b.next() for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    b.reset()
    assert b.next() == 0.1


async def test_token_bucket_allows_burst_then_qps() -> None:
    now = [0.0]
    slept: list[float] = []

    async def sleep(d: float) -> None:
        slept.append(d)
        now[0] += d

    bucket = TokenBucket(qps=10, burst=3, clock=lambda: now[0], sleep=sleep)
    for _ in range(3):
        await bucket.acquire()
    assert slept == []
    for _ in range(5):
        await bucket.acquire()
    assert len(slept) == 5
    assert now[0] == pytest.approx(0.5)


def test_token_bucket_refills_up_to_burst_only() -> None:
    now = [0.0]
    bucket = TokenBucket(qps=100, burst=2, clock=lambda: now[0])
    assert bucket.try_acquire() and bucket.try_acquire() and not bucket.try_acquire()
    now[0] = 100.0
    assert bucket.try_acquire() and bucket.try_acquire() and not bucket.try_acquire()


@pytest.mark.parametrize(
    ("res", "ns", "name", "sub", "path"),
    [
        (JOBS, "ns", "j", None, "/apis/batch/v1/namespaces/ns/jobs/j"),
        (JOBS, None, None, None, "/apis/batch/v1/jobs"),
        (WORKLOADS, "ns", "w", "status",
         "/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/workloads/w/status"),
        (NAMESPACES, "ignored", "x", None, "/api/v1/namespaces/x"),
    ],
    ids=["namespaced-object", "all-namespaces-list", "status-subresource", "cluster-scoped"],
)
def test_resource_paths(res, ns, name, sub, path) -> None:
    assert res.path(ns, name, sub) == path


def test_store_ignores_an_older_resource_version_of_a_known_object() -> None:
    s = Store(JOBS)
    s.put({"metadata": {"name": "a", "namespace": "n", "resourceVersion": "10"}, "v": 1})
    s.put({"metadata": {"name": "a", "namespace": "n", "resourceVersion": "9"}, "v": 0})
    assert s.get("n/a")["v"] == 1
    s.put({"metadata": {"name": "a", "namespace": "n", "resourceVersion": "11"}, "v": 2})
    assert s.get("n/a")["v"] == 2
    assert object_key({"metadata": {"name": "cq"}}) == "cq"


def _ev(etype: str, rv: str, v: int) -> dict:
    return {"type": etype, "object": {"metadata": {"name": "a", "namespace": "n",
                                                   "resourceVersion": rv}, "v": v}}


def test_watch_events_never_take_the_store_back_behind_a_writers_response() -> None:
    from app.kube.informers import Informer

    inf = Informer(None, JOBS)  # type: ignore[arg-type] - _apply needs no client
    seen: list[tuple[str, int]] = []
    inf.add_handler(lambda t, o, n: seen.append((t, (n or o)["v"])))
    inf._apply(_ev("ADDED", "5", 0))
    inf.store.put({"metadata": {"name": "a", "namespace": "n", "resourceVersion": "10"}, "v": 2})
    inf._apply(_ev("MODIFIED", "9", 1))  # older than what our write returned
    assert inf.store.get("n/a")["v"] == 2 and inf.resource_version == "9"
    inf._apply(_ev("MODIFIED", "10", 2))  # the event of our own write
    inf._apply({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}})
    assert inf.resource_version == "12"
    inf._apply(_ev("DELETED", "13", 2))
    assert seen == [("ADDED", 0), ("MODIFIED", 2), ("DELETED", 2)]
    assert inf.store.get("n/a") is None and inf.resource_version == "13"


def test_watch_error_event_410_raises_gone() -> None:
    from app.kube.informers import Informer

    inf = Informer(None, JOBS)  # type: ignore[arg-type]
    with pytest.raises(Gone):
        inf._apply({"type": "ERROR", "object": {"kind": "Status", "code": 410,
                                                "reason": "Expired", "message": "too old"}})


def test_the_event_of_a_writers_create_is_announced_as_added() -> None:
    """A writer put its create's response into the store before the watch event came: the
    handlers never saw the object, so the event is ADDED (old None), not MODIFIED."""
    from app.kube.informers import Informer

    inf = Informer(None, JOBS)  # type: ignore[arg-type] - _apply needs no client
    seen: list[tuple[str, object, int]] = []
    inf.add_handler(lambda t, o, n: seen.append((t, o, (n or o)["v"])))
    inf.store.put({"metadata": {"name": "a", "namespace": "n", "resourceVersion": "7"}, "v": 1})
    inf._apply(_ev("ADDED", "7", 1))
    inf._apply(_ev("MODIFIED", "8", 2))
    assert [(t, o is None, v) for t, o, v in seen] == [("ADDED", True, 1), ("MODIFIED", False, 2)]
    assert seen[1][1]["v"] == 1  # old = what the handlers were told before


def test_a_long_invalid_message_keeps_its_reason_at_the_end():
    """The API server's Invalid echoes the whole object before saying what is wrong; the
    error keeps the end, so a log line still says why (found by a fresh user's make run)."""
    body = json.dumps({"kind": "Status", "reason": "Invalid", "message":
                       "Job.batch \"x\" is invalid: spec.template: Invalid value: " + "x" * 5000
                       + ": field is immutable"})
    err = from_status(422, body)
    assert err.message.endswith("field is immutable") and len(err.message) < 2000
    assert err.message.startswith('Job.batch "x" is invalid')

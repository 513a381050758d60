"""HTTP adapter: the admission webhooks (mutating and validating) of every job kind and of the
Kueue kinds that carry a finalizer.

Thin and kind-blind: one ``POST`` endpoint per ``app.integrations.WEBHOOK_ROUTES`` entry (each
folder's ``ROUTES``, and the framework's ``/validate--v1-pod-owner``) and per
``app.controllers.finalizers.ROUTES`` entry (the ``resource-in-use`` finalizer on
ClusterQueues and ResourceFlavors at CREATE): parse the
``admission.k8s.io/v1`` AdmissionReview, run the route's decider
(``app.integrations.webhook_toolkit.WebhookRoute``) and build the response review (echoing
apiVersion, kind and uid). A decider's ``Verdict`` becomes: errors -> ``allowed: false``,
status 403 Forbidden, the messages joined by ``; ``; a patch -> allowed with a base64
JSONPatch (``patchType: JSONPatch``); else allowed. A route with a framework answers
``allowed`` unchanged when ``settings.integrations.frameworks`` does not enable it, and first
refuses an empty queue name or a Kueue key pykueue does not implement
(``app.integrations.unsupported``). The paths are Kueue's (``/mutate-batch-v1-job``,
``/validate--v1-pod``, ``/mutate-<group with - for .>-<version>-<kind>``, ...), listed in
manifests/webhook.

The API server appends ``?timeout=Ns``: routing is on the path only. Errors never become a 5xx:
a body that is not JSON or not an AdmissionReview -> HTTP 400 ``{"error": ..., "details": [...]}``;
a review whose object cannot be read -> ``allowed: false`` with status code 400 naming the field;
an unexpected exception -> ``allowed: false`` with status code 500 (fail closed) and a logged
traceback. One structured log line (JSON) per review: uid, namespace, name, operation, dryRun,
user, decision, code, latency_ms; never object bodies.

Callers: with ``Settings.webhook.client_names`` set (it needs ``server.client_ca_file``), every
route answers only a verified TLS client certificate whose common name is listed (the one
kube-apiserver presents through its AdmissionConfiguration); anyone else gets HTTP 403 before
the body is read (decision ``forbidden``). Unset (the default, as Kueue): open to whoever
reaches the port.

Inputs from ``app.state`` (read by ``WebhookEnv``): ``settings`` (``Settings.webhook``),
optional ``admission_lookup`` (``AdmissionLookup``: is a Job's Workload admitted?) and
``default_queue_lookup`` (``DefaultQueueLookup``). Without ``admission_lookup`` every Workload
counts as not admitted, so only pykueue's own identities may unsuspend a queued Job
(conservative: fail closed). Without ``default_queue_lookup`` there is no LocalQueue
defaulting and label removal is not limited by it.
Metric: histogram ``pykueue_webhook_request_duration_seconds{path, decision}`` in the app registry.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import msgspec
from fastapi import APIRouter, Request, Response
from prometheus_client import Histogram
from pydantic import ValidationError

from app.api.callers import refuse_unless_named
from app.api.health import metrics_registry
from app.api.limits import LoopBusy, LoopShare
from app.config import MAX_OBJECT_BYTES
from app.controllers import finalizers
from app.integrations import GROUP_PARENTS, WEBHOOK_ROUTES, managed_kinds
from app.integrations.unsupported import unsupported_errors
from app.integrations.webhook_toolkit import (
    UnreadableObjectError,
    Verdict,
    WebhookEnv,
    WebhookRoute,
    empty_queue_name_errors,
    reviewed_objects,
)
from app.models.admissionreview import (
    AdmissionRequest,
    AdmissionResponse,
    AdmissionReview,
    Status,
)

# Decisions (the ``decision`` label and log field).
ALLOWED = "allowed"  # allowed, no patch
PATCHED = "patched"  # allowed with a JSONPatch
DENIED = "denied"  # a rule refused it (status 403)
INVALID = "invalid"  # the review's object could not be read (status 400 inside the review)
BAD_REQUEST = "bad_request"  # body not JSON / not an AdmissionReview (HTTP 400)
ERROR = "error"  # unexpected exception (status 500 inside the review, fail closed)
BUSY = "busy"  # a large body waited too long for its share of the loop (HTTP 503)
FORBIDDEN = "forbidden"  # not kube-apiserver's client certificate (HTTP 403, body unread)
TOO_LARGE = "too_large"  # object or oldObject over webhook.max_object_bytes (status 413 inside)

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)

logger = logging.getLogger("pykueue.webhook")
router = APIRouter()


class _Outcome:
    """What a decision function returns: the response body plus log/metric fields."""

    __slots__ = ("response", "decision")

    def __init__(self, response: AdmissionResponse, decision: str) -> None:
        self.response = response
        self.decision = decision


def request_duration(app: Any) -> Histogram:
    """The app's ``pykueue_webhook_request_duration_seconds`` histogram, created on first use."""
    histogram = getattr(app.state, "webhook_request_duration", None)
    if histogram is None:
        histogram = Histogram(
            "pykueue_webhook_request_duration_seconds",
            "Time to answer one admission webhook request, by path and decision.",
            ["path", "decision"],
            buckets=_LATENCY_BUCKETS,
            registry=metrics_registry(app),
        )
        app.state.webhook_request_duration = histogram
    return histogram


def _allow(req: AdmissionRequest) -> _Outcome:
    return _Outcome(AdmissionResponse(uid=req.uid, allowed=True), ALLOWED)


def _deny(req: AdmissionRequest, code: int, reason: str, message: str, decision: str) -> _Outcome:
    status = Status(status="Failure", code=code, reason=reason, message=message)
    return _Outcome(AdmissionResponse(uid=req.uid, allowed=False, status=status), decision)


def _patched(req: AdmissionRequest, patch: list[Any]) -> _Outcome:
    if not patch:
        return _allow(req)
    encoded = base64.b64encode(json.dumps(patch, separators=(",", ":")).encode()).decode("ascii")
    response = AdmissionResponse(uid=req.uid, allowed=True, patch=encoded, patch_type="JSONPatch")
    return _Outcome(response, PATCHED)


def _bad_request(error: str, exc: ValidationError | None) -> Response:
    details = []
    if exc is not None:
        details = [
            {"loc": ".".join(str(p) for p in e["loc"]), "msg": e["msg"], "type": e["type"]}
            for e in exc.errors(include_url=False, include_input=False, include_context=False)
        ]
    body = json.dumps({"error": error, "details": details})
    return Response(body, status_code=400, media_type="application/json")


class _EnvelopeRequest(msgspec.Struct, rename="camel"):
    uid: str = ""
    operation: str = ""
    namespace: str = ""
    name: str = ""
    object: msgspec.Raw = msgspec.Raw()
    old_object: msgspec.Raw = msgspec.Raw()


class _Envelope(msgspec.Struct, rename="camel"):
    api_version: str = ""
    kind: str = ""
    request: _EnvelopeRequest | None = None


_ENVELOPE = msgspec.json.Decoder(_Envelope)


def _oversized(body: bytes, limit: int) -> tuple[_Envelope, int] | None:
    """For a v1 AdmissionReview whose ``object`` or ``oldObject`` spans more than ``limit``
    bytes of JSON: its envelope (uid, operation, namespace, name) and that size, read without
    building the objects (a scan in C: milliseconds for megabytes, where parsing a 6 MB review
    of 100,000 small containers into Python objects holds the event loop ~1 s). None for
    anything else, which the normal parse then answers (including a malformed body's 400)."""
    try:
        env = _ENVELOPE.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    req = env.request
    if env.api_version != "admission.k8s.io/v1" or env.kind != "AdmissionReview" \
            or req is None or not req.uid:
        return None
    size = max(len(req.object), len(req.old_object))
    return (env, size) if size > limit else None


def _refuse_oversized(env: _Envelope, size: int, limit: int) -> AdmissionReview:
    req = env.request
    assert req is not None
    message = (f"the object is {size} bytes of JSON, over the {limit} bytes pykueue's "
               f"webhook reads (webhook.max_object_bytes; etcd's default --max-request-bytes "
               f"of 1.5 MiB stores no larger object)")
    status = Status(status="Failure", code=413, reason="RequestEntityTooLarge", message=message)
    return AdmissionReview(api_version="admission.k8s.io/v1", kind="AdmissionReview",
                           response=AdmissionResponse(uid=req.uid, allowed=False, status=status))


def _parse(body: bytes) -> tuple[AdmissionReview | None, Response | None]:
    """The review in ``body``, or the HTTP 400 response saying why there is none."""
    try:
        review = AdmissionReview.model_validate_json(body)
    except ValidationError as exc:
        if any(e["type"] == "json_invalid" for e in exc.errors(include_url=False)):
            return None, _bad_request("request body is not JSON", exc)
        return None, _bad_request("request body is not an admission.k8s.io/v1 AdmissionReview", exc)
    if review.request is None:
        return None, _bad_request(
            "request body is not an admission.k8s.io/v1 AdmissionReview: request is missing", None
        )
    return review, None


def _object_label(req: AdmissionRequest) -> str:
    """The Job's name for logs: ``request.name``, else ``metadata.name``, else ``generateName*``."""
    if req.name:
        return req.name
    metadata = req.object.get("metadata") if isinstance(req.object, dict) else None
    if isinstance(metadata, dict):
        if isinstance(metadata.get("name"), str) and metadata["name"]:
            return metadata["name"]
        if isinstance(metadata.get("generateName"), str):
            return metadata["generateName"] + "*"
    return ""


def _refuse_caller(request: Request) -> Response | None:
    """403 before the body is read unless the caller presented a verified client certificate
    named in ``webhook.client_names`` (when that list is set); None when it may call."""
    names = _webhook_setting(request, "client_names", [])
    if not names:
        return None
    return refuse_unless_named(request, names, "the admission webhook (kube-apiserver's)")


def _webhook_setting(request: Request, name: str, default: Any) -> Any:
    """``settings.webhook.<name>``, or ``default`` without settings. Settings that cannot be
    read are a bug: the review's own rules then fail closed on them (status 500 inside)."""
    settings = getattr(request.app.state, "settings", None)
    try:
        return default if settings is None else getattr(settings.webhook, name)
    except Exception:
        logger.exception("webhook: settings.webhook.%s cannot be read", name)
        return default


async def _serve(
    request: Request, path: str, decide: Callable[[AdmissionRequest, Any], _Outcome]
) -> Response:
    started = time.perf_counter()
    refused = _refuse_caller(request)
    if refused is not None:
        request_duration(request.app).labels(path, FORBIDDEN).observe(
            time.perf_counter() - started)
        return refused
    body = await request.body()
    pacer: LoopShare | None = getattr(request.app.state, "large_body_pacer", None)
    if pacer is None:
        return _answer(request, path, decide, body, started)
    try:
        # A large body's parse holds the loop the controllers share: paced.
        response: Response = await pacer.run(
            len(body), lambda: _answer(request, path, decide, body, started))
    except LoopBusy:
        elapsed = time.perf_counter() - started
        request_duration(request.app).labels(path, BUSY).observe(elapsed)
        logger.info(json.dumps({"event": "admission_review", "path": path, "decision": BUSY,
                                "code": 503, "bytes": len(body),
                                "latency_ms": round(elapsed * 1000, 3)}))
        return Response(json.dumps({"error": "too many large admission reviews; retry later"}),
                        status_code=503, media_type="application/json",
                        headers={"Retry-After": "1"})
    return response


def _answer(request: Request, path: str, decide: Callable[[AdmissionRequest, Any], _Outcome],
            body: bytes, started: float) -> Response:
    """The response to the review in ``body`` (synchronous: parse, rules, log line)."""
    fields: dict[str, Any] = {"path": path}
    limit = _webhook_setting(request, "max_object_bytes", MAX_OBJECT_BYTES)
    oversized = _oversized(body, limit) if len(body) > limit else None
    review, bad = (None, None) if oversized is not None else _parse(body)
    if oversized is not None:
        env, size = oversized
        assert env.request is not None
        fields.update(uid=env.request.uid, namespace=env.request.namespace,
                      name=env.request.name, operation=env.request.operation, bytes=size)
        answer = _refuse_oversized(env, size, limit)
        decision, code = TOO_LARGE, 413
        fields["message"] = answer.response.status.message  # type: ignore[union-attr]
        response = Response(answer.model_dump_json(by_alias=True, exclude_none=True),
                            media_type="application/json")
    elif bad is not None:
        decision, code, response = BAD_REQUEST, 400, bad
    else:
        assert review is not None and review.request is not None
        req = review.request
        fields.update(
            uid=req.uid,
            namespace=req.namespace,
            name=_object_label(req),
            operation=req.operation,
            dryRun=bool(req.dry_run),
            user=req.user_info.username,
        )
        try:
            outcome = decide(req, request.app.state)
        except UnreadableObjectError as exc:
            message = f"cannot read the object: {exc}"
            outcome = _deny(req, 400, "BadRequest", message, INVALID)
        except Exception:
            logger.exception("webhook: unexpected error on review uid=%s", req.uid)
            message = "internal error in pykueue's admission webhook; see its log"
            outcome = _deny(req, 500, "InternalError", message, ERROR)
        answer = AdmissionReview(
            api_version=review.api_version, kind=review.kind, response=outcome.response
        )
        decision = outcome.decision
        code = outcome.response.status.code if outcome.response.status else 200
        if outcome.response.status is not None:
            fields["message"] = (outcome.response.status.message or "")[:500]
        response = Response(
            answer.model_dump_json(by_alias=True, exclude_none=True), media_type="application/json"
        )
    elapsed = time.perf_counter() - started
    request_duration(request.app).labels(path, decision).observe(elapsed)
    fields.update(decision=decision, code=code, latency_ms=round(elapsed * 1000, 3))
    logger.info(json.dumps({"event": "admission_review", **fields}))
    return response


def _outcome(req: AdmissionRequest, verdict: Verdict) -> _Outcome:
    """The response for a decider's ``verdict``: refused (403 Forbidden, the errors joined
    by ``; ``), allowed with its JSONPatch, or allowed."""
    if verdict.errors:
        return _deny(req, 403, "Forbidden", "; ".join(verdict.errors), DENIED)
    return _patched(req, list(verdict.patch))


def _decider(route: WebhookRoute) -> Callable[[AdmissionRequest, Any], _Outcome]:
    """``route.decide`` over the app's state, gated by its framework: when
    ``settings.integrations.frameworks`` does not list it (a Kueue name) every request is
    allowed unchanged, as Kueue registers no webhook for an integration it does not manage
    (its objects are not queued at all). A queued object carrying a Kueue key pykueue does
    not implement is refused first (``app.integrations.unsupported``), and so is an empty
    queue name (``empty_queue_name_errors``), by the mutating webhook too, since some kinds
    have no validating webhook on CREATE. A route without a framework is always served,
    without those two checks."""
    def decide(req: AdmissionRequest, state: Any) -> _Outcome:
        env = WebhookEnv(state, managed_kinds, GROUP_PARENTS)
        if route.framework is not None:
            if env.settings is not None \
                    and not env.settings.integrations.enabled(route.framework):
                return _allow(req)
            if req.operation in ("CREATE", "UPDATE") and not req.sub_resource:
                old, new = reviewed_objects(req)
                errors = empty_queue_name_errors(old, new, env.policy.queue_name_label) \
                    + unsupported_errors(old, new)
                if errors:
                    return _deny(req, 403, "Forbidden", "; ".join(errors), DENIED)
        return _outcome(req, route.decide(req, env))
    return decide


def _endpoint(path: str, decide: Callable[[AdmissionRequest, Any], _Outcome]) -> Any:
    async def endpoint(request: Request) -> Response:
        return await _serve(request, path, decide)
    return endpoint


# Plain Starlette routes: the endpoints read the raw body themselves, so FastAPI's dependency
# solving and body parsing would only add latency on the API server's critical path.
for _route in (*WEBHOOK_ROUTES, *finalizers.ROUTES):
    router.add_route(_route.path, _endpoint(_route.path, _decider(_route)), methods=["POST"],
                     include_in_schema=False)

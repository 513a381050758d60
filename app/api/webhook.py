"""HTTP adapter: the admission webhooks for ``batch/v1`` Jobs and plain Pods (mutating and
validating).

Thin: parse the ``admission.k8s.io/v1`` AdmissionReview, call the pure rules of
``app.integrations.webhook``, build the response review (echoing apiVersion, kind and uid).

- ``POST /mutate-batch-v1-job``: CREATE of a queued Job -> allowed with a base64 JSONPatch
  (``patchType: JSONPatch``) setting ``/spec/suspend`` to true; anything else -> allowed, no patch.
- ``POST /validate-batch-v1-job``: CREATE and UPDATE rules (queue-name label, who unsuspends);
  a violation -> ``allowed: false``, status 403 Forbidden, message naming the fields.
- ``POST /mutate--v1-pod``, ``/validate--v1-pod``: plain Pods (``app.integrations.pod.rules``):
  a queued Pod is gated at CREATE; only pykueue lifts the gate.
- ``POST /mutate-apps-v1-deployment``, ``/validate-apps-v1-deployment``: a queued
  Deployment's pod template gets the queue (``app.integrations.deployment.rules``).
- ``POST /mutate-apps-v1-statefulset``, ``/validate-apps-v1-statefulset``: likewise, and its
  pods form one group sized by ``spec.replicas`` (``app.integrations.statefulset.rules``).
- ``POST /validate-apps-v1-statefulset-scale``: UPDATE of ``statefulsets/scale`` (a Scale has
  no labels, so its webhook has no objectSelector; the StatefulSet is found by name in the
  store of queued ones): the same replicas rule.
- ``POST /mutate-<group>-<version>-<kind>``, ``/validate-...`` for each operator kind (its
  ``rules``, ``app.integrations.CRD_RULES``: JobSet, PyTorchJob, TFJob, XGBoostJob, PaddleJob,
  JAXJob, MPIJob, e.g. ``/mutate-jobset-x-k8s-io-v1alpha2-jobset``,
  ``/mutate-kubeflow-org-v1-pytorchjob``): a queued object is created suspended; its queue
  name is immutable while it runs (``app.integrations.crdrules`` with the kind's lever).

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

Inputs from ``app.state``: ``settings`` (``Settings.webhook``), optional ``admission_lookup``
(``AdmissionLookup``: is a Job's Workload admitted?) and ``default_queue_lookup``
(``DefaultQueueLookup``). Without ``admission_lookup`` every Workload counts as not admitted, so
only pykueue's own identities may unsuspend a queued Job (conservative: fail closed). Without
``default_queue_lookup`` there is no LocalQueue defaulting and label removal is not limited by it.
Metric: histogram ``pykueue_webhook_request_duration_seconds{path, decision}`` in the app registry.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import msgspec
from fastapi import APIRouter, Request, Response
from prometheus_client import Histogram
from pydantic import ValidationError

from app.api.callers import refuse_unless_named
from app.api.health import metrics_registry
from app.api.limits import LoopBusy, LoopShare
from app.config import MAX_OBJECT_BYTES
from app.integrations import CRD_RULES, managed_kinds
from app.integrations.crdrules import CrdRules
from app.integrations.deployment.rules import mutate_deployment, validate_deployment_update
from app.integrations.pod.rules import mutate_pod, scheduling_gates, validate_pod
from app.integrations.statefulset.rules import (
    mutate_statefulset,
    scale_replicas,
    validate_statefulset_scale,
    validate_statefulset_update,
)
from app.integrations.unsupported import unsupported_errors
from app.integrations.webhook import (
    DEFAULT_LOCAL_QUEUE,
    UnreadableObjectError,
    WebhookPolicy,
    empty_queue_name_errors,
    is_batch_job,
    mutate,
    mutate_update,
    owner_label_errors,
    pod_count,
    priority_class_label_errors,
    queue_name_errors,
    read_job,
    read_labels,
    read_name,
    read_queue_name,
    read_suspend,
    validate_create,
    validate_update,
)
from app.models.admissionreview import (
    AdmissionRequest,
    AdmissionResponse,
    AdmissionReview,
    Status,
)

MUTATE_PATH = "/mutate-batch-v1-job"
VALIDATE_PATH = "/validate-batch-v1-job"
MUTATE_POD_PATH = "/mutate--v1-pod"
VALIDATE_POD_PATH = "/validate--v1-pod"
# Every pod of an admitted job (objectSelector kueue.x-k8s.io/podset): its controller's labels stay.
VALIDATE_POD_OWNER_PATH = "/validate--v1-pod-owner"
MUTATE_DEPLOYMENT_PATH = "/mutate-apps-v1-deployment"
VALIDATE_DEPLOYMENT_PATH = "/validate-apps-v1-deployment"
MUTATE_STATEFULSET_PATH = "/mutate-apps-v1-statefulset"
VALIDATE_STATEFULSET_PATH = "/validate-apps-v1-statefulset"
VALIDATE_STATEFULSET_SCALE_PATH = "/validate-apps-v1-statefulset-scale"

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


def _policy(state: Any) -> WebhookPolicy:
    settings = getattr(state, "settings", None)
    if settings is None:
        return WebhookPolicy()
    return WebhookPolicy(controller_usernames=frozenset(settings.webhook.controller_usernames))


def _job_uid(job: Mapping[str, Any]) -> str:
    uid = (job.get("metadata") or {}).get("uid")
    return uid if isinstance(uid, str) else ""


def _lookup(state: Any, attribute: str, method: str, *args: str) -> bool | None:
    """Ask an optional lookup on ``app.state``; None when absent or when it fails."""
    provider = getattr(state, attribute, None)
    if provider is None:
        return None
    try:
        answer = getattr(provider, method)(*args)
    except Exception:
        logger.exception("webhook: %s.%s failed; treating the answer as unknown", attribute, method)
        return None
    return answer if isinstance(answer, bool) else None


def _is_job_review(req: AdmissionRequest) -> bool:
    """True for a review about a batch Job (by ``request.kind``, else by the object's own kind)."""
    kind = req.kind or req.request_kind
    if kind is not None and kind.kind:
        return kind.group == "batch" and kind.kind == "Job"
    return not isinstance(req.object, dict) or is_batch_job(req.object)


def _allow(req: AdmissionRequest) -> _Outcome:
    return _Outcome(AdmissionResponse(uid=req.uid, allowed=True), ALLOWED)


def _deny(req: AdmissionRequest, code: int, reason: str, message: str, decision: str) -> _Outcome:
    status = Status(status="Failure", code=code, reason=reason, message=message)
    return _Outcome(AdmissionResponse(uid=req.uid, allowed=False, status=status), decision)


def _read(value: object, where: str) -> dict[str, Any]:
    """The Job at ``where`` (``request.object``), checked for every field the rules read, so
    UnreadableObjectError names the full path (``request.oldObject.spec.suspend``)."""
    return _read_obj(value, where, read_suspend)


def _decide_mutation(req: AdmissionRequest, state: Any) -> _Outcome:
    if req.operation not in ("CREATE", "UPDATE") or req.sub_resource \
            or not _is_job_review(req):
        return _allow(req)
    policy = _policy(state)
    job = _read(req.object, "request.object")
    if _has_managed_ancestor(state, job):
        # Kueue WorkloadShouldBeSuspended: a job an ancestor queues (a JobSet's Job) is left
        # to that ancestor and its operator, its queue label notwithstanding.
        return _allow(req)
    if req.operation == "UPDATE":
        old_job = _read(req.old_object, "request.oldObject")
        return _patched(req, mutate_update(old_job, job, req.user_info.username, policy))
    default_queue, manage = None, False
    jobs = _jobs_settings(state)
    if not read_queue_name(job, policy.queue_name_label) and jobs is not None \
            and not _controlled_by_managed_kind(job, state) \
            and (jobs.local_queue_defaulting or jobs.manage_jobs_without_queue_name) \
            and _lookup(state, "default_queue_lookup", "namespace_managed", req.namespace):
        # Kueue: only in namespaces managedJobsNamespaceSelector matches (KQ-23).
        has_default = jobs.local_queue_defaulting and _lookup(
            state, "default_queue_lookup", "has_default_local_queue", req.namespace)
        default_queue = DEFAULT_LOCAL_QUEUE if has_default else None
        manage = jobs.manage_jobs_without_queue_name
    patch = mutate(job, req.operation, queue_name_label=policy.queue_name_label,
                   default_queue=default_queue, manage_unlabelled=manage)
    return _patched(req, patch)


def _managed_kinds(state: Any) -> frozenset[tuple[str, str]]:
    """(API group, kind) of the job kinds pykueue manages: the reconciler's (enabled and
    served), else those ``settings.integrations.frameworks`` enables (Kueue counts only
    enabled integrations as managed owners)."""
    kinds = getattr(getattr(state, "admission_lookup", None), "managed_kinds", None)
    answer = kinds() if callable(kinds) else None
    if isinstance(answer, frozenset):
        return answer
    settings = getattr(state, "settings", None)
    return managed_kinds(settings.integrations.frameworks if settings is not None else None)


def _has_managed_ancestor(state: Any, job: dict[str, Any]) -> bool:
    """True when an ancestor queues ``job`` (the reconciler's stores; unknown counts as no:
    the Job is then queued as its own, as before the stores sync)."""
    ask = getattr(getattr(state, "admission_lookup", None), "has_managed_ancestor", None)
    if ask is None:
        return False
    try:
        return ask(job) is True
    except Exception:
        logger.exception("webhook: has_managed_ancestor failed; treating the Job as its own")
        return False


def _controlled_by_managed_kind(obj: Any, state: Any) -> bool:
    """True when ``obj``'s controller ownerReference is an object of a job kind pykueue
    manages (Kueue ``IsOwnerManagedByKueueForObject``: enabled kinds only)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    refs = meta.get("ownerReferences") if isinstance(meta, dict) else None
    kinds = _managed_kinds(state)
    return any(isinstance(r, dict) and r.get("controller") is True and (
        str(r.get("apiVersion", "")).rpartition("/")[0], str(r.get("kind", ""))) in kinds
        for r in refs or [] if isinstance(refs, list))


def _jobs_settings(state: Any) -> Any:
    settings = getattr(state, "settings", None)
    return None if settings is None else settings.jobs


def _manages_unlabelled_in(state: Any, namespace: str) -> bool:
    """Whether objects without a queue name are queued in ``namespace``
    (``jobs.manage_jobs_without_queue_name`` and ``managed_jobs_namespace_selector``), for the
    Pod, Deployment and StatefulSet webhooks. A namespace the stores do not know (not synced,
    or created a moment ago) is judged by the one label every Namespace carries,
    ``kubernetes.io/metadata.name``: exact for the default selector (by name), and for a
    selector on other labels the answer is "not managed" until the Namespace is seen."""
    jobs = _jobs_settings(state)
    if jobs is None or not jobs.manage_jobs_without_queue_name:
        return False
    known = _lookup(state, "default_queue_lookup", "namespace_managed", namespace)
    if known is None:
        return bool(jobs.namespace_managed({"kubernetes.io/metadata.name": namespace}))
    return known


def _patched(req: AdmissionRequest, patch: list[Any]) -> _Outcome:
    if not patch:
        return _allow(req)
    encoded = base64.b64encode(json.dumps(patch, separators=(",", ":")).encode()).decode("ascii")
    response = AdmissionResponse(uid=req.uid, allowed=True, patch=encoded, patch_type="JSONPatch")
    return _Outcome(response, PATCHED)


def _decide_validation(req: AdmissionRequest, state: Any) -> _Outcome:
    if req.operation not in ("CREATE", "UPDATE") or req.sub_resource or not _is_job_review(req):
        return _allow(req)
    policy = _policy(state)
    username = req.user_info.username
    job = _read(req.object, "request.object")
    if _has_managed_ancestor(state, job):
        # Its ancestor's operator creates and resumes it (a JobSet resumes its Jobs once
        # admitted): only the label's format is pykueue's business (Kueue ValidateJobOnCreate),
        # and, when configured, who may make it run.
        errors = queue_name_errors(job, policy) + _child_runner_errors(req, state, job) \
            + _child_share_errors(req, state, job)
    elif req.operation == "CREATE":
        errors = validate_create(job, username, policy)
    else:
        old_job = _read(req.old_object, "request.oldObject")
        name = req.name or read_name(job)
        admitted = _lookup(state, "admission_lookup", "is_admitted", req.namespace, name,
                           _job_uid(old_job) or _job_uid(job))
        jobs = _jobs_settings(state)
        has_default = (jobs is None or jobs.local_queue_defaulting) and _lookup(
            state, "default_queue_lookup", "has_default_local_queue", req.namespace
        )
        manages = bool(jobs is not None and jobs.manage_jobs_without_queue_name
                       and _lookup(state, "default_queue_lookup", "namespace_managed",
                                   req.namespace)
                       and not _controlled_by_managed_kind(old_job, state))
        errors = validate_update(
            old_job, job, username, admitted, policy, default_local_queue_exists=has_default,
            manages_unlabelled=manages,
        )
        if manages or read_queue_name(old_job, policy.queue_name_label) \
                or read_queue_name(job, policy.queue_name_label):
            errors += priority_class_label_errors(old_job, job, read_suspend(job))
    if errors:
        return _deny(req, 403, "Forbidden", "; ".join(errors), DENIED)
    return _allow(req)


def _child_runner_errors(req: AdmissionRequest, state: Any, job: dict[str, Any]) -> list[str]:
    """With ``webhook.child_job_creators`` set, only those identities (and pykueue's) may
    create a running Job that a queued ancestor owns, resume one, resize a running one, or
    make a running Job such a child: the ancestor's admission covers the pods its operator
    creates, not Jobs a tenant hangs under it."""
    settings = getattr(state, "settings", None)
    allowed = set(settings.webhook.child_job_creators) if settings is not None else set()
    username = req.user_info.username
    if not allowed or username in allowed or username in _policy(state).controller_usernames:
        return []
    if read_suspend(job):
        return []
    if req.operation == "UPDATE":
        old = _read(req.old_object, "request.oldObject")
        if (not read_suspend(old) and _has_managed_ancestor(state, old)
                and pod_count(old) == pod_count(job)):
            return []  # a running child changed otherwise (labels, annotations)
    return [f"spec.suspend: a Job owned by a queued {_ancestor_phrase(job)} runs only when "
            f"its operator ({', '.join(sorted(allowed))}) creates or resumes it "
            "(webhook.child_job_creators); create it suspended or submit it queued on its own"]


def _child_share_errors(req: AdmissionRequest, state: Any, job: dict[str, Any]) -> list[str]:
    """An UPDATE (by anyone but pykueue) that raises a running child Job's pod count above
    its share of its managed ancestor's admission (``child_job_share``: a JobSet's Job its
    replicatedJob's pods per Job) is refused; the operators never change it. Unknown shares
    pass (the reconciler sets a Job beyond its share back)."""
    if req.operation != "UPDATE" or read_suspend(job) \
            or req.user_info.username in _policy(state).controller_usernames:
        return []
    ask = getattr(getattr(state, "admission_lookup", None), "child_job_share", None)
    try:
        share = ask(job) if ask is not None else None
    except Exception:
        logger.exception("webhook: child_job_share failed; treating it as unknown")
        share = None
    old = _read(req.old_object, "request.oldObject")
    have, before = pod_count(job), pod_count(old)
    if not isinstance(share, int) or have is None or have <= share \
            or (before is not None and have <= before):
        return []
    return [f"spec.parallelism: a Job of {_ancestor_phrase(job)} runs at most {share} pod(s) "
            f"at once, its share of that object's admission, not {have}; resize the "
            f"{_ancestor_phrase(job).split(' ')[0]} itself (it is queued again for its new "
            "shape)"]


def _ancestor_phrase(job: dict[str, Any]) -> str:
    for ref in (job.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller") is True:
            return f"{ref.get('kind', 'object')} {ref.get('name', '')!r}"
    return "object"


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
        # A large body's parse holds the loop the controllers share: paced (breaker8).
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


def _gated(framework: str, decide: Callable[[AdmissionRequest, Any], _Outcome]
           ) -> Callable[[AdmissionRequest, Any], _Outcome]:
    """``decide``, unless ``settings.integrations.frameworks`` does not list ``framework``
    (a Kueue name): then every request is allowed unchanged, as Kueue registers no webhook
    for an integration it does not manage (its objects are not queued at all). A queued
    object carrying a Kueue key pykueue does not implement is refused first
    (``app.integrations.unsupported``), and so is an empty queue name
    (``empty_queue_name_errors``), by the mutating webhook too, since some kinds have no
    validating webhook on CREATE."""
    def gated(req: AdmissionRequest, state: Any) -> _Outcome:
        settings = getattr(state, "settings", None)
        if settings is not None and not settings.integrations.enabled(framework):
            return _allow(req)
        if req.operation in ("CREATE", "UPDATE") and not req.sub_resource:
            old, new = _objects(req)
            errors = empty_queue_name_errors(old, new, _policy(state).queue_name_label) \
                + unsupported_errors(old, new)
            if errors:
                return _deny(req, 403, "Forbidden", "; ".join(errors), DENIED)
        return decide(req, state)
    return gated


_gated_job_mutation = _gated("batch/job", _decide_mutation)
_gated_job_validation = _gated("batch/job", _decide_validation)


async def mutate_batch_v1_job(request: Request) -> Response:
    """Mutating webhook for batch/v1 Jobs: suspend queued Jobs on CREATE (JSONPatch)."""
    return await _serve(request, MUTATE_PATH, _gated_job_mutation)


async def validate_batch_v1_job(request: Request) -> Response:
    """Validating webhook for batch/v1 Jobs: queue-name label and unsuspend rules."""
    return await _serve(request, VALIDATE_PATH, _gated_job_validation)


def _is_review_of(req: AdmissionRequest, group: str, kind_name: str) -> bool:
    kind = req.kind or req.request_kind
    if kind is not None and kind.kind:
        return kind.group == group and kind.kind == kind_name
    return isinstance(req.object, dict) and req.object.get("kind", kind_name) == kind_name


def _read_obj(value: object, where: str, *readers: Callable[[Any], Any]) -> dict[str, Any]:
    """The object at ``where``, checked by ``readers`` so that an UnreadableObjectError names
    the full path (``request.oldObject.spec.schedulingGates``)."""
    try:
        obj = read_job(value)
        read_labels(obj)
        for read in readers:
            read(obj)
    except UnreadableObjectError as exc:
        raise UnreadableObjectError(
            ".".join(filter(None, (where, exc.field))), exc.problem
        ) from None
    return obj  # type: ignore[return-value]


def _objects(req: AdmissionRequest, *readers: Callable[[Any], Any]
             ) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """(old object or None on CREATE, new object)."""
    new = _read_obj(req.object, "request.object", *readers)
    old = (_read_obj(req.old_object, "request.oldObject", *readers)
           if req.operation == "UPDATE" else None)
    return old, new


def _verdict(req: AdmissionRequest, errors: list[str]) -> _Outcome:
    if errors:
        return _deny(req, 403, "Forbidden", "; ".join(errors), DENIED)
    return _allow(req)


def _decide_pod_mutation(req: AdmissionRequest, state: Any) -> _Outcome:
    if req.operation != "CREATE" or req.sub_resource or not _is_review_of(req, "", "Pod"):
        return _allow(req)
    _, pod = _objects(req, scheduling_gates)
    lookup = getattr(state, "admission_lookup", None)

    def replicas(namespace: str, name: str) -> int | None:
        try:
            answer = lookup.statefulset_replicas(namespace, name) if lookup else None
        except Exception:
            logger.exception("webhook: statefulset_replicas failed; treating it as unknown")
            return None
        return answer if isinstance(answer, int) else None

    return _patched(req, mutate_pod(
        pod, req.operation, _policy(state), _managed_kinds(state), replicas,
        manage_unlabelled=_manages_unlabelled_in(state, req.namespace)))


def _decide_pod_validation(req: AdmissionRequest, state: Any) -> _Outcome:
    if req.operation not in ("CREATE", "UPDATE") or req.sub_resource \
            or not _is_review_of(req, "", "Pod"):
        return _allow(req)
    old, pod = _objects(req, scheduling_gates)
    return _verdict(req, validate_pod(
        old, pod, req.user_info.username, _policy(state), _managed_kinds(state),
        manage_unlabelled=old is None and _manages_unlabelled_in(state, req.namespace)))


def _decide_pod_owner_labels(req: AdmissionRequest, state: Any) -> _Outcome:
    if req.operation != "UPDATE" or req.sub_resource or not _is_review_of(req, "", "Pod"):
        return _allow(req)
    old, pod = _objects(req)
    return _verdict(req, owner_label_errors(old, pod, req.user_info.username, _policy(state)))


def _decide_statefulset_scale(req: AdmissionRequest, state: Any) -> _Outcome:
    resource = req.resource
    if req.operation != "UPDATE" or req.sub_resource != "scale" or resource is None \
            or (resource.group, resource.resource) != ("apps", "statefulsets"):
        return _allow(req)
    old, new = _objects(req, lambda o: scale_replicas(o, "spec"),
                        lambda o: scale_replicas(o, "status"))
    assert old is not None
    lookup = getattr(state, "admission_lookup", None)
    try:
        sts = lookup.queued_statefulset(req.namespace, req.name) if lookup else None
    except Exception:
        logger.exception("webhook: queued_statefulset failed; treating it as unknown")
        sts = None
    return _verdict(req, validate_statefulset_scale(
        old, new, sts if isinstance(sts, dict) else None, req.user_info.username,
        _policy(state)))


def _owner_decisions(kind: str, mutate: Callable[..., list[Any]],
                     validate: Callable[..., list[str]],
                     ) -> tuple[Callable[[AdmissionRequest, Any], _Outcome],
                                Callable[[AdmissionRequest, Any], _Outcome]]:
    """The mutation and validation deciders of an ``apps/v1`` owner of queued Pods
    (Deployment, StatefulSet): ``mutate(obj, operation, policy, manage_unlabelled=...)`` on
    CREATE/UPDATE,
    ``validate(old, new, username, policy)`` on UPDATE."""
    def mutation(req: AdmissionRequest, state: Any) -> _Outcome:
        if req.operation not in ("CREATE", "UPDATE") or req.sub_resource \
                or not _is_review_of(req, "apps", kind):
            return _allow(req)
        _, obj = _objects(req)
        return _patched(req, mutate(obj, req.operation, _policy(state),
                                    manage_unlabelled=_manages_unlabelled_in(state,
                                                                             req.namespace)))

    def validation(req: AdmissionRequest, state: Any) -> _Outcome:
        if req.operation != "UPDATE" or req.sub_resource or not _is_review_of(req, "apps", kind):
            return _allow(req)
        old, obj = _objects(req)
        assert old is not None
        return _verdict(req, validate(old, obj, req.user_info.username, _policy(state)))

    return mutation, validation


def _crd_decisions(rules: CrdRules) -> tuple[Callable[[AdmissionRequest, Any], _Outcome],
                                              Callable[[AdmissionRequest, Any], _Outcome]]:
    """(mutation, validation) deciders of an operator's kind (``app.integrations.crdrules``):
    the mutation on CREATE, the validation on CREATE and UPDATE of the kind itself."""
    def of_kind(req: AdmissionRequest, operations: tuple[str, ...]) -> bool:
        return (req.operation in operations and not req.sub_resource
                and _is_review_of(req, rules.group, rules.kind))

    def mutation(req: AdmissionRequest, state: Any) -> _Outcome:
        if not of_kind(req, ("CREATE",)):
            return _allow(req)
        _, obj = _objects(req)
        return _patched(req, rules.mutate(obj, req.operation, _policy(state)))

    def validation(req: AdmissionRequest, state: Any) -> _Outcome:
        if not of_kind(req, ("CREATE", "UPDATE")):
            return _allow(req)
        old, obj = _objects(req)
        return _verdict(req, rules.validate(old, obj, req.user_info.username, _policy(state)))

    return mutation, validation


# Plain Starlette routes: the endpoints read the raw body themselves, so FastAPI's dependency
# solving and body parsing would only add latency on the API server's critical path.
router.add_route(MUTATE_PATH, mutate_batch_v1_job, methods=["POST"], include_in_schema=False)
router.add_route(VALIDATE_PATH, validate_batch_v1_job, methods=["POST"], include_in_schema=False)


def _endpoint(path: str, decide: Callable[[AdmissionRequest, Any], _Outcome]) -> Any:
    async def endpoint(request: Request) -> Response:
        return await _serve(request, path, decide)
    return endpoint


# Pods, Deployments, StatefulSets and the operators' kinds (app.integrations): path ->
# (Kueue framework name, decider).
_KIND_ROUTES: dict[str, tuple[str, Callable[[AdmissionRequest, Any], _Outcome]]] = {
    MUTATE_POD_PATH: ("pod", _decide_pod_mutation),
    VALIDATE_POD_PATH: ("pod", _decide_pod_validation),
    VALIDATE_STATEFULSET_SCALE_PATH: ("statefulset", _decide_statefulset_scale),
}
for _path_pair, _kind, _mutate, _validate in (
        ((MUTATE_DEPLOYMENT_PATH, VALIDATE_DEPLOYMENT_PATH), "Deployment", mutate_deployment,
         validate_deployment_update),
        ((MUTATE_STATEFULSET_PATH, VALIDATE_STATEFULSET_PATH), "StatefulSet", mutate_statefulset,
         validate_statefulset_update)):
    for _path, _decide in zip(_path_pair, _owner_decisions(_kind, _mutate, _validate),
                              strict=True):
        _KIND_ROUTES[_path] = (_kind.lower(), _decide)
for _rules in CRD_RULES:
    for _path, _decide in zip((_rules.mutate_path, _rules.validate_path),
                              _crd_decisions(_rules), strict=True):
        _KIND_ROUTES[_path] = (f"{_rules.group}/{_rules.kind.lower()}", _decide)
for _path, (_framework, _decide) in _KIND_ROUTES.items():
    router.add_route(_path, _endpoint(_path, _gated(_framework, _decide)), methods=["POST"],
                     include_in_schema=False)
# Not gated by integrations.frameworks: a pod of any admitted job, whatever made it.
router.add_route(VALIDATE_POD_OWNER_PATH, _endpoint(VALIDATE_POD_OWNER_PATH,
                                                    _decide_pod_owner_labels),
                 methods=["POST"], include_in_schema=False)

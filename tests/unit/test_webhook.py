"""The admission webhook for batch/v1 Jobs: pure rules and AdmissionReviews in and out over the
real ASGI app (no cluster). Cases KQ-22 and KQ-24 (webhook parts) keep their ids in the names."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.config import JobsSettings, ServerSettings, Settings, WebhookSettings
from app.integrations.batchjob.webhook_rules import (
    mutate,
    mutate_update,
    read_suspend,
    validate_update,
)
from app.integrations.webhook_toolkit import (
    UnreadableObjectError,
    WebhookPolicy,
    escape_pointer_token,
    json_pointer,
)
from app.main import create_app
from app.wire.names import QUEUE_NAME_LABEL

CONTROLLER = "system:serviceaccount:pykueue-system:pykueue"
POLICY = WebhookPolicy(controller_usernames=frozenset({CONTROLLER}))
MUTATE = "/mutate-batch-v1-job"
VALIDATE = "/validate-batch-v1-job"
SECRET = "s3cr3t-value-that-must-never-be-logged"


# ---------------------------------------------------------------------------------- builders


def job(
    name: str | None = "train-1",
    queue: str | None = "lq1",
    suspend: Any = "absent",
    *,
    labels: dict[str, Any] | None = None,
    generate_name: str | None = None,
) -> dict[str, Any]:
    """A batch/v1 Job as the API server sends it (defaulted, before the create strategy)."""
    metadata: dict[str, Any] = {"namespace": "ns"}
    if name is not None:
        metadata["name"] = name
    if generate_name is not None:
        metadata["generateName"] = generate_name
    all_labels = dict(labels or {})
    if queue is not None:
        all_labels[QUEUE_NAME_LABEL] = queue
    if all_labels:
        metadata["labels"] = all_labels
    spec: dict[str, Any] = {
        "parallelism": 1,
        "completions": 1,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "main",
                        "image": "busybox",
                        "env": [{"name": "TOKEN", "value": SECRET}],
                        "resources": {"requests": {"cpu": "2"}},
                    }
                ],
            }
        },
    }
    if suspend != "absent":
        spec["suspend"] = suspend
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec}


def review(
    operation: str = "CREATE",
    obj: Any = None,
    old: Any = None,
    *,
    user: str = "alice",
    uid: str = "2f0c6a1e-8e4b-4c2e-9f5e-0c3c1f1a2b3c",
    kind: dict[str, str] | None = None,
    sub_resource: str | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """An admission.k8s.io/v1 AdmissionReview request for a Job."""
    name = ""
    if isinstance(obj, dict):
        name = (
            obj.get("metadata", {}).get("name", "") if isinstance(obj.get("metadata"), dict) else ""
        )
    request: dict[str, Any] = {
        "uid": uid,
        "kind": kind or {"group": "batch", "version": "v1", "kind": "Job"},
        "resource": {"group": "batch", "version": "v1", "resource": "jobs"},
        "name": name,
        "namespace": "ns",
        "operation": operation,
        "userInfo": {"username": user, "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": old,
        "dryRun": dry_run,
    }
    if sub_resource:
        request["subResource"] = sub_resource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def apply_patch(document: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """Apply RFC 6902 ``add`` operations (all the webhook emits); fails on a missing parent."""
    out = copy.deepcopy(document)
    for op in patch:
        assert op["op"] == "add", op
        assert op["path"].startswith("/"), op
        *parents, last = [unescape(t) for t in op["path"][1:].split("/")]
        target = out
        for token in parents:
            target = target[token]  # KeyError = the patch would fail in the API server
        assert isinstance(target, dict)
        target[unescape(last)] = copy.deepcopy(op["value"])
    return out


def decoded_patch(response: dict[str, Any]) -> list[dict[str, Any]]:
    assert response["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(response["patch"]))


# ---------------------------------------------------------------------------------- fixtures


class Lookups:
    """Plain AdmissionLookup + DefaultQueueLookup with fixed answers (what the reconciler gives)."""

    def __init__(self, admitted: bool | None = None, default_queue: bool | None = None,
                 managed: bool | None = True) -> None:
        self.admitted = admitted
        self.default_queue = default_queue
        self.managed = managed
        self.asked: list[tuple[str, ...]] = []

    def namespace_managed(self, namespace: str) -> bool | None:
        return self.managed

    def is_admitted(self, namespace: str, job_name: str, job_uid: str = "") -> bool | None:
        self.asked.append((namespace, job_name))
        return self.admitted

    def has_default_local_queue(self, namespace: str) -> bool | None:
        return self.default_queue


class Broken:
    def is_admitted(self, namespace: str, job_name: str, job_uid: str = "") -> bool | None:
        raise RuntimeError("cache exploded")

    def has_default_local_queue(self, namespace: str) -> bool | None:
        raise RuntimeError("cache exploded")


def make_app(admission: Any = None, default_queue: Any = None,
             jobs: JobsSettings | None = None):
    """The app with LocalQueue defaulting on unless ``jobs`` says otherwise."""
    settings = Settings(
        controllers_enabled=False, webhook=WebhookSettings(controller_usernames=[CONTROLLER]),
        server=ServerSettings(metrics_auth=False),  # /metrics authorization: tested in test_health
        jobs=jobs or JobsSettings(local_queue_defaulting=True),
    )
    app = create_app(settings)
    if admission is not None:
        app.state.admission_lookup = admission
    if default_queue is not None:
        app.state.default_queue_lookup = default_queue
    return app


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=make_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://webhook") as c:
        yield c


async def post(app_or_client: Any, path: str, body: Any) -> httpx.Response:
    if isinstance(app_or_client, httpx.AsyncClient):
        return await app_or_client.post(path, json=body)
    transport = httpx.ASGITransport(app=app_or_client)
    async with httpx.AsyncClient(transport=transport, base_url="http://webhook") as c:
        return await c.post(path, json=body)


def answer(r: httpx.Response, sent: dict[str, Any]) -> dict[str, Any]:
    """The response of a well-formed review; checks the echo the API server verifies."""
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["apiVersion"] == "admission.k8s.io/v1"
    assert body["kind"] == "AdmissionReview"
    assert body["response"]["uid"] == sent["request"]["uid"]
    assert "request" not in body
    return body["response"]


# ---------------------------------------------------------------------------------- JSON Pointer


@pytest.mark.parametrize(
    ("tokens", "pointer"),
    [
        pytest.param(("spec", "suspend"), "/spec/suspend", id="plain tokens are joined"),
        pytest.param(
            ("metadata", "labels", "kueue.x-k8s.io/queue-name"),
            "/metadata/labels/kueue.x-k8s.io~1queue-name",
            id="slash in a label key becomes ~1",
        ),
        pytest.param(("a~b",), "/a~0b", id="tilde becomes ~0"),
        pytest.param(("~1",), "/~01", id="tilde is escaped before slash so ~1 stays literal"),
        pytest.param(("",), "/", id="empty key is an empty token"),
    ],
)
def test_json_pointer_escapes_tokens(tokens: tuple[str, ...], pointer: str) -> None:
    assert json_pointer(*tokens) == pointer
    assert [unescape(t) for t in pointer[1:].split("/")] == list(tokens)


@given(st.text())
@settings(max_examples=300)
def test_pointer_token_round_trips(token: str) -> None:
    escaped = escape_pointer_token(token)
    assert "/" not in escaped
    assert unescape(escaped) == token


# ---------------------------------------------------------------------------------- mutation (pure)

SUSPEND_TRUE = [{"op": "add", "path": "/spec/suspend", "value": True}]

MUTATION_CASES = [
    pytest.param(job(suspend=False), "CREATE", SUSPEND_TRUE,
                 id="queued job with suspend false is suspended"),
    pytest.param(job(), "CREATE", SUSPEND_TRUE, id="queued job without suspend is suspended"),
    pytest.param(job(suspend=None), "CREATE", SUSPEND_TRUE,
                 id="queued job with suspend null is suspended"),
    pytest.param(job(suspend=True), "CREATE", [], id="already suspended job is left alone"),
    pytest.param(job(queue=None, suspend=False), "CREATE", [], id="unlabelled job is left alone"),
    pytest.param(
        job(queue=None, labels={"example.com/queue": "gpu"}), "CREATE", [],
        id="another label with a slash is not the queue-name label",
    ),
    pytest.param(job(suspend=False), "UPDATE", [], id="updates are never mutated"),
    pytest.param(job(suspend=False), "DELETE", [], id="deletes are never mutated"),
    pytest.param(
        {**job(suspend=False), "kind": "CronJob"}, "CREATE", [], id="another kind is left alone"
    ),
    pytest.param(
        {"metadata": {"labels": {QUEUE_NAME_LABEL: "lq1"}}}, "CREATE",
        [{"op": "add", "path": "/spec", "value": {"suspend": True}}],
        id="job without spec gets the whole spec map",
    ),
    pytest.param(
        job(name=None, generate_name="train-", suspend=False), "CREATE", SUSPEND_TRUE,
        id="generateName job is suspended",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("obj", "operation", "expected"), MUTATION_CASES)
def test_mutate(obj: dict[str, Any], operation: str, expected: list[dict[str, Any]]) -> None:
    assert mutate(obj, operation) == expected


DEFAULTING_CASES = [
    pytest.param(
        job(queue=None, labels={"app": "x"}),
        [{"op": "add", "path": "/metadata/labels/kueue.x-k8s.io~1queue-name", "value": "default"},
         *SUSPEND_TRUE],
        id="label added under existing labels with an escaped pointer",
    ),
    pytest.param(
        job(queue=None),
        [{"op": "add", "path": "/metadata/labels", "value": {QUEUE_NAME_LABEL: "default"}},
         *SUSPEND_TRUE],
        id="labels map added whole when absent",
    ),
    pytest.param(
        {"spec": {"suspend": True}},
        [{"op": "add", "path": "/metadata", "value": {"labels": {QUEUE_NAME_LABEL: "default"}}}],
        id="metadata added whole when absent",
    ),
    pytest.param(job(queue="lq1"), SUSPEND_TRUE, id="an explicit queue is never replaced"),
]  # fmt: skip


@pytest.mark.parametrize(("obj", "expected"), DEFAULTING_CASES)
def test_mutate_local_queue_defaulting(obj: dict[str, Any], expected: list[dict[str, Any]]) -> None:
    patch = mutate(obj, "CREATE", default_queue="default")
    assert patch == expected
    patched = apply_patch(obj, patch)
    assert mutate(patched, "CREATE", default_queue="default") == []


def test_mutate_escapes_a_custom_label_key_with_tilde_and_slash() -> None:
    obj = job(queue=None, labels={"other": "x"})
    patch = mutate(obj, "CREATE", queue_name_label="ex~ample.com/q", default_queue="default")
    assert patch[0]["path"] == "/metadata/labels/ex~0ample.com~1q"
    assert apply_patch(obj, patch)["metadata"]["labels"]["ex~ample.com/q"] == "default"


UNREADABLE_CASES = [
    pytest.param(None, "", id="null object"),
    pytest.param([1, 2], "", id="array object"),
    pytest.param({"metadata": "x", "spec": {}}, "metadata", id="metadata not an object"),
    pytest.param({"metadata": {"labels": ["a"]}}, "metadata.labels", id="labels not an object"),
    pytest.param(
        {"metadata": {"labels": {QUEUE_NAME_LABEL: 7}}},
        f"metadata.labels[{QUEUE_NAME_LABEL}]",
        id="label value not a string",
    ),
    pytest.param({**job(), "spec": "x"}, "spec", id="spec not an object"),
    pytest.param(job(suspend="yes"), "spec.suspend", id="suspend not a boolean"),
]


@pytest.mark.parametrize(("obj", "field"), UNREADABLE_CASES)
def test_mutate_names_the_unreadable_field(obj: Any, field: str) -> None:
    with pytest.raises(UnreadableObjectError) as err:
        mutate(obj, "CREATE")
    assert err.value.field == field


# A Job-shaped strategy: labels, metadata/spec presence and suspend all vary.
label_keys = st.one_of(
    st.just(QUEUE_NAME_LABEL), st.text(min_size=1, max_size=12), st.just("a/b~c")
)
jobs = st.builds(
    lambda labels, suspend, has_metadata, has_spec: {
        **({"metadata": {"name": "j", "labels": labels}} if has_metadata else {}),
        **({"spec": {} if suspend == "absent" else {"suspend": suspend}} if has_spec else {}),
    },
    st.dictionaries(label_keys, st.text(max_size=8), max_size=4),
    st.sampled_from(["absent", None, True, False]),
    st.booleans(),
    st.booleans(),
)


@given(jobs, st.sampled_from([None, "default"]))
@settings(max_examples=500)
def test_mutation_is_idempotent_and_only_suspends(obj: dict[str, Any], default: str | None) -> None:
    patch = mutate(obj, "CREATE", default_queue=default)
    patched = apply_patch(obj, patch)
    assert mutate(patched, "CREATE", default_queue=default) == []
    queued = bool(obj.get("metadata", {}).get("labels", {}).get(QUEUE_NAME_LABEL)) or default
    if queued:
        assert read_suspend(patched) is True
    else:
        assert patched == obj
    # Nothing but the queue-name label and spec.suspend ever changes.
    for doc in (obj, patched):
        doc.get("metadata", {}).get("labels", {}).pop(QUEUE_NAME_LABEL, None)
        doc.get("spec", {}).pop("suspend", None)
    assert {k: v for k, v in patched.items() if v not in ({}, {"labels": {}})} == {
        k: v for k, v in obj.items() if v not in ({}, {"labels": {}})
    }


# ---------------------------------------------------------------------------------- mutation (HTTP)


@pytest.mark.parametrize(("obj", "operation", "expected"), MUTATION_CASES)
async def test_mutating_review(
    client: httpx.AsyncClient, obj: dict[str, Any], operation: str, expected: list[Any]
) -> None:
    sent = review(operation, obj, old=obj if operation == "UPDATE" else None)
    response = answer(await client.post(MUTATE + "?timeout=5s", json=sent), sent)
    assert response["allowed"] is True
    assert "status" not in response
    if expected:
        assert decoded_patch(response) == expected
    else:
        assert "patch" not in response and "patchType" not in response


async def test_mutating_review_of_another_kind_by_request_kind(client: httpx.AsyncClient) -> None:
    sent = review("CREATE", {"metadata": {"labels": {QUEUE_NAME_LABEL: "lq1"}}},
                  kind={"group": "", "version": "v1", "kind": "ConfigMap"})  # fmt: skip
    response = answer(await client.post(MUTATE, json=sent), sent)
    assert response == {"uid": sent["request"]["uid"], "allowed": True}


async def test_mutating_review_of_a_server_dry_run_is_patched(client: httpx.AsyncClient) -> None:
    sent = review("CREATE", job(suspend=False), dry_run=True)
    response = answer(await client.post(MUTATE, json=sent), sent)
    assert decoded_patch(response) == SUSPEND_TRUE


async def test_mutating_review_labels_with_default_local_queue_when_lookup_says_so() -> None:
    app = make_app(default_queue=Lookups(default_queue=True))
    sent = review("CREATE", job(queue=None, labels={"team": "a"}, suspend=False))
    response = answer(await post(app, MUTATE, sent), sent)
    patched = apply_patch(sent["request"]["object"], decoded_patch(response))
    assert patched["metadata"]["labels"] == {"team": "a", QUEUE_NAME_LABEL: "default"}
    assert patched["spec"]["suspend"] is True


@pytest.mark.parametrize("answer_", [False, None], ids=["no default queue", "unknown"])
async def test_mutating_review_does_not_default_without_a_known_default_queue(
    answer_: bool | None,
) -> None:
    app = make_app(default_queue=Lookups(default_queue=answer_))
    sent = review("CREATE", job(queue=None, suspend=False))
    response = answer(await post(app, MUTATE, sent), sent)
    assert "patch" not in response


async def test_KQ_23_default_local_queue_respects_managed_namespaces() -> None:
    """KQ-23: a namespace managedJobsNamespaceSelector excludes keeps its unlabelled Jobs as
    sent even with a LocalQueue named default; a managed one gets the label and suspend."""
    sent = review("CREATE", job(queue=None, suspend=False))
    unmanaged = make_app(default_queue=Lookups(default_queue=True, managed=False))
    assert "patch" not in answer(await post(unmanaged, MUTATE, sent), sent)
    managed = make_app(default_queue=Lookups(default_queue=True, managed=True))
    patched = apply_patch(sent["request"]["object"],
                          decoded_patch(answer(await post(managed, MUTATE, sent), sent)))
    assert patched["metadata"]["labels"][QUEUE_NAME_LABEL] == "default"
    assert patched["spec"]["suspend"] is True


async def test_defaulting_is_behind_its_setting() -> None:
    sent = review("CREATE", job(queue=None, suspend=False))
    off = make_app(default_queue=Lookups(default_queue=True), jobs=JobsSettings())
    assert "patch" not in answer(await post(off, MUTATE, sent), sent)


@pytest.mark.parametrize(("managed", "suspended"), [(True, True), (False, False), (None, True)],
                         ids=["managed namespace", "excluded namespace", "unknown namespace"])
async def test_manage_jobs_without_queue_name_suspends_unlabelled_jobs(
        managed: bool | None, suspended: bool) -> None:
    """A namespace the stores have not seen yet (created a moment before the Job) is judged
    by its name against the default selector, as for Pods (``WebhookEnv.namespace_managed``):
    an unlabelled Job created right after its namespace does not escape."""
    app = make_app(default_queue=Lookups(default_queue=False, managed=managed),
                   jobs=JobsSettings(manage_jobs_without_queue_name=True))
    sent = review("CREATE", job(queue=None, suspend=False))
    response = answer(await post(app, MUTATE, sent), sent)
    patched = apply_patch(sent["request"]["object"], decoded_patch(response)) \
        if "patch" in response else sent["request"]["object"]
    assert patched["spec"]["suspend"] is suspended
    assert QUEUE_NAME_LABEL not in (patched["metadata"].get("labels") or {})


def test_KQ_22_labelled_job_without_suspend_is_stored_suspended() -> None:
    """KQ-22 (1): the object persisted after the mutating webhook has suspend: true — the patch
    is applied by the API server to the object it stores (not a copy), so check the patch
    applied to the request object."""
    for submitted in (job(queue="lq-cq"), job(queue="lq-cq", suspend=False)):
        stored = apply_patch(submitted, mutate(submitted, "CREATE"))
        assert stored["spec"]["suspend"] is True
        assert stored["spec"]["template"] == submitted["spec"]["template"]


def test_KQ_22_control_unlabelled_job_is_not_modified() -> None:
    """KQ-22 (4): without the label (manageJobsWithoutQueueName=false) suspend stays as sent."""
    for suspend in ("absent", False, True):
        assert mutate(job(queue=None, suspend=suspend), "CREATE") == []


async def test_KQ_22_admission_update_unsuspending_and_injecting_node_selector_is_allowed() -> None:
    """KQ-22 (3): pykueue's admission update sets suspend false and injects the flavor's
    nodeSelector in the same update; the validating webhook lets pykueue's identity do it."""
    old = job(queue="lq-cq", suspend=True)
    new = copy.deepcopy(old)
    new["spec"]["suspend"] = False
    new["spec"]["template"]["spec"]["nodeSelector"] = {"type": "kwok"}
    app = make_app(admission=Lookups(admitted=True))
    sent = review("UPDATE", new, old, user=CONTROLLER)
    assert answer(await post(app, VALIDATE, sent), sent) == {
        "uid": sent["request"]["uid"],
        "allowed": True,
    }


# ---------------------------------------------------------------------------------- validation


def running(queue: str | None = "lq1", **kw: Any) -> dict[str, Any]:
    return job(queue=queue, suspend=False, **kw)


def pending(queue: str | None = "lq1", **kw: Any) -> dict[str, Any]:
    return job(queue=queue, suspend=True, **kw)


LABEL = f"metadata.labels[{QUEUE_NAME_LABEL}]"

# (old, new, user, lookups, allowed, fragments the message must contain)
VALIDATION_CASES = [
    pytest.param(running("lq1"), running("lq2"), "alice", Lookups(admitted=True), False,
                 [LABEL, "immutable", "'lq1'", "'lq2'", "not suspended"],
                 id="KQ-24 1: changing the queue of a running job is refused"),
    pytest.param(running("lq1"), running(None), "alice", Lookups(admitted=True), False,
                 [LABEL, "cannot be removed", "not suspended"],
                 id="KQ-24 1: removing the queue of a running job is refused"),
    pytest.param(running("lq1"), running(""), "alice", Lookups(admitted=True), False,
                 [LABEL, "must not be empty"],
                 id="KQ-24 1: emptying the queue label of a running job is refused"),
    pytest.param(pending("lq1"), pending("lq2"), "alice", None, True, [],
                 id="KQ-24 2: changing the queue of a suspended job is allowed"),
    pytest.param(pending("default"), pending(None), "alice", Lookups(default_queue=True), False,
                 [LABEL, "cannot be removed", "LocalQueue named 'default'"],
                 id="KQ-24 3: removing the label where a default LocalQueue exists is refused"),
    pytest.param(pending("lq1"), pending(None), "alice", Lookups(default_queue=False), True, [],
                 id="KQ-24 3 control: removing the label of a suspended job elsewhere is allowed"),
    pytest.param(running(None), running("lq1"), "alice", None, False,
                 [LABEL, "cannot be added", "set spec.suspend: true in the same update"],
                 id="KQ-24 4: adding a queue to a running unmanaged job is refused"),
    pytest.param(running(None), pending("lq1"), "alice", None, True, [],
                 id="KQ-24 4: adding a queue together with suspend true is allowed"),
    pytest.param(pending("lq1"), running("lq1"), "alice", None, False,
                 ["spec.suspend", "only pykueue", CONTROLLER, "not known to be admitted",
                  "'alice'"],
                 id="unsuspending with admission unknown is refused"),
    pytest.param(pending("lq1"), running("lq1"), "alice", Lookups(admitted=None), False,
                 ["spec.suspend", "not known to be admitted"],
                 id="unsuspending when the lookup does not know the workload is refused"),
    pytest.param(pending("lq1"), running("lq1"), "alice", Lookups(admitted=False), False,
                 ["spec.suspend", "is not admitted", "'lq1'"],
                 id="unsuspending a job whose workload is not admitted is refused"),
    pytest.param(pending("lq1"), running("lq1"), "alice", Lookups(admitted=True), True, [],
                 id="unsuspending a job whose workload is admitted is allowed"),
    pytest.param(pending("lq1"), running("lq1"), CONTROLLER, None, True, [],
                 id="pykueue itself may unsuspend a queued job"),
    pytest.param(pending(None), running(None), "alice", None, True, [],
                 id="unsuspending an unmanaged job is allowed"),
    pytest.param(pending(None), running("lq1"), "alice", None, False,
                 [LABEL, "cannot be added", "spec.suspend"],
                 id="adding a queue while unsuspending reports both fields"),
    pytest.param(running("lq1"), pending("lq1"), "alice", None, True, [],
                 id="suspending a running job is allowed"),
    pytest.param(running("lq1"), running("lq1", labels={"x": "y"}), "alice", None, True, [],
                 id="unrelated metadata update of a running job is allowed"),
    pytest.param(pending("lq1"), pending("Bad_Queue"), "alice", None, False,
                 [LABEL, "'Bad_Queue'", "DNS-1123 subdomain"],
                 id="renaming to an invalid LocalQueue name is refused"),
    pytest.param(running("Bad_Queue"), running("Bad_Queue", labels={"x": "y"}), "alice", None,
                 True, [], id="an existing invalid name does not block unrelated updates"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("old", "new", "user", "lookups", "allowed", "fragments"), VALIDATION_CASES
)
async def test_validating_update_review(
    old: dict[str, Any],
    new: dict[str, Any],
    user: str,
    lookups: Lookups | None,
    allowed: bool,
    fragments: list[str],
) -> None:
    app = make_app(admission=lookups, default_queue=lookups)
    sent = review("UPDATE", new, old, user=user)
    response = answer(await post(app, VALIDATE, sent), sent)
    assert response["allowed"] is allowed, response
    assert "patch" not in response and "patchType" not in response
    if allowed:
        assert "status" not in response
    else:
        assert response["status"]["code"] == 403
        assert response["status"]["reason"] == "Forbidden"
        for fragment in fragments:
            assert fragment in response["status"]["message"]
    # The pure rule gives the same verdict.
    admitted = lookups.admitted if lookups else None
    default = lookups.default_queue if lookups else None
    errors = validate_update(old, new, user, admitted, POLICY, default_local_queue_exists=default)
    assert (errors == []) is allowed


async def test_validating_review_asks_the_lookup_about_the_job_by_namespace_and_name() -> None:
    lookups = Lookups(admitted=True)
    app = make_app(admission=lookups)
    sent = review("UPDATE", running("lq1", name="j7"), pending("lq1", name="j7"))
    answer(await post(app, VALIDATE, sent), sent)
    assert lookups.asked == [("ns", "j7")]


async def test_validating_review_with_a_failing_lookup_is_conservative() -> None:
    app = make_app(admission=Broken(), default_queue=Broken())
    sent = review("UPDATE", running("lq1"), pending("lq1"))
    response = answer(await post(app, VALIDATE, sent), sent)
    assert response["allowed"] is False
    assert "not known to be admitted" in response["status"]["message"]


CREATE_CASES = [
    pytest.param(pending("lq1"), "alice", True, [], id="suspended queued job is allowed"),
    pytest.param(running(None), "alice", True, [], id="unlabelled running job is allowed"),
    pytest.param(pending("Bad_Queue"), "alice", False, [LABEL, "DNS-1123"],
                 id="invalid LocalQueue name is refused"),
    pytest.param(pending("a" * 254), "alice", False, [LABEL, "at most 253"],
                 id="too long LocalQueue name is refused"),
    pytest.param(pending("team-a.gpu"), "alice", True, [], id="dotted LocalQueue name is allowed"),
    pytest.param(running("lq1"), "alice", False,
                 ["spec.suspend", "must be true", "MutatingWebhookConfiguration"],
                 id="unsuspended queued job means the mutating webhook is missing"),
    pytest.param(running("lq1"), CONTROLLER, True, [], id="pykueue may create it unsuspended"),
]  # fmt: skip


@pytest.mark.parametrize(("obj", "user", "allowed", "fragments"), CREATE_CASES)
async def test_validating_create_review(
    client: httpx.AsyncClient, obj: dict[str, Any], user: str, allowed: bool, fragments: list[str]
) -> None:
    sent = review("CREATE", obj, user=user)
    response = answer(await client.post(VALIDATE, json=sent), sent)
    assert response["allowed"] is allowed
    for fragment in fragments:
        assert fragment in response["status"]["message"]


@pytest.mark.parametrize(
    "sent",
    [
        pytest.param(review("DELETE", None, running("lq1")), id="delete"),
        pytest.param(review("CONNECT", None), id="connect"),
        pytest.param(review("UPDATE", running("lq2"), running("lq1"), sub_resource="status"),
                     id="status subresource update"),
        pytest.param(review("UPDATE", running("lq2"), running("lq1"),
                            kind={"group": "apps", "version": "v1", "kind": "Deployment"}),
                     id="another kind"),
    ],
)  # fmt: skip
async def test_validating_review_out_of_scope_is_allowed(
    client: httpx.AsyncClient, sent: dict[str, Any]
) -> None:
    assert answer(await client.post(VALIDATE, json=sent), sent) == {
        "uid": sent["request"]["uid"],
        "allowed": True,
    }


# ---------------------------------------------------------------------------------- bad input


INVALID_OBJECT_CASES = [
    pytest.param(MUTATE, review("CREATE", None), "request.object: expected a Job object, got null",
                 id="mutate: object missing"),
    pytest.param(MUTATE, review("CREATE", "a string"),
                 "request.object: expected a Job object, got string",
                 id="mutate: object is a string"),
    pytest.param(MUTATE, review("CREATE", job(suspend="yes")),
                 "request.object.spec.suspend: expected a boolean, got string",
                 id="mutate: suspend is a string"),
    pytest.param(MUTATE, review("CREATE", job(labels={"a": 1})),
                 "request.object.metadata.labels[a]: expected a string, got number",
                 id="mutate: a label value is a number"),
    pytest.param(VALIDATE, review("CREATE", {"metadata": [], "spec": {}}),
                 "request.object.metadata: expected an object, got array",
                 id="validate create: metadata is an array"),
    pytest.param(VALIDATE, review("UPDATE", running("lq1"), None),
                 "request.oldObject: expected a Job object, got null",
                 id="validate update: oldObject missing"),
    pytest.param(VALIDATE, review("UPDATE", running("lq1"), job(suspend=1)),
                 "request.oldObject.spec.suspend: expected a boolean, got number",
                 id="validate update: old suspend is a number"),
    pytest.param(VALIDATE, review("UPDATE", {**running("lq1"), "spec": []}, running("lq1")),
                 "request.object.spec: expected an object, got array",
                 id="validate update: new spec is an array"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "sent", "message"), INVALID_OBJECT_CASES)
async def test_unreadable_object_is_refused_inside_the_review(
    client: httpx.AsyncClient, path: str, sent: dict[str, Any], message: str
) -> None:
    response = answer(await client.post(path, json=sent), sent)
    assert response["allowed"] is False
    assert response["status"]["code"] == 400
    assert response["status"]["reason"] == "BadRequest"
    assert message in response["status"]["message"]


def with_request(**changes: Any) -> dict[str, Any]:
    sent = review("CREATE", job())
    for key, value in changes.items():
        if value is ...:
            del sent["request"][key]
        else:
            sent["request"][key] = value
    return sent


BAD_BODIES = [
    pytest.param(b"", "not JSON", id="empty body"),
    pytest.param(b"{not json", "not JSON", id="broken JSON"),
    pytest.param(b"\xff\xfe\x00", "not JSON", id="binary garbage"),
    pytest.param(b"[]", "not an admission.k8s.io/v1 AdmissionReview", id="JSON array"),
    pytest.param(b'"review"', "not an admission.k8s.io/v1 AdmissionReview", id="JSON string"),
    pytest.param(b"{}", "not an admission.k8s.io/v1 AdmissionReview", id="empty object"),
    pytest.param({**review("CREATE", job()), "apiVersion": "admission.k8s.io/v1beta1"},
                 "AdmissionReview", id="v1beta1 review"),
    pytest.param({**review("CREATE", job()), "kind": "Job"}, "AdmissionReview", id="wrong kind"),
    pytest.param({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"},
                 "request is missing", id="no request"),
    pytest.param(with_request(uid=...), "AdmissionReview", id="request without uid"),
    pytest.param(with_request(uid=""), "AdmissionReview", id="request with empty uid"),
    pytest.param(with_request(operation="PATCH"), "AdmissionReview", id="unknown operation"),
    pytest.param(with_request(userInfo="alice"), "AdmissionReview", id="userInfo not an object"),
    pytest.param(with_request(kind=5), "AdmissionReview", id="kind not an object"),
]  # fmt: skip


@pytest.mark.parametrize("path", [MUTATE, VALIDATE])
@pytest.mark.parametrize(("body", "error"), BAD_BODIES)
async def test_body_that_is_not_a_review_gets_http_400_with_json_error(
    client: httpx.AsyncClient, path: str, body: bytes | dict[str, Any], error: str
) -> None:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = await client.post(path, content=content, headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert r.headers["content-type"] == "application/json"
    assert error in r.json()["error"]
    assert isinstance(r.json()["details"], list)


async def test_bad_request_details_never_echo_the_body(client: httpx.AsyncClient) -> None:
    r = await client.post(MUTATE, json=with_request(operation=SECRET))
    assert r.status_code == 400
    assert SECRET not in r.text


async def test_unexpected_error_fails_closed_without_a_5xx() -> None:
    class Exploding:
        def __getattr__(self, name: str) -> Any:
            raise RuntimeError("boom")

    app = make_app()
    app.state.settings = Exploding()  # the policy cannot be built: a bug, not bad input
    sent = review("CREATE", job(suspend=False))
    response = answer(await post(app, MUTATE, sent), sent)
    assert response["allowed"] is False
    assert response["status"]["code"] == 500
    assert "boom" not in response["status"]["message"]


# ---------------------------------------------------------------------------------- logs, metrics


def review_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [
        json.loads(r.getMessage())
        for r in caplog.records
        if r.name == "pykueue.webhook" and r.getMessage().startswith("{")
    ]


async def test_one_structured_log_line_per_review_without_bodies(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pykueue.webhook")
    created = review("CREATE", job(name=None, generate_name="train-", suspend=False), uid="u-1")
    refused = review("UPDATE", running("lq2"), running("lq1"), uid="u-2", user="bob")
    await client.post(MUTATE, json=created)
    await client.post(VALIDATE, json=refused)
    await client.post(MUTATE, content=b"garbage " + SECRET.encode())
    lines = review_lines(caplog)
    assert [(line["uid"], line["decision"]) for line in lines[:2]] == [
        ("u-1", "patched"),
        ("u-2", "denied"),
    ]
    first, second, third = lines
    assert first["namespace"] == "ns" and first["name"] == "train-*"
    assert first["operation"] == "CREATE" and first["path"] == MUTATE and first["code"] == 200
    assert second["name"] == "train-1" and second["user"] == "bob" and second["code"] == 403
    assert third["decision"] == "bad_request" and third["code"] == 400 and "uid" not in third
    assert all(isinstance(line["latency_ms"], float) for line in lines)
    assert all(SECRET not in r.getMessage() for r in caplog.records)


async def test_latency_histogram_by_path_and_decision() -> None:
    app = make_app()
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://webhook") as c:
        for _ in range(3):
            await c.post(MUTATE, json=review("CREATE", job(suspend=False)))
        await c.post(VALIDATE, json=review("UPDATE", running("lq2"), running("lq1")))
        await c.post(VALIDATE, content=b"nope")
        text = (await c.get("/metrics")).text
    count = "pykueue_webhook_request_duration_seconds_count"
    assert f'{count}{{decision="patched",path="{MUTATE}"}} 3.0' in text
    assert f'{count}{{decision="denied",path="{VALIDATE}"}} 1.0' in text
    assert f'{count}{{decision="bad_request",path="{VALIDATE}"}} 1.0' in text


async def test_each_app_has_its_own_metrics_registry() -> None:
    first, second = make_app(), make_app()
    await post(first, MUTATE, review("CREATE", job()))
    for app, expected in ((first, True), (second, False)):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://h") as c:
            text = (await c.get("/metrics")).text
        assert ('decision="patched"' in text) is expected


# ---------------------------------------------------------------------------------- garbage


class SyncASGI:
    """Drive the ASGI app from a synchronous hypothesis test (own event loop, app exceptions
    re-raised by httpx's ASGITransport, so an exception inside the app fails the test)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=make_app(admission=Lookups())),
            base_url="http://webhook",
        )

    def post(self, path: str, content: bytes) -> httpx.Response:
        return self.loop.run_until_complete(self.client.post(path, content=content))

    def close(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()


@pytest.fixture(scope="module")
def sync_app() -> Iterator[SyncASGI]:
    app = SyncASGI()
    yield app
    app.close()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@st.composite
def mangled_reviews(draw: st.DrawFn) -> bytes:
    """Real-looking reviews with some fields replaced by arbitrary JSON."""
    operation = draw(st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT"]))
    sent = review(operation, job(suspend=draw(st.sampled_from([True, False, "absent"]))),
                  running("lq1"))  # fmt: skip
    request = sent["request"]
    for key in draw(st.lists(st.sampled_from(sorted(request)), max_size=4)):
        request[key] = draw(json_values)
    obj = request.get("object")
    if isinstance(obj, dict) and draw(st.booleans()):
        where = draw(st.sampled_from(["metadata", "spec"]))
        obj[where] = draw(json_values)
    if draw(st.booleans()):
        sent[draw(st.sampled_from(["apiVersion", "kind", "request"]))] = draw(json_values)
    return json.dumps(sent).encode()


garbage = st.one_of(
    st.binary(max_size=300),
    json_values.map(lambda v: json.dumps(v).encode()),
    mangled_reviews(),
    st.just(b"[" * 5000),  # deep nesting
)


@given(body=garbage, path=st.sampled_from([MUTATE, VALIDATE]))
@settings(
    max_examples=2000,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_garbage_never_gives_a_5xx_or_an_exception(
    sync_app: SyncASGI, body: bytes, path: str
) -> None:
    r = sync_app.post(path, body)
    assert r.status_code in (200, 400), r.text
    payload = r.json()
    if r.status_code == 400:
        assert isinstance(payload["error"], str)
    else:
        assert payload["apiVersion"] == "admission.k8s.io/v1"
        response = payload["response"]
        assert isinstance(response["allowed"], bool)
        assert json.loads(body)["request"]["uid"] == response["uid"]
        if path == VALIDATE:
            assert "patch" not in response
        assert response.get("status", {}).get("code") != 500, response


# ------------------------------------------------------- issue 14.1: scaling a running queued Job


def _scaled(obj: dict[str, Any], parallelism: int | None = None,
            completions: int | None = None) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    spec = out.setdefault("spec", {})
    if parallelism is not None:
        spec["parallelism"] = parallelism
    spec.pop("completions", None)  # a non-Indexed Job without completions: count = parallelism
    if completions is not None:
        spec["completions"] = completions
    return out


@pytest.mark.parametrize(
    ("old", "new", "user", "suspends"),
    [
        pytest.param(_scaled(running("lq1"), 1), _scaled(running("lq1"), 64), "alice", True,
                     id="raising parallelism of a running queued Job suspends it"),
        pytest.param(_scaled(running("lq1"), 4), _scaled(running("lq1"), 2), "alice", True,
                     id="lowering it too (the Workload no longer matches)"),
        pytest.param(_scaled(running("lq1"), 4, 4), _scaled(running("lq1"), 8, 8), "alice", True,
                     id="an elastic Indexed Job's completions and parallelism together"),
        pytest.param(_scaled(running("lq1"), 4, 2), _scaled(running("lq1"), 8, 2), "alice", False,
                     id="a count capped by completions does not change"),
        pytest.param(_scaled(running("lq1"), 1), _scaled(running("lq1"), 64), CONTROLLER, False,
                     id="pykueue itself may change it"),
        pytest.param(_scaled(pending("lq1"), 1), _scaled(pending("lq1"), 64), "alice", False,
                     id="a suspended Job is requeued with its new shape anyway"),
        pytest.param(_scaled(running(None), 1), _scaled(running(None), 64), "alice", False,
                     id="an unqueued Job is not pykueue's"),
        pytest.param(_scaled(running(""), 1), _scaled(running(""), 64), "alice", False,
                     id="an empty queue name is no queue"),
        pytest.param(running("lq1"), running("lq1"), "alice", False, id="no change"),
    ],
)
async def test_a_running_queued_job_whose_pod_count_changes_is_suspended_in_the_same_write(
    old: dict[str, Any], new: dict[str, Any], user: str, suspends: bool
) -> None:
    assert (mutate_update(old, new, user, POLICY) == SUSPEND_TRUE) is suspends
    app = make_app()
    sent = review("UPDATE", new, old, user=user)
    response = answer(await post(app, MUTATE, sent), sent)
    assert response["allowed"] is True
    if suspends:
        assert decoded_patch(response) == SUSPEND_TRUE
    else:
        assert "patch" not in response


@pytest.mark.parametrize(("managed", "refused"), [(True, True), (False, False), (None, True)],
                         ids=["managed namespace", "excluded namespace", "unknown namespace"])
async def test_manage_jobs_without_queue_name_unlabelled_job_is_not_unsuspended_by_a_tenant(
        managed: bool | None, refused: bool) -> None:
    """An unlabelled Job that ``manageJobsWithoutQueueName`` suspended is queued like a
    labelled one: only pykueue unsuspends it (it was never admitted), else the tenant's
    patch runs its pods until the reconciler stops the Job again."""
    lookups = Lookups(admitted=False, default_queue=False, managed=managed)
    app = make_app(admission=lookups, default_queue=lookups,
                   jobs=JobsSettings(manage_jobs_without_queue_name=True))
    sent = review("UPDATE", job(queue=None, suspend=False), job(queue=None, suspend=True))
    response = answer(await post(app, VALIDATE, sent), sent)
    assert response["allowed"] is not refused
    if refused:
        assert "spec.suspend" in response["status"]["message"]
    # pykueue's own start is allowed; a Job another controller owns is its business.
    ours = review("UPDATE", job(queue=None, suspend=False), job(queue=None, suspend=True),
                  user=CONTROLLER)
    assert answer(await post(app, VALIDATE, ours), ours)["allowed"] is True
    child_old, child_new = job(queue=None, suspend=True), job(queue=None, suspend=False)
    for j in (child_old, child_new):
        j["metadata"]["ownerReferences"] = [{"apiVersion": "jobset.x-k8s.io/v1alpha2",
                                             "kind": "JobSet", "name": "js", "uid": "u",
                                             "controller": True}]
    child = review("UPDATE", child_new, child_old)
    assert answer(await post(app, VALIDATE, child), child)["allowed"] is True

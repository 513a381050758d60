"""pykueue's soonest MultiKueue dispatcher (``pykueue.dev/multikueue-dispatcher-soonest``):
the pure decision (``app.core.multikueue.soonest_keep``, ``worker_eta``,
``status_api_problem``) and the status API reader (``app.controllers.multikueue_eta``)."""

from __future__ import annotations

import asyncio
import base64
import logging

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.config import MultiKueueSettings
from app.controllers.multikueue_eta import WorkerEtas, status_api_of
from app.core.multikueue import (
    SOONEST,
    STATUS_API_ANNOTATION,
    WorkerEta,
    soonest_keep,
    status_api_problem,
    worker_eta,
)
from app.kube.errors import NotFound

# ------------------------------------------------------------------ the decision


def test_the_soonest_worker_keeps_the_copy_the_others_lose_it():
    etas = {"w1": WorkerEta(3600.0), "w2": WorkerEta(120.0), "w3": WorkerEta(600.0)}
    assert soonest_keep(etas, waited=1, patience=10) == ["w2"]


def test_a_worker_giving_no_eta_keeps_its_copy_as_all_at_once():
    etas = {"kueue": WorkerEta(None, "no status API"), "w1": WorkerEta(50.0),
            "w2": WorkerEta(10.0), "down": WorkerEta(None, "status API unreachable")}
    assert soonest_keep(etas, waited=1, patience=10) == ["down", "kueue", "w2"]


def test_without_any_eta_every_worker_keeps_its_copy():
    etas = {"a": WorkerEta(None, "no end known"), "b": WorkerEta(None, "no status API")}
    assert soonest_keep(etas, waited=0, patience=10) == ["a", "b"]


def test_a_worker_still_computing_is_waited_for_within_the_patience_only():
    etas = {"a": WorkerEta(5.0), "b": WorkerEta(None, "computing", later=True)}
    assert soonest_keep(etas, waited=3, patience=10) is None
    # Then it counts as giving none: it keeps its copy beside the soonest.
    assert soonest_keep(etas, waited=10, patience=10) == ["a", "b"]


def test_equal_etas_go_to_the_first_name():
    assert soonest_keep({"b": WorkerEta(7.0), "a": WorkerEta(7.0)}, 0, 0) == ["a"]


WORKER = st.sampled_from(["w1", "w2", "w3", "w4", "w5"])
ETA = st.one_of(st.builds(WorkerEta, st.floats(0, 1e6)),
                st.builds(WorkerEta, st.none(), st.sampled_from(["no status API", "x"]),
                          st.booleans()))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(WORKER, ETA, max_size=5), st.floats(0, 100), st.floats(0, 100))
def test_soonest_keep_invariants(etas, waited, patience):
    keep = soonest_keep(etas, waited, patience)
    if keep is None:  # only while a worker still computes, within the patience
        assert waited < patience and any(e.later for e in etas.values())
        return
    assert keep == sorted(keep) and set(keep) <= set(etas)
    # Never stalls: a worker that gives no ETA always keeps its copy...
    assert {n for n, e in etas.items() if e.wait is None} <= set(keep)
    known = {n: e.wait for n, e in etas.items() if e.wait is not None}
    kept_known = [n for n in keep if n in known]
    # ...and of those that give one, exactly the soonest keeps it.
    assert len(kept_known) == (1 if known else 0)
    if known:
        assert known[kept_known[0]] == min(known.values())
    assert bool(keep) == bool(etas)


def test_worker_eta_reads_the_status_api_answer():
    pending = {"state": "pending", "eta": {"start": "2026-12-04T15:00:00Z", "waitSeconds": 90,
                                           "confidence": "bounded",
                                           "basis": "maximumExecutionTimeSeconds"}}
    assert worker_eta(pending) == WorkerEta(90.0)
    assert worker_eta({"state": "pending", "eta": {"confidence": "unknown",
                                                   "basis": "no end known"}}) == WorkerEta(
        None, "no end known")
    assert worker_eta({"eta": {"confidence": "unknown", "basis": "not computed yet"}}).later
    assert worker_eta({"eta": {"confidence": "unknown", "basis": "computing"}}).later
    assert worker_eta({"state": "admitted", "eta": None}) == WorkerEta(
        None, "no ETA (state admitted)")
    assert worker_eta(None).wait is None
    assert worker_eta({"eta": {"confidence": "bounded", "waitSeconds": -1}}).wait is None
    assert worker_eta({"eta": {"confidence": "bounded", "waitSeconds": True}}).wait is None


def test_worker_eta_reads_what_the_status_api_serves():
    """The status API's own wire model (``app.api.status.eta`` of a core ``Eta``, serialised
    by alias as served): the keys ``worker_eta`` reads are the ones it writes."""
    import time

    from app.api.status import eta as wire_eta
    from app.core.eta import BOUNDED, UNKNOWN
    from app.core.eta import Eta as CoreEta
    from app.models.status import WorkloadStatus

    def served(e: CoreEta) -> dict:
        return WorkloadStatus(name="wl", namespace="ns", local_queue_name="q", state="pending",
                              priority=0, created="2026-12-04T14:00:00Z",
                              admission_in_flight=False, inadmissible=False, message="",
                              eta=wire_eta(e, time.time())).model_dump(mode="json")
    now = time.time()
    got = worker_eta(served(CoreEta(now + 300, BOUNDED, "maximumExecutionTimeSeconds")))
    assert got.wait is not None and 298 <= got.wait <= 300
    assert worker_eta(served(CoreEta(None, UNKNOWN, "not computed yet"))).later
    assert worker_eta(served(CoreEta(None, UNKNOWN, "no end known"))) == WorkerEta(
        None, "no end known")


@pytest.mark.parametrize("url,why", [
    ("https://10.0.0.7:9443", None),
    ("https://pykueue.worker1.example.com", None),
    ("http://10.0.0.7:9443", "must be https"),
    ("https://user:pw@10.0.0.7", "user info"),
    ("https://10.0.0.7/?x=1", "no query"),
    ("https://10.0.0.7:99999", "not a URL"),
    ("https://bad_host", "untrusted"),
])
def test_the_status_api_url_is_checked_before_a_token_goes_there(url, why):
    got = status_api_problem(url)
    assert (got is None) if why is None else (why in (got or ""))


def test_the_dispatcher_name_is_accepted_by_the_settings():
    assert MultiKueueSettings(dispatcher_name=SOONEST).dispatcher_name == SOONEST
    with pytest.raises(ValueError, match="one of"):
        MultiKueueSettings(dispatcher_name="example.com/other")


# ------------------------------------------------------------------ the reader

TOKEN = "s3cr3t-token-value"


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def _cluster(name: str, url: str | None, secret: str = "w-kubeconfig") -> dict:
    meta: dict = {"name": name}
    if url is not None:
        meta["annotations"] = {STATUS_API_ANNOTATION: url}
    return {"metadata": meta, "spec": {"clusterSource": {"kubeConfig": {
        "location": secret, "locationType": "Secret"}}}}


class FakeKube:
    """The manager's API client: Secrets by name."""

    def __init__(self, secrets: dict[str, dict]) -> None:
        self.secrets = secrets
        self.gets = 0

    async def get(self, res, name, namespace=None):
        self.gets += 1
        assert namespace == "pykueue-system"
        if name not in self.secrets:
            raise NotFound(404, "not found")
        return self.secrets[name]


def _reader(kube: FakeKube, handler) -> WorkerEtas:
    return WorkerEtas(kube, "pykueue-system", 10.0,  # type: ignore[arg-type]
                      transport=httpx.MockTransport(handler))


def test_the_reader_asks_the_workers_status_api_with_the_secrets_token(caplog):
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.host == "10.0.0.2":
            return httpx.Response(503, json={"detail": "not ready"})
        return httpx.Response(200, json={"state": "pending", "eta": {
            "waitSeconds": 42, "confidence": "estimated", "basis": "learned"}})
    kube = FakeKube({"w-kubeconfig": {"data": {"kubeconfig": _b64("{}"),
                                               "status-api-token": _b64(TOKEN)}}})
    etas = _reader(kube, handler)

    async def run() -> dict[str, WorkerEta]:
        await etas.refresh([_cluster("w1", "https://10.0.0.1:9443/"),
                            _cluster("w2", "https://10.0.0.2:9443"),
                            _cluster("kueue", None)], now=0.0)
        try:
            return await etas.etas(["w1", "w2", "kueue"], "team-a", "job-x-1")
        finally:
            await etas.close()
    with caplog.at_level(logging.DEBUG):
        got = asyncio.run(run())
    assert got["w1"] == WorkerEta(42.0)
    assert got["w2"].wait is None and "503" in got["w2"].why
    assert got["kueue"].wait is None  # no annotation: AllAtOnce for it
    assert seen[0].url.path == "/api/v1/namespaces/team-a/workloads/job-x-1"
    assert seen[0].headers["authorization"] == f"Bearer {TOKEN}"
    assert kube.gets == 2  # the annotated clusters' Secrets only
    assert TOKEN not in caplog.text and TOKEN not in repr(etas.apis)


def test_no_token_or_a_refused_url_or_no_answer_gives_no_eta():
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)
    kube = FakeKube({"plain": {"data": {"kubeconfig": _b64("{}")}},
                     "full": {"data": {"status-api-token": _b64(TOKEN)}}})
    etas = _reader(kube, handler)

    async def run() -> dict[str, WorkerEta]:
        await etas.refresh([_cluster("notoken", "https://10.0.0.1", "plain"),
                            _cluster("http", "http://10.0.0.1", "full"),
                            _cluster("nosecret", "https://10.0.0.1", "gone"),
                            _cluster("down", "https://10.0.0.1", "full")], now=0.0)
        try:
            return await etas.etas(["notoken", "http", "nosecret", "down"], "ns", "wl")
        finally:
            await etas.close()
    got = asyncio.run(run())
    assert all(e.wait is None and not e.later for e in got.values())
    assert "status-api-token" in got["notoken"].why
    assert "https" in got["http"].why
    assert "unreachable" in got["down"].why


def test_a_copy_not_yet_known_to_the_worker_is_asked_again():
    kube = FakeKube({"s": {"data": {"status-api-token": _b64(TOKEN)}}})
    etas = _reader(kube, lambda r: httpx.Response(404, json={"detail": "not found"}))

    async def run() -> WorkerEta:
        await etas.refresh([_cluster("w", "https://10.0.0.1", "s")], now=0.0)
        try:
            return await etas.eta("w", "ns", "wl")
        finally:
            await etas.close()
    assert asyncio.run(run()).later


def test_the_secret_is_read_again_once_per_period_or_when_the_annotation_changes():
    kube = FakeKube({"s": {"data": {"status-api-token": _b64(TOKEN)}}})
    etas = _reader(kube, lambda r: httpx.Response(200, json={}))

    async def run() -> None:
        await etas.refresh([_cluster("w", "https://10.0.0.1", "s")], now=0.0)
        await etas.refresh([_cluster("w", "https://10.0.0.1", "s")], now=5.0)
        assert kube.gets == 1
        await etas.refresh([_cluster("w", "https://10.0.0.9", "s")], now=6.0)
        assert kube.gets == 2 and etas.apis["w"].url == "https://10.0.0.9"
        await etas.refresh([_cluster("w", "https://10.0.0.9", "s")], now=17.0)
        assert kube.gets == 3
        await etas.refresh([], now=18.0)  # the cluster deleted: forgotten
        assert not etas.apis
        await etas.close()
    asyncio.run(run())


def test_status_api_of_keeps_the_ca_and_strips_the_url():
    api = status_api_of(_cluster("w", "https://10.0.0.1:9443/"),
                        {"data": {"status-api-token": _b64(TOKEN + "\n"),
                                  "status-api-ca.crt": _b64("PEM")}})
    assert not isinstance(api, str)
    assert (api.url, api.token, api.ca) == ("https://10.0.0.1:9443", TOKEN, "PEM")
    assert TOKEN not in repr(api)


# ------------------------------------------------------------------ the controller's rounds


class Objects:
    """An API server's objects by (plural, namespace, name): a worker's or the manager's."""

    def __init__(self) -> None:
        self.objs: dict[tuple[str, str, str], dict] = {}
        self.created: list[str] = []
        self.deleted: list[str] = []

    async def get(self, res, name, namespace=None):
        obj = self.objs.get((res.plural, namespace, name))
        if obj is None:
            raise NotFound(404, "not found")
        return obj

    async def create(self, res, body):
        m = body["metadata"]
        self.objs[(res.plural, m["namespace"], m["name"])] = body
        self.created.append(m["name"])
        return body

    async def delete(self, res, name, namespace=None, **kw):
        if self.objs.pop((res.plural, namespace, name), None) is None:
            raise NotFound(404, "not found")
        self.deleted.append(name)

    async def replace(self, res, body, **kw):
        return body


class Store(dict):
    def put(self, obj: dict) -> None:
        m = obj["metadata"]
        self[f"{m['namespace']}/{m['name']}"] = obj


class FakeEtas:
    """``WorkerEtas`` answering from ``said`` (worker -> WorkerEta), counting the asks."""

    def __init__(self, said: dict[str, WorkerEta]) -> None:
        self.said = said
        self.asked: list[str] = []

    async def etas(self, workers, namespace, name):
        self.asked += workers
        return {w: self.said[w] for w in workers}

    async def refresh(self, clusters, now):
        return None

    async def close(self):
        return None


def _controller(said: dict[str, WorkerEta], **settings):
    from types import SimpleNamespace

    from app.config import Settings
    from app.controllers.multikueue import MultiKueueController, Worker
    from app.core.multikueue import Verdict

    manager, store = Objects(), Store()
    ctx = SimpleNamespace(
        settings=Settings(controllers_enabled=False, multikueue={
            "dispatcher_name": SOONEST, **settings}),
        client=manager, store=lambda kind: store, clock=lambda: 1e9,
        recorder=SimpleNamespace(emit=lambda *a: None),
        informers=SimpleNamespace(informers={}))
    mk = MultiKueueController(ctx)  # type: ignore[arg-type]
    mk.etas = FakeEtas(said)  # type: ignore[assignment]
    workers = {n: Objects() for n in said}
    for n, w in workers.items():
        mk.workers[n] = Worker(client=w, verdict=Verdict(True, "Active", "Connected"))  # type: ignore[arg-type]
    manager.objs[("jobs", "ns", "j")] = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "j", "namespace": "ns", "uid": "j-uid"},
        "spec": {"managedBy": "kueue.x-k8s.io/multikueue"}}
    store.put({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
               "metadata": {"name": "wl", "namespace": "ns", "ownerReferences": [
                   {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "j-uid",
                    "controller": True}]},
               "spec": {"queueName": "q"},
               "status": {"conditions": [{"type": "QuotaReserved", "status": "True",
                                          "lastTransitionTime": "2026-12-04T14:00:00Z"}],
                          "admissionChecks": [{"name": "mk", "state": "Pending"}]}})
    return mk, store, workers


async def _pass(mk, store) -> list[str]:
    wl = store["ns/wl"]
    await mk._sync_workload(wl, wl["status"]["admissionChecks"][0], sorted(mk.workers))
    return store["ns/wl"]["status"].get("nominatedClusterNames")


def test_a_round_sends_copies_everywhere_then_keeps_the_soonest_only():
    mk, store, workers = _controller({"w1": WorkerEta(3600.0), "w2": WorkerEta(300.0),
                                      "kueue": WorkerEta(None, "no status API")},
                                     soonest_round_seconds=0.3)

    async def run() -> None:
        assert await _pass(mk, store) == ["kueue", "w1", "w2"]  # a round: AllAtOnce
        assert all(w.created == ["wl"] for w in workers.values())
        assert mk.etas.asked == []
        assert await _pass(mk, store) == ["kueue", "w2"]  # decided: the soonest + no-ETA
        assert workers["w1"].deleted == ["wl"] and not workers["w2"].deleted
        assert await _pass(mk, store) == ["kueue", "w2"]  # the round is decided: not asked
        assert len(mk.etas.asked) == 3
        await asyncio.sleep(0.35)  # the next round: copies everywhere again, asked again
        assert await _pass(mk, store) == ["kueue", "w1", "w2"]
        assert workers["w1"].created == ["wl", "wl"]
        mk.etas.said["w1"] = WorkerEta(5.0)  # worker1's queue emptied meanwhile
        assert await _pass(mk, store) == ["kueue", "w1"]
        assert workers["w2"].deleted == ["wl"]
    asyncio.run(run())


def test_a_worker_still_computing_is_waited_for_then_the_round_is_decided():
    mk, store, workers = _controller({"w1": WorkerEta(None, "computing", later=True),
                                      "w2": WorkerEta(60.0)}, soonest_patience_seconds=0.2)

    async def run() -> None:
        assert await _pass(mk, store) == ["w1", "w2"]
        assert await _pass(mk, store) == ["w1", "w2"]  # w1 still computing: undecided
        assert not workers["w1"].deleted
        mk.etas.said["w1"] = WorkerEta(10.0)
        assert await _pass(mk, store) == ["w1"]
        assert workers["w2"].deleted == ["wl"]
    asyncio.run(run())


def test_a_kept_worker_lost_starts_a_new_round_at_once():
    mk, store, workers = _controller({"w1": WorkerEta(1.0), "w2": WorkerEta(60.0)})

    async def run() -> None:
        await _pass(mk, store)
        assert await _pass(mk, store) == ["w1"]
        mk.workers["w1"].verdict = mk.workers["w1"].verdict.__class__(False, "X", "")
        assert await _pass(mk, store) == ["w2"]  # a new round among the connected
        assert workers["w2"].created == ["wl", "wl"]
    asyncio.run(run())

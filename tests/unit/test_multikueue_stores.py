"""breaker22: the MultiKueue controller reads MultiKueueClusters and MultiKueueConfigs from
informers' stores (MKC, MKCFG; 906fcd9). What that must not break: pykueue without the
MultiKueue CRDs still becomes ready and admits (before 906fcd9 a 404 on the periodic list
turned MultiKueue off), and a cluster's status write, from the store's copy, is not repeated
with a stale resourceVersion while the watch has not delivered it yet.

mkfold23: MultiKueue's two kinds are optional as a job kind whose CRD may be absent
(``Manager`` ``OptionalApi``): without their CRDs no informer of them exists and MultiKueue is
off; once discovery serves both, their informers list and the controller starts."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import json
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

from app.controllers import manager as manager_mod
from app.integrations import BUILTIN_KINDS
from app.integrations.framework import Registry
from app.kube.client import (
    ADMISSION_CHECKS,
    KUEUE_GROUP,
    KUEUE_VERSION,
    MULTIKUEUE_CLUSTERS,
    MULTIKUEUE_CONFIGS,
)
from app.kube.context import AC, MKC, MKCFG
from app.kube.errors import Backoff, Conflict, Gone, NotFound, Retryable
from tests.recording_client import OBJECTS, RecordingClient
from tests.unit.test_job_framework import leading_manager

KUEUE_API = f"/apis/{KUEUE_GROUP}/{KUEUE_VERSION}"
MK_PLURALS = (MULTIKUEUE_CLUSTERS.plural, MULTIKUEUE_CONFIGS.plural)
CHECK = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck",
         "metadata": {"name": "mk", "resourceVersion": "3"},
         "spec": {"controllerName": "kueue.x-k8s.io/multikueue",
                  "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig",
                                 "name": "cfg"}}}


class NoMultiKueueCrdsClient(RecordingClient):
    """The API server of a cluster without the MultiKueue CRDs until ``installed``: discovery
    of kueue.x-k8s.io/v1beta2 lists the other Kueue kinds only (asks counted in ``asks``), a
    list of theirs answers 404 (counted in ``absent_lists``); once installed, ``clusters`` are
    listed. A MultiKueue AdmissionCheck ``mk`` exists."""

    def __init__(self) -> None:
        super().__init__({**OBJECTS, ADMISSION_CHECKS.plural: [copy.deepcopy(CHECK)]})
        self.installed = False
        self.asks = 0
        self.absent_lists = 0
        self.clusters: list[dict[str, Any]] = []
        self.discovery_down = False  # asks answered 503 meanwhile

    async def request(self, method: str, path: str, **kw: Any) -> Any:
        if path == KUEUE_API:
            self.asks += 1
            if self.discovery_down:
                raise Retryable(503, "ServiceUnavailable", "the server is starting")
            names = ["clusterqueues", "localqueues", "workloads", "admissionchecks",
                     *(MK_PLURALS if self.installed else ())]
            return {"resources": [{"name": n} for n in names]}
        return await super().request(method, path, **kw)

    async def list(self, res: Any, namespace: str | None = None, **kw: Any):
        if res.plural in MK_PLURALS:
            if not self.installed:
                self.absent_lists += 1
                raise NotFound(404, f"the server could not find the requested resource "
                                    f"({res.plural})")
            if res.plural == MULTIKUEUE_CLUSTERS.plural:
                return [dict(c) for c in self.clusters], "1"
        return await super().list(res, namespace, **kw)


async def wait_until(cond: Any, seconds: float = 5.0) -> bool:
    for _ in range(int(seconds / 0.02)):
        if cond():
            return True
        await asyncio.sleep(0.02)
    return bool(cond())


def mk_manager(monkeypatch: pytest.MonkeyPatch, client: NoMultiKueueCrdsClient) -> Any:
    """A leading Manager on ``client``, discovery asked every 0.05 s (doubling), a
    MultiKueue pass every 0.05 s."""
    monkeypatch.setattr(manager_mod, "CRD_POLL_SECONDS", 0.05)
    m = leading_manager(monkeypatch, client, Registry(list(BUILTIN_KINDS)))
    m.settings.multikueue.sync_period_seconds = 0.05
    return m


@contextlib.asynccontextmanager
async def ready_manager(monkeypatch: pytest.MonkeyPatch, client: NoMultiKueueCrdsClient
                        ) -> AsyncIterator[Any]:
    """``mk_manager`` on ``client``, started and ready; stopped after the block."""
    m = mk_manager(monkeypatch, client)
    await m.start()
    try:
        await m.wait_ready(5)
        ok, why = m.ready()
        assert ok, why
        yield m
    finally:
        await m.stop()


async def test_without_the_multikueue_crds_pykueue_is_ready_and_admits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Before 906fcd9 the periodic list's 404 turned MultiKueue off and everything else went
    on. With the MKC and MKCFG informers every one must list before pykueue is ready: on a
    cluster without the MultiKueue CRDs it was never ready and admitted nothing (readyz:
    "waiting for informers: mkc, mkcfg"). Now they are optional, as a job kind whose CRD is
    absent: no informer (nothing listed, nothing readiness waits for) until discovery serves
    both; then their informers list, the controller starts and is told of every cluster or
    config change (its next pass), within the discovery poll (0.05 s here, 1 s doubling)."""
    client = NoMultiKueueCrdsClient()
    async with ready_manager(monkeypatch, client) as m:
        # The Job's Workload is created: the reconciler writes.
        assert await wait_until(lambda: ("create", "workloads") in client.writes), client.writes
        assert m.ctx is not None and m.multikueue is None  # MultiKueue off
        assert MKC not in m.ctx.informers.informers and MKCFG not in m.ctx.informers.informers
        assert client.absent_lists == 0  # discovery asked, not a list answering 404
        client.clusters = [{"metadata": {"name": "worker1", "resourceVersion": "7"},
                            "spec": {}}]
        client.installed = True
        assert await wait_until(lambda: m.multikueue is not None), client.asks
        assert m.ctx.store(MKC).get("worker1") is not None
        assert list(m.ctx.store(MKCFG)) == []
        for key in (MKC, MKCFG):  # a cluster or config changed: looked at on the next pass
            assert m.multikueue.on_change in m.ctx.informers[key].handlers
        ok, why = m.ready()
        assert ok, why
        assert not m.dead_tasks


async def test_no_multikueue_pass_while_its_crds_are_not_served(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """While the MultiKueue CRDs are not served no MultiKueue pass runs, as before 906fcd9
    (the list's 404 ended the pass): the check's Active condition is written once by the
    writer while off (small24: False, saying MultiKueue is off), not from a
    MultiKueueConfig that cannot be seen. Once they are served the pass runs: the condition
    is written from the config (False: config "cfg" not found)."""
    client = NoMultiKueueCrdsClient()
    async with ready_manager(monkeypatch, client) as m:
        # Three discovery polls (0.05 + 0.1 + 0.2 s): a pass every 0.05 s would have come.
        assert await wait_until(lambda: client.asks >= 4), client.asks
        written = [b for v, r, b in client.bodies if (v, r) == ("replace", "admissionchecks")]
        assert len(written) == 1, written
        assert "MultiKueue is off" in written[0]["status"]["conditions"][0]["message"]
        assert m.multikueue is None
        client.installed = True
        assert await wait_until(lambda: client.writes.count(
            ("replace", "admissionchecks")) == 2), client.writes
        written = [b for v, r, b in client.bodies if (v, r) == ("replace", "admissionchecks")]
        active = [c for c in written[1]["status"]["conditions"] if c["type"] == "Active"]
        assert [(c["status"], c["reason"]) for c in active] == [("False", "BadConfig")]
        assert active[0]["message"].endswith('"cfg" not found'), active


async def test_an_unknown_discovery_answer_is_asked_again_not_waited_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Discovery failing at start (a 503: the API server starting) says nothing about the
    MultiKueue CRDs. Kept as served (as an optional job kind was), their informers' lists
    answered 404 for ever and pykueue was never ready; now the answer is asked again at the
    next poll: ready at once without MultiKueue, which comes once discovery says both
    CRDs are served."""
    client = NoMultiKueueCrdsClient()
    client.discovery_down = True
    async with ready_manager(monkeypatch, client) as m:
        assert m.multikueue is None
        client.discovery_down, client.installed = False, True
        assert await wait_until(lambda: m.multikueue is not None), client.asks
        assert m.ctx is not None and MKC in m.ctx.informers.informers


class RestartingApiServerClient(RecordingClient):
    """Lists worker1; after ``restart`` (a kube-apiserver starting up, its CRDs not yet
    served) the watch answers 404, the next watch 410 Gone and the relist 404 once, then
    worker1 and worker2 are listed."""

    def __init__(self) -> None:
        super().__init__({MULTIKUEUE_CLUSTERS.plural: [
            {"metadata": {"name": "worker1", "resourceVersion": "7"}, "spec": {}}]})
        self.restart = asyncio.Event()
        self.not_served = 0
        self.watches = 0

    async def list(self, res: Any, namespace: str | None = None, **kw: Any):
        if self.restart.is_set() and self.not_served < 2:
            self.not_served += 1
            raise NotFound(404, "the server could not find the requested resource")
        return await super().list(res, namespace, **kw)

    async def watch(self, res: Any, namespace: str | None = None, **_: Any):
        self.watches += 1
        if self.watches == 1:
            await self.restart.wait()
            self.not_served += 1
            self.objects[MULTIKUEUE_CLUSTERS.plural].append(
                {"metadata": {"name": "worker2", "resourceVersion": "9"}, "spec": {}})
            raise NotFound(404, "the server could not find the requested resource")
        if self.watches == 2:
            raise Gone(410, "too old resource version")
        await asyncio.Event().wait()
        yield {}  # pragma: no cover - an async generator


async def test_a_404_after_the_first_list_keeps_the_store() -> None:
    """A kube-apiserver starting up answers 404 for a while for a CRD it serves: the
    MultiKueueClusters' informer keeps its store (emptying it would drop every worker's
    connection and turn the checks inactive for nothing), stays synced and lists again:
    what changed meanwhile is told (worker2 added), worker1 never deleted. (A CRD removed
    deletes its objects first: their DELETED events empty the store.) The informer is a
    plain one, as every other: a 404 is an error it backs off from."""
    from app.kube.informers import Informer
    client = RestartingApiServerClient()
    inf = Informer(client, MULTIKUEUE_CLUSTERS,  # type: ignore[arg-type]
                   backoff=Backoff(base=0.01, cap=0.05))
    told: list[tuple[str, str]] = []
    inf.add_handler(lambda etype, old, new: told.append(
        (etype, (new or old or {}).get("metadata", {}).get("name"))))
    task = asyncio.create_task(inf.run())
    try:
        await asyncio.wait_for(inf.synced.wait(), 2)
        client.restart.set()
        for _ in range(100):
            if ("ADDED", "worker2") in told:
                break
            assert inf.store.get("worker1") is not None and inf.synced.is_set()
            await asyncio.sleep(0.02)
        assert told == [("ADDED", "worker1"), ("ADDED", "worker2")]
        assert client.not_served == 2  # the watch's 404, a list's
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class WorkerClient:
    """A worker's client (``KubeClient.from_kubeconfig_dict``'s, ``worker_clients``): its
    probe answers; ``closed`` once closed."""

    def __init__(self, server: str) -> None:
        self.server, self.closed = server, False

    async def request(self, *a: Any, **k: Any) -> dict[str, Any]:
        return {}

    async def close(self) -> None:
        self.closed = True


def worker_clients(monkeypatch: pytest.MonkeyPatch) -> list[WorkerClient]:
    """The worker clients the controller makes from now on (in order), in place of real
    ones."""
    from app.kube.client import KubeClient

    made: list[WorkerClient] = []

    async def from_kubeconfig_dict(config: dict[str, Any], settings: Any) -> WorkerClient:
        made.append(WorkerClient(config["clusters"][0]["cluster"]["server"]))
        return made[-1]

    monkeypatch.setattr(KubeClient, "from_kubeconfig_dict", from_kubeconfig_dict)
    return made


def kubeconfig(server: str) -> dict[str, Any]:
    """A Secret's ``data`` holding a usable kubeconfig (a token, ``server``)."""
    text = json.dumps({"apiVersion": "v1", "kind": "Config", "current-context": "c",
                       "clusters": [{"name": "c", "cluster": {"server": server}}],
                       "users": [{"name": "u", "user": {"token": "t"}}],
                       "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]})
    return {"data": {"kubeconfig": base64.b64encode(text.encode()).decode()}}


def _controller(client: Any, clusters: Any):
    """A MultiKueueController on ``client`` whose MKC store is ``clusters`` (every other
    store empty)."""
    from app.config import Settings
    from app.controllers.multikueue import MultiKueueController
    from app.kube.informers import Store

    ctx = SimpleNamespace(
        settings=Settings(controllers_enabled=False), client=client,
        store=lambda kind: clusters if kind == MKC else Store(MULTIKUEUE_CONFIGS),
        clock=lambda: 1e9, recorder=SimpleNamespace(emit=lambda *a: None),
        informers=SimpleNamespace(informers={}))
    return MultiKueueController(ctx)  # type: ignore[arg-type]


class StatusServer:
    """The manager's API server for MultiKueueCluster status writes: a PUT must carry the
    current resourceVersion (else 409 Conflict, as the API server's optimistic concurrency)."""

    def __init__(self, cluster: dict[str, Any]) -> None:
        self.current = copy.deepcopy(cluster)
        self.puts = 0
        self.conflicts = 0

    async def replace(self, res: Any, body: dict[str, Any], subresource: str | None = None):
        self.puts += 1
        if body["metadata"]["resourceVersion"] != self.current["metadata"]["resourceVersion"]:
            self.conflicts += 1
            raise Conflict(409, "Conflict", "the object has been modified")
        out = copy.deepcopy(body)
        out["metadata"]["resourceVersion"] = str(int(body["metadata"]["resourceVersion"]) + 1)
        self.current = out
        return copy.deepcopy(out)


async def test_a_cluster_status_written_is_not_written_again_from_a_stale_store() -> None:
    """906fcd9: a pass reads the MultiKueueCluster from the informer's store, not from a fresh
    list. When the next pass comes before the watch delivered the status just written (a busy
    manager: the passes are 1 s apart), the store still shows the old status: the controller
    wrote it again with the old resourceVersion, a 409 Conflict and a token for nothing. The
    response of the write goes into the store, as the Workload writes' do."""
    from app.controllers.multikueue import Worker
    from app.core.multikueue import Verdict
    from app.kube.informers import Store

    cluster = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueCluster",
               "metadata": {"name": "worker1", "resourceVersion": "7", "generation": 1},
               "spec": {"clusterSource": {"kubeConfig": {"location": "worker1"}}}}
    server = StatusServer(cluster)
    store = Store(MULTIKUEUE_CLUSTERS)
    store.put(copy.deepcopy(cluster))
    mk = _controller(server, store)
    now = asyncio.get_running_loop().time()
    mk.workers["worker1"] = Worker(client=object(),  # type: ignore[arg-type]
                                   verdict=Verdict(True, "Active", "Connected"),
                                   probed_at=now, generation=1)
    for _ in range(3):  # three passes, the watch delivering nothing meanwhile
        await mk._sync_cluster(store.get("worker1"))  # type: ignore[arg-type]
    assert (server.puts, server.conflicts) == (1, 0)
    active = [c for c in store.get("worker1")["status"]["conditions"]  # type: ignore[index]
              if c["type"] == "Active"]
    assert [(c["status"], c["reason"]) for c in active] == [("True", "Active")]


async def test_a_cluster_added_while_nothing_dispatches_is_looked_at_on_the_next_pass() -> None:
    """With no MultiKueue check and nothing dispatched a pass looks at the clusters once per
    ``probe_period_seconds`` (10 s): a MultiKueueCluster created then got its Active condition
    up to 10 s later (Kueue reconciles it on the event). The MKC and MKCFG informers tell the
    controller: a cluster or config added, deleted or whose spec changed is looked at on the
    next pass; its status written (by this controller) is no reason."""
    from app.kube.informers import Store

    clusters = Store(MULTIKUEUE_CLUSTERS)
    mk = _controller(None, clusters)
    synced: list[list[str]] = []

    async def sync_clusters(cs) -> None:
        synced.append([c["metadata"]["name"] for c in cs])

    mk._sync_clusters = sync_clusters  # type: ignore[method-assign]
    await mk.sync_once()
    new = {"metadata": {"name": "worker1", "resourceVersion": "7", "generation": 1},
           "spec": {"clusterSource": {"kubeConfig": {"location": "worker1"}}}}
    clusters.put(new)
    mk.on_change("ADDED", None, new)
    await mk.sync_once()
    assert synced == [[], ["worker1"]]
    written = {**new, "metadata": {**new["metadata"], "resourceVersion": "8"},
               "status": {"conditions": [{"type": "Active", "status": "True"}]}}
    clusters.put(written)
    mk.on_change("MODIFIED", new, written)
    await mk.sync_once()
    assert synced == [[], ["worker1"]]  # its status, written by the pass: no new pass
    rotated = {**written, "metadata": {**written["metadata"], "resourceVersion": "9",
                                       "generation": 2},
               "spec": {"clusterSource": {"kubeConfig": {"location": "worker1-new"}}}}
    clusters.put(rotated)
    mk.on_change("MODIFIED", written, rotated)
    await mk.sync_once()
    clusters.remove("worker1")
    mk.on_change("DELETED", rotated, None)
    await mk.sync_once()
    assert synced == [[], ["worker1"], ["worker1"], []]


async def test_a_cluster_whose_secret_changes_or_that_is_deleted_has_its_client_closed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """From the store, as from the list before 906fcd9: a MultiKueueCluster whose spec names
    another Secret (generation bumped) is read again at once and connected with a new client,
    the old one closed; one deleted has its worker dropped and its client closed (no
    leaked connection pools), with nothing dispatching (the idle passes)."""
    from app.kube.informers import Store

    made = worker_clients(monkeypatch)

    class Manager:
        secrets = {"old": kubeconfig("https://w1-old.example:6443"),
                   "new": kubeconfig("https://w1-new.example:6443")}

        async def get(self, res: Any, name: str, namespace: str | None = None):
            return self.secrets[name]

        async def replace(self, res: Any, body: dict[str, Any], subresource: str | None = None):
            return body

    clusters = Store(MULTIKUEUE_CLUSTERS)
    mk = _controller(Manager(), clusters)

    def cluster(location: str, generation: int, rv: str) -> dict[str, Any]:
        return {"metadata": {"name": "worker1", "generation": generation, "resourceVersion": rv},
                "spec": {"clusterSource": {"kubeConfig": {"location": location}}}}

    first = cluster("old", 1, "5")
    clusters.put(first)
    mk.on_change("ADDED", None, first)
    await mk.sync_once()
    assert [c.server for c in made] == ["https://w1-old.example:6443"]
    assert mk.workers["worker1"].verdict.active
    moved = cluster("new", 2, "8")
    clusters.set("worker1", moved)
    mk.on_change("MODIFIED", first, moved)
    await mk.sync_once()
    assert [(c.server, c.closed) for c in made] == [("https://w1-old.example:6443", True),
                                                    ("https://w1-new.example:6443", False)]
    clusters.remove("worker1")
    mk.on_change("DELETED", moved, None)
    await mk.sync_once()
    assert mk.workers == {} and all(c.closed for c in made)


class SecretServer:
    """The manager's API server for the MultiKueue controller: Secrets by name
    (``secrets``: the Secret's object, or an ApiError raised), every GET counted in
    ``reads``; status writes answered with a new resourceVersion."""

    def __init__(self) -> None:
        self.secrets: dict[str, Any] = {}
        self.reads = 0
        self.rv = 10

    async def get(self, res: Any, name: str, namespace: str | None = None) -> Any:
        self.reads += 1
        got = self.secrets.get(name)
        if got is None:
            raise NotFound(404, "NotFound", f'secrets "{name}" not found')
        if isinstance(got, Exception):
            raise got
        return got

    async def replace(self, res: Any, body: dict[str, Any], subresource: str | None = None):
        self.rv += 1
        out = copy.deepcopy(body)
        out["metadata"]["resourceVersion"] = str(self.rv)
        return out


async def test_a_broken_clusters_secret_is_read_once_per_probe_period(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A MultiKueueCluster whose kubeconfig is unusable (its Secret missing, a refused
    kubeconfig, a 403) had its Secret read again on every pass (1 s) while a MultiKueue
    check exists: a client token a second per broken cluster, for ever. It is now read once
    per ``probe_period_seconds``, as a connected worker is probed; its spec changed (another
    Secret) it is read at once; a read that failed for a passing reason (503) is asked again
    at the next pass; the Secret fixed is connected at the next probe period."""
    from app.kube.errors import Permanent, Retryable
    from app.kube.informers import Store

    made = worker_clients(monkeypatch)
    server = SecretServer()
    clusters = Store(MULTIKUEUE_CLUSTERS)
    checks = Store(ADMISSION_CHECKS)
    checks.put(copy.deepcopy(CHECK))  # a MultiKueue check: every pass looks at the clusters
    mk = _controller(server, clusters)
    mk.ctx.store = lambda kind: {MKC: clusters, AC: checks}.get(kind, Store(MULTIKUEUE_CONFIGS))

    def cluster(location: str, generation: int) -> dict[str, Any]:
        return {"metadata": {"name": "worker1", "generation": generation,
                             "resourceVersion": str(generation)},
                "spec": {"clusterSource": {"kubeConfig": {"location": location}}}}

    def reason() -> str:
        return mk.workers["worker1"].verdict.reason

    async def passes(n: int) -> int:
        """Reads of ``n`` passes, none a probe period after the last look."""
        before = server.reads
        for _ in range(n):
            await mk.sync_once()
        return server.reads - before

    def probe_period_passes() -> None:
        mk.workers["worker1"].probed_at -= mk.s.probe_period_seconds

    clusters.put(cluster("w1", 1))
    assert await passes(5) == 1 and reason() == "BadKubeConfig"  # Secret missing
    probe_period_passes()
    server.secrets["w1"] = {"data": {"kubeconfig": base64.b64encode(b"{[not yaml").decode()}}
    assert await passes(5) == 1 and reason() == "InsecureKubeConfig"
    server.secrets["w1"] = Permanent(403, "Forbidden", "secrets is forbidden")
    probe_period_passes()
    assert await passes(5) == 1 and reason() == "BadKubeConfig"
    server.secrets["w1"] = Retryable(503, "ServiceUnavailable", "etcd leader changed")
    probe_period_passes()
    assert await passes(3) == 3 and reason() == "BadKubeConfig"  # passing: every pass
    server.secrets["w1"] = kubeconfig("https://w1.example:6443")
    assert await passes(5) == 1 and mk.workers["worker1"].verdict.active  # fixed
    assert [c.server for c in made] == ["https://w1.example:6443"]
    clusters.set("worker1", cluster("w1-moved", 2))  # another Secret (missing): at once
    assert await passes(5) == 1 and reason() == "BadKubeConfig"
    assert made[0].closed


async def test_a_check_status_written_is_not_written_again_from_a_stale_store() -> None:
    """The MultiKueue AdmissionCheck's Active condition, as the MultiKueueCluster's
    (906fcd9): written from the AdmissionCheck store's copy, whose status the next pass (1 s
    later) still shows old while the watch has not delivered the write: written again with
    the old resourceVersion, a 409 Conflict and a client token for nothing. The response of
    the write goes into the store."""
    from app.kube.informers import Store

    server = StatusServer(CHECK)
    checks = Store(ADMISSION_CHECKS)
    checks.put(copy.deepcopy(CHECK))
    mk = _controller(server, Store(MULTIKUEUE_CLUSTERS))
    mk.ctx.store = lambda kind: checks if kind == AC else Store(MULTIKUEUE_CONFIGS)
    for _ in range(3):  # three passes, the watch delivering nothing meanwhile
        await mk.sync_once()
    assert (server.puts, server.conflicts) == (1, 0)
    active = [c for c in checks.get("mk")["status"]["conditions"]  # type: ignore[index]
              if c["type"] == "Active"]
    assert [(c["status"], c["reason"]) for c in active] == [("False", "BadConfig")]


async def test_a_cluster_deleted_and_created_again_is_looked_at_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """breakmk23: a MultiKueueCluster deleted and created again under its name between two
    passes (1 s) has the same ``generation`` (1), so within the probe period its worker was
    taken as unchanged: the new cluster, pointing at another Secret (missing here), was
    written Active "Connected" and Workloads went to the old worker's client for up to
    ``probe_period_seconds``. Another uid is another cluster: looked at at once."""
    from app.kube.informers import Store

    made = worker_clients(monkeypatch)
    server = SecretServer()
    server.secrets["w1"] = kubeconfig("https://w1.example:6443")
    clusters = Store(MULTIKUEUE_CLUSTERS)
    checks = Store(ADMISSION_CHECKS)
    checks.put(copy.deepcopy(CHECK))
    mk = _controller(server, clusters)
    mk.ctx.store = lambda kind: {MKC: clusters, AC: checks}.get(kind, Store(MULTIKUEUE_CONFIGS))

    def cluster(uid: str, location: str) -> dict[str, Any]:
        return {"metadata": {"name": "worker1", "uid": uid, "generation": 1,
                             "resourceVersion": "1"},
                "spec": {"clusterSource": {"kubeConfig": {"location": location}}}}

    clusters.put(cluster("a", "w1"))
    await mk.sync_once()
    assert mk.workers["worker1"].verdict.active
    clusters.set("worker1", cluster("b", "w2"))  # deleted, created again: Secret w2 missing
    await mk.sync_once()
    assert mk.workers["worker1"].verdict.reason == "BadKubeConfig"
    assert made[0].closed

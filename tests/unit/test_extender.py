"""Scheduler extender (issue 7): every filter branch in both request modes, prioritize scores,
malformed bodies, metrics, the node store, and the scheduler configuration manifests.

Requests go through the real FastAPI app (``create_app``) over httpx's ASGI transport.
"""

from __future__ import annotations

import asyncio
import json
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from app.config import ServerSettings, Settings
from app.core.types import ClusterQueueName, FlavorName, ResourceName
from app.core.workload import Admission, PodSet, PodSetAssignment, Taint, Toleration, Workload
from app.extender.nodestore import ExtenderState, InMemoryExtenderState, NodeStore
from app.extender.placement import (
    ExtenderInputError,
    FlavorView,
    NodeFacts,
    NodeIndex,
    PodFacts,
    PodWorkloadView,
    filter_pod,
    pod_facts,
    view_from_workload,
)
from app.main import create_app
from app.models.extender import ExtenderFilterResult, HostPriorityList

ROOT = Path(__file__).resolve().parents[2]
GPU = "nvidia.com/gpu"

# ------------------------------------------------------------------------------ builders


def node(
    name: str,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    gpus: int | str | None = None,
) -> dict[str, Any]:
    """A core/v1 Node object as the scheduler sends it."""
    obj: dict[str, Any] = {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": taints} if taints else {},
        "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"}},
    }
    if gpus is not None:
        obj["status"]["allocatable"][GPU] = str(gpus)
    return obj


def taint(key: str, value: str = "", effect: str = "NoSchedule") -> dict[str, str]:
    return {"key": key, "value": value, "effect": effect}


def pod(
    name: str = "p-0",
    *,
    namespace: str = "research",
    job: str | None = None,
    job_via_label: bool = False,
    podset: str | None = "main",
    queue: str | None = None,
    tolerations: list[dict[str, str]] | None = None,
    gpus: int = 1,
    node_name: str | None = None,
    phase: str = "Pending",
    uid: str | None = None,
) -> dict[str, Any]:
    """A core/v1 Pod of Job ``job`` (ownerReference, or only the job-name label)."""
    labels: dict[str, str] = {}
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid or name}
    if job is not None:
        labels["batch.kubernetes.io/job-name"] = job
        if not job_via_label:
            meta["ownerReferences"] = [
                {"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": "u-" + job,
                 "controller": True}
            ]
        if podset is not None:
            labels["kueue.x-k8s.io/podset"] = podset
    if queue is not None:
        labels["kueue.x-k8s.io/queue-name"] = queue
    meta["labels"] = labels
    container: dict[str, Any] = {"name": "c", "image": "busybox",
                                 "resources": {"requests": {"cpu": "1"}}}
    if gpus:
        container["resources"] = {"requests": {"cpu": "1", GPU: str(gpus)},
                                  "limits": {GPU: str(gpus)}}
    spec: dict[str, Any] = {"containers": [container]}
    if tolerations:
        spec["tolerations"] = tolerations
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


A100 = FlavorView.of("a100-flavor", {"pool": "a100"},
                     [Toleration(key="pool", value="a100", effect="NoSchedule")])
L4 = FlavorView.of("l4-flavor", {"pool": "l4"})
CPU = FlavorView.of("default-flavor")
ZONED = FlavorView.of("zone1-flavor", {"zone": "z1"})
WEIRD = FlavorView.of("weird-flavor", {"pool": "l4"})

NODES = [
    node("a100-0", {"pool": "a100"}, [taint("pool", "a100")], gpus=8),
    node("a100-1", {"pool": "a100"}, [taint("pool", "a100")], gpus=8),
    node("a100-2", {"pool": "a100"}, [taint("pool", "a100"), taint("maintenance", "true",
                                                                  "NoExecute")], gpus=8),
    node("a100-3", {"pool": "a100", "zone": "z1"}, [taint("pool", "a100"),
                                                     taint("busy", "", "PreferNoSchedule")],
         gpus=8),
    node("l4-0", {"pool": "l4"}, gpus=4),
    node("cpu-0", {}),
]
ALL = [n["metadata"]["name"] for n in NODES]

WL_TRAIN = "research/job-train-abc12"


def admitted(key: str, **pod_sets: tuple[FlavorView, ...]) -> PodWorkloadView:
    return PodWorkloadView(key, True, "", dict(pod_sets))


WAIT_REASON = ("insufficient unused quota for nvidia.com/gpu in flavor a100-flavor: "
               "6 requested, 2 available")
VIEWS = {
    "train": admitted(WL_TRAIN, main=(A100,)),
    "infer": admitted("research/job-infer-x1", main=(L4,)),
    "waiting": PodWorkloadView("research/job-waiting-q9", False, WAIT_REASON),
    "multi": admitted("research/job-multi-m1", driver=(CPU,), workers=(A100,)),
    "conflict": admitted("research/job-conflict-c1", main=(A100, WEIRD)),
    "zoned": admitted("research/job-zoned-z1", main=(A100, ZONED)),
}


def make_state(nodes: list[dict[str, Any]] = NODES) -> InMemoryExtenderState:
    store = NodeStore(GPU)
    for n in nodes:
        store.add(n)
    st_ = InMemoryExtenderState(nodes=store, known_flavors=(A100, L4, CPU, ZONED))
    for job, view in VIEWS.items():
        st_.set_workload("research", job, view)
    return st_


@pytest.fixture
def state() -> InMemoryExtenderState:
    return make_state()


@pytest.fixture
def app(state: InMemoryExtenderState):
    # /metrics read without a token here; its authorization is tested in test_health.
    application = create_app(Settings(server=ServerSettings(metrics_auth=False)))
    application.state.extender_state = state
    return application


@pytest.fixture
async def client(app):
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as c:
        yield c


def args(p: dict[str, Any], mode: str, names: list[str] | None = None) -> dict[str, Any]:
    """ExtenderArgs for ``mode`` "names" (nodeCacheCapable) or "nodes" (full objects)."""
    names = ALL if names is None else names
    if mode == "names":
        return {"Pod": p, "Nodes": None, "NodeNames": names}
    by_name = {n["metadata"]["name"]: n for n in NODES}
    return {"Pod": p, "Nodes": {"metadata": {}, "items": [by_name[n] for n in names]},
            "NodeNames": None}


@dataclass
class Outcome:
    passing: list[str]
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)


async def do_filter(client: httpx.AsyncClient, body: dict[str, Any], mode: str) -> Outcome:
    r = await client.post("/scheduler/filter", json=body)
    assert r.status_code == 200, r.text
    res = ExtenderFilterResult.model_validate_json(r.content)
    assert res.Error == ""
    if mode == "names":
        assert res.NodeNames is not None and res.Nodes is None
        passing = res.NodeNames
    else:
        assert res.Nodes is not None and res.NodeNames is None
        passing = [n["metadata"]["name"] for n in res.Nodes.items]
    # Every candidate is accounted for exactly once.
    sent = body["NodeNames"] if mode == "names" else [
        n["metadata"]["name"] for n in body["Nodes"]["items"]]
    decided = passing + list(res.FailedNodes) + list(res.FailedAndUnresolvableNodes)
    assert sorted(decided) == sorted(sent)
    return Outcome(passing, res.FailedNodes, res.FailedAndUnresolvableNodes)


MODES = pytest.mark.parametrize("mode", ["names", "nodes"])

# --------------------------------------------------------------------------------- filter


@MODES
@pytest.mark.parametrize(
    "p",
    [
        pytest.param(pod("web-0", job=None, podset=None), id="pod-of-no-job-passes-everywhere"),
        pytest.param(pod(job="unmanaged"), id="pod-of-a-job-pykueue-does-not-manage-passes"),
        pytest.param(pod(job="unmanaged", gpus=0), id="gpu-less-unmanaged-pod-passes"),
    ],
)
async def test_unmanaged_pod_passes_every_node_unchanged(client, mode, p):
    out = await do_filter(client, args(p, mode), mode)
    assert out.passing == ALL and out.failed == {} and out.unresolvable == {}


@MODES
async def test_full_mode_echoes_node_objects_unchanged(client, mode):
    r = await client.post("/scheduler/filter", json=args(pod(job="train"), mode))
    body = r.json()
    if mode == "nodes":
        by_name = {n["metadata"]["name"]: n for n in NODES}
        assert body["Nodes"]["items"] == [by_name[n] for n in ("a100-0", "a100-1", "a100-3")]
    else:
        assert body["NodeNames"] == ["a100-0", "a100-1", "a100-3"]
    assert set(body) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes",
                         "Error"}


@MODES
@pytest.mark.parametrize(
    ("p", "passing"),
    [
        pytest.param(pod(job="train"), ["a100-0", "a100-1", "a100-3"],
                     id="a100-pod-lands-on-tolerated-a100-nodes-only"),
        pytest.param(pod(job="train", job_via_label=True), ["a100-0", "a100-1", "a100-3"],
                     id="job-found-through-job-name-label-without-owner-reference"),
        pytest.param(pod(job="train", podset=None), ["a100-0", "a100-1", "a100-3"],
                     id="pod-without-podset-label-uses-the-single-podset"),
        pytest.param(pod(job="train", tolerations=[{"key": "maintenance", "operator": "Exists"}]),
                     ["a100-0", "a100-1", "a100-2", "a100-3"],
                     id="pod-own-toleration-covers-a-taint-the-flavor-does-not"),
        pytest.param(pod(job="infer"), ["l4-0"], id="l4-pod-lands-on-l4-node-only"),
        pytest.param(pod(job="multi", podset="workers"), ["a100-0", "a100-1", "a100-3"],
                     id="podset-label-selects-the-podset-flavor"),
        pytest.param(pod(job="multi", podset="driver", gpus=0), ["l4-0", "cpu-0"],
                     id="flavor-without-labels-passes-untainted-nodes"),
        pytest.param(pod(job="zoned"), ["a100-3"],
                     id="two-flavors-on-one-podset-require-both-label-sets"),
    ],
)
async def test_admitted_pod_passes_only_nodes_of_its_flavor(client, mode, p, passing):
    out = await do_filter(client, args(p, mode), mode)
    assert out.passing == passing
    assert out.unresolvable == {}
    assert all(r.startswith("node(s) ") for r in out.failed.values())


@MODES
async def test_rejected_nodes_carry_reasons_a_person_can_read(client, mode):
    out = await do_filter(client, args(pod(job="train"), mode), mode)
    assert out.failed == {
        "a100-2": "node(s) had untolerated taint {maintenance=true:NoExecute}; "
                  f"pykueue admitted Workload {WL_TRAIN} to flavor a100-flavor",
        "l4-0": f"node(s) belong to flavor l4-flavor; pykueue admitted Workload {WL_TRAIN} "
                "to flavor a100-flavor",
        "cpu-0": "node(s) lack label pool=a100 of flavor a100-flavor, to which pykueue "
                 f"admitted Workload {WL_TRAIN}",
    }


@MODES
async def test_missing_label_reason_names_the_flavor_that_wants_it(client, mode):
    out = await do_filter(client, args(pod(job="zoned"), mode), mode)
    assert "lack label zone=z1 of flavor zone1-flavor" in out.failed["a100-0"]
    assert out.failed["l4-0"].startswith("node(s) belong to flavor l4-flavor;")
    assert "to flavors a100-flavor and zone1-flavor" in out.failed["l4-0"]


@MODES
@pytest.mark.parametrize(
    ("p", "expected"),
    [
        pytest.param(pod(job="waiting"),
                     f"Workload research/job-waiting-q9 is not admitted: {WAIT_REASON}",
                     id="not-admitted-workload-holds-every-node-with-its-pending-reason"),
        pytest.param(pod(job="multi", podset=None),
                     "pod has no label kueue.x-k8s.io/podset and Workload research/job-multi-m1"
                     " has podSets driver, workers",
                     id="no-podset-label-and-several-podsets"),
        pytest.param(pod(job="train", podset="ghost"),
                     "podSet ghost of pod research/p-0 is not in Workload "
                     f"{WL_TRAIN}", id="podset-label-unknown-to-the-workload"),
        pytest.param(pod(job="conflict"),
                     "flavors a100-flavor and weird-flavor of podSet main of Workload "
                     "research/job-conflict-c1 require label pool to be both a100 and l4",
                     id="flavors-of-one-podset-with-conflicting-labels"),
    ],
)
async def test_unresolvable_for_every_node(client, mode, p, expected):
    out = await do_filter(client, args(p, mode), mode)
    assert out.passing == [] and out.failed == {}
    assert out.unresolvable == dict.fromkeys(ALL, "node(s) withheld by pykueue: " + expected)


@pytest.mark.parametrize(
    ("p", "passing", "reasons"),
    [
        pytest.param(pod(job=None, podset=None), ["a100-0", "ghost-0"], {},
                     id="unmanaged-pod-passes-unknown-node"),
        pytest.param(pod(job="train"), ["a100-0"],
                     {"ghost-0": "node(s) unknown to pykueue's node cache; Workload "
                                 f"{WL_TRAIN} needs flavor a100-flavor"},
                     id="admitted-pod-fails-unknown-node-and-says-so"),
    ],
)
async def test_unknown_node_names(client, p, passing, reasons):
    out = await do_filter(client, args(p, "names", ["a100-0", "ghost-0"]), "names")
    assert out.passing == passing and out.failed == reasons


async def test_unknown_node_of_not_admitted_pod_is_unresolvable(client):
    out = await do_filter(client, args(pod(job="waiting"), "names", ["ghost-0"]), "names")
    assert list(out.unresolvable) == ["ghost-0"]


@MODES
@pytest.mark.parametrize("why", ["no-state", "state-not-synced"])
@pytest.mark.parametrize(
    ("p", "held"),
    [
        pytest.param(pod(job="train"), True, id="pod-with-podset-label-is-held"),
        pytest.param(pod(job="x", podset=None, queue="team"), True,
                     id="pod-with-queue-name-label-is-held"),
        pytest.param(pod(job="x", podset=None), False, id="pod-without-pykueue-labels-passes"),
    ],
)
async def test_without_synced_state(app, state, mode, why, p, held):
    if why == "no-state":
        del app.state.extender_state
    else:
        state.is_synced = False
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as c:
        out = await do_filter(c, args(p, mode), mode)
    if held:
        assert out.passing == []
        assert out.unresolvable == dict.fromkeys(
            ALL, "node(s) withheld by pykueue: pykueue is starting: state not synced")
    else:
        assert out.passing == ALL and out.unresolvable == {}


async def test_filter_follows_node_label_changes_from_the_watch(client, state):
    before = await do_filter(client, args(pod(job="infer"), "names"), "names")
    relabelled = node("cpu-0", {"pool": "l4"}, gpus=4)
    state.nodes.update(relabelled)
    after = await do_filter(client, args(pod(job="infer"), "names"), "names")
    state.nodes.delete("l4-0")
    gone = await do_filter(client, args(pod(job="infer"), "names"), "names")
    assert before.passing == ["l4-0"]
    assert after.passing == ["l4-0", "cpu-0"]
    assert gone.passing == ["cpu-0"] and "unknown" in gone.failed["l4-0"]


async def test_internal_error_answers_200_with_error_field(app):
    class Broken(InMemoryExtenderState):
        def workload_for_pod(self, namespace, job_name, job_uid=""):
            raise RuntimeError("cache corrupted")

        def free_gpus(self):
            raise RuntimeError("cache corrupted")

    app.state.extender_state = Broken()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as c:
        r = await c.post("/scheduler/filter", json=args(pod(job="train"), "names"))
        p = await c.post("/scheduler/prioritize", json=args(pod(job="train"), "names"))
    assert r.status_code == 200
    assert r.json()["Error"] == "pykueue extender internal error: RuntimeError: cache corrupted"
    assert p.status_code == 200 and p.json() == []


# ------------------------------------------------------------------------------ prioritize


@MODES
@pytest.mark.parametrize(
    ("gpus", "expected"),
    [
        # free: a100-0 8, a100-1 2 (6 used), a100-2 8, a100-3 7 (1 used, 1 finished), l4-0 4,
        # cpu-0 0. score = 10 - (free - gpus) when 0 <= free - gpus <= 10, else 0.
        pytest.param(2, {"a100-0": 4, "a100-1": 10, "a100-2": 4, "a100-3": 5, "l4-0": 8,
                         "cpu-0": 0}, id="two-gpus-pack-onto-the-fullest-node-that-fits"),
        pytest.param(8, {"a100-0": 10, "a100-1": 0, "a100-2": 10, "a100-3": 0, "l4-0": 0,
                         "cpu-0": 0}, id="eight-gpus-fit-only-on-empty-a100-nodes"),
        pytest.param(0, {"a100-0": 2, "a100-1": 8, "a100-2": 2, "a100-3": 3, "l4-0": 6,
                         "cpu-0": 10}, id="gpu-less-pod-prefers-nodes-without-free-gpus"),
    ],
)
async def test_prioritize_packs_gpus(client, state, mode, gpus, expected):
    state.nodes.upsert_pod(pod("running-1", job="other", gpus=6, node_name="a100-1",
                               phase="Running"))
    state.nodes.upsert_pod(pod("running-2", job="other", gpus=1, node_name="a100-3",
                               phase="Running"))
    state.nodes.upsert_pod(pod("done-1", job="other", gpus=4, node_name="a100-3",
                               phase="Succeeded"))
    state.nodes.upsert_pod(pod("unbound", job="other", gpus=4))
    r = await client.post("/scheduler/prioritize", json=args(pod(job="train", gpus=gpus), mode))
    assert r.status_code == 200
    hosts = HostPriorityList.model_validate_json(r.content).root
    assert [h.Host for h in hosts] == ALL
    assert {h.Host: h.Score for h in hosts} == expected


async def test_prioritize_unknown_node_scores_zero(client):
    r = await client.post("/scheduler/prioritize",
                          json=args(pod(job="train", gpus=0), "names", ["ghost-0", "cpu-0"]))
    assert r.json() == [{"Host": "ghost-0", "Score": 0}, {"Host": "cpu-0", "Score": 10}]


async def test_prioritize_full_mode_without_state_uses_allocatable(app):
    del app.state.extender_state
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as c:
        r = await c.post("/scheduler/prioritize", json=args(pod(gpus=3), "nodes",
                                                            ["a100-0", "l4-0"]))
    assert r.json() == [{"Host": "a100-0", "Score": 5}, {"Host": "l4-0", "Score": 9}]


# --------------------------------------------------------------------------- bad requests

BAD_BODIES = [
    pytest.param(b"not json", id="not-json"),
    pytest.param(b"", id="empty-body"),
    pytest.param(b"[]", id="json-array"),
    pytest.param(b'{"NodeNames": ["a"]}', id="no-pod"),
    pytest.param(b'{"Pod": "x", "NodeNames": ["a"]}', id="pod-not-an-object"),
    pytest.param(b'{"Pod": {}, "NodeNames": [1, 2]}', id="node-names-not-strings"),
    pytest.param(b'{"Pod": {}, "NodeNames": "a"}', id="node-names-not-a-list"),
    pytest.param(b'{"Pod": {}, "Nodes": null, "NodeNames": null}', id="neither-nodes-nor-names"),
    pytest.param(b'{"Pod": {}, "Nodes": {"items": [{"metadata": {}}]}}', id="node-without-name"),
    pytest.param(b'{"Pod": {}, "Nodes": {"items": [{"metadata": {"name": "a", "labels": '
                 b'{"x": 1}}}]}}', id="node-label-not-a-string"),
    pytest.param(b'{"Pod": {}, "Nodes": {"items": [{"metadata": {"name": "a"}, "status": '
                 b'{"allocatable": {"nvidia.com/gpu": "lots"}}}]}}', id="node-gpu-not-a-quantity"),
    pytest.param(b'{"Pod": {"metadata": {"labels": []}}, "NodeNames": []}',
                 id="pod-labels-not-an-object"),
    pytest.param(b'{"Pod": {"spec": {"tolerations": {}}}, "NodeNames": []}',
                 id="pod-tolerations-not-a-list"),
    pytest.param(b'{"Pod": {"spec": {"containers": [{"resources": {"requests": '
                 b'{"nvidia.com/gpu": "-1"}}}]}}, "NodeNames": []}', id="negative-gpu-request"),
    pytest.param(b'{"Pod": {"metadata": {"ownerReferences": "Job"}}, "NodeNames": []}',
                 id="owner-references-not-a-list"),
]


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
@pytest.mark.parametrize("body", BAD_BODIES)
async def test_malformed_body_is_400(client, verb, body):
    r = await client.post(f"/scheduler/{verb}", content=body,
                          headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert r.json()["detail"].startswith("malformed ExtenderArgs")


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(["metadata", "spec", "labels", "items", "name",
                                       "tolerations", "containers", "resources", "requests",
                                       "nvidia.com/gpu", "ownerReferences", "kind"]) | st.text(
                                           max_size=4), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pod_obj=JSON_VALUES,
    nodes=st.none() | st.lists(st.text(max_size=5), max_size=4) | JSON_VALUES,
    names_key=st.sampled_from(["NodeNames", "Nodes"]),
)
def test_no_request_ever_gets_a_5xx(pod_obj, nodes, names_key):
    application = create_app(Settings())
    application.state.extender_state = make_state()
    body = json.dumps({"Pod": pod_obj, names_key: nodes})

    async def post_both() -> list[int]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=application),
                                     base_url="http://test") as c:
            return [(await c.post(f"/scheduler/{verb}", content=body)).status_code
                    for verb in ("filter", "prioritize")]

    assert set(asyncio.run(post_both())) <= {200, 400}


# -------------------------------------------------------------------------------- metrics


async def test_latency_histogram_counts_requests_in_the_app_registry(app):
    registry = CollectorRegistry()
    app.state.metrics_registry = registry
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as c:
        for _ in range(3):
            await c.post("/scheduler/filter", json=args(pod(job="train"), "names"))
        await c.post("/scheduler/prioritize", json=args(pod(job="train"), "nodes"))
        await c.post("/scheduler/filter", content=b"{")
    name = "pykueue_extender_request_duration_seconds_count"
    assert registry.get_sample_value(name, {"verb": "filter", "mode": "names"}) == 3
    assert registry.get_sample_value(name, {"verb": "prioritize", "mode": "nodes"}) == 1
    assert registry.get_sample_value(name, {"verb": "filter", "mode": "invalid"}) == 1


async def test_latency_histogram_is_served_at_metrics(app):
    del app.state.metrics_registry  # created lazily when absent
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as c:
        await c.post("/scheduler/filter", json=args(pod(job="train"), "nodes"))
        text = (await c.get("/metrics")).text
    assert ('pykueue_extender_request_duration_seconds_count{mode="nodes",verb="filter"} 1.0'
            in text)


async def test_latency_histogram_survives_a_registry_that_already_has_the_name(app):
    shared = CollectorRegistry()
    other = create_app(Settings())
    other.state.metrics_registry = app.state.metrics_registry = shared
    for application in (app, other):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=application),
                                     base_url="http://test") as c:
            r = await c.post("/scheduler/filter", json=args(pod(), "names"))
            assert r.status_code == 200
    own = other.state.extender_metrics_registry
    assert own.get_sample_value("pykueue_extender_request_duration_seconds_count",
                                {"verb": "filter", "mode": "names"}) == 1


# ----------------------------------------------------------------------- core invariants

LABEL_KEYS = ["pool", "zone"]
LABEL_VALUES = ["a", "b"]
TAINTS = [Taint("pool", "a"), Taint("maint", "", "NoExecute"), Taint("x", "1")]
TOLS = [Toleration(key="pool", value="a", effect="NoSchedule"),
        Toleration(key="maint", operator="Exists"), Toleration(operator="Exists"),
        Toleration(key="x", value="2")]


def naive_fits(n: NodeFacts, selector: dict[str, str], tolerations: list[Toleration]) -> bool:
    """The rule of issue 7, one node at a time."""
    return all(n.labels.get(k) == v for k, v in selector.items()) and all(
        any(t.tolerates(taint) for t in tolerations) for taint in n.hard_taints)


node_facts_st = st.builds(
    lambda i, labels, taints: NodeFacts(f"n{i}", labels, tuple(taints)),
    st.integers(0, 30),
    st.dictionaries(st.sampled_from(LABEL_KEYS), st.sampled_from(LABEL_VALUES), max_size=2),
    st.lists(st.sampled_from(TAINTS), max_size=2, unique=True),
)
flavor_st = st.builds(
    lambda name, labels, tols: FlavorView.of(name, labels, tols),
    st.sampled_from(["f1", "f2", "f3"]),
    st.dictionaries(st.sampled_from(LABEL_KEYS), st.sampled_from(LABEL_VALUES), max_size=2),
    st.lists(st.sampled_from(TOLS), max_size=2),
)


@settings(max_examples=400, deadline=None)
@given(
    nodes=st.lists(node_facts_st, max_size=20, unique_by=lambda n: n.name),
    assigned=flavor_st,
    others=st.lists(flavor_st, max_size=3),
    pod_tols=st.lists(st.sampled_from(TOLS), max_size=2),
    extra=st.lists(st.sampled_from(["ghost-1", "ghost-2"]), max_size=2, unique=True),
)
def test_indexed_filter_agrees_with_the_per_node_rule(nodes, assigned, others, pod_tols, extra):
    index = NodeIndex()
    for n in nodes:
        index.upsert(n)
    names = [n.name for n in nodes] + extra
    view = PodWorkloadView("ns/wl", True, "", {"main": (assigned,)})
    p = PodFacts("ns", "p", "job", "main", tolerations=tuple(pod_tols))
    d = filter_pod(p, view, names, index, tuple([assigned, *others]))
    expected = [n.name for n in nodes
                if naive_fits(n, dict(assigned.node_labels), [*pod_tols, *assigned.tolerations])]
    assert d.passing == expected
    assert sorted(d.passing + list(d.failed)) == sorted(names)
    assert d.unresolvable == {}
    assert all(d.failed[g].startswith("node(s) unknown") for g in extra)
    # Ask twice (cached) and after a change (cache dropped): same rule.
    assert filter_pod(p, view, names, index, tuple([assigned, *others])).passing == expected
    if nodes:
        first = nodes[0]
        index.upsert(NodeFacts(first.name, dict(assigned.node_labels)))
        again = filter_pod(p, view, names, index, (assigned,))
        assert first.name in again.passing


def test_taint_without_value_is_spelled_like_kubectl():
    index = NodeIndex([NodeFacts("g", {"pool": "a100"}, (Taint("dedicated", "", "NoExecute"),))])
    view = PodWorkloadView("ns/wl", True, "", {"main": (A100,)})
    d = filter_pod(PodFacts("ns", "p", "job", "main"), view, ["g"], index, (A100,))
    assert d.failed["g"].startswith("node(s) had untolerated taint {dedicated:NoExecute};")


def test_view_from_workload_maps_podset_assignments_to_flavors():
    ps = PodSet("main", 2, {ResourceName(GPU): 1})
    wl = Workload("research", "job-train-abc12", "team", (ps,))
    assert view_from_workload(wl, {}, "waiting for quota") == PodWorkloadView(
        WL_TRAIN, False, "waiting for quota")
    adm = Admission(ClusterQueueName("cq"), (PodSetAssignment(
        "main", {ResourceName("cpu"): FlavorName("default-flavor"),
                 ResourceName(GPU): FlavorName("a100-flavor"),
                 ResourceName("memory"): FlavorName("default-flavor")}, {}, 2),))
    wl = Workload("research", "job-train-abc12", "team", (ps,), admission=adm)
    view = view_from_workload(wl, {"a100-flavor": A100})
    assert view.admitted and view.key == WL_TRAIN
    assert view.pod_set_flavors == {"main": (FlavorView("default-flavor"), A100)}
    assert view.pod_set_gpus == {"main": 1}


def test_a_pod_asking_more_gpus_than_its_podset_gets_no_node():
    """A pod made under an admitted Job's name (a controller ownerReference of the tenant's,
    not the Job's template) asking 4 GPUs where the podSet's pods were admitted with 1: every
    node unresolvable, whatever podSet its label claims; one asking 1 is placed as before."""
    index = NodeIndex([NodeFacts("g", {"pool": "a100"})])
    view = PodWorkloadView("ns/wl", True, "", {"main": (A100,), "big": (A100,)},
                           {"main": 1, "big": 2})
    d = filter_pod(PodFacts("ns", "p", "job", pod_set="main", gpus=4), view, ["g"], index, (A100,))
    assert d.passing == [] and d.unresolvable["g"].startswith(
        "node(s) withheld by pykueue: pod ns/p requests 4 GPU(s), more than the 1 a pod of "
        "podSet main of Workload ns/wl was admitted with")
    assert filter_pod(PodFacts("ns", "p", "job", pod_set="big", gpus=4), view, ["g"], index,
                      (A100,)).unresolvable
    assert filter_pod(PodFacts("ns", "p", "job", pod_set="main", gpus=1), view, ["g"], index,
                      (A100,)).passing == ["g"]
    # A view without GPU counts (a podSet missing from them) checks nothing.
    bare = PodWorkloadView("ns/wl", True, "", {"main": (A100,)})
    assert filter_pod(PodFacts("ns", "p", "job", pod_set="main", gpus=4), bare, ["g"], index,
                      (A100,)).passing == ["g"]


# ----------------------------------------------------------------------------- node store


def test_node_store_tracks_gpu_usage_through_pod_lifecycle():
    store = NodeStore(GPU)
    store.add(node("g", gpus=8))
    store.upsert_pod(pod("a", job="j", gpus=2))  # not bound yet
    assert store.gpu_used("g") == 0
    store.upsert_pod(pod("a", job="j", gpus=2, node_name="g", phase="Running"))
    store.upsert_pod(pod("b", job="j", gpus=3, node_name="g", phase="Running"))
    store.upsert_pod(pod("b", job="j", gpus=3, node_name="g", phase="Running"))  # resync
    assert (store.gpu_used("g"), store.free_gpus()["g"]) == (5, 3)
    store.upsert_pod(pod("a", job="j", gpus=2, node_name="g", phase="Succeeded"))
    store.delete_pod(pod("b", job="j"))
    assert (store.gpu_used("g"), store.free_gpus()["g"]) == (0, 8)
    store.upsert_pod(pod("c", job="j", gpus=1, node_name="later", phase="Running"))
    store.add(node("later", gpus=2))
    assert store.free_gpus()["later"] == 1
    store.delete(node("later"))
    assert "later" not in store.free_gpus() and store.node("later") is None
    assert store.node("g")["metadata"]["name"] == "g" and len(store) == 1


def test_fast_wire_structs_use_the_model_field_names():
    from app.api import extender as api
    from app.models import extender as models

    pairs = [(api._WireArgs, models.ExtenderArgs), (api._WireNodeList, models.NodeList),
             (api._WireFilterResult, models.ExtenderFilterResult),
             (api._WireHostPriority, models.HostPriority)]
    for fast, model in pairs:
        assert set(fast.__struct_fields__) == set(model.model_fields), fast.__name__


async def test_full_mode_rereads_a_node_whose_object_changed(client):
    """Full mode caches facts by a Node object's exact bytes: the same node sent again with a
    new label must be decided on the new label, not the cached one."""
    p = pod(job="train")
    body = args(p, "nodes", ["a100-0"])
    assert (await do_filter(client, body, "nodes")).passing == ["a100-0"]
    changed = json.loads(json.dumps(body))
    changed["Nodes"]["items"][0]["metadata"]["labels"]["pool"] = "l4"
    out = await do_filter(client, changed, "nodes")
    assert out.passing == [] and "a100-0" in out.failed
    assert (await do_filter(client, body, "nodes")).passing == ["a100-0"]


async def test_names_mode_reuses_the_decoded_list_but_decides_per_pod(client):
    """The last NodeNames array is kept decoded; a second pod with the same list is still
    decided on its own Workload, and a different list is decoded afresh."""
    from app.api.extender import _names_cache

    admitted_pod = await do_filter(client, args(pod(job="train"), "names"), "names")
    kept = _names_cache.names
    unmanaged_pod = await do_filter(client, args(pod(job="unmanaged"), "names"), "names")
    assert _names_cache.names is kept  # same bytes: not decoded again
    assert admitted_pod.passing == ["a100-0", "a100-1", "a100-3"] and unmanaged_pod.passing == ALL
    fewer = await do_filter(client, args(pod(job="train"), "names", ["a100-1", "l4-0"]), "names")
    assert fewer.passing == ["a100-1"] and _names_cache.names == ["a100-1", "l4-0"]
    assert (await client.post("/scheduler/filter", json={"Pod": pod(), "NodeNames": [1]})
            ).status_code == 400


def test_full_mode_cache_hits_by_bytes_reuses_the_index_and_stays_bounded():
    import msgspec

    from app.api.extender import _ENTRY_OVERHEAD, _FullModeCache

    raws = [msgspec.Raw(json.dumps(n).encode()) for n in NODES]
    cache = _FullModeCache(GPU, max_bytes=sum(len(r) + _ENTRY_OVERHEAD for r in raws))
    first = [cache.facts(r, i) for i, r in enumerate(raws)]
    again = [cache.facts(msgspec.Raw(bytes(r)), i) for i, r in enumerate(raws)]
    assert all(a is b for a, b in zip(first, again, strict=True))  # hits, by content
    assert cache.index(first) is cache.index(again)  # same nodes: the index (and its caches) kept
    assert cache.index(first[:-1]) is not cache.index(first)
    assert len(cache) == len(raws)
    extra = msgspec.Raw(json.dumps(node("extra-0", gpus=1)).encode())
    assert cache.facts(extra, 0).gpus == 1
    assert len(cache) == 1  # over max_bytes: started over instead of growing
    with pytest.raises(ExtenderInputError, match=r"Nodes.items\[3\].metadata.name"):
        cache.facts(msgspec.Raw(b'{"metadata": {}}'), 3)


async def test_full_mode_cache_is_bounded_by_entries_under_a_flood_of_tiny_distinct_nodes(client):
    """Issue 14 item 2: POSTs of many tiny distinct Nodes (each far below the byte bound) left
    1.8 M entries; now the default cache never holds more than its entry bound, and the
    bytes it accounts stay under its byte bound."""
    from app.api.extender import _full_mode_cache

    cache = _full_mode_cache(GPU)
    for batch in range(5):
        items = [{"metadata": {"name": f"t{batch}-{i}"}} for i in range(8_000)]
        r = await client.post("/scheduler/filter",
                              json={"Pod": pod(job="unmanaged"), "Nodes": {"items": items}})
        assert r.status_code == 200
        assert len(r.json()["Nodes"]["items"]) == 8_000  # unmanaged pod: every node passes
        assert len(cache) <= cache.max_entries <= 16_384
        assert cache.size_bytes <= cache.max_bytes
    assert len(cache) > 0  # still caching: the last request's nodes are there


def test_in_memory_state_satisfies_the_protocol():
    assert isinstance(make_state(), ExtenderState)


# ------------------------------------------------------------------------------ manifests


def render(path: Path) -> dict[str, Any]:
    text = string.Template(path.read_text()).substitute(
        KUBECONFIG="/lab/kubeconfig", PYKUEUE_CA_FILE="/lab/certs/ca.crt",
        EXTENDER_CLIENT_CERT="/lab/certs/client.crt", EXTENDER_CLIENT_KEY="/lab/certs/client.key")
    return yaml.safe_load(text)


def test_scheduler_config_points_at_the_extender_routes(app):
    cfg = render(ROOT / "manifests/scheduler/kube-scheduler-config.yaml")
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert cfg["kind"] == "KubeSchedulerConfiguration"
    assert cfg["clientConnection"]["kubeconfig"] == "/lab/kubeconfig"
    assert cfg["leaderElection"] == {"leaderElect": False}
    (ext,) = cfg["extenders"]
    server = Settings().server
    assert ext["urlPrefix"] == f"https://{server.host}:{server.port}/scheduler"
    routes = set(app.openapi()["paths"])
    for verb in (ext["filterVerb"], ext["prioritizeVerb"]):
        assert f"/scheduler/{verb}" in routes
    assert ext["weight"] > 0 and ext["enableHTTPS"] is True
    assert ext["tlsConfig"] == {"insecure": False, "caFile": "/lab/certs/ca.crt",
                                "certFile": "/lab/certs/client.crt",
                                "keyFile": "/lab/certs/client.key"}
    assert ext["httpTimeout"] == "2s" and ext["nodeCacheCapable"] is True
    assert ext["managedResources"] == [{"name": GPU, "ignoredByScheduler": False}]
    assert ext["ignorable"] is False and not ext.get("bindVerb")


def test_plain_scheduler_config_has_no_extender():
    cfg = render(ROOT / "manifests/scheduler/kube-scheduler-config-plain.yaml")
    extended = render(ROOT / "manifests/scheduler/kube-scheduler-config.yaml")
    assert "extenders" not in cfg
    assert cfg == {k: v for k, v in extended.items() if k != "extenders"}


def test_a_pods_gpus_count_its_sidecars_as_kubernetes_does():
    """Effective request (Kubernetes): max(containers + sidecars, each init container + the
    sidecars started before it); a sidecar is an init container with restartPolicy Always."""
    def c(gpus: int, **extra: str) -> dict:
        return {"name": f"c{gpus}", "resources": {"limits": {GPU: str(gpus)}}, **extra}
    p = pod(gpus=1)
    p["spec"]["initContainers"] = [c(2, restartPolicy="Always"), c(4),
                                   c(1, restartPolicy="Always")]
    assert pod_facts(p, GPU).gpus == max(1 + 2 + 1, 2 + 4)
    p["spec"]["initContainers"] = [c(8, restartPolicy="Always")]
    assert pod_facts(p, GPU).gpus == 9
    p["spec"]["initContainers"] = [c(8)]
    assert pod_facts(p, GPU).gpus == 8

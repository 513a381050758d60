"""``extender.flavor_nodes_for_admitted_only``: a GPU pod no admitted Workload covers is
refused on every ResourceFlavor's nodes (unresolvable), and passes elsewhere; off by default
(such a pod is scheduled as kube-scheduler alone would). The other half of keeping unqueued
pods off quota-managed GPUs (docs/security.md); the webhook half is tested in
test_unlabelled_pods.py."""

from __future__ import annotations

import httpx
import pytest

from app.config import ExtenderSettings, ServerSettings, Settings
from app.extender.nodestore import InMemoryExtenderState
from app.main import create_app
from tests.unit.test_extender import ALL, MODES, args, do_filter, make_state, pod


def _app(state: InMemoryExtenderState, on: bool):
    app = create_app(Settings(server=ServerSettings(metrics_auth=False),
                              extender=ExtenderSettings(flavor_nodes_for_admitted_only=on)))
    app.state.extender_state = state
    return app


async def _filter(state: InMemoryExtenderState, p: dict, mode: str, on: bool = True):
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=_app(state, on)),
                                 base_url="http://test") as c:
        return await do_filter(c, args(p, mode), mode)


@MODES
async def test_an_unqueued_gpu_pod_is_kept_off_every_flavor_node(mode: str) -> None:
    out = await _filter(make_state(), pod("bare", podset=None), mode)
    assert out.passing == ["cpu-0"]  # the only node no flavor's nodeLabels select
    assert set(out.unresolvable) == set(ALL) - {"cpu-0"} and not out.failed
    assert "node(s) of flavor a100-flavor run only pods of admitted Workloads" in \
        out.unresolvable["a100-0"]
    assert "research/bare has none" in out.unresolvable["l4-0"]


@MODES
async def test_off_by_default_and_a_covered_pod_passes(mode: str) -> None:
    assert (await _filter(make_state(), pod("bare", podset=None), mode, on=False)).passing \
        == ALL
    state = make_state()
    state.admitted_pods.add("research/bare")
    assert (await _filter(state, pod("bare", podset=None), mode)).passing == ALL


@MODES
async def test_a_managed_jobs_pod_keeps_its_own_rules(mode: str) -> None:
    """A pod of a Job pykueue queues is judged by its Workload, as before."""
    out = await _filter(make_state(), pod(job="waiting"), mode)
    assert out.passing == [] and set(out.unresolvable) == set(ALL)
    assert "is not admitted" in out.unresolvable["cpu-0"]


@pytest.mark.parametrize("on", [True, False])
async def test_before_sync_an_unqueued_gpu_pod_waits_only_with_the_setting(on: bool) -> None:
    state = make_state()
    state.is_synced = False
    out = await _filter(state, pod("bare", podset=None), "names", on=on)
    assert out.passing == ([] if on else ALL)

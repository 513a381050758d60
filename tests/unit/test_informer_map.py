"""The informers' index by API group and kind (``InformerSet.keys_for``), which
``framework.stored_controller`` reads instead of scanning every store (about 30, for each pod
it looks at): after any change to the set (``add``, a key new or added again, and ``adopt``,
the only changes: the map is read-only) it answers what a scan of the map in its order
answers, so the store found for a controller is the one a scan found."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.integrations.framework import stored_controller
from app.integrations.jobset.jobset import JOBSETS
from app.kube.client import JOBS, PODS, WORKLOADS, Resource
from app.kube.informers import InformerSet, Store
from tests.unit.fake_ctx import StoreOnly

RESOURCES = (JOBS, JOBSETS, PODS, WORKLOADS, Resource("example.com", "v1", "jobs", "Job"))


def _scan(informers: InformerSet, group: str, kind: str) -> tuple[str, ...]:
    return tuple(k for k, inf in informers.informers.items()
                 if (inf.store.resource.group, inf.store.resource.kind) == (group, kind))


KEYS = st.sampled_from(["a", "b", "c", "d", "e"])
ADDS = st.lists(st.tuples(st.sampled_from(["add", "adopt"]), KEYS, st.sampled_from(RESOURCES)),
                max_size=16)


@given(ADDS)
def test_the_index_answers_as_a_scan_after_every_change(adds: list[tuple[str, str, Any]]
                                                         ) -> None:
    async def run() -> None:
        informers = InformerSet()
        idle = asyncio.create_task(asyncio.sleep(0))
        for how, key, res in adds:
            if how == "add":
                informers.add(key, StoreOnly(res))  # type: ignore[arg-type]
            else:
                informers.adopt(key, StoreOnly(res), idle)  # type: ignore[arg-type]
            for r in RESOURCES:
                assert informers.keys_for(r.group, r.kind) \
                    == _scan(informers, r.group, r.kind), (how, key, res)
        await informers.stop()
    asyncio.run(run())


def test_the_map_changes_only_through_add() -> None:
    """Read-only outside: an assignment or a deletion would leave the index behind."""
    informers = InformerSet()
    informers.add("job", StoreOnly(JOBS))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        informers.informers["pod"] = StoreOnly(PODS)  # type: ignore[index]
    with pytest.raises(TypeError):
        del informers.informers["job"]  # type: ignore[attr-defined]
    assert list(informers.informers) == ["job"] and informers.keys_for("batch", "Job") == ("job",)


class _Ctx:
    def __init__(self, informers: InformerSet) -> None:
        self.informers = informers

    def store(self, key: str) -> Store:
        return self.informers.informers[key].store


def _job(rv: str, uid: str = "j-1") -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": "j", "namespace": "ns", "uid": uid, "resourceVersion": rv}}


def test_the_controller_is_read_from_the_first_store_of_its_kind_holding_it() -> None:
    """Two batch Job stores holding one Job (a Job relabelled between two watches): the copy
    of the store added first, as a scan found it; another group's ``Job`` kind, a store of
    the same name and another uid, and a store added later are all taken into account."""
    informers = InformerSet()
    for key, res in (("pods", PODS), ("first", JOBS), ("other", RESOURCES[-1])):
        informers.add(key, StoreOnly(res))  # type: ignore[arg-type]
    ctx = _Ctx(informers)
    pod = {"metadata": {"namespace": "ns", "ownerReferences": [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "j-1",
         "controller": True}]}}
    informers.informers["other"].store.put(_job("9"))
    assert stored_controller(ctx, pod) is None  # type: ignore[arg-type]
    informers.add("later", StoreOnly(JOBS))  # type: ignore[arg-type]
    informers.informers["later"].store.put(_job("2"))
    assert stored_controller(ctx, pod) == _job("2")  # type: ignore[arg-type]
    informers.informers["first"].store.put(_job("1"))
    assert stored_controller(ctx, pod) == _job("1")  # type: ignore[arg-type]
    informers.informers["first"].store.put(_job("3", uid="j-2"))  # another Job of the name
    assert stored_controller(ctx, pod) == _job("2")  # type: ignore[arg-type]
    informers.add("later", StoreOnly(PODS))  # type: ignore[arg-type]  # replaced: not a Job's
    assert stored_controller(ctx, pod) is None  # type: ignore[arg-type]

"""The informers' index by API group and kind (``InformerMap.keys_for``), which
``framework.stored_controller`` reads instead of scanning every store (about 30, for each pod
it looks at): after any change to the map it answers what a scan of the map in its order
answers, so the store found for a controller is the one a scan found."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from app.integrations.framework import stored_controller
from app.integrations.jobset.jobset import JOBSETS
from app.kube.client import JOBS, PODS, WORKLOADS, Resource
from app.kube.informers import InformerMap, Store

RESOURCES = (JOBS, JOBSETS, PODS, WORKLOADS, Resource("example.com", "v1", "jobs", "Job"))


class _Informer:
    def __init__(self, resource: Resource) -> None:
        self.store = Store(resource)


def _scan(informers: dict[str, Any], group: str, kind: str) -> tuple[str, ...]:
    return tuple(k for k, inf in informers.items()
                 if (inf.store.resource.group, inf.store.resource.kind) == (group, kind))


KEYS = st.sampled_from(["a", "b", "c", "d", "e"])
INFORMERS = st.builds(_Informer, st.sampled_from(RESOURCES))
OPS = st.one_of(
    st.tuples(st.just("set"), KEYS, INFORMERS),
    st.tuples(st.just("del"), KEYS),
    st.tuples(st.just("pop"), KEYS),
    st.tuples(st.just("update"), st.dictionaries(KEYS, INFORMERS, max_size=3)),
    st.tuples(st.just("setdefault"), KEYS, INFORMERS),
    st.tuples(st.just("ior"), st.dictionaries(KEYS, INFORMERS, max_size=3)),
    st.tuples(st.just("popitem")),
    st.tuples(st.just("clear")),
)


@given(st.dictionaries(KEYS, INFORMERS, max_size=4), st.lists(OPS, max_size=12))
def test_the_index_answers_as_a_scan_after_every_change(
        initial: dict[str, _Informer], ops: list[tuple[Any, ...]]) -> None:
    informers = InformerMap(initial)  # type: ignore[arg-type]
    for op in ops:
        name, *args = op
        if name == "set":
            informers[args[0]] = args[1]
        elif name in ("del", "pop") and args[0] in informers:
            if name == "del":
                del informers[args[0]]
            else:
                informers.pop(args[0])
        elif name == "update":
            informers.update(args[0])
        elif name == "setdefault":
            informers.setdefault(args[0], args[1])
        elif name == "ior":
            informers |= args[0]
        elif name == "popitem" and informers:
            informers.popitem()
        elif name == "clear":
            informers.clear()
        for res in RESOURCES:
            assert informers.keys_for(res.group, res.kind) \
                == _scan(informers, res.group, res.kind), op


class _Ctx:
    def __init__(self, informers: InformerMap) -> None:
        self.informers = type("S", (), {"informers": informers})()

    def store(self, key: str) -> Store:
        return self.informers.informers[key].store  # type: ignore[no-any-return]


def _job(rv: str, uid: str = "j-1") -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": "j", "namespace": "ns", "uid": uid, "resourceVersion": rv}}


def test_the_controller_is_read_from_the_first_store_of_its_kind_holding_it() -> None:
    """Two batch Job stores holding one Job (a Job relabelled between two watches): the copy
    of the store added first, as a scan found it; another group's ``Job`` kind, a store of
    the same name and another uid, and a store added later are all taken into account."""
    informers = InformerMap({"pods": _Informer(PODS), "first": _Informer(JOBS),  # type: ignore[dict-item]
                             "other": _Informer(RESOURCES[-1])})
    ctx = _Ctx(informers)
    pod = {"metadata": {"namespace": "ns", "ownerReferences": [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "j-1",
         "controller": True}]}}
    informers["other"].store.put(_job("9"))
    assert stored_controller(ctx, pod) is None  # type: ignore[arg-type]
    informers["later"] = _Informer(JOBS)  # type: ignore[assignment]
    informers["later"].store.put(_job("2"))
    assert stored_controller(ctx, pod) == _job("2")  # type: ignore[arg-type]
    informers["first"].store.put(_job("1"))
    assert stored_controller(ctx, pod) == _job("1")  # type: ignore[arg-type]
    informers["first"].store.put(_job("3", uid="j-2"))  # another Job of the name
    assert stored_controller(ctx, pod) == _job("2")  # type: ignore[arg-type]
    del informers["later"]
    assert stored_controller(ctx, pod) is None  # type: ignore[arg-type]

"""Informers against the real API server: list, watch, resourceVersion bookkeeping, relist
after 410 Gone (caused by a real kube-apiserver restart), CRD kinds, typed errors."""

from __future__ import annotations

import asyncio

import pytest

from app.kube.client import (
    RESOURCE_FLAVORS,
    WORKLOADS,
    KubeClient,
    Resource,
)
from app.kube.errors import Conflict, NotFound
from app.kube.informers import Informer
from tests.integration.reconciler_support import (
    async_wait,
    namespace,
    restart_apiserver,
    rlab_fixture,  # noqa: F401 - fixture
    settings_for,
    unique,
)
from tests.labfixture import LabHandle

pytestmark = pytest.mark.lab

CM = Resource("", "v1", "configmaps", "ConfigMap")


async def _client(lab: LabHandle) -> KubeClient:
    # The informer tests write test objects (ConfigMaps...) themselves: the lab admin's client.
    return await KubeClient.from_settings(
        settings_for(lab).client.model_copy(update={"kubeconfig": lab.kubeconfig}))


def _cm(name: str, ns: str, v: str = "1") -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns},
            "data": {"v": v}}


async def test_informer_lists_then_watches_every_change(rlab: LabHandle) -> None:
    ns = namespace(rlab, "inf")
    client = await _client(rlab)
    try:
        for i in range(3):
            await client.create(CM, _cm(f"pre-{i}", ns))
        inf = Informer(client, CM, namespace=ns, watch_timeout_seconds=3)
        seen: list[tuple[str, str]] = []
        inf.add_handler(lambda t, o, n: seen.append((t, (n or o)["metadata"]["name"])))
        task = asyncio.create_task(inf.run())
        await asyncio.wait_for(inf.synced.wait(), 30)
        names = {o["metadata"]["name"] for o in inf.store}
        assert {"pre-0", "pre-1", "pre-2"} <= names
        assert all("managedFields" not in o["metadata"] for o in inf.store)
        rv_after_list = int(inf.resource_version)
        await client.create(CM, _cm("live", ns))
        await client.patch(CM, "live", {"data": {"v": "2"}}, ns)
        await client.delete(CM, "pre-0", ns)
        await async_wait(lambda: ("DELETED", "pre-0") in seen, 10, "the delete event")
        assert ("ADDED", "live") in seen and ("MODIFIED", "live") in seen
        assert inf.store.get(f"{ns}/live")["data"] == {"v": "2"}
        assert inf.store.get(f"{ns}/pre-0") is None
        assert int(inf.resource_version) > rv_after_list
        # The server ends each watch after ~3-4.5 s; the informer re-watches from its rv
        # without relisting and misses nothing.
        await async_wait(lambda: inf.watches >= 2, 15, "a second watch request")
        await client.create(CM, _cm("after-rewatch", ns))
        await async_wait(lambda: inf.store.get(f"{ns}/after-rewatch"), 10, "event after rewatch")
        assert inf.relists == 0
        task.cancel()
    finally:
        await client.close()
        rlab.kubectl("delete", "namespace", ns, "--wait=false")


async def test_informer_relists_after_410_when_the_apiserver_restarts(rlab: LabHandle) -> None:
    ns = namespace(rlab, "inf")
    client = await _client(rlab)
    try:
        await client.create(CM, _cm("keep", ns))
        await client.create(CM, _cm("doomed", ns))
        inf = Informer(client, CM, namespace=ns, watch_timeout_seconds=60)
        seen: list[tuple[str, str]] = []
        inf.add_handler(lambda t, o, n: seen.append((t, (n or o)["metadata"]["name"])))
        task = asyncio.create_task(inf.run())
        await asyncio.wait_for(inf.synced.wait(), 30)
        old_rv = inf.resource_version
        # Take the informer off the air, change things, restart kube-apiserver: its new watch
        # cache starts after old_rv, so the informer's watch gets 410 Expired and must relist.
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.delete(CM, "doomed", ns)
        await client.create(CM, _cm("born", ns))
        await asyncio.get_running_loop().run_in_executor(None, restart_apiserver, rlab, 1.0)
        seen.clear()
        task = asyncio.create_task(inf.run())
        await async_wait(lambda: inf.store.get(f"{ns}/born"), 60, "the relisted store")
        assert inf.relists >= 1
        assert inf.store.get(f"{ns}/doomed") is None
        assert ("DELETED", "doomed") in seen and ("ADDED", "born") in seen
        assert ("ADDED", "keep") not in seen  # unchanged objects are not re-announced
        assert int(inf.resource_version) > int(old_rv)
        # And it keeps watching after the relist.
        await client.create(CM, _cm("later", ns))
        await async_wait(lambda: inf.store.get(f"{ns}/later"), 15, "event after relist")
        task.cancel()
    finally:
        await client.close()
        rlab.kubectl("delete", "namespace", ns, "--wait=false")


async def test_relist_announces_writes_that_were_put_in_the_store_but_never_watched(
        rlab: LabHandle) -> None:
    """Controllers put their writes' responses into the store at once (Store.put). If the
    watch breaks before it delivers the event of such a write (kube-apiserver restarting),
    the relist finds the store already at that resourceVersion; the handlers were never told
    and must still hear of the create / update / delete (else the scheduler never sees a new
    Workload, or keeps the quota of a finished one)."""
    ns = namespace(rlab, "inf")
    client = await _client(rlab)
    try:
        await client.create(CM, _cm("changed", ns))
        await client.create(CM, _cm("removed", ns))
        inf = Informer(client, CM, namespace=ns, watch_timeout_seconds=60)
        seen: list[tuple[str, str, str]] = []
        inf.add_handler(lambda t, o, n: seen.append(
            (t, (n or o)["metadata"]["name"], ((n or o).get("data") or {}).get("v", ""))))
        task = asyncio.create_task(inf.run())
        await asyncio.wait_for(inf.synced.wait(), 30)
        task.cancel()  # the watch is off the air from here on
        await asyncio.gather(task, return_exceptions=True)
        seen.clear()
        # Writers store their responses (what the job reconciler / SchedulerLoop do).
        inf.store.put(await client.create(CM, _cm("created", ns)))
        inf.store.put(await client.patch(CM, "changed", {"data": {"v": "2"}}, ns))
        await client.delete(CM, "removed", ns)
        inf.store.remove(f"{ns}/removed")
        await inf.relist()  # what the informer does after 410 Gone
        assert sorted(seen) == [("ADDED", "created", "1"), ("DELETED", "removed", "1"),
                                ("MODIFIED", "changed", "2")]
        seen.clear()
        await inf.relist()  # nothing changed since: nothing to announce
        assert seen == []
    finally:
        await client.close()
        rlab.kubectl("delete", "namespace", ns, "--wait=false")


async def test_informer_survives_the_apiserver_being_down(rlab: LabHandle) -> None:
    """Connection refused while kube-apiserver is down: back off, then carry on."""
    ns = namespace(rlab, "inf")
    client = await _client(rlab)
    try:
        inf = Informer(client, CM, namespace=ns, watch_timeout_seconds=60)
        task = asyncio.create_task(inf.run())
        await asyncio.wait_for(inf.synced.wait(), 30)
        await asyncio.get_running_loop().run_in_executor(None, restart_apiserver, rlab, 4.0)
        await client.create(CM, _cm("back", ns))
        await async_wait(lambda: inf.store.get(f"{ns}/back"), 60, "event after the outage")
        assert inf.errors >= 1 or inf.relists >= 1
        task.cancel()
    finally:
        await client.close()
        rlab.kubectl("delete", "namespace", ns, "--wait=false")


async def test_crd_kinds_and_typed_errors(rlab: LabHandle) -> None:
    client = await _client(rlab)
    name = unique("rf")
    try:
        inf = Informer(client, RESOURCE_FLAVORS)
        task = asyncio.create_task(inf.run())
        await asyncio.wait_for(inf.synced.wait(), 30)
        body = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                "metadata": {"name": name}, "spec": {"nodeLabels": {"pool": "x"}}}
        created = await client.create(RESOURCE_FLAVORS, body)
        await async_wait(lambda: inf.store.get(name), 10, "the ResourceFlavor in the store")
        with pytest.raises(Conflict) as exc:
            await client.create(RESOURCE_FLAVORS, body)
        assert exc.value.already_exists
        stale = dict(created, spec={"nodeLabels": {"pool": "y"}})
        await client.replace(RESOURCE_FLAVORS, dict(created, spec={"nodeLabels": {"pool": "z"}}))
        with pytest.raises(Conflict) as exc:
            await client.replace(RESOURCE_FLAVORS, stale)  # old resourceVersion
        assert not exc.value.already_exists
        with pytest.raises(NotFound):
            await client.get(WORKLOADS, "nope", "default")
        task.cancel()
    finally:
        try:
            await client.delete(RESOURCE_FLAVORS, name)
        finally:
            await client.close()

"""breakmk23: pykueue stopping (SIGTERM, a test's ``stop``) while ``Manager._await_crds``
waits for the first list of an API that became served (an optional job kind's informer in
``_add_kind``, MultiKueue's two in ``_add_multikueue``): no informer task of it may outlive
``stop`` (it would poll a closed client for ever, and in one process a next Manager's
tests would see it)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.controllers import manager as manager_mod
from app.integrations import batchjob
from app.integrations.framework import Registry
from app.kube.client import MULTIKUEUE_CLUSTERS, MULTIKUEUE_CONFIGS
from tests.recording_client import OBJECTS
from tests.unit.test_crd_installed_later import LateCrdClient, OptionalSleeper
from tests.unit.test_job_framework import SLEEPER_OBJ, SLEEPERS, leading_manager
from tests.unit.test_multikueue_stores import NoMultiKueueCrdsClient, mk_manager, wait_until

HANGING = (SLEEPERS.plural, MULTIKUEUE_CLUSTERS.plural, MULTIKUEUE_CONFIGS.plural)


class HangingLists:
    """Mixin: once ``installed``, a list of sleepers or of a MultiKueue kind never answers
    (the API server slow); ``hanging`` counts the lists waiting."""

    hanging = 0

    async def list(self, res: Any, namespace: str | None = None, **kw: Any):
        if res.plural in HANGING and self.installed:  # type: ignore[attr-defined]
            self.hanging += 1
            await asyncio.Event().wait()
        return await super().list(res, namespace, **kw)  # type: ignore[misc]


class HangingSleepersClient(HangingLists, LateCrdClient):
    pass


class HangingMultiKueueClient(HangingLists, NoMultiKueueCrdsClient):
    pass


async def informer_tasks_after_stop(m: Any, client: Any, lists: int,
                                    *names: str) -> list[asyncio.Task[Any]]:
    """Start ``m``, install the CRDs once ready, stop it once ``lists`` lists hang; the
    informer tasks named ``informer-<name>`` still running then."""
    await m.start()
    try:
        await m.wait_ready(10)
        client.installed = True
        assert await wait_until(lambda: client.hanging >= lists), client.asks
    finally:
        await m.stop()
    await asyncio.sleep(0)  # a cancelled task ends at its next step
    return [t for t in asyncio.all_tasks()
            if t.get_name() in {f"informer-{n}" for n in names} and not t.done()]


async def test_stopping_while_an_optional_kind_is_listed_leaves_no_informer_running(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manager_mod, "CRD_POLL_SECONDS", 0.05)
    client = HangingSleepersClient({**OBJECTS, SLEEPERS.plural: [SLEEPER_OBJ]})
    m = leading_manager(monkeypatch, client, Registry([batchjob.KIND, OptionalSleeper()]))
    assert await informer_tasks_after_stop(m, client, 1, "sleeper") == []
    assert not m.dead_tasks


async def test_stopping_while_multikueue_is_added_leaves_no_informer_running(
        monkeypatch: pytest.MonkeyPatch) -> None:
    client = HangingMultiKueueClient()
    m = mk_manager(monkeypatch, client)
    assert await informer_tasks_after_stop(m, client, 2, "mkc", "mkcfg") == []
    assert m.multikueue is None and not m.dead_tasks

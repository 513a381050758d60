"""small24: a MultiKueue AdmissionCheck while MultiKueue is off (its CRDs not served,
``Manager`` ``OptionalApi``) had no condition: the reason was in pykueue's log only, and a
check left ``Active`` True by an earlier run (MultiKueue on then) stayed True. ``MultiKueueOff``
writes its ``Active`` condition False, reason ``BadConfig`` (Kueue v0.17.1's for a config it
cannot load), saying MultiKueue is off; once the CRDs are served it is stopped before the
MultiKueue controller starts, which alone writes that condition from then on."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import pytest

from app.controllers.multikueue import MultiKueueOff
from app.core.multikueue import NOT_SERVED, check_active_while_off
from app.kube.client import ADMISSION_CHECKS
from app.kube.context import AC
from app.kube.informers import Store
from tests.unit.test_multikueue_stores import (
    CHECK,
    NoMultiKueueCrdsClient,
    ready_manager,
    wait_until,
)

STALE = {"conditions": [{"type": "Active", "status": "True", "reason": "Active",
                         "message": "The admission check is active",
                         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}


def check_writes(client: Any) -> list[tuple[str, str, str]]:
    """(status, reason, message) of the Active condition of every AdmissionCheck written."""
    out = []
    for verb, plural, body in client.bodies:
        if (verb, plural) == ("replace", "admissionchecks"):
            c = next(c for c in body["status"]["conditions"] if c["type"] == "Active")
            out.append((c["status"], c["reason"], c["message"]))
    return out


OFF = ("False", "BadConfig", f"Cannot load the AdmissionChecks parameters: {NOT_SERVED}")


@pytest.mark.parametrize("params,problem", [
    pytest.param(CHECK["spec"]["parameters"], NOT_SERVED, id="a config named: not served"),
    pytest.param({"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig",
                  "name": "cfg"},
                 'wrong kind "ProvisioningRequestConfig", expecting "MultiKueueConfig": bad '
                 "parameters reference", id="parameters naming no MultiKueueConfig: that"),
    pytest.param(None, "missing parameters reference", id="no parameters: that"),
])
def test_the_verdict_while_off_is_badconfig_saying_why(params: Any, problem: str) -> None:
    v = check_active_while_off(params)
    assert (v.active, v.reason, v.message) == (
        False, "BadConfig", f"Cannot load the AdmissionChecks parameters: {problem}")
    assert "MultiKueue is off" in NOT_SERVED


async def test_while_multikueue_is_off_its_check_says_so_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the change no AdmissionCheck was written while MultiKueue was off."""
    client = NoMultiKueueCrdsClient()
    async with ready_manager(monkeypatch, client) as m:
        assert await wait_until(lambda: check_writes(client)), client.writes
        # Three more discovery polls: the store holds the write, nothing written again.
        asks = client.asks
        assert await wait_until(lambda: client.asks >= asks + 3), client.asks
        assert check_writes(client) == [OFF]
        assert m.multikueue is None and m.multikueue_off is not None
        stored = m.ctx.store(AC).get("mk")
        assert [c["status"] for c in stored["status"]["conditions"]] == ["False"]


async def test_a_check_left_active_by_an_earlier_run_is_corrected(
        monkeypatch: pytest.MonkeyPatch) -> None:
    client = NoMultiKueueCrdsClient()
    client.objects[ADMISSION_CHECKS.plural][0]["status"] = copy.deepcopy(STALE)
    async with ready_manager(monkeypatch, client):
        assert await wait_until(lambda: check_writes(client)), client.writes
        assert check_writes(client) == [OFF]


async def test_once_multikueue_is_on_its_controller_alone_writes_the_check(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The off writer is stopped before the controller starts: the check changing later
    (here: the controller's write coming back through the watch, and a stale True) is not
    written by it again (two writers would flap: each rewriting the other's condition)."""
    client = NoMultiKueueCrdsClient()
    async with ready_manager(monkeypatch, client) as m:
        assert await wait_until(lambda: check_writes(client)), client.writes
        off = m.multikueue_off
        assert off is not None
        client.installed = True
        assert await wait_until(lambda: len(check_writes(client)) == 2), client.writes
        assert check_writes(client)[1] == (
            "False", "BadConfig",
            'Cannot load the AdmissionChecks parameters: multikueueconfigs.kueue.x-k8s.io '
            '"cfg" not found')
        assert m.multikueue is not None and m.multikueue_off is None
        assert off.retired and all(t.done() for t in off.tasks)
        stale = {**copy.deepcopy(m.ctx.store(AC).get("mk")), "status": copy.deepcopy(STALE)}
        for handler in m.ctx.informers[AC].handlers:
            handler("MODIFIED", m.ctx.store(AC).get("mk"), stale)
        m.ctx.store(AC).put(stale)
        assert await off.reconcile("mk") is None
        # The controller's next pass corrects the stale True; nothing else writes.
        assert await wait_until(lambda: len(check_writes(client)) == 3), client.writes
        assert check_writes(client)[2] == check_writes(client)[1]
        assert not m.dead_tasks


class Ctx(SimpleNamespace):
    """A Context with one AdmissionCheck store; writes recorded; ``leading`` says whether
    it may write."""

    def __init__(self, *checks: dict[str, Any]) -> None:
        store = Store(ADMISSION_CHECKS)
        for c in checks:
            store.put(copy.deepcopy(c))
        super().__init__(client=self, leading=False, written=[], clock=lambda: 1e9,
                         stores={AC: store})

    @property
    def may_write(self) -> bool:
        return bool(self.leading)

    def store(self, key: str) -> Store:
        return self.stores[key]

    async def replace(self, res: Any, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.written.append(body["metadata"]["name"])
        return {**body, "metadata": {**body["metadata"], "resourceVersion": "9"}}


async def test_only_the_leader_writes_and_other_checks_are_left_alone() -> None:
    other = {"metadata": {"name": "prov", "resourceVersion": "1"},
             "spec": {"controllerName": "kueue.x-k8s.io/provisioning-request"}}
    ctx = Ctx({**CHECK, "status": copy.deepcopy(STALE)}, other)
    off = MultiKueueOff(ctx)  # type: ignore[arg-type]
    off.start()
    try:
        off.enqueue_all()  # a follower: dropped (enqueued again when it leads)
        assert await wait_until(lambda: len(off.queue) == 0)
        assert ctx.written == []
        ctx.leading = True
        off.enqueue_all()
        assert await wait_until(lambda: ctx.written == ["mk"]), ctx.written
        off.on_check("MODIFIED", None, other)
        assert await wait_until(lambda: len(off.queue) == 0)
        assert ctx.written == ["mk"]
        assert [c["status"] for c in ctx.store(AC).get("mk")["status"]["conditions"]] \
            == ["False"]
    finally:
        await off.stop()

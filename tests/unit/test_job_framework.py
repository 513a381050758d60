"""The job framework's seam (issue 17): a kind is one object registered in a ``Registry``; the
generic reconciler then creates its Workload with no other change. Proved with a test-only
kind, ``Sleeper`` (``example.com/v1``), registered here."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from app.config import LeaderElectionSettings, Settings
from app.controllers.manager import Manager
from app.core.workload import Workload
from app.integrations import BUILTIN_KINDS, default_registry
from app.integrations.framework import (
    KindDefaults,
    Registry,
    missing_defaults,
    missing_members,
    optional_members,
    required_members,
)
from app.kube.client import Resource
from app.kube.leader import LeaderElector
from app.wire.podtemplate import pod_set_from_template
from app.wire.workload import workload_from_object
from tests.recording_client import OBJECTS, RecordingClient

SLEEPERS = Resource("example.com", "v1", "sleepers", "Sleeper")


class Sleeper(KindDefaults):
    """``spec.pods`` pods of ``spec.template``; ``spec.suspend`` is the lever."""

    key = "sleeper"
    resource = SLEEPERS
    api_group = "example.com"
    kind = "Sleeper"
    label_selector = "kueue.x-k8s.io/queue-name"

    def queue_name(self, obj: Mapping[str, Any]) -> str:
        return obj["metadata"].get("labels", {}).get("kueue.x-k8s.io/queue-name", "")

    def workload_name(self, obj: Mapping[str, Any]) -> str:
        return f"sleeper-{obj['metadata']['name']}"

    def desired(self, obj: Mapping[str, Any], **_: Any) -> Workload:
        meta = obj["metadata"]
        ps = pod_set_from_template("main", obj["spec"]["pods"], obj["spec"]["template"],
                                   field="spec.template")
        return Workload(meta["namespace"], self.workload_name(obj), self.queue_name(obj), (ps,))

    def workload_object(self, obj: Mapping[str, Any], **_: Any) -> dict[str, Any]:
        meta = obj["metadata"]
        return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                "metadata": {"name": self.workload_name(obj), "namespace": meta["namespace"],
                             "ownerReferences": [{"apiVersion": "example.com/v1",
                                                  "kind": "Sleeper", "name": meta["name"],
                                                  "uid": meta["uid"], "controller": True}]},
                "spec": {"queueName": self.queue_name(obj), "podSets": [
                    {"name": "main", "count": obj["spec"]["pods"],
                     "template": obj["spec"]["template"]}]}}

    def is_suspended(self, obj: Mapping[str, Any]) -> bool:
        return bool(obj["spec"].get("suspend"))

    def is_started(self, obj: Mapping[str, Any]) -> bool:
        return False

    def finished(self, obj: Mapping[str, Any]) -> tuple[bool, str, str]:
        return False, "", ""

    def active_pods(self, obj: Mapping[str, Any]) -> int:
        return 0

    def pods_ready(self, obj: Mapping[str, Any]) -> bool:
        return not obj["spec"].get("suspend")

    async def start(self, ctx: Any, obj: dict[str, Any], workload: Mapping[str, Any]) -> bool:
        await ctx.client.replace(SLEEPERS, {**obj, "spec": {**obj["spec"], "suspend": False}})
        return True

    async def stop(self, ctx: Any, obj: dict[str, Any], why: str) -> dict[str, Any]:
        return await ctx.client.replace(SLEEPERS, {**obj, "spec": {**obj["spec"],
                                                                   "suspend": True}})


SLEEPER_OBJ = {"apiVersion": "example.com/v1", "kind": "Sleeper", "metadata": {
    "name": "nap", "namespace": "research", "uid": "s1", "resourceVersion": "1",
    "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
    "spec": {"suspend": True, "pods": 3, "template": {"spec": {"containers": [
        {"name": "c", "resources": {"requests": {"cpu": "500m"}}}]}}}}


def test_a_kind_registers_once() -> None:
    reg = Registry([*BUILTIN_KINDS, Sleeper()])
    assert [k.key for k in reg.kinds()] == ["job", "qpod", "podgroup", "jobset", "pytorchjob",
                                            "tfjob", "xgboostjob", "paddlejob", "jaxjob",
                                            "mpijob", "rayjob", "raycluster", "rayservice",
                                            "trainjob", "appwrapper", "sparkapplication",
                                            "sleeper"]
    with pytest.raises(ValueError, match="registered twice"):
        reg.register(Sleeper())
    wl = Sleeper().workload_object(SLEEPER_OBJ)
    owner = reg.owner_of(wl)
    assert owner is not None and (owner.kind.key, owner.key, owner.uid) == (
        "sleeper", "research/nap", "s1")
    assert default_registry().owner_of(wl) is None  # not a built-in kind


def test_every_builtin_kind_defines_every_jobkind_member_itself() -> None:
    """No member of ``JobKind`` has a default: a kind that forgot ``pods_ready`` used to count
    as always ready (never timed out by waitForPodsReady)."""
    assert {"pods_ready", "finished", "active_pods", "start", "stop"} <= required_members()
    for kind in BUILTIN_KINDS:
        assert missing_members(kind) == [], kind.key
        assert callable(kind.pods_ready), kind.key


def test_a_kind_without_pods_ready_is_refused() -> None:
    class Forgetful(Sleeper):
        pods_ready = None  # type: ignore[assignment]

    class Bare:
        key, resource, api_group, kind, label_selector = "bare", None, "example.org", "Bare", None

    with pytest.raises(TypeError, match=r"job kind 'sleeper' does not define pods_ready"):
        Registry([Forgetful()])
    with pytest.raises(TypeError, match=r"'bare' does not define active_pods, desired, "
                                        r"finished, is_started"):
        Registry([Bare()])  # type: ignore[list-item]


def test_optional_members_have_their_defaults_in_one_place() -> None:
    """Every optional member is declared with its default on ``KindDefaults`` and none is a
    required one; every built-in kind has them all, and a kind not built on
    ``KindDefaults`` is refused at registration even when it defines every required
    member."""
    assert not required_members() & optional_members()
    assert {"source", "pod_labels", "child_jobs", "top_level", "trim", "rules"} \
        <= optional_members()
    for kind in BUILTIN_KINDS:
        assert missing_defaults(kind) == [], kind.key

    class DuckSleeper:  # every JobKind member, no KindDefaults
        pass

    for name in required_members():
        setattr(DuckSleeper, name, getattr(Sleeper, name))
    assert missing_members(DuckSleeper()) == []
    with pytest.raises(TypeError, match=r"job kind 'sleeper' lacks .*child_jobs, .*KindDefaults"):
        Registry([DuckSleeper()])  # type: ignore[list-item]
    sleeper = Sleeper()
    assert (sleeper.source, sleeper.pod_labels, sleeper.child_jobs({}), sleeper.top_level) \
        == ("sleeper", ("", ""), {}, False)


def leading_manager(monkeypatch: pytest.MonkeyPatch, client: RecordingClient,
                    registry: Registry) -> Manager:
    """A Manager on ``client`` with ``registry`` that leads at once (election always won)."""
    async def lead(self: LeaderElector) -> None:
        self._set(True)
        await asyncio.Event().wait()

    monkeypatch.setattr(LeaderElector, "run", lead)
    settings = Settings(leader_election=LeaderElectionSettings(enabled=True))
    return Manager(settings, client=client, watch_nodes=False,  # type: ignore[arg-type]
                   registry=registry)


async def created_workloads(client: RecordingClient, name: str,
                            seconds: float = 5.0) -> list[dict[str, Any]]:
    """The Workloads named ``name`` the client was asked to create, waiting up to
    ``seconds`` for the first."""
    for _ in range(int(seconds / 0.05)):
        created = [b for v, r, b in client.bodies if (v, r) == ("create", "workloads")
                   and b["metadata"]["name"] == name]
        if created:
            return created
        await asyncio.sleep(0.05)
    return []


async def test_a_registered_kind_gets_its_workload_from_the_generic_reconciler(
        monkeypatch: pytest.MonkeyPatch) -> None:
    client = RecordingClient({**OBJECTS, "sleepers": [SLEEPER_OBJ]})
    m = leading_manager(monkeypatch, client, Registry([*BUILTIN_KINDS, Sleeper()]))
    await m.start()
    try:
        await m.wait_ready(10)
        created = await created_workloads(client, "sleeper-nap")
    finally:
        await m.stop()
    assert created, client.writes
    wl = workload_from_object(created[0])
    assert (wl.queue_name, wl.pod_sets[0].count, dict(wl.pod_sets[0].requests)) == (
        "lq", 3, {"cpu": 500})

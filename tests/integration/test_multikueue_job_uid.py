"""MultiKueue's clear of a manager job's mirrored pod counts (``_clear_running``) against the
real API server: the JSON Patch it sends (a ``test`` of ``/metadata/uid``, then ``remove``
operations on ``status``) clears the counts of the job its Workload belongs to, and the API
server refuses it (422, nothing written) on a job deleted and created again under the same
name, which the controller takes as "not ours"."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from app.config import Settings
from app.controllers.multikueue import JobRef, MultiKueueController
from app.core.multikueue import BATCH_JOB
from app.kube.client import JOBS, KubeClient
from app.kube.errors import ApiError
from tests.integration.reconciler_support import (
    namespace,
    rlab_fixture,  # noqa: F401 - fixture
    settings_for,
)
from tests.labfixture import LabHandle

pytestmark = pytest.mark.lab

MIRRORED = {"active": 1, "ready": 1}


def _job(ns: str) -> dict:
    """The manager's Job ``j``, left to MultiKueue (its Job controller writes no status)."""
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": ns},
            "spec": {"suspend": True, "managedBy": "kueue.x-k8s.io/multikueue",
                     "template": {"spec": {"restartPolicy": "Never", "containers": [
                         {"name": "c", "image": "busybox"}]}}}}


async def test_only_the_workloads_own_job_has_its_mirrored_counts_cleared(
        rlab: LabHandle) -> None:
    ns = namespace(rlab, "mkuid")
    client = await KubeClient.from_settings(
        settings_for(rlab).client.model_copy(update={"kubeconfig": rlab.kubeconfig}))
    try:
        ctx = SimpleNamespace(settings=Settings(controllers_enabled=False), client=client,
                              informers=SimpleNamespace(informers={}))
        mk = MultiKueueController(ctx)  # type: ignore[arg-type]
        earlier = await client.create(JOBS, _job(ns))
        await client.delete(JOBS, "j", ns)
        for _ in range(100):  # no finalizer: gone at once, but the delete returns first
            if not [j for j in (await client.list(JOBS, ns))[0]]:
                break
            await asyncio.sleep(0.1)
        job = await client.create(JOBS, _job(ns))
        await client.patch(JOBS, "j", {"status": MIRRORED}, ns, subresource="status")
        refused: list[ApiError] = []
        patch = client.patch

        async def recorded(*args: Any, **kw: Any) -> Any:
            try:
                return await patch(*args, **kw)
            except ApiError as exc:
                refused.append(exc)
                raise
        client.patch = recorded  # type: ignore[method-assign]
        # The earlier Job's Workload: the counts stay, and the request the read of a stale
        # copy would send is refused by the API server (uid test), and swallowed.
        await mk._clear_running(ns, JobRef(BATCH_JOB, "j", earlier["metadata"]["uid"]))
        assert refused == []
        mk._stored = lambda adapter, ns_, name: {**earlier, "status": MIRRORED}
        await mk._clear_running(ns, JobRef(BATCH_JOB, "j", earlier["metadata"]["uid"]))
        assert [e.status for e in refused] == [422]
        got = await client.get(JOBS, "j", ns)
        assert {k: got["status"].get(k) for k in MIRRORED} == MIRRORED
        del mk._stored
        # Its own Workload: cleared.
        await mk._clear_running(ns, JobRef(BATCH_JOB, "j", job["metadata"]["uid"]))
        got = await client.get(JOBS, "j", ns)
        assert not got["status"].get("active") and not got["status"].get("ready")
    finally:
        await client.close()
        rlab.kubectl("delete", "namespace", ns, "--wait=false")

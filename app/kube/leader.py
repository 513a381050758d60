"""Lease leader election (coordination.k8s.io/v1 Lease) with kubernetes-asyncio.

Every replica watches and serves; only the leader writes decisions (Kueue runs its scheduler
and controllers leader-elected the same way). ``LeaderElector.is_leader`` is the gate every
writer checks; ``leading`` (an ``asyncio.Event``) wakes writers when leadership is gained and
``on_change`` callbacks run on every transition.

Timing (``LeaderElectionSettings``): a leader that cannot renew within ``renew_deadline``
steps down; a follower takes over once the lease has not been renewed for ``lease_duration``
(so ``renew_deadline < lease_duration`` keeps two leaders from overlapping). With leader
election disabled the process is leader from the start.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import socket
import uuid

from kubernetes_asyncio.leaderelection import electionconfig, leaderelection
from kubernetes_asyncio.leaderelection.resourcelock.leaselock import LeaseLock

from app.config import LeaderElectionSettings
from app.kube.client import LEASES, NAMESPACES, KubeClient, RateLimitedApiClient
from app.kube.errors import Conflict, from_exception

log = logging.getLogger(__name__)


def default_identity() -> str:
    """``<hostname>_<pid>_<random>``: unique per process (the pod name in-cluster)."""
    host = os.environ.get("POD_NAME") or socket.gethostname()
    return f"{host}_{os.getpid()}_{uuid.uuid4().hex[:6]}"


class LeaderElector:
    """Runs the election loop until cancelled; ``is_leader`` tells whether to write.

    ``client``: the process's ``KubeClient``. The Lease lock does not use its shared,
    rate-limited ApiClient but a companion with its own token bucket and connection pool
    (``KubeClient.companion``, 5 requests/s, burst 10: a campaign makes about one request per
    retry period), so a renewal never waits behind the controllers' or anyone's requests: a
    queue there would cost the leadership. Each request times out after the
    renew deadline at most.
    """

    def __init__(self, client: KubeClient, settings: LeaderElectionSettings,
                 identity: str | None = None) -> None:
        self.client = client
        self.settings = settings
        self.identity = identity or default_identity()
        self.leading = asyncio.Event()
        self.transitions = 0
        if not settings.enabled:
            self.leading.set()

    @property
    def is_leader(self) -> bool:
        return self.leading.is_set()

    def _set(self, leader: bool) -> None:
        if leader == self.is_leader:
            return
        if leader:
            self.leading.set()
        else:
            self.leading.clear()
        self.transitions += 1
        log.info("leader election: %s %s leadership", self.identity,
                 "acquired" if leader else "lost")

    async def _ensure_namespace(self) -> None:
        try:
            await self.client.create(NAMESPACES,
                                     {"apiVersion": "v1", "kind": "Namespace",
                                      "metadata": {"name": self.settings.namespace}})
        except Conflict:
            pass
        except Exception as exc:  # noqa: BLE001 - no rights to create: the namespace may exist
            log.debug("leader election: could not create namespace: %s", from_exception(exc))

    async def run(self) -> None:
        """Campaign forever (cancel to stop). Does nothing when election is disabled."""
        if not self.settings.enabled:
            return
        await self._ensure_namespace()
        s = self.settings
        api: RateLimitedApiClient = self.client.companion(
            5.0, 10, timeout=min(s.renew_deadline_seconds,
                                 self.client.settings.request_timeout_seconds))

        async def started() -> None:
            self._set(True)

        async def stopped() -> None:
            self._set(False)

        try:
            while True:
                lock = LeaseLock(s.lease_name, s.namespace, self.identity, api)
                cfg = electionconfig.Config(
                    # Whole seconds: the Lease's leaseDurationSeconds is an int32 and LeaseLock
                    # parses str(lease_duration) with int(), so 15.0 would fail every attempt.
                    lock=lock, lease_duration=math.ceil(s.lease_duration_seconds),
                    renew_deadline=s.renew_deadline_seconds, retry_period=s.retry_period_seconds,
                    onstarted_leading=started, onstopped_leading=stopped,
                )
                try:
                    await leaderelection.LeaderElection(cfg).run()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - e.g. the API server unreachable
                    log.warning("leader election: %s", from_exception(exc))
                self._set(False)
                await asyncio.sleep(s.retry_period_seconds)
        finally:
            self._set(False)
            await api.close()

    async def release(self) -> None:
        """Give the lease up on shutdown so a follower takes over at once (best effort).

        Call after the ``run`` task is cancelled; only a lease this process holds is touched."""
        if not self.settings.enabled:
            return
        self._set(False)
        try:
            lease = await self.client.get(LEASES, self.settings.lease_name, self.settings.namespace)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") == self.identity:
                spec["holderIdentity"] = ""
                spec["leaseDurationSeconds"] = 1
                lease["spec"] = spec
                await self.client.replace(LEASES, lease)
        except Exception as exc:  # noqa: BLE001
            log.info("leader election: release failed: %s", from_exception(exc))

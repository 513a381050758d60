"""DRA verdicts on pending Workloads (docs/dra.md): whether the devices their pods claim
through ResourceClaimTemplates can be counted in quota (Kueue v1beta2 DRA support; Kueue's
Workload controller while a Workload is pending).

A Workload whose claims cannot be counted (``app.wire.dra.DraInadmissible``) is kept out of
the core and gets QuotaReserved=False and Requeued=False, reason ``Inadmissible``, the
message naming the claim, plus a Warning Event on its owner; once its claims can be counted
again it gets Requeued=True, reason ``DRAResourcesResolved`` (Kueue #15888). Verdicts reached
while this replica does not lead are written once it does (``flush``).

Input: ``inadmissible`` / ``countable`` from the informer feed, keys ``namespace/name``.
Output: ``workloads/status`` updates; a 409 or 404 is left to the next watch event.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.controllers.decision_writer import OwnerNotifier
from app.controllers.write_tasks import WorkloadWrites
from app.core.types import WorkloadKey
from app.kube.client import WORKLOADS
from app.kube.context import WL, Context
from app.kube.errors import Conflict, NotFound
from app.kube.events import WARNING
from app.wire.dra import INADMISSIBLE
from app.wire.workload_status import (
    REQUEUED,
    condition,
    has_admission,
    is_finished,
    with_inadmissible,
    with_requeued,
)


def dra_blocked(obj: Mapping[str, Any]) -> bool:
    """Requeued=False with reason Inadmissible: set by ``DraVerdicts``, cleared when the
    Workload's claims can be counted."""
    c = condition(obj, REQUEUED)
    return bool(c) and c.get("status") == "False" and c.get("reason") == INADMISSIBLE


class DraVerdicts:
    """The DRA verdicts to write (module doc). ``inadmissible``: pending Workloads whose
    claims cannot be counted (key -> message), kept out of the core."""

    def __init__(self, ctx: Context, jobs: OwnerNotifier, writes: WorkloadWrites) -> None:
        self.ctx = ctx
        self.jobs = jobs
        self.writes = writes
        self.inadmissible: dict[WorkloadKey, str] = {}
        self._unwritten: set[WorkloadKey] = set()

    def refuse(self, key: WorkloadKey, message: str) -> None:
        """``key``'s claims cannot be counted (``message`` names the claim)."""
        self.inadmissible[key] = message
        self._verdict(key)

    def countable(self, key: WorkloadKey, obj: Mapping[str, Any]) -> None:
        """``key``'s claims can be counted: lift a verdict written or pending."""
        if self.inadmissible.pop(key, None) is not None or dra_blocked(obj):
            self._verdict(key)

    def flush(self) -> None:
        """Write the verdicts reached while this replica did not lead."""
        while self._unwritten:
            self.writes.spawn(self._write(self._unwritten.pop()))

    def _verdict(self, key: WorkloadKey) -> None:
        """Write ``key``'s DRA verdict now, or once this replica leads (``flush``)."""
        if self.ctx.may_write:
            self.writes.spawn(self._write(key))
        else:
            self._unwritten.add(key)

    async def _write(self, key: WorkloadKey) -> None:
        """Write the DRA verdict of pending Workload ``key``: Inadmissible (QuotaReserved and
        Requeued False) with the message, plus a Warning Event on its owner; or, once its
        claims can be counted again, Requeued=True (``DRAResourcesResolved``)."""
        ctx = self.ctx
        writes = self.writes
        try:
            async with writes.limit, writes.lock(key):
                obj = ctx.store(WL).get(key)
                if obj is None or is_finished(obj) or not ctx.may_write:
                    return
                message = self.inadmissible.get(key)
                if message is not None and not has_admission(obj):
                    body, changed = with_inadmissible(obj, INADMISSIBLE, message, ctx.clock())
                elif message is None and dra_blocked(obj):  # (also once admitted meanwhile)
                    body, changed = with_requeued(obj, "DRAResourcesResolved",
                                                  "The DRA resource claims can be counted",
                                                  ctx.clock())
                else:
                    return
                if not changed:
                    return
                try:
                    out = await ctx.client.replace(WORKLOADS, body, subresource="status")
                except (Conflict, NotFound):
                    return  # the watch brings the new version, which is judged again
                ctx.store(WL).put(out)
                if message is not None:
                    ctx.recorder.emit(self.jobs.owner_object(obj) or obj, WARNING, INADMISSIBLE,
                                      message)
                ctx.wake()
        finally:
            writes.release(key)

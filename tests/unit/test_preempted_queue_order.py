"""``scheduling.preempted_queue_order``: where a Workload evicted by preemption goes in its
queue once pending again, as the informer feed hands it to the core
(``InformerFeed._ordered_by_creation``: an evicted_at of None orders it by creation time,
``Workload.queue_order_time``). Kueue v0.17.1 ``GetQueueOrderTimestamp``: a PodsReady
timeout follows ``waitForPodsReady.requeuingStrategy.timestamp``, an admission check's
eviction always orders by eviction time, any other by creation time (pykueue's default:
eviction time, acceptance KQ-18)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from app.config import Settings
from app.controllers.informer_feed import InformerFeed


def _by_creation(reason: str | None, **scheduling: object) -> bool:
    settings = Settings(controllers_enabled=False, scheduling=scheduling,
                        wait_for_pods_ready={"requeuing_strategy": {"timestamp": "Creation"}})
    feed = SimpleNamespace(ctx=SimpleNamespace(settings=settings))
    return InformerFeed._ordered_by_creation(feed, reason)  # type: ignore[arg-type]


@pytest.mark.parametrize("reason", ["Preempted", "InCohortReclamation", "ClusterQueueStopped",
                                    None])
def test_a_preempted_workload_keeps_its_eviction_time_by_default(reason: str | None) -> None:
    assert _by_creation(reason) is False
    assert _by_creation(reason, preempted_queue_order="Creation") is True


def test_pods_ready_and_admission_check_evictions_follow_kueues_own_rules() -> None:
    for order in ("Eviction", "Creation"):
        assert _by_creation("PodsReadyTimeout", preempted_queue_order=order) is True
        assert _by_creation("AdmissionCheck", preempted_queue_order=order) is False


def test_an_unknown_order_is_refused_with_the_field_named() -> None:
    with pytest.raises(ValidationError, match="preempted_queue_order"):
        Settings(controllers_enabled=False, scheduling={"preempted_queue_order": "Priority"})

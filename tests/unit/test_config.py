"""Settings: leader-election timings that kubernetes-asyncio's election would reject are refused
at start-up with a message naming the field, instead of silently killing the election task."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.config import LeaderElectionSettings, Settings


def test_defaults_are_valid_for_the_election_library() -> None:
    s = LeaderElectionSettings()
    assert s.lease_duration_seconds > s.renew_deadline_seconds > 1.2 * s.retry_period_seconds


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"lease_duration_seconds": 10, "renew_deadline_seconds": 10}, "lease_duration_seconds"),
        ({"renew_deadline_seconds": 2, "retry_period_seconds": 2}, "renew_deadline_seconds"),
        ({"retry_period_seconds": 0.5}, "retry_period_seconds"),
        ({"lease_duration_seconds": 1}, "lease_duration_seconds"),
    ],
    ids=["lease-not-longer-than-renew", "renew-not-above-jitter", "retry-below-1s", "lease-1s"],
)
def test_bad_leader_election_timings_are_refused(kwargs: dict, field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        LeaderElectionSettings(**kwargs)


def test_settings_read_nested_groups_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYKUEUE_SERVER__PORT", "9555")
    monkeypatch.setenv("PYKUEUE_LEADER_ELECTION__LEASE_DURATION_SECONDS", "20")
    s = Settings()
    assert s.server.port == 9555
    assert s.leader_election.lease_duration_seconds == 20


def test_fair_sharing_is_off_by_default_and_enabled_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert Settings().fair_sharing.core() is None
    monkeypatch.setenv("PYKUEUE_FAIR_SHARING__ENABLE", "true")
    monkeypatch.setenv("PYKUEUE_FAIR_SHARING__PREEMPTION_STRATEGIES", '["LessThanInitialShare"]')
    core = Settings().fair_sharing.core()
    assert core is not None and [s.value for s in core.strategies] == ["LessThanInitialShare"]


def test_the_s2b_priority_guard_is_off_as_kueue_and_reaches_the_core_when_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYKUEUE_FAIR_SHARING__ENABLE", "true")
    core = Settings().fair_sharing.core()
    assert core is not None and not core.s2b_priority_guard  # Kueue v0.17.1's rule
    monkeypatch.setenv("PYKUEUE_FAIR_SHARING__S2B_PRIORITY_GUARD", "true")
    core = Settings().fair_sharing.core()
    assert core is not None and core.s2b_priority_guard
    from app.controllers.manager import Manager  # `pykueue serve`'s core

    fair = Manager(Settings()).cluster.fair_sharing
    assert fair is not None and fair.s2b_priority_guard


def test_the_s2b_priority_guard_is_refused_where_it_would_do_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYKUEUE_FAIR_SHARING__S2B_PRIORITY_GUARD", "true")
    with pytest.raises(ValidationError, match="needs fair_sharing.enable"):
        Settings()
    monkeypatch.setenv("PYKUEUE_FAIR_SHARING__ENABLE", "true")
    monkeypatch.setenv("PYKUEUE_FAIR_SHARING__PREEMPTION_STRATEGIES",
                       '["LessThanOrEqualToFinalShare"]')
    with pytest.raises(ValidationError, match="leaves out"):
        Settings()


@pytest.mark.parametrize("env", [{}, {"PYKUEUE_FAIR_SHARING__STICKY_PREEMPTOR_FIRST": "true"}])
def test_sticky_preemptor_first_is_off_as_kueue_and_reaches_the_core_when_set(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str],
) -> None:
    for k, v in {**env, "PYKUEUE_FAIR_SHARING__ENABLE": "true"}.items():
        monkeypatch.setenv(k, v)
    core = Settings().fair_sharing.core()
    # Off: Kueue v0.17.1's tournament (no precedence for a preemptor).
    assert core is not None and core.sticky_preemptor_first == bool(env)
    monkeypatch.delenv("PYKUEUE_FAIR_SHARING__ENABLE")
    if env:  # refused where it would do nothing
        with pytest.raises(ValidationError, match="needs fair_sharing.enable"):
            Settings()


def test_a_misspelled_fair_sharing_setting_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYKUEUE_FAIR_SHARING__S2B_PRIORITY_GAURD", "true")
    with pytest.raises(ValidationError, match="s2b_priority_gaurd"):
        Settings()


def test_admission_fair_sharing_is_off_by_default_and_read_as_kueues_configuration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert Settings().admission_fair_sharing.core() is None
    monkeypatch.setenv("PYKUEUE_ADMISSION_FAIR_SHARING__ENABLE", "true")
    monkeypatch.setenv("PYKUEUE_ADMISSION_FAIR_SHARING__USAGE_HALF_LIFE_TIME", "168h")
    monkeypatch.setenv("PYKUEUE_ADMISSION_FAIR_SHARING__RESOURCE_WEIGHTS",
                       '{"cpu": 2, "memory": 1}')
    core = Settings().admission_fair_sharing.core()
    assert core is not None
    assert (core.half_life_s, core.sampling_s) == (168 * 3600, 300)  # sampling: Kueue's 5m
    assert dict(core.resource_weights) == {"cpu": 2.0, "memory": 1.0}


@pytest.mark.parametrize(("env", "value", "match"), [
    ("USAGE_SAMPLING_INTERVAL", "0s", "usageSamplingInterval must be greater than 0"),
    ("USAGE_HALF_LIFE_TIME", "a week", "usage_half_life_time: not a duration"),
    ("RESOURCE_WEIGHTS", '{"cpu": -1}', "resourceWeights.cpu. must not be negative"),
])
def test_admission_fair_sharing_settings_follow_kueues_validation(
    monkeypatch: pytest.MonkeyPatch, env: str, value: str, match: str,
) -> None:
    monkeypatch.setenv(f"PYKUEUE_ADMISSION_FAIR_SHARING__{env}", value)
    with pytest.raises(ValidationError, match=match):
        Settings()


def test_fair_sharing_strategy_lists_are_kueues(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYKUEUE_FAIR_SHARING__PREEMPTION_STRATEGIES",
                       '["LessThanInitialShare", "LessThanOrEqualToFinalShare"]')
    with pytest.raises(ValidationError, match="preemption_strategies must be one of"):
        Settings()


def test_the_queue_label_is_kueues_and_an_old_setting_for_it_is_refused(monkeypatch) -> None:
    """Issue 17: the label was a setting the webhook honoured and the informers did not."""
    import pydantic

    from app.config import Settings

    monkeypatch.setenv("PYKUEUE_WEBHOOK__QUEUE_NAME_LABEL", "example.com/queue")
    with pytest.raises(pydantic.ValidationError, match="queue_name_label"):
        Settings()

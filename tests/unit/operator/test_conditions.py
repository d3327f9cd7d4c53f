from __future__ import annotations

import datetime as dt

from kubegang.operator._conditions import CondType, Phase, get_condition, is_true, set_condition, transition

T0 = dt.datetime(2025, 1, 1, 0, 0, 0, tzinfo=dt.UTC)
T1 = T0 + dt.timedelta(minutes=5)


def test_transition_time_moves_only_on_status_flip() -> None:
    conds = set_condition([], CondType.QUEUED, True, "QuotaExhausted", "first", now=T0)
    again = set_condition(conds, CondType.QUEUED, True, "QuotaExhausted", "second", now=T1)
    cond = get_condition(again, CondType.QUEUED)
    assert cond is not None
    assert cond["lastTransitionTime"] == "2025-01-01T00:00:00Z"
    assert cond["message"] == "second"
    flipped = get_condition(set_condition(again, CondType.QUEUED, False, "Admitted", "x", now=T1), CondType.QUEUED)
    assert flipped is not None and flipped["lastTransitionTime"] == "2025-01-01T00:05:00Z"


def test_set_condition_does_not_mutate_input_and_keeps_one_per_type() -> None:
    conds = set_condition([], CondType.QUEUED, True, "R", "m", now=T0)
    snapshot = [dict(c) for c in conds]
    out = set_condition(conds, CondType.QUEUED, False, "R2", "m2", now=T1)
    assert conds == snapshot
    assert [c["type"] for c in out] == ["Queued"]


def test_transition_clears_contradicting_conditions() -> None:
    status = {"conditions": set_condition([], CondType.QUEUED, True, "QuotaExhausted", "waiting", now=T0)}
    patch = transition(status, Phase.ADMITTED, "Admitted", "admitted to queue team-a", now=T1)
    assert patch["phase"] == "Admitted"
    assert is_true(patch["conditions"], CondType.ADMITTED)
    assert not is_true(patch["conditions"], CondType.QUEUED)
    running = transition(patch, Phase.RUNNING, "AllReplicasRunning", "2/2 running", now=T1)
    assert is_true(running["conditions"], CondType.RUNNING)
    assert is_true(running["conditions"], CondType.ADMITTED)

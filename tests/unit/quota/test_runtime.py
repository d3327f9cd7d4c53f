"""Run-time predictions from finished gangs, and the backfill bookkeeping of their tenants."""

from __future__ import annotations

import pytest

from kubegang.quota import Backfill, BackfillPolicy, RunClass, RunTimeHistory


def test_a_prediction_is_the_mean_of_the_last_runs_of_the_class_capped_by_its_limit() -> None:
    history = RunTimeHistory(depth=2)
    run = RunClass("team-a", 8, 3600.0)
    assert history.predict(run) is None  # no history: the caller keeps the limit
    history.observe(run, 100.0)
    assert history.predict(run) == 100.0
    history.observe(run, 300.0)
    history.observe(run, 500.0)  # the oldest (100) drops out
    assert history.predict(run) == 400.0
    assert history.predict(RunClass("team-a", 16, 3600.0)) is None  # another size is another class
    history.observe(RunClass("team-a", 8, 600.0), 5000.0)
    assert history.predict(RunClass("team-a", 8, 600.0)) == 600.0  # never past the limit


def test_bad_input_names_the_field() -> None:
    with pytest.raises(ValueError, match="depth"):
        RunTimeHistory(depth=0)
    with pytest.raises(ValueError, match="run time"):
        RunTimeHistory().observe(RunClass("q", 1, None), -1.0)


def test_a_tenant_may_use_only_reservations_it_leaves_by_its_prediction_and_is_overdue_after_it() -> None:
    backfill = Backfill(BackfillPolicy(predicted_tenants=True))
    backfill.reserve("holder", {"n1", "n2"}, starts_by=1000.0)
    # Its limit ends at 5000, after the holder's latest start: kept off; its prediction ends at 800.
    assert backfill.excluded_for("t", 5000.0) == {"n1", "n2"}
    assert backfill.lenders_to("t", 5000.0, 800.0) == ["holder"]
    assert backfill.lenders_to("t", 5000.0, 1200.0) == []  # predicted past the start: no
    assert backfill.lenders_to("t", 900.0, 800.0) == []  # its limit lets it in anyway: not a tenant
    assert backfill.lenders_to("t", 5000.0, None) == []  # no prediction
    backfill.lodge("t", ["holder"], 800.0)
    assert backfill.tenants("holder") == {"t": 800.0}
    assert backfill.overdue_tenants("holder", 799.0) == []
    assert backfill.overdue_tenants("holder", 800.0) == ["t"]
    backfill.forget("t")  # ended (or evicted, or admitted afresh): nobody's tenant
    assert backfill.tenants("holder") == {}
    backfill.lodge("t", ["holder"], 800.0)
    backfill.forget("holder")  # the holder started: its tenants are ordinary gangs now
    assert backfill.tenants("holder") == {}


def test_without_the_policy_nobody_is_a_tenant() -> None:
    backfill = Backfill(BackfillPolicy())
    backfill.reserve("holder", {"n1"}, starts_by=1000.0)
    assert backfill.lenders_to("t", 5000.0, 800.0) == []

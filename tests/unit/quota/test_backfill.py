"""Backfill past a blocked head, and the reservation that keeps it from starving (kubegang.quota.Backfill)."""

from __future__ import annotations

import math

import pytest

from kubegang.quota import (
    Backfill,
    BackfillPolicy,
    FlavorQuota,
    PendingJob,
    PendingQueues,
    QueueingStrategy,
    QueueSpec,
    QuotaTree,
)


def _queues() -> PendingQueues:
    tree = QuotaTree([QueueSpec("root"), QueueSpec("a", parent="root", quotas={"gpu": FlavorQuota(nominal=64)})])
    return PendingQueues(tree)


def test_a_head_that_steps_aside_lets_the_next_job_of_its_queue_be_considered_then_keeps_its_place() -> None:
    queues = _queues()
    queues.push(PendingJob("big", "a", {"gpu": 32}, created=1.0))
    queues.push(PendingJob("small", "a", {"gpu": 1}, created=2.0))
    queues.step_aside("big")
    assert [h.job_id for h in queues.heads()] == ["small"]
    assert "big" in queues and len(queues) == 2 and queues.pending("a") == 2
    assert queues.restore() == 1
    assert [h.job_id for h in queues.heads()] == ["big"]


def test_removing_a_job_that_stepped_aside_forgets_it() -> None:
    queues = _queues()
    queues.push(PendingJob("big", "a", {"gpu": 32}, created=1.0))
    queues.step_aside("big")
    assert queues.remove("big") is not None
    assert queues.restore() == 0 and len(queues) == 0 and queues.heads() == []


def test_only_a_waiting_job_can_step_aside() -> None:
    queues = _queues()
    with pytest.raises(ValueError, match="'ghost' is not a waiting job"):
        queues.step_aside("ghost")


def test_a_reservation_is_due_only_after_the_bound_and_only_one_at_a_time() -> None:
    backfill = Backfill(BackfillPolicy(reserve_after_seconds=100.0))
    backfill.blocked("big", 0.0)
    backfill.blocked("big", 50.0)  # the first time counts
    backfill.blocked("other", 10.0)
    assert not backfill.reservation_due("big", 99.0)
    assert backfill.reservation_due("big", 100.0)
    backfill.reserve("big", ["n1", "n2"])
    assert not backfill.reservation_due("other", 500.0)  # max_reservations = 1
    assert backfill.excluded_for("small") == {"n1", "n2"}
    assert backfill.excluded_for("big") == frozenset()
    with pytest.raises(ValueError, match="max_reservations is 1"):
        backfill.reserve("other", ["n3"])
    backfill.forget("big")
    assert backfill.excluded_for("small") == frozenset() and backfill.reservation_due("other", 500.0)


def test_reservation_holders_go_first_among_their_priority() -> None:
    # The admission cycle orders its heads with this (AdmissionCycle._holders_first; through the cycle:
    # tests/unit/admission/test_cycle.py). Heads come in admission order, priority first; within a
    # priority the others keep their (fair-share) order, and a holder does not pass a higher priority.
    backfill = Backfill(BackfillPolicy(max_reservations=2))
    heads = [PendingJob("hi", "a", priority=5), PendingJob("y", "c"), PendingJob("x", "a"),
             PendingJob("holder", "b"), PendingJob("low", "d", priority=-1), PendingJob("low-holder", "e", priority=-1)]
    backfill.reserve("holder", [])
    backfill.reserve("low-holder", [])
    assert [h.job_id for h in backfill.order(heads)] == ["hi", "holder", "y", "x", "low-holder", "low"]


def test_strict_fifo_and_no_bound_never_reserve() -> None:
    for policy in (BackfillPolicy(strategy=QueueingStrategy.STRICT_FIFO),
                   BackfillPolicy(reserve_after_seconds=None)):
        backfill = Backfill(policy)
        backfill.blocked("big", 0.0)
        assert not backfill.reservation_due("big", math.inf)
    assert not Backfill(BackfillPolicy(strategy=QueueingStrategy.STRICT_FIFO)).steps_aside


def test_the_strategy_may_be_given_by_its_api_name() -> None:
    assert BackfillPolicy(strategy="StrictFIFO").strategy is QueueingStrategy.STRICT_FIFO  # type: ignore[arg-type]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"strategy": "Fifo"}, "BackfillPolicy.strategy: 'Fifo' is not one of StrictFIFO, BestEffortFIFO"),
    ({"reserve_after_seconds": -1}, "BackfillPolicy.reserve_after_seconds: -1 must be"),
    ({"reserve_after_seconds": math.nan}, "BackfillPolicy.reserve_after_seconds: nan must be"),
    ({"max_reservations": -1}, "BackfillPolicy.max_reservations: -1 must be an integer >= 0"),
    ({"max_reservations": 1.5}, "BackfillPolicy.max_reservations: 1.5 must be an integer >= 0"),
    ({"planned_reserve_after_seconds": -5}, "BackfillPolicy.planned_reserve_after_seconds: -5 must be"),
])
def test_bad_settings_name_the_field_and_what_is_allowed(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        BackfillPolicy(**kwargs)  # type: ignore[arg-type]


def test_a_job_that_ends_before_a_reservation_starts_may_use_its_nodes_and_one_without_a_limit_may_not() -> None:
    backfill = Backfill(BackfillPolicy(reserve_after_seconds=None, planned_reserve_after_seconds=0.0))
    backfill.reserve("big", {"n1", "n2"}, starts_by=1000.0)
    assert backfill.excluded_for("quick", ends_by=900.0) == frozenset()
    assert backfill.excluded_for("edge", ends_by=1000.0) == frozenset()
    assert backfill.excluded_for("slow", ends_by=1000.5) == {"n1", "n2"}
    assert backfill.excluded_for("unlimited") == {"n1", "n2"}
    assert backfill.excluded_for("big") == frozenset()
    # Start unknown (a gang on its nodes has no limit): nobody may use them.
    backfill.forget("big")
    backfill.reserve("big", {"n1"})
    assert backfill.excluded_for("quick", ends_by=1.0) == {"n1"}


def test_a_planned_reservation_may_be_due_sooner_than_a_plain_one() -> None:
    backfill = Backfill(BackfillPolicy(reserve_after_seconds=3600.0, planned_reserve_after_seconds=60.0))
    backfill.blocked("big", 0.0)
    assert not backfill.could_plan_sooner("big", 59.0)
    assert backfill.could_plan_sooner("big", 60.0) and not backfill.reservation_due("big", 60.0)
    assert backfill.reservation_due("big", 3600.0) and not backfill.could_plan_sooner("big", 3600.0)
    # A queue's own threshold is one threshold for both.
    assert not backfill.could_plan_sooner("big", 60.0, after=600.0)

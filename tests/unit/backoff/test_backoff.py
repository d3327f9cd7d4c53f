"""The one backoff rule every watch uses: jittered, exponential, capped, reset by a success."""

from __future__ import annotations

import random
import statistics

import pytest

from kubegang.backoff import Backoff


def test_ceiling_doubles_per_failure_up_to_the_cap_and_a_success_resets_it() -> None:
    backoff = Backoff(initial_seconds=1.0, max_seconds=8.0, rng=random.Random(1))
    ceilings = []
    for _ in range(6):
        ceilings.append(backoff.ceiling())
        backoff.next_delay()
    assert ceilings == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    backoff.reset()
    assert backoff.ceiling() == 1.0


def test_every_delay_lies_between_the_floor_and_its_ceiling() -> None:
    backoff = Backoff(initial_seconds=0.5, max_seconds=30.0, floor_fraction=0.2, rng=random.Random(2))
    for _ in range(200):
        ceiling = backoff.ceiling()
        assert 0.1 <= backoff.next_delay() <= ceiling


def test_many_watchers_failing_together_come_back_spread_over_the_window() -> None:
    """5,000 agents lose the API server in the same second: their first reconnects must not coincide."""
    rng = random.Random(3)
    delays = [Backoff(initial_seconds=2.0, max_seconds=60.0, rng=rng).next_delay() for _ in range(5000)]
    in_busiest_tenth = max(sum(1 for d in delays if lo <= d < lo + 0.2) for lo in [i * 0.2 for i in range(10)])
    assert in_busiest_tenth < 0.15 * len(delays), "reconnects bunch up instead of spreading"
    assert 0.8 < statistics.mean(delays) < 1.3  # uniform over [0.2, 2.0]: mean 1.1
    fixed = Backoff(initial_seconds=2.0, max_seconds=60.0, factor=1.0, floor_fraction=1.0, rng=rng)
    assert {fixed.next_delay() for _ in range(10)} == {2.0}, "floor_fraction=1 is the unjittered extreme"


def test_huge_failure_counts_do_not_overflow() -> None:
    backoff = Backoff(initial_seconds=1.0, max_seconds=5.0, factor=10.0)
    backoff.failures = 10_000
    assert backoff.ceiling() == 5.0
    assert backoff.next_delay() <= 5.0


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"initial_seconds": 0}, "initial_seconds"),
    ({"initial_seconds": 2, "max_seconds": 1}, "max_seconds"),
    ({"factor": 0.5}, "factor"),
    ({"floor_fraction": 1.5}, "floor_fraction"),
])
def test_bad_parameters_name_the_field(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=rf"Backoff\.{field}"):
        Backoff(**kwargs)  # type: ignore[arg-type]

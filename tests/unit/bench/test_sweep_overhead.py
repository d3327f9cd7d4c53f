"""The sweep overhead (bench/_sweep_overhead.py): start latency plus idle gaps over trial GPU time."""

from __future__ import annotations

import math

import pytest

from bench._sweep_overhead import TrialTimes, overhead


def test_two_slots_count_start_latency_and_the_gap_before_each_follower() -> None:
    trials = [
        TrialTimes(submitted=0.0, running=0.5, finished=6.5),                   # first in slot A
        TrialTimes(submitted=0.0, running=1.0, finished=7.0),                   # first in slot B
        TrialTimes(submitted=6.7, running=7.0, finished=13.0, slot_freed=6.5),  # follows A: 0.2 idle
        TrialTimes(submitted=7.4, running=8.0, finished=14.0, slot_freed=7.0),  # follows B: 0.4 idle
    ]
    result = overhead(trials)
    assert result.trials == 4
    assert result.trial_gpu_seconds == pytest.approx(24.0)
    assert result.start_latency_gpu_seconds == pytest.approx(0.5 + 1.0 + 0.3 + 0.6)
    assert result.idle_gpu_seconds == pytest.approx(0.2 + 0.4)
    assert result.ratio == pytest.approx(3.0 / 24.0)
    assert result.lost_seconds_per_trial == pytest.approx(0.75)
    # Scaled-down run times: the same lost seconds against 5-minute trials.
    assert result.ratio_at_runtime(300.0) == pytest.approx(3.0 / 1200.0)


def test_gpus_weight_every_part() -> None:
    one = overhead([TrialTimes(0.0, 1.0, 11.0), TrialTimes(12.0, 13.0, 23.0, slot_freed=11.0)])
    two = overhead([TrialTimes(0.0, 1.0, 11.0, gpus=2), TrialTimes(12.0, 13.0, 23.0, slot_freed=11.0, gpus=2)])
    assert two.trial_gpu_seconds == 2 * one.trial_gpu_seconds == 40.0
    assert two.idle_gpu_seconds == 2 * one.idle_gpu_seconds == 2.0
    assert two.ratio == pytest.approx(one.ratio) == pytest.approx(3.0 / 20.0)
    assert two.ratio_at_runtime(10.0, gpus_per_trial=2) == pytest.approx(one.ratio_at_runtime(10.0))


def test_a_submission_stamped_a_moment_before_the_finish_it_follows_is_no_idle_time() -> None:
    # Two watch streams stamp the finish and the completion the driver reacts to; their order may swap.
    result = overhead([TrialTimes(0.0, 0.1, 5.0), TrialTimes(4.99, 5.2, 10.0, slot_freed=5.0)])
    assert result.idle_gpu_seconds == 0.0
    assert result.start_latency_gpu_seconds == pytest.approx(0.1 + 0.21)


@pytest.mark.parametrize(("trial", "message"), [
    (TrialTimes(1.0, 0.5, 2.0), r"trials\[0\]\.running \(0.5\) is before submitted"),
    (TrialTimes(0.0, 2.0, 1.0), r"trials\[0\]\.finished \(1.0\) is before running"),
    (TrialTimes(0.0, math.nan, 1.0), r"trials\[0\]\.running must be a finite number"),
    (TrialTimes(0.0, 1.0, 2.0, gpus=0), r"trials\[0\]\.gpus must be >= 1"),
    (TrialTimes(0.0, 1.0, 1.0), "total trial GPU time is 0"),
])
def test_impossible_timelines_name_the_field(trial: TrialTimes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        overhead([trial])


def test_no_trials_and_no_runtime_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one finished trial"):
        overhead([])
    with pytest.raises(ValueError, match="runtime_s must be > 0"):
        overhead([TrialTimes(0.0, 1.0, 2.0)]).ratio_at_runtime(0.0)

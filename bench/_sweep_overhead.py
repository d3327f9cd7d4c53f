"""The short-job sweep's overhead (issue 13): one definition for every benchmark that reports it.

A hyperparameter sweep keeps N trials in flight and submits the next one when one finishes. What
the platform costs such a sweep is the GPU time that is neither idle by the user's choice nor spent
training:

    overhead = (sum of submit-to-Running + sum of GPU idle time between trials) / total trial GPU time

- *submit to Running*: from the driver's create request to the trial's pod Running (quota,
  ordering, placement, pod creation, binding, the node starting it);
- *idle between trials*: from the moment a trial's pod finished (its GPUs were free) to the
  submission of the trial that took its slot (how long the driver took to learn the trial was over,
  which includes the platform writing the job's final status);
- *trial GPU time*: from Running to finished, times the trial's GPUs.

The two parts never overlap (one ends at a submission, the other starts there), so nothing is counted
twice. Each part is weighted by the trial's GPUs: a 2-GPU trial that waits holds 2 GPUs idle.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class TrialTimes:
    """One trial's timeline, in seconds on one clock."""

    submitted: float
    """The driver sent the create request."""
    running: float
    """The trial's pod was first seen Running."""
    finished: float
    """The trial's pod was first seen Succeeded or Failed."""
    slot_freed: float | None = None
    """When the trial whose end let the driver submit this one finished; None for the first N."""
    gpus: int = 1


@dataclass(frozen=True)
class Overhead:
    """The sweep's overhead and its two parts, in GPU-seconds."""

    trials: int
    trial_gpu_seconds: float
    start_latency_gpu_seconds: float
    idle_gpu_seconds: float

    @property
    def lost_gpu_seconds(self) -> float:
        return self.start_latency_gpu_seconds + self.idle_gpu_seconds

    @property
    def ratio(self) -> float:
        """Lost GPU time over trial GPU time (0.02 is the issue's 2%)."""
        return self.lost_gpu_seconds / self.trial_gpu_seconds

    @property
    def lost_seconds_per_trial(self) -> float:
        return self.lost_gpu_seconds / self.trials

    def ratio_at_runtime(self, runtime_s: float, gpus_per_trial: int = 1) -> float:
        """The ratio if every trial had run ``runtime_s`` with the same lost seconds: what a benchmark
        whose run times were scaled down says about the unscaled sweep (latencies do not scale)."""
        if runtime_s <= 0:
            raise ValueError(f"runtime_s must be > 0 seconds, got {runtime_s}")
        return self.lost_gpu_seconds / (self.trials * runtime_s * gpus_per_trial)


def overhead(trials: Sequence[TrialTimes]) -> Overhead:
    """The overhead of finished trials; a clear ValueError for a timeline that cannot be.

    A negative idle gap is counted as 0: the finish and the submission that follows it may be stamped
    by two watch streams read in different threads, whose order can swap by milliseconds.
    """
    if not trials:
        raise ValueError("trials: at least one finished trial is needed")
    run = start = idle = 0.0
    for i, t in enumerate(trials):
        for name in ("submitted", "running", "finished"):
            if not math.isfinite(getattr(t, name)):
                raise ValueError(f"trials[{i}].{name} must be a finite number of seconds, got {getattr(t, name)}")
        if t.gpus < 1:
            raise ValueError(f"trials[{i}].gpus must be >= 1, got {t.gpus}")
        if t.running < t.submitted:
            raise ValueError(f"trials[{i}].running ({t.running}) is before submitted ({t.submitted})")
        if t.finished < t.running:
            raise ValueError(f"trials[{i}].finished ({t.finished}) is before running ({t.running})")
        run += (t.finished - t.running) * t.gpus
        start += (t.running - t.submitted) * t.gpus
        if t.slot_freed is not None:
            idle += max(0.0, t.submitted - t.slot_freed) * t.gpus
    if run <= 0:
        raise ValueError("trials: total trial GPU time is 0 seconds; nothing ran")
    return Overhead(len(trials), run, start, idle)

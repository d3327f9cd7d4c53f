"""How long a running gang will run, where that is known: the estimate's only input of its own.

kubegang schedules by time limits only where GPUJobs give them (``timeLimitSeconds``), so
``kubectl gang why`` only estimates a start where a run time is stated or observed, and says which:

1. ``kubegang.io/fake-runtime`` on the pod template: the demo's and the tests' fake pods run exactly
   that long (hack/kwok/kubegang-stages.yaml);
2. the GPUJob's ``timeLimitSeconds``: the operator ends the gang by then (an upper bound);
3. the template's ``activeDeadlineSeconds``: kubelet ends the pods by then (an upper bound);
4. the queue's recent history: the median run time (``finishedAt - startedAt``) of the jobs of the same
   queue that succeeded, among those the user may see.
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
from collections.abc import Iterable

from kubegang.operator._job import JobView

FAKE_RUNTIME_ANNOTATION = "kubegang.io/fake-runtime"
"""The demo's and the tests' fake pods run this long (hack/kwok/kubegang-stages.yaml)."""
ACTIVE_DEADLINE = "activeDeadlineSeconds"
TIME_LIMIT = "timeLimitSeconds"
HISTORY = "the queue's history"
_UNITS = {"s": 1, "m": 60, "h": 3600}


def seconds(text: str) -> int | None:
    """``"90s"``, ``"15m"``, ``"2h"`` (Go durations of one unit, as the stages' annotation takes them);
    None for anything else. Only ASCII digits are a number: ``str.isdigit`` also takes ``"²"`` or
    ``"١"``, which ``int`` refuses (or reads as a number Go would not)."""
    number, unit = text[:-1], text[-1:]
    if unit not in _UNITS or not number or not all("0" <= c <= "9" for c in number):
        return None
    return int(number) * _UNITS[unit]


def _duration(value: float | int) -> float | None:
    """``value`` as seconds when it is a finite float (an int too large for one, NaN or infinity: None)."""
    try:
        out = float(value)
    except (OverflowError, TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


class RunTimes:
    """Run times of gangs, from what they state or, failing that, from their queue's finished jobs."""

    def __init__(self, jobs: Iterable[JobView]) -> None:
        runs: dict[str, list[float]] = {}
        for job in jobs:
            started, finished = job.status_time("startedAt"), job.status_time("finishedAt")
            if job.phase.value == "Succeeded" and started is not None and finished is not None and finished > started:
                runs.setdefault(job.queue, []).append((finished - started).total_seconds())
        self.history = {queue: (statistics.median(values), len(values)) for queue, values in runs.items()}
        """Queue -> (median run time in seconds, how many finished jobs it is the median of)."""

    def run_time(self, job: JobView) -> tuple[float, str] | None:
        """Seconds the gang runs, and where that comes from; None when nothing says."""
        annotations = (job.template.get("metadata") or {}).get("annotations") or {}
        fake = seconds(str(annotations.get(FAKE_RUNTIME_ANNOTATION, "")))
        if fake is not None and (run := _duration(fake)) is not None:
            return run, FAKE_RUNTIME_ANNOTATION
        if job.time_limit is not None and (run := _duration(job.time_limit)) is not None:
            return run, TIME_LIMIT
        deadline = (job.template.get("spec") or {}).get(ACTIVE_DEADLINE)
        if isinstance(deadline, int) and not isinstance(deadline, bool) and (run := _duration(deadline)) is not None:
            return run, ACTIVE_DEADLINE
        history = self.history.get(job.queue)
        if history is not None:
            return history[0], f"{HISTORY} (median of {history[1]} finished)"
        return None

    def expected_end(self, job: JobView) -> dt.datetime | None:
        """When a running gang ends: ``startedAt`` (else ``admittedAt``) + its run time; None when that is
        unknown, or past what a date can hold (an absurd run time, such as ``activeDeadlineSeconds:
        1000000000000`` or a fake runtime of ``99999999h``, says nothing about when the gang ends, and
        must not break the answer about another job)."""
        run_time = self.run_time(job)
        started = job.status_time("startedAt") or job.status_time("admittedAt")
        if run_time is None or started is None:
            return None
        try:
            return started + dt.timedelta(seconds=run_time[0])
        except OverflowError:
            return None

"""How long a gang is likely to run: the run times of finished gangs like it.

Why: a time limit is an upper bound users overestimate (Slurm's users by a factor of several; the
Kalos-like workload's limits are its run times times 1 to 5, rounded up to at least an hour), so a
reservation whose latest start is 40 minutes away keeps off every job with a one-hour limit, although
most of them run for two minutes. Tsafrir, Etsion and Feitelson ("Backfilling using system-generated
predictions rather than user runtime estimates", IEEE TPDS 2007) predict a job's run time as the mean
of the last two finished jobs of the same user, capped by its limit; backfill with those predictions
(EASY++) waits less and uses more of the machine than backfill with the limits.

The class of a gang here is its queue, its GPU count and its time limit: the queue stands for the
user (a team's queue), and jobs of one size and one limit are the same kind of run far more often than
the user's jobs as a whole. A class without history predicts nothing: the caller keeps the limit.
The admission cycle uses a prediction only where a wrong one costs no one else: a gang predicted to
end before a reservation's latest start may run on its nodes, and is evicted if it has not ended
when the holder could start (``kubegang.quota.BackfillPolicy.predicted_tenants``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

DEFAULT_DEPTH = 2
"""Finished gangs a prediction averages (Tsafrir et al.'s choice: recent jobs predict best)."""

MAX_CLASSES = 100_000
"""Classes kept before the oldest are dropped (bounds a long-running operator's memory)."""


@dataclass(frozen=True, slots=True)
class RunClass:
    """What makes two gangs the same kind of run."""

    queue: str
    gpus: int
    time_limit: float | None


class RunTimeHistory:
    """The last ``depth`` run times per ``RunClass``, and the prediction they give."""

    def __init__(self, depth: int = DEFAULT_DEPTH) -> None:
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ValueError(f"RunTimeHistory.depth: {depth!r} must be an integer >= 1")
        self.depth = depth
        self._runs: dict[RunClass, deque[float]] = {}

    def observe(self, run: RunClass, seconds: float) -> None:
        """A gang of class ``run`` ran ``seconds`` from its start to its end (it finished by itself)."""
        if not seconds >= 0:
            raise ValueError(f"RunTimeHistory.observe: run time {seconds!r} must be >= 0 seconds")
        runs = self._runs.pop(run, None)  # re-inserted: the dict's order is least recently seen first
        if runs is None:
            runs = deque(maxlen=self.depth)
            if len(self._runs) >= MAX_CLASSES:
                del self._runs[next(iter(self._runs))]
        runs.append(seconds)
        self._runs[run] = runs

    def predict(self, run: RunClass) -> float | None:
        """Seconds a new gang of class ``run`` is predicted to run: the mean of the last ``depth``
        finished ones, at most its time limit; None without history."""
        runs = self._runs.get(run)
        if not runs:
            return None
        mean = sum(runs) / len(runs)
        return mean if run.time_limit is None else min(mean, run.time_limit)

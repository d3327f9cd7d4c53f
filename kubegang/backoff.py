"""Jittered exponential backoff: how every kubegang watch waits before it reconnects.

Why one rule, in the core: when the API server restarts, every watcher in the cluster fails in the
same second — the agent on each GPU node (a DaemonSet: thousands), the extender's watches, the
operators' watches. With a fixed delay, or a purely exponential one, they all come back in the
same second too, and the API server that just started answers thousands of LISTs at once. *Full
jitter* (AWS Architecture Blog, "Exponential Backoff And Jitter", 2015) draws each delay uniformly
between a small floor and a ceiling that doubles with each consecutive failure up to a cap, which
spreads the reconnects over the whole window; a success resets the ceiling.

Pure: no I/O besides :meth:`Backoff.sleep`; the random source can be seeded for tests.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

_MAX_EXPONENT = 64
"""``factor ** failures`` beyond this is always past any cap; stops the float from overflowing."""


@dataclass
class Backoff:
    """Delays for one reconnect loop: call :meth:`sleep` (or :meth:`next_delay`) after each failure and
    :meth:`reset` after a success. Each instance keeps its own failure count."""

    initial_seconds: float = 0.5
    """Ceiling of the first delay."""
    max_seconds: float = 30.0
    """Cap of the ceiling, however many failures."""
    factor: float = 2.0
    """How much the ceiling grows per consecutive failure."""
    floor_fraction: float = 0.1
    """Shortest delay, as a fraction of ``initial_seconds``: full jitter without a floor may draw ~0,
    a busy loop against a server that is down."""
    rng: random.Random = field(default_factory=random.Random, repr=False, compare=False)
    """The random source (seed it in tests)."""
    failures: int = field(default=0, init=False)
    """Consecutive failures since the last :meth:`reset`."""

    def __post_init__(self) -> None:
        if not self.initial_seconds > 0:
            raise ValueError(f"Backoff.initial_seconds: must be > 0, got {self.initial_seconds}")
        if not self.max_seconds >= self.initial_seconds:
            raise ValueError(f"Backoff.max_seconds: must be >= initial_seconds ({self.initial_seconds}), "
                             f"got {self.max_seconds}")
        if not self.factor >= 1:
            raise ValueError(f"Backoff.factor: must be >= 1, got {self.factor}")
        if not 0 <= self.floor_fraction <= 1:
            raise ValueError(f"Backoff.floor_fraction: must be in [0, 1], got {self.floor_fraction}")

    @property
    def floor(self) -> float:
        """The shortest delay ever drawn."""
        return self.initial_seconds * self.floor_fraction

    def ceiling(self) -> float:
        """The longest delay the next failure can draw."""
        return min(self.max_seconds, self.initial_seconds * self.factor ** min(self.failures, _MAX_EXPONENT))

    def next_delay(self) -> float:
        """Count one failure and draw its delay from ``[floor, ceiling]``."""
        delay = self.rng.uniform(self.floor, max(self.floor, self.ceiling()))
        self.failures += 1
        return delay

    def reset(self) -> None:
        """A success: the next failure starts from ``initial_seconds`` again."""
        self.failures = 0

    async def sleep(self) -> float:
        """Count one failure and wait its delay; returns the delay."""
        delay = self.next_delay()
        await asyncio.sleep(delay)
        return delay

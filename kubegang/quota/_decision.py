"""Answers to "may this job take quota now?", with reasons a human can act on.

Three outcomes, because the operator treats them differently: ``Ok`` admits, ``Refusal`` keeps the job
queued (quota may free up, or preemption may make room), ``Unschedulable`` marks the job with a
condition instead of letting it wait forever (it is larger than its queue could ever hold).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Ok:
    """The job fits in quota now."""

    def __bool__(self) -> bool:
        return True


@dataclass(frozen=True)
class Shortfall:
    """One flavour the job cannot get enough of."""

    flavor: str
    needed: int
    available: int
    """Now (Refusal) or at most, with every other queue idle (Unschedulable)."""


@dataclass(frozen=True)
class Refusal:
    """The job does not fit now; it may later."""

    queue: str
    shortfalls: tuple[Shortfall, ...]
    reason: str

    def __bool__(self) -> bool:
        return False


@dataclass(frozen=True)
class Unschedulable:
    """The job can never fit in its queue as the tree is configured."""

    queue: str
    shortfalls: tuple[Shortfall, ...]
    reason: str

    def __bool__(self) -> bool:
        return False


Decision = Ok | Refusal | Unschedulable
"""What ``QuotaTree.can_admit`` and ``QuotaTree.admit`` answer."""

OK = Ok()

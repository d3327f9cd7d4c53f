"""``bench.operator_step`` measures a step over Running gangs with nothing to do, through the
production cache and supervisor (which must call no port: its fake ports raise)."""

from __future__ import annotations

import asyncio

from bench.operator_step import cycle_cost, step_cost


def test_a_step_over_running_gangs_writes_nothing_and_is_timed() -> None:
    result = asyncio.run(step_cost(30, steps=2))
    assert result["jobs"] == 30 and result["pods"] >= 30 and result["steps"] == 2
    assert result["step_cpu_ms"] >= 0


def test_a_cycle_over_blocked_heads_decides_each_and_holds_every_running_gang_in_quota() -> None:
    """The cycle measure runs the production ``Admission.run_cycle``: every waiting job is tried and left
    waiting (the full cluster admits none), every Running gang is counted in the quota book."""
    result = asyncio.run(cycle_cost(30, 12, cycles=2))
    assert result["held_in_quota"] == 30 and result["waiting"] == 12
    assert result["heads_decided"] == 12 and result["cycle_cpu_ms"] > 0

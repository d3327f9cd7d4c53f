"""``bench.operator_step`` measures a step over Running gangs with nothing to do, through the
production cache and supervisor (which must call no port: its fake ports raise)."""

from __future__ import annotations

import asyncio

from bench.operator_step import step_cost


def test_a_step_over_running_gangs_writes_nothing_and_is_timed() -> None:
    result = asyncio.run(step_cost(30, steps=2))
    assert result["jobs"] == 30 and result["pods"] >= 30 and result["steps"] == 2
    assert result["step_cpu_ms"] >= 0

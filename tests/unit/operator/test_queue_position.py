"""``status.queuePosition``: the core's order, written at most every few seconds and only when it moved,
and cleared once the job no longer waits (issue 15)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from kubegang.operator._queue_position import PositionReporter

NODES = {f"node-{i}": 8 for i in range(2)}
NOW = dt.datetime(2025, 1, 1, 1, 0, tzinfo=dt.UTC)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


async def test_positions_are_written_when_they_move_at_most_every_few_seconds(job_body: Any, make_world: Any) -> None:
    w = make_world({"team-a": 8}, NODES)
    clock = Clock()
    reporter = PositionReporter(w.admission.writer, every=5.0, monotonic=clock, now=lambda: NOW)
    for i in range(3):
        w.submit(job_body(f"j{i}", replicas=1, gpus=8, created=f"2025-01-01T00:00:0{i}Z"))
    await w.cycle()  # j0 is admitted (8 of 8 GPUs); j1 and j2 wait on quota

    def report() -> int:
        return reporter.report(w.cache.pending(), w.quota.positions, w.cache.job)

    assert report() == 0  # first seen waiting: a job admitted within the interval is never written
    clock.t += 5
    assert report() == 2
    await w.admission.settle()
    assert w.last_status("team-a/j1")["queuePosition"] == {
        "queue": 1, "cohort": 1, "ahead": 0, "aheadGPUs": 0.0, "updatedAt": "2025-01-01T01:00:00Z",
        "reservedNodes": []}
    assert w.last_status("team-a/j2")["queuePosition"]["queue"] == 2
    assert w.last_status("team-a/j2")["queuePosition"]["aheadGPUs"] == 8.0
    # Not due yet, then due but nothing moved: no write at all.
    clock.t += 1
    assert report() == 0
    clock.t += 5
    assert report() == 0
    # j1 leaves the queue (deleted): j2 moves up, and is written once.
    w.delete_job("uid-j1")
    clock.t += 5
    assert report() == 1
    await w.admission.settle()
    assert w.last_status("team-a/j2")["queuePosition"]["queue"] == 1


async def test_a_job_that_no_longer_waits_has_its_position_cleared(job_body: Any, make_world: Any) -> None:
    w = make_world({"team-a": 16}, NODES)
    clock = Clock()
    reporter = PositionReporter(w.admission.writer, every=5.0, monotonic=clock, now=lambda: NOW)
    w.submit(job_body("first", replicas=1, gpus=8))
    assert reporter.report(w.cache.pending(), w.quota.positions, w.cache.job) == 0
    clock.t += 5
    assert reporter.report(w.cache.pending(), w.quota.positions, w.cache.job) == 1
    await w.admission.settle()
    assert w.last_status("team-a/first")["queuePosition"]["queue"] == 1
    writes = len(w.kube.status["team-a/first"])
    await w.cycle()  # admitted: the admission's own write clears the position
    clock.t += 5
    assert reporter.report(w.cache.pending(), w.quota.positions, w.cache.job) == 0
    await w.admission.settle()
    assert w.last_status("team-a/first")["queuePosition"] is None
    assert w.last_status("team-a/first")["phase"] == "Admitted"
    assert len(w.kube.status["team-a/first"]) == writes + 1  # one write: Admitted, position cleared in it


async def test_a_backfill_reservation_is_written_with_the_position(job_body: Any, make_world: Any) -> None:
    w = make_world({"team-a": 64}, NODES)
    clock = Clock()
    reporter = PositionReporter(w.admission.writer, every=5.0, monotonic=clock, now=lambda: NOW)
    w.submit(job_body("big", replicas=2, gpus=8))
    held: dict[str, frozenset[str]] = {}
    assert reporter.report(w.cache.pending(), w.quota.positions, w.cache.job, held.get) == 0
    clock.t += 5
    assert reporter.report(w.cache.pending(), w.quota.positions, w.cache.job, held.get) == 1
    held["uid-big"] = frozenset({"node-1", "node-0"})
    clock.t += 5
    assert reporter.report(w.cache.pending(), w.quota.positions, w.cache.job, held.get) == 1
    await w.admission.settle()
    assert w.last_status("team-a/big")["queuePosition"]["reservedNodes"] == ["node-0", "node-1"]

"""The operator's metrics that docs/metrics.md describes by value and label, read after what they count:
the steps of an admission, a job's wait, and the victim's queue of a preemption. Over the production
admission (conftest's ``World``)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from kubegang.operator._metrics import REGISTRY

from .test_admission import _preempted, _team_b_reclaims, _tree_example_world  # type: ignore[import-not-found]


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def steps() -> dict[str, float]:
    """kubegang_admission_duration_seconds observations per step (docs/metrics.md's five)."""
    return {step: value("kubegang_admission_duration_seconds_count", step=step)
            for step in ("plan", "reserve", "preempt", "record", "create")}


async def test_an_admission_times_its_steps_and_observes_the_jobs_wait(job_body: Any, make_world: Any) -> None:
    w = make_world({"team-w": 16}, {"node-0": 8, "node-1": 8})
    before = steps()
    waits = value("kubegang_queue_wait_seconds_count", queue="team-w")
    waited = value("kubegang_queue_wait_seconds_sum", queue="team-w")
    created = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    w.submit(job_body("train", queue="team-w", replicas=2, gpus=8, created="2025-01-01T00:00:00Z"))
    start = dt.datetime.now(dt.UTC)
    [outcome] = await w.cycle()
    end = dt.datetime.now(dt.UTC)
    assert outcome.result == "Admitted"
    # One placement answer, one reservation, the fenced status write and the pods: one sample each; no what-if.
    assert {step: n - before[step] for step, n in steps().items()} == \
        {"plan": 1, "reserve": 1, "preempt": 0, "record": 1, "create": 1}
    # One wait sample, in its queue: from the job's creation to its admission.
    assert value("kubegang_queue_wait_seconds_count", queue="team-w") == waits + 1
    wait = value("kubegang_queue_wait_seconds_sum", queue="team-w") - waited
    assert (start - created).total_seconds() - 1 <= wait <= (end - created).total_seconds() + 1


async def test_a_preemption_is_counted_in_the_victims_queue_and_its_what_if_timed(
        job_body: Any, make_world: Any) -> None:
    w = _tree_example_world(make_world)
    a, b, what_ifs = (value("kubegang_jobs_preempted_total", queue="team-a"),
                      value("kubegang_jobs_preempted_total", queue="team-b"), steps()["preempt"])
    await _team_b_reclaims(w, job_body)  # team-b's job evicts team-a's borrowing gang
    assert _preempted(w) == {"team-a/a-borrow"}
    assert value("kubegang_jobs_preempted_total", queue="team-a") == a + 1  # the victim's queue
    assert value("kubegang_jobs_preempted_total", queue="team-b") == b      # not the preemptor's
    assert steps()["preempt"] > what_ifs


async def test_a_backfill_reservations_what_if_is_timed_as_the_preempt_step(job_body: Any, make_world: Any) -> None:
    # "run" (a time limit) holds one of the two nodes, so "big" is blocked on the GPUs and reserves at
    # once: its nodes come from a what-if over the running gangs. Nobody may be preempted (no policy).
    w = make_world({"team-a": 32}, {"node-0": 8, "node-1": 8})
    w.submit(job_body("run", replicas=1, gpus=8, timeLimitSeconds=600))
    await w.cycle()
    w.echo_pods("Running")
    what_ifs = steps()["preempt"]
    w.submit(job_body("big", replicas=2, gpus=8, timeLimitSeconds=600, created="2025-01-01T00:00:01Z"))
    [outcome] = await w.cycle()
    assert outcome.result == "Queued" and w.admission.cycle.reservation("uid-big") is not None, outcome
    assert steps()["preempt"] > what_ifs
    assert _preempted(w) == set()

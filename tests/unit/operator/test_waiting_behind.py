"""A job the cycle did not reach says which job of its queue it waits behind (issue 15), by name when
that job is of its own namespace and as "a job of another namespace" otherwise."""

from __future__ import annotations

import dataclasses
from typing import Any

from kubegang.operator._conditions import CondType, get_condition

NODES = {f"node-{i}": 8 for i in range(4)}


async def test_jobs_not_reached_name_the_job_they_wait_behind(job_body: Any, make_world: Any) -> None:
    w = make_world({"team-a": 8}, NODES)
    w.admission.cycle.settings = dataclasses.replace(w.admission.cycle.settings, max_rounds=8)  # a short walk
    w.submit(job_body("running", replicas=1, gpus=8, created="2025-01-01T00:00:00Z"))
    await w.cycle()
    # Nine jobs that quota refuses: the cycle tries eight heads (max_rounds), the ninth is not reached.
    for i in range(9):
        ns = "team-a" if i < 8 else "team-b"
        w.submit(job_body(f"wait-{i}", namespace=ns, replicas=1, gpus=8, created=f"2025-01-01T00:01:0{i}Z"))
    w.submit(job_body("last", replicas=1, gpus=8, created="2025-01-01T00:02:00Z"))
    outcomes = {o.job: o for o in await w.cycle()}
    assert outcomes["team-a/wait-7"].reason == "QuotaExhausted"
    assert outcomes["team-a/last"].reason == "WaitingInQueue"
    assert outcomes["team-a/last"].message == "waiting in queue team-a behind team-a/wait-7 (QuotaExhausted)"
    cond = get_condition(w.last_status("team-a/last")["conditions"], CondType.QUEUED)
    assert cond is not None and cond["message"] == outcomes["team-a/last"].message
    other = outcomes["team-b/wait-8"]
    assert other.message == "waiting in queue team-a behind a job of another namespace (QuotaExhausted)"

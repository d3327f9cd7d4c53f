"""Events and a condition reason of docs/operator.md that no other test asserted: ``BackfillReservation``
(once per reservation), ``TimeLimitExceeded`` (the Warning of a job Failed by its limit), and the
``Queued`` / ``ReservationFailed`` condition (the extender refused to hold the place it had just planned).

The real admission cycle over the real quota tree and ledger (conftest's ``World``); only the Kubernetes
writes are recorded.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from kubegang.operator._conditions import CondType, get_condition
from kubegang.operator._lifecycle import Action
from kubegang.placement import GangRequest, Placement

from .conftest import World, make_job_body


def _events(w: World, reason: str) -> list[tuple[str, str, str, bool]]:
    return [e for e in w.kube.events if e[1] == reason]


async def test_a_backfill_reservation_is_announced_once_naming_its_nodes_however_many_cycles_it_waits() -> None:
    # "run" (a time limit) holds node-0, so "big" (both nodes) is blocked on GPUs and reserves at once.
    w = World({"team-a": 32}, {"node-0": 8, "node-1": 8})
    w.submit(make_job_body("run", replicas=1, gpus=8, timeLimitSeconds=600))
    await w.cycle()
    w.echo_pods("Running")
    w.submit(make_job_body("big", replicas=2, gpus=8, timeLimitSeconds=600, created="2025-01-01T00:00:01Z"))
    for _ in range(3):
        [outcome] = await w.cycle()
        assert outcome.job == "team-a/big" and outcome.result == "Queued", outcome
    assert w.admission.cycle.reservation("uid-big") is not None
    assert _events(w, "BackfillReservation") == [
        ("team-a/big", "BackfillReservation",
         "reserved 2 nodes (node-0, node-1): later jobs are placed around them until this job starts", False)]


async def test_a_job_failed_by_its_time_limit_gets_one_warning_event_time_limit_exceeded() -> None:
    now = dt.datetime(2025, 1, 1, 1, 0, tzinfo=dt.UTC)
    w = World({"team-a": 32}, {f"node-{i}": 8 for i in range(4)})
    w.admission.clock = lambda: now
    job = w.submit(make_job_body("short", replicas=2, gpus=8, timeLimitSeconds=600))
    await w.cycle()
    w.echo_pods("Running")
    await w.supervise(w.cache.job(job.uid))
    assert w.last_status("team-a/short")["phase"] == "Running" and w.kube.events == []
    w.admission.clock = lambda: now + dt.timedelta(seconds=601)
    decision = await w.supervise(w.cache.job(job.uid))
    assert decision.action is Action.FAIL
    status = w.last_status("team-a/short")
    cond = get_condition(status["conditions"], CondType.FAILED)
    assert status["phase"] == "Failed" and cond is not None and cond["reason"] == "TimeLimitExceeded"
    assert w.kube.events == [("team-a/short", "TimeLimitExceeded", cond["message"], True)]


async def test_a_place_taken_between_plan_and_reserve_leaves_the_job_queued_reservation_failed_then_admitted() -> None:
    w = World({"team-a": 32}, {f"node-{i}": 8 for i in range(2)})
    planned = w.client.reserve
    taken: list[str] = []

    async def reserve_after_a_stranger_took_the_node(gang: GangRequest, plan: Placement | None = None,
                                                     **kw: Any) -> Any:
        # Another scheduler's pod lands on the planned node between the Plan and the Reserve.
        if not taken and plan is not None:
            node = plan.nodes[0]
            taken.append(node)
            w.ledger.upsert_pod({"metadata": {"name": "web-0", "namespace": "serving", "uid": "web-uid"},
                                 "spec": {"nodeName": node, "containers": [
                                     {"name": "c", "resources": {"limits": {"nvidia.com/gpu": 8}}}]},
                                 "status": {"phase": "Running"}})
        return await planned(gang, plan, **kw)

    w.client.reserve = reserve_after_a_stranger_took_the_node  # type: ignore[method-assign]
    job = w.submit(make_job_body("train", replicas=1, gpus=8))
    [outcome] = await w.cycle()
    assert outcome.result == "Queued" and outcome.reason.value == "ReservationFailed", outcome
    status = w.last_status("team-a/train")
    cond = get_condition(status["conditions"], CondType.QUEUED)
    assert status["phase"] == "Queued" and cond is not None and cond["reason"] == "ReservationFailed", status
    # The extender's own reason, naming the node that was taken.
    assert "no longer free" in cond["message"] and f"node '{taken[0]}'" in cond["message"], cond
    assert w.kube.pods() == [] and job.uid not in w.quota.tree  # nothing held: no pods, no quota
    # The next cycle tries again, on the node that is still free.
    [again] = await w.cycle()
    assert again.result == "Admitted", again
    [pod] = w.kube.pods()
    assert pod["metadata"]["annotations"]["kubegang.io/node"] != taken[0]

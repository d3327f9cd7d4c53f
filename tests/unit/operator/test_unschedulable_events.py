"""The Warning Event of each Unschedulable reason (docs/operator.md, "Events"): recorded when the job
becomes Unschedulable with that reason, "again when the message changes, at most every 30 s".

The real admission cycle over the real quota tree and ledger (conftest's ``World``); only the
Kubernetes writes are recorded.
"""

from __future__ import annotations

from typing import Any

import pytest

from kubegang.operator._admission import MESSAGE_REFRESH_SECONDS
from kubegang.operator._conditions import CondType, get_condition

from .conftest import World, gpu_node, gpu_queue, make_job_body


def _world() -> World:
    """``org`` (64 GPUs) over the leaf ``team-a`` (namespace team-a), and ``orphan``, whose parent does
    not exist (so it is left out of the tree); four nodes of 8 GPUs."""
    return World({}, {f"node-{i}": 8 for i in range(4)}, leaves={f"node-{i}": f"leaf-{i}" for i in range(4)},
                 queues=[gpu_queue("org", 64), gpu_queue("team-a", 32, "org", ["team-a"]),
                         gpu_queue("orphan", 8, "no-such-parent", ["team-a"])])


CASES: dict[str, dict[str, Any]] = {
    "ExceedsCluster": {"gpus": 9},
    "QueueNotFound": {"queue": "no-such-queue"},
    "NotALeafQueue": {"queue": "org"},
    "NamespaceNotServed": {"namespace": "elsewhere"},
    "QueueInactive": {"queue": "orphan"},
    "NoGPUsRequested": {"gpus": 0},
}


@pytest.mark.parametrize("reason", sorted(CASES))
async def test_each_unschedulable_reason_records_one_warning_event_with_the_conditions_message(reason: str) -> None:
    w = _world()
    fields = {"namespace": "team-a", "queue": "team-a", "replicas": 1, "gpus": 8} | CASES[reason]
    w.submit(make_job_body("job", **fields))
    [outcome] = await w.cycle()
    assert outcome.reason.value == reason
    key = f"{fields['namespace']}/job"
    status = w.last_status(key)
    cond = get_condition(status["conditions"], CondType.UNSCHEDULABLE)
    assert status["phase"] == "Unschedulable" and cond is not None and cond["reason"] == reason
    assert w.kube.events == [(key, reason, cond["message"], True)]
    # Nothing changed: the next cycles record nothing more.
    await w.cycle()
    await w.cycle()
    assert len(w.kube.events) == 1, w.kube.events


async def test_a_new_message_under_the_same_reason_is_recorded_again_only_after_30_s() -> None:
    w = _world()
    job = w.submit(make_job_body("huge", namespace="team-a", queue="team-a", replicas=1, gpus=20))
    await w.cycle()
    first = w.kube.events[-1]
    assert first[1] == "ExceedsCluster" and "has 8" in first[2], w.kube.events
    # A larger node joins (still too small): the message would change, but within 30 s of the last
    # report neither the condition nor an Event is written again.
    w.ledger.upsert_node(gpu_node("node-8", 12, "leaf-8"))
    await w.cycle()
    assert w.kube.events == [first]
    assert get_condition(w.last_status("team-a/huge")["conditions"], CondType.UNSCHEDULABLE)["message"] == first[2]  # type: ignore[index]
    # 30 s later, the next change of the message is written and recorded.
    phase, reason, at = w.admission._waiting_written[job.uid]
    w.admission._waiting_written[job.uid] = (phase, reason, at - MESSAGE_REFRESH_SECONDS - 1)
    w.ledger.upsert_node(gpu_node("node-9", 16, "leaf-9"))
    await w.cycle()
    assert len(w.kube.events) == 2, w.kube.events
    second = w.kube.events[-1]
    assert second[1] == "ExceedsCluster" and second[3] and "(node-9) has 16" in second[2], second
    cond = get_condition(w.last_status("team-a/huge")["conditions"], CondType.UNSCHEDULABLE)
    assert cond is not None and cond["message"] == second[2]

from __future__ import annotations

import datetime as dt
import time
from typing import Any

from kubegang.operator._controller import queue_status
from kubegang.operator._kube import RateLimiter

from .conftest import gpu_queue

T0 = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


async def test_rate_limiter_spaces_calls_after_the_burst() -> None:
    limiter = RateLimiter(qps=50, burst=2)
    start = time.monotonic()
    for _ in range(5):
        await limiter.acquire()
    # 2 from the burst, 3 more at 50/s: at least ~60 ms.
    assert time.monotonic() - start >= 0.05


async def test_queue_status_counts_pending_and_admitted_up_the_tree(job_body: Any, make_world: Any) -> None:
    # team-a (16 GPUs, lent to nobody else) under org, which has no nominal of its own.
    w = make_world({}, {f"node-{i}": 8 for i in range(4)}, queues=[gpu_queue("org"), gpu_queue("team-a", 16, "org")])
    w.submit(job_body("one", replicas=2, gpus=8, created="2025-01-01T00:00:00Z"))
    w.submit(job_body("two", replicas=2, gpus=8, created="2025-01-01T00:00:01Z"))
    await w.cycle()
    status = queue_status(w.cache, w.quota)
    assert (status["team-a"]["admitted"], status["team-a"]["pending"]) == (1, 1)
    assert (status["org"]["admitted"], status["org"]["pending"]) == (1, 1)
    assert status["team-a"]["usage"] == [{"flavor": "nvidia.com/gpu", "gpus": 16}]
    assert status["org"]["usage"] == [{"flavor": "nvidia.com/gpu", "gpus": 16}]
    assert status["team-a"]["usedGPUs"] == 16 and status["team-a"]["borrowed"] == []


async def test_queue_metrics_count_each_queues_own_jobs_and_go_with_a_deleted_queue(
        job_body: Any, make_world: Any) -> None:
    from kubegang.operator._metrics import REGISTRY

    def sample(name: str, queue: str) -> float | None:
        return REGISTRY.get_sample_value(name, {"queue": queue})

    w = make_world({}, {f"node-{i}": 8 for i in range(4)},
                   queues=[gpu_queue("org-m"), gpu_queue("team-m", 16, "org-m")])
    # Before the queue's first admission its counter is there at 0: an alert's increase() then sees the
    # first admission (a counter that appears at 1 shows none).
    await w.cycle()
    assert sample("kubegang_jobs_admitted_total", "team-m") == 0.0
    w.submit(job_body("one", queue="team-m", replicas=2, gpus=8, created="2025-01-01T00:00:00Z"))
    w.submit(job_body("two", queue="team-m", replicas=2, gpus=8, created="2025-01-01T00:00:01Z"))
    await w.cycle()
    queue_status(w.cache, w.quota)
    assert sample("kubegang_jobs_admitted_total", "team-m") == 1.0
    # Per queue, its own jobs: the parent holds none of its own (a sum over queues counts each job once).
    assert (sample("kubegang_queue_admitted_jobs", "team-m"), sample("kubegang_queue_admitted_jobs", "org-m")) \
        == (1.0, 0.0)
    await w.cycle()  # the pending gauge is the count a cycle starts from
    assert sample("kubegang_queue_pending_jobs", "team-m") == 1.0

    # The queue is deleted: its series go (a last value kept would fire KubegangQueueStarving for ever),
    # though its jobs are still there, one holding quota and one waiting.
    w.cache.remove_queue("team-m")
    w.cache.remove_queue("org-m")
    await w.cycle()
    assert len(w.cache.pending()) == 1 and len(w.cache.holding()) == 1
    queue_status(w.cache, w.quota)
    assert sample("kubegang_queue_pending_jobs", "team-m") is None
    assert sample("kubegang_queue_admitted_jobs", "team-m") is None


async def test_status_writes_are_counted_by_what_they_carry(job_body: Any, make_world: Any) -> None:
    from kubegang.operator._metrics import REGISTRY
    from kubegang.operator._status_writer import StatusChange, status_change

    def written(change: str, phase: str) -> float:
        value = REGISTRY.get_sample_value("kubegang_operator_gpujob_status_writes_total",
                                          {"change": change, "phase": phase})
        return value or 0.0

    before = {phase: written("decision", phase) for phase in ("Admitted", "Running")}
    w = make_world({"team-a": 16}, {"node-0": 8, "node-1": 8})
    job = w.submit(job_body("train", replicas=2, gpus=8))
    await w.cycle()
    w.echo_pods()
    await w.supervise(w.cache.job(job.uid))
    assert w.last_status("team-a/train")["phase"] == "Running"
    assert {phase: written("decision", phase) - n for phase, n in before.items()} == {"Admitted": 1, "Running": 1}
    assert status_change({"phase": "Queued", "message": "m"}, urgent=False) is StatusChange.REPORT
    assert status_change({"phase": "Queued"}, urgent=True) is StatusChange.DECISION
    assert status_change({"readyReplicas": 1}, urgent=False) is StatusChange.READY_COUNT
    assert status_change({"queuePosition": None}, urgent=False) is StatusChange.QUEUE_POSITION
    assert status_change({"podsCreatedAt": "x"}, urgent=True) is StatusChange.OTHER


async def test_queue_status_is_written_at_most_every_interval_and_the_last_change_is_due(
    job_body: Any, make_world: Any
) -> None:
    from kubegang.operator._controller import QUEUE_STATUS_SECONDS, Controller

    w = make_world({"team-a": 16}, {"node-0": 8, "node-1": 8})
    writes: list[tuple[str, dict[str, Any]]] = []
    real = w.kube.patch_queue_status

    async def counting(name: str, patch: Any) -> None:
        writes.append((name, dict(patch)))
        await real(name, patch)

    w.kube.patch_queue_status = counting
    controller = Controller(w.cache, w.admission, leadership=None, kube=w.kube)  # type: ignore[arg-type]
    await controller.step()
    assert controller._queue_status_task is not None
    await controller._queue_status_task
    first = len(writes)
    assert [name for name, _ in writes] == ["team-a"]
    w.submit(job_body("a", replicas=1, gpus=8))
    due = await controller.step()  # admitted: team-a's counts changed within the interval
    await w.admission.settle()
    assert len(writes) == first, "a second queue-status pass within the interval"
    assert due is not None and 0 < due <= QUEUE_STATUS_SECONDS  # the loop comes back for it
    controller._queue_status_at -= QUEUE_STATUS_SECONDS  # the interval is over
    await controller.step()
    await controller._queue_status_task
    assert len(writes) == first + 1 and writes[-1][0] == "team-a" and writes[-1][1] != writes[0][1]


async def test_one_queue_whose_status_write_fails_does_not_starve_the_others(make_world: Any) -> None:
    from kubegang.operator._controller import Controller
    from kubegang.restclient import ApiStatusError

    w = make_world({}, {"node-0": 8}, queues=[gpu_queue("a-first", 8), gpu_queue("b-second", 8)])
    written: list[str] = []
    real = w.kube.patch_queue_status

    async def refuse_the_first(name: str, patch: Any) -> None:
        if name == "a-first":
            raise ApiStatusError(422, "Invalid", "a webhook refused it")
        written.append(name)
        await real(name, patch)

    w.kube.patch_queue_status = refuse_the_first
    controller = Controller(w.cache, w.admission, leadership=None, kube=w.kube)  # type: ignore[arg-type]
    await w.cycle()
    await controller.write_queue_status()
    assert written == ["b-second"]
    assert "a-first" not in controller._written  # tried again next pass


async def test_queue_status_says_which_queues_are_in_the_tree_and_keeps_the_transition_time(
        job_body: Any, make_world: Any) -> None:
    queues = [gpu_queue("org"), gpu_queue("team-a", 16, "org"), gpu_queue("loop-a", 8, "loop-b"),
              gpu_queue("loop-b", 8, "loop-a")]
    for body in queues:
        body["metadata"]["generation"] = 3
    w = make_world({}, {"node-0": 8}, queues=queues)
    await w.cycle()
    status = queue_status(w.cache, w.quota)
    active = {name: [(c["type"], c["status"], c["reason"], c["observedGeneration"]) for c in s["conditions"]]
              for name, s in status.items()}
    assert active["team-a"] == [("Active", "True", "InQuotaTree", 3)]
    assert active["loop-a"] == active["loop-b"] == [("Active", "False", "ParentCycle", 3)]
    assert all(s["observedGeneration"] == 3 for s in status.values())
    # Once written (as of an hour ago), the next pass finds the same status: no rewrite, and the
    # condition's lastTransitionTime stays the time it flipped; from what this leader wrote while the
    # watch has not echoed it, from the API's copy after a leader change.
    for s in status.values():
        s["conditions"] = [{**c, "lastTransitionTime": "2025-01-01T00:00:00Z"} for c in s["conditions"]]
    assert queue_status(w.cache, w.quota, written=status) == status
    for name, s in status.items():
        w.cache.queues[name] = {**w.cache.queues[name], "status": s}
    assert queue_status(w.cache, w.quota) == status

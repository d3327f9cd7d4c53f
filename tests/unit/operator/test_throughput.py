"""The mechanics that take work off the admission's critical path keep decisions correct and ordered."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Mapping
from typing import Any

from kubegang.operator._conditions import CondType, get_condition
from kubegang.operator._job import JobView
from kubegang.operator._kube import RateLimiter
from kubegang.operator._status_writer import StatusWriter

from .conftest import gpu_queue

NODES = {f"node-{i}": 8 for i in range(10)}


async def test_background_lane_waits_while_urgent_calls_drain() -> None:
    limiter = RateLimiter(qps=100, burst=1)
    order: list[str] = []

    async def call(name: str, background: bool) -> None:
        await limiter.acquire(background=background)
        order.append(name)

    await limiter.acquire()  # the bucket is empty now
    background = asyncio.create_task(call("report", True))
    await asyncio.sleep(0)
    await asyncio.gather(*(call(f"decision-{i}", False) for i in range(3)))
    await background
    # The report asked first, yet every decision waiting for the refill went before it.
    assert order == ["decision-0", "decision-1", "decision-2", "report"]


class SlowKube:
    """Status writes that take a while, recorded in the order they reach the API."""

    def __init__(self, fail: bool = False) -> None:
        self.written: list[dict[str, Any]] = []
        self.fail = fail

    async def reserve_background(self) -> None:
        await asyncio.sleep(0.01)

    async def patch_job_status(
        self, job: JobView, patch: Mapping[str, Any], *, prepaid: bool = False, resource_version: str | None = None
    ) -> str | None:
        await asyncio.sleep(0.01)
        if self.fail:
            raise RuntimeError("apiserver unavailable")
        self.written.append(dict(patch))
        return None


async def test_a_queued_report_never_lands_after_the_admission_that_followed_it(job_body: Any, cache: Any) -> None:
    job = cache.upsert_job(job_body("train"))
    kube = SlowKube()
    writer = StatusWriter(kube, on_lost=cache.forget)  # type: ignore[arg-type]
    writer.later(job, {"phase": "Queued", "reason": "waiting"})
    await writer.write(job, {"phase": "Admitted"})
    await writer.settle()
    merged: dict[str, Any] = {}
    for patch in kube.written:
        merged.update(patch)
    assert merged["phase"] == "Admitted"
    assert len(kube.written) == 1  # the report went out inside the decision's write


async def test_a_lost_background_write_drops_the_assumption(job_body: Any, cache: Any) -> None:
    job = cache.upsert_job(job_body("train"))
    cache.assume(job, {"phase": "Queued"})
    writer = StatusWriter(SlowKube(fail=True), on_lost=cache.forget)  # type: ignore[arg-type]
    writer.later(job, {"phase": "Queued"})
    await writer.settle()
    assert job.uid not in cache.assumed  # the next cycle sees the API's status and writes again


async def test_waiting_reason_is_written_when_it_changes_not_when_numbers_move(job_body: Any, make_world: Any) -> None:
    # team-a may borrow team-b's idle 8; three nodes of 8 GPUs, pods kubegang did not place on two of them.
    w = make_world({}, {"node-0": 8, "node-1": 8, "node-2": 8},
                   queues=[gpu_queue("org"), gpu_queue("team-a", 16, "org"), gpu_queue("team-b", 8, "org")])
    for name, node, gpus in (("web-0", "node-0", 4), ("web-1", "node-1", 8)):
        w.ledger.upsert_pod({"metadata": {"name": name, "namespace": "serving", "uid": f"{name}-uid"},
                             "spec": {"nodeName": node, "containers": [
                                 {"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
                             "status": {"phase": "Running"}})
    w.submit(job_body("big", replicas=3, gpus=8))
    await w.cycle()
    writes = len(w.kube.status["team-a/big"])
    cond = get_condition(w.last_status("team-a/big")["conditions"], CondType.QUEUED)
    assert cond is not None and cond["reason"] == "InsufficientGPUs"
    before = [o.message for o in await w.cycle()]
    # The extender's numbers change (a pod kubegang did not place ends: one more node free), the reason does not.
    w.ledger.delete_pod("web-0-uid")
    [after] = await w.cycle()
    assert after.reason == "InsufficientGPUs" and [after.message] != before
    assert len(w.kube.status["team-a/big"]) == writes
    # docs/operator.md: a new message under the same reason is written at most every 30 s, and then it is.
    from kubegang.operator._admission import MESSAGE_REFRESH_SECONDS

    phase, reason, at = w.admission._waiting_written["uid-big"]
    w.admission._waiting_written["uid-big"] = (phase, reason, at - MESSAGE_REFRESH_SECONDS - 1)
    [refreshed] = await w.cycle()
    assert len(w.kube.status["team-a/big"]) == writes + 1
    cond = get_condition(w.last_status("team-a/big")["conditions"], CondType.QUEUED)
    assert cond is not None and cond["message"] == refreshed.message and cond["reason"] == "InsufficientGPUs"
    writes += 1
    # Now team-b takes 4 of the tree's 16 GPUs: team-a can get 12 of the 16 it needs, quota is the reason.
    w.submit(job_body("small", namespace="team-b", queue="team-b", replicas=1, gpus=4))
    outcomes = {o.job: o for o in await w.cycle()}
    assert outcomes["team-b/small"].result == "Admitted"
    cond = get_condition(w.last_status("team-a/big")["conditions"], CondType.QUEUED)
    assert cond is not None and cond["reason"] == "QuotaExhausted"
    assert len(w.kube.status["team-a/big"]) == writes + 1


async def test_evicting_a_gang_still_in_creation_leaves_none_of_its_pods(job_body: Any, make_world: Any) -> None:
    w = make_world({"team-a": 80}, NODES)
    created = asyncio.Event()
    real_create = w.kube.create

    async def slow_create(manifest: Mapping[str, Any]) -> bool:
        await asyncio.sleep(0.02)
        result: bool = await real_create(manifest)
        created.set()
        return result

    w.kube.create = slow_create
    job = w.submit(job_body("train", replicas=3, gpus=8))
    [outcome] = await w.admission.run_cycle()
    assert outcome.result == "Admitted" and w.admission.creating(job.uid)
    victim = w.cache.job(job.uid)
    await w.admission.evict(victim, preemptor=victim, why="(test)")
    await w.admission.settle()
    assert created.is_set() and w.kube.pods() == []
    assert w.holds_nothing(job.uid) and w.held_gpus() == {}


async def test_supervisor_leaves_a_gang_in_creation_alone(job_body: Any, make_world: Any) -> None:
    w = make_world({"team-a": 80}, NODES)
    real_create = w.kube.create
    calls: list[str] = []

    async def counting_create(manifest: Mapping[str, Any]) -> bool:
        calls.append(manifest["metadata"]["name"])
        await asyncio.sleep(0.01)
        result: bool = await real_create(manifest)
        return result

    w.kube.create = counting_create
    w.submit(job_body("train", replicas=3, gpus=8))
    await w.admission.run_cycle()
    await w.supervisor.run_pass()  # no pod seen yet: it must not start a second creation
    await w.admission.settle()
    assert sorted(calls) == ["train-0", "train-1", "train-2"]


async def test_pods_whose_watch_echo_is_late_are_not_created_again_but_a_lost_one_is(
    job_body: Any, make_world: Any
) -> None:
    w = make_world({"team-a": 80}, NODES)
    real_create = w.kube.create
    calls: list[str] = []

    async def counting_create(manifest: Mapping[str, Any]) -> bool:
        calls.append(manifest["metadata"]["name"])
        result: bool = await real_create(manifest)
        return result

    w.kube.create = counting_create
    job = w.submit(job_body("train", replicas=3, gpus=8))
    await w.cycle()
    assert sorted(calls) == ["train-0", "train-1", "train-2"]
    start = dt.datetime.now(dt.UTC)
    # A saturated API server: 5 s later the watch has delivered one pod of three.
    w.admission.clock = lambda: start + dt.timedelta(seconds=5)
    pod = next(p for p in w.kube.pods() if p["metadata"]["name"] == "train-0")
    w.see_pod({**pod, "status": {"phase": "Pending"}})
    await w.supervisor.run_pass()
    await w.admission.settle()
    assert len(calls) == 3, "pods still on their way through the watch were created again"
    # train-2 was deleted before its ADDED event was ever read: past the watch's allowance it is made again.
    del w.kube.objects[("Pod", "team-a", "train-2")]
    w.see_pod({**next(p for p in w.kube.pods() if p["metadata"]["name"] == "train-1"), "status": {"phase": "Pending"}})
    w.admission.clock = lambda: start + dt.timedelta(seconds=31)
    w.supervisor.look_at_everything()
    await w.supervisor.run_pass()
    await w.admission.settle()
    assert calls[3:] == ["train-0", "train-1", "train-2"] and ("Pod", "team-a", "train-2") in w.kube.objects
    assert w.cache.job(job.uid) is not None


def test_status_echo_reuses_the_parsed_spec_and_a_spec_change_is_read_again(job_body: Any, cache: Any) -> None:
    body = job_body("train", replicas=2)
    first = cache.upsert_job(body)
    echo = cache.upsert_job({**body, "status": {"phase": "Queued"}})
    assert echo.template is first.template and echo.phase.value == "Queued"
    changed = cache.upsert_job({**body, "metadata": {**body["metadata"], "generation": 2},
                                "spec": {**body["spec"], "replicas": 3}})
    assert changed.replicas == 3 and changed.generation == 2

"""The supervision pass does not hold the leader's loop for the phases it reports (Running, Succeeded,
Failed): it assumes them, writes them in the background in the job's order, and decides a job again if
its write fails."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from kubegang.operator._job import JobView

from .conftest import FakeKube

NODES = {f"node-{i}": 8 for i in range(4)}


class HeldKube(FakeKube):
    """Holds GPUJob status writes of the phases in ``held`` until ``release`` is set; fails the next
    ``fail`` of them."""

    def __init__(self) -> None:
        super().__init__()
        self.held: set[str] = set()
        self.release = asyncio.Event()
        self.fail = 0
        self.waiting = 0

    async def patch_job_status(
        self, job: JobView, patch: Mapping[str, Any], *, prepaid: bool = False, resource_version: str | None = None
    ) -> str | None:
        if patch.get("phase") in self.held:
            self.waiting += 1
            await self.release.wait()
            self.waiting -= 1
            if self.fail:
                self.fail -= 1
                raise RuntimeError("the API server is unavailable")
        return await super().patch_job_status(job, patch, prepaid=prepaid, resource_version=resource_version)


async def _pass(w: Any) -> None:
    """One supervision pass, which must not wait for the held writes."""
    await asyncio.wait_for(w.supervisor.run_pass(), timeout=1)


async def _admitted(make_world: Any, job_body: Any, name: str) -> Any:
    """A world whose API holds every Running write, with the one-pod job ``name`` admitted and created."""
    w = make_world({"team-a": 32}, NODES)
    w.kube = w.admission.kube = w.supervisor.kube = w.admission.writer.kube = HeldKube()
    w.kube.held = {"Running"}
    w.submit(job_body(name, replicas=1, gpus=8))
    await w.cycle()
    return w


def _phase(w: Any, name: str) -> str:
    """The job's phase as the leader sees it: the API's, with this leader's assumptions over it."""
    job = w.cache.job(f"uid-{name}")
    assert job is not None and job.phase is not None
    return str(job.phase.value)


async def test_the_pass_returns_while_its_running_write_is_held_and_the_next_cycle_admits(
        make_world: Any, job_body: Any) -> None:
    w = await _admitted(make_world, job_body, "first")
    w.echo_pods()
    await _pass(w)
    await asyncio.sleep(0)
    assert w.kube.waiting == 1  # the Running write is on its way
    assert _phase(w, "first") == "Running"  # and assumed, so the next pass does not write it again
    await _pass(w)
    await asyncio.sleep(0)
    assert w.kube.waiting == 1

    w.submit(job_body("second", replicas=1, gpus=8))
    outcomes = await asyncio.wait_for(w.admission.run_cycle(), timeout=1)
    assert [o.job for o in outcomes if o.result.value == "Admitted"] == ["team-a/second"]

    w.kube.release.set()
    await w.admission.settle()
    assert w.last_status("team-a/first")["phase"] == "Running"
    assert w.last_status("team-a/second")["phase"] == "Admitted"


async def test_a_finish_is_written_after_the_running_write_still_under_way(make_world: Any, job_body: Any) -> None:
    w = await _admitted(make_world, job_body, "trial")
    w.echo_pods()
    await _pass(w)
    w.echo_pods(phase="Succeeded")
    await _pass(w)  # tears the gang down and writes Succeeded behind the held Running
    assert _phase(w, "trial") == "Succeeded"
    assert w.holds_nothing("uid-trial")
    w.kube.release.set()
    await w.admission.settle()
    phases = [p["phase"] for p in w.kube.status["team-a/trial"] if "phase" in p]
    assert phases == ["Admitted", "Running", "Succeeded"]


async def test_a_failed_write_is_decided_and_written_again(make_world: Any, job_body: Any) -> None:
    w = await _admitted(make_world, job_body, "flaky")
    w.kube.fail = 1
    w.submit(job_body("flaky", replicas=1, gpus=8, status=w.last_status("team-a/flaky")))  # the watch's echo
    w.echo_pods()
    await _pass(w)
    assert _phase(w, "flaky") == "Running"
    w.cache.wake.clear()
    w.kube.release.set()
    await w.admission.settle()
    assert w.last_status("team-a/flaky")["phase"] == "Admitted"
    assert _phase(w, "flaky") == "Admitted"  # the assumption went with the write
    assert w.cache.wake.is_set()  # and the loop is woken to decide it again
    await _pass(w)
    await w.admission.settle()
    assert w.last_status("team-a/flaky")["phase"] == "Running"

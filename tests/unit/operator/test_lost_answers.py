"""Writes the API server applied but whose answer was lost (a client timeout): the operator undoes what
it assumed, and the watch then brings the API's truth back, which the quota book must count."""

from __future__ import annotations

import asyncio
from typing import Any

from .conftest import FakeKube, World, make_job_body


class _AnswerLostOnAdmission(FakeKube):
    """Applies the first Admitted status write, then times out as if its answer never came."""

    armed = True

    async def patch_job_status(self, job: Any, patch: Any, *, prepaid: bool = False,
                               resource_version: str | None = None) -> Any:
        version = await super().patch_job_status(job, patch, prepaid=prepaid, resource_version=resource_version)
        if self.armed and patch.get("phase") == "Admitted":
            self.armed = False
            raise TimeoutError
        return version


async def test_an_admission_applied_whose_answer_was_lost_is_counted_once_the_watch_brings_it() -> None:
    world = World({"team-a": 16}, {f"node-{i}": 8 for i in range(4)})
    world.kube = _AnswerLostOnAdmission()
    world.admission.kube = world.admission.writer.kube = world.admission.sources.kube = world.kube
    world.submit(make_job_body("first", replicas=2, gpus=8))
    await world.cycle()
    applied = world.last_status("team-a/first")
    assert applied.get("phase") == "Admitted"
    assert "uid-first" not in world.quota.tree  # undone here: the write "failed"

    # The watch echoes what the API holds; the supervisor finishes that admission (creates the gang).
    echo = make_job_body("first", replicas=2, gpus=8, status=applied)
    echo["metadata"]["resourceVersion"] = "2"
    world.cache.upsert_job(echo)
    world.ledger.upsert_gpujob(echo)
    await world.supervisor.run_pass()
    await world.admission.settle()
    assert sorted(p["metadata"]["name"] for p in world.kube.pods()) == ["first-0", "first-1"]

    # A second gang of 16 GPUs does not get the same 16 GPUs of quota.
    world.submit(make_job_body("second", replicas=2, gpus=8, created="2025-01-01T00:00:05Z"))
    await world.cycle()
    await asyncio.sleep(0)
    assert "uid-first" in world.quota.tree
    assert world.last_status("team-a/second").get("phase") != "Admitted"


class _EvictionRefusedOnce(FakeKube):
    """Answers 503 to the first status write that records a preemption."""

    refuse = False

    async def patch_job_status(self, job: Any, patch: Any, *, prepaid: bool = False,
                               resource_version: str | None = None) -> Any:
        from kubegang.restclient import ApiStatusError

        if self.refuse and "Preempted" in str(patch.get("conditions")):
            self.refuse = False
            raise ApiStatusError(503, "ServiceUnavailable", "apiserver overloaded")
        return await super().patch_job_status(job, patch, prepaid=prepaid, resource_version=resource_version)


async def test_an_eviction_whose_status_write_failed_is_written_again() -> None:
    """The victim's pods are deleted and its quota released before its status is written: a failed write
    left the API saying Admitted for ever (an extender or a new leader then held its GPUs again)."""
    from .conftest import LOWER_PRIORITY

    world = World({"team-a": 16}, {f"node-{i}": 8 for i in range(4)}, preemption=LOWER_PRIORITY)
    world.kube = kube = _EvictionRefusedOnce()
    world.admission.kube = world.admission.writer.kube = world.admission.sources.kube = kube
    world.cache.set_priority("urgent", 100)
    world.submit(make_job_body("low", replicas=2, gpus=8))
    await world.cycle()
    world.echo_pods()
    world.cache.upsert_job(make_job_body("low", replicas=2, gpus=8, status=world.last_status("team-a/low")))
    kube.refuse = True
    world.submit(make_job_body("high", replicas=2, gpus=8, created="2025-01-01T00:01:00Z",
                               priorityClassName="urgent"))
    await world.cycle()
    assert not kube.refuse  # the eviction's write was refused once
    status = world.last_status("team-a/low")
    assert status.get("phase") == "Queued"
    assert any(c["type"] == "Preempted" and c["status"] == "True" for c in status["conditions"])


class _DeposedAtAdmission(FakeKube):
    """This replica loses the Lease as it is about to record an admission."""

    async def patch_job_status(self, job: Any, patch: Any, *, prepaid: bool = False,
                               resource_version: str | None = None) -> Any:
        from kubegang.operator._leader import NotLeading

        if patch.get("phase") == "Admitted":
            raise NotLeading("not leading any more: status not sent")
        return await super().patch_job_status(job, patch, prepaid=prepaid, resource_version=resource_version)


async def test_a_replica_deposed_while_admitting_leaves_the_reservation_to_the_new_leader() -> None:
    """The extender keys a reservation by the job's UID, and the new leader may have reserved that very
    job since: a deposed replica's Release would drop it."""
    world = World({"team-a": 16}, {f"node-{i}": 8 for i in range(4)})
    world.kube = _DeposedAtAdmission()
    world.admission.kube = world.admission.writer.kube = world.admission.sources.kube = world.kube
    world.submit(make_job_body("first", replicas=2, gpus=8))
    await world.cycle()
    assert world.last_status("team-a/first").get("phase") != "Admitted"
    assert "uid-first" not in world.quota.tree  # this replica's own books are undone
    assert world.ledger.reservation_count == 1  # the extender's reservation is not released

"""Fenced leadership: client-go's timings, "cannot tell" is "not leader", and no write after the deadline.

The elector runs against an in-memory Lease store with resourceVersion compare-and-swap (what the API
server does for ``replace``) and two clocks the test moves by hand: the wall clock written into the
Lease and the monotonic clock each replica decides by.
"""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

import pytest
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import Status

from kubegang.operator import _metrics as metrics
from kubegang.operator._kube import KubeApi, RateLimiter
from kubegang.operator._leader import LeaderElector, LeaseRecord, NotLeading, may_acquire

T0 = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


def _conflict() -> ApiError:
    return ApiError(status=Status(code=409, reason="Conflict", message="modified"))


class LeaseStore:
    """One Lease, with resourceVersion preconditions on replace; ``down`` makes every call fail."""

    def __init__(self) -> None:
        self.lease: Any = None
        self.version = 0
        self.down = False

    async def get(self, kind: Any, name: str, *, namespace: str) -> Any:
        if self.down:
            raise OSError("connection refused")
        if self.lease is None:
            raise ApiError(status=Status(code=404, reason="NotFound", message="not found"))
        return copy.deepcopy(self.lease)

    async def create(self, obj: Any) -> Any:
        if self.down:
            raise OSError("connection refused")
        if self.lease is not None:
            raise _conflict()
        self.version += 1
        obj.metadata.resourceVersion = str(self.version)
        self.lease = copy.deepcopy(obj)
        return obj

    async def replace(self, obj: Any) -> Any:
        if self.down:
            raise OSError("connection refused")
        if obj.metadata.resourceVersion != self.lease.metadata.resourceVersion:
            raise _conflict()
        self.version += 1
        obj.metadata.resourceVersion = str(self.version)
        self.lease = copy.deepcopy(obj)
        return obj


class Clocks:
    def __init__(self) -> None:
        self.mono = 100.0
        self.wall = T0

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.wall += dt.timedelta(seconds=seconds)


def _elector(store: LeaseStore, clocks: Clocks, identity: str, *, skew: float = 0.0) -> LeaderElector:
    return LeaderElector(store, namespace="kubegang-system", identity=identity,  # type: ignore[arg-type]
                         clock=lambda: clocks.wall + dt.timedelta(seconds=skew), monotonic=lambda: clocks.mono)


def test_a_lease_is_free_when_unheld_ours_or_unchanged_for_its_whole_duration() -> None:
    held = LeaseRecord("replica-a", T0, 15)
    assert may_acquire(None, "replica-b", unchanged_for=0)
    assert may_acquire(held, "replica-a", unchanged_for=0)
    assert not may_acquire(held, "replica-b", unchanged_for=14.9)
    assert may_acquire(held, "replica-b", unchanged_for=15)
    assert may_acquire(LeaseRecord(None, T0, 15), "replica-b", unchanged_for=0)


def test_the_timings_must_nest_as_client_gos_do() -> None:
    for lease, deadline, retry in ((15, 15, 2), (15, 10, 10), (15, 20, 2), (15, 10, 0)):
        with pytest.raises(ValueError, match=r"retry period .* < renew deadline .* < lease duration"):
            LeaderElector(LeaseStore(), namespace="n", identity="a",  # type: ignore[arg-type]
                          lease_duration_seconds=lease, renew_deadline_seconds=deadline, retry_period_seconds=retry)


async def test_the_leader_stops_at_its_renew_deadline_before_a_standby_may_take_over() -> None:
    store, clocks = LeaseStore(), Clocks()
    leader, standby = _elector(store, clocks, "a"), _elector(store, clocks, "b")
    assert await leader.try_acquire_or_renew()
    leader.leading.set()
    assert not await standby.try_acquire_or_renew()   # standby first sees the record now
    store.down = True                                  # the leader's renewals fail from here on
    clocks.advance(9.9)
    assert leader.holds() and leader.time_left() == pytest.approx(0.1)  # how long a write may be in flight
    clocks.advance(0.1)
    assert not leader.holds() and not leader.leading.is_set()   # 10 s after its last renewal: fenced
    assert leader.time_left() == 0
    store.down = False
    clocks.advance(4.9)
    assert not await standby.try_acquire_or_renew()   # 14.9 s unchanged: not yet
    clocks.advance(0.1)
    assert await standby.try_acquire_or_renew()       # 15 s: the old leader has been silent for 5 s


async def test_cannot_tell_is_not_leader() -> None:
    store, clocks = LeaseStore(), Clocks()
    leader = _elector(store, clocks, "a")
    assert await leader.try_acquire_or_renew()
    leader.leading.set()
    store.down = True
    with pytest.raises(OSError):
        await leader.try_acquire_or_renew()           # an error is no renewal: the deadline still runs
    clocks.advance(10)
    assert not leader.holds()


async def test_a_leader_that_sees_another_holder_steps_down_at_once() -> None:
    store, clocks = LeaseStore(), Clocks()
    leader = _elector(store, clocks, "a")
    assert await leader.try_acquire_or_renew()
    leader.leading.set()
    store.lease.spec.holderIdentity = "b"             # taken over while this replica was paused
    store.version += 1
    store.lease.metadata.resourceVersion = str(store.version)
    clocks.advance(1)
    assert not await leader.try_acquire_or_renew()
    assert not leader.holds()


async def test_a_standby_waits_by_its_own_clock_whatever_the_holders_clock_says() -> None:
    store, clocks = LeaseStore(), Clocks()
    skewed = _elector(store, clocks, "a", skew=-3600)   # writes renewTime an hour in the past
    standby = _elector(store, clocks, "b")
    assert await skewed.try_acquire_or_renew()
    assert not await standby.try_acquire_or_renew()
    clocks.advance(5)
    assert await skewed.try_acquire_or_renew()         # a renewal changes the record: the wait restarts
    clocks.advance(1)
    assert not await standby.try_acquire_or_renew()   # ... from when the standby sees it (t = 6)
    clocks.advance(14.9)
    assert not await standby.try_acquire_or_renew()
    clocks.advance(0.1)
    assert await standby.try_acquire_or_renew()


class RecordingClient:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def request(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        self.calls.append(method)
        return {}


async def test_a_fenced_replica_sends_no_write_at_all(job_body: Any, cache: Any) -> None:
    client = RecordingClient()
    leading = [True]
    kube = KubeApi(client, RateLimiter(qps=1000, burst=100), fence=lambda: leading[0])  # type: ignore[arg-type]
    job = cache.upsert_job(job_body("train"))
    await kube.patch_job_status(job, {"phase": "Queued"})
    assert client.calls == ["PATCH"]
    leading[0] = False
    before = metrics.FENCED_WRITES._value.get()
    for write in (kube.patch_job_status(job, {"phase": "Admitted"}), kube.delete("Pod", "ns", "p"),
                  kube.create({"kind": "Pod", "metadata": {"name": "p"}}), kube.patch_queue_status("q", {})):
        with pytest.raises(NotLeading):
            await write
    await kube.event(job, "Admitted", "x")            # events are best effort: refused, not raised
    assert client.calls == ["PATCH"]
    assert metrics.FENCED_WRITES._value.get() - before == 5


async def test_an_admission_whose_job_moved_on_is_not_recorded_and_is_decided_again(
    job_body: Any, make_world: Any
) -> None:
    w = make_world({"team-a": 16}, {"node-0": 8, "node-1": 8})
    body = job_body("train", replicas=2, gpus=8)
    body["metadata"]["resourceVersion"] = "7"
    job = w.submit(body)
    w.kube.versions[job.key] = 8                       # someone wrote the job after this replica read it
    await w.cycle()
    assert "Admitted" not in [p.get("phase") for p in w.kube.status.get(job.key, [])]
    assert not w.kube.pods() and w.holds_nothing(job.uid)   # quota and reservation given back
    body["metadata"]["resourceVersion"] = "8"          # the watch delivers the newer version
    w.submit(body)
    await w.cycle()
    assert w.last_status(job.key)["phase"] == "Admitted" and len(w.kube.pods()) == 2

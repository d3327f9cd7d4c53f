"""Invariants of the snapshot under any sequence of plan / commit / release / checkpoint / rollback.

- no GPU is ever held beyond 1000/1000 (recomputed from the allocations themselves);
- the incremental capacity index equals one rebuilt from scratch;
- a gang is held whole (all its pods) or not at all;
- rollback restores the exact state recorded at its checkpoint;
- every placement stays within the gang's required level.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kubegang.levels import Level
from kubegang.placement import (
    Allocation,
    AllocationError,
    Checkpoint,
    GangRequest,
    Placement,
    Snapshot,
    plan,
)
from kubegang.topology import GPUInfo, NodeInfo, compile_index, level_span, uniform_fabric

LEVELS = st.sampled_from([None, Level.NODE, Level.NVLINK, Level.LEAF, Level.SPINE])


def fingerprint(snapshot: Snapshot) -> tuple[Any, ...]:
    caps = {
        key: (list(c.free), [list(map(list, h)) for h in c.hist], [list(x) for x in c.free_sum],
              [list(x) for x in c.full_nodes], [sorted(b) for b in c.by_free])
        for key, c in snapshot.capacity.flavours.items()
    }
    return (
        sorted(snapshot.allocations(), key=repr),
        [list(row) for row in snapshot.gpu_milli],
        list(snapshot.cpu_used), list(snapshot.pods_used), sorted(snapshot.partial_nodes), caps,
    )


class SnapshotMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        nodes = uniform_fabric(12, gpus=4, nvlink_size=2, leaf_size=4, spine_size=2, cpu_milli=32_000)
        self.snapshot = Snapshot(compile_index(nodes))
        self.gangs: dict[str, GangRequest] = {}
        self.marks: list[tuple[Checkpoint, tuple[Any, ...], dict[str, GangRequest]]] = []
        self.counter = 0

    @rule(pods=st.integers(1, 5), gpus=st.sampled_from([1, 2, 4]), cpu=st.sampled_from([0, 8000]),
          required=LEVELS)
    def place_gang(self, pods: int, gpus: int, cpu: int, required: Level | None) -> None:
        self.counter += 1
        gang = GangRequest(f"g{self.counter}", pods=pods, gpus_per_pod=gpus, cpu_milli=cpu,
                           required_level=required)
        result = plan(gang, self.snapshot)
        if isinstance(result, Placement):
            numbers = [self.snapshot.topology.node_number[a.node] for a in result.assignments]
            span, _ = level_span(self.snapshot.topology, numbers)
            assert span == result.level
            assert required is None or span <= required
            self.snapshot.allocate_all(result.allocations(gang))
            self.gangs[gang.id] = gang

    @rule(milli=st.sampled_from([100, 300, 500, 700]))
    def place_fraction(self, milli: int) -> None:
        self.counter += 1
        gang = GangRequest(f"f{self.counter}", gpus_per_pod=0, gpu_fraction_milli=milli)
        result = plan(gang, self.snapshot)
        if isinstance(result, Placement):
            self.snapshot.allocate_all(result.allocations(gang))
            self.gangs[gang.id] = gang

    @rule(data=st.data())
    def double_booking_is_refused(self, data: st.DataObject) -> None:
        held = [a for a in self.snapshot.allocations() if a.gpu_milli == 1000]
        if not held:
            return
        victim = data.draw(st.sampled_from(held))
        before = fingerprint(self.snapshot)
        with pytest.raises(AllocationError):
            self.snapshot.allocate(Allocation("intruder", 0, victim.node, victim.gpus[:1]))
        assert fingerprint(self.snapshot) == before

    @precondition(lambda self: bool(self.gangs))
    @rule(data=st.data())
    def release_gang(self, data: st.DataObject) -> None:
        gang_id = data.draw(st.sampled_from(sorted(self.gangs)))
        released = self.snapshot.release(gang_id)
        assert len(released) == self.gangs.pop(gang_id).pods

    @rule()
    def checkpoint(self) -> None:
        self.marks.append((self.snapshot.checkpoint(), fingerprint(self.snapshot), dict(self.gangs)))

    @precondition(lambda self: bool(self.marks))
    @rule(data=st.data())
    def rollback(self, data: st.DataObject) -> None:
        i = data.draw(st.integers(0, len(self.marks) - 1))
        mark, before, gangs = self.marks[i]
        del self.marks[i:]
        self.snapshot.rollback(mark)
        assert fingerprint(self.snapshot) == before
        self.gangs = gangs

    @precondition(lambda self: bool(self.marks))
    @rule(data=st.data())
    def commit(self, data: st.DataObject) -> None:
        i = data.draw(st.integers(0, len(self.marks) - 1))
        mark = self.marks[i][0]
        del self.marks[i:]
        self.snapshot.commit(mark)

    @invariant()
    def no_gpu_over_allocated(self) -> None:
        used: dict[tuple[str, int], int] = {}
        for a in self.snapshot.allocations():
            for gpu in a.gpus:
                used[(a.node, gpu)] = used.get((a.node, gpu), 0) + a.gpu_milli
        for (node, gpu), milli in used.items():
            assert milli <= 1000
            assert self.snapshot.free_milli(node, gpu) == 1000 - milli

    @invariant()
    def gangs_whole_or_absent(self) -> None:
        for owner in self.snapshot.owners():
            assert len(self.snapshot.allocations_of(owner)) == self.gangs[owner].pods

    @invariant()
    def index_matches_rebuild(self) -> None:
        fresh = Snapshot(self.snapshot.topology)
        for a in self.snapshot.allocations():
            fresh.allocate(a)
        assert fingerprint(fresh)[1:] == fingerprint(self.snapshot)[1:]


SnapshotMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestSnapshotMachine = SnapshotMachine.TestCase


def test_rollback_of_a_release_restores_the_gang() -> None:
    snap = Snapshot(compile_index(uniform_fabric(4, leaf_size=4)))
    gang = GangRequest("g", pods=2, gpus_per_pod=8)
    result = plan(gang, snap)
    assert isinstance(result, Placement)
    snap.allocate_all(result.allocations(gang))
    before = fingerprint(snap)
    with snap.what_if():
        snap.release("g")
        assert snap.gpus_held("g") == 0
    assert fingerprint(snap) == before


def test_allocate_all_is_all_or_nothing() -> None:
    snap = Snapshot(compile_index(uniform_fabric(2, gpus=2, leaf_size=2)))
    snap.allocate(Allocation("x", 0, "node-00001", (1,)))
    before = fingerprint(snap)
    with pytest.raises(AllocationError, match="GPU 1 on node 'node-00001' has 0/1000 free"):
        snap.allocate_all([Allocation("g", 0, "node-00000", (0, 1)), Allocation("g", 1, "node-00001", (1,))])
    assert fingerprint(snap) == before


@pytest.mark.parametrize(("allocation", "why"), [
    (Allocation("x", 0, "a", (1,)), "GPU 1 on node 'a' is unhealthy"),
    (Allocation("x", 0, "a", (0, 1)), "GPU 1 on node 'a' is unhealthy"),  # a healthy one beside it does not help
    (Allocation("x", 0, "a", (2,)), "node 'a' has no GPU 2"),
    (Allocation("x", 0, "b", (0,)), "unknown node 'b'"),
], ids=["unhealthy", "unhealthy among healthy", "unknown GPU", "unknown node"])
def test_allocate_refuses_an_unhealthy_or_unknown_gpu_before_any_change(allocation: Allocation, why: str) -> None:
    """docs/placement.md: `allocate` refuses a GPU that is unhealthy, unknown or not free enough, with
    AllocationError and before any change."""
    snap = Snapshot(compile_index([NodeInfo("a", {}, (GPUInfo(0), GPUInfo(1, healthy=False)))]))
    before = fingerprint(snap)
    with pytest.raises(AllocationError, match=why):
        snap.allocate(allocation)
    assert fingerprint(snap) == before


def test_closed_checkpoint_cannot_be_reused() -> None:
    snap = Snapshot(compile_index(uniform_fabric(2, leaf_size=2)))
    mark = snap.checkpoint()
    snap.rollback(mark)
    with pytest.raises(ValueError, match="not open"):
        snap.rollback(mark)


def test_random_sequences_never_double_book() -> None:
    rng = random.Random(7)
    snap = Snapshot(compile_index(uniform_fabric(16, gpus=8, leaf_size=4, spine_size=2)))
    live: list[str] = []
    for step in range(400):
        if live and rng.random() < 0.4:
            snap.release(live.pop(rng.randrange(len(live))))
            continue
        gang = GangRequest(f"g{step}", pods=rng.randint(1, 4), gpus_per_pod=rng.choice([1, 2, 8]))
        result = plan(gang, snap)
        if isinstance(result, Placement):
            snap.allocate_all(result.allocations(gang))
            live.append(gang.id)
    held = sum(a.whole_gpus for a in snap.allocations())
    free = sum(row.count(1000) for row in snap.gpu_milli)
    assert held + free == 16 * 8

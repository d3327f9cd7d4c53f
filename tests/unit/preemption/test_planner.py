"""The preemption planner: victims always suffice, are never more than needed, and are cheapest."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from kubegang.levels import Level
from kubegang.placement import Allocation, GangRequest, Placement, Snapshot, plan
from kubegang.preemption import Candidate, plan_preemption
from kubegang.topology import compile_index, uniform_fabric


def _fits_after(snapshot: Snapshot, gang: GangRequest, victims: list[str]) -> bool:
    with snapshot.what_if():
        for v in victims:
            snapshot.release(v)
        return isinstance(plan(gang, snapshot), Placement)


def _busy_cluster(seed: int) -> tuple[Snapshot, list[Candidate]]:
    rng = random.Random(seed)
    snap = Snapshot(compile_index(uniform_fabric(16, gpus=8, leaf_size=4, spine_size=2)))
    candidates = []
    for i in range(60):
        gang = GangRequest(f"run-{i}", pods=rng.choice([1, 1, 2, 4]), gpus_per_pod=rng.choice([1, 2, 4, 8]))
        result = plan(gang, snap)
        if isinstance(result, Placement):
            snap.allocate_all(result.allocations(gang))
            candidates.append(Candidate(gang.id, priority=rng.randint(0, 3), start_time=float(i)))
    return snap, candidates


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), pods=st.integers(1, 8), gpus=st.sampled_from([1, 2, 4, 8]),
       required=st.sampled_from([None, Level.NODE, Level.LEAF, Level.SPINE]), share=st.floats(0.2, 1.0))
def test_victims_suffice_and_each_is_needed(seed: int, pods: int, gpus: int, required: Level | None,
                                           share: float) -> None:
    snap, candidates = _busy_cluster(seed)
    allowed = candidates[: max(1, int(len(candidates) * share))]
    gang = GangRequest("waiting", pods=pods, gpus_per_pod=gpus, required_level=required)
    before = sorted(snap.allocations(), key=repr)
    result = plan_preemption(gang, snap, allowed)
    assert sorted(snap.allocations(), key=repr) == before, "the planner must leave the snapshot unchanged"
    if result is None:
        assert not _fits_after(snap, gang, [c.gang_id for c in allowed])
        return
    victims = list(result.victims)
    assert set(victims) <= {c.gang_id for c in allowed}
    assert _fits_after(snap, gang, victims)
    assert result.gpus_evicted == sum(snap.gpus_held(v) for v in victims)
    for v in victims:
        assert not _fits_after(snap, gang, [x for x in victims if x != v]), f"{v} was not needed"


def test_no_victims_when_the_gang_already_fits() -> None:
    snap = Snapshot(compile_index(uniform_fabric(4, leaf_size=4)))
    result = plan_preemption(GangRequest("g", pods=2, gpus_per_pod=8), snap, [])
    assert result is not None
    assert result.victims == ()


def test_prefers_fewer_gpus_then_lower_priority_then_most_recent() -> None:
    snap = Snapshot(compile_index(uniform_fabric(3, gpus=8, leaf_size=3)))
    for name, node in (("big", "node-00000"), ("old", "node-00001"), ("new", "node-00002")):
        size = 8 if name == "big" else 4
        gang = GangRequest(name, pods=1, gpus_per_pod=size)
        snap.allocate(Allocation(name, 0, node, tuple(range(size))))
        assert gang.total_gpus == size
    candidates = [Candidate("big", priority=0, start_time=3.0), Candidate("old", priority=1, start_time=1.0),
                  Candidate("new", priority=1, start_time=2.0)]
    result = plan_preemption(GangRequest("w", pods=1, gpus_per_pod=8), snap, candidates)
    assert result is not None
    assert result.victims == ("new",), "4 GPUs beat 8; equal priority: the most recently started goes"
    assert result.gpus_evicted == 4


def test_victims_are_chosen_inside_one_leaf_for_a_leaf_constrained_gang() -> None:
    snap = Snapshot(compile_index(uniform_fabric(8, gpus=8, leaf_size=4)))
    for i in range(8):
        snap.allocate(Allocation(f"j{i}", 0, f"node-{i:05d}", tuple(range(8))))
    candidates = [Candidate(f"j{i}", start_time=float(i)) for i in range(8)]
    gang = GangRequest("w", pods=2, gpus_per_pod=8, required_level=Level.LEAF)
    result = plan_preemption(gang, snap, candidates)
    assert result is not None
    assert len(result.victims) == 2
    leaves = {int(v[1:]) // 4 for v in result.victims}
    assert len(leaves) == 1
    assert result.placement.level is Level.LEAF


def test_none_when_even_every_candidate_is_not_enough() -> None:
    snap = Snapshot(compile_index(uniform_fabric(2, gpus=8, leaf_size=2)))
    snap.allocate(Allocation("a", 0, "node-00000", tuple(range(8))))
    snap.allocate(Allocation("b", 0, "node-00001", tuple(range(8))))
    assert plan_preemption(GangRequest("w", pods=2, gpus_per_pod=8), snap, [Candidate("a")]) is None


def test_a_wider_domain_with_the_same_candidates_and_more_room_is_tried() -> None:
    # Two leaves of 4 nodes under one spine; the gang needs 3 whole nodes in the spine. Leaf 0 is
    # full (three nodes held by gangs that may not be evicted, one by candidate r1); leaf 1 has two
    # free nodes. Evicting r1 frees a third node in the spine. Leaf 0 has the same candidates as the
    # spine but can never hold the gang; the planner used to skip the spine as "the same
    # candidates as a narrower domain" and answer None.
    snap = Snapshot(compile_index(uniform_fabric(8, gpus=8, leaf_size=4, spine_size=2)))
    for i, owner in ((0, "keep-0"), (1, "keep-1"), (2, "keep-2"), (3, "r1"), (6, "keep-6"), (7, "keep-7")):
        snap.allocate(Allocation(owner, 0, f"node-{i:05d}", tuple(range(8))))
    for required in (Level.SPINE, None):
        gang = GangRequest("w", pods=3, gpus_per_pod=8, required_level=required)
        result = plan_preemption(gang, snap, [Candidate("r1")])
        assert result is not None, required
        assert result.victims == ("r1",)
        assert {a.node for a in result.placement.assignments} == {"node-00003", "node-00004", "node-00005"}

"""``plan_preemption``'s ``gone``: gangs evicted in any case are released before the search, never victims.

What the admission cycle asks as ``WhatIf.gone`` (its quota victims): the planner answers the cheapest
set to evict on top of them, as if they were not there, and leaves the snapshot as it was."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from kubegang.placement import GangRequest, Placement, Snapshot, plan
from kubegang.preemption import Candidate, plan_preemption
from kubegang.topology import compile_index, uniform_fabric


def _run(snap: Snapshot, uid: str, node: int, gpus: int) -> None:
    names = [n.name for n in snap.topology.nodes]
    gang = GangRequest(uid, pods=1, gpus_per_pod=gpus)
    placed = plan(GangRequest(uid, pods=1, gpus_per_pod=gpus,
                              excluded_nodes=frozenset(n for i, n in enumerate(names) if i != node)), snap)
    assert isinstance(placed, Placement)
    snap.allocate_all(placed.allocations(gang))


def _fits_after(snap: Snapshot, gang: GangRequest, released: list[str]) -> bool:
    with snap.what_if():
        for uid in released:
            snap.release(uid)
        return isinstance(plan(gang, snap), Placement)


def test_the_cheapest_addition_to_what_is_gone() -> None:
    # node 0: b (8 GPUs); node 1: n1 (4); node 2: n2 (2). A 2x8 gang: over all three, the planner picks
    # n1 and n2 (6 GPUs); with b gone, n2 alone (2 GPUs) is to evict on top of it.
    snap = Snapshot(compile_index(uniform_fabric(3, gpus=8)))
    _run(snap, "b", 0, 8)
    _run(snap, "n1", 1, 4)
    _run(snap, "n2", 2, 2)
    gang = GangRequest("p", pods=2, gpus_per_pod=8)
    before = sorted(snap.allocations(), key=repr)
    everyone = plan_preemption(gang, snap, [Candidate("b", 0), Candidate("n1", 1), Candidate("n2", 2)])
    assert everyone is not None and set(everyone.victims) == {"n1", "n2"}
    found = plan_preemption(gang, snap, [Candidate("n1", 0), Candidate("n2", 1)], gone=["b"])
    assert found is not None and found.victims == ("n2",) and found.gpus_evicted == 2
    assert set(found.placement.nodes) == {snap.topology.nodes[0].name, snap.topology.nodes[2].name}
    alone = plan_preemption(GangRequest("p", pods=1, gpus_per_pod=8), snap, [Candidate("n1")], gone=["b"])
    assert alone is not None and alone.victims == () and alone.placement.nodes == (snap.topology.nodes[0].name,)
    # A gang both gone and offered is no victim; the gang itself is never released; not enough: None.
    both = plan_preemption(gang, snap, [Candidate("b"), Candidate("n2")], gone=["b"])
    assert both is not None and both.victims == ("n2",)
    assert plan_preemption(GangRequest("p", pods=3, gpus_per_pod=8), snap, [Candidate("n1")], gone=["b", "p"]) is None
    assert sorted(snap.allocations(), key=repr) == before, "the planner must leave the snapshot unchanged"


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), pods=st.integers(1, 6), gpus=st.sampled_from([1, 2, 4, 8]),
       gone_share=st.floats(0.0, 0.5))
def test_gone_is_the_same_as_released_beforehand(seed: int, pods: int, gpus: int, gone_share: float) -> None:
    rng = random.Random(seed)
    snap = Snapshot(compile_index(uniform_fabric(12, gpus=8, leaf_size=4, spine_size=2)))
    running: list[str] = []
    for i in range(40):
        gang = GangRequest(f"run-{i}", pods=rng.choice([1, 1, 2]), gpus_per_pod=rng.choice([1, 2, 4, 8]))
        placed = plan(gang, snap)
        if isinstance(placed, Placement):
            snap.allocate_all(placed.allocations(gang))
            running.append(gang.id)
    cut = int(len(running) * gone_share)
    gone, offered = running[:cut], [Candidate(uid, priority=i) for i, uid in enumerate(running[cut:])]
    gang = GangRequest("waiting", pods=pods, gpus_per_pod=gpus)
    before = sorted(snap.allocations(), key=repr)
    found = plan_preemption(gang, snap, offered, gone=gone)
    assert sorted(snap.allocations(), key=repr) == before
    with snap.what_if():
        for uid in gone:
            snap.release(uid)
        expected = plan_preemption(gang, snap, offered)
    assert found == expected
    if found is not None:
        assert not set(found.victims) & set(gone)
        assert _fits_after(snap, gang, [*gone, *found.victims])

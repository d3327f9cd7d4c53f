"""The capacity index stays equal to a from-scratch recount under random incremental updates."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubegang.levels import Level
from kubegang.topology import ANY_FLAVOUR, CapacityIndex, compile_index, uniform_fabric

INDEX = compile_index(uniform_fabric(24, gpus=8, nvlink_size=2, leaf_size=6, spine_size=2, block_size=1))


def _recount(index: CapacityIndex, free: list[int], level: Level, domain: int, g: int) -> tuple[int, int, int]:
    members = index.topology.members[level][domain]
    pods = sum(free[n] // g for n in members)
    full = sum(1 for n in members if free[n] == 8)
    return pods, sum(free[n] for n in members), full


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 23), st.integers(0, 8)), max_size=60), st.sampled_from([1, 2, 3, 8]))
def test_incremental_updates_match_recount(changes: list[tuple[int, int]], g: int) -> None:
    index = CapacityIndex(INDEX)
    free = [8] * 24
    for node, value in changes:
        index.set_free(ANY_FLAVOUR, node, value)
        free[node] = value
    cap = index.flavours[ANY_FLAVOUR]
    for level in (Level.NVLINK, Level.LEAF, Level.SPINE, Level.BLOCK, Level.CLUSTER):
        for d in range(INDEX.domain_count(level)):
            pods, total, full = _recount(index, free, level, d, g)
            assert cap.pods_fit(level, d, g) == pods
            assert cap.free_sum[level][d] == total
            assert cap.full_nodes[level][d] == full
            assert cap.nodes_with(level, d, g) == sum(1 for n in INDEX.members[level][d] if free[n] >= g)
    for f, nodes in enumerate(cap.by_free):
        assert nodes == {n for n in range(24) if free[n] == f}


def test_out_of_range_free_count_is_refused() -> None:
    index = CapacityIndex(INDEX)
    with pytest.raises(ValueError, match=r"must be in 0\.\.8, got 9"):
        index.set_free(ANY_FLAVOUR, 0, 9)

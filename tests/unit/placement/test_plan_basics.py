"""Plan on small fabrics: span, best fit, reasons, fractions, flavours and constraints."""

from __future__ import annotations

from kubegang.levels import Level
from kubegang.placement import GangRequest, Placement, Snapshot, Toleration, Unplaceable, plan
from kubegang.topology import GPUInfo, NodeInfo, Taint, compile_index, uniform_fabric


def _snapshot(nodes: list[NodeInfo]) -> Snapshot:
    return Snapshot(compile_index(nodes))


def _place(snapshot: Snapshot, gang: GangRequest) -> Placement:
    result = plan(gang, snapshot)
    assert isinstance(result, Placement), result
    snapshot.allocate_all(result.allocations(gang))
    return result


def test_gang_goes_to_the_tightest_leaf_that_holds_it() -> None:
    snap = _snapshot(uniform_fabric(32, leaf_size=8, spine_size=2))
    _place(snap, GangRequest("filler", pods=5, gpus_per_pod=8))  # leaf-0 keeps 3 whole nodes
    result = _place(snap, GangRequest("g", pods=3, gpus_per_pod=8))
    assert result.level is Level.LEAF
    assert result.domain == "leaf-0"


def test_gang_wider_than_a_leaf_spans_the_spine() -> None:
    snap = _snapshot(uniform_fabric(32, leaf_size=8, spine_size=2))
    result = _place(snap, GangRequest("g", pods=12, gpus_per_pod=8))
    assert result.level is Level.SPINE
    assert len(result.nodes) == 12
    # Fewest leaves: one whole leaf plus the remainder in one other leaf.
    leaves = {int(n.split("-")[1]) // 8 for n in result.nodes}
    assert len(leaves) == 2


def test_small_pods_fill_a_partly_used_node_first() -> None:
    snap = _snapshot(uniform_fabric(4, leaf_size=4))
    _place(snap, GangRequest("a", pods=1, gpus_per_pod=5))
    used_node = snap.allocations_of("a")[0].node
    result = _place(snap, GangRequest("b", pods=1, gpus_per_pod=3))
    assert result.nodes == (used_node,)


def test_required_level_is_honoured_and_reason_names_the_numbers() -> None:
    snap = _snapshot(uniform_fabric(32, leaf_size=8, spine_size=2))
    _place(snap, GangRequest("filler", pods=5, gpus_per_pod=8))
    _place(snap, GangRequest("f1", pods=1, gpus_per_pod=8))
    _place(snap, GangRequest("f2", pods=6, gpus_per_pod=8))  # leaf-1 keeps 2 whole nodes
    result = plan(GangRequest("g", pods=10, gpus_per_pod=8, required_level=Level.LEAF), snap)
    assert isinstance(result, Unplaceable) and result.never  # a leaf has 8 nodes: it can never fit
    assert result.reason == (
        "needs 10 nodes x 8 GPUs in one leaf; the best leaf (leaf-2) has 8 such nodes free; "
        "no leaf could ever hold it (at most 8 with every GPU free)"
    )
    assert result.best_pods == 8


def test_single_node_jobs_go_to_the_leaf_with_fewest_whole_free_nodes() -> None:
    snap = _snapshot(uniform_fabric(32, leaf_size=8, spine_size=2))
    _place(snap, GangRequest("filler", pods=5, gpus_per_pod=8))
    for i in range(3):
        result = _place(snap, GangRequest(f"f{i}", pods=1, gpus_per_pod=8))
        assert result.nodes[0] < "node-00008", "should fill leaf-0 and keep the empty leaves whole"


def test_taints_block_nodes_and_tolerations_unblock_them() -> None:
    tainted = tuple(Taint("dedicated", "infer") for _ in range(1))
    nodes = [
        NodeInfo(f"n{i}", {"kubegang.io/leaf": "l0"}, tuple(GPUInfo(j) for j in range(4)), taints=tainted)
        for i in range(2)
    ]
    snap = _snapshot(nodes)
    blocked = plan(GangRequest("g", pods=2, gpus_per_pod=4), snap)
    assert isinstance(blocked, Unplaceable)
    assert "taint" in blocked.reason
    tolerant = GangRequest("g", pods=2, gpus_per_pod=4, tolerations=(Toleration("dedicated", "Exists"),))
    ok = plan(tolerant, snap)
    assert isinstance(ok, Placement)


def test_fractional_pods_share_a_gpu_before_breaking_a_whole_one() -> None:
    snap = _snapshot(uniform_fabric(2, gpus=2, leaf_size=2))
    first = _place(snap, GangRequest("a", gpus_per_pod=0, gpu_fraction_milli=600))
    second = _place(snap, GangRequest("b", gpus_per_pod=0, gpu_fraction_milli=400))
    assert second.assignments[0].node == first.assignments[0].node
    assert second.assignments[0].gpus == first.assignments[0].gpus
    third = _place(snap, GangRequest("c", gpus_per_pod=0, gpu_fraction_milli=400))
    assert third.assignments[0].gpus != first.assignments[0].gpus or third.nodes != first.nodes


def test_product_flavour_only_uses_matching_gpus() -> None:
    nodes = [
        NodeInfo("a100", {}, tuple(GPUInfo(j, "A100") for j in range(8))),
        NodeInfo("h100", {}, tuple(GPUInfo(j, "H100") for j in range(8))),
    ]
    snap = _snapshot(nodes)
    result = plan(GangRequest("g", pods=1, gpus_per_pod=4, gpu_product="H100"), snap)
    assert isinstance(result, Placement)
    assert result.nodes == ("h100",)
    missing = plan(GangRequest("g", pods=1, gpus_per_pod=4, gpu_product="B200"), snap)
    assert isinstance(missing, Unplaceable)
    assert "B200" in missing.reason


def test_free_gpus_that_no_node_of_the_job_may_use_are_not_reported_as_room() -> None:
    """A job pinned by its node selector to nodes that are busy: the free ones elsewhere are no room for it."""
    nodes = [NodeInfo(name=f"n{i}", gpus=tuple(GPUInfo(index=g) for g in range(8)), labels={"pool": "a" if i < 2
             else "b"}) for i in range(6)]
    snap = _snapshot(nodes)
    _place(snap, GangRequest("busy", pods=2, gpus_per_pod=8, node_selector={"pool": "a"}))
    result = plan(GangRequest("g", pods=2, gpus_per_pod=8, node_selector={"pool": "a"}), snap)
    assert isinstance(result, Unplaceable), result
    assert result.reason.endswith("the cluster has 4 such nodes free by GPU count, but at most 0 usable "
                                  "(4 by node selector)"), result.reason
    assert result.best_pods == 0

"""Building and validating the topology graph: clear errors for inconsistent fabrics."""

from __future__ import annotations

import pytest

from kubegang.levels import Level
from kubegang.topology import (
    PRESETS,
    GPUInfo,
    NodeInfo,
    TopologyError,
    TopologyLabels,
    build_graph,
    compile_index,
    validate_graph,
)


def _node(name: str, leaf: str | None = None, spine: str | None = None, **kw: object) -> NodeInfo:
    labels = {}
    if leaf:
        labels["kubegang.io/leaf"] = leaf
    if spine:
        labels["kubegang.io/spine"] = spine
    return NodeInfo(name, labels, tuple(GPUInfo(i) for i in range(2)), **kw)  # type: ignore[arg-type]


def test_leaf_under_two_spines_is_refused() -> None:
    with pytest.raises(TopologyError, match="leaf 'l0' is in two spines: 's0' and 's1'"):
        build_graph([_node("a", "l0", "s0"), _node("b", "l0", "s1")])


@pytest.mark.parametrize("labelled_first", [True, False])
def test_a_leaf_whose_nodes_disagree_about_having_a_spine_is_refused(labelled_first: bool) -> None:
    """docs/placement.md: some nodes of a leaf labelled with a spine and some not is an error, not a
    guess (the unlabelled node's own singleton spine, ``~l0``, is a second spine of the leaf)."""
    nodes = [_node("a", "l0", "s0"), _node("b", "l0")]
    spines = "'s0' and '~l0'" if labelled_first else "'~l0' and 's0'"
    with pytest.raises(TopologyError, match=f"leaf 'l0' is in two spines: {spines}"):
        build_graph(nodes if labelled_first else nodes[::-1])


def test_nvlink_domain_across_two_leaves_is_refused() -> None:
    nodes = [_node("a", "l0", nvlink_domain="nv0"), _node("b", "l1", nvlink_domain="nv0")]
    with pytest.raises(TopologyError, match="nvlink 'nv0' is in two leaves"):
        build_graph(nodes)


def test_gpu_reported_by_two_nodes_is_refused() -> None:
    a = NodeInfo("a", {}, (GPUInfo(0, uuid="GPU-1"),))
    b = NodeInfo("b", {}, (GPUInfo(0, uuid="GPU-1"),))
    with pytest.raises(TopologyError, match="GPU GPU-1 is reported by two nodes: 'a' and 'b'"):
        build_graph([a, b])


def test_duplicate_node_and_gpu_index_are_refused() -> None:
    with pytest.raises(TopologyError, match="node 'a' is listed twice"):
        build_graph([_node("a"), _node("a")])
    with pytest.raises(ValueError, match="lists GPU index 0 twice"):
        NodeInfo("a", {}, (GPUInfo(0), GPUInfo(0)))


def test_hand_built_graph_errors() -> None:
    cluster, spine, leaf = (Level.CLUSTER, "c"), (Level.SPINE, "s"), (Level.LEAF, "l")
    two_parents = [(cluster, (Level.BLOCK, "b1")), (cluster, (Level.BLOCK, "b2")),
                   ((Level.BLOCK, "b1"), spine), ((Level.BLOCK, "b2"), spine)]
    with pytest.raises(TopologyError, match="spine 's' is in 2 blocks: 'b1', 'b2'"):
        validate_graph(two_parents)
    cycle = [(spine, leaf), (leaf, spine)]
    with pytest.raises(TopologyError, match=r"cycle: (s -> l -> s|l -> s -> l)"):
        validate_graph(cycle)
    orphan = [(cluster, (Level.BLOCK, "b")), (spine, leaf)]
    with pytest.raises(TopologyError, match="spine 's' has no parent"):
        validate_graph(orphan)
    skip = [(cluster, leaf)]
    with pytest.raises(TopologyError, match="cluster 'c' contains leaf 'l'; a cluster may only contain blocks"):
        validate_graph(skip)


def test_unlabelled_nodes_form_singleton_domains() -> None:
    index = compile_index([_node("a"), _node("b"), _node("c", "l0"), _node("d", "l0")])
    leaves = index.domain_names[Level.LEAF]
    assert set(leaves) == {"~~a", "~~b", "l0"}
    # Only l0 groups two nodes; the unlabelled ones never share a leaf.
    assert [leaves[d] for d in index.proper[Level.LEAF]] == ["l0"]
    assert index.domain_of[Level.LEAF][index.node_number["a"]] != index.domain_of[Level.LEAF][index.node_number["b"]]


def test_presets_map_cloud_labels_to_levels() -> None:
    aws = TopologyLabels.preset("aws")
    labels = {f"topology.k8s.aws/network-node-layer-{i}": f"nn-{i}" for i in (1, 2, 3)}
    node = NodeInfo("n", labels, (GPUInfo(0),))
    index = compile_index([node], aws)
    assert index.domain_names[Level.LEAF] == ("nn-3",)
    assert index.domain_names[Level.BLOCK] == ("nn-1",)
    assert {"default", "gke", "aws", "oci", "nvidia"} <= set(PRESETS)
    with pytest.raises(ValueError, match="allowed: default, gke"):
        TopologyLabels.preset("azure-typo")


def test_graph_shape() -> None:
    graph = build_graph([_node("a", "l0", "s0"), _node("b", "l0", "s0")])
    assert graph.has_edge((Level.LEAF, "l0"), (Level.NVLINK, "~a"))
    assert graph.has_edge((Level.NODE, "a"), (Level.GPU, "a/1"))
    assert graph.parent((Level.SPINE, "s0")) == (Level.BLOCK, "~s0")
    assert graph.parent((Level.CLUSTER, "cluster")) is None
    assert set(graph.nodes) == {"a", "b"}

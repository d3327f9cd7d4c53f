"""Cluster shapes: the shipped ones load with the sizes their names promise; bad ones name the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubegang.shapes import (
    REPLAY_DUMP_ANNOTATION,
    REPLAY_FABRIC_ANNOTATION,
    ShapeError,
    load_shape,
    node_infos,
    node_manifest,
)

SHAPES = Path(__file__).resolve().parents[3] / "hack" / "shapes"


@pytest.mark.parametrize(("name", "nodes", "gpus"), [
    ("superpod-h100", 128, 1024), ("gb200-nvl72", 72, 288), ("openb", 1213, 6212), ("bench-1024", 1024, 8192),
    ("bench-256", 256, 2048), ("bench-4096", 4096, 32768),
])
def test_shipped_shapes(name: str, nodes: int, gpus: int) -> None:
    shape = load_shape(SHAPES / f"{name}.yaml")
    assert (shape.node_count, shape.gpu_count) == (nodes, gpus)
    infos = node_infos(shape)
    assert len({n.name for n in infos}) == nodes
    assert sum(len(n.gpus) for n in infos) == gpus


def test_gb200_racks_are_nvlink_domains() -> None:
    infos = node_infos(load_shape(SHAPES / "gb200-nvl72.yaml"))
    domains: dict[str | None, int] = {}
    for node in infos:
        domains[node.nvlink_domain] = domains.get(node.nvlink_domain, 0) + len(node.gpus)
    assert None not in domains
    assert sorted(domains.values()) == [72, 72, 72, 72]


def test_superpod_nodes_are_their_own_nvlink_domain_and_su_is_the_leaf() -> None:
    infos = node_infos(load_shape(SHAPES / "superpod-h100.yaml"))
    assert all(n.nvlink_domain is None for n in infos)
    leaves = {n.labels["kubegang.io/leaf"] for n in infos}
    assert len(leaves) == 4


def test_node_manifest_carries_capacity_labels_and_replay_annotations() -> None:
    shape = load_shape(SHAPES / "gb200-nvl72.yaml")
    name, group = next(shape.nodes())
    node = node_manifest(name, group)
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "4"
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-GB200"
    assert node["metadata"]["annotations"][REPLAY_DUMP_ANNOTATION] == "gb200-nvl72-tray"
    uuid, clique = node["metadata"]["annotations"][REPLAY_FABRIC_ANNOTATION].split("/")
    assert (uuid, clique) == (group.fabric.cluster_uuid, "1")  # type: ignore[union-attr]


@pytest.mark.parametrize(("body", "field"), [
    ("nodeGroups: [{name: a, count: 0, product: X}]", "nodeGroups[0](name=a).count"),
    ("nodeGroups: [{name: a, count: 2, gpus: -1, product: X}]", "nodeGroups[0](name=a).gpus"),
    ("nodeGroups: [{name: A_B, count: 1, product: X}]", "nodeGroups[0](name=A_B).name"),
    ("nodeGroups: [{name: a, count: 1, gpus: 8}]", "'product' is required"),
    ("nodeGroups: [{name: a, count: 1, names: [x], product: X}]", "exactly one of 'count' or 'names'"),
    ("nodeGroups: [{name: a, count: 1, product: X, colour: red}]", "nodeGroups[0](name=a).colour"),
    ("nodeGroups: [{name: a, count: 1, product: X, cpu: lots}]", "nodeGroups[0](name=a).cpu"),
    ("nodeGroups: [{name: a, names: [n1], product: X}, {name: b, names: [n1], product: X}]", "'n1' appears twice"),
    ("nodeGroups: []", "nodeGroups"),
])
def test_malformed_shape_names_the_field(tmp_path: Path, body: str, field: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(f"apiVersion: kubegang.io/v1alpha1\nkind: ClusterShape\nname: bad\n{body}\n")
    with pytest.raises(ShapeError) as err:
        load_shape(path)
    assert str(path) in str(err.value)
    assert field in str(err.value)


def test_not_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    path.write_text("- a\n- b\n")
    with pytest.raises(ShapeError, match="a shape is a mapping"):
        load_shape(path)

"""Cluster shapes: a declarative description of a GPU cluster's nodes and fabric.

One file format serves three users: ``hack/cluster`` turns a shape into fake (kwok) nodes, the
replay agent finds each node's NVML dump through the annotations the shape puts on it, and the
benchmarks build their simulated cluster from the same file. Keeping the shape in the core (pure,
no I/O beyond reading the file) means a test, a benchmark and the demo can never disagree about
what "the superpod" is.

A shape is a list of node groups; every node of a group is identical but for its name. Fabric
membership (leaf / spine / block) is expressed as the node labels that a cloud or an admin would
set; NVLink domains come from the NVML fabric info (``fabric``), as the agent would read it.

The shipped shapes live in the package (``kubegang/_shapes/*.yaml``, so a plain ``pip install``
has them); ``hack/shapes/*.yaml`` are symlinks to them for the scripts under ``hack/``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from kubegang.api import parse_quantity
from kubegang.topology import DUMP_LAYOUTS, GPUInfo, NodeInfo, layout

_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|k|Ki|Mi|Gi|Ti|Pi|M|G|T|P)?$"

REPLAY_DUMP_ANNOTATION = "kubegang.io/replay-dump"
"""Node annotation naming the NVML dump a replay agent serves for this node."""
REPLAY_FABRIC_ANNOTATION = "kubegang.io/replay-fabric"
"""Node annotation ``<clusterUuid>/<cliqueId>`` overriding the dump's NVLink fabric info."""
FAKE_NODE_LABEL = ("type", "kwok")
"""The label kwok is told to manage; real nodes never carry it."""
GPU_RESOURCE = "nvidia.com/gpu"
SHAPES_DIR = Path(__file__).resolve().parent / "_shapes"
"""Where the shipped shapes are installed (package data); ``hack/shapes`` links here."""


class ShapeError(ValueError):
    """A shape file that cannot be used; the message names the file and the field."""


class Fabric(BaseModel):
    """NVSwitch fabric registration of every node in a group (one multi-node NVLink domain)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    cluster_uuid: str = Field(alias="clusterUuid", pattern=r"^[0-9a-fA-F-]{32,36}$")
    """The fabric's cluster UUID; all nodes of one NVLink domain share it."""
    clique_id: int = Field(alias="cliqueId", ge=0)
    """The clique within the cluster UUID."""


class NodeGroup(BaseModel):
    """Identical nodes; names are ``<name>-<index>`` unless ``names`` lists them."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: Annotated[str, Field(pattern=_DNS_LABEL, max_length=50)]
    """Group name, and the node-name prefix."""
    count: Annotated[int, Field(ge=1, le=100_000)] | None = None
    """How many nodes; omit when ``names`` is given."""
    names: list[Annotated[str, Field(pattern=_DNS_LABEL, max_length=63)]] | None = None
    """Explicit node names (for shapes imported from traces)."""
    gpus: Annotated[int, Field(ge=0, le=64)] = 8
    """Whole GPUs per node (``nvidia.com/gpu`` capacity)."""
    product: str | None = None
    """GPU product, as GPU feature discovery writes ``nvidia.com/gpu.product``."""
    cpu: Annotated[str, Field(pattern=_QUANTITY)] = "128"
    """CPU capacity, a Kubernetes quantity."""
    memory: Annotated[str, Field(pattern=_QUANTITY)] = "1024Gi"
    """Memory capacity, a Kubernetes quantity."""
    pods: Annotated[int, Field(ge=1, le=1000)] = 110
    """Pod capacity."""
    nvml: str | None = None
    """Name of the NVML dump (in the agent's replay fixtures) describing one node of this group."""
    fabric: Fabric | None = None
    """NVLink multi-node domain registration, as the NVSwitch fabric manager reports it."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Extra node labels, typically the fabric ones (leaf, spine, block)."""

    @model_validator(mode="after")
    def _count_or_names(self) -> NodeGroup:
        if (self.count is None) == (self.names is None):
            raise ValueError("give exactly one of 'count' or 'names'")
        if self.names is not None and len(set(self.names)) != len(self.names):
            raise ValueError("'names' has duplicates")
        if self.gpus > 0 and not self.product:
            raise ValueError("'product' is required when 'gpus' > 0")
        return self

    def node_names(self) -> list[str]:
        """Every node name of the group, in order."""
        if self.names is not None:
            return list(self.names)
        assert self.count is not None
        width = max(3, len(str(self.count - 1)))
        return [f"{self.name}-{i:0{width}d}" for i in range(self.count)]


class ClusterShape(BaseModel):
    """A whole fake cluster."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    api_version: str = Field(alias="apiVersion", pattern=r"^kubegang\.io/v1alpha1$")
    kind: str = Field(pattern=r"^ClusterShape$")
    name: Annotated[str, Field(pattern=_DNS_LABEL)]
    description: str = ""
    node_groups: list[NodeGroup] = Field(alias="nodeGroups", min_length=1)

    @model_validator(mode="after")
    def _unique_names(self) -> ClusterShape:
        seen: set[str] = set()
        for group in self.node_groups:
            for node in group.node_names():
                if node in seen:
                    raise ValueError(f"node name {node!r} appears twice (group {group.name!r})")
                seen.add(node)
        return self

    def nodes(self) -> Iterator[tuple[str, NodeGroup]]:
        """Every (node name, its group)."""
        for group in self.node_groups:
            for node in group.node_names():
                yield node, group

    @property
    def node_count(self) -> int:
        return sum(len(g.node_names()) for g in self.node_groups)

    @property
    def gpu_count(self) -> int:
        return sum(len(g.node_names()) * g.gpus for g in self.node_groups)


def load_shape(path: str | Path) -> ClusterShape:
    """Read and validate a shape file; a ShapeError names the file and every bad field."""
    path = Path(path)
    try:
        raw: Any = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ShapeError(f"{path}: cannot read shape: {exc}") from exc
    if not isinstance(raw, dict):
        raise ShapeError(f"{path}: a shape is a mapping with apiVersion, kind, name and nodeGroups")
    try:
        return ClusterShape.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{_field_path(raw, e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ShapeError(f"{path}: invalid shape: {problems}") from None


def shipped_shapes() -> list[str]:
    """The names of the shapes shipped with kubegang (``superpod-h100``, ``gb200-nvl72``, ...)."""
    return sorted(p.stem for p in SHAPES_DIR.glob("*.yaml"))


def find_shape(name_or_path: str | Path) -> Path:
    """The shape file meant by ``name_or_path``: an existing file, else the shipped shape of that name.

    A file wins over a shipped name, so a local ``./openb`` is read as given. A bare name that is
    neither raises a ShapeError listing the shipped shapes, as does a missing path whose file name is
    a shipped shape's (``hack/shapes/superpod-h100.yaml`` outside the repo); any other path is returned
    unchanged (and :func:`load_shape` reports it unreadable).
    """
    path = Path(name_or_path)
    if path.exists():
        return path
    text = str(name_or_path)
    if "/" in text or "\\" in text or path.suffix in (".yaml", ".yml"):
        if (SHAPES_DIR / f"{path.stem}.yaml").is_file():
            raise ShapeError(f"{path}: no such file; kubegang ships a shape named {path.stem!r}")
        return path
    shipped = SHAPES_DIR / f"{text}.yaml"
    if shipped.is_file():
        return shipped
    raise ShapeError(f"{text}: no such shape file and no shipped shape of that name; "
                     f"shipped: {', '.join(shipped_shapes())}")


def _field_path(raw: Any, loc: tuple[int | str, ...]) -> str:
    """``nodeGroups[2].gpus`` (with the group's name when known) rather than pydantic's tuple."""
    parts: list[str] = []
    node: Any = raw
    for item in loc:
        if isinstance(item, int):
            name = node[item].get("name") if isinstance(node, list) and isinstance(node[item], dict) else None
            parts[-1] += f"[{item}]" + (f"(name={name})" if name else "")
        else:
            parts.append(str(item))
        try:
            node = node[item]
        except (KeyError, IndexError, TypeError):
            node = None
    return ".".join(parts) or "(root)"


def node_manifest(name: str, group: NodeGroup) -> dict[str, Any]:
    """The fake Node object for one node of a shape, as kwok expects it."""
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        FAKE_NODE_LABEL[0]: FAKE_NODE_LABEL[1],
        **group.labels,
    }
    annotations = {"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake"}
    capacity: dict[str, str] = {"cpu": group.cpu, "memory": group.memory, "pods": str(group.pods)}
    if group.gpus:
        capacity[GPU_RESOURCE] = str(group.gpus)
        assert group.product is not None
        # What GPU feature discovery publishes before our agent runs; the agent keeps them true.
        labels["nvidia.com/gpu.present"] = "true"
        labels["nvidia.com/gpu.product"] = _label_value(group.product)
        labels["nvidia.com/gpu.count"] = str(group.gpus)
    if group.nvml:
        annotations[REPLAY_DUMP_ANNOTATION] = group.nvml
    if group.fabric:
        annotations[REPLAY_FABRIC_ANNOTATION] = f"{group.fabric.cluster_uuid}/{group.fabric.clique_id}"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {},
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


def node_infos(shape: ClusterShape) -> list[NodeInfo]:
    """The placement core's view of a shape's nodes (what the extender would build from the API).

    A group with ``fabric`` forms one NVLink domain per (clusterUuid, cliqueId), named as the agent
    names it; nodes without one are each their own domain.
    """
    out: list[NodeInfo] = []
    for name, group in shape.nodes():
        product = _label_value(group.product) if group.product else ""
        domain = f"{group.fabric.cluster_uuid}.{group.fabric.clique_id}" if group.fabric else None
        gpus = tuple(GPUInfo(index=i, product=product) for i in range(group.gpus))
        if group.nvml in DUMP_LAYOUTS:  # wired as the agent reads the dump these nodes replay
            gpus = layout(DUMP_LAYOUTS[group.nvml]).dress(gpus)
        out.append(NodeInfo(
            name=name,
            labels=MappingProxyType({k: v for k, v in node_manifest(name, group)["metadata"]["labels"].items()}),
            gpus=gpus,
            nvlink_domain=domain,
            cpu_milli=int(parse_quantity(group.cpu) * 1000),
            memory_mib=int(parse_quantity(group.memory) / (1 << 20)),
            max_pods=group.pods,
        ))
    return out


def _label_value(text: str) -> str:
    """A label-safe rendering (GFD replaces spaces with dashes)."""
    value = re.sub(r"[^A-Za-z0-9_.-]", "-", text)[:63]
    return value.strip("-_.")

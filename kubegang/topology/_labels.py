"""Which node labels name the fabric levels, with presets for clouds that already label nodes.

The fabric above the node (leaf switch, spine, block) is invisible to NVML, so it comes from node
labels. Platform teams either label nodes themselves (the ``kubegang.io/*`` defaults, which the
shapes in ``hack/shapes`` use) or run on a cloud that labels GPU nodes with its own keys; a preset
maps those keys to our levels so nothing has to be relabelled.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubegang.levels import Level


@dataclass(frozen=True, slots=True)
class TopologyLabels:
    """Label keys for each fabric level; ``None`` means the level is not labelled in this cluster."""

    nvlink: str | None = "kubegang.io/nvlink-domain"
    """NVLink domain label, used when the agent did not report a fabric domain for the node."""
    leaf: str | None = "kubegang.io/leaf"
    """Leaf (top-of-rack / rail) switch label: the first network hop shared by nodes."""
    spine: str | None = "kubegang.io/spine"
    """Spine switch label: nodes under one spine talk through it without leaving the group."""
    block: str | None = "kubegang.io/block"
    """Block / pod / island label: the widest network group below the whole cluster."""

    def key(self, level: Level) -> str | None:
        """The label key for a fabric level (None for node, GPU and cluster, which need none)."""
        return {
            Level.NVLINK: self.nvlink,
            Level.LEAF: self.leaf,
            Level.SPINE: self.spine,
            Level.BLOCK: self.block,
        }.get(level)

    @classmethod
    def preset(cls, name: str) -> TopologyLabels:
        """A named preset (``default``, ``gke``, ``aws``, ``oci``, ``nvidia``); ValueError lists them."""
        try:
            return PRESETS[name]
        except KeyError:
            allowed = ", ".join(PRESETS)
            raise ValueError(f"unknown topology label preset {name!r}; allowed: {allowed}") from None


PRESETS: dict[str, TopologyLabels] = {
    "default": TopologyLabels(),
    # GKE (A3/A4 with compact placement): block > subblock > host. A sub-block is the group of
    # hosts behind one switch tier, so it plays the leaf; GKE has nothing between it and the block.
    "gke": TopologyLabels(
        nvlink="nvidia.com/gpu.clique",
        leaf="cloud.google.com/gce-topology-subblock",
        spine=None,
        block="cloud.google.com/gce-topology-block",
    ),
    # AWS EC2 instance topology: layer-1 is the farthest network node from the instance, layer-3
    # the closest, so layer-3 is the leaf.
    "aws": TopologyLabels(
        nvlink="nvidia.com/gpu.clique",
        leaf="topology.k8s.aws/network-node-layer-3",
        spine="topology.k8s.aws/network-node-layer-2",
        block="topology.k8s.aws/network-node-layer-1",
    ),
    # OCI RDMA network locality (OKE): local block (tier 0) < network block (tier 1) < HPC island.
    "oci": TopologyLabels(
        nvlink="nvidia.com/gpu.clique",
        leaf="oci.oraclecloud.com/rdma.local_block_id",
        spine="oci.oraclecloud.com/rdma.network_block_id",
        block="oci.oraclecloud.com/rdma.hpc_island_id",
    ),
    # NVIDIA GPU operator / DRA driver labels only: NVLink cliques (GB200 NVL72), no network levels.
    "nvidia": TopologyLabels(nvlink="nvidia.com/gpu.clique", leaf=None, spine=None, block=None),
}
"""Presets by name. Clouds change their labels; check yours with ``kubectl get nodes --show-labels``."""

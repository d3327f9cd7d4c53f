"""The topology: from node facts and labels to a validated tree and a compiled index.

Public API::

    NodeInfo, GPUInfo, Taint            what the core knows about a node
    TopologyLabels, PRESETS             which labels name leaf / spine / block (cloud presets)
    build_graph, validate_graph         the fabric tree, checked (TopologyError)
    compile_index -> TopologyIndex      integer arrays for the hot path
    with_node_facts                     the same index with one node's taints / cordon swapped in
    CapacityIndex                       free GPUs per flavour/level/domain, updated in O(levels)
    uniform_fabric                      regular fabrics for tests, benchmarks and the simulator
    GpuLayout, LAYOUTS, DUMP_LAYOUTS    how a board's GPUs are wired (NUMA, PCIe switch, NVLink)
"""

from kubegang.topology._capacity import (
    ANY_FLAVOUR,
    CapacityIndex,
    FlavourCapacity,
    flavour_key,
    gpu_keys,
)
from kubegang.topology._graph import (
    CLUSTER_ID,
    UNLABELLED_PREFIX,
    TopologyError,
    TopologyTree,
    Vertex,
    build_graph,
    domain_chain,
    validate_graph,
)
from kubegang.topology._index import FABRIC_LEVELS, TopologyIndex, compile_index, level_span, with_node_facts
from kubegang.topology._labels import PRESETS, TopologyLabels
from kubegang.topology._layouts import DUMP_LAYOUTS, LAYOUTS, GpuLayout, layout
from kubegang.topology._model import GPUInfo, NodeInfo, Taint
from kubegang.topology._synthetic import uniform_fabric

__all__ = [
    "ANY_FLAVOUR",
    "CLUSTER_ID",
    "DUMP_LAYOUTS",
    "FABRIC_LEVELS",
    "LAYOUTS",
    "PRESETS",
    "UNLABELLED_PREFIX",
    "CapacityIndex",
    "FlavourCapacity",
    "GPUInfo",
    "GpuLayout",
    "NodeInfo",
    "Taint",
    "TopologyError",
    "TopologyIndex",
    "TopologyLabels",
    "TopologyTree",
    "Vertex",
    "build_graph",
    "compile_index",
    "domain_chain",
    "flavour_key",
    "gpu_keys",
    "layout",
    "level_span",
    "uniform_fabric",
    "validate_graph",
    "with_node_facts",
]

"""How a node's GPUs are wired to each other: named layouts of real server boards.

On a running cluster the agent reads each GPU's NUMA node and NVLink peers from NVML and the
extender copies them into ``GPUInfo`` (``kubegang.extender._nodes``). The simulator and tests have
no agent, so they dress the GPUs of a shape in one of these layouts instead. Each is a public board
design, and the two that ``hack/shapes`` nodes replay as NVML dumps (``hgx-h100-8gpu``,
``gb200-nvl72-tray``, ``tests/fixtures/nvml``) are checked against what the agent reads from those
dumps, so the simulator's nodes are the demo's.

- ``hgx-8gpu-nvswitch``: HGX/DGX H100 baseboard. Every GPU reaches every other through four
  NVSwitch chips; two CPU sockets, GPUs 0-3 on NUMA 0 and 4-7 on NUMA 1; a PCIe switch per pair of
  GPUs (with their NICs).
- ``gb200-tray``: a GB200 NVL72 compute tray. Four GPUs on the rack's NVSwitch fabric; two Grace
  CPUs, GPUs 0-1 on NUMA 0 and 2-3 on NUMA 1; each GPU attaches to its CPU by NVLink-C2C, so no
  PCIe switch is shared.
- ``sxm2-8gpu-cube-mesh``: DGX-1 / HGX-1 V100 board. NVLink hybrid cube mesh: each GPU links to the
  three others of its quad and to its counterpart in the other quad; quads on NUMA 0 and 1; a PCIe
  switch per pair of GPUs.
- ``sxm2-4gpu``: four V100 SXM2 all linked by NVLink, one socket.
- ``pcie-8gpu``: the common dual-socket 8-GPU PCIe server: no NVLink; GPUs 0-3 on NUMA 0, 4-7 on
  NUMA 1; two PCIe switches per socket, two GPUs each.
- ``pcie-4gpu``: dual-socket 4-GPU PCIe server: GPUs 0-1 on NUMA 0, 2-3 on NUMA 1, each GPU on its
  own root port.
- ``pcie-2gpu``: two PCIe GPUs on one socket.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from kubegang.topology._model import GPUInfo


@dataclass(frozen=True, slots=True)
class GpuLayout:
    """The wiring of one board: per GPU position, its NUMA node, PCIe switch and NVLink peers."""

    name: str
    numa: tuple[int | None, ...]
    switch: tuple[str | None, ...]
    nvlink: tuple[frozenset[int], ...]

    def __post_init__(self) -> None:
        count = len(self.numa)
        if len(self.switch) != count or len(self.nvlink) != count:
            raise ValueError(f"GpuLayout {self.name!r}: numa, switch and nvlink must list {count} GPUs each")
        for i, peers in enumerate(self.nvlink):
            for j in peers:
                if j == i or not 0 <= j < count or i not in self.nvlink[j]:
                    raise ValueError(f"GpuLayout {self.name!r}: NVLink peers must be other GPUs, both ways "
                                     f"(GPU {i} lists {j})")

    @property
    def gpus(self) -> int:
        return len(self.numa)

    def dress(self, gpus: Sequence[GPUInfo]) -> tuple[GPUInfo, ...]:
        """``gpus`` (position i taking the layout's GPU i) with this wiring; their indices name the peers."""
        if len(gpus) != self.gpus:
            raise ValueError(f"GpuLayout {self.name!r} wires {self.gpus} GPUs, the node has {len(gpus)}")
        return tuple(
            dataclasses.replace(gpu, numa_node=self.numa[i], pcie_switch=self.switch[i],
                                nvlink_peers=frozenset(gpus[j].index for j in self.nvlink[i]))
            for i, gpu in enumerate(gpus)
        )


def _all_linked(count: int) -> tuple[frozenset[int], ...]:
    return tuple(frozenset(j for j in range(count) if j != i) for i in range(count))


def _cube_mesh() -> tuple[frozenset[int], ...]:
    return tuple(frozenset({*(q for q in range(i // 4 * 4, i // 4 * 4 + 4) if q != i), (i + 4) % 8})
                 for i in range(8))


def _pairs(count: int) -> tuple[str, ...]:
    return tuple(f"pcie-{i // 2}" for i in range(count))


LAYOUTS: dict[str, GpuLayout] = {
    layout.name: layout
    for layout in (
        GpuLayout("hgx-8gpu-nvswitch", tuple(i // 4 for i in range(8)), _pairs(8), _all_linked(8)),
        GpuLayout("gb200-tray", (0, 0, 1, 1), (None,) * 4, _all_linked(4)),
        GpuLayout("sxm2-8gpu-cube-mesh", tuple(i // 4 for i in range(8)), _pairs(8), _cube_mesh()),
        GpuLayout("sxm2-4gpu", (0,) * 4, _pairs(4), _all_linked(4)),
        GpuLayout("pcie-8gpu", tuple(i // 4 for i in range(8)), _pairs(8), (frozenset(),) * 8),
        GpuLayout("pcie-4gpu", (0, 0, 1, 1), (None,) * 4, (frozenset(),) * 4),
        GpuLayout("pcie-2gpu", (0, 0), (None, None), (frozenset(),) * 2),
    )
}
"""Every named layout (module docstring)."""

DUMP_LAYOUTS: dict[str, str] = {"hgx-h100-8gpu": "hgx-8gpu-nvswitch", "gb200-nvl72-tray": "gb200-tray"}
"""The layout of each NVML dump a shape's nodes replay (``nvml:`` in ``hack/shapes``)."""


def layout(name: str) -> GpuLayout:
    """The named layout; ValueError naming the known ones otherwise."""
    found = LAYOUTS.get(name)
    if found is None:
        raise ValueError(f"unknown GPU layout {name!r}; known: {', '.join(sorted(LAYOUTS))}")
    return found

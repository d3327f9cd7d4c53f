"""The "GPUs inside a node" tables of docs/benchmarks.md: kubegang's choice against a topology-blind one.

The counts come from ``bench.sim._locality`` (its docstring has the yardstick and why the blind
choice is measured on a shadow of the same run); here they are pooled over seeds and rendered.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from bench.sim._locality import LocalityCounts

METHOD = [
    "Inside a node, kubegang gives a pod the closest-wired free GPUs (`kubegang/placement/_gpus.py`:",
    "NVLink, then one PCIe switch, then one NUMA node, leaving the rest in whole groups). The nodes'",
    "wiring is the layout of their board (`kubegang.topology.LAYOUTS`; the replayed H100 and GB200",
    "boards are checked against what the agent reads from their NVML dumps, the openb models are an",
    "assumption stated in `bench/sim/_cluster.py`). *Topology-blind* is kubegang's choice on a node whose",
    "wiring it does not know (the lowest free GPUs), measured on a shadow of the same run",
    "(`bench/sim/_locality.py`). Counted: pods with 2 or more GPUs but fewer than their node has; a",
    "share is of the pods whose node had that many GPUs free on one NUMA node (one PCIe switch) when",
    "they were placed, pooled over seeds.",
]


def pooled(figures: Iterable[dict[str, dict[str, int]] | None]) -> tuple[LocalityCounts, LocalityCounts]:
    """(kubegang's own, topology-blind) counts summed over runs."""
    aware, blind = LocalityCounts(), LocalityCounts()
    for f in figures:
        if f is not None:
            aware.add(LocalityCounts(**f["aware"]))
            blind.add(LocalityCounts(**f["blind"]))
    return aware, blind


def _share(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{100 * value:.1f}%"


def _row(label: str, aware: LocalityCounts, blind: LocalityCounts) -> str:
    return (f"| {label} | {aware.pods:,} | {_share(aware.numa_share)} | {_share(blind.numa_share)} | "
            f"{aware.numa_possible:,} | {_share(aware.switch_share)} | {_share(blind.switch_share)} | "
            f"{aware.switch_possible:,} |")


HEADER = [
    "| run | multi-GPU pods | one NUMA node: kubegang | topology-blind | (could) | one PCIe switch: kubegang "
    "| topology-blind | (could) |",
    "|---|---:|---:|---:|---:|---:|---:|---:|",
]


def openb_lines(data: dict[str, Any]) -> list[str]:
    """The openb table: one row per workload (kubegang's runs, every seed)."""
    lines = ["### GPUs inside a node (openb)", "", *METHOD, "", *HEADER]
    for workload, wl in data["workloads"].items():
        aware, blind = pooled(wl["runs"]["kubegang"].get("locality") or [])
        lines.append(_row(f"`{workload}`", aware, blind))
    return [*lines, ""]


def gang_lines(runs: list[dict[str, Any]]) -> list[str]:
    """The gang table: one row per shape x workload (kubegang's runs, every seed)."""
    lines = ["### GPUs inside a node (gang workloads)", "",
             "The same yardstick as for openb (above), on kubegang's runs of each row; gangs of whole",
             "nodes have no choice inside a node and are not counted. The GB200 tray has no PCIe switch",
             "shared by two GPUs (each attaches to its Grace CPU by NVLink-C2C).", "", *HEADER]
    seen: list[tuple[str, str]] = []
    for r in runs:
        key = (r["shape"], r["workload"])
        if key not in seen:
            seen.append(key)
    for shape, workload in seen:
        aware, blind = pooled(r.get("locality") for r in runs
                              if (r["shape"], r["workload"], r["policy"]) == (shape, workload, "kubegang"))
        lines.append(_row(f"{shape} / {workload}", aware, blind))
    return [*lines, ""]

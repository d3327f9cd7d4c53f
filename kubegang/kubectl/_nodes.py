"""``kubectl gang nodes`` / ``topology``: free GPUs per domain at every fabric level, the largest gang
placeable per level, and a compact picture of the fabric with unhealthy GPUs marked.

Read from the extender's own ledger rebuilt from the API objects (``Ledger.snapshot()``, the
``/debug/snapshot`` document, and ``kubegang.placement.largest_placeable`` on its placement snapshot),
so "free" means what the extender would place on: bound pods and reservations taken out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubegang.kubectl._engine import Engine
from kubegang.kubectl._render import Style, gpus, table
from kubegang.placement import MILLI, largest_placeable
from kubegang.topology import FABRIC_LEVELS

_ORDER = ("block", "spine", "leaf", "nvlink")
PICTURE_WIDTH = 100
"""Characters per line of the fabric picture."""


def nodes_report(engine: Engine) -> dict[str, Any]:
    """The machine form: per node its GPUs, per level and domain free/total GPUs, the largest gang."""
    dump = engine.ledger.snapshot()
    nodes = []
    domains: dict[str, dict[str, dict[str, Any]]] = {}
    for name, node in sorted(dump["nodes"].items()):
        free = sum(1 for g in node["gpus"] if g["healthy"] and g["freeMilli"] == MILLI)
        unhealthy = sum(1 for g in node["gpus"] if not g["healthy"])
        nodes.append({"name": name, "domains": node["domains"], "gpus": len(node["gpus"]), "free": free,
                      "unhealthy": unhealthy, "product": next((g["product"] for g in node["gpus"]), None)})
        for level, domain in node["domains"].items():
            if level == "node":
                continue
            row = domains.setdefault(level, {}).setdefault(str(domain), {"domain": str(domain), "nodes": 0,
                                                                           "gpus": 0, "free": 0, "unhealthy": 0})
            row["nodes"] += 1
            row["gpus"] += len(node["gpus"])
            row["free"] += free
            row["unhealthy"] += unhealthy
    largest = largest_placeable(engine.ledger.placement_snapshot())
    return {
        "nodes": nodes,
        "levels": {level: sorted(rows.values(), key=lambda r: r["domain"]) for level, rows in domains.items()},
        "largestGang": {level.label: largest[level] for level in FABRIC_LEVELS},
        "quarantined": dump.get("quarantined") or {},
        "hidden": dict(engine.objects.hidden),
    }


def _cell(node: Mapping[str, Any], style: Style) -> str:
    """One node as one character per GPU: ``#`` in use, ``.`` free, ``x`` unhealthy."""
    unhealthy, free = int(node["unhealthy"]), int(node["free"])
    used = int(node["gpus"]) - free - unhealthy
    return style.bad("x" * unhealthy) + "#" * used + "." * free


def _wrap(tokens: list[str], indent: str, width: int = PICTURE_WIDTH) -> list[str]:
    lines, line = [], ""
    for token in tokens:
        if line and len(indent) + len(line) + 1 + len(_plain(token)) > width:
            lines.append(indent + line)
            line = ""
        line = f"{line} {token}" if line else token
    return [*lines, indent + line] if line else lines


def _plain(text: str) -> str:
    return "".join(ch for ch in text.replace("\033[31m", "").replace("\033[0m", "") if ch.isprintable())


def picture(report: Mapping[str, Any], style: Style) -> list[str]:
    """The fabric: one line group per leaf under its spine, nodes as GPU cells, an NVLink domain of
    several nodes in brackets."""
    tree: dict[str, dict[str, dict[str, list[Mapping[str, Any]]]]] = {}
    for node in report["nodes"]:
        d = node["domains"]
        tree.setdefault(str(d.get("spine") or "-"), {}).setdefault(str(d.get("leaf") or "-"), {}).setdefault(
            str(d.get("nvlink") or node["name"]), []).append(node)
    lines = ["Fabric (one character per GPU: # in use, . free, x unhealthy; [...] an NVLink domain of "
             "several nodes):"]
    for spine, leaves in tree.items():
        lines.append(f"  spine {spine}")
        for leaf, domains in leaves.items():
            members = [n for group in domains.values() for n in group]
            free = sum(int(n["free"]) for n in members)
            total = sum(int(n["gpus"]) for n in members)
            lines.append(f"    leaf {leaf} ({len(members)} nodes, {free}/{total} GPUs free)")
            tokens = [" ".join(_cell(n, style) for n in group) if len(group) == 1
                      else "[" + " ".join(_cell(n, style) for n in group) + "]" for group in domains.values()]
            lines += _wrap(tokens, "      ")
    return lines


def nodes_lines(report: Mapping[str, Any], style: Style, *, picture_too: bool = True) -> list[str]:
    lines = ["Largest gang placeable now (GPUs, whole-node pods): " + ", ".join(
        f"{level} {gpus(n)}" for level, n in report["largestGang"].items())]
    for level in (lvl for lvl in _ORDER if lvl in report["levels"]):
        domains = report["levels"][level]
        if level == "nvlink" and all(r["nodes"] == 1 for r in domains):
            lines.append("nvlink: every NVLink domain is a single node")
            continue
        rows = [[r["domain"], r["nodes"], r["gpus"], r["free"], r["unhealthy"]] for r in domains]
        lines.append(f"{level}:")
        lines += table(["domain", "nodes", "gpus", "free", "unhealthy"], rows, indent="  ")
    if picture_too:
        lines += picture(report, style)
    for node, why in report["quarantined"].items():
        lines.append(style.bad(f"quarantined {node}: {why}"))
    if report["hidden"].get("nodes"):
        lines.append(style.warn(f"Note: nodes: {report['hidden']['nodes']}"))
    return lines

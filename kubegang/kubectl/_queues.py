"""``kubectl gang queues``: the GPUQueue tree with nominal, usage, borrowed, lent, pending, admitted and
fair share per flavour (Slurm's ``sshare``, ``kueuectl list clusterqueue``).

Quota numbers are the quota tree's (``kubegang.quota.QuotaTree`` built by the operator's ``QuotaBook``
from the same GPUQueues and admitted jobs); job counts are the operator's (``GPUQueue.status``), so a
user who cannot list other namespaces' jobs still sees every queue's counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubegang.kubectl._engine import Engine
from kubegang.kubectl._render import Style, gpus, table
from kubegang.placement import MILLI
from kubegang.quota import dominant_share


def queues_report(engine: Engine) -> dict[str, Any]:
    """The machine form of ``kubectl gang queues``: one entry per queue, parents before children."""
    tree = engine.book.tree
    out = []
    for name in tree.queues:
        spec = tree.spec(name)
        status = (engine.cache.queues.get(name) or {}).get("status") or {}
        usage, borrowed, lent = tree.usage(name), tree.borrowed(name), tree.lent(name)
        flavors = []
        for flavor in sorted(set(spec.quotas) | set(usage)):
            quota = spec.quotas.get(flavor)
            flavors.append({
                "flavor": flavor,
                "nominal": (quota.nominal if quota else 0) / MILLI,
                "borrowingLimit": _in_gpus(quota.borrowing_limit if quota else None),
                "lendingLimit": _in_gpus(quota.lending_limit if quota else None),
                "usage": usage.get(flavor, 0) / MILLI,
                "borrowed": borrowed.get(flavor, 0) / MILLI,
                "lent": lent.get(flavor, 0) / MILLI,
                "available": tree.available(name).get(flavor, 0) / MILLI if tree.is_leaf(name) else None,
            })
        out.append({
            "name": name,
            "parent": spec.parent,
            "depth": len(tree.path(name)) - 1,
            "leaf": tree.is_leaf(name),
            "weight": spec.weight,
            "pending": status.get("pending"),
            "admitted": status.get("admitted"),
            "fairShare": round(dominant_share(tree, name), 6),
            "flavors": flavors,
        })
    return {"queues": out, "problems": list(engine.problems), "hidden": dict(engine.objects.hidden)}


def _in_gpus(milli: int | None) -> float | None:
    return None if milli is None else milli / MILLI


def _limit(value: float | None) -> str:
    return "-" if value is None else gpus(value)


def queues_lines(report: Mapping[str, Any], style: Style) -> list[str]:
    """The human form: a tree, one row per queue and flavour."""
    rows = []
    for q in report["queues"]:
        label = "  " * q["depth"] + q["name"]
        first = True
        for f in q["flavors"] or [{"flavor": "-", "nominal": 0, "usage": 0, "borrowed": 0, "lent": 0,
                                   "borrowingLimit": None, "lendingLimit": None, "available": None}]:
            rows.append([
                label if first else "", f["flavor"], gpus(f["nominal"]), _limit(f["borrowingLimit"]),
                _limit(f["lendingLimit"]), gpus(f["usage"]), gpus(f["borrowed"]), gpus(f["lent"]),
                _limit(f["available"]),
                q["pending"] if first and q["pending"] is not None else ("" if not first else "?"),
                q["admitted"] if first and q["admitted"] is not None else ("" if not first else "?"),
                f"{q['fairShare']:.3f}" if first else "",
            ])
            first = False
    lines = table(["queue", "flavor", "nominal", "borrow-limit", "lend-limit", "usage", "borrowed", "lent",
                   "available", "pending", "admitted", "share"], rows)
    for problem in report["problems"]:
        lines.append(style.bad(f"problem: {problem}"))
    if report["hidden"].get("gpujobs"):
        lines.append(style.warn("Note: other namespaces' jobs are not visible to you: usage of their queues is "
                                "the operator's (GPUQueue status)"))
    return lines

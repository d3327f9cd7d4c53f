"""Sweep kubegang's backfill reservation rule on the gang workloads: ``python -m bench.sim.sweep_backfill``.

Why: backfill past a blocked head raises allocation, but a reservation (the nodes kept for a head
blocked for ``reserve_after_seconds``) idles GPUs while they drain, and never reserving lets big
gangs starve. This script measures that trade-off on the four gang runs of ``bench.run_all``
(``superpod-h100`` and ``gb200-nvl72`` x Kalos-like and Philly-like sizes), several seeds each, for:

- ``strict``: ``StrictFIFO``, no backfill (kubegang before backfill);
- ``never``: ``BestEffortFIFO`` without reservations;
- ``<N>h``: ``BestEffortFIFO``, reserving after N hours blocked;
- ``<N>h x share``: the same, the delay scaled by the gang's share of the cluster over half of it
  (the largest generated gang, half the cluster, waits N hours; a 1/16 gang N/8): the GPUs a
  reservation drains grow with the gang, so small gangs may reserve sooner.

Per policy: steady allocation while jobs wait (``RunMetrics.steady_alloc``), mean, p95 and maximum
queueing delay (no priorities here, so no job restarts and first start = start). Writes a Markdown
report (``--out``, default ``docs/benchmarks/backfill-sweep.md``) and prints it.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.sim import Cluster, GangWorkload, KubegangPolicy, generate, load_cluster, simulate
from kubegang.placement import Snapshot
from kubegang.quota import Backfill, BackfillPolicy, QueueingStrategy

HOUR = 3600.0
SHAPES = ("superpod-h100", "gb200-nvl72")
WORKLOADS = ("kalos", "philly")
DEFAULT_OUT = Path(__file__).resolve().parents[2] / "docs" / "benchmarks" / "backfill-sweep.md"


class _ShareScaledBackfill(Backfill):
    """Reserve after ``reserve_after_seconds`` x (the gang's GPUs / half the cluster's GPUs)."""

    def __init__(self, policy: BackfillPolicy, gpus: Callable[[str], int], cluster_gpus: int) -> None:
        super().__init__(policy)
        self._gpus = gpus
        self._half = cluster_gpus / 2

    def reservation_due(self, job_id: str, now: float) -> bool:
        after = self.policy.reserve_after_seconds or 0.0
        scaled = after * min(1.0, self._gpus(job_id) / self._half)
        return super().reservation_due(job_id, now + after - scaled)  # due once blocked for ``scaled``


class _ShareScaledPolicy(KubegangPolicy):
    def reset(self, cluster: Cluster, snapshot: Snapshot, rng: random.Random) -> None:
        super().reset(cluster, snapshot, rng)
        self.backfill = _ShareScaledBackfill(self.backfill_policy, lambda j: self.jobs[j].gpus, cluster.gpus)


@dataclass(frozen=True)
class Variant:
    label: str
    reserve_after_h: float | None
    strict: bool = False
    share_scaled: bool = False

    def policy(self) -> KubegangPolicy:
        if self.strict:
            return KubegangPolicy(backfill=BackfillPolicy(strategy=QueueingStrategy.STRICT_FIFO))
        after = None if self.reserve_after_h is None else self.reserve_after_h * HOUR
        cls = _ShareScaledPolicy if self.share_scaled else KubegangPolicy
        return cls(backfill=BackfillPolicy(reserve_after_seconds=after))


def variants(hours: Sequence[float], scaled: Sequence[float]) -> list[Variant]:
    out = [Variant("strict", None, strict=True), Variant("never", None)]
    out += [Variant(f"{h:g}h", h) for h in hours]
    out += [Variant(f"{h:g}h x share", h, share_scaled=True) for h in scaled]
    return out


def run_one(shape: str, sizes: str, seed: int, jobs: int, variant: Variant) -> dict[str, float]:
    """One simulation; the same workload and seeds as ``bench.run_all`` for this seed."""
    cluster = load_cluster(shape)
    spec = GangWorkload(sizes=sizes, jobs=jobs * (4 if sizes == "philly" else 1), seed=seed)
    workload = generate(spec, cluster.gpus, cluster.topology.max_gpus_per_node, cluster.products[0])
    start = time.perf_counter()
    result = simulate(variant.policy(), cluster, workload, seed=seed)
    arrival = {j.id: j.arrival for j in workload}
    delays = [t - arrival[j] for j, t in result.started.items()]
    m = result.metrics
    return {"alloc": 100 * m.steady_alloc, "mean": m.queue_delay_mean_h, "p95": m.queue_delay_p95_h,
            "max": max(delays, default=0.0) / HOUR, "done": m.completed / m.jobs,
            "wall": time.perf_counter() - start}


def _cell(values: list[float], fmt: str) -> str:
    return f"{statistics.fmean(values):{fmt}} ({min(values):{fmt}}–{max(values):{fmt}})"


def render(results: dict[tuple[str, str, str], list[dict[str, float]]], labels: list[str], seeds: list[int],
           jobs: int, wall: float, argv: list[str]) -> str:
    lines = [
        "# Backfill reservation sweep",
        "",
        f"<!-- Generated by `python -m bench.sim.sweep_backfill {' '.join(argv)}`; do not edit by hand. -->",
        "",
        f"Seeds {', '.join(map(str, seeds))} (workload and simulation); {jobs} jobs per Kalos run, {4 * jobs} per",
        "Philly run (as `bench.run_all`). Each cell: mean over seeds (min–max). *alloc*: steady GPU",
        "allocation while jobs wait (%); *Δ alloc per seed*: difference to `strict` on the same seed",
        "(points), seeds in order; delays in hours. `strict`: no backfill (StrictFIFO); `never`: backfill without",
        "reservations; `Nh`: reserve after N hours blocked; `Nh x share`: after N h x gang GPUs / half",
        f"the cluster. Wall time {wall / 60:.1f} min.",
        "",
    ]
    for shape in SHAPES:
        for sizes in WORKLOADS:
            base = results[(shape, sizes, "strict")]
            lines += [f"## {shape} / {sizes}", "",
                      "| policy | alloc % | Δ alloc per seed | mean delay | p95 delay | max delay |",
                      "|---|---:|---|---:|---:|---:|"]
            for label in labels:
                runs = results[(shape, sizes, label)]
                deltas = " ".join(f"{r['alloc'] - b['alloc']:+.1f}" for r, b in zip(runs, base, strict=True))
                lines.append(f"| {label} | {_cell([r['alloc'] for r in runs], '.1f')} | {deltas} | "
                             f"{_cell([r['mean'] for r in runs], '.2f')} | {_cell([r['p95'] for r in runs], '.2f')} | "
                             f"{_cell([r['max'] for r in runs], '.1f')} |")
            lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seeds", type=int, default=5, help="seeds 1..N per run (default 5)")
    parser.add_argument("--jobs", type=int, default=1500, help="jobs per Kalos run, x4 for Philly (default 1500)")
    parser.add_argument("--hours", type=float, nargs="*", default=[4, 8, 12, 24, 48],
                        help="reserve_after values in hours (default 4 8 12 24 48)")
    parser.add_argument("--scaled", type=float, nargs="*", default=[24],
                        help="reserve_after values scaled by the gang's share of the cluster (default 24)")
    parser.add_argument("--workers", type=int, default=2, help="processes (default 2)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="Markdown report to write")
    args = parser.parse_args(argv)
    seeds = list(range(1, args.seeds + 1))
    chosen = variants(args.hours, args.scaled)
    start = time.perf_counter()
    keys = [(s, w, v, seed) for s in SHAPES for w in WORKLOADS for v in chosen for seed in seeds]
    with ProcessPoolExecutor(args.workers) as pool:
        futures = [pool.submit(run_one, s, w, seed, args.jobs, v) for s, w, v, seed in keys]
        outcomes = [f.result() for f in futures]
    results: dict[tuple[str, str, str], list[dict[str, float]]] = {}
    for (s, w, v, _), outcome in zip(keys, outcomes, strict=True):
        results.setdefault((s, w, v.label), []).append(outcome)
    text = render(results, [v.label for v in chosen], seeds, args.jobs, time.perf_counter() - start,
                  sys.argv[1:] if argv is None else argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

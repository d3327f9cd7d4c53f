"""Why kubegang's jobs wait on the fair yardstick: ``python -m bench.sim.why_waits [--seeds N] [--out DIR]``.

Runs the gang workloads of ``bench.run_all`` on *tuning* seeds (``bench._gangs.TUNING_SEED_BASE + 1``
..., never the reported ones) and measures, per policy:

- queueing delay by job size (1 GPU, 2-8, 16-64, 128 and more): which jobs wait;
- **fit but waiting**: after every scheduling pass, the jobs still waiting that the free GPUs could
  hold right then (counted per node, ``FlavourCapacity.pods_fit`` at the cluster level, reservations
  ignored), time-averaged: jobs a scheduler left waiting although there was room for them;
- one idea, as an extra policy row: ``kubegang, predicted tenants``, the admission cycle with
  ``BackfillPolicy(predicted_tenants=True)`` (jobs predicted from finished runs to leave a
  reservation's nodes in time run there, evicted if they run past the prediction when the holder
  could start). Reported whether kept or not; it is **not** what the operator runs. (The idea of the
  first version of this page, a backfill walk 64 heads deep, is the cycle's default since.)

Writes ``DIR/why-kubegang-waits.md`` (default docs/benchmarks/) and prints it.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench._gangs import TUNING_SEED_BASE
from bench.sim import (
    GangBinpackModel,
    Job,
    KubegangPolicy,
    Policy,
    SlurmTreeModel,
    Step,
    Wrapped,
    benchmark_spec,
    for_cluster,
    load_cluster,
    percentile,
    simulate,
)
from bench.sim._stats import interval, paired
from kubegang.levels import Level
from kubegang.quota import BackfillPolicy
from kubegang.topology import flavour_key

DEFAULT_OUT = Path(__file__).resolve().parents[2] / "docs" / "benchmarks"
ROWS = (("superpod-h100", "kalos"), ("gb200-nvl72", "kalos"), ("superpod-h100", "philly"), ("gb200-nvl72", "philly"))
SIZE_CLASSES = ((1, 1, "1 GPU"), (2, 8, "2-8"), (16, 64, "16-64"), (128, 1 << 30, "128+"))
IDEA = "kubegang, predicted tenants"
POLICIES: dict[str, Callable[[], Policy]] = {
    "kubegang": KubegangPolicy,
    IDEA: lambda: KubegangPolicy(backfill=BackfillPolicy(predicted_tenants=True)),
    "gang-binpack": GangBinpackModel,
    "slurm-tree": SlurmTreeModel,
}


def _waiting(policy: Policy) -> list[Job]:
    if isinstance(policy, KubegangPolicy):
        return [sim.job for sim in policy.waiting_jobs.values()]
    queue = getattr(policy, "queue", None)
    return list(queue.jobs.values()) if queue is not None else []


class FitButWaiting(Wrapped):
    """Wraps a policy; integrates over time the waiting jobs that the free GPUs could hold after a pass."""

    def __init__(self, inner: Policy) -> None:
        super().__init__(inner)
        self.last = 0.0
        self.count = 0
        self.gpus = 0
        self.job_seconds = 0.0
        self.gpu_seconds = 0.0

    def schedule(self, now: float) -> Step:
        self.job_seconds += self.count * (now - self.last)
        self.gpu_seconds += self.gpus * (now - self.last)
        step = self.inner.schedule(now)
        self.last = now
        self.count = self.gpus = 0
        for job in _waiting(self.inner):
            cap = self.snapshot.capacity.get(flavour_key(job.product))
            if cap is not None and cap.pods_fit(Level.CLUSTER, 0, job.gpus_per_pod) >= job.pods:
                self.count += 1
                self.gpus += job.gpus
        return step


def run(seeds: list[int], jobs: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for shape, sizes in ROWS:
        cluster = load_cluster(shape)
        for seed in seeds:
            workload = for_cluster(benchmark_spec(sizes, jobs, seed), cluster)
            by_id = {j.id: j for j in workload}
            for name, factory in POLICIES.items():
                wrapped = FitButWaiting(factory())
                t0 = time.perf_counter()
                result = simulate(wrapped, cluster, workload, seed=seed)
                m = result.metrics
                waits: dict[str, list[float]] = {label: [] for _, _, label in SIZE_CLASSES}
                for job_id, start in result.started.items():
                    g = by_id[job_id].gpus
                    for lo, hi, label in SIZE_CLASSES:
                        if lo <= g <= hi:
                            waits[label].append((start - by_id[job_id].arrival) / 3600.0)
                span = max(result.finished.values()) - min(j.arrival for j in workload)
                out.append({"shape": shape, "workload": sizes, "policy": name, "seed": seed, "metrics": m,
                            "waits": waits, "fit_jobs": wrapped.job_seconds / span,
                            "fit_gpus": wrapped.gpu_seconds / span, "wall_s": time.perf_counter() - t0})
                print(f"{shape} {sizes} seed {seed} {name}: {out[-1]['wall_s']:.1f}s", flush=True)
    return out


def _sel(runs: list[dict[str, Any]], shape: str, workload: str, policy: str) -> list[dict[str, Any]]:
    return sorted((r for r in runs if (r["shape"], r["workload"], r["policy"]) == (shape, workload, policy)),
                  key=lambda r: r["seed"])


def _ci(values: list[float], scale: float = 1.0, digits: int = 2) -> str:
    iv = interval(values)
    return f"{iv.mean * scale:.{digits}f} ± {iv.half * scale:.{digits}f}"


def render(runs: list[dict[str, Any]], seeds: list[int], jobs: int, wall: float) -> str:
    lines = ["# Why kubegang's jobs wait (tuning seeds)", "",
             f"<!-- Generated by `python -m bench.sim.why_waits`; do not edit by hand. Seeds {seeds[0]}..{seeds[-1]} "
             "(tuning seeds, not the reported ones). -->", "",
             f"Seeds {seeds[0]}..{seeds[-1]} ({len(seeds)} per row; the tuning seeds, not the ones `bench.run_all` "
             f"reports); {jobs} Kalos jobs per run (Philly twice as many), the workloads of `bench.run_all`. "
             "Means ± 95% half-widths over seeds. Wall time "
             f"{wall / 60:.1f} min.", "",
             "## Queueing delay by job size (h, mean of each seed's p95)", "",
             "| shape | workload | policy | " + " | ".join(label for _, _, label in SIZE_CLASSES)
             + " | fit but waiting (jobs) | fit but waiting (GPUs) |",
             "|---|---|---|" + "---:|" * (len(SIZE_CLASSES) + 2)]
    for shape, workload in ROWS:
        for policy in POLICIES:
            chosen = _sel(runs, shape, workload, policy)
            cells = []
            for _, _, label in SIZE_CLASSES:
                p95 = [percentile(r["waits"][label], 95) for r in chosen if r["waits"][label]]
                cells.append(_ci(p95) if p95 else "–")
            lines.append(f"| {shape} | {workload} | {policy} | " + " | ".join(cells) + " | "
                         f"{_ci([r['fit_jobs'] for r in chosen], digits=1)} | "
                         f"{_ci([r['fit_gpus'] for r in chosen], digits=1)} |")
    lines += ["", "*fit but waiting*: time-averaged number of waiting jobs (and their GPUs) that the free GPUs could "
              "hold right after a scheduling pass (counted per node; reservations ignored), first arrival to "
              "last completion.", "",
              f"## The idea: run times predicted from finished jobs for tenants of a reservation (`{IDEA}`)", "",
              "Paired differences to `kubegang` (same seeds); *ahead* would need the interval to exclude zero.", "",
              "| shape | workload | alloc (arrivals) points | p95 delay h | makespan h | large p99 h |",
              "|---|---|---:|---:|---:|---:|"]
    fields = (("alloc_arrivals", 100.0, 1), ("queue_delay_p95_h", 1.0, 2), ("makespan_h", 1.0, 2),
              ("large_wait_p99_h", 1.0, 2))
    for shape, workload in ROWS:
        ours = _sel(runs, shape, workload, "kubegang")
        idea = _sel(runs, shape, workload, IDEA)
        cells = []
        for f, scale, digits in fields:
            d = paired([getattr(r["metrics"], f) for r in idea], [getattr(r["metrics"], f) for r in ours])
            cells.append(f"{d.mean * scale:+.{digits}f} ± {d.half * scale:.{digits}f}")
        lines.append(f"| {shape} | {workload} | " + " | ".join(cells) + " |")
    lines += ["", "Absolute figures (means ± 95% half-widths):", "",
              "| shape | workload | policy | alloc (arrivals) % | p95 delay h | makespan h | large p99 h |",
              "|---|---|---|---:|---:|---:|---:|"]
    for shape, workload in ROWS:
        for policy in POLICIES:
            chosen = _sel(runs, shape, workload, policy)
            lines.append(f"| {shape} | {workload} | {policy} | " + " | ".join(
                _ci([getattr(r["metrics"], f) for r in chosen], scale, digits) for f, scale, digits in fields) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="tuning seeds (from TUNING_SEED_BASE + 1)")
    parser.add_argument("--jobs", type=int, default=800, help="Kalos jobs per run (Philly twice as many)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="directory for why-kubegang-waits.md")
    args = parser.parse_args(argv)
    if args.seeds < 2 or args.jobs < 1:
        parser.error("--seeds must be at least 2 (for an interval) and --jobs at least 1")
    seeds = [TUNING_SEED_BASE + i for i in range(1, args.seeds + 1)]
    start = time.perf_counter()
    runs = run(seeds, args.jobs)
    text = render(runs, seeds, args.jobs, time.perf_counter() - start)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "why-kubegang-waits.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The multi-node gang section of docs/benchmarks.md: runs over seeds, 95% intervals, verdicts, plots.

Every policy runs on the same generated workload per seed (``bench.sim.benchmark_spec``); the
reported seeds are ``REPORTED_SEEDS`` (1..N) and tuning, when any is done, uses ``TUNING_SEEDS``
(101..), so that no reported figure is the one a threshold was fitted on.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from bench.sim import POLICIES, KubegangPolicy, Policy, RunMetrics, benchmark_spec, for_cluster, load_cluster, simulate
from bench.sim._locality import LocalityObserver
from bench.sim._metrics import LARGE_DECILE, STARVED_AFTER_S
from bench.sim._stats import Interval, interval, paired
from bench.sim._workload import PHILLY_JOBS_FACTOR

GANG_SHAPES = ("superpod-h100", "gb200-nvl72")
GANG_WORKLOADS = ("kalos", "philly")
TUNING_SEED_BASE = 100
"""Tuning runs use seeds ``TUNING_SEED_BASE + 1 ...``; reported runs use 1..N."""
PRIORITY_VARIANT = "kubegang, 20% high priority"
"""An extra kubegang run on the Kalos workloads with 20% of jobs at high priority (preemption)."""


def run(seeds: list[int], jobs: int, log: list[str], *, priority: bool = False) -> list[dict[str, Any]]:
    """Every policy on every shape x workload x seed; one dict per run (metrics, wall time).
    ``priority`` adds ``PRIORITY_VARIANT`` on the Kalos workloads."""
    runs: list[dict[str, Any]] = []
    for shape in GANG_SHAPES:
        cluster = load_cluster(shape)
        for sizes in GANG_WORKLOADS:
            start = time.perf_counter()
            for seed in seeds:
                spec = benchmark_spec(sizes, jobs, seed)
                workload = for_cluster(spec, cluster)
                variants: list[tuple[str, Callable[[], Policy], list[Any]]] = [
                    (n, f, workload) for n, f in POLICIES.items()]
                if priority and sizes == "kalos":
                    prio = for_cluster(dataclasses.replace(spec, priority_share=0.2), cluster)
                    variants.append((PRIORITY_VARIANT, KubegangPolicy, prio))
                for name, factory, jobs_list in variants:
                    t0 = time.perf_counter()
                    observed = LocalityObserver(factory())
                    result = simulate(observed, cluster, jobs_list, seed=seed)
                    runs.append({"shape": shape, "workload": sizes, "policy": name, "seed": seed,
                                 "metrics": result.metrics, "wall_s": time.perf_counter() - t0,
                                 "locality": observed.recorder.figures(),
                                 "jobs": len(jobs_list), "mean_gpus": statistics.fmean(j.gpus for j in jobs_list),
                                 "median_run_s": statistics.median(j.duration for j in jobs_list),
                                 "mean_run_s": statistics.fmean(j.duration for j in jobs_list)})
            walls: dict[str, float] = {}
            for r in runs:
                if r["shape"] == shape and r["workload"] == sizes:
                    walls[r["policy"]] = walls.get(r["policy"], 0.0) + r["wall_s"]
            log.append(f"gang {shape} {sizes}: {len(seeds)} seeds in {time.perf_counter() - start:.1f}s ("
                       + ", ".join(f"{p} {w:.1f}s" for p, w in walls.items()) + ")")
            print(log[-1], flush=True)
    return runs


def _values(runs: list[dict[str, Any]], shape: str, workload: str, policy: str, field: str) -> list[float]:
    chosen = sorted((r for r in runs if (r["shape"], r["workload"], r["policy"]) == (shape, workload, policy)),
                    key=lambda r: r["seed"])
    return [float(getattr(r["metrics"], field)) for r in chosen]


def _ci(iv: Interval, scale: float = 1.0, digits: int = 1) -> str:
    if math.isnan(iv.mean):
        return "n/a"
    if math.isnan(iv.half):
        return f"{iv.mean * scale:.{digits}f}"
    return f"{iv.mean * scale:.{digits}f} ± {iv.half * scale:.{digits}f}"


@dataclasses.dataclass(frozen=True)
class Criterion:
    """One "win on every row" test: a metric, which way is better, and whom kubegang is compared with."""

    field: str
    label: str
    higher_is_better: bool
    against: str | None = None
    """A policy name, or None for the best baseline on that row (by mean)."""


CRITERIA = (
    Criterion("alloc_arrivals", "alloc (arrivals)", True),
    Criterion("makespan_h", "makespan", False),
    Criterion("queue_delay_p95_h", "queue delay p95", False),
    Criterion("large_wait_p99_h", "largest-decile wait p99", False),
    Criterion("narrowest_share", "narrowest (vs slurm-tree)", True, "slurm-tree"),
)
BASELINES = tuple(p for p in POLICIES if p != "kubegang")


def verdict(runs: list[dict[str, Any]], shape: str, workload: str, c: Criterion) -> tuple[str, str, Interval]:
    """(verdict, baseline compared, paired interval of kubegang - baseline) for one criterion."""
    ours = _values(runs, shape, workload, "kubegang", c.field)
    if c.against is not None:
        other = c.against
    else:
        means = {b: statistics.fmean(_values(runs, shape, workload, b, c.field)) for b in BASELINES}
        other = (max if c.higher_is_better else min)(means, key=means.__getitem__)
    diff = paired(ours, _values(runs, shape, workload, other, c.field))
    if math.isnan(diff.mean):
        return "n/a", other, diff
    if diff.mean == 0 and (math.isnan(diff.half) or diff.half == 0):
        return "equal", other, diff
    if math.isnan(diff.half) or (diff.low <= 0 <= diff.high):
        return "tied", other, diff
    ahead = diff.low > 0 if c.higher_is_better else diff.high < 0
    return ("**ahead**" if ahead else "**behind**"), other, diff


def render(runs: list[dict[str, Any]], seeds: list[int], jobs: int) -> list[str]:
    """The section's Markdown lines."""
    n = len(seeds)
    lines = [
        "## 2. Multi-node gang workloads",
        "",
        "### Method",
        "",
        f"**Seeds.** Every figure is the mean over the reported seeds {seeds[0]}..{seeds[-1]} ({n} runs per",
        "policy) with the half-width of its 95% confidence interval (Student's t); comparisons are *paired*",
        "(the interval of kubegang's per-seed difference to the baseline on the same workload), and a",
        "policy is ahead or behind only when that interval excludes zero. Tuning of any threshold is done",
        f"on seeds {TUNING_SEED_BASE + 1}.. only (`bench._gangs.TUNING_SEED_BASE`).",
        "",
        f"**Workloads** (`bench/sim/_workload.py`, documented there). {jobs:,} Kalos-like and "
        f"{jobs * PHILLY_JOBS_FACTOR:,}",
        "Philly-like jobs per run (fewer than the traces hold, so that the default run stays near ten",
        "minutes on two cores). Sizes: `kalos` from Acme/Kalos (Hu et al., NSDI '24: median 1 GPU, mean",
        "~27, max 1,024), `philly` from Microsoft Philly (Jeon et al., ATC '19: mean ~1.9), powers of two",
        "capped at half the cluster; jobs above one node take whole nodes. Run times: log-normal, the",
        "median growing as GPUs^0.35 (large jobs are the long ones), calibrated so that the whole mix has",
        "the published median and mean — Kalos 124 s and 21 min (AcmeTrace's summary of the Kalos trace);",
        "for Philly we had no per-size run-time figure we could verify, so it keeps the earlier",
        "*assumption* (median 1 h, mean 2 h). Arrivals: bursty (a two-state Markov-modulated Poisson",
        "process: bursts 20% of the time at 3x the mean rate, 2 h on average), stretched so that each run",
        "offers exactly 1.2x the cluster (offered load = requested GPU-seconds over the cluster's",
        "GPU-seconds between first and last arrival; printed per run below). Time limits: each job's",
        "run time x U(1, 5) rounded up to 1, 2, 4, 8, 12, 24, 48, 72 or 168 h (seeded, its own stream).",
        "",
        "**Policies** (`bench/sim/_baselines.py`: models of the other schedulers' rules, not the products).",
        "All of them order jobs by priority, then arrival, in **one queue** (kubegang runs with a single",
        "GPUQueue: no fair share for anyone). `kubegang`: the operator's admission cycle",
        "(`kubegang.admission.AdmissionCycle`) answered by the production `plan`, preemption and quota",
        "code, with the operator's defaults; each job carries its time limit as a GPUJob's `timeLimitSeconds`",
        "would, and backfill plans with it (a blocked head reserves at once the nodes whose gangs end",
        "first, planned again when one ends early; docs/quota.md). `default-scheduler`: kube-scheduler",
        "alone, pod by pod (LeastAllocated spread, random ties,",
        "torchrun's 600 s rendezvous timeout). `gang-binpack`: Volcano with the `gang` and `binpack` plugins",
        "(`binpack.weight: 10`, `binpack.resources: nvidia.com/gpu` weighted 10, CPU and memory unweighted):",
        "fullest nodes first, equal nodes in a seeded random order (Volcano's `SelectBestNode` picks at",
        "random among the best), fabric ignored, no reservation. `volcano-hypernode`: the same with",
        "network-topology-aware scheduling (HyperNode tiers = NVLink, leaf, spine, block; soft mode): the",
        "lowest tier with a HyperNode holding the gang, the fullest such HyperNode. `slurm-tree`: Slurm",
        "select/cons_tres + topology/tree, scheduling by *time limits*: each pass reserves specific nodes",
        "and GPUs (will-run test on the limits of the running jobs, switch best fit) for the first 5",
        "blocked jobs (`bf_job_part_count_reserve=5`; 1 would be EASY), and any job may start now on GPUs",
        "no reservation overlapping its limit needs (`bf_max_job_test=500`).",
        "",
        "**Metrics** (`bench/sim/_metrics.py`). *alloc (arrivals)*: GPUs of running gangs over all GPUs,",
        "time-averaged from the first to the last arrival — the same window for every policy. *alloc",
        "(drain)*: the same to the last completion (over a window common to all policies this would be",
        "the same for everyone, since all run the same work; so the drain is compared by *makespan*,",
        "first arrival to last completion, and this column is its utilisation). *p95 delay*: queueing",
        "delay (first start - arrival). *large p99 / max*: the delay of the largest decile (jobs at or above",
        f"the {LARGE_DECILE:.0f}th percentile of GPUs). *starved*: jobs that waited over "
        f"{STARVED_AFTER_S / 3600:.0f} h,",
        "summed over seeds. *narrowest*: gang starts whose nodes span no wider a level than the",
        "narrowest domain that could hold the gang at that moment, judged by counting free GPUs",
        "(`bench/sim/_oracle.py`), not by any policy's planner; *(empty)*: than the narrowest on an empty",
        "cluster. *partial GPU-h*: GPU-hours held by gangs waiting for siblings.",
        "",
        "![gang summary](benchmarks/gang-summary.png)",
        "",
        "| shape | workload | policy | alloc (arrivals) % | Δ vs kubegang (points) | alloc (drain) % | makespan h "
        "| p95 delay h | large p99 / max h | starved | narrowest % | (empty) % | partial GPU-h | wall s |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    policies = [*POLICIES, PRIORITY_VARIANT]
    for shape in GANG_SHAPES:
        for workload in GANG_WORKLOADS:
            ours = _values(runs, shape, workload, "kubegang", "alloc_arrivals")
            for policy in policies:
                def iv(field: str, s: str = shape, w: str = workload, p: str = policy) -> Interval:
                    return interval(_values(runs, s, w, p, field))
                if not _values(runs, shape, workload, policy, "jobs"):
                    continue
                delta = ("–" if policy in ("kubegang", PRIORITY_VARIANT)
                         else _ci(paired(_values(runs, shape, workload, policy, "alloc_arrivals"), ours), 100))
                starved = sum(_values(runs, shape, workload, policy, "starved"))
                wall = sum(r["wall_s"] for r in runs if (r["shape"], r["workload"], r["policy"]) ==
                           (shape, workload, policy))
                lines.append(
                    f"| {shape} | {workload} | {policy} | {_ci(iv('alloc_arrivals'), 100)} | {delta} | "
                    f"{_ci(iv('alloc_to_drain'), 100)} | {_ci(iv('makespan_h'))} | "
                    f"{_ci(iv('queue_delay_p95_h'), 1, 2)} | "
                    f"{_ci(iv('large_wait_p99_h'))} / {_ci(iv('large_wait_max_h'))} | {starved:.0f} | "
                    f"{_ci(iv('narrowest_share'), 100)} | {_ci(iv('ideal_share'), 100)} | "
                    f"{statistics.fmean(_values(runs, shape, workload, policy, 'partial_gpu_hours')):,.0f} | "
                    f"{wall:.0f} |")
    lines += ["", "*Δ vs kubegang*: the baseline's allocation minus kubegang's, paired by seed (negative: kubegang "
              "allocates more).", "", "### Does kubegang win every row?", "",
              "Paired 95% intervals of kubegang minus the best baseline on that row (by mean; for *narrowest*,"
              " minus slurm-tree). *ahead* / *behind*: the interval excludes zero; *tied*: it does not.", "",
              "| shape | workload | " + " | ".join(c.label for c in CRITERIA) + " |",
              "|---|---|" + "---|" * len(CRITERIA)]
    for shape in GANG_SHAPES:
        for workload in GANG_WORKLOADS:
            cells = []
            for c in CRITERIA:
                word, other, diff = verdict(runs, shape, workload, c)
                scale, digits = (100.0, 1) if c.field in ("alloc_arrivals", "narrowest_share") else (1.0, 2)
                cells.append(f"{word} vs {other} ({_ci(diff, scale, digits)})")
            lines.append(f"| {shape} | {workload} | " + " | ".join(cells) + " |")
    lines += ["", "Why kubegang is behind where it is, which jobs wait and what blocks them, measured on the tuning "
              "seeds: [benchmarks-analysis.md](benchmarks-analysis.md) (figures from "
              "[benchmarks/why-kubegang-waits.md](benchmarks/why-kubegang-waits.md), `python -m bench.sim.why_waits`)."]
    lines += ["", "Offered load of each run (requested GPU-seconds over the cluster's, first to last arrival), "
              "by seed:", "", "| shape | workload | jobs | median / mean run time (s) | offered load per seed |",
              "|---|---|---:|---:|---|"]
    for shape in GANG_SHAPES:
        for workload in GANG_WORKLOADS:
            chosen = sorted((r for r in runs if (r["shape"], r["workload"], r["policy"]) ==
                             (shape, workload, "kubegang")), key=lambda r: r["seed"])
            if not chosen:
                continue
            loads = " ".join(f"{r['metrics'].offered_load:.2f}" for r in chosen)
            lines.append(f"| {shape} | {workload} | {chosen[0]['jobs']:,} | "
                         f"{statistics.fmean(r['median_run_s'] for r in chosen):.0f} / "
                         f"{statistics.fmean(r['mean_run_s'] for r in chosen):.0f} | {loads} |")
    lines += ["", "Largest placeable gang per level, time-averaged, mean over seeds (GPUs, whole-node pods; "
              "`kubegang.placement.largest_placeable`):", "",
              "| shape | workload | policy | node | nvlink | leaf | spine | block | cluster |",
              "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for shape in GANG_SHAPES:
        for workload in GANG_WORKLOADS:
            for policy in policies:
                chosen = [r for r in runs if (r["shape"], r["workload"], r["policy"]) == (shape, workload, policy)]
                if not chosen:
                    continue
                lines.append(f"| {shape} | {workload} | {policy} | " + " | ".join(
                    f"{statistics.fmean(r['metrics'].largest.get(level, 0.0) for r in chosen):.0f}"
                    for level in ("node", "nvlink", "leaf", "spine", "block", "cluster")) + " |")
    lines += [""] + [f"![largest {s}](benchmarks/largest-{s}.png)" for s in GANG_SHAPES] + [""]
    return lines


def plot(runs: list[dict[str, Any]], plots: Path) -> list[str]:
    """The summary bars (with 95% intervals) and, per shape, seed 1's largest-placeable series."""
    files = []
    first = min((r["seed"] for r in runs), default=1)
    for shape in GANG_SHAPES:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for r in runs:
            if (r["shape"], r["workload"], r["seed"]) != (shape, "kalos", first) or r["policy"] == PRIORITY_VARIANT:
                continue
            series = r["metrics"].largest_series
            ax.step([t for t, _ in series], [v["leaf"] for _, v in series], where="post", label=r["policy"])
        ax.set_xlabel("simulated hours")
        ax.set_ylabel("largest placeable gang in one leaf (GPUs)")
        ax.set_title(f"{shape}, Kalos-like workload (seed {first}): largest gang that could start now")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        path = plots / f"largest-{shape}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        files.append(path.name)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    cells = [(s, w) for s in GANG_SHAPES for w in GANG_WORKLOADS]
    policies = list(POLICIES)
    width = 0.8 / len(policies)
    for k, policy in enumerate(policies):
        xs = [i + k * width for i in range(len(cells))]
        for ax, field in zip(axes, ("alloc_arrivals", "narrowest_share"), strict=True):
            ivs = [interval(_values(runs, s, w, policy, field)) for s, w in cells]
            ax.bar(xs, [100 * iv.mean for iv in ivs], width, label=policy,
                   yerr=[0 if math.isnan(iv.half) else 100 * iv.half for iv in ivs], capsize=2)
    for ax, title in zip(axes, ("GPU allocation, first to last arrival (%, 95% CI)",
                                "gangs in the narrowest feasible domain (%, 95% CI)"), strict=True):
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(cells))], [f"{s}\n{w}" for s, w in cells], fontsize=7)
        ax.set_title(title, fontsize=9)
        ax.set_ylim(0, 105)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    path = plots / "gang-summary.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    files.append(path.name)
    return files


def raw(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-seed figures for results.json (the time series left out)."""
    return [{**{k: v for k, v in r.items() if k != "metrics"},
             "metrics": {k: v for k, v in dataclasses.asdict(r["metrics"]).items() if k != "largest_series"}}
            for r in runs]


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Means and 95% half-widths per shape / workload / policy / metric (for results.json)."""
    out: dict[str, Any] = {}
    fields = [f.name for f in dataclasses.fields(RunMetrics) if f.name not in ("largest", "largest_series")]
    for r in runs:
        key = f"{r['shape']}/{r['workload']}/{r['policy']}"
        if key in out:
            continue
        out[key] = {f: dataclasses.asdict(interval(_values(runs, r["shape"], r["workload"], r["policy"], f)))
                    for f in fields}
    return out

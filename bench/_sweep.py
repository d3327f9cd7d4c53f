"""The short-job sweep section of docs/benchmarks.md: both systems over seeds, 95% intervals, sources.

The model and its delays are ``bench.sim._sweep``'s; this module runs it per seed for both systems,
once with the kubelet's start left out (what the schedulers add) and once with the pod-startup SLO's
5 s in it (what a user sees), and writes the table, the per-seed raw figures and the method.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from bench.sim import _sweep as sweep
from bench.sim import load_cluster
from bench.sim._stats import Interval, interval, paired

SHAPE = "superpod-h100"
VARIANTS = {"scheduling": 0.0, "with kubelet start": sweep.POD_STARTUP_SLO_S}
"""Figure name -> the bound pod's kubelet start (s) it runs with."""
GOAL_PCT = 2.0


def inputs() -> sweep.Latencies:
    """The model's delays, read once before anything runs: a missing or half-written end-to-end
    results file stops the run at its start, not after the hour the other sections take."""
    return sweep.latencies()


def run(seeds: list[int], log: list[str], trials: int = sweep.TRIALS,
        base: sweep.Latencies | None = None) -> list[dict[str, Any]]:
    """Every system x variant x seed; one dict of figures per run."""
    cluster = load_cluster(SHAPE)
    base = base or inputs()
    rows: list[dict[str, Any]] = []
    for variant, kubelet in VARIANTS.items():
        lat = dataclasses.replace(base, kubelet_start_s=kubelet)
        walls: dict[str, float] = {}
        for seed in seeds:
            for system in sweep.SYSTEMS:
                t0 = time.perf_counter()
                row = sweep.run_one(cluster, seed, system, lat, trials)
                walls[system] = walls.get(system, 0.0) + time.perf_counter() - t0
                rows.append({"variant": variant, "trials": trials, **row})
        log.append(f"sweep {variant}: {len(seeds)} seeds of {trials} trials ("
                   + ", ".join(f"{s} {w:.1f}s" for s, w in walls.items()) + ")")
        print(log[-1], flush=True)
    return rows


def _values(rows: list[dict[str, Any]], variant: str, system: str, field: str) -> list[float]:
    return [float(r[field]) for r in sorted(rows, key=lambda r: r["seed"])
            if r["variant"] == variant and r["system"] == system]


def _ci(iv: Interval, digits: int = 2) -> str:
    if iv.mean != iv.mean:
        return "n/a"
    return f"{iv.mean:.{digits}f}" + ("" if iv.half != iv.half else f" ± {iv.half:.{digits}f}")


def render(rows: list[dict[str, Any]], seeds: list[int], lat: sweep.Latencies | None = None) -> list[str]:
    trials = rows[0]["trials"] if rows else sweep.TRIALS
    lat = lat or inputs()
    gpus = [r["sweep_gpus"] for r in rows if r["variant"] == "scheduling" and r["system"] == "kubegang"]
    lines = [
        "## 4. The short-job sweep (simulated)", "",
        f"The seed's sweep: {trials} one-GPU trials of 5 min (uniform ±{sweep.TRIAL_JITTER:.0%}) through one queue "
        f"on `{SHAPE}`, while multi-node training gangs (2-16 nodes of 8 GPUs, for a day) hold "
        f"{sweep.GANG_FILL[0]:.0%}-{sweep.GANG_FILL[1]:.0%} of the nodes, so the sweep has {min(gpus)}-{max(gpus)} "
        f"GPUs; seeds {seeds[0]}..{seeds[-1]}. The driver is the end-to-end benchmark's: as many trials in flight "
        "as free GPUs, the next created when it learns one is over (from the pod's phase, or the GPUJob's). "
        "**Overhead** = (time from submit to Running, summed, plus the time from a trial's end to the "
        "submission of the trial that takes its slot) / total trial GPU time (`bench/_sweep_overhead.py`, "
        "the one definition both sweep benchmarks use). kubegang is the operator's production "
        "`AdmissionCycle`, run when the operator's loop would run it and lasting the CPU time it takes; plain pods are "
        "kube-scheduler alone (no queue, no gang). The model: `bench/sim/_sweep.py`. Every delay of both "
        "start paths, and where its number comes from:", "",
        "| delay | value | source |", "|---|---:|---|",
        *[f"| {name} | {value} | {source} |" for name, value, source in sweep.latency_sources(lat)], "",
        "Mean over seeds ± 95% half-width; the difference is paired by seed:", "",
        "| figure | kubegang | plain kube-scheduler | kubegang − plain | goal ≤ 2% |",
        "|---|---:|---:|---:|---|",
    ]
    for variant in VARIANTS:
        kg = _values(rows, variant, "kubegang", "overhead_pct")
        plain = _values(rows, variant, sweep.PlainPods.name, "overhead_pct")
        met = interval(kg).high <= GOAL_PCT if len(kg) > 1 else kg[0] <= GOAL_PCT
        lines.append(f"| overhead, {variant} (%) | {_ci(interval(kg))} | {_ci(interval(plain))} | "
                     f"{_ci(paired(kg, plain))} | {'met' if met else 'missed'} |")
    for field, label, digits in (("first_wave_start_s", "first wave: submit to Running, mean (s)", 2),
                                 ("slot_gap_s", "a trial's end to the next Running in its slot, mean (s)", 2),
                                 ("makespan_s", "sweep makespan (s)", 0)):
        kg = _values(rows, "scheduling", "kubegang", field)
        plain = _values(rows, "scheduling", sweep.PlainPods.name, field)
        lines.append(f"| {label}, scheduling | {_ci(interval(kg), digits)} | {_ci(interval(plain), digits)} | "
                     f"{_ci(paired(kg, plain), digits)} | |")
    cycles = [r for r in rows if r["system"] == "kubegang" and r["variant"] == "scheduling"]
    lines += [
        "",
        f"kubegang ran {min(r['cycles'] for r in cycles)}-{max(r['cycles'] for r in cycles)} cycles per sweep; "
        f"median cycle {interval([r['cycle_p50_ms'] for r in cycles]).mean:.1f} ms, longest "
        f"{max(r['cycle_max_ms'] for r in cycles):.0f} ms (CPU time). "
        "\"Met\" means the whole 95% interval is at most 2%.",
        "",
        "What the model leaves out, the same for both sides: image pulls and the framework's own start "
        "(the seed's 8-12% on Kubernetes includes them), and API-server queueing beyond the measured write "
        "time. The end-to-end version on kwok (`python -m bench.e2e.sweep`) drives the real processes; "
        "this one drives no API server.",
        "",
    ]
    return lines

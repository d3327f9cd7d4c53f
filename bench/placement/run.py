"""Placement engine benchmark: plan() latency on a 5,000-node / 40,000-GPU fabric at 50% load.

Run:  .venv/bin/python bench/placement/run.py [--samples 200] [--seed 1]

Fabric: 5,000 nodes x 8 GPUs, leaves of 32 nodes, 8 leaves per spine, 4 spines per block.
Load: ``fill_random`` to 50% (single-node pods of 1/2/4/8 GPUs on random nodes and GPUs).
Between samples the load is perturbed (a few background pods released and re-placed) so every
plan sees a different state; that churn is also what "incremental update" measures: one
allocate or release of a pod, index maintenance included. Preemption (``plan_preemption`` for a
16 x 8 gang that needs one leaf, every background pod a candidate) is sampled the same way. Prints
a table and writes ``bench/placement/results.json`` beside this file; for preemption it also records
the CPU time of the calling thread (``cpu_*``), which other processes on a busy machine disturb less
than wall-clock time. A benchmark, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from kubegang.levels import Level
from kubegang.placement import GangRequest, Placement, Snapshot, fill_random, largest_placeable, plan
from kubegang.preemption import Candidate, plan_preemption
from kubegang.topology import compile_index, uniform_fabric

NODES, GPUS = 5000, 8
CASES: list[tuple[str, dict[str, Any]]] = [
    ("1 pod x 1 GPU", {"pods": 1, "gpus_per_pod": 1}),
    ("1 pod x 8 GPUs", {"pods": 1, "gpus_per_pod": 8}),
    ("8 pods x 8 GPUs", {"pods": 8, "gpus_per_pod": 8}),
    ("64 pods x 8 GPUs", {"pods": 64, "gpus_per_pod": 8}),
    ("256 pods x 8 GPUs", {"pods": 256, "gpus_per_pod": 8}),
    ("64 pods x 1 GPU", {"pods": 64, "gpus_per_pod": 1}),
    ("8 pods x 8 GPUs, leaf required", {"pods": 8, "gpus_per_pod": 8, "required_level": Level.LEAF}),
    ("64 pods x 8 GPUs, leaf required (fails)", {"pods": 64, "gpus_per_pod": 8, "required_level": Level.LEAF}),
    ("1 pod x 0.3 GPU (shared)", {"pods": 1, "gpus_per_pod": 0, "gpu_fraction_milli": 300}),
]


def _percentiles(samples_ns: list[int]) -> dict[str, float]:
    ms = sorted(s / 1e6 for s in samples_ns)
    q = statistics.quantiles(ms, n=100, method="inclusive")
    return {"p50_ms": round(q[49], 4), "p99_ms": round(q[98], 4), "max_ms": round(ms[-1], 4)}


def _churn(snapshot: Snapshot, rng: random.Random, background: list[str], changes: int,
           timings: list[int] | None = None) -> None:
    """Release and re-place ``changes`` background pods; optionally time each primitive."""
    for _ in range(changes):
        owner = background[rng.randrange(len(background))]
        held = snapshot.allocations_of(owner)
        if not held:
            continue
        start = time.perf_counter_ns()
        snapshot.release(owner)
        if timings is not None:
            timings.append(time.perf_counter_ns() - start)
        allocation = held[0]
        start = time.perf_counter_ns()
        snapshot.allocate(allocation)
        if timings is not None:
            timings.append(time.perf_counter_ns() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("results.json"))
    args = parser.parse_args()
    rng = random.Random(args.seed)

    start = time.perf_counter()
    nodes = uniform_fabric(NODES, GPUS, leaf_size=32, spine_size=8, block_size=4)
    index = compile_index(nodes)
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    snapshot = Snapshot(index)
    snapshot_s = time.perf_counter() - start
    fill_random(snapshot, 0.5, rng)
    background = sorted(snapshot.owners())
    whole = largest_placeable(snapshot)
    free_nodes = sum(1 for n in range(NODES) if snapshot.capacity.flavours["*"].free[n] == GPUS)

    rows: list[dict[str, Any]] = []
    for name, kwargs in CASES:
        gang = GangRequest(f"bench-{len(rows)}", **kwargs)
        times: list[int] = []
        outcomes: dict[str, int] = {}
        for _ in range(args.samples):
            _churn(snapshot, rng, background, 5)
            t0 = time.perf_counter_ns()
            result = plan(gang, snapshot)
            times.append(time.perf_counter_ns() - t0)
            key = result.level.label if isinstance(result, Placement) else "unplaceable"
            outcomes[key] = outcomes.get(key, 0) + 1
        rows.append({"case": name, **_percentiles(times), "outcomes": outcomes})

    update_ns: list[int] = []
    for _ in range(args.samples * 5):
        _churn(snapshot, rng, background, 1, update_ns)
    update = _percentiles(update_ns)

    # Preemption: a 16 x 8 gang that needs one leaf, with every background pod a candidate.
    candidates = [Candidate(o, priority=0, start_time=float(i)) for i, o in enumerate(background)]
    gang = GangRequest("preemptor", pods=16, gpus_per_pod=8, required_level=Level.LEAF)
    preempt_ns: list[int] = []
    preempt_cpu_ns: list[int] = []
    victims: list[int] = []
    gpus_evicted: list[int] = []
    for _ in range(args.samples):
        _churn(snapshot, rng, background, 5)
        t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        preemption = plan_preemption(gang, snapshot, candidates)
        preempt_cpu_ns.append(time.thread_time_ns() - c0)
        preempt_ns.append(time.perf_counter_ns() - t0)
        if preemption is not None:
            victims.append(len(preemption.victims))
            gpus_evicted.append(preemption.gpus_evicted)
    preempt = _percentiles(preempt_ns)
    preempt_cpu = {f"cpu_{k}": v for k, v in _percentiles(preempt_cpu_ns).items()}

    results = {
        "fabric": {"nodes": NODES, "gpus": NODES * GPUS, "leaf_size": 32, "leaves_per_spine": 8,
                   "spines_per_block": 4},
        "load": {"occupancy": 0.5, "background_pods": len(background), "whole_free_nodes": free_nodes,
                 "largest_placeable_gpus": {lvl.label: v for lvl, v in whole.items()}},
        "compile_index_s": round(compile_s, 3),
        "build_snapshot_s": round(snapshot_s, 3),
        "plan": rows,
        "incremental_update": update,
        "preemption_16x8_in_one_leaf": {
            **preempt, **preempt_cpu, "candidates": len(candidates), "found": len(victims),
            "victims_mean": round(statistics.fmean(victims), 2) if victims else None,
            "gpus_evicted_mean": round(statistics.fmean(gpus_evicted), 2) if gpus_evicted else None,
        },
        "samples": args.samples, "seed": args.seed,
        "python": sys.version.split()[0], "machine": platform.platform(), "processor": platform.processor(),
    }
    args.out.write_text(json.dumps(results, indent=2) + "\n")

    print(f"fabric: {NODES} nodes x {GPUS} GPUs; 50% random load ({len(background)} pods, "
          f"{free_nodes} whole free nodes); compile {compile_s:.2f}s, snapshot {snapshot_s:.2f}s")
    print(f"{'gang':42} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}  outcome")
    for row in rows:
        print(f"{row['case']:42} {row['p50_ms']:8.3f} {row['p99_ms']:8.3f} {row['max_ms']:8.3f}  {row['outcomes']}")
    print(f"{'incremental update (allocate or release)':42} {update['p50_ms']:8.4f} {update['p99_ms']:8.4f} "
          f"{update['max_ms']:8.4f}")
    summary = results["preemption_16x8_in_one_leaf"]
    print(f"{'preemption, 16 x 8 in one leaf':42} {preempt['p50_ms']:8.3f} {preempt['p99_ms']:8.3f} "
          f"{preempt['max_ms']:8.3f}  {len(candidates)} candidates; found {summary['found']}/{args.samples}, "
          f"{summary['victims_mean']} victims / {summary['gpus_evicted_mean']} GPUs on average")
    print(f"{'  same, CPU time of the calling thread':42} {preempt_cpu['cpu_p50_ms']:8.3f} "
          f"{preempt_cpu['cpu_p99_ms']:8.3f} {preempt_cpu['cpu_max_ms']:8.3f}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Where the openb experiment's unallocated GPUs are: ``python -m bench.sim.openb_waste [--at 100]``.

Why: issue 13 asks kubegang to allocate at least 0.3 points more than the paper's FGD at 100% of
arrived workload, by method. Before a method can be judged, the 4-5% that no policy allocates there
has to be named: is it whole GPUs stranded by CPU or memory (a placement question across resources),
leftovers of shared GPUs (a packing question inside GPUs), or whole GPUs that nothing arriving asks
for? And when are tasks first dropped: a policy can only gain where it drops less. This replays the
experiment (``bench.sim._openb``: the trace in a seeded order, then the seed's clones) with the
production placement up to one arrived point, on *tuning* seeds (101.. by default, never the
reported 1..10), and reports for each seed:

- the allocation there and the arrived workload at which the first task was dropped;
- the free capacity by kind: leftovers of shared GPUs (by room, in 50-thousandth buckets), whole
  GPUs on nodes where no whole-GPU task of the trace's mix fits (CPU or memory gone), and whole
  GPUs that some task of the mix could still take;
- the GPUs requested by the tasks dropped so far, by task kind.

Prints Markdown (and writes it with ``--out FILE``).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench._gangs import TUNING_SEED_BASE
from bench.sim import _openb as openb
from bench.sim import load_cluster
from bench.sim._cluster import Cluster
from kubegang.placement import MILLI, WorkloadMix

BUCKET = 50
"""Width, in thousandths of a GPU, of the leftover histogram's buckets."""
LEFTOVER = "shared-GPU leftovers"
STRANDED = "whole GPUs, no whole-GPU task fits the node's CPU or memory"
UNASKED = "whole GPUs a whole-GPU task could still take"


@dataclass
class Waste:
    """What is not allocated at one arrived point of one replay."""

    arrived: float
    """Arrived workload (% of capacity) at which the replay stopped."""
    allocation: float
    """GPUs allocated there (% of capacity; a share counts its fraction)."""
    first_drop: float | None
    """Arrived workload (%) when the first task was dropped; None: none was."""
    free: dict[str, float] = field(default_factory=dict)
    """GPUs free there, by kind (``LEFTOVER``, ``STRANDED``, ``UNASKED``)."""
    leftovers: Counter[int] = field(default_factory=Counter)
    """Shared GPUs with room left, by room (the bucket's lower bound, in thousandths)."""
    dropped: dict[str, tuple[int, float]] = field(default_factory=dict)
    """Task kind -> (tasks dropped, GPUs they requested)."""


def task_kind(task: openb.Task) -> str:
    """``cpu-only``, ``share 810`` (thousandths), or ``2 GPUs``; ``(models A|B)`` when bound to models."""
    kind = "cpu-only" if task.num_gpu == 0 else (f"share {task.gpu_milli}" if task.shared
                                                   else f"{task.num_gpu} GPU{'s' if task.num_gpu > 1 else ''}")
    return kind + (f" (models {'|'.join(task.gpu_spec)})" if task.gpu_spec else "")


def measure(cluster: Cluster, tasks: Sequence[openb.Task], mix: WorkloadMix, *, policy: str = "kubegang",
            at: float = 100.0, seed: int = 0) -> Waste:
    """Replay ``tasks`` (already in arrival order) with ``policy`` until ``at`` % of the cluster's GPUs
    have arrived, and name what is not allocated then."""
    run = openb._Replay(cluster, policy, random.Random(seed), workload=mix)
    capacity = cluster.gpus
    first_drop: float | None = None
    dropped: dict[str, tuple[int, float]] = {}
    for task in tasks:
        if run.arrived * 100.0 >= at * capacity:
            break
        failed = run.failed
        run.feed([task])
        if run.failed > failed:
            if first_drop is None:
                first_drop = 100.0 * run.arrived / capacity
            count, gpus = dropped.get(task_kind(task), (0, 0.0))
            dropped[task_kind(task)] = (count + 1, gpus + task.gpu_request)
    waste = Waste(100.0 * run.arrived / capacity, 100.0 * run.allocated / capacity, first_drop, dropped=dropped)
    whole_shapes = [s for s, _ in mix.distribution() if s.gpus and s.gpu_milli == MILLI]
    snap = run.snapshot
    free: dict[str, float] = {}
    for n, node in enumerate(snap.topology.nodes):
        milli = snap.gpu_milli[n]
        whole = sum(1 for m in milli if m == MILLI)
        for m in milli:
            if 0 < m < MILLI:
                free[LEFTOVER] = free.get(LEFTOVER, 0.0) + m / MILLI
                waste.leftovers[m // BUCKET * BUCKET] += 1
        if whole:
            cpu = node.cpu_milli - snap.cpu_used[n]
            memory = node.memory_mib - snap.memory_used[n]
            fits = any(s.gpus <= whole and s.cpu_milli <= cpu and s.memory_mib <= memory for s in whole_shapes)
            kind = UNASKED if fits else STRANDED
            free[kind] = free.get(kind, 0.0) + whole
    waste.free = {kind: free.get(kind, 0.0) for kind in (LEFTOVER, STRANDED, UNASKED)}
    return waste


def render(workload: str, at: float, runs: Sequence[tuple[int, Waste]]) -> str:
    """Markdown: per seed, then the leftover histogram and the dropped kinds pooled over seeds."""
    lines = [f"### `{workload}` at {at:g}% arrived (seeds {', '.join(str(s) for s, _ in runs)})", "",
             f"| seed | allocation % | first drop at arrived % | {LEFTOVER} | {STRANDED} | {UNASKED} |",
             "|---:|---:|---:|---:|---:|---:|"]
    for seed, w in runs:
        first = f"{w.first_drop:.1f}" if w.first_drop is not None else "none"
        lines.append(f"| {seed} | {w.allocation:.2f} | {first} | {w.free[LEFTOVER]:.1f} | {w.free[STRANDED]:.0f} "
                     f"| {w.free[UNASKED]:.0f} |")
    count = len(runs)
    means = (f"{statistics.mean(w.free[k] for _, w in runs):.1f}" for k in (LEFTOVER, STRANDED, UNASKED))
    lines.append(f"| mean | {statistics.mean(w.allocation for _, w in runs):.2f} | | " + " | ".join(means) + " |")
    pooled: Counter[int] = Counter()
    for _, w in runs:
        pooled.update(w.leftovers)
    lines += ["", "Shared GPUs with room left, by room (thousandths), mean per seed: "
              + ", ".join(f"{low}-{low + BUCKET - 1}: {pooled[low] / count:.0f}" for low in sorted(pooled)), ""]
    drops: dict[str, list[float]] = {}
    for _, w in runs:
        for kind, (tasks, gpus) in w.dropped.items():
            drops.setdefault(kind, [0.0, 0.0])
            drops[kind][0] += tasks / count
            drops[kind][1] += gpus / count
    lines += ["| dropped task kind | tasks per seed | GPUs per seed |", "|---|---:|---:|"]
    for kind, (per_seed, gpus_per_seed) in sorted(drops.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"| {kind} | {per_seed:.1f} | {gpus_per_seed:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="*", default=list(openb.WORKLOADS), choices=list(openb.WORKLOADS))
    parser.add_argument("--seeds", type=int, default=5, help=f"tuning seeds {TUNING_SEED_BASE + 1}.. to replay")
    parser.add_argument("--at", type=float, default=100.0, help="arrived workload (%% of capacity) to stop at")
    parser.add_argument("--policy", default="kubegang", choices=list(openb.OPENB_POLICIES))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    cluster = load_cluster("openb")
    start = time.perf_counter()
    text = ""
    for workload in args.workloads:
        trace = openb.load_tasks(workload)
        mix = openb.workload_mix(trace)
        seeds = range(TUNING_SEED_BASE + 1, TUNING_SEED_BASE + 1 + args.seeds)
        runs = [(seed, measure(cluster, openb.arrivals(trace, cluster.gpus, seed), mix, policy=args.policy, at=args.at,
                               seed=seed)) for seed in seeds]
        text += render(workload, args.at, runs) + "\n"
    text += f"{args.policy}; {time.perf_counter() - start:.0f} s.\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

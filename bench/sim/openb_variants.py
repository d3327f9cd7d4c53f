"""openb variants that are not in the repository: ``python -m bench.sim.openb_variants [--seeds N] [--out FILE]``.

Why: kubegang's single-pod placement (FGD with best-fit ties, ``kubegang/placement/_fragmentation.py``)
was developed on the two openb workloads in ``bench/data/openb`` (``default``, ``multigpu50``); a
margin that comes from the method, not from fitting those two, must hold on other samples of the
same trace. The trace's upstream folder has more samples (GPU-sharing-heavy ``gpushare*``,
GPU-type-constrained ``gpuspec*``); they are not copied here, so this script *builds* two of the
same kinds from ``default`` with a fixed seed, and nothing it builds is committed:

- ``gpushare80``: the same number of tasks; CPU-only tasks kept; GPU tasks resampled with replacement
  so that 80% of them share a GPU (``default``: 44%), each kind drawn uniformly from the trace's
  tasks of that kind.
- ``gpuspec33`` (and the lighter ``gpuspec10`` and ``gpuspec20``, built the same way): every
  task kept; 33% of the GPU tasks (the share the upstream README gives for the production cluster)
  get a GPU-model constraint: a model drawn in proportion to the cluster's GPUs
  of that model, among the models with a node that could hold the task (GPUs, CPU, memory); a V100
  task accepts both V100 models, as in the README's example ``V100M16|V100M32``.

Each variant runs the paper's inflation experiment (``bench.sim._openb.replay``) for kubegang and our
re-implementations of the paper's Best-fit and Random (the paper published no curve for these
samples, so its FGD is not on the table). Prints, and writes to ``--out``, the allocation at a few
arrived points and how many of the 131 points Best-fit is above kubegang.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.sim import _openb as openb
from bench.sim import load_cluster
from bench.sim._cluster import Cluster

BUILD_SEED = 2023
"""The variants' own sampling seed (not a replay seed)."""
POINTS = (70, 90, 95, 100, 110, 130)


def gpushare_heavy(tasks: Sequence[openb.Task], share: float, rng: random.Random) -> list[openb.Task]:
    """``tasks`` with the GPU tasks resampled so that ``share`` of them share a GPU (module docstring)."""
    cpu_only = [t for t in tasks if t.num_gpu == 0]
    shared = [t for t in tasks if t.shared]
    whole = [t for t in tasks if t.num_gpu and not t.shared]
    gpu_count = len(tasks) - len(cpu_only)
    n_shared = round(share * gpu_count)
    picked = [rng.choice(shared) for _ in range(n_shared)] + [rng.choice(whole) for _ in range(gpu_count - n_shared)]
    out = cpu_only + [openb.Task(f"{t.name}-s{i}", t.cpu_milli, t.memory_mib, t.num_gpu, t.gpu_milli, t.gpu_spec)
                      for i, t in enumerate(picked)]
    rng.shuffle(out)
    return out


def gpu_typed(tasks: Sequence[openb.Task], fraction: float, cluster: Cluster, rng: random.Random) -> list[openb.Task]:
    """``tasks`` with ``fraction`` of the GPU tasks constrained to GPU models (module docstring)."""
    nodes = cluster.topology.nodes
    gpus_of: dict[str, int] = {}
    for node in nodes:
        for g in node.gpus:
            gpus_of[g.product] = gpus_of.get(g.product, 0) + 1

    specs: dict[str, set[tuple[int, int, int]]] = {}  # model -> distinct (GPUs, CPU, memory) of its nodes
    for node in nodes:
        if node.gpus:
            specs.setdefault(node.gpus[0].product, set()).add((len(node.gpus), node.cpu_milli, node.memory_mib))

    def could_hold(model: str, task: openb.Task) -> bool:
        return any(g >= task.num_gpu and cpu >= task.cpu_milli and mem >= task.memory_mib
                   for g, cpu, mem in specs.get(model, ()))

    out: list[openb.Task] = []
    for t in tasks:
        if t.num_gpu and rng.random() < fraction:
            models = [m for m in sorted(gpus_of) if could_hold(m, t)]
            if models:
                model = rng.choices(models, weights=[gpus_of[m] for m in models])[0]
                family = "V100" if model.startswith("V100") else model
                spec = tuple(m for m in sorted(gpus_of) if m.startswith(family))
                t = openb.Task(t.name, t.cpu_milli, t.memory_mib, t.num_gpu, t.gpu_milli, spec)
        out.append(t)
    return out


VARIANTS: dict[str, Callable[[Sequence[openb.Task], Cluster], list[openb.Task]]] = {
    "gpushare80": lambda tasks, cluster: gpushare_heavy(tasks, 0.8, random.Random(BUILD_SEED)),
    "gpuspec10": lambda tasks, cluster: gpu_typed(tasks, 0.10, cluster, random.Random(BUILD_SEED)),
    "gpuspec20": lambda tasks, cluster: gpu_typed(tasks, 0.20, cluster, random.Random(BUILD_SEED)),
    "gpuspec33": lambda tasks, cluster: gpu_typed(tasks, 0.33, cluster, random.Random(BUILD_SEED)),
}


def run(seeds: list[int]) -> str:
    cluster = load_cluster("openb")
    base = openb.load_tasks("default")
    lines = ["| variant | policy | " + " | ".join(f"{p}%" for p in POINTS) + " | points Best-fit above |",
             "|---|---|" + "---:|" * len(POINTS) + "---:|"]
    for name, build in VARIANTS.items():
        tasks = build(base, cluster)
        means: dict[str, list[float]] = {}
        for policy in ("kubegang", "bestfit", "random"):
            t0 = time.perf_counter()
            curves = openb.replay(cluster, "default", policy, seeds, tasks)
            means[policy] = [statistics.fmean(c.allocation[i] for c in curves) for i in range(openb.ARRIVED_POINTS)]
            print(f"{name} {policy}: {len(seeds)} seeds in {time.perf_counter() - t0:.1f}s", flush=True)
        above = sum(1 for i in range(openb.ARRIVED_POINTS) if means["bestfit"][i] > means["kubegang"][i] + 1e-9)
        for policy, mean in means.items():
            extra = str(above) if policy == "kubegang" else ""
            lines.append(f"| {name} ({len(tasks):,} tasks) | {policy} | "
                         + " | ".join(f"{mean[p]:.2f}" for p in POINTS) + f" | {extra} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="replay seeds 1..N")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    table = run(list(range(1, args.seeds + 1)))
    text = ("# openb variants built from the trace\n\n"
            f"Generated by `python -m bench.sim.openb_variants --seeds {args.seeds}` (how the samples are built:"
            " the script's docstring; why: docs/benchmarks-analysis.md).\n\n" + table
            + f"\nGPU allocation rate (%) at arrived workload, mean over replay seeds 1..{args.seeds}; "
            f"{time.perf_counter() - start:.0f} s.\n")
    print(text)
    if args.out is not None:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

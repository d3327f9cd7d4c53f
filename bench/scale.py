"""Cost as the work grows: ``plan`` p99 by node count, admission decisions/s by queued jobs and nodes.

    .venv/bin/python -m bench.scale [--quick] [--out FILE.json]

Both figures come from the production code on synthetic fabrics (``kubegang.topology.uniform_fabric``:
8 GPUs a node, leaves of 32 nodes, 8 leaves a spine, 4 spines a block):

- ``plan`` (``kubegang.placement.plan``) on a snapshot held 50% by random single-node pods
  (``fill_random``), for the gang mix of ``bench/placement/run.py`` (its ``CASES``), the load churned
  between samples as there; p99 per case and over the whole mix.
- The operator's ``AdmissionCycle`` (``bench.sim.KubegangPolicy.run_cycle``, the leader's cycle with
  its production settings) over a queue of 1 to 8-node gangs and single-node jobs in 16 leaf queues,
  the cluster 95% held by background pods at the start, as in a busy cluster. A
  *decision* is one head tried (quota checked, then placed or left waiting); decisions/s = heads tried
  in one cycle / its CPU time. Jobs a cycle does not reach are not counted. The same cycle is then run
  once more with nothing freed in between (a leader's step between completions on a full cluster): its
  CPU and the ``Plan`` questions it still asks (the refusals of the first are answered from memory while
  the room epoch stands; decisions.md, "A refused Plan is not asked again until room was freed").

Growth: each curve is fitted by least squares as constant, ``a + b log n`` and ``a + b n``; the fit with
the smallest residual is named, and the log-log slope (cost ~ n^k) is given beside it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import platform
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.placement.run import CASES, _churn, _percentiles
from bench.sim._cluster import Cluster
from bench.sim._kubegang import KubegangPolicy
from bench.sim._workload import Job
from kubegang.admission import Plan
from kubegang.placement import GangRequest, Snapshot, fill_random, plan
from kubegang.topology import compile_index, uniform_fabric


@dataclass(frozen=True)
class Grid:
    """The points one run measures."""

    plan_nodes: tuple[int, ...]
    queue_jobs: tuple[int, ...]
    """Queued jobs of the queue curve, on ``queue_nodes`` nodes."""
    queue_nodes: int
    cycle_nodes: tuple[int, ...]
    """Nodes of the nodes curve, with ``cycle_queue`` queued jobs."""
    cycle_queue: int
    samples: int
    """``plan`` samples per gang case."""


FULL = Grid((1000, 5000, 20000), (1000, 10000, 100000), 5000, (1000, 5000, 20000), 1000, 100)
QUICK = Grid((1000, 5000), (1000, 10000), 5000, (1000, 5000), 1000, 20)
TINY = Grid((64, 128), (50, 100), 64, (64, 128), 50, 3)
"""For tests of the report's plumbing only."""
GRIDS = {"full": FULL, "quick": QUICK, "tiny": TINY}
QUEUES = 16
FILL = 0.95
JOB_SHAPES = ((1, 1), (1, 2), (1, 4), (1, 8), (2, 8), (4, 8), (8, 8))
"""(pods, GPUs per pod) of the queued jobs, equally likely."""


def _fabric(nodes: int) -> Cluster:
    index = compile_index(uniform_fabric(nodes, 8, leaf_size=32, spine_size=8, block_size=4))
    products = tuple(sorted({g.product for n in index.nodes for g in n.gpus}))
    return Cluster(f"uniform-{nodes}", index, nodes * 8, products)


def plan_curve(nodes: int, samples: int, seed: int = 1) -> dict[str, Any]:
    """``plan`` latency per case of the mix and over all of it, on ``nodes`` nodes at 50% load."""
    rng = random.Random(seed)
    cluster = _fabric(nodes)
    snapshot = Snapshot(cluster.topology)
    fill_random(snapshot, 0.5, rng)
    background = sorted(snapshot.owners())
    cases: dict[str, Any] = {}
    every: list[int] = []
    for i, (name, kwargs) in enumerate(CASES):
        gang = GangRequest(f"scale-{i}", **kwargs)
        times: list[int] = []
        for _ in range(samples):
            _churn(snapshot, rng, background, 5)
            t0 = time.thread_time_ns()
            plan(gang, snapshot)
            times.append(time.thread_time_ns() - t0)
        cases[name] = _percentiles(times)
        every += times
    return {"nodes": nodes, "cases": cases, "mix": _percentiles(every)}


class _Counted:
    """Counts the heads a cycle tries (each try asks the quota port ``can_admit`` once per flavour) and the
    ``Plan`` questions it asks the placement port (in the operator, gRPC calls to the extender)."""

    def __init__(self, policy: KubegangPolicy) -> None:
        self.tries = 0
        self.plans = 0
        inner = policy.quota.can_admit
        answer = policy._answer

        def can_admit(job: Any) -> Any:
            self.tries += 1
            return inner(job)

        def counted_answer(effect: Any) -> Any:
            if isinstance(effect, Plan):
                self.plans += 1
            return answer(effect)

        policy.quota.can_admit = can_admit  # type: ignore[method-assign]
        policy._answer = counted_answer  # type: ignore[method-assign]


def cycle_curve(nodes: int, jobs: int, seed: int = 1) -> dict[str, Any]:
    """One production admission cycle over ``jobs`` queued jobs on ``nodes`` nodes, 95% held."""
    rng = random.Random(seed)
    cluster = _fabric(nodes)
    snapshot = cluster.snapshot()
    fill_random(snapshot, FILL, rng)
    policy = KubegangPolicy(queues=QUEUES)
    policy.reset(cluster, snapshot, rng)
    for i in range(jobs):
        pods, gpus = rng.choice(JOB_SHAPES)
        policy.submit(Job(f"job-{i}", float(i), pods, gpus, 3600.0, queue=f"team-{i % QUEUES}"), float(i))
    counted = _Counted(policy)
    t0, c0 = time.perf_counter(), time.thread_time()
    step, _ = policy.run_cycle(float(jobs))
    cpu, wall = time.thread_time() - c0, time.perf_counter() - t0
    plans, tries = counted.plans, counted.tries
    # The leader's next step when nothing was freed meanwhile (no gang ended: only pods of the gangs it
    # admitted appeared), as on a full cluster between completions: refusals are answered from memory.
    c1 = time.thread_time()
    policy.run_cycle(float(jobs))
    return {"nodes": nodes, "jobs": jobs, "tried": tries, "admitted": len(step.started),
            "cycle_s": cpu, "cycle_wall_s": wall, "decisions_per_s": tries / cpu if cpu > 0 else math.nan,
            "plans": plans, "next_cycle_s": time.thread_time() - c1, "next_plans": counted.plans - plans}


def growth(xs: list[float], ys: list[float]) -> dict[str, Any]:
    """Which of constant, log and linear fits ``ys`` over ``xs`` best, and the log-log slope."""
    def residual(f: list[float] | None) -> float:
        if f is None:
            mean = statistics.fmean(ys)
            return sum((y - mean) ** 2 for y in ys)
        mf, my = statistics.fmean(f), statistics.fmean(ys)
        sxx = sum((x - mf) ** 2 for x in f)
        b = sum((x - mf) * (y - my) for x, y in zip(f, ys, strict=True)) / sxx
        a = my - b * mf
        return sum((y - a - b * x) ** 2 for x, y in zip(f, ys, strict=True))
    fits = {"constant": residual(None), "log": residual([math.log(x) for x in xs]), "linear": residual(xs)}
    total = fits["constant"] or 1.0
    lx, ly = [math.log(x) for x in xs], [math.log(max(y, 1e-12)) for y in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    slope = sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / sum((a - mx) ** 2 for a in lx)
    # A spread within 15% of the mean is "constant" whatever fits best: timing noise on a shared machine.
    flat = (max(ys) - min(ys)) <= 0.15 * statistics.fmean(ys)
    if flat:
        best = "constant"
    elif len(xs) < 3:
        best = "n/a (2 points)"  # a line through two points fits log and linear alike
    else:
        best = min(("log", "linear"), key=fits.__getitem__)
    return {"best": best, "slope": slope, "r2": {k: 1 - v / total for k, v in fits.items()}}


def run(grid_name: str, log: list[str]) -> dict[str, Any]:
    """Every point of the grid ``full``, ``quick`` or ``tiny`` (tests)."""
    if grid_name not in GRIDS:
        raise ValueError(f"scale grid must be one of {', '.join(GRIDS)}, got {grid_name!r}")
    grid = GRIDS[grid_name]
    out: dict[str, Any] = {"grid": dataclasses.asdict(grid), "grid_name": grid_name, "queue_nodes": grid.queue_nodes,
                           "cycle_queue": grid.cycle_queue, "plan": [], "queue": [], "nodes": []}
    for nodes in grid.plan_nodes:
        t0 = time.perf_counter()
        out["plan"].append(plan_curve(nodes, grid.samples))
        log.append(f"scale plan {nodes} nodes: p99 {out['plan'][-1]['mix']['p99_ms']:.2f} ms "
                   f"({time.perf_counter() - t0:.1f}s)")
        print(log[-1], flush=True)
    for key, points in (("queue", [(grid.queue_nodes, j) for j in grid.queue_jobs]),
                        ("nodes", [(n, grid.cycle_queue) for n in grid.cycle_nodes])):
        for nodes, jobs in points:
            t0 = time.perf_counter()
            out[key].append(cycle_curve(nodes, jobs))
            row = out[key][-1]
            log.append(f"scale cycle {nodes} nodes, {jobs} queued: {row['tried']} tried in {row['cycle_s']:.2f}s "
                       f"({time.perf_counter() - t0:.1f}s)")
            print(log[-1], flush=True)
    out["growth"] = {
        "plan_p99_by_nodes": growth([r["nodes"] for r in out["plan"]], [r["mix"]["p99_ms"] for r in out["plan"]]),
        "cycle_s_by_queue": growth([r["jobs"] for r in out["queue"]], [r["cycle_s"] for r in out["queue"]]),
        "cycle_s_by_nodes": growth([r["nodes"] for r in out["nodes"]], [r["cycle_s"] for r in out["nodes"]]),
    }
    for name, _ in CASES:
        out["growth"][f"plan p99: {name}"] = growth([r["nodes"] for r in out["plan"]],
                                                     [r["cases"][name]["p99_ms"] for r in out["plan"]])
    return out


def _growth(g: dict[str, Any]) -> str:
    return f"{g['best']} (n^{g['slope']:.2f})"


def render(data: dict[str, Any]) -> list[str]:
    plan_rows, queue_rows, node_rows = data["plan"], data["queue"], data["nodes"]
    g = data["growth"]
    lines = [
        "## 5. Cost as the work grows", "",
        "Production code on synthetic fabrics (`bench/scale.py`; 8 GPUs a node, leaves of 32 nodes). "
        f"`plan` on a snapshot 50% held by random pods, {data['grid']['samples']} samples per gang case of "
        "`bench/placement/run.py`, the load churned between samples. Admission: one production "
        f"`AdmissionCycle` (its default settings, {QUEUES} leaf queues) over 1-8-node jobs, the cluster "
        f"{FILL:.0%} held at the start; a decision is one head tried; *the next cycle* runs it again at once "
        "with nothing freed in between, as a leader's step between completions, where refused `Plan`s are "
        "answered from memory (the room epoch); the `Plan`s it still asks are for the heads that entered "
        "the cycle's window of heads when the first cycle's admitted jobs left it. Its quota port is the "
        "simulator's (`bench/sim/_kubegang.py`, over the same `kubegang.quota` tree); the operator's own, "
        "the `QuotaBook`, with the preemption question every blocked head asks, is measured by "
        "`python -m bench.operator_step --waiting` ([benchmarks-e2e-analysis.md](benchmarks-e2e-analysis.md)). "
        "Growth: the best of constant / log / "
        "linear least-squares fits, with the log-log slope (cost ~ n^k). Times are CPU time of the calling "
        "thread (other processes on this shared machine disturb it less than wall time).", "",
        "| nodes | " + " | ".join(f"{r['nodes']:,}" for r in plan_rows) + " | growth |",
        "|---|" + "---:|" * len(plan_rows) + "---|",
        "| `plan` p99, whole mix (ms) | " + " | ".join(f"{r['mix']['p99_ms']:.2f}" for r in plan_rows)
        + f" | {_growth(g['plan_p99_by_nodes'])} |",
    ]
    for name in plan_rows[0]["cases"]:
        cells = " | ".join(f"{r['cases'][name]['p99_ms']:.2f}" for r in plan_rows)
        lines.append(f"| `plan` p99, {name} (ms) | {cells} | {_growth(g[f'plan p99: {name}'])} |")
    for rows, label, key, growth_key in (
            (queue_rows, f"queued jobs ({data['queue_nodes']:,} nodes)", "jobs", "cycle_s_by_queue"),
            (node_rows, f"nodes ({data['cycle_queue']:,} queued jobs)", "nodes", "cycle_s_by_nodes")):
        lines += ["", f"| {label} | " + " | ".join(f"{r[key]:,}" for r in rows) + " | growth |",
                  "|---|" + "---:|" * len(rows) + "---|",
                  "| admission decisions / s | " + " | ".join(f"{r['decisions_per_s']:,.0f}" for r in rows) + " | |",
                  "| one cycle, CPU (s) | " + " | ".join(f"{r['cycle_s']:.2f}" for r in rows)
                  + f" | {_growth(g[growth_key])} |",
                  "| heads tried / admitted in it | " + " | ".join(f"{r['tried']:,} / {r['admitted']}" for r in rows)
                  + " | |",
                  "| `Plan`s asked in it | " + " | ".join(f"{r['plans']:,}" for r in rows) + " | |",
                  "| the next cycle, nothing freed: CPU (s) / `Plan`s asked | "
                  + " | ".join(f"{r['next_cycle_s']:.2f} / {r['next_plans']:,}" for r in rows) + " | |"]
    lines.append("")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the reduced grid (1k-5k nodes, 1k-10k jobs)")
    parser.add_argument("--grid", choices=tuple(GRIDS), default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=None, help="write the raw figures as JSON here")
    args = parser.parse_args(argv)
    log: list[str] = []
    data = run(args.grid or ("quick" if args.quick else "full"), log)
    data["machine"] = {"python": sys.version.split()[0], "platform": platform.platform()}
    print("\n".join(render(data)))
    if args.out is not None:
        args.out.write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

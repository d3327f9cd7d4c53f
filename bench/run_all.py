"""Regenerate docs/benchmarks.md and its plots: ``python -m bench.run_all [--quick] [--out DIR]``.

Runs, on the production core (kubegang.placement / quota / preemption / topology):

1. the FGD paper's workload-inflation experiment on the Alibaba openb trace (``bench.sim._openb``),
   for kubegang and our Random / Best-fit re-implementations, against the paper's published curves;
2. generated multi-node gang workloads (Kalos-like, Philly-like) on the ``superpod-h100`` and
   ``gb200-nvl72`` shapes under every policy of ``bench.sim.POLICIES``, over seeds, with the
   metrics of ``bench.sim._metrics`` and 95% intervals (``bench._gangs``);
3. the seed's short-job sweep (500 one-GPU trials through one queue beside training gangs), kubegang's
   production admission cycle against plain kube-scheduler pods, each start path modelled
   (``bench._sweep``, ``bench.sim._sweep``);
4. the cost curve: ``plan`` p99 by node count and admission decisions/s by queued jobs and nodes
   (``bench.scale``).

Writes every artefact under ``--out DIR`` (default docs/): ``DIR/benchmarks.md`` (tables, machine,
versions, seeds, wall times), the PNGs in ``DIR/benchmarks/`` and the raw figures of every run, per
seed, in ``DIR/benchmarks/results.json``. Nothing is written outside DIR, so a run into a scratch
folder leaves the committed page alone. The end-to-end section is read from docs/benchmarks-e2e.md
(an input, written by ``bench.e2e.run``) when it exists.
``--quick`` runs a small configuration (one openb seed, two gang seeds, fewer jobs, two sweep seeds of
100 trials, the reduced scale grid) in a few minutes.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from bench import _gangs as gangs
from bench import _locality as locality
from bench import _sweep as sweep
from bench import scale
from bench.sim import _openb as openb
from bench.sim import load_cluster
from bench.sim._sweep import Latencies

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PLOTS_DIR = "benchmarks"
"""The plots' and raw results' folder under the output directory (the page links it relatively)."""
RESULTS = "results.json"
E2E = DOCS / "benchmarks-e2e.md"
CITE_FGD = ('Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation '
            'Gradient Descent", USENIX ATC \'23; trace: alibaba/clusterdata, cluster-trace-gpu-v2023')
OPENB_POLICIES = ("kubegang", "bestfit", "random")
FULL_JOBS = 800
"""Kalos jobs per gang run by default (Philly: ``PHILLY_JOBS_FACTOR`` times as many); sized so that
the default run stays near ten minutes on two cores."""
QUICK_JOBS = 200
POINTS = (30, 50, 70, 80, 90, 95, 100, 110, 120, 130)


def _spans(points: list[int]) -> str:
    """Arrived points as percent ranges: ``2..5%, 9%``."""
    spans: list[list[int]] = []
    for p in points:
        if spans and p == spans[-1][1] + 1:
            spans[-1][1] = p
        else:
            spans.append([p, p])
    return ", ".join(f"{a}%" if a == b else f"{a}..{b}%" for a, b in spans)


def _mean(curves: list[list[float]]) -> list[float]:
    return [statistics.fmean(c[i] for c in curves) for i in range(len(curves[0]))]


def run_openb(seeds: list[int], workloads: tuple[str, ...], log: list[str], nodes: int | None = None,
              tasks_limit: int | None = None) -> dict[str, Any]:
    """The openb experiment; ``nodes`` / ``tasks_limit`` take the first nodes and tasks only (tests)."""
    cluster = load_cluster("openb", limit=nodes)
    out: dict[str, Any] = {"gpus": cluster.gpus, "nodes": cluster.topology.node_count, "workloads": {}}
    for workload in workloads:
        tasks = openb.load_tasks(workload)[:tasks_limit]
        runs: dict[str, Any] = {}
        for policy in OPENB_POLICIES:
            start = time.perf_counter()
            curves = openb.replay(cluster, workload, policy, seeds, tasks)
            wall = time.perf_counter() - start
            runs[policy] = {"curves": [c.allocation for c in curves], "mean": _mean([c.allocation for c in curves]),
                            "failed": statistics.fmean(c.failed for c in curves), "wall_s": wall,
                            "dropped": [c.dropped for c in curves],
                            "locality": [c.locality.figures() if c.locality else None for c in curves]}
            log.append(f"openb {workload} {policy}: {len(seeds)} seeds in {wall:.1f}s")
            print(log[-1], flush=True)
        out["workloads"][workload] = {"tasks": len(tasks), "runs": runs, "paper": openb.paper_curves(workload)}
    return out


def plot_openb(data: dict[str, Any], plots: Path) -> list[str]:
    files = []
    colours = {"kubegang": "tab:blue", "bestfit": "tab:orange", "random": "tab:green"}
    paper_colours = {"FGD": "tab:red", "BestFit": "tab:orange", "Random": "tab:green"}
    for workload, wl in data["workloads"].items():
        fig, ax = plt.subplots(figsize=(8, 5))
        x = list(range(openb.ARRIVED_POINTS))
        for name, colour in paper_colours.items():
            if name in wl["paper"]:
                ax.plot(x, wl["paper"][name], linestyle="--", color=colour, label=f"paper: {name}")
        for policy, run in wl["runs"].items():
            curves = run["curves"]
            lo = [min(c[i] for c in curves) for i in x]
            hi = [max(c[i] for c in curves) for i in x]
            ax.plot(x, run["mean"], color=colours[policy], label=f"ours: {policy} ({len(curves)} seeds)")
            ax.fill_between(x, lo, hi, color=colours[policy], alpha=0.2)
        ax.set_xlim(60, 130)
        ax.set_ylim(55, 100)
        ax.set_xlabel("arrived workload (% of GPU capacity)")
        ax.set_ylabel("GPU allocation rate (% of 6,212 GPUs)")
        ax.set_title(f"openb {workload}: GPU allocation under workload inflation")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
        fig.subplots_adjust(bottom=0.17)
        caption = "Paper curves: " + CITE_FGD.replace("; trace", ";\ntrace") + "."
        fig.text(0.01, 0.01, caption, fontsize=6.5)
        path = plots / f"openb-{workload}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        files.append(path.name)
    return files


E2E_RESULTS = ROOT / "bench" / "e2e" / "results.json"
"""The raw figures of the run docs/benchmarks-e2e.md shows (``bench.e2e.run`` writes both)."""
THREE_WAY = ROOT / "bench" / "e2e" / "flapping" / "full-before-three-way.json"
"""The last full-size run with a Kueue half, kept for when the page's own run has none."""


def _e2e_what() -> str:
    """What the end-to-end page compares, as its current run does: with a Kueue half or without."""
    what = ("in one run on the real local control plane: starts and pods bound per second, CPU per job and per "
            "pod per process, API writes per pod")
    try:
        halves = json.loads(E2E_RESULTS.read_text())
    except (OSError, ValueError):
        halves = {}
    if isinstance(halves, dict) and halves.get("kueue"):
        return ("GPUJobs through kubegang, the same jobs through the real Kueue, and the same pods through plain "
                f"kube-scheduler, {what}")
    text = (f"GPUJobs through kubegang and the same pods through plain kube-scheduler (and, with `--only` left "
            f"out, the same jobs through the real Kueue), {what}. The page's current run has no Kueue half")
    if THREE_WAY.exists():
        name = THREE_WAY.relative_to(ROOT)
        text += (f"; the last full-size run with one is `{name}`, rendered by "
                 f"`python -m bench.e2e.run --render --results {name} --doc DOC`")
    return text


def e2e_lines() -> list[str]:
    """Section 3 names the end-to-end pages and quotes no figure: they are rewritten by their own runs
    (``bench.e2e.run``, ``bench.e2e.scale``) more often than this page, which would otherwise keep a
    copy that contradicts them (it once showed 7.83 GPUJob starts/s long after the e2e page said 15)."""
    pages = [(E2E, _e2e_what()),
             (E2E.with_name("benchmarks-e2e-contended.md"), "the contended variant (1.5x the cluster, "
                                                             "jobs that finish)"),
             (E2E.with_name("benchmarks-e2e-scale.md"), "the same benchmark at 256, 1,024 and 4,096 nodes, "
                                                        "with kubegang's own share of the cluster"),
             (E2E.with_name("benchmarks-e2e-analysis.md"), "where the end-to-end CPU goes (profiles, the "
                                                           "GPUJob apply floor, writes per pod) and what "
                                                           "was changed for it"),
             (E2E.with_name("benchmarks-sweep.md"), "the short-job sweep end to end (1-GPU trials beside "
                                                    "training gangs, kubegang against plain pods)")]
    found = [f"- [{path.name}]({path.name}): {what}." for path, what in pages if path.exists()]
    return (["The end-to-end figures live on their own pages, each regenerated by its run (this page "
             "quotes none of them, so it never contradicts them):", "", *found]
            if found else ["Not measured yet: `python -m bench.e2e.run` writes `docs/benchmarks-e2e.md`."])


def render(openb_data: dict[str, Any], rows: list[dict[str, Any]], args: argparse.Namespace,
           log: list[str], wall: float, sweep_rows: list[dict[str, Any]], scale_data: dict[str, Any],
           sweep_inputs: Latencies) -> str:
    versions = {p: importlib.metadata.version(p) for p in ("kubegang", "numpy", "matplotlib")}
    lines = [
        "# Benchmarks",
        "",
        "<!-- Generated by `python -m bench.run_all" + (" --quick" if args.quick else "") +
        "`; do not edit by hand. -->",
        "",
        "Regenerate everything on this page with one command from the repository root:",
        "",
        "```sh",
        f".venv/bin/python -m bench.run_all            # full: 10 openb seeds; 10 gang seeds of {FULL_JOBS} jobs; "
        "10 sweep seeds of 500 trials; scale to 20k nodes, 100k queued jobs",
        f".venv/bin/python -m bench.run_all --quick    # small: 1 openb seed; 2 gang seeds of {QUICK_JOBS} jobs; "
        "2 sweep seeds of 100 trials; scale to 5k nodes, 10k jobs",
        ".venv/bin/python -m bench.run_all --out DIR  # every artefact under DIR instead of docs/",
        "```",
        "",
        "The simulator (`bench/sim/`) drives the production core in simulated time: policy `kubegang`",
        "is the operator's own admission cycle (`kubegang.admission.AdmissionCycle`, the code the",
        "leader runs), answered from the run's snapshot with `kubegang.placement.plan`,",
        "`kubegang.preemption.plan_preemption` and the `kubegang.quota` tree, on the `kubegang.topology`",
        "index built from `hack/shapes/*.yaml`. The baselines are",
        "**models** of other schedulers' policies, not the products: `default-scheduler` models",
        "kube-scheduler alone, `gang-binpack` Volcano's gang + GPU binpack, `volcano-hypernode` Volcano's",
        "network-topology-aware mode, `slurm-tree` Slurm's topology/tree with backfill by time limits.",
        "Their rules are documented in `bench/sim/_baselines.py` and in section 2's method. Raw per-seed",
        "figures: `benchmarks/results.json` beside this page.",
        "",
        f"Run: {'quick' if args.quick else 'full'}; openb seeds {args.openb_seeds}; gang seeds "
        f"{args.gang_seed_list[0]}..{args.gang_seed_list[-1]}, {args.jobs} Kalos jobs per run; sweep seeds "
        f"{args.sweep_seed_list[0]}..{args.sweep_seed_list[-1]} of {args.sweep_trials} trials; scale grid "
        f"{scale_data['grid_name']}. "
        f"Machine: {os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
        f"{platform.platform()}, Python {platform.python_version()}; "
        + ", ".join(f"{k} {v}" for k, v in versions.items()) + f". Total wall time {wall / 60:.1f} min.",
        "",
        "## 1. Alibaba GPU trace (openb): the FGD paper's workload-inflation experiment",
        "",
        f"Data: {CITE_FGD} (1,213 nodes, 6,212 GPUs of 7 models; copied into `bench/data/openb/`).",
        "Method, as in the paper's artifact: the trace's tasks arrive in a seeded random order (its run",
        "scripts pass `--shuffle-pod=true`; see `bench/sim/_openb.py`) and never leave, then tasks",
        "sampled uniformly at random are cloned until requests reach 130% of capacity; a task that fits",
        "nowhere is dropped. CPU, memory, GPU count, GPU fraction and GPU model are all honoured. The",
        "curve is the GPU allocation rate (fractional GPUs count as their fraction) against the arrived",
        "workload. `kubegang` is the core's single-pod `plan()`; `bestfit` and `random` are our",
        "re-implementations of the paper's baselines (`bench/sim/_openb.py`); `paper: X` are the paper's",
        "own published curves (10 seeds, from its artifact's expected results).",
        "",
    ]
    for workload, wl in openb_data["workloads"].items():
        lines += [f"### `{workload}` ({wl['tasks']:,} trace tasks)", "",
                  f"![openb {workload}](benchmarks/openb-{workload}.png)", "",
                  "GPU allocation rate (%) at arrived workload (%), mean over seeds:", "",
                  "| policy | " + " | ".join(str(p) for p in POINTS) + " |",
                  "|---|" + "---:|" * len(POINTS)]
        for policy, run in wl["runs"].items():
            lines.append(f"| ours: {policy} | " + " | ".join(f"{run['mean'][p]:.2f}" for p in POINTS) + " |")
        for name in ("Random", "BestFit", "FGD"):
            if name in wl["paper"]:
                lines.append(f"| paper: {name} | " + " | ".join(f"{wl['paper'][name][p]:.2f}" for p in POINTS) + " |")
        ours = wl["runs"]["kubegang"]["mean"]
        beaten = [p for p in range(openb.ARRIVED_POINTS) if any(
            wl["runs"][b]["mean"][p] > ours[p] + 1e-9 for b in ("bestfit", "random"))]
        fgd = wl["paper"].get("FGD", [math.nan] * openb.ARRIVED_POINTS)
        below = [p for p in range(openb.ARRIVED_POINTS) if fgd[p] > ours[p] + 1e-9]
        gap = max((fgd[p] - ours[p] for p in below), default=0.0)
        # Where kubegang had dropped nothing in any seed, its curve is the arrived requests: a gap there
        # is the paper's sample of arrivals (its seeds), not placement.
        dropped = wl["runs"]["kubegang"].get("dropped")
        placed_all = [p for p in below if dropped is not None and all(seed[p] == 0 for seed in dropped)]
        by_placement = [p for p in below if p not in placed_all]
        placement_gap = max((fgd[p] - ours[p] for p in by_placement), default=0.0)
        lines += ["", f"- kubegang at 100% arrived: **{ours[100]:.2f}%**; paper FGD {fgd[100]:.2f}%, paper BestFit "
                  f"{wl['paper'].get('BestFit', [math.nan] * 131)[100]:.2f}%, our BestFit "
                  f"{wl['runs']['bestfit']['mean'][100]:.2f}%, our Random {wl['runs']['random']['mean'][100]:.2f}% "
                  f"(paper Random {wl['paper'].get('Random', [math.nan] * 131)[100]:.2f}%).",
                  f"- Points (of 131) where one of our baselines allocates more than kubegang: {len(beaten)}"
                  + (f" (arrived {beaten[0]}..{beaten[-1]}%)" if beaten else "") + ".",
                  f"- Points (of 131) where the paper's FGD curve is above kubegang's: {len(below)}"
                  + (f" (arrived {below[0]}..{below[-1]}%; largest gap {gap:.2f} points)" if below else "") + ".",
                  *([f"  At {len(placed_all)} of them kubegang had placed every task that had arrived, in every seed:"
                     " its allocation there is the arrived requests, so the gap is the paper's sample of arrivals,"
                     " not placement. Where kubegang had dropped tasks: "
                     + (f"{len(by_placement)} points ({_spans(by_placement)}; largest gap "
                        f"{placement_gap:.3f} points)." if by_placement else "none.")]
                    if below and dropped is not None else []),
                  "- Tasks dropped (mean over seeds): " + ", ".join(
                      f"{p} {run['failed']:.0f}" for p, run in wl["runs"].items()) + ".", ""]
    lines += locality.openb_lines(openb_data)
    lines += gangs.render(rows, args.gang_seed_list, args.jobs)
    lines += locality.gang_lines(rows)
    lines += ["## 3. End to end on the local control plane", "", *e2e_lines(), ""]
    lines += sweep.render(sweep_rows, args.sweep_seed_list, sweep_inputs)
    lines += scale.render(scale_data)
    lines += ["## Run log", "", "```", *log, "```", ""]
    return "\n".join(lines)


def write_results(path: Path, openb_data: dict[str, Any], rows: list[dict[str, Any]], args: argparse.Namespace,
                  wall: float, sweep_rows: list[dict[str, Any]], scale_data: dict[str, Any]) -> None:
    """The raw figures of every run (openb curves per seed, every gang run's metrics per seed, and
    their means with 95% half-widths, every sweep run per seed, every scale point) as strict JSON."""
    data = {"run": {"quick": args.quick, "openb_seeds": args.openb_seeds, "jobs": args.jobs,
                    "gang_seeds": args.gang_seed_list, "sweep_seeds": args.sweep_seed_list,
                    "sweep_trials": args.sweep_trials, "wall_s": wall},
            "openb": openb_data, "gangs": gangs.raw(rows), "gang_summary": gangs.summary(rows),
            "sweep": sweep_rows, "scale": scale_data}
    path.write_text(json.dumps(_plain(data), indent=1, allow_nan=False) + "\n")


def _plain(value: Any) -> Any:
    """``value`` with NaN as null (strict JSON) and tuples as lists."""
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"one openb seed, two gang seeds of {QUICK_JOBS} jobs (about a minute)")
    parser.add_argument("--seeds", type=int, default=None, help="openb seeds (default 10, quick 1)")
    parser.add_argument("--gang-seeds", type=int, default=None, help="gang seeds 1..N (default 10, quick 2)")
    parser.add_argument("--jobs", type=int, default=None,
                        help=f"Kalos jobs per gang run, Philly twice as many (default {FULL_JOBS}, quick {QUICK_JOBS})")
    parser.add_argument("--priority", action="store_true",
                        help="also run kubegang on the Kalos workloads with 20%% high-priority jobs (preemption)")
    parser.add_argument("--out", type=Path, default=DOCS,
                        help="directory for every artefact: benchmarks.md, benchmarks/*.png, benchmarks/results.json"
                             " (default docs/)")
    parser.add_argument("--sweep-seeds", type=int, default=None,
                        help="short-job sweep seeds 1..N (default 10, quick 2)")
    parser.add_argument("--sweep-trials", type=int, default=None, help=argparse.SUPPRESS)  # tests: fewer trials
    parser.add_argument("--scale-grid", choices=tuple(scale.GRIDS), default=None, help=argparse.SUPPRESS)
    parser.add_argument("--openb-nodes", type=int, default=None, help=argparse.SUPPRESS)  # tests: a subset
    parser.add_argument("--openb-tasks", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.out.suffix == ".md":
        parser.error(f"--out is a directory now (benchmarks.md is written inside it), got {args.out}")
    seeds = args.seeds if args.seeds is not None else (1 if args.quick else 10)
    gang_seeds = args.gang_seeds if args.gang_seeds is not None else (2 if args.quick else 10)
    sweep_seeds = args.sweep_seeds if args.sweep_seeds is not None else (2 if args.quick else 10)
    args.sweep_trials = args.sweep_trials if args.sweep_trials is not None else (100 if args.quick else 500)
    for flag, value in (("--seeds", seeds), ("--gang-seeds", gang_seeds), ("--jobs", args.jobs or 1),
                        ("--sweep-seeds", sweep_seeds), ("--sweep-trials", args.sweep_trials)):
        if value < 1:
            parser.error(f"{flag} must be at least 1, got {value}")
    args.jobs = args.jobs if args.jobs is not None else (QUICK_JOBS if args.quick else FULL_JOBS)
    args.openb_seeds = f"1..{seeds}"
    args.gang_seed_list = list(range(1, gang_seeds + 1))
    args.sweep_seed_list = list(range(1, sweep_seeds + 1))
    try:
        sweep_inputs = sweep.inputs()  # before the hour of work that precedes the sweep
    except ValueError as exc:
        parser.error(str(exc))
    plots = args.out / PLOTS_DIR
    plots.mkdir(parents=True, exist_ok=True)
    log: list[str] = []
    start = time.perf_counter()
    openb_data = run_openb(list(range(1, seeds + 1)), openb.WORKLOADS, log, args.openb_nodes, args.openb_tasks)
    rows = gangs.run(args.gang_seed_list, args.jobs, log, priority=args.priority)
    sweep_rows = sweep.run(args.sweep_seed_list, log, args.sweep_trials, sweep_inputs)
    scale_data = scale.run(args.scale_grid or ("quick" if args.quick else "full"), log)
    plot_openb(openb_data, plots)
    gangs.plot(rows, plots)
    wall = time.perf_counter() - start
    page = args.out / "benchmarks.md"
    page.write_text(render(openb_data, rows, args, log, wall, sweep_rows, scale_data, sweep_inputs))
    write_results(plots / RESULTS, openb_data, rows, args, wall, sweep_rows, scale_data)
    print(f"wrote {page}, {plots}/*.png and {plots / RESULTS} in {wall:.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Ideas against the largest gangs' long waits, on tuning seeds: ``python -m bench.sim.try_large_waits``.

Why: after the deeper backfill walk (``CycleSettings.max_rounds`` 64) kubegang was still behind
``slurm-tree`` on the largest decile's p99 wait on the GB200 shape (docs/benchmarks.md). Slurm
reserves nodes for its first 5 blocked jobs at once (by time limits); kubegang reserves for one job,
and only after it has been blocked for ``BackfillPolicy.reserve_after_seconds`` (48 h), which the
largest waits (about 25 h) never reach. Each idea is a ``BackfillPolicy`` for the production cycle,
measured as paired differences to kubegang as the operator runs it, on *tuning* seeds
(``bench._gangs.TUNING_SEED_BASE + 1 ...``, never the reported 1..10), with slurm-tree for reference.
Prints a Markdown table (and writes it with ``--out FILE``).
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
from bench.sim import KubegangPolicy, Policy, SlurmTreeModel, benchmark_spec, for_cluster, load_cluster, simulate
from bench.sim._kubegang import _TreeQuota
from bench.sim._metrics import percentile
from bench.sim._stats import paired
from kubegang.quota import BackfillPolicy

HOUR = 3600.0
P95_MIN_ADMISSIONS = 20
"""Admissions before "reserve past the p95 wait" has a threshold of its own (the policy's before)."""


class _PastP95Quota(_TreeQuota):
    """The simulator's quota port whose queue threshold (``reserve_after``) is the 95th percentile of
    the waits (start less arrival) of the jobs admitted so far, as the page's p95 delay counts it
    (``percentile``): a gang reserves only once it has waited longer than nearly every job before it
    (benchmarks-analysis.md, "Reserving only past the queue's p95 wait"; measured, not kept)."""

    def __init__(self, tree: Any, clock: Any) -> None:
        super().__init__(tree, clock)
        self.waits: list[float] = []

    def admit(self, job: Any) -> Any:
        verdict = super().admit(job)
        if verdict.ok:
            self.waits.append(self.clock() - job.job.arrival)
        return verdict

    def reserve_after(self, job: Any) -> float | None:
        return percentile(self.waits, 95.0) if len(self.waits) >= P95_MIN_ADMISSIONS else None


class PastP95Policy(KubegangPolicy):
    """kubegang with ``_PastP95Quota``: the production cycle, only the queue's threshold differs."""

    quota_port = _PastP95Quota


FIELDS = (("alloc_arrivals", "alloc (arrivals), points", 100.0), ("queue_delay_p95_h", "p95 delay h", 1.0),
          ("makespan_h", "makespan h", 1.0), ("large_wait_p99_h", "large p99 h", 1.0),
          ("narrowest_share", "narrowest, points", 100.0), ("evicted_gpu_hours", "evicted GPU-h", 1.0))
IDEAS: dict[str, Callable[[], Policy]] = {
    "reserve after 12 h": lambda: KubegangPolicy(backfill=BackfillPolicy(reserve_after_seconds=12 * HOUR)),
    "reserve after 4 h": lambda: KubegangPolicy(backfill=BackfillPolicy(reserve_after_seconds=4 * HOUR)),
    "5 reservations after 12 h": lambda: KubegangPolicy(
        backfill=BackfillPolicy(reserve_after_seconds=12 * HOUR, max_reservations=5)),
    "reserve after 10 min": lambda: KubegangPolicy(backfill=BackfillPolicy(reserve_after_seconds=600.0)),
    "3 reservations after 12 h": lambda: KubegangPolicy(
        backfill=BackfillPolicy(reserve_after_seconds=12 * HOUR, max_reservations=3)),
    "reserve after 1 h": lambda: KubegangPolicy(backfill=BackfillPolicy(reserve_after_seconds=HOUR)),
    "reserve at once": lambda: KubegangPolicy(backfill=BackfillPolicy(reserve_after_seconds=0.0)),
    # Several at once, as Slurm's bf_job_part_count_reserve: the cycle keeps them disjoint.
    "2 reservations at once": lambda: KubegangPolicy(
        backfill=BackfillPolicy(reserve_after_seconds=0.0, max_reservations=2)),
    "3 reservations at once": lambda: KubegangPolicy(
        backfill=BackfillPolicy(reserve_after_seconds=0.0, max_reservations=3)),
    # Time limits (GPUJob timeLimitSeconds, the same limits slurm-tree plans with).
    "no time limits": lambda: KubegangPolicy(use_limits=False),
    "limits, reserve at once": lambda: KubegangPolicy(
        backfill=BackfillPolicy(planned_reserve_after_seconds=0.0)),
    "limits, reserve after 1 h": lambda: KubegangPolicy(
        backfill=BackfillPolicy(planned_reserve_after_seconds=HOUR)),
    "limits, reserve after 4 h": lambda: KubegangPolicy(
        backfill=BackfillPolicy(planned_reserve_after_seconds=4 * HOUR)),
    "limits, 3 reservations at once": lambda: KubegangPolicy(
        backfill=BackfillPolicy(planned_reserve_after_seconds=0.0, max_reservations=3)),
    "limits, re-planned, reserve at once": lambda: KubegangPolicy(
        backfill=BackfillPolicy(planned_reserve_after_seconds=0.0, replan=True)),
    "limits, re-planned, reserve after 1 h": lambda: KubegangPolicy(
        backfill=BackfillPolicy(planned_reserve_after_seconds=HOUR, replan=True)),
    "limits, re-planned, 2 reservations at once": lambda: KubegangPolicy(
        backfill=BackfillPolicy(planned_reserve_after_seconds=0.0, replan=True, max_reservations=2)),
    "limits, re-planned, reserve after 4 h": lambda: KubegangPolicy(
        backfill=BackfillPolicy(planned_reserve_after_seconds=4 * HOUR, replan=True)),
    "limits, re-planned, 3 reservations after 4 h": lambda: KubegangPolicy(
        backfill=BackfillPolicy(planned_reserve_after_seconds=4 * HOUR, replan=True, max_reservations=3)),
    "limits, reserve after 2 h": lambda: KubegangPolicy(
        backfill=BackfillPolicy(planned_reserve_after_seconds=2 * HOUR)),
    "limits, reserve after 8 h": lambda: KubegangPolicy(
        backfill=BackfillPolicy(planned_reserve_after_seconds=8 * HOUR)),
    "limits, 5 reservations at once": lambda: KubegangPolicy(
        backfill=BackfillPolicy(planned_reserve_after_seconds=0.0, max_reservations=5)),
    # A deeper walk past blocked heads (Slurm's bf_max_job_test is 500; the cycle's default is 64).
    "max_rounds 256": lambda: KubegangPolicy(max_rounds=256),
    "max_rounds 500": lambda: KubegangPolicy(max_rounds=500),
    # Reservations in time: a later holder may take an earlier one's nodes once it is gone (Slurm's).
    "5 reservations in time": lambda: KubegangPolicy(backfill=BackfillPolicy(max_reservations=5)),
    "2 reservations in time": lambda: KubegangPolicy(backfill=BackfillPolicy(max_reservations=2)),
    "limits, re-planned, reserve after 30 min": lambda: KubegangPolicy(
        backfill=BackfillPolicy(planned_reserve_after_seconds=1800.0)),
    # What a reservation buys at all: kubegang with none, and Slurm with one (EASY) instead of five.
    "no reservations": lambda: KubegangPolicy(
        backfill=BackfillPolicy(reserve_after_seconds=None, planned_reserve_after_seconds=None)),
    "slurm-tree, 1 reservation (EASY)": lambda: SlurmTreeModel(reserve=1),
    # EASY++'s predictions where a wrong one costs only the job that ran long (evicted for the holder).
    "predicted tenants": lambda: KubegangPolicy(backfill=BackfillPolicy(predicted_tenants=True)),
    # A gang reserves only once it has waited longer than the queue's p95 wait so far.
    "reserve past the p95 wait": PastP95Policy,
}


def run(rows: list[tuple[str, str, int]], jobs: int, ideas: list[str]) -> list[dict[str, Any]]:
    """Every policy on each (shape, workload, seeds) row; one dict per run."""
    out: list[dict[str, Any]] = []
    policies: dict[str, Callable[[], Policy]] = {"kubegang": KubegangPolicy, "slurm-tree": SlurmTreeModel,
                                                 **{name: IDEAS[name] for name in ideas}}
    for shape, workload, seeds in rows:
        cluster = load_cluster(shape)
        for seed in range(TUNING_SEED_BASE + 1, TUNING_SEED_BASE + 1 + seeds):
            work = for_cluster(benchmark_spec(workload, jobs, seed), cluster)
            for name, factory in policies.items():
                t0 = time.perf_counter()
                metrics = simulate(factory(), cluster, work, seed=seed).metrics
                out.append({"shape": shape, "workload": workload, "seed": seed, "policy": name, "metrics": metrics})
                print(f"{shape} {workload} seed {seed} {name}: {time.perf_counter() - t0:.1f}s", flush=True)
    return out


def render(runs: list[dict[str, Any]]) -> str:
    lines = ["| shape / workload | policy | " + " | ".join(label for _, label, _ in FIELDS) + " |",
             "|---|---|" + "---:|" * len(FIELDS)]
    keys = list(dict.fromkeys((r["shape"], r["workload"]) for r in runs))
    for shape, workload in keys:
        sel = [r for r in runs if (r["shape"], r["workload"]) == (shape, workload)]
        base = sorted((r for r in sel if r["policy"] == "kubegang"), key=lambda r: r["seed"])
        for name in dict.fromkeys(r["policy"] for r in sel if r["policy"] != "kubegang"):
            other = sorted((r for r in sel if r["policy"] == name), key=lambda r: r["seed"])
            cells = []
            for field, _, scale in FIELDS:
                iv = paired([getattr(r["metrics"], field) for r in other], [getattr(r["metrics"], field) for r in base])
                cells.append(f"{iv.mean * scale:+.2f} ± {iv.half * scale:.2f}")
            lines.append(f"| {shape} / {workload} ({len(base)} seeds) | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=800, help="Kalos jobs per run (Philly: twice as many)")
    parser.add_argument("--kalos-seeds", type=int, default=10)
    parser.add_argument("--philly-seeds", type=int, default=5)
    parser.add_argument("--ideas", nargs="*", default=list(IDEAS), choices=list(IDEAS))
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--shape", default="gb200-nvl72", help="cluster shape (hack/shapes/)")
    args = parser.parse_args(argv)
    rows = [(args.shape, "kalos", args.kalos_seeds), (args.shape, "philly", args.philly_seeds)]
    start = time.perf_counter()
    text = render(run([r for r in rows if r[2] > 0], args.jobs, args.ideas))
    text += f"\n{time.perf_counter() - start:.0f} s; differences are the row's policy minus kubegang, paired by seed.\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

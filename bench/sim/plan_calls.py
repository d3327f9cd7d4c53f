"""How often the production cycle asks the placement port, on tuning seeds: ``python -m bench.sim.plan_calls``.

Why: in the operator every ``Plan`` and ``WhatIf`` of the cycle is a gRPC call to the extender, which
searches its ledger for the gang. A head blocked on GPUs is planned again at every cycle, and most of
those questions are asked when nothing has been freed since the same question was refused: only a
gang that ends, is evicted or gives back its reservation can turn a refusal into a placement (the
cycle's own admissions only take GPUs). This counts, per run of kubegang as it runs (the simulator's
port, ``KubegangPolicy``), the ``Plan`` effects placed and refused, the refusals that repeat the
job's previous question (same excluded nodes) with no gang released in between, and the ``WhatIf``
effects. It measures; it changes no decision.

The cycle answers such a refusal from memory while the placement side's room epoch stands (decisions.md,
"A refused Plan is not asked again until room was freed"), so those repeats are now answered without a
``Plan``: the table also gives how many were (``answered from memory``). ``--without-memory`` runs the
same with Plan answers that carry no epoch (an extender of an earlier release), which is the before.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench._gangs import TUNING_SEED_BASE
from bench.sim import KubegangPolicy, benchmark_spec, for_cluster, load_cluster, simulate
from bench.sim._kubegang import _SimJob
from bench.sim._workload import Job
from kubegang.admission import Effect, Evict, Plan, Release, WhatIf
from kubegang.placement import Placement


class CountingPolicy(KubegangPolicy):
    """kubegang as it runs, with its effects counted (the answers are the simulator's, unchanged)."""

    def __init__(self, *, remember: bool = True) -> None:
        super().__init__()
        self.remember = remember
        """False: Plan answers carry no room epoch, so every refusal is asked again (the before)."""
        self.counts: Counter[str] = Counter()
        self._released = 0
        """Gangs released so far (ended, evicted, reservation given back): what can turn a refusal around."""
        self._asked: dict[str, tuple[frozenset[str], int]] = {}

    def finished(self, job: Job, now: float) -> None:
        self._released += 1
        super().finished(job, now)

    def _answer(self, effect: Effect[_SimJob, Placement]) -> Any:
        if isinstance(effect, Evict | Release):
            self._released += 1
        answer = super()._answer(effect)
        if isinstance(effect, Plan) and not self.remember:
            answer = dataclasses.replace(answer, room=None)
        if isinstance(effect, Plan):
            question = (effect.excluded_nodes, self._released)
            if answer.placement is not None:
                self.counts["plan placed"] += 1
                self._asked.pop(effect.job.uid, None)
            else:
                self.counts["plan refused"] += 1
                if self._asked.get(effect.job.uid) == question:
                    self.counts["refused again, nothing released"] += 1
                self._asked[effect.job.uid] = question
        elif isinstance(effect, WhatIf):
            self.counts["what-if"] += 1
        return answer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="gb200-nvl72", help="cluster shape (hack/shapes/)")
    parser.add_argument("--workload", default="philly", choices=["kalos", "philly"])
    parser.add_argument("--jobs", type=int, default=800, help="Kalos jobs per run (Philly: twice as many)")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--without-memory", action="store_true",
                        help="Plan answers carry no room epoch: every refusal is asked again (the before)")
    args = parser.parse_args(argv)
    cluster = load_cluster(args.shape)
    print("| seed | admitted | plans | refused | refused again, nothing released | answered from memory | what-ifs "
          "| plans per admission | CPU s |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for seed in range(TUNING_SEED_BASE + 1, TUNING_SEED_BASE + 1 + args.seeds):
        policy = CountingPolicy(remember=not args.without_memory)
        start = time.process_time()
        simulate(policy, cluster, for_cluster(benchmark_spec(args.workload, args.jobs, seed), cluster), seed=seed)
        c = policy.counts
        plans = c["plan placed"] + c["plan refused"]
        print(f"| {seed} | {c['plan placed']} | {plans} | {c['plan refused']} | {c['refused again, nothing released']} "
              f"| {policy.cycle.plans_remembered} | {c['what-if']} | {plans / max(c['plan placed'], 1):.1f} "
              f"| {time.process_time() - start:.1f} |",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Admission decisions per second: 10,000 jobs queued across 100 leaf queues of a 3-level tree.

Quota only (placement is bench/placement's job). One decision = take the next head in fair-share
order, check quota up the tree, then admit it or park it. Running jobs finish in FIFO order whenever
a head does not fit, which wakes the parked jobs of the tree, as the operator's cycle does.

    .venv/bin/python bench/admission/run.py [--jobs 10000] [--seed 1]

Prints a table and writes bench/admission/results.json. The goal is over 1,000 decisions/s.
"""

from __future__ import annotations

import argparse
import collections
import json
import platform
import random
import statistics
import time
from pathlib import Path

from kubegang.quota import (
    FlavorQuota,
    PendingJob,
    PendingQueues,
    PreemptionPolicy,
    QueueSpec,
    QuotaTree,
    ReclaimFromBorrowers,
    RunningJob,
    WithinQueue,
    candidates_for,
)

FLAVORS = ("NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "nvidia.com/mig-1g.10gb")
SIZES = (1, 1, 2, 4, 8, 8, 16, 32, 64)


def build_tree(rng: random.Random) -> QuotaTree:
    """cluster -> 10 orgs -> 10 teams each; teams own most quota, orgs a shared reserve."""
    policy = PreemptionPolicy(WithinQueue.LOWER_PRIORITY, ReclaimFromBorrowers.ANY)
    specs = [QueueSpec("cluster")]
    for o in range(10):
        specs.append(QueueSpec(f"org-{o}", parent="cluster", quotas={FLAVORS[0]: FlavorQuota(64)}))
        for t in range(10):
            a100 = rng.choice((0, 16))
            quotas = {
                FLAVORS[0]: FlavorQuota(rng.choice((16, 32, 64)), borrowing_limit=rng.choice((None, 64))),
                FLAVORS[1]: FlavorQuota(a100, lending_limit=rng.choice((None, a100 // 2))),
                FLAVORS[2]: FlavorQuota(7),
            }
            specs.append(
                QueueSpec(
                    f"org-{o}-team-{t}", parent=f"org-{o}", weight=rng.choice((1, 2)), quotas=quotas, preemption=policy
                )
            )
    return QuotaTree(specs)


def make_jobs(rng: random.Random, leaves: list[str], n: int) -> list[PendingJob]:
    jobs = []
    for i in range(n):
        flavor = rng.choices(FLAVORS, weights=(6, 3, 1))[0]
        size = rng.choice(SIZES) if flavor != FLAVORS[2] else rng.choice((1, 2, 7))
        jobs.append(PendingJob(f"job-{i}", rng.choice(leaves), {flavor: size}, rng.choice((0, 0, 1, 2)), float(i)))
    return jobs


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(n_jobs: int, seed: int) -> dict[str, object]:
    rng = random.Random(seed)
    tree = build_tree(rng)
    pending = PendingQueues(tree)
    jobs = make_jobs(rng, tree.leaves, n_jobs)
    for job in jobs:
        pending.push(job)
    running: collections.deque[str] = collections.deque()
    latencies: list[float] = []
    admitted = refused = finished = 0
    clock = time.perf_counter
    start, cpu_start = clock(), time.process_time()
    while admitted < n_jobs:
        t0 = clock()
        head = pending.pop()
        if head is None:  # everything left is parked: let the oldest job finish
            tree.release(running.popleft())
            finished += 1
            pending.wake()
            continue
        if tree.admit(head.job_id, head.queue, head.usage):
            running.append(head.job_id)
            admitted += 1
        else:
            pending.requeue(head, inadmissible=True)
            refused += 1
        latencies.append(clock() - t0)
        if refused and refused % 4 == 0 and running:
            queue = tree.job_queue(running[0])
            tree.release(running.popleft())
            finished += 1
            pending.wake(queue)
    elapsed, cpu = clock() - start, time.process_time() - cpu_start
    decisions = len(latencies)

    # Policy candidates for a high-priority job against everything running now.
    running_jobs = [RunningJob(j, tree.job_queue(j), tree.job_usage(j), 0, float(i)) for i, j in enumerate(running)]
    preemptor = PendingJob("preemptor", tree.leaves[0], {FLAVORS[0]: 32}, priority=9)
    t0 = clock()
    rounds = 20
    for _ in range(rounds):
        candidates = candidates_for(preemptor, tree, running_jobs)
    candidates_ms = (clock() - t0) / rounds * 1e3

    return {
        "jobs": n_jobs,
        "queues": {"leaves": len(tree.leaves), "total": len(tree.queues), "levels": 3},
        "decisions": decisions,
        "admitted": admitted,
        "refused": refused,
        "finished": finished,
        "seconds": round(elapsed, 3),
        "cpu_seconds": round(cpu, 3),
        "decisions_per_second": round(decisions / elapsed),
        "decisions_per_cpu_second": round(decisions / cpu),
        "decision_latency_us": {
            "p50": round(percentile(latencies, 0.5) * 1e6, 1),
            "p99": round(percentile(latencies, 0.99) * 1e6, 1),
            "mean": round(statistics.fmean(latencies) * 1e6, 1),
        },
        "candidates_for": {
            "running_jobs": len(running_jobs),
            "candidates": len(candidates),
            "ms": round(candidates_ms, 2),
        },
        "seed": seed,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("results.json"))
    args = parser.parse_args()
    result = run(args.jobs, args.seed)
    lat = result["decision_latency_us"]
    cand = result["candidates_for"]
    assert isinstance(lat, dict) and isinstance(cand, dict)
    rows = [
        ("jobs queued", f"{result['jobs']:,} in {result['queues']['leaves']} leaf queues, 3 levels"),  # type: ignore[index]
        ("decisions", f"{result['decisions']:,} ({result['admitted']:,} admitted, {result['refused']:,} parked)"),
        ("wall time", f"{result['seconds']} s ({result['cpu_seconds']} s of CPU)"),
        (
            "decisions / s",
            f"{result['decisions_per_second']:,} (wall clock), {result['decisions_per_cpu_second']:,} per CPU second"
            "  (goal > 1,000)",
        ),
        ("decision latency", f"p50 {lat['p50']} us, p99 {lat['p99']} us"),
        ("candidates_for", f"{cand['ms']} ms over {cand['running_jobs']} running jobs ({cand['candidates']} found)"),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

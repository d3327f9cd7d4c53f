"""The leader's per-step bookkeeping as the cluster grows: one supervision pass and the pending list
over N admitted, Running gangs of the end-to-end burst when nothing changed since the last step.

    .venv/bin/python -m bench.operator_step [--jobs 200,2000] [--steps 50]

Every watch event of a burst wakes the leader's loop (debounced by 50 ms), and each step runs a
supervision pass and lists the waiting jobs; this measures what such a step costs when its event
concerned none of the N jobs: the production ``ClusterCache``, ``Admission`` and ``Supervisor``
(``kubegang.operator``), N GPUJobs of ``bench/e2e``'s workload, each recorded Running with its pods
(built by the operator's ``build_pod``) Running on their nodes, fed through the cache's own methods
as the watches would. Nothing is written (no job has anything to do), so the ports are never called.
CPU time of this process (``process_time``) per step, mean over ``--steps`` steps after three
settling passes.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.e2e._workload import generate, gpujob_manifest
from kubegang.api import ReplicaPlacement
from kubegang.operator._admission import Admission
from kubegang.operator._cache import ClusterCache
from kubegang.operator._gang_objects import build_pod
from kubegang.operator._quota_book import QuotaBook
from kubegang.operator._supervisor import Supervisor

NAMESPACE = "bench"
ADMITTED_AT = "2026-01-01T00:00:00Z"


class _Unused:
    """The placement and API ports: a step over jobs with nothing to do calls neither."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"a step with nothing to do called {name}")


def _running_cache(n_jobs: int) -> ClusterCache:
    """N jobs of the burst, admitted and Running, their pods Running where they were placed."""
    cache = ClusterCache()
    leaves = [f"leaf-{i}" for i in range(16)]
    # bench-1024's 8,192 GPUs for the full burst's 2,000 jobs, so every N draws the same mix.
    burst = generate(n_jobs, seed=1, capacity_gpus=8192 * n_jobs // 2000, fill=0.85, leaves=leaves)
    for i, bench_job in enumerate(burst):
        body = gpujob_manifest(bench_job, NAMESPACE)
        body["metadata"] |= {"uid": f"uid-{i}", "generation": 1, "creationTimestamp": ADMITTED_AT,
                             "resourceVersion": str(i + 1)}
        slots = [ReplicaPlacement(index=r, node=f"node-{i}-{r}") for r in range(bench_job.pods)]
        body["status"] = {"phase": "Running", "admittedAt": ADMITTED_AT, "podsCreatedAt": ADMITTED_AT,
                          "startedAt": ADMITTED_AT, "readyReplicas": bench_job.pods,
                          "placement": {"pods": [slot.model_dump(exclude_none=True) for slot in slots]}}
        view = cache.upsert_job(body)
        assert view is not None, body
        for slot in slots:
            pod = build_pod(view, slot)
            pod["metadata"]["namespace"] = NAMESPACE
            pod["spec"]["nodeName"] = slot.node
            pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
            cache.upsert_pod(pod)
    return cache


async def step_cost(n_jobs: int, steps: int) -> dict[str, Any]:
    """CPU seconds of one supervision pass and one pending list over ``n_jobs`` Running gangs."""
    cache = _running_cache(n_jobs)
    quota = QuotaBook(priority_of=cache.priority_of)
    admission = Admission(cache, quota, _Unused(), _Unused(),
                          clock=lambda: dt.datetime(2026, 1, 1, 0, 0, 5, tzinfo=dt.UTC))
    supervisor = Supervisor(admission)
    for _ in range(3):
        await supervisor.run_pass()
    assert not cache.pending() and not cache.assumed, "every job is Running with nothing to write"
    start = time.process_time()
    for _ in range(steps):
        await supervisor.run_pass()
        cache.pending()
    cpu = (time.process_time() - start) / steps
    return {"jobs": n_jobs, "pods": sum(len(p) for p in cache.pods.values()), "steps": steps,
            "step_cpu_ms": round(cpu * 1000, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="200,2000", help="comma-separated job counts")
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args(argv)
    for n in (int(x) for x in args.jobs.split(",")):
        print(json.dumps(asyncio.run(step_cost(n, args.steps))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

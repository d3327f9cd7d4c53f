"""The leader's per-step bookkeeping as the cluster grows: one supervision pass and the pending list
over N admitted, Running gangs of the end-to-end burst when nothing changed since the last step, and
one admission cycle over W waiting jobs that the full cluster cannot place.

    .venv/bin/python -m bench.operator_step [--jobs 200,2000] [--steps 50] [--waiting 0,1000]

Every watch event of a burst wakes the leader's loop (debounced by 50 ms), and each step runs a
supervision pass and lists the waiting jobs; this measures what such a step costs when its event
concerned none of the N jobs: the production ``ClusterCache``, ``Admission`` and ``Supervisor``
(``kubegang.operator``), N GPUJobs of ``bench/e2e``'s workload, each recorded Running with its pods
(built by the operator's ``build_pod``) Running on their nodes, fed through the cache's own methods
as the watches would. Nothing is written (no job has anything to do), so the ports are never called.
CPU time of this process (``process_time``) per step, mean over ``--steps`` steps after three
settling passes.

The cycle (``--waiting``): the same N gangs, in 16 leaf GPUQueues of one root with quota for all, and W
waiting GPUJobs of one 8-GPU pod each; the production ``Admission.run_cycle`` over them with a placement
side that refuses every ``Plan`` and finds no victims (a full cluster, as in the step after a completion
when the room epoch moved: every head is asked again) and an API that accepts every write. What it
measures is the operator's own work per cycle: ordering, quota, the preemption question of each blocked
head, the waiting reports; the extender's side is not in it.
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

from bench.e2e._workload import GPU, BenchJob, generate, gpujob_manifest, queue_tree
from kubegang.admission import PlanAnswer, WhatIfAnswer
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


LEAVES = [f"leaf-{i}" for i in range(16)]


class _FullCluster:
    """The placement side of a full cluster: no ``Plan`` places, no eviction helps, the room epoch
    unknown (so that every ``Plan`` is asked, as after a completion)."""

    async def room(self) -> int | None:
        return None

    async def plan(self, job: Any, *, excluded_nodes: frozenset[str], preferred_domain: str | None) -> Any:
        return PlanAnswer(placement=None, reason="no leaf with a free node")

    async def what_if(self, job: Any, candidates: Any, **_: Any) -> Any:
        return WhatIfAnswer(None)

    async def release(self, job_uid: str) -> None:
        return None


class _AcceptingApi:
    """The API side of a cycle that admits nothing: its waiting reports (status writes, Events) succeed.
    Any other write (a pod created or deleted) is a bug of the measure and raises."""

    async def patch_job_status(self, job: Any, patch: Any, **_: Any) -> str:
        return "1"

    async def patch_named_job_status(self, namespace: str, name: str, patch: Any) -> None:
        return None

    async def patch_queue_status(self, name: str, patch: Any) -> None:
        return None

    async def reserve_background(self) -> None:
        return None

    async def event(self, job: Any, reason: str, message: str, **_: Any) -> None:
        return None

    async def event_on(self, involved: Any, reason: str, message: str, **_: Any) -> None:
        return None


def _running_cache(n_jobs: int) -> ClusterCache:
    """N jobs of the burst, admitted and Running, their pods Running where they were placed."""
    cache = ClusterCache()
    leaves = LEAVES
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


async def cycle_cost(n_jobs: int, n_waiting: int, cycles: int) -> dict[str, Any]:
    """CPU seconds of one admission cycle over ``n_waiting`` blocked jobs beside ``n_jobs`` Running gangs."""
    cache = _running_cache(n_jobs)
    for queue in queue_tree(LEAVES, capacity_gpus=len(LEAVES) * 10**6, flavor=GPU, namespace=NAMESPACE):
        cache.upsert_queue(queue)  # quota for everyone: the waiting jobs wait for GPUs
    for i in range(n_waiting):
        body = gpujob_manifest(BenchJob(f"waiting-{i}", LEAVES[i % len(LEAVES)], pods=1, gpus_per_pod=8), NAMESPACE)
        body["metadata"] |= {"uid": f"waiting-{i}", "generation": 1, "creationTimestamp": ADMITTED_AT,
                             "resourceVersion": str(10**6 + i)}
        assert cache.upsert_job(body) is not None
    quota = QuotaBook(priority_of=cache.priority_of, job_of=cache.job)
    admission = Admission(cache, quota, _FullCluster(), _AcceptingApi(),
                          clock=lambda: dt.datetime(2026, 1, 1, 0, 0, 5, tzinfo=dt.UTC))
    outcomes = await admission.run_cycle()  # settles: the tree, the held gangs, the first reports
    assert len(cache.pending()) == n_waiting and not any(o.result.value == "Admitted" for o in outcomes)
    start = time.process_time()
    for _ in range(cycles):
        outcomes = await admission.run_cycle()
    cpu = (time.process_time() - start) / cycles
    return {"jobs": n_jobs, "waiting": n_waiting, "held_in_quota": len(quota.running()), "cycles": cycles,
            "heads_decided": len(outcomes), "cycle_cpu_ms": round(cpu * 1000, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="200,2000", help="comma-separated job counts")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--waiting", default="", help="comma-separated counts of waiting jobs: one cycle over "
                        "them beside each job count (none: only the step)")
    parser.add_argument("--cycles", type=int, default=5)
    args = parser.parse_args(argv)
    for n in (int(x) for x in args.jobs.split(",")):
        print(json.dumps(asyncio.run(step_cost(n, args.steps))))
        for w in (int(x) for x in args.waiting.split(",") if x):
            print(json.dumps(asyncio.run(cycle_cost(n, w, args.cycles))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

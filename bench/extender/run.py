"""Benchmark (not a test): server-side latency of the extender's filter and prioritize verbs.

What is timed is everything the extender does for one request except the socket: parse the JSON
body kube-scheduler sends (``NodeNames`` mode), read the pod, ask the ledger, serialise the answer.
The cluster: ``uniform_fabric`` nodes of 8 GPUs (32 per leaf, 8 leaves per spine), 50% of GPUs
held by bound plain pods of 1/2/4/8 GPUs, plus 10 reserved 4-node gangs. Each request carries every
node name, as kube-scheduler does for a pod without node affinity (the worst case). One process,
one core: verbs per second is 1 / mean server-side CPU time.

Two clocks: ``cpu`` is the thread's CPU time (what the extender spends; stable on a shared
machine), ``wall`` also counts time the OS gave to other processes, which dominates p99 on a
loaded host. The ``tainted`` rows put ``nvidia.com/gpu:NoSchedule`` on every node and send a pod
that tolerates it, as real GPU clusters do. The ``sized`` rows send only as many names as
kube-scheduler itself would: it stops filtering once it found ``percentageOfNodesToScore`` of the
nodes feasible (adaptive default: 50% - nodes/125, at least 5% and 100 nodes; 500 at 5,000 nodes),
and only those reach the extender.

Usage: python bench/extender/run.py [--nodes 1000 5000] [--requests 400] [--out bench/extender/results.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

from kubegang.extender import Ledger
from kubegang.extender._http import filter_answer, prioritize_answer
from kubegang.extender._wire import ExtenderArgs
from kubegang.placement import GangRequest
from kubegang.topology import NodeInfo, uniform_fabric

TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def node_json(info: NodeInfo, tainted: bool = False) -> dict[str, Any]:
    return {"metadata": {"name": info.name, "labels": dict(info.labels)},
            "spec": {"taints": [TAINT]} if tainted else {},
            "status": {"allocatable": {"nvidia.com/gpu": str(len(info.gpus)), "cpu": "224",
                                       "memory": "2Ti", "pods": "110"}}}


def build(nodes: int, seed: int = 7, tainted: bool = False) -> Ledger:
    rng = random.Random(seed)
    infos = uniform_fabric(nodes)
    pods: list[dict[str, Any]] = []
    used = dict.fromkeys((i.name for i in infos), 0)
    target, held = nodes * 8 // 2, 0
    while held < target:
        name = rng.choice(infos).name
        size = rng.choice((1, 2, 4, 8))
        if used[name] + size > 8:
            continue
        used[name] += size
        held += size
        uid = f"bg-{len(pods)}"
        pods.append({"metadata": {"name": uid, "namespace": "bg", "uid": uid}, "spec": {
            "nodeName": name, "containers": [{"resources": {"limits": {"nvidia.com/gpu": str(size)}}}]},
            "status": {"phase": "Running"}})
    ledger = Ledger()
    ledger.replace_all([node_json(i, tainted) for i in infos], {}, pods)
    for j in range(10):
        ledger.reserve(GangRequest(id=f"gang-{j}", pods=4, gpus_per_pod=8), None, 3600)
    return ledger


def body(names: list[str], gpus: int, tolerate: bool = False) -> bytes:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}
    if tolerate:
        spec["tolerations"] = [{"key": TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}]
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": spec}
    return json.dumps({"Pod": pod, "NodeNames": names}).encode()


def scheduler_sized(nodes: int) -> int:
    """How many feasible nodes kube-scheduler looks for (``numFeasibleNodesToFind``, adaptive default)."""
    if nodes < 100:
        return nodes
    percentage = max(5, 50 - nodes // 125)
    return max(100, nodes * percentage // 100)


def measure(ledger: Ledger, payload: bytes, verb: str, requests: int) -> dict[str, float]:
    answer = filter_answer if verb == "filter" else prioritize_answer
    cpu, wall = [], []
    for _ in range(requests):
        start_cpu, start_wall = time.thread_time(), time.perf_counter()
        args = ExtenderArgs.from_wire(payload)
        json.dumps(answer(ledger, args), separators=(",", ":"))
        cpu.append(time.thread_time() - start_cpu)
        wall.append(time.perf_counter() - start_wall)
    cpu.sort()
    wall.sort()
    mean = statistics.fmean(cpu)
    p99 = int(len(cpu) * 0.99) - 1
    return {"p50_ms": cpu[len(cpu) // 2] * 1e3, "p99_ms": cpu[p99] * 1e3,
            "wall_p50_ms": wall[len(wall) // 2] * 1e3, "wall_p99_ms": wall[p99] * 1e3,
            "mean_ms": mean * 1e3, "verbs_per_s": 1.0 / mean}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--out", type=Path, default=None)
    opts = parser.parse_args()
    results = []
    cases = [("filter", 1, False, False), ("filter", 8, False, False), ("filter", 1, True, False),
             ("prioritize", 1, False, False), ("prioritize", 8, False, False),
             ("filter", 1, False, True), ("filter", 8, False, True), ("prioritize", 1, False, True)]
    for nodes in opts.nodes:
        names = [f"node-{i:05d}" for i in range(nodes)]
        for tainted in (False, True):
            ledger = build(nodes, tainted=tainted)
            gc.collect()
            gc.freeze()  # as the extender does after its initial sync: long-lived objects leave the GC's way
            for verb, gpus, _, sized in (c for c in cases if c[2] == tainted):
                sent = random.Random(nodes).sample(names, scheduler_sized(nodes)) if sized else names
                payload = body(sent, gpus, tolerate=tainted)
                measure(ledger, payload, verb, 20)  # warm-up
                row = {"nodes": nodes, "names_sent": len(sent), "verb": verb, "pod_gpus": gpus,
                       "tainted": tainted, **measure(ledger, payload, verb, opts.requests)}
                results.append(row)
                print(f"{nodes:>6} nodes {len(sent):>5} sent  {verb:<10} pod {gpus} GPU"
                      f"{' tainted' if tainted else '        '}  "
                      f"cpu p50 {row['p50_ms']:6.2f} p99 {row['p99_ms']:6.2f} ms  wall p50 "
                      f"{row['wall_p50_ms']:6.2f} p99 {row['wall_p99_ms']:6.2f} ms  "
                      f"{row['verbs_per_s']:6.0f} verbs/s")
            gc.unfreeze()
    if opts.out:
        opts.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()

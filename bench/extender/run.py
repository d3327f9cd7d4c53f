"""Benchmark (not a test): server-side latency of the extender's filter and prioritize verbs.

What is timed is everything the extender does for one request except the socket: parse the JSON
body kube-scheduler sends (``NodeNames`` mode), read the pod, ask the ledger, serialise the answer.
The cluster: ``uniform_fabric`` nodes of 8 GPUs (32 per leaf, 8 leaves per spine), 50% of GPUs
held by bound plain pods of 1/2/4/8 GPUs, plus 10 reserved 4-node gangs. Each request carries every
node name, as kube-scheduler does for a pod without node affinity (the worst case). One process,
one core: verbs per second is 1 / mean server-side time.

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


def node_json(info: NodeInfo) -> dict[str, Any]:
    return {"metadata": {"name": info.name, "labels": dict(info.labels)}, "spec": {},
            "status": {"allocatable": {"nvidia.com/gpu": str(len(info.gpus)), "cpu": "224",
                                       "memory": "2Ti", "pods": "110"}}}


def build(nodes: int, seed: int = 7) -> Ledger:
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
    ledger.replace_all([node_json(i) for i in infos], {}, pods)
    for j in range(10):
        ledger.reserve(GangRequest(id=f"gang-{j}", pods=4, gpus_per_pod=8), None, 3600)
    return ledger


def body(names: list[str], gpus: int) -> bytes:
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
           "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}
    return json.dumps({"Pod": pod, "NodeNames": names}).encode()


def measure(ledger: Ledger, payload: bytes, verb: str, requests: int) -> dict[str, float]:
    answer = filter_answer if verb == "filter" else prioritize_answer
    times = []
    for _ in range(requests):
        start = time.perf_counter()
        args = ExtenderArgs.from_wire(payload)
        json.dumps(answer(ledger, args), separators=(",", ":"))
        times.append(time.perf_counter() - start)
    times.sort()
    mean = statistics.fmean(times)
    return {"p50_ms": times[len(times) // 2] * 1e3, "p99_ms": times[int(len(times) * 0.99) - 1] * 1e3,
            "mean_ms": mean * 1e3, "verbs_per_s": 1.0 / mean}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--out", type=Path, default=None)
    opts = parser.parse_args()
    results = []
    for nodes in opts.nodes:
        ledger = build(nodes)
        gc.collect()
        gc.freeze()  # as the extender does after its initial sync: long-lived objects leave the GC's way
        names = [f"node-{i:05d}" for i in range(nodes)]
        for verb in ("filter", "prioritize"):
            for gpus in (1, 8):
                payload = body(names, gpus)
                measure(ledger, payload, verb, 20)  # warm-up
                row = {"nodes": nodes, "verb": verb, "pod_gpus": gpus, **measure(ledger, payload, verb,
                                                                                 opts.requests)}
                results.append(row)
                print(f"{nodes:>6} nodes  {verb:<10} pod {gpus} GPU  p50 {row['p50_ms']:7.2f} ms  "
                      f"p99 {row['p99_ms']:7.2f} ms  {row['verbs_per_s']:8.0f} verbs/s")
    if opts.out:
        opts.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()

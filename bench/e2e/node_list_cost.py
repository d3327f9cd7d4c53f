"""What one replay-agent discovery poll costs: the node list, as lightkube read it and as the agent reads it now.

``python -m bench.e2e.node_list_cost --cluster-dir DIR [--lists N] [--rounds N] [--selector type=kwok]``

A replay agent (the demo's and the benchmarks' stand-in for one DaemonSet agent per node) lists every
fake node each ``--poll-interval`` (5 s under ``hack/cluster``), which over a full-size half is 40-odd
lists of 1,024 kwok nodes. Two ways of making that list are measured on a running ``hack/cluster``
cluster, alternately, ``--lists`` lists per way and round: lightkube's ``AsyncClient.list(Node)`` (full
objects, a consistent read, decoded into lightkube's models: the agent before) and
``KubeSink.list_nodes`` (metadata only, from the watch cache, plain dicts: the agent now). The figures
are this process's CPU per list and the API server's CPU per list (its /proc counters over the same
lists, so whatever else the cluster does in that time is counted too: run it on an idle cluster).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from bench.e2e._procstats import own_cpu_seconds, sample_cluster


async def _measure(cluster_dir: Path, lists: int, call: Callable[[], Awaitable[int]]) -> dict[str, float]:
    before, cpu, wall = sample_cluster(cluster_dir), own_cpu_seconds(), time.monotonic()
    nodes = 0
    for _ in range(lists):
        nodes = await call()
    after = sample_cluster(cluster_dir)
    server = after["kube-apiserver"].cpu_seconds - before["kube-apiserver"].cpu_seconds
    return {"nodes": nodes, "client_ms_per_list": round((own_cpu_seconds() - cpu) / lists * 1000, 2),
            "apiserver_ms_per_list": round(server / lists * 1000, 2),
            "wall_ms_per_list": round((time.monotonic() - wall) / lists * 1000, 2)}


async def run(cluster_dir: Path, lists: int, rounds: int, selector: str) -> dict[str, object]:
    from lightkube import AsyncClient
    from lightkube.resources.core_v1 import Node

    from kubegang.agent._kube import KubeSink, parse_selector
    from kubegang.restclient import rest_client

    os.environ["KUBECONFIG"] = str(cluster_dir / "kubeconfig")
    client = AsyncClient()
    lister = rest_client(None, timeout_seconds=60.0, limit=1)
    sink = KubeSink(client, lister=lister)

    async def lightkube_full() -> int:
        return len([node async for node in client.list(Node, labels=parse_selector(selector))])

    async def metadata() -> int:
        return len(await sink.list_nodes(selector))

    results: dict[str, list[dict[str, float]]] = {"lightkube, full Node objects": [], "KubeSink, metadata": []}
    try:
        await lightkube_full(), await metadata()  # connections and auth, not measured
        for _ in range(rounds):
            results["lightkube, full Node objects"].append(await _measure(cluster_dir, lists, lightkube_full))
            results["KubeSink, metadata"].append(await _measure(cluster_dir, lists, metadata))
    finally:
        await client.close()
        await lister.close()
    return {"lists_per_round": lists, "selector": selector, "results": results}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--cluster-dir", type=Path, required=True, help="a running hack/cluster cluster")
    parser.add_argument("--lists", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--selector", default="type=kwok")
    parser.add_argument("--results", type=Path, help="write the figures here as JSON")
    args = parser.parse_args(argv)
    report = asyncio.run(run(args.cluster_dir, args.lists, args.rounds, args.selector))
    text = json.dumps(report, indent=1)
    print(text)
    if args.results:
        args.results.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

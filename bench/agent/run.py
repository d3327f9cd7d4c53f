"""Benchmark (not a test): what one replay agent spends per node and poll.

A replay agent serves every fake node of a cluster (1,024 in the end-to-end benchmark) from one
process, polling each every few seconds. Two publishers serve the same dump to a sink that drops
every write, measured in the same run: ``unchanged`` with the replay backend as shipped (it reports
its dump's mtime as ``Backend.version``, so an up-to-date publisher does not read), and ``reading``
with a backend that cannot tell (as live NVML), which reads, parses, builds and compares every poll.
The ratio is what skipping saves; the absolute figures move with the machine's load.

Usage: python bench/agent/run.py [--nodes 200] [--polls 5] [--dump hgx-h100-8gpu] [--out bench/agent/results.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from kubegang.agent._dump import Dump
from kubegang.agent._metrics import AgentMetrics
from kubegang.agent._publisher import NodePublisher
from kubegang.agent._replay import ReplayBackend
from kubegang.agent._settings import AgentSettings

DUMPS = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "nvml"


class DropSink:
    """Accepts every write and keeps nothing: the API server is not what is measured."""

    async def create_gpunode(self, name: str) -> None:
        return None

    async def patch_status(self, name: str, status: Mapping[str, Any]) -> None:
        return None

    async def patch_labels(self, name: str, labels: Mapping[str, str | None]) -> None:
        return None


class Unversioned:
    """The same replay backend, but unable to say its data did not change (as live NVML)."""

    def __init__(self, inner: ReplayBackend) -> None:
        self.inner = inner

    def read(self) -> Dump:
        return self.inner.read()

    def version(self) -> Hashable | None:
        return None

    def close(self) -> None:
        self.inner.close()


async def cpu_per_poll(nodes: int, polls: int, dump: Path, versioned: bool) -> float:
    """CPU milliseconds per node and poll, after a first poll that writes everything."""
    settings = AgentSettings(replay_dir=dump.parent, nodes_from_label="type=kwok", metrics_port=0)
    metrics = AgentMetrics(CollectorRegistry())
    publishers = []
    for i in range(nodes):
        backend = ReplayBackend(dump, node_name=f"node-{i:04d}")
        publishers.append(NodePublisher(f"node-{i:04d}", backend if versioned else Unversioned(backend),
                                        DropSink(), settings, metrics))
    for publisher in publishers:
        await publisher.poll_once()
    started = time.process_time()
    for _ in range(polls):
        for publisher in publishers:
            await publisher.poll_once()
    return 1000 * (time.process_time() - started) / (nodes * polls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--polls", type=int, default=5)
    parser.add_argument("--dump", default="hgx-h100-8gpu", help="a dump in tests/fixtures/nvml")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("results.json"))
    args = parser.parse_args()
    dump = DUMPS / f"{args.dump}.nvml.json"
    reading = asyncio.run(cpu_per_poll(args.nodes, args.polls, dump, versioned=False))
    unchanged = asyncio.run(cpu_per_poll(args.nodes, args.polls, dump, versioned=True))
    result = {
        "dump": args.dump, "nodes": args.nodes, "polls": args.polls,
        "cpu_ms_per_node_poll": {"reading": round(reading, 4), "unchanged": round(unchanged, 4)},
        "ratio_reading_over_unchanged": round(reading / unchanged, 1) if unchanged > 0 else None,
        "cpu_share_of_one_core_for_1024_nodes_every_5s": {
            "reading": round(reading * 1024 / 5 / 1000, 3), "unchanged": round(unchanged * 1024 / 5 / 1000, 4)},
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

"""What compiling the topology costs as the cluster grows: CPU and the memory the compiled index keeps.

    .venv/bin/python -m bench.topology_cost [--nodes 1024,4096] [--repeat 3]

The extender and the operator's leader compile the production ``kubegang.topology.compile_index`` when
nodes are added, removed or relabelled, and keep the index it returns until the next change. This
measures both for a regular fabric (``uniform_fabric``: 8 GPUs a node, leaves of 32 nodes, spines of 8
leaves): CPU time of this process per compile (best of ``--repeat``), and what ``tracemalloc`` sees the
index keep and the compile's peak. The 33rd session used it to measure the validated tree without a graph
library (docs/decisions.md, "The topology tree is plain dictionaries").
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import tracemalloc
from typing import Any

from kubegang.topology import compile_index, uniform_fabric


def measure(nodes: int, repeat: int = 3) -> dict[str, Any]:
    """One fabric of ``nodes`` nodes: index memory (MiB, kept and peak) and compile CPU (ms, best of ``repeat``)."""
    fabric = uniform_fabric(nodes, 8, leaf_size=32, spine_size=8)
    gc.collect()
    tracemalloc.start()
    index = compile_index(fabric)
    kept, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    times = []
    for _ in range(max(1, repeat)):
        began = time.process_time()
        compile_index(fabric)
        times.append(time.process_time() - began)
    assert index.node_count == nodes
    return {"nodes": nodes, "gpus": nodes * 8, "index_kept_mib": round(kept / 2**20, 2),
            "compile_peak_mib": round(peak / 2**20, 2), "compile_cpu_ms": round(min(times) * 1000, 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.topology_cost", description=__doc__.split("\n")[0])
    p.add_argument("--nodes", default="1024,4096", help="comma-separated node counts")
    p.add_argument("--repeat", type=int, default=3, help="compiles per size; the best is reported")
    args = p.parse_args(argv)
    for nodes in (int(n) for n in args.nodes.split(",")):
        print(json.dumps(measure(nodes, args.repeat)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

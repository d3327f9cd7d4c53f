"""``kubegang``: offline questions answered by the production core, no cluster needed.

A platform engineer sizing a job or checking a shape file wants the same answer the extender
would give, without a cluster: ``kubegang plan`` runs the real placement engine on a cluster
shape (optionally with random background load), and ``kubegang shape`` validates and summarises a
shape file. A shape is a shape file or the name of one shipped with kubegang.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter

from kubegang.levels import REQUESTABLE_LEVELS, Level
from kubegang.placement import GangRequest, Placement, Snapshot, fill_random, plan
from kubegang.shapes import ShapeError, find_shape, load_shape, node_infos, shipped_shapes
from kubegang.topology import TopologyLabels, compile_index

LEVELS = ", ".join(level.label for level in REQUESTABLE_LEVELS)


def _level(text: str) -> Level:
    """A requestable level; argparse prefixes the message with the flag (``argument --required: ...``)."""
    level = Level.__members__.get(text.upper())
    if level is None or level not in REQUESTABLE_LEVELS:
        raise argparse.ArgumentTypeError(f"unknown topology level {text!r}; allowed: {LEVELS}")
    return level


def _cmd_shape(args: argparse.Namespace) -> int:
    shape = load_shape(find_shape(args.file))
    print(f"{shape.name}: {shape.node_count} nodes, {shape.gpu_count} GPUs")
    products = Counter[str]()
    for _, group in shape.nodes():
        if group.gpus:
            products[group.product or "?"] += group.gpus
    for product, gpus in products.most_common():
        print(f"  {product}: {gpus} GPUs")
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    shape = load_shape(find_shape(args.shape))
    snapshot = Snapshot(compile_index(node_infos(shape), TopologyLabels()))
    if args.occupancy:
        fill_random(snapshot, args.occupancy, random.Random(args.seed))
    gang = GangRequest(id="cli", pods=args.pods, gpus_per_pod=args.gpus_per_pod, gpu_product=args.product,
                       required_level=args.required, preferred_level=args.preferred)
    result = plan(gang, snapshot)
    if not isinstance(result, Placement):
        print(f"unplaceable: {result.reason}")
        return 1
    print(f"placed {gang.pods} x {gang.gpus_per_pod} GPUs within {result.level.label} {result.domain} "
          f"(score {result.score:.2f}{'' if result.preferred_met else ', preferred level not met'})")
    for a in result.assignments:
        print(f"  pod {a.pod}: {a.node} GPUs {','.join(map(str, a.gpus))}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    shipped = ", ".join(shipped_shapes())
    parser = argparse.ArgumentParser(prog="kubegang", description=f"{__doc__}\nShipped shapes: {shipped}.",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_shape = sub.add_parser("shape", help="validate and summarise a cluster shape file")
    p_shape.add_argument("file", help=f"shape file, or the name of a shipped shape ({shipped})")
    p_shape.set_defaults(func=_cmd_shape)
    p_plan = sub.add_parser("plan", help="where would a gang go on this shape? (the extender's engine)")
    p_plan.add_argument("--shape", required=True,
                        help=f"cluster shape: a shape file, or the name of a shipped shape ({shipped})")
    p_plan.add_argument("--pods", type=int, required=True, help="pods in the gang")
    p_plan.add_argument("--gpus-per-pod", type=int, default=8, help="whole GPUs per pod (default %(default)s)")
    p_plan.add_argument("--product", default=None, help="GPU product constraint (nvidia.com/gpu.product)")
    p_plan.add_argument("--required", type=_level, default=None, metavar="LEVEL",
                        help=f"the gang must fit in one domain of this level: {LEVELS}")
    p_plan.add_argument("--preferred", type=_level, default=None, metavar="LEVEL",
                        help=f"prefer one domain of this (narrower) level when it fits: {LEVELS}")
    p_plan.add_argument("--occupancy", type=float, default=0.0,
                        help="fraction of GPUs taken by random background load, 0..1 (default %(default)s)")
    p_plan.add_argument("--seed", type=int, default=0, help="seed of the background load (default %(default)s)")
    p_plan.set_defaults(func=_cmd_plan)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (ShapeError, ValueError) as exc:
        print(f"kubegang: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

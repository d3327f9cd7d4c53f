"""``kubegang``: offline questions answered by the production core, no cluster needed.

A platform engineer sizing a job or checking a shape file wants the same answer the extender
would give, without a cluster: ``kubegang plan`` runs the real placement engine on a cluster
shape (optionally with random background load), ``kubegang shape`` validates and summarises a
shape file, and ``kubegang crds`` prints the CRDs generated from the API models.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter

from kubegang.levels import REQUESTABLE_LEVELS, Level
from kubegang.placement import GangRequest, Placement, Snapshot, fill_random, plan
from kubegang.shapes import ShapeError, load_shape, node_infos
from kubegang.topology import TopologyLabels, compile_index


def _level(text: str) -> Level:
    level = Level.parse(text)
    if level not in REQUESTABLE_LEVELS:
        raise argparse.ArgumentTypeError(f"level must be one of {', '.join(lv.label for lv in REQUESTABLE_LEVELS)}")
    return level


def _cmd_shape(args: argparse.Namespace) -> int:
    shape = load_shape(args.file)
    print(f"{shape.name}: {shape.node_count} nodes, {shape.gpu_count} GPUs")
    products = Counter[str]()
    for _, group in shape.nodes():
        if group.gpus:
            products[group.product or "?"] += group.gpus
    for product, gpus in products.most_common():
        print(f"  {product}: {gpus} GPUs")
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    shape = load_shape(args.shape)
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
    parser = argparse.ArgumentParser(prog="kubegang", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_shape = sub.add_parser("shape", help="validate and summarise a cluster shape file")
    p_shape.add_argument("file")
    p_shape.set_defaults(func=_cmd_shape)
    p_plan = sub.add_parser("plan", help="where would a gang go on this shape? (the extender's engine)")
    p_plan.add_argument("--shape", required=True, help="cluster shape file (hack/shapes/*.yaml)")
    p_plan.add_argument("--pods", type=int, required=True)
    p_plan.add_argument("--gpus-per-pod", type=int, default=8)
    p_plan.add_argument("--product", default=None, help="GPU product constraint")
    p_plan.add_argument("--required", type=_level, default=None, help="node, nvlink, leaf, spine, block, cluster")
    p_plan.add_argument("--preferred", type=_level, default=None)
    p_plan.add_argument("--occupancy", type=float, default=0.0, help="random background load, 0..1")
    p_plan.add_argument("--seed", type=int, default=0)
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

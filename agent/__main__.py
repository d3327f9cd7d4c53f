"""``kubegang-agent``: publish this node's GPUs as a GPUNode (or many fake nodes' in replay mode).

kubegang-agent --node-name $NODE_NAME                         # DaemonSet on a GPU node
kubegang-agent --replay-dir DIR --nodes-from-label type=kwok  # every kwok node, from dumps
kubegang-agent --dump-nvml FILE                               # capture this machine's NVML
kubegang-agent --once --print                                 # show what would be published
kubegang-agent --once --print --replay-dump FILE [--replay-fabric UUID/CLIQUE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from kubegang._flags import port_or_zero
from kubegang.api.gpunode import GPUNode
from kubegang.authn import add_serving_flags, kube_review_api, serving_from_args

from ._backend import Backend
from ._infiniband import DEFAULT_ROOT
from ._metrics import AgentMetrics
from ._nvml import NvmlBackend
from ._replay import FabricOverride, ReplayBackend, ReplayError, resolve_dump
from ._settings import AgentSettings
from ._snapshot import parse_dump
from ._status import build_status, node_labels, status_payload
from ._xid import APPLICATION_XIDS, FATAL_XIDS, XidPolicy
from .capture import capture, summary

log = logging.getLogger("kubegang.agent")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kubegang-agent", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    mode = p.add_argument_group("what to serve")
    mode.add_argument("--node-name", default=os.environ.get("NODE_NAME"), help="real mode: this node ($NODE_NAME)")
    mode.add_argument("--replay-dir", type=Path, help="replay mode: directory of <name>.nvml.json dumps")
    mode.add_argument("--nodes-from-label", help="replay mode: label selector of the served nodes, e.g. type=kwok")
    one = p.add_argument_group("one-shot")
    one.add_argument("--dump-nvml", type=Path, metavar="FILE", help="capture the local NVML to FILE and exit")
    one.add_argument("--once", action="store_true", help="read and publish once, then exit")
    one.add_argument("--print", action="store_true", help="with --once: print the GPUNode and labels, write nothing")
    one.add_argument("--replay-dump", help="with --once: read this dump (a path, or a name in --replay-dir)")
    one.add_argument("--replay-fabric", help="with --replay-dump: override the fabric, <clusterUuid>/<cliqueId>")
    tune = p.add_argument_group("tuning")
    tune.add_argument("--poll-interval", type=float, default=10.0, help="seconds between readings (10)")
    tune.add_argument("--resync-interval", type=float, default=300.0, help="seconds between forced writes (300)")
    tune.add_argument("--metrics-host", default="0.0.0.0", help="metrics/health listen address")
    tune.add_argument("--metrics-port", type=port_or_zero, default=9402, help="metrics/health port; 0 disables (9402)")
    add_serving_flags(tune)
    tune.add_argument("--infiniband-root", type=Path, default=DEFAULT_ROOT, help="sysfs InfiniBand class")
    tune.add_argument(
        "--fatal-xids",
        help=f"comma-separated XIDs that make a GPU unhealthy (default {','.join(map(str, FATAL_XIDS))}; "
             f"application-level ones such as {','.join(map(str, APPLICATION_XIDS))} do not)",
    )
    tune.add_argument("--no-nvidia-labels", action="store_true", help="leave nvidia.com/gpu.* to GPU feature discovery")
    tune.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return p




def _one_shot_backend(args: argparse.Namespace) -> Backend:
    if args.replay_dump:
        path = Path(args.replay_dump)
        if not path.is_file() and args.replay_dir is not None:
            path = resolve_dump(args.replay_dir, args.replay_dump)
        fabric = FabricOverride.parse(args.replay_fabric) if args.replay_fabric else None
        # With a node name, the GPUs get that node's UUIDs, as the replay agent would publish them.
        return ReplayBackend(path, fabric, node_name=args.node_name)
    return NvmlBackend(infiniband_root=args.infiniband_root, watch_events=False)


def _print_once(args: argparse.Namespace, fatal: dict[int, str]) -> int:
    backend = _one_shot_backend(args)
    try:
        readings = parse_dump(backend.read())
    finally:
        backend.close()
    status = build_status(readings, now=datetime.now(UTC).replace(microsecond=0), fatal_xids=fatal)
    node = args.node_name or "local"
    document = {
        "gpunode": {**GPUNode(metadata={"name": node}).to_dict(), "status": status_payload(status)},
        "labels": node_labels(status, nvidia_labels=not args.no_nvidia_labels),
    }
    print(json.dumps(document, indent=1))
    return 0 if readings.nvml_error is None else 1


async def _serve(settings: AgentSettings, once: bool, args: argparse.Namespace) -> int:
    from lightkube import AsyncClient

    from kubegang.restclient import rest_client

    from ._agent import Agent
    from ._kube import KubeSink
    from ._publisher import NodePublisher
    from ._server import make_app, start_server

    metrics = AgentMetrics()
    client = AsyncClient(field_manager=settings.field_manager)
    lister = None if settings.nodes_from_label is None else rest_client(None, timeout_seconds=30.0, limit=1)
    sink = KubeSink(client, settings.field_manager, lister=lister)
    if once:
        assert settings.node_name is not None
        backend = _one_shot_backend(args)
        try:
            result = await NodePublisher(settings.node_name, backend, sink, settings, metrics).poll_once()
        finally:
            backend.close()
        log.info("published once: %s", result)
        return 0 if not result.errors else 1

    agent = Agent(
        settings,
        sink,
        metrics,
        real_backend=lambda: NvmlBackend(infiniband_root=settings.infiniband_root),
    )
    runner = None
    if settings.metrics_port:
        serving = settings.serving
        reviews = kube_review_api(None) if serving.checked else None  # the agent's own credentials
        runner = await start_server(
            make_app(metrics.registry, agent.healthy, serving, reviews), settings.metrics_host,
            settings.metrics_port, serving.ssl_context(),
        )
    try:
        await agent.run()
    finally:
        if runner is not None:
            await runner.cleanup()
        await client.close()
        if lister is not None:
            await lister.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if args.log_level != "DEBUG":  # one INFO line per HTTP request would drown the agent's own log
        for noisy in ("httpx", "httpx2", "httpcore"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        policy = XidPolicy.parse_fatal(args.fatal_xids)
    except ValueError as exc:
        print(f"kubegang-agent: {exc}", file=sys.stderr)
        return 2
    fatal = dict(policy.fatal)
    try:
        if args.dump_nvml:
            dump = capture(args.dump_nvml, infiniband_root=args.infiniband_root)
            print(summary(dump), file=sys.stderr)
            return 0 if "init" not in dump else 1
        if args.once and args.print:
            return _print_once(args, fatal)
        settings = AgentSettings(
            node_name=None if args.replay_dir and not args.once else args.node_name,
            replay_dir=None if args.once else args.replay_dir,
            nodes_from_label=args.nodes_from_label,
            poll_interval_s=args.poll_interval,
            resync_interval_s=args.resync_interval,
            metrics_host=args.metrics_host,
            metrics_port=args.metrics_port,
            serving=serving_from_args(args),
            infiniband_root=args.infiniband_root,
            xid_policy=policy,
            nvidia_labels=not args.no_nvidia_labels,
        )
        return asyncio.run(_serve(settings, args.once, args))
    except (ValueError, ReplayError) as exc:
        print(f"kubegang-agent: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""``python -m kubegang.operator`` / ``kubegang-operator``: parse flags, serve metrics, run."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kubegang._flags import check_ca, check_cert_and_key, port_or_zero
from kubegang.authn import add_serving_flags, serving_from_args
from kubegang.operator._metrics_server import start_metrics
from kubegang.operator._run import WatchesEnded, run
from kubegang.operator._settings import OperatorSettings
from kubegang.operator._standby import LostLeadership
from kubegang.quota import DEFAULT_PLANNED_RESERVE_AFTER_SECONDS, DEFAULT_RESERVE_AFTER_SECONDS


def _on_off(value: str) -> bool:
    if value.lower() in ("on", "true", "1", "yes"):
        return True
    if value.lower() in ("off", "false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected on or off, got {value!r}")


def _positive(kind: Callable[[str], float]) -> Callable[[str], Any]:
    def parse(value: str) -> Any:
        try:
            number = kind(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {value!r}") from None
        if number <= 0:
            raise argparse.ArgumentTypeError(f"must be greater than 0, got {value!r}")
        return number

    return parse


def parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    p = argparse.ArgumentParser(
        prog="kubegang-operator",
        description="kubegang operator: admits GPUJobs through GPUQueues and starts each gang whole.",
    )
    p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster credentials or $KUBECONFIG)")
    p.add_argument("--namespace", default="kubegang-system", help="the operator's namespace (leader Lease)")
    p.add_argument(
        "--watch-namespace",
        action="append",
        default=[],
        metavar="NS",
        help="serve GPUJobs of this namespace only (repeatable; default: all namespaces)",
    )
    p.add_argument("--extender-address", required=True, help="host:port of the extender's gRPC Placement service")
    p.add_argument("--tls-dir", type=Path, help="directory with ca.crt, client.crt and client.key")
    p.add_argument("--tls-ca", type=Path, help="CA certificate (overrides --tls-dir)")
    p.add_argument("--tls-cert", type=Path, help="client certificate (overrides --tls-dir)")
    p.add_argument("--tls-key", type=Path, help="client private key (overrides --tls-dir)")
    p.add_argument("--tls-server-name", help="name to verify in the extender's certificate")
    p.add_argument("--metrics-port", type=port_or_zero, default=8080, help="Prometheus /metrics port; 0 disables")
    add_serving_flags(p)
    p.add_argument("--health-port", type=port_or_zero, default=0,
                   help="liveness /healthz port, served on the event loop (a hung loop fails it); 0 disables")
    p.add_argument("--listen-address", default="0.0.0.0",
                   help="address the metrics and health ports listen on (default 0.0.0.0, every interface)")
    p.add_argument("--leader-election", type=_on_off, default=True, metavar="on|off", help="campaign for the Lease")
    p.add_argument("--identity", help="holderIdentity in the Lease (default: hostname)")
    p.add_argument("--lease-duration", type=int, default=15, help="Lease duration, seconds")
    p.add_argument("--renew-deadline", type=float, default=10.0,
                   help="the leader stops acting this long after its last renewal (< lease duration), seconds")
    p.add_argument("--retry-period", type=float, default=2.0,
                   help="how often the Lease is renewed or retried (< renew deadline), seconds")
    p.add_argument("--api-qps", type=_positive(float), default=200.0, help="client-side rate limit of API writes")
    p.add_argument("--api-burst", type=_positive(int), default=400, help="client-side burst of API writes")
    p.add_argument(
        "--creation-concurrency",
        type=_positive(int),
        default=32,
        help="gangs whose pods are created in the background at once",
    )
    p.add_argument(
        "--shared-gpu-resource",
        default="",
        metavar="NAME",
        help="extended resource a shared-GPU pod (gpuFraction) requests one of, e.g. nvidia.com/gpu.shared of "
        "the NVIDIA device plugin's time-slicing or MPS mode with renameByDefault; empty: none (see docs/sharing.md)",
    )
    p.add_argument(
        "--backfill-reserve-after",
        type=float,
        default=DEFAULT_RESERVE_AFTER_SECONDS,
        metavar="SECONDS",
        help="a queue head blocked this long reserves the nodes it needs, and later jobs are placed around "
        f"them (Slurm's EASY backfill); negative: never (default: {DEFAULT_RESERVE_AFTER_SECONDS:.0f}, 48 h)",
    )
    p.add_argument(
        "--backfill-planned-reserve-after",
        type=float,
        default=DEFAULT_PLANNED_RESERVE_AFTER_SECONDS,
        metavar="SECONDS",
        help="the same for a head whose latest start the gangs' timeLimitSeconds give (jobs that end before it "
        "may use its nodes meanwhile); negative: as --backfill-reserve-after "
        f"(default: {DEFAULT_PLANNED_RESERVE_AFTER_SECONDS:.0f}, at once)",
    )
    p.add_argument("--log-level", default="INFO", type=str.upper, choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return p


def settings_from_args(args: argparse.Namespace) -> OperatorSettings:
    """OperatorSettings from parsed flags."""
    tls_dir: Path | None = args.tls_dir
    extra = {"identity": args.identity} if args.identity else {}
    return OperatorSettings(
        extender_address=args.extender_address,
        kubeconfig=args.kubeconfig,
        namespace=args.namespace,
        watch_namespaces=tuple(args.watch_namespace),
        tls_ca=args.tls_ca or (tls_dir / "ca.crt" if tls_dir else None),
        tls_cert=args.tls_cert or (tls_dir / "client.crt" if tls_dir else None),
        tls_key=args.tls_key or (tls_dir / "client.key" if tls_dir else None),
        tls_server_name=args.tls_server_name,
        metrics_port=args.metrics_port,
        health_port=args.health_port,
        listen_address=args.listen_address,
        leader_election=args.leader_election,
        lease_duration_seconds=args.lease_duration,
        renew_deadline_seconds=args.renew_deadline,
        retry_period_seconds=args.retry_period,
        api_qps=args.api_qps,
        api_burst=args.api_burst,
        creation_concurrency=args.creation_concurrency,
        shared_gpu_resource=args.shared_gpu_resource or None,
        backfill_reserve_after_seconds=None if args.backfill_reserve_after < 0 else args.backfill_reserve_after,
        backfill_planned_reserve_after_seconds=(
            None if args.backfill_planned_reserve_after < 0 else args.backfill_planned_reserve_after),
        **extra,
    )


def check_tls_files(args: argparse.Namespace, settings: OperatorSettings) -> None:
    """Refuse (ValueError naming the flag and the file) TLS files the extender's client could not use.

    A file taken from ``--tls-dir`` is named as that flag's; all three are needed (mTLS only).
    """
    flags: dict[str, str] = {}
    for name in ("tls-ca", "tls-cert", "tls-key"):
        given = getattr(args, name.replace("-", "_")) is not None
        flags[name] = f"--{name}" if given or args.tls_dir is None else "--tls-dir"
        if getattr(settings, name.replace("-", "_")) is None:
            raise ValueError(f"--{name}: not given, nor --tls-dir (the extender accepts mTLS only)")
    assert settings.tls_ca and settings.tls_cert and settings.tls_key
    check_ca(flags["tls-ca"], settings.tls_ca)
    check_cert_and_key(flags["tls-cert"], settings.tls_cert, flags["tls-key"], settings.tls_key)


def _refuse_shared_ports(p: argparse.ArgumentParser, settings: OperatorSettings) -> None:
    """A usage error (exit status 2, as a port out of range) naming both flags when two listeners share a port.

    Without it the second listener failed to bind with an ``OSError`` traceback that named no flag.
    """
    clash = settings.port_clash()
    if clash is not None:
        first, second = (f"--{name.replace('_', '-')}" for name in clash)
        p.error(f"{first} and {second} are both {getattr(settings, clash[0])}: two listeners cannot bind "
                "one port (the second would fail with 'address already in use'); give each its own")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    p = parser()
    args = p.parse_args(argv)
    settings = settings_from_args(args)
    _refuse_shared_ports(p, settings)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="time=%(asctime)s level=%(levelname)s logger=%(name)s msg=%(message)s",
    )
    # Every request at INFO would drown the decisions; failures still surface as WARNING.
    for noisy in ("httpx2", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:  # every file is checked before anything is served
        check_tls_files(args, settings)
        serving = serving_from_args(args)
    except ValueError as exc:
        print(f"kubegang-operator: {exc}", file=sys.stderr)
        return 2
    try:
        if settings.metrics_port:
            start_metrics(settings.metrics_port, serving, settings.kubeconfig, settings.listen_address)
    except (ValueError, OSError) as exc:
        print(f"kubegang-operator: metrics on port {settings.metrics_port}: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(run(settings))
    except ValueError as exc:
        print(f"kubegang-operator: {exc}", file=sys.stderr)
        return 2
    except WatchesEnded as exc:
        print(f"kubegang-operator: {exc}; exiting", file=sys.stderr)
        return 1
    except LostLeadership as exc:
        # As client-go's leaders do: exit, and let the Deployment start a fresh standby.
        print(f"kubegang-operator: {exc}; exiting", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``kubegang-extender``: the scheduler extender process (see docs/extender.md)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from dataclasses import fields
from pathlib import Path

from kubegang._flags import check_ca, check_cert_and_key, port
from kubegang.authn import add_serving_flags
from kubegang.extender._runtime import run_extender
from kubegang.extender._settings import ExtenderSettings


def _parser() -> argparse.ArgumentParser:
    defaults = {f.name: f.default for f in fields(ExtenderSettings)}
    p = argparse.ArgumentParser(
        prog="kubegang-extender",
        description="kubegang scheduler extender: kube-scheduler verbs over HTTPS and the Placement "
                    "gRPC service, both mTLS only; /healthz, /readyz and /metrics on a third port (HTTPS with "
                    "token checks unless --metrics-auth=off).",
    )
    p.add_argument("--tls-cert", type=Path, required=True, help="server certificate (PEM)")
    p.add_argument("--tls-key", type=Path, required=True, help="server private key (PEM)")
    p.add_argument("--client-ca", type=Path, required=True, help="CA that client certificates must chain to")
    p.add_argument("--tls-reload-seconds", type=float, default=defaults["tls_reload_seconds"],
                   help="how often the certificate files are checked for a change, which new connections "
                        "then get without a restart")
    p.add_argument("--kubeconfig", default=None, help="kubeconfig path (default: in-cluster / $KUBECONFIG)")
    p.add_argument("--https-address", default=defaults["https_address"])
    p.add_argument("--https-port", type=port, default=defaults["https_port"], help="scheduler verbs port")
    p.add_argument("--grpc-address", default=defaults["grpc_address"])
    p.add_argument("--grpc-port", type=port, default=defaults["grpc_port"], help="Placement gRPC port")
    p.add_argument("--health-address", default=defaults["health_address"])
    p.add_argument("--health-port", type=port, default=defaults["health_port"], help="health/metrics port")
    add_serving_flags(p)
    p.add_argument("--max-body-bytes", type=int, default=defaults["max_body_bytes"])
    p.add_argument("--reservation-ttl-seconds", type=float, default=defaults["reservation_ttl_seconds"])
    p.add_argument("--topology-preset", default=defaults["topology_preset"],
                   help="node label preset for fabric levels (default, gke, aws, oci, nvidia)")
    p.add_argument("--log-level", default=defaults["log_level"], type=str.upper,
                   choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return p


def settings_from_args(argv: list[str] | None = None) -> ExtenderSettings:
    """Parse the command line into :class:`ExtenderSettings`.

    Two listeners on one port are a usage error (exit status 2, as a port out of range) naming both
    flags; without it the second failed to bind with an ``OSError`` traceback that named no flag.
    """
    p = _parser()
    settings = ExtenderSettings(**vars(p.parse_args(argv)))
    clash = settings.port_clash()
    if clash is not None:
        first, second = (f"--{name.replace('_', '-')}" for name in clash)
        p.error(f"{first} and {second} are both {getattr(settings, clash[0])}: two listeners cannot bind "
                "one port (the second would fail with 'address already in use'); give each its own")
    return settings


async def _serve(settings: ExtenderSettings) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with run_extender(settings) as running:
        waits = [asyncio.create_task(stop.wait()), asyncio.create_task(running.failed.wait())]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for wait in waits:
            wait.cancel()
        return 1 if running.failed.is_set() else 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``kubegang-extender``."""
    settings = settings_from_args(argv)
    if settings.tls_reload_seconds <= 0:
        print(f"kubegang-extender: --tls-reload-seconds must be > 0, got {settings.tls_reload_seconds}",
              file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:  # every file is checked before anything is served
        check_cert_and_key("--tls-cert", settings.tls_cert, "--tls-key", settings.tls_key)
        check_ca("--client-ca", settings.client_ca)
        settings.serving  # noqa: B018 - checks the metrics certificate flags
    except ValueError as exc:
        print(f"kubegang-extender: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(_serve(settings))


if __name__ == "__main__":
    sys.exit(main())

"""Helpers for running kubegang's processes locally (the demo, the e2e tests, the benchmarks).

Like a framework's testing helpers, this is for running things, not for production code paths.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

import yaml

_PICKED: set[int] = set()


def free_port() -> int:
    """A loopback port that is free now and outside the kernel's ephemeral range.

    Port 0 would hand out an ephemeral port, the same range the kernel uses for the source ports of
    outgoing connections; between choosing a port and a process binding it, another process's
    connection (kube-apiserver's to etcd, say) can take it ("bind: address already in use"). Ports
    below that range are never given out implicitly, so only a deliberate listener could collide,
    and this process never hands out the same port twice.
    """
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.Random()
    for _ in range(1000):
        port = rng.randrange(10000, max(low, 10001))
        if port in _PICKED:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _PICKED.add(port)
        return port
    raise RuntimeError(f"no free loopback port found in 10000..{low - 1}")


def unanswered_kubeconfig(path: Path) -> Path:
    """Write a kubeconfig whose API server (a free loopback port) nobody answers, with a static token:
    a process gets as far as its own start-up checks and its token-less requests."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{free_port()}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return path

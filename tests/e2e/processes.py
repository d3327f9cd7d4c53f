"""Signal and restart the local stack's processes by their pid files, as a crash and a kubelet would.

``hack/cluster`` starts each process detached with a pid file in ``<cluster>/pids``; control-plane
processes run under ``hack/supervise.py``, which starts them again when they exit. kubegang's own
processes are not supervised (a test decides when they come back): :func:`kill` returns the command
line read from /proc, and :func:`start` runs it again detached, with the same log and pid file.
"""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path


def pid_of(cluster_dir: Path, component: str) -> int | None:
    """The pid recorded for ``component`` (None when there is no readable pid file)."""
    try:
        return int((cluster_dir / "pids" / f"{component}.pid").read_text().strip())
    except (OSError, ValueError):
        return None


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def kill(cluster_dir: Path, component: str, sig: signal.Signals = signal.SIGKILL) -> list[str]:
    """Send ``sig`` (SIGKILL: wait until it is gone); returns the process's command line."""
    pid = pid_of(cluster_dir, component)
    assert pid is not None and alive(pid), f"{component} is not running"
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").decode().split("\0")
    os.kill(pid, sig)
    if sig is signal.SIGKILL:
        deadline = time.monotonic() + 10
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(pid), f"{component} pid {pid} survived SIGKILL"
    return argv


def start(cluster_dir: Path, kubeconfig: Path, component: str, argv: list[str]) -> int:
    """Start ``argv`` again detached (setsid, as hack/ starts it), same log and pid file; its pid."""
    log = cluster_dir / "logs" / f"{component}.log"
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1", "LOG": str(log)}
    out = subprocess.run(["sh", "-c", 'setsid "$@" </dev/null >>"$LOG" 2>&1 & echo $!', "sh", *argv],
                         env=env, cwd=cluster_dir, capture_output=True, text=True, check=True)
    (cluster_dir / "pids" / f"{component}.pid").write_text(out.stdout.strip())
    return int(out.stdout.strip())


def wait_restarted(cluster_dir: Path, component: str, old_pid: int, timeout: float = 30) -> int:
    """Wait until the supervisor has started ``component`` again; its new pid."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid = pid_of(cluster_dir, component)
        if pid is not None and pid != old_pid and alive(pid):
            return pid
        time.sleep(0.1)
    raise AssertionError(f"{component} was not restarted within {timeout:.0f}s")


def http_ok(url: str) -> bool:
    """Whether ``url`` answers 200 now (an https URL: a self-signed certificate is accepted, as the
    control plane's own health ports have one)."""
    context = ssl._create_unverified_context() if url.startswith("https:") else None
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False

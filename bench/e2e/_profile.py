"""Sampling profiles of kubegang's own processes during the burst (py-spy, attached by pid).

py-spy reads the target's memory from outside (ptrace), so the process runs unchanged: no
profiler hooks in kubegang's code, and ``--nonblocking`` keeps it from pausing the target at each
sample. It writes collapsed stacks (``frame;frame;... count``), which speedscope.app opens as a
flame graph and which :func:`summarize` turns into the few lines the report quotes: where each
process's sampled CPU went, by the kubegang function that was running (or that called the library
code that was) and by the leaf function itself.

Idle threads are not sampled (py-spy's default), so a process's samples at ``rate`` Hz count the
time its threads were on a CPU or waiting for the GIL.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROFILED = ("kubegang-operator-0", "kubegang-operator-1", "kubegang-extender", "kubegang-agent")
OWN_CODE = "kubegang/"
"""A frame whose file path holds this is kubegang's own code (installed or from the checkout)."""


def py_spy() -> str | None:
    """The py-spy next to this interpreter (the project's .venv), else on PATH; None when absent."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


@dataclass
class Recording:
    name: str
    pid: int
    path: Path
    proc: subprocess.Popen[bytes]
    log: Path


class Profiler:
    """``py-spy record`` on each named process of a cluster folder from :meth:`start` to :meth:`stop`."""

    def __init__(self, cluster_dir: Path, out_dir: Path, names: tuple[str, ...] = PROFILED, rate: int = 50) -> None:
        self.cluster_dir = cluster_dir
        self.out_dir = out_dir
        self.names = names
        self.rate = rate
        self.errors: list[str] = []
        self._recordings: list[Recording] = []

    def start(self) -> None:
        exe = py_spy()
        if exe is None:
            self.errors.append("py-spy not found (pip install py-spy into the venv)")
            return
        self.out_dir.mkdir(parents=True, exist_ok=True)
        for name in self.names:
            pid_file = self.cluster_dir / "pids" / f"{name}.pid"
            try:
                pid = int(pid_file.read_text().strip())
            except (OSError, ValueError):
                continue
            path, log = self.out_dir / f"{name}.collapsed.txt", self.out_dir / f"{name}.py-spy.log"
            proc = subprocess.Popen(
                [exe, "record", "--pid", str(pid), "--rate", str(self.rate), "--format", "raw", "--function",
                 "--nonblocking", "--threads", "-o", str(path)],
                stdout=log.open("wb"), stderr=subprocess.STDOUT)
            self._recordings.append(Recording(name, pid, path, proc, log))

    def stop(self) -> dict[str, dict[str, Any]]:
        """Stop every recording (SIGINT makes py-spy write its file) and summarize each."""
        for r in self._recordings:
            if r.proc.poll() is None:
                r.proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 60
        out: dict[str, dict[str, Any]] = {}
        for r in self._recordings:
            try:
                r.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                r.proc.kill()
                self.errors.append(f"py-spy on {r.name} did not stop within 60 s")
            if not r.path.exists():
                tail = r.log.read_text(errors="replace")[-500:] if r.log.exists() else ""
                self.errors.append(f"py-spy on {r.name} (pid {r.pid}) wrote nothing: {tail.strip()}")
                continue
            out[r.name] = {"pid": r.pid, "file": os.path.relpath(r.path), "rate_hz": self.rate,
                           **summarize(r.path.read_text(errors="replace"))}
        return out


def _frames(stack: str) -> list[str]:
    """The frames of one collapsed stack, outermost first, without py-spy's process and thread frames."""
    return [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]


def _short(frame: str) -> str:
    """``func (path/to/kubegang/x/y.py:12)`` as ``x/y.py:func``; a library frame as ``lib/file.py:func``."""
    func, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    path = path.rsplit(OWN_CODE, 1)[1] if OWN_CODE in path else "/".join(path.split("/")[-2:])
    return f"{path}:{func}"


def summarize(collapsed: str, top: int = 15) -> dict[str, Any]:
    """Samples in total, and the busiest functions three ways: the innermost kubegang frame of each
    stack (what our code was doing, library calls included), the leaf frame (where the CPU was),
    and the kubegang frames inclusive (each counted once per stack)."""
    own: Counter[str] = Counter()
    leaf: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = _frames(stack)
        if not frames:
            continue
        total += n
        leaf[_short(frames[-1])] += n
        ours = [_short(f) for f in frames if OWN_CODE in f]
        own[ours[-1] if ours else "(no kubegang frame)"] += n
        for f in set(ours):
            inclusive[f] += n

    def share(c: Counter[str]) -> list[list[Any]]:
        return [[k, v, round(v / total, 3)] for k, v in c.most_common(top)] if total else []

    return {"samples": total, "by_innermost_kubegang_frame": share(own), "by_leaf": share(leaf),
            "kubegang_inclusive": share(inclusive)}

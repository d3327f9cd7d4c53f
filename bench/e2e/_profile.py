"""Sampling profiles of kubegang's own processes during the burst (py-spy, attached by pid).

py-spy reads the target's memory from outside (ptrace), so the process runs unchanged: no
profiler hooks in kubegang's code, and ``--nonblocking`` keeps it from pausing the target at each
sample. It writes collapsed stacks (``frame;frame;... count``), which speedscope.app opens as a
flame graph and which :func:`summarize` turns into the few lines the report quotes: where each
process's sampled CPU went, by the asyncio task (or callback) that was running, library calls
included, and by the leaf function itself.

Idle threads are not sampled (py-spy's default), so a process's samples at ``rate`` Hz count the
time its threads were on a CPU or waiting for the GIL.
"""

from __future__ import annotations

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
REPO = str(Path(__file__).resolve().parents[2]) + "/"
"""A frame whose file lies under the checkout (and not in its virtual environment) is kubegang's own:
py-spy runs with ``--full-filenames``, so the operator's files (reached through the kubegang/operator
symlink) are told from a library's module of the same name."""
LOOP_STEP = "Handle._run ("
"""asyncio's frame that runs one callback or task step: the frame above it names the task."""


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
                 "--nonblocking", "--full-filenames", "-o", str(path)],
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
            where = str(r.path.resolve())
            out[r.name] = {"pid": r.pid, "file": where.removeprefix(REPO), "rate_hz": self.rate,
                           **summarize(r.path.read_text(errors="replace"))}
        return out


def _frames(stack: str) -> list[str]:
    """The frames of one collapsed stack, outermost first, without py-spy's process and thread frames."""
    return [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]


def _own(frame: str) -> bool:
    path = frame.partition(" (")[2]
    return path.startswith(REPO) and "/.venv/" not in path and "/site-packages/" not in path


def _short(frame: str) -> str:
    """``func (/repo/operator/_kube.py:12)`` as ``operator/_kube.py:func``; a library frame as
    ``package/file.py:func`` (its last two path parts)."""
    func, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    path = path[len(REPO):] if _own(frame) else "/".join(path.split("/")[-2:])
    return f"{path}:{func}"


def _task(frames: list[str]) -> str:
    """What the event loop was running: the frame right above asyncio's last ``Handle._run`` (a
    task's coroutine or a callback), else the innermost frame (a thread, or the loop itself)."""
    steps = [i for i, f in enumerate(frames) if f.startswith(LOOP_STEP)]
    if steps and steps[-1] + 1 < len(frames):
        return _short(frames[steps[-1] + 1])
    return "(outside a task) " + _short(frames[-1])


def summarize(collapsed: str, top: int = 12) -> dict[str, Any]:
    """Samples in total, and the busiest entries three ways: by the task the event loop was running
    (where a process's time goes, library calls included), by leaf function (where the CPU was), and
    kubegang's own functions inclusive (each counted once per stack)."""
    task: Counter[str] = Counter()
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
        task[_task(frames)] += n
        for f in {_short(f) for f in frames if _own(f)}:
            inclusive[f] += n

    def share(c: Counter[str]) -> list[list[Any]]:
        return [[k, v, round(v / total, 3)] for k, v in c.most_common(top)] if total else []

    return {"samples": total, "by_task": share(task), "by_leaf": share(leaf),
            "kubegang_inclusive": share(inclusive)}

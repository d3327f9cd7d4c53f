"""CPU seconds and peak memory of the cluster's processes, from /proc and the cluster's pid files.

Every process that ``hack/cluster`` starts records its pid in ``<cluster dir>/pids/<name>.pid``; we
read ``/proc/<pid>/stat`` (utime + stime, clock ticks) before and after a measured window and
``/proc/<pid>/status`` (VmHWM: the peak resident set since the process started; VmRSS: now).
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcSample:
    name: str
    pid: int
    cpu_seconds: float
    """User + system CPU seconds since the process started."""
    peak_rss_mib: float
    """VmHWM: the largest resident set the process ever had."""
    rss_mib: float


def _status_kib(text: str, field: str) -> float:
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return float(line.split()[1])
    return 0.0


def sample(name: str, pid: int) -> ProcSample | None:
    """One process's counters, or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    # The command name in field 2 may hold spaces; fields after the closing parenthesis are fixed.
    fields = stat.rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])
    return ProcSample(name, pid, (utime + stime) / _TICK, _status_kib(status, "VmHWM") / 1024,
                      _status_kib(status, "VmRSS") / 1024)


def sample_cluster(cluster_dir: Path) -> dict[str, ProcSample]:
    """Every process with a pid file in the cluster folder that is still running."""
    out: dict[str, ProcSample] = {}
    pids = cluster_dir / "pids"
    for pid_file in sorted(pids.glob("*.pid")) if pids.exists() else []:
        try:
            pid = int(pid_file.read_text().strip())
        except (OSError, ValueError):
            continue
        s = sample(pid_file.stem, pid)
        if s is not None:
            out[pid_file.stem] = s
    return out


def window(before: dict[str, ProcSample], after: dict[str, ProcSample]) -> dict[str, dict[str, float]]:
    """Per process alive at both ends (same pid): CPU seconds spent in between, peak and current memory."""
    out: dict[str, dict[str, float]] = {}
    for name, end in sorted(after.items()):
        start = before.get(name)
        if start is None or start.pid != end.pid:
            continue
        out[name] = {"pid": end.pid, "cpu_seconds": round(end.cpu_seconds - start.cpu_seconds, 2),
                     "cpu_seconds_total": round(end.cpu_seconds, 2), "peak_rss_mib": round(end.peak_rss_mib, 1),
                     "rss_mib": round(end.rss_mib, 1)}
    return out


def own_cpu_seconds() -> float:
    """User + system CPU seconds of the calling process so far (a client benchmark's own cost)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime

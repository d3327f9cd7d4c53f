"""hack/supervise.py's restart back-off: 1 s doubling to 10 s, reset once the child ran 30 s (README,
"The local control plane"). Real children that exit at once; the supervisor's own clock and sleep
are replaced by a fake clock (only in its module), so the test waits no real back-off."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "hack"))
import supervise


class Run:
    """Runs ``supervise.main`` with a fake clock: child ``n`` 'runs' ``durations[n]`` seconds of it (its
    real process exits at once), and the supervisor is stopped, as SIGTERM would, when the child
    after the last duration starts."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, durations: list[float]) -> None:
        self.now = 1000.0
        self.durations = durations
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.handlers: dict[int, Any] = {}
        monkeypatch.setattr(supervise, "time", SimpleNamespace(monotonic=self.monotonic, sleep=self.sleep))
        monkeypatch.setattr(supervise, "signal", SimpleNamespace(
            signal=self.handlers.__setitem__, SIGTERM=signal.SIGTERM, SIGINT=signal.SIGINT))
        monkeypatch.setattr(supervise, "subprocess", SimpleNamespace(
            Popen=self.popen, DEVNULL=subprocess.DEVNULL, TimeoutExpired=subprocess.TimeoutExpired))

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now = round(self.now + seconds, 6)  # no float drift: ten 0.1 s steps are exactly 1 s

    def popen(self, command: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        self.starts.append(self.now)
        child = subprocess.Popen(command, **kwargs)
        if len(self.starts) > len(self.durations):
            self.handlers[signal.SIGTERM](signal.SIGTERM, None)  # stop after this one
        else:
            self.now = round(self.now + self.durations[len(self.starts) - 1], 6)
            self.ends.append(self.now)
        return child

    def delays(self) -> list[float]:
        """Seconds between each child's end and the next child's start."""
        return [round(start - end, 6) for end, start in zip(self.ends, self.starts[1:], strict=False)]


def test_a_child_that_exits_at_once_is_restarted_after_1_2_4_8_10_10_s(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = Run(monkeypatch, [0.0] * 6)
    assert supervise.main([str(tmp_path / "child.pid"), "--", sys.executable, "-c", "pass"]) == 0
    assert run.delays() == [1, 2, 4, 8, 10, 10]
    assert len(run.starts) == 7
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("; ")[1] for line in lines] == [
        "restart 1 in 1s", "restart 2 in 2s", "restart 3 in 4s", "restart 4 in 8s", "restart 5 in 10s",
        "restart 6 in 10s"]
    assert all(line.startswith(f"supervise: {Path(sys.executable).name} exited with 0 after 0.0s") for line in lines)
    assert (tmp_path / "child.pid").read_text().isdigit()  # the last child's pid, for hack/cluster


def test_a_child_that_ran_30_s_resets_the_back_off_to_1_s(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    run = Run(monkeypatch, [0, 0, 0, 0, supervise.RESET_AFTER_S, 0, 0, 29.9, 0])
    assert supervise.main([str(tmp_path / "child.pid"), "--", sys.executable, "-c", "pass"]) == 0
    # 4 quick exits (1, 2, 4, 8), a 30 s run resets to 1 (then 2, 4); 29.9 s is not long enough (8, 10).
    assert run.delays() == [1, 2, 4, 8, 1, 2, 4, 8, 10]

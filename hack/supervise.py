"""Keep one control-plane process running, as the kubelet keeps a static pod: restart it when it exits.

``python hack/supervise.py PID_FILE -- ARGV...`` starts ARGV, writes its pid to PID_FILE (the pid
tests and ``hack/cluster`` signal), and starts it again after it exits, with a back-off of 1 s
doubling to 10 s that is reset once it has run for 30 s (the kubelet's CrashLoopBackOff, shorter).
SIGTERM or SIGINT stops the child (SIGTERM, then SIGKILL after 10 s) and the supervisor. Each
restart is logged on stdout, which ``hack/devcluster.py`` appends to the component's log.

Why: upstream kube-scheduler exits on purpose when its cache is inconsistent ("Scheduler cache is
corrupted"), for instance after a kube-apiserver restart; in a cluster the kubelet restarts it,
and the local stack must behave the same for the chaos tests to mean anything.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

RESET_AFTER_S = 30.0
MAX_BACKOFF_S = 10.0


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: supervise.py PID_FILE -- ARGV...", file=sys.stderr)
        return 2
    pid_file, command = Path(argv[0]), argv[2:]
    stopping = False
    stop_at = 0.0
    child: subprocess.Popen[bytes] | None = None

    def stop(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping, stop_at
        if not stopping:
            stopping, stop_at = True, time.monotonic()
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    backoff = 1.0
    restarts = 0
    while not stopping:
        started = time.monotonic()
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL)
        pid_file.write_text(str(child.pid))
        while True:
            try:
                code = child.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                if stopping and time.monotonic() - stop_at > 10:
                    child.kill()
        if stopping:
            break
        ran = time.monotonic() - started
        backoff = 1.0 if ran >= RESET_AFTER_S else backoff
        restarts += 1
        print(f"supervise: {Path(command[0]).name} exited with {code} after {ran:.1f}s; "
              f"restart {restarts} in {backoff:.0f}s", flush=True)
        deadline = time.monotonic() + backoff
        while not stopping and time.monotonic() < deadline:
            time.sleep(0.1)
        backoff = min(backoff * 2, MAX_BACKOFF_S)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

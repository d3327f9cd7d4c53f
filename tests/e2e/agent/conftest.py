"""The node agent on the real control plane: CRDs installed, replay agents started as processes.

The agent runs exactly as ``hack/cluster kubegang up`` and a user would start it (``python -m
kubegang.agent``), with a short poll interval so that the tests wait seconds, not minutes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from kubegang.testing import free_port

Cluster = Any  # the `cluster` fixture's object (tests/e2e/conftest.py)
REPO = Path(__file__).resolve().parents[3]
DUMPS = REPO / "tests" / "fixtures" / "nvml"
POLL_S = 1.0


@dataclass
class AgentProcess:
    """One ``kubegang-agent`` process and where to reach and read it."""

    process: subprocess.Popen[bytes]
    metrics_url: str
    log: Path
    poll_s: float
    dumps: Path
    """The directory the agent replays from."""

    def log_tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def get(self, path: str) -> httpx.Response:
        if self.process.poll() is not None:
            raise AssertionError(f"the agent exited ({self.process.returncode}):\n{self.log_tail()}")
        return httpx.get(self.metrics_url + path, timeout=5)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


@pytest.fixture(scope="session")
def kubegang_crds(cluster: Cluster) -> None:
    """The CRDs from crds/ (what the chart ships), established."""
    cluster.kubectl("apply", "-f", str(REPO / "crds"))
    cluster.kubectl("wait", "--for=condition=Established", "crd/gpunodes.kubegang.io", "--timeout=60s")


@pytest.fixture
def start_replay_agent(cluster: Cluster, kubegang_crds: None, tmp_path: Path) -> Iterator[Callable[..., AgentProcess]]:
    """Start a replay agent for every kwok node; stopped when the test ends."""
    started: list[AgentProcess] = []

    def start(*extra: str) -> AgentProcess:
        port = free_port()
        log = tmp_path / f"agent-{len(started)}.log"
        # Plain HTTP (--metrics-auth off): these tests read what replay publishes; test_prometheus checks auth.
        command = [sys.executable, "-m", "kubegang.agent", "--replay-dir", str(DUMPS),
                   "--nodes-from-label", "type=kwok", "--metrics-host", "127.0.0.1",
                   "--metrics-port", str(port), "--poll-interval", str(POLL_S),
                   "--metrics-auth", "off", *extra]  # fmt: skip
        with log.open("wb") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                       env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)})  # fmt: skip
        agent = AgentProcess(process, f"http://127.0.0.1:{port}", log, POLL_S, DUMPS)
        started.append(agent)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                agent.get("/healthz")
                return agent
            except httpx.TransportError:
                time.sleep(0.2)
        raise AssertionError(f"the agent's metrics port never opened:\n{agent.log_tail()}")

    yield start
    for agent in started:
        agent.stop()

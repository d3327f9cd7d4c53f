"""Fixtures for the chart tests: the pinned helm that hack/ builds, and a renderer over it.

The binary's location is the e2e suite's (tests/e2e/conftest.py ``tool``), loaded as a plain module so
both suites agree on it; these tests need no cluster.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "kubegang"
KUBE_VERSION = "1.36.3"



class Rendered(list[dict[str, Any]]):
    """The objects ``helm template`` printed, with the look-ups the tests share."""

    def kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self if o.get("kind") == kind]

    def one(self, kind: str, name_suffix: str) -> dict[str, Any]:
        found = [o for o in self.kind(kind) if o["metadata"]["name"].endswith(name_suffix)]
        names = [o["metadata"]["name"] for o in found]
        assert len(found) == 1, f"expected one {kind} named *{name_suffix}, got {names}"
        return found[0]

    def workloads(self) -> list[dict[str, Any]]:
        return [o for o in self if o.get("kind") in ("Deployment", "DaemonSet", "StatefulSet")]


Render = Callable[..., Rendered]
HelmRun = Callable[..., subprocess.CompletedProcess[str]]


def _e2e_tool(name: str) -> str:
    spec = importlib.util.spec_from_file_location("kubegang_e2e_tools", REPO / "tests" / "e2e" / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    path: str = module.tool(name)
    return path


@pytest.fixture(scope="session")
def helm() -> str:
    path = _e2e_tool("helm")
    if not os.access(path, os.X_OK):
        pytest.fail(f"helm not found at {path}: run hack/build-control-plane.sh (make control-plane)", pytrace=False)
    return path


@pytest.fixture(scope="session")
def run_helm(helm: str) -> HelmRun:
    """``run_helm(*args, check=True)``: run helm, fail with its stderr unless told not to check."""

    def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([helm, *args], capture_output=True, text=True, timeout=120)
        if check and proc.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc

    return _run


@pytest.fixture(scope="session")
def chart_dir() -> Path:
    return CHART


@pytest.fixture(scope="session")
def render(run_helm: HelmRun) -> Render:
    """``render(*set_args, namespace=...)`` → the chart's objects (``helm template``), parsed."""

    def _render(*sets: str, namespace: str = "kubegang-system", release: str = "kg") -> Rendered:
        args = ["template", release, str(CHART), "--namespace", namespace, "--kube-version", KUBE_VERSION]
        for s in sets:
            args += ["--set", s]
        out = run_helm(*args).stdout
        return Rendered(d for d in yaml.safe_load_all(out) if d)

    return _render


@pytest.fixture(scope="session")
def promtool() -> str:
    """promtool from Debian's prometheus package (hack/prometheus.sh installs it when missing)."""
    proc = subprocess.run([str(REPO / "hack" / "prometheus.sh")], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"hack/prometheus.sh failed ({proc.returncode}):\n{proc.stderr[-3000:]}", pytrace=False)
    lines = [line for line in proc.stdout.split() if line.endswith("/promtool")]
    if not lines:
        pytest.fail(f"hack/prometheus.sh did not name promtool: {proc.stdout!r}", pytrace=False)
    return lines[0]

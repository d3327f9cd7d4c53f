"""The real local control plane for end-to-end tests.

Session-scoped: reuses a cluster that ``hack/cluster up`` already started (and leaves it
running), otherwise starts one and stops it at the end. When it cannot start, every e2e test
FAILS with the reason; nothing here ever skips. ``KUBEGANG_E2E_KUBECONFIG`` points the ``cluster``
fixture at an existing cluster instead, in which case nothing is started or stopped; only the CRD
checks and the pinned-tool checks can pass there (README.md says which), the rest need the local
processes and fail, by design.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
HACK = REPO / "hack"
SHAPES = HACK / "shapes"


def _versions() -> dict[str, str]:
    pairs = (line.split("=", 1) for line in (HACK / "versions.env").read_text().splitlines()
             if "=" in line and not line.startswith("#"))
    return {k.strip(): v.strip() for k, v in pairs}


def _cache() -> Path:
    base = os.environ.get("KUBEGANG_CACHE")
    return Path(base) if base else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kubegang"


def tool(name: str) -> str:
    """Path of a binary built by hack/ (kubectl, helm, ...)."""
    v = _versions()
    folder = f"helm-{v['HELM_VERSION']}" if name == "helm" else f"kubernetes-{v['KUBERNETES_VERSION']}"
    return str(_cache() / folder / "bin" / name)


@dataclass
class Cluster:
    """A running control plane, driven the way a user drives it: kubectl with a kubeconfig."""

    kubeconfig: Path
    cluster_dir: Path | None
    shape: str | None = field(default=None)

    @property
    def versions(self) -> dict[str, str]:
        return _versions()

    def helm(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([tool("helm"), *args], capture_output=True, text=True, env=self.env, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 120) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([tool("kubectl"), *args], input=input, capture_output=True, text=True,
                              env=self.env, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc

    def get_json(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def apply(self, manifest: dict[str, Any] | list[dict[str, Any]] | str, check: bool = True
              ) -> subprocess.CompletedProcess[str]:
        text = manifest if isinstance(manifest, str) else yaml.safe_dump_all(
            manifest if isinstance(manifest, list) else [manifest])
        return self.kubectl("apply", "-f", "-", input=text, check=check)

    def use_shape(self, name: str | Path) -> None:
        """Make the fake nodes exactly those of hack/shapes/<name>.yaml, or of a shape file a test
        brings (a Path), no-op if they already are."""
        if self.shape == str(name):
            return
        if self.cluster_dir is None:
            raise AssertionError("shapes can only be changed on the cluster that hack/cluster started")
        _hack("delete-nodes", cluster_dir=self.cluster_dir)
        _hack("nodes", str(name if isinstance(name, Path) else SHAPES / f"{name}.yaml"), cluster_dir=self.cluster_dir)
        self.shape = str(name)

    def wait_for(self, what: str, predicate: Callable[[], bool], timeout: float = 60, interval: float = 0.5,
                 detail: Callable[[], str] | None = None) -> None:
        """Poll ``predicate`` until it holds; on timeout fail with ``what`` and, if given, ``detail()``:
        the state a rare failure needs explained, read at the moment it failed."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(interval)
        message = f"timed out after {timeout:.0f}s waiting for {what}"
        if detail is not None:
            try:
                message += f"\n{detail()}"
            except Exception as exc:  # the detail must never hide the timeout itself
                message += f"\n(no detail: {exc!r})"
        raise AssertionError(message)

    def log_lines(self, process: str, needle: str, limit: int = 20) -> list[str]:
        """The last ``limit`` lines of a local control-plane process's log that contain ``needle``."""
        if self.cluster_dir is None:
            return []
        path = self.cluster_dir / "logs" / f"{process}.log"
        if not path.exists():
            return []
        lines = [line for line in path.read_text(errors="replace").splitlines() if needle in line]
        return lines[-limit:]


def _hack(*args: str, cluster_dir: Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(HACK / "cluster"), *args], capture_output=True, text=True,
                          env={**os.environ, "KUBEGANG_CLUSTER_DIR": str(cluster_dir)}, timeout=1800)
    if proc.returncode != 0:
        pytest.fail(f"hack/cluster {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}",
                    pytrace=False)
    return proc


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    external = os.environ.get("KUBEGANG_E2E_KUBECONFIG")
    if external:
        yield Cluster(kubeconfig=Path(external), cluster_dir=None)
        return
    cluster_dir = Path(os.environ.get("KUBEGANG_CLUSTER_DIR") or REPO / ".cluster")
    running = subprocess.run([str(HACK / "cluster"), "status"], capture_output=True, text=True,
                             env={**os.environ, "KUBEGANG_CLUSTER_DIR": str(cluster_dir)}).returncode == 0
    if not running:
        _hack("up", cluster_dir=cluster_dir)
    c = Cluster(kubeconfig=cluster_dir / "kubeconfig", cluster_dir=cluster_dir)
    try:
        yield c
    finally:
        if not running:
            _hack("down", cluster_dir=cluster_dir)


@pytest.fixture
def namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (without waiting)."""
    # A DNS label: the test's name made safe and cut short, plus a digest of the full node id so
    # that parametrised cases of one test never share a namespace.
    safe = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    digest = hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:8]
    name = f"t-{safe}-{digest}"
    cluster.kubectl("create", "namespace", name)
    cluster.wait_for("default service account", lambda: cluster.kubectl(
        "get", "serviceaccount", "default", "-n", name, check=False).returncode == 0)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@dataclass
class Kubegang:
    """kubegang's processes running on the e2e cluster (``hack/cluster kubegang up``)."""

    cluster: Cluster
    state: dict[str, Any]

    @property
    def ports(self) -> dict[str, Any]:
        return dict(self.state["ports"])

    @property
    def tls_dir(self) -> Path:
        return Path(self.state["tls_dir"])

    def pid(self, component: str) -> int | None:
        assert self.cluster.cluster_dir is not None
        try:
            return int((self.cluster.cluster_dir / "pids" / f"{component}.pid").read_text())
        except (OSError, ValueError):
            return None

    @property
    def metrics(self) -> dict[str, Any]:
        """How the stack serves /metrics: ``auth``, ``scheme`` and, with auth on, ``ca`` and ``token_file``."""
        return dict(self.state.get("metrics") or {"auth": "off", "scheme": "http"})

    def restart(self, *options: str) -> None:
        """``hack/cluster kubegang up`` again, with ``options`` (e.g. ``--metrics-auth``, ``on``)."""
        assert self.cluster.cluster_dir is not None
        _hack("kubegang", "up", *options, cluster_dir=self.cluster.cluster_dir)
        self.state = json.loads((self.cluster.cluster_dir / "kubegang.json").read_text())


@pytest.fixture(scope="session")
def kubegang(cluster: Cluster) -> Iterator[Kubegang]:
    """CRDs, extender (with kube-scheduler's kubegang profile), replay agent and two operators.

    Started once per session on the cluster that hack/ runs; stopped at the end, which also puts
    kube-scheduler back to the default profile alone.
    """
    if cluster.cluster_dir is None:
        pytest.fail("the kubegang fixture runs the processes locally: it needs the cluster hack/cluster starts",
                    pytrace=False)
    _hack("kubegang", "up", cluster_dir=cluster.cluster_dir)
    try:
        yield Kubegang(cluster, json.loads((cluster.cluster_dir / "kubegang.json").read_text()))
    finally:
        _hack("kubegang", "down", cluster_dir=cluster.cluster_dir)


@pytest.fixture(scope="session")
def crds(cluster: Cluster) -> None:
    """kubegang's CRDs applied (and Established), for tests that do not start the kubegang stack."""
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    cluster.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")


def _addon(cluster: Cluster, name: str) -> Iterator[dict[str, Any]]:
    """``hack/cluster addon NAME up`` (which builds it first if the cache lacks it), its state, then
    ``down``. A failed build or start FAILS every test that uses it: a neighbour is never skipped."""
    if cluster.cluster_dir is None:
        pytest.fail(f"the {name} add-on runs as a local process: it needs the cluster hack/cluster starts",
                    pytrace=False)
    _hack("addon", name, "up", cluster_dir=cluster.cluster_dir)
    try:
        yield json.loads((cluster.cluster_dir / f"{name}.json").read_text())
    finally:
        _hack("addon", name, "down", cluster_dir=cluster.cluster_dir)


@pytest.fixture(scope="module")
def kueue(cluster: Cluster) -> Iterator[dict[str, Any]]:
    """Real Kueue (hack/addons.py) beside whatever else runs; its state: ports, pid, version.

    Per module, not per session: its informers watch every pod and Job, and the rest of the suite
    (benchmarks, chaos) should not pay for a neighbour it does not use."""
    yield from _addon(cluster, "kueue")


@pytest.fixture(scope="module")
def kuberay(cluster: Cluster) -> Iterator[dict[str, Any]]:
    """The real KubeRay operator (hack/addons.py), per module like ``kueue``; its state: ports, pid, version."""
    yield from _addon(cluster, "kuberay")

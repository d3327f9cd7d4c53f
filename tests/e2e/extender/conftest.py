"""Fixtures for the extender's end-to-end checks: a small GPU shape and a handle on the extender.

The extender is tested in isolation from the operator: tests reserve over gRPC themselves and
create the gang's pods with the pod contract (``kubegang.podcontract``), as the operator would.
Job UIDs are made up here, so the running operators never know these gangs.

Restarting one process (the extender, an operator): the handle reads the running process's
command line from /proc, SIGKILLs it and starts the same command again (detached, same log and pid
file), because ``hack/cluster`` has no subcommand that restarts a single kubegang process.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx
import pytest

from kubegang.extender import PlacementClient, ReserveOutcome
from kubegang.placement import GangRequest
from kubegang.podcontract import (
    GPU_RESOURCE,
    GPUS_ANNOTATION,
    JOB_UID_LABEL,
    NODE_ANNOTATION,
    POD_INDEX_LABEL,
)
from kubegang.shapes import load_shape
from kubegang.tls import client_ssl_context

from .. import processes

REPO = Path(__file__).resolve().parents[3]
SHAPE_FILE = Path(__file__).with_name("extender-small.yaml")
SHAPE = load_shape(SHAPE_FILE)
NODES = [name for name, _ in SHAPE.nodes()]
GPUS_PER_NODE = {name: group.gpus for name, group in SHAPE.nodes()}


class ClusterLike(Protocol):
    """What these tests use of the session ``cluster`` fixture (tests/e2e/conftest.py)."""

    kubeconfig: Path
    cluster_dir: Path | None
    shape: str | None

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 120) -> subprocess.CompletedProcess[str]: ...

    def get_json(self, *args: str) -> Any: ...

    def wait_for(self, what: str, predicate: Callable[[], bool], timeout: float = 60,
                 interval: float = 0.5) -> None: ...


class KubegangLike(Protocol):
    """What these tests use of the session ``kubegang`` fixture."""

    cluster: ClusterLike

    @property
    def ports(self) -> dict[str, Any]: ...

    @property
    def tls_dir(self) -> Path: ...

    def pid(self, component: str) -> int | None: ...


def _hack(cluster_dir: Path, *args: str) -> None:
    proc = subprocess.run([str(REPO / "hack" / "cluster"), *args], capture_output=True, text=True,
                          env={**os.environ, "KUBEGANG_CLUSTER_DIR": str(cluster_dir)}, timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"hack/cluster {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}",
                    pytrace=False)


@dataclass
class ExtenderHandle:
    """The running extender: its Placement service, its ledger dump, and kill/start."""

    kubegang: KubegangLike
    reserved: set[str] = field(default_factory=set)
    """Job UIDs reserved through this handle (released at teardown)."""

    @property
    def cluster(self) -> ClusterLike:
        return self.kubegang.cluster

    @property
    def cluster_dir(self) -> Path:
        assert self.cluster.cluster_dir is not None
        return self.cluster.cluster_dir

    def _tls(self, name: str) -> Path:
        return self.kubegang.tls_dir / name

    # ---- manifests and pods --------------------------------------------------------------------

    @staticmethod
    def new_job_uid() -> str:
        """A GPUJob-like UID that no operator knows."""
        return str(uuid.uuid4())


    @staticmethod
    def gpu_pod(name: str, namespace: str, gpus: int, *, scheduler: str = "kubegang",
                job_uid: str | None = None, index: int | None = None, node: str | None = None,
                gpu_indices: tuple[int, ...] = ()) -> dict[str, Any]:
        """A pod asking for ``gpus`` GPUs; with ``job_uid`` it carries the gang pod contract.

        No node affinity on purpose: only the extender's filter keeps a gang pod on its planned node.
        """
        labels: dict[str, str] = {"app": "extender-e2e"}
        annotations: dict[str, str] = {}
        if job_uid is not None:
            assert index is not None and node is not None
            labels |= {JOB_UID_LABEL: job_uid, POD_INDEX_LABEL: str(index)}
            annotations[NODE_ANNOTATION] = node
            if gpu_indices:
                annotations[GPUS_ANNOTATION] = ",".join(str(i) for i in gpu_indices)
        return {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations},
            "spec": {
                "schedulerName": scheduler,
                "terminationGracePeriodSeconds": 0,
                "containers": [{
                    "name": "main", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                                  "limits": {GPU_RESOURCE: str(gpus)}},
                }],
            },
        }

    def pods(self, namespace: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.cluster.get_json("pods", "-n", namespace)["items"]
        return items


    def create_all(self, manifests: list[dict[str, Any]]) -> None:
        """Create objects in one kubectl call (one API request each, in order)."""
        self.cluster.kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                               "items": manifests}))

    # ---- gRPC Placement ----------------------------------------------------------------------

    def _client(self) -> PlacementClient:
        return PlacementClient.from_files(
            f"127.0.0.1:{self.kubegang.ports['extender_grpc']}", self._tls("ca.crt"),
            self._tls("client.crt"), self._tls("client.key"), server_name="localhost", timeout=10.0)

    def reserve(self, gang: GangRequest, ttl_seconds: int = 600) -> ReserveOutcome:
        async def call() -> ReserveOutcome:
            async with self._client() as client:
                return await client.reserve(gang, ttl_seconds=ttl_seconds, namespace="e2e", name=gang.id)
        self.reserved.add(gang.id)
        return asyncio.run(call())

    def release(self, job_uid: str) -> int:
        async def call() -> int:
            async with self._client() as client:
                return await client.release(job_uid)
        return asyncio.run(call())

    # ---- HTTPS ---------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """``GET /debug/snapshot`` over mTLS."""
        ctx = client_ssl_context(self._tls("ca.crt"), self._tls("client.crt"), self._tls("client.key"))
        url = f"https://127.0.0.1:{self.kubegang.ports['extender_https']}/debug/snapshot"
        with httpx.Client(verify=ctx, timeout=10.0) as client:
            resp = client.get(url, extensions={"sni_hostname": "localhost"})
            resp.raise_for_status()
            data: dict[str, Any] = resp.json()
            return data

    def ready(self) -> bool:
        url = f"http://127.0.0.1:{self.kubegang.ports['extender_metrics']}/readyz"
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def free_gpus(self) -> dict[str, int]:
        """Whole free GPUs per node of the test shape, from the ledger."""
        nodes = self.snapshot()["nodes"]
        return {n: sum(1 for g in nodes[n]["gpus"] if g["freeMilli"] == 1000) if n in nodes else 0
                for n in NODES}

    def wait_all_free(self, timeout: float = 90) -> None:
        """Wait until every GPU of the shape is free (earlier tests' pods are gone)."""
        self.cluster.wait_for("every GPU of the test shape free in the ledger",
                              lambda: self.free_gpus() == GPUS_PER_NODE, timeout=timeout, interval=1)

    # ---- process control ---------------------------------------------------------------------

    def kill(self, component: str = "kubegang-extender") -> list[str]:
        """SIGKILL a kubegang process (the extender by default); returns its command line, for :meth:`start`."""
        return processes.kill(self.cluster_dir, component)

    def start(self, argv: list[str], timeout: float = 60, component: str = "kubegang-extender") -> None:
        """Start a process again with ``argv`` (detached, as hack/ starts it); the extender: until ready."""
        processes.start(self.cluster_dir, self.cluster.kubeconfig, component, argv)
        if component == "kubegang-extender":
            self.cluster.wait_for("restarted extender ready", self.ready, timeout=timeout, interval=0.2)


@pytest.fixture(scope="session")
def small_shape(cluster: ClusterLike, kubegang: KubegangLike) -> list[str]:
    """The fake nodes are exactly those of extender-small.yaml, with GPUNodes, in the ledger."""
    assert cluster.cluster_dir is not None, "these tests need the cluster that hack/cluster starts"
    if cluster.shape != SHAPE.name:
        _hack(cluster.cluster_dir, "delete-nodes")
        _hack(cluster.cluster_dir, "nodes", str(SHAPE_FILE))
        cluster.shape = SHAPE.name
    cluster.wait_for("GPUNodes of the test shape", lambda: set(NODES) <= {
        item["metadata"]["name"] for item in cluster.get_json("gpunodes")["items"]}, timeout=90, interval=1)
    handle = ExtenderHandle(kubegang)
    cluster.wait_for("test shape in the extender's ledger",
                     lambda: set(handle.snapshot()["nodes"]) == set(NODES), timeout=60, interval=0.5)
    return NODES


@pytest.fixture
def extender(kubegang: KubegangLike, small_shape: list[str]) -> Iterator[ExtenderHandle]:
    """The extender, with every GPU of the shape free; reservations made through it released after."""
    handle = ExtenderHandle(kubegang)
    handle.wait_all_free()
    yield handle
    if handle.ready():
        for job in handle.reserved:
            handle.release(job)

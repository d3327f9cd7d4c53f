"""Helpers for the operator's end-to-end scenarios (issue 6): queues, GPUJobs and what to wait for.

GPUQueues are cluster-scoped and the cluster is shared by the whole session, so every queue gets the
test's namespace as a prefix and is deleted at the end; jobs live in the test's namespace, and the
namespace's gangs are deleted and waited for at the end so the next test starts with free GPUs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

H100 = "NVIDIA-H100-80GB-HBM3"
GB200 = "NVIDIA-GB200"


@dataclass
class Ops:
    """The operator driven as a user drives it: kubectl apply, get, delete."""

    cluster: Any
    kubegang: Any
    namespace: str
    queues: list[str] = field(default_factory=list)

    # -- objects -------------------------------------------------------------------------------
    def queue(
        self,
        suffix: str,
        resources: list[tuple[str, int]] | list[dict[str, Any]],
        parent: str | None = None,
        **spec: Any,
    ) -> str:
        """Create GPUQueue ``<namespace>-<suffix>``; returns its name (deleted at the end)."""
        name = f"{self.namespace}-{suffix}"[:253]
        rows = [r if isinstance(r, dict) else {"flavor": r[0], "nominal": r[1]} for r in resources]
        body: dict[str, Any] = {"resources": rows, **spec}
        if parent:
            body["parent"] = parent
        self.cluster.apply({"apiVersion": "kubegang.io/v1alpha1", "kind": "GPUQueue",
                            "metadata": {"name": name}, "spec": body})
        self.queues.append(name)
        return name

    def job_manifest(self, name: str, queue: str, replicas: int, gpus: int, *,
                     annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
        return {
            "apiVersion": "kubegang.io/v1alpha1",
            "kind": "GPUJob",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {
                "replicas": replicas,
                "queue": queue,
                "template": {
                    "metadata": {"annotations": annotations or {}},
                    "spec": {"containers": [{"name": "main", "image": "trainer:1",
                                             "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
                },
                **spec,
            },
        }

    def job(self, name: str, queue: str, replicas: int, gpus: int, *,
            annotations: dict[str, str] | None = None, **spec: Any) -> None:
        self.cluster.apply(self.job_manifest(name, queue, replicas, gpus, annotations=annotations, **spec))

    # -- reads ---------------------------------------------------------------------------------
    def get(self, name: str) -> dict[str, Any]:
        return dict(self.cluster.get_json("gpujob", name, "-n", self.namespace))

    def status(self, name: str) -> dict[str, Any]:
        return dict(self.get(name).get("status") or {})

    def phase(self, name: str) -> str | None:
        return self.status(name).get("phase")

    def jobs(self) -> list[dict[str, Any]]:
        return list(self.cluster.get_json("gpujobs", "-n", self.namespace)["items"])

    def pods(self, job: str | None = None) -> list[dict[str, Any]]:
        args = ["pods", "-n", self.namespace]
        if job:
            args += ["-l", f"kubegang.io/job-name={job}"]
        return [p for p in self.cluster.get_json(*args)["items"] if not p["metadata"].get("deletionTimestamp")]

    def leader(self) -> str | None:
        """The Lease holder's identity; None while it cannot be read (an API server restarting)."""
        out = self.cluster.kubectl("get", "lease", "kubegang-operator", "-n", self.kubegang.state["namespace"],
                                   "-o", "json", check=False)
        if out.returncode != 0:
            return None
        holder = (json.loads(out.stdout).get("spec") or {}).get("holderIdentity")
        return str(holder) if holder else None

    def condition(self, name: str, ctype: str) -> dict[str, Any] | None:
        return next((c for c in self.status(name).get("conditions") or [] if c["type"] == ctype), None)

    def events(self, name: str) -> list[dict[str, Any]]:
        items = self.cluster.get_json("events", "-n", self.namespace,
                                      "--field-selector", f"involvedObject.name={name}")["items"]
        return list(items)

    def node_labels(self) -> dict[str, dict[str, str]]:
        return {n["metadata"]["name"]: n["metadata"].get("labels", {})
                for n in self.cluster.get_json("nodes")["items"]}

    # -- waits ---------------------------------------------------------------------------------
    def wait_phase(self, name: str, *phases: str, timeout: float = 90) -> dict[str, Any]:
        seen: dict[str, Any] = {}

        def reached() -> bool:
            nonlocal seen
            seen = self.status(name)
            return seen.get("phase") in phases

        try:
            self.cluster.wait_for(f"GPUJob {name} to be {' or '.join(phases)}", reached, timeout=timeout, interval=1)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last status: {json.dumps(seen)[:1500]}") from None
        return seen

    def running_pods(self, job: str) -> list[dict[str, Any]]:
        return [p for p in self.pods(job) if p.get("status", {}).get("phase") == "Running"]

    def wait_no_pods(self, job: str | None = None, timeout: float = 90) -> None:
        self.cluster.wait_for(f"pods of {job or self.namespace} to be gone",
                              lambda: not self.cluster.get_json(*(["pods", "-n", self.namespace] + (
                                  ["-l", f"kubegang.io/job-name={job}"] if job else [])))["items"],
                              timeout=timeout, interval=1)

    # -- teardown ------------------------------------------------------------------------------
    def cleanup(self) -> None:
        self.cluster.kubectl("delete", "gpujobs", "--all", "-n", self.namespace, "--wait=false", check=False)
        self.cluster.kubectl("delete", "pods", "--all", "-n", self.namespace, "--wait=false", check=False)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if not self.cluster.get_json("pods", "-n", self.namespace)["items"]:
                break
            time.sleep(1)
        for name in reversed(self.queues):
            self.cluster.kubectl("delete", "gpuqueue", name, "--wait=false", check=False)


@pytest.fixture
def ops(cluster: Any, kubegang: Any, namespace: str) -> Iterator[Ops]:
    o = Ops(cluster, kubegang, namespace)
    try:
        yield o
    finally:
        o.cleanup()

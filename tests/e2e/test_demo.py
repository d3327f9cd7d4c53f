"""README's first command, `make demo`, as a user runs it: on a cluster of its own, every GPUJob placed.

The demo gets its own cluster directory (``KUBEGANG_CLUSTER_DIR``), so it starts a second local
control plane beside the suite's, on loopback and free ports, and stops it at the end; the suite's
cluster and its state are not touched. `hack/demo.sh` itself waits until every GPUJob is Running and
fails otherwise; the test checks that from outside as well.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from .conftest import REPO, tool


def test_make_demo_places_every_example_on_a_cluster_of_its_own(tmp_path: Path) -> None:
    cluster_dir = tmp_path / "demo-cluster"
    env = {**os.environ, "KUBEGANG_CLUSTER_DIR": str(cluster_dir)}
    try:
        proc = subprocess.run(["make", "demo"], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, (f"make demo failed ({proc.returncode}):\n"
                                      f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
        assert "demo ready in" in proc.stdout

        kubectl = [tool("kubectl"), "--kubeconfig", str(cluster_dir / "kubeconfig")]
        jobs = json.loads(subprocess.run([*kubectl, "get", "gpujobs", "-A", "-o", "json"], capture_output=True,
                                         text=True, check=True, timeout=60).stdout)["items"]
        examples = sorted(p.name for p in (REPO / "examples").glob("*.yaml"))
        assert len(jobs) >= len(examples), f"{len(jobs)} GPUJobs for {len(examples)} example files"
        phases = {f"{j['metadata']['namespace']}/{j['metadata']['name']}": (j.get("status") or {}).get("phase")
                  for j in jobs}
        assert set(phases.values()) == {"Running"}, phases
        placed = [j for j in jobs if ((j.get("status") or {}).get("placement") or {}).get("pods")]
        assert len(placed) == len(jobs), "every Running GPUJob names where its pods are"
    finally:
        subprocess.run([str(REPO / "hack" / "cluster"), "down"], env=env, capture_output=True, text=True, timeout=300)

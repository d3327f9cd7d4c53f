"""Fenced leadership (issue 16): a leader paused past its lease wakes up fenced, and nothing is admitted twice.

The leader is SIGSTOPped in the middle of a burst that asks for three times the queue's quota, kept
stopped well past the lease, and continued once the standby has taken over and filled the quota.
A paused process cannot tell that time passed, so everything it had under way (admissions being
recorded, pods being created, reports) resumes at once: the fence (its renew deadline, by a
monotonic clock) must stop every write, and the resourceVersion precondition must refuse any that
was already on the wire, and the woken replica exits (as client-go's leaders do) to come back as a
fresh standby. Audited from plain API objects: admissions equal the quota, one pod per replica of
one attempt, no node over-committed, the queue's usage the sum of admitted jobs, and the other
replica leads.
"""

from __future__ import annotations

import os
import re
import signal
import time
import urllib.request
from collections import Counter
from typing import Any

import pytest
import yaml

from .. import processes

H100 = "NVIDIA-H100-80GB-HBM3"
QUOTA_GPUS = 64
JOBS = 24
PAUSE_S = 25  # the lease is 15 s: the standby takes over while this replica is stopped


def _metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    match = re.search(rf"^{name} ([0-9.e+]+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def test_a_leader_paused_past_its_lease_writes_nothing_when_it_wakes(ops: Any, request: pytest.FixtureRequest) -> None:
    ops.cluster.use_shape("superpod-h100")
    request.addfinalizer(ops.kubegang.restart)  # the woken replica exits: later tests get two again
    queue = ops.queue("pause", [(H100, QUOTA_GPUS)])
    leader = ops.leader()
    assert leader is not None
    index = int(leader.rsplit("-", 1)[-1])
    pid = ops.kubegang.pid(f"kubegang-operator-{index}")
    assert pid is not None, f"no pid file for leader {leader}"
    other_port = ops.kubegang.ports["operator_metrics"][1 - index]
    log = ops.cluster.cluster_dir / "logs" / f"kubegang-operator-{index}.log"
    log_start = log.stat().st_size

    manifests = [ops.job_manifest(f"p{i:02d}", queue, 1, 8) for i in range(JOBS)]
    ops.cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(manifests), timeout=120)
    os.kill(pid, signal.SIGSTOP)  # mid-burst: it has admissions and reports under way
    stopped = time.monotonic()
    try:
        ops.cluster.wait_for("the standby to lead", lambda: ops.leader() not in (None, leader),
                             timeout=60, interval=0.5)
        took_over = time.monotonic() - stopped
        ops.cluster.wait_for("the quota filled by the new leader", lambda: sum(
            1 for j in ops.jobs() if (j.get("status") or {}).get("admittedAt")) == QUOTA_GPUS // 8,
            timeout=90, interval=1)
        time.sleep(max(0.0, PAUSE_S - (time.monotonic() - stopped)))
    finally:
        os.kill(pid, signal.SIGCONT)
    print(f"\nFIGURE leader {leader} stopped {time.monotonic() - stopped:.1f}s; "
          f"{ops.leader()} took over after {took_over:.1f}s")

    # The woken replica stops its watches and exits; the other one goes on leading.
    ops.cluster.wait_for("the woken replica to exit", lambda: not processes.alive(pid), timeout=20, interval=0.5)
    woke = log.read_text(errors="replace")[log_start:]
    assert "lost the Lease" in woke, woke[-2000:]
    # Past 5 s of stopping, it is made to exit and writes its stacks: say so, to find what held it.
    print(f"FIGURE woken replica's exit forced by the grace bound: {'still stopping after' in woke}")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # ten seconds of audit after the wake-up
        assert _metric(other_port, "kubegang_operator_is_leader") == 1, "the other replica must lead"
        jobs = ops.jobs()
        admitted = [j for j in jobs if (j.get("status") or {}).get("admittedAt")]
        assert len(admitted) == QUOTA_GPUS // 8, [j["metadata"]["name"] for j in admitted]
        pods = ops.pods()
        per_replica = Counter((p["metadata"]["labels"]["kubegang.io/job-name"],
                               p["metadata"]["labels"]["kubegang.io/replica-index"]) for p in pods)
        assert not per_replica or max(per_replica.values()) == 1, per_replica.most_common(3)
        attempt = {j["metadata"]["name"]: "".join(ch for ch in j["status"]["admittedAt"] if ch.isalnum())
                   for j in admitted}
        for p in pods:
            labels = p["metadata"]["labels"]
            assert labels["kubegang.io/job-name"] in attempt, f"pod {p['metadata']['name']} of a job not admitted"
            assert labels["kubegang.io/attempt"] == attempt[labels["kubegang.io/job-name"]], p["metadata"]["name"]
        held: Counter[str] = Counter(p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName"))
        assert not held or max(held.values()) <= 1, held.most_common(3)  # 8-GPU pods: one per node
        time.sleep(1)
    ops.cluster.wait_for("queue usage = the admitted jobs' GPUs", lambda: (ops.cluster.get_json(
        "gpuqueue", queue).get("status") or {}).get("usedGPUs") == QUOTA_GPUS, timeout=30, interval=1)
    fenced = woke.count("not leading any more")
    print(f"FIGURE writes refused by the woken replica's fence (log lines): {fenced}")

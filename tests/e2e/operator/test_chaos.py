"""Chaos (issue 16): a burst of GPUJobs while every process of the stack is killed, and the leader paused.

300 GPUJobs in a three-level GPUQueue tree (root -> two orgs -> three leaves), with two priority
classes, preemption within a leaf, jobs that fail and are restarted, and jobs that require one leaf
switch. While they run, each of the extender, the operator leader, kube-scheduler, kube-apiserver,
etcd and the agent is SIGKILLed and comes back (control-plane processes by ``hack/supervise.py``,
as the kubelet would restart them; kubegang's by the test, as a Deployment or DaemonSet would), and
the leader is SIGSTOPped for longer than its lease and then continued (it exits on waking, as
client-go's leaders do; the stack is whole again after the test). kwok, the fake kubelet, is killed
too, after etcd: it does not retry a pod status patch the API refused while etcd was down.

An auditor samples plain Kubernetes objects (never kubegang's own state) every two seconds: no node
holds more GPUs than it has, no (job, replica) has two live pods, no gang stays partly bound past
its timeout. At the end every job is Succeeded, or Failed with a reason; none is lost; every
GPUQueue's usage is back to zero. The test is bounded: each wait has a deadline, and the whole
scenario stops by itself in a few minutes. Figures (kills, time to recover per component, the
burst's length) are printed, never asserted: run with ``-s``.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from .. import processes
from .conftest import H100

JOBS = 300
GANG_TIMEOUT_S = 60
SAMPLE_S = 2.0
NODES, GPUS_PER_NODE = 128, 8
HIGH, LOW = "chaos-high", "chaos-low"


class Auditor(threading.Thread):
    """Samples pods and nodes from the API; records every violation it sees (asserted at the end)."""

    def __init__(self, ops: Any) -> None:
        super().__init__(name="chaos-auditor", daemon=True)
        self.ops = ops
        self.stop = threading.Event()
        self.samples = 0
        self.violations: list[str] = []
        self._partial_since: dict[tuple[str, str], float] = {}

    def run(self) -> None:
        while not self.stop.wait(SAMPLE_S):
            try:
                pods = self.ops.cluster.get_json("pods", "-A")["items"]
            except Exception:
                continue  # the API server is down for a moment: that sample is skipped
            self.samples += 1
            self._check(pods, time.monotonic())

    def _check(self, pods: list[dict[str, Any]], now: float) -> None:
        held: Counter[str] = Counter()
        replicas: Counter[tuple[str, str, str]] = Counter()
        bound: dict[tuple[str, str], list[bool]] = defaultdict(list)
        for p in pods:
            if p["status"].get("phase") in ("Succeeded", "Failed") or p["metadata"].get("deletionTimestamp"):
                continue
            gpus = sum(int((c.get("resources") or {}).get("limits", {}).get("nvidia.com/gpu", 0))
                       for c in p["spec"]["containers"])
            node = p["spec"].get("nodeName")
            if node:
                held[node] += gpus
            labels = p["metadata"].get("labels") or {}
            if p["metadata"]["namespace"] == self.ops.namespace and "kubegang.io/job-name" in labels:
                job = labels["kubegang.io/job-name"]
                replicas[(job, labels.get("kubegang.io/attempt", ""), labels["kubegang.io/replica-index"])] += 1
                bound[(job, labels.get("kubegang.io/attempt", ""))].append(bool(node))
        for node, gpus in held.items():
            if gpus > GPUS_PER_NODE:
                self.violations.append(f"node {node} over-committed: {gpus} GPUs")
        self.violations += [f"two live pods for {key}" for key, n in replicas.items() if n > 1]
        partial = {key for key, flags in bound.items() if any(flags) and not all(flags)}
        for key in partial:
            since = self._partial_since.setdefault(key, now)
            if now - since > GANG_TIMEOUT_S + 30:
                self.violations.append(f"gang {key} partly bound for {now - since:.0f}s")
        for key in set(self._partial_since) - partial:
            del self._partial_since[key]


class Chaos:
    """Kills (and brings back) one process at a time; records how long each took to recover."""

    def __init__(self, ops: Any) -> None:
        self.ops = ops
        assert ops.cluster.cluster_dir is not None, "the chaos test needs the cluster hack/cluster starts"
        self.dir = ops.cluster.cluster_dir
        self.recovered: dict[str, float] = {}

    def _recover(self, what: str, check: Callable[[], bool], timeout: float = 120) -> None:
        start = time.monotonic()
        self.ops.cluster.wait_for(f"{what} to recover", check, timeout=timeout, interval=0.5)
        self.recovered[what] = time.monotonic() - start

    def control_plane(self, component: str, ready: Callable[[], bool]) -> None:
        old = processes.pid_of(self.dir, component)
        assert old is not None, f"no pid for {component}"
        processes.kill(self.dir, component)
        start = time.monotonic()
        processes.wait_restarted(self.dir, component, old, timeout=60)
        self.ops.cluster.wait_for(f"{component} ready again", ready, timeout=120, interval=0.5)
        self.recovered[component] = time.monotonic() - start

    def kubegang_process(self, component: str, ready: Callable[[], bool], down_for: float = 1.0) -> None:
        argv = processes.kill(self.dir, component)
        time.sleep(down_for)
        start = time.monotonic()
        processes.start(self.dir, self.ops.cluster.kubeconfig, component, argv)
        self.ops.cluster.wait_for(f"{component} ready again", ready, timeout=120, interval=0.5)
        self.recovered[component] = time.monotonic() - start


def _queues(ops: Any) -> list[str]:
    root = ops.queue("chaos", [(H100, 0)])
    org_a = ops.queue("chaos-a", [(H100, 0)], parent=root)
    org_b = ops.queue("chaos-b", [(H100, 0)], parent=root)
    a1 = ops.queue("chaos-a1", [(H100, 384)], parent=org_a, preemption={"withinQueue": "LowerPriority"})
    a2 = ops.queue("chaos-a2", [(H100, 384)], parent=org_a)
    b1 = ops.queue("chaos-b1", [(H100, 256)], parent=org_b)
    return [a1, a2, b1]


def _unsettled(ops: Any, show: int = 8) -> str:
    """What a timed-out wait leaves to read: the jobs not yet finished, their phase, reason and pods."""
    jobs = ops.jobs()
    open_jobs = [j for j in jobs if (j.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    pods: dict[str, list[str]] = defaultdict(list)
    for p in ops.cluster.get_json("pods", "-n", ops.namespace)["items"]:
        labels = p["metadata"].get("labels") or {}
        pods[labels.get("kubegang.io/job-name", "")].append(
            f"{p['metadata']['name']}@{labels.get('kubegang.io/attempt', '')}:{p['status'].get('phase')}"
            f"{' deleting' if p['metadata'].get('deletionTimestamp') else ''} on {p['spec'].get('nodeName')}")
    lines = []
    for job in open_jobs[:show]:
        status = job.get("status") or {}
        name = job["metadata"]["name"]
        lines.append(f"{name}: {status.get('phase')} {status.get('reason')} ready {status.get('readyReplicas')} "
                     f"admitted {status.get('admittedAt')}; pods {pods.get(name, [])}")
    phases = Counter((j.get("status") or {}).get("phase") for j in jobs)
    return f"{len(jobs)} jobs by phase {dict(phases)}; not finished: " + " | ".join(lines)


def _manifests(ops: Any, leaves: list[str]) -> list[dict[str, Any]]:
    out = []
    for i in range(JOBS):
        annotations = {"kubegang.io/fake-runtime": f"{4 + i % 9}s"}
        spec: dict[str, Any] = {"gangTimeoutSeconds": GANG_TIMEOUT_S, "priorityClassName": HIGH if i % 4 == 0 else LOW}
        if i % 10 == 3:  # fails on every attempt: restarted whole, then Failed with a reason
            annotations = {"kubegang.io/fake-exit-code": "1", "kubegang.io/fake-fail-after": "2s"}
            spec["restartLimit"] = 1
        if i % 7 == 0:
            spec["topology"] = {"required": "leaf"}
        out.append(ops.job_manifest(f"c{i:03d}", leaves[i % len(leaves)], 1 + i % 4, 8,
                                    annotations=annotations, **spec))
    return out


def test_a_burst_survives_every_process_killed_and_the_leader_paused(ops: Any, request: pytest.FixtureRequest) -> None:
    ops.cluster.use_shape("superpod-h100")
    for name, value in ((HIGH, 1000), (LOW, 10)):
        ops.cluster.apply({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                           "metadata": {"name": name}, "value": value})
        request.addfinalizer(lambda name=name: ops.cluster.kubectl("delete", "priorityclass", name, check=False))
    # Whatever happens, later tests get the whole stack back.
    request.addfinalizer(ops.kubegang.restart)
    leaves = _queues(ops)
    chaos = Chaos(ops)
    ports = ops.kubegang.ports
    scheduler_port = json.loads((chaos.dir / "state.json").read_text())["ports"]["scheduler"]
    apiserver_ready = lambda: ops.cluster.kubectl("get", "--raw", "/readyz", check=False).returncode == 0  # noqa: E731
    extender_ready = lambda: processes.http_ok(f"http://127.0.0.1:{ports['extender_metrics']}/readyz")  # noqa: E731
    agent_ready = lambda: processes.http_ok(f"http://127.0.0.1:{ports['agent_metrics']}/healthz")  # noqa: E731

    auditor = Auditor(ops)
    auditor.start()
    start = time.monotonic()
    ops.cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(_manifests(ops, leaves)), timeout=300)
    applied = time.monotonic() - start
    kills: list[str] = []
    try:
        chaos.kubegang_process("kubegang-extender", extender_ready)
        kills.append("extender")
        leader = ops.leader()
        assert leader is not None
        index = int(leader.rsplit("-", 1)[-1])
        operator_port = ports["operator_metrics"][index]
        chaos.kubegang_process(f"kubegang-operator-{index}",
                               lambda: processes.http_ok(f"http://127.0.0.1:{operator_port}/metrics"), down_for=2.0)
        kills.append("operator leader")
        chaos.ops.cluster.wait_for("a leader", lambda: ops.leader() is not None, timeout=60)
        chaos.control_plane("kube-scheduler", lambda: processes.http_ok(f"https://127.0.0.1:{scheduler_port}/healthz"))
        kills.append("kube-scheduler")
        chaos.control_plane("kube-apiserver", apiserver_ready)
        kills.append("kube-apiserver")
        chaos.control_plane("etcd", apiserver_ready)
        kills.append("etcd")
        # kwok is the fake kubelet. A kubelet retries a status update the API refused; kwok gives a
        # stage up when its patch fails (as they did while etcd was down), leaving that pod Running
        # forever. Restarting it, as a kubelet restart would, replays the stages of every pod.
        chaos.control_plane("kwok", apiserver_ready)
        kills.append("kwok")
        chaos.kubegang_process("kubegang-agent", agent_ready)
        kills.append("agent")
        # Pause the leader past its lease, then let it run on: it must wake up fenced.
        leader = ops.leader()
        assert leader is not None
        paused = f"kubegang-operator-{int(leader.rsplit('-', 1)[-1])}"
        processes.kill(chaos.dir, paused, signal.SIGSTOP)
        t_stop = time.monotonic()
        try:
            ops.cluster.wait_for("the standby to lead", lambda: ops.leader() not in (None, leader), timeout=60)
            chaos.recovered["leader paused: standby leads"] = time.monotonic() - t_stop
            time.sleep(max(0.0, 20 - (time.monotonic() - t_stop)))
        finally:
            processes.kill(chaos.dir, paused, signal.SIGCONT)
        kills.append("leader SIGSTOP 20 s")
        chaos_done = time.monotonic() - start

        def settled() -> bool:
            jobs = ops.jobs()
            return len(jobs) == JOBS and all((j.get("status") or {}).get("phase") in ("Succeeded", "Failed")
                                             for j in jobs)

        try:
            ops.cluster.wait_for("every job Succeeded or Failed", settled, timeout=300, interval=3)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; {_unsettled(ops)}") from None
    finally:
        auditor.stop.set()
        auditor.join(timeout=30)
    finished = time.monotonic() - start

    jobs = ops.jobs()
    phases = Counter(j["status"]["phase"] for j in jobs)
    print(f"\nFIGURE chaos: {JOBS} GPUJobs applied in {applied:.1f}s; kills: {', '.join(kills)} "
          f"(done {chaos_done:.0f}s after the apply began); all finished after {finished:.0f}s: {dict(phases)}; "
          f"{auditor.samples} audit samples")
    print("FIGURE recovery (s): " + ", ".join(f"{k} {v:.1f}" for k, v in chaos.recovered.items()))
    assert not auditor.violations, auditor.violations[:10]
    assert auditor.samples > 20, "the auditor must have watched the burst"
    assert len(jobs) == JOBS
    failing = {f"c{i:03d}" for i in range(JOBS) if i % 10 == 3}
    for job in jobs:
        name, status = job["metadata"]["name"], job["status"]
        if name in failing:
            assert status["phase"] == "Failed", (name, status["phase"])
        reason = next((c.get("reason") for c in status.get("conditions") or []
                       if c["type"] == status["phase"] and c["status"] == "True"), None)
        assert reason, f"{name} is {status['phase']} without a reason"
    assert phases["Succeeded"] == JOBS - len(failing), phases
    for queue in ("chaos", "chaos-a", "chaos-b", "chaos-a1", "chaos-a2", "chaos-b1"):
        name = f"{ops.namespace}-{queue}"
        ops.cluster.wait_for(f"GPUQueue {name} usage back to 0", lambda name=name: (ops.cluster.get_json(
            "gpuqueue", name).get("status") or {}).get("usedGPUs") == 0, timeout=30, interval=1)

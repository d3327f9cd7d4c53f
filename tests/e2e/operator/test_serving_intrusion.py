"""Issue 18: serving pods next to training gangs never leave a gang partly bound holding GPUs.

The reproduction: six 16 x 8-GPU GPUJobs applied interleaved with 40 ordinary 8-GPU pods in another
namespace (a serving workload: ``schedulerName`` left at the default, as every Deployment has it), on
the 128-node superpod shape. Before, the default scheduler put a serving pod on a node reserved for a
gang, and 15 of its 16 pods held 120 GPUs for the whole gang timeout (300 s).

- Routing on (the chart's default): the serving pods are sent to kubegang, placed around the
  reservations, and no gang is ever partly bound for more than a moment.
- The serving namespace opted out (label ``kubegang.io/routing: disabled``): the default scheduler
  still intrudes, and the gang is re-placed within seconds (``Repair``) instead of after its timeout.

An auditor samples the plain Kubernetes objects twice a second: GPUs per node (never over-committed)
and, per gang, how long and with how many GPUs it was partly bound; the GPU-seconds held by partial
gangs are printed for the closing note and bounded by the assertions.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from .conftest import H100

GANGS, REPLICAS, GPUS = 6, 16, 8
SERVING_PODS = 40
SERVING_RUNTIME = "45s"
"""Serving pods end after this (kwok), so the gangs that do not fit beside them start afterwards."""


@dataclass
class Audit:
    partial_gpu_seconds: float = 0.0
    longest_partial: dict[str, float] = field(default_factory=dict)
    overcommitted: list[str] = field(default_factory=list)
    samples: int = 0


def _gpus(pod: dict[str, Any]) -> int:
    limits = (pod["spec"]["containers"][0].get("resources") or {}).get("limits") or {}
    return int(limits.get("nvidia.com/gpu", 0))


def _who(pod: dict[str, Any]) -> str:
    """Names a pod on an over-committed node with what tells a real double booking from a passing one."""
    meta = pod["metadata"]
    deleting = " deleting" if meta.get("deletionTimestamp") else ""
    return f"{meta['namespace']}/{meta['name']} {pod['status'].get('phase')}{deleting}"


@contextmanager
def _audit(ops: Any, serving_ns: str) -> Iterator[Audit]:
    audit = Audit()
    stop = threading.Event()
    since: dict[str, float] = {}

    def sample() -> None:
        last = time.monotonic()
        while not stop.is_set():
            # One list of every namespace is one consistent read (a single resourceVersion); a list per
            # namespace would pair a gang pod deleted in between with the serving pod that took its node.
            pods = [p for p in ops.cluster.get_json("pods", "-A")["items"]
                    if p["metadata"]["namespace"] in (ops.namespace, serving_ns)
                    and p["spec"].get("nodeName") and p.get("status", {}).get("phase") in ("Pending", "Running")]
            now = time.monotonic()
            per_node: dict[str, list[dict[str, Any]]] = {}
            bound: dict[str, int] = {}
            for pod in pods:
                per_node.setdefault(pod["spec"]["nodeName"], []).append(pod)
                job = pod["metadata"].get("labels", {}).get("kubegang.io/job-name")
                if job:
                    bound[job] = bound.get(job, 0) + 1
            audit.overcommitted += [
                f"{node}: {sum(map(_gpus, on))} ({', '.join(_who(p) for p in on)})"
                for node, on in per_node.items() if sum(map(_gpus, on)) > GPUS]
            for job, count in bound.items():
                if count < REPLICAS:
                    audit.partial_gpu_seconds += count * GPUS * (now - last)
                    since.setdefault(job, now)
                    audit.longest_partial[job] = max(audit.longest_partial.get(job, 0.0), now - since[job])
                else:
                    since.pop(job, None)
            for job in [j for j in since if j not in bound]:
                since.pop(job)
            audit.samples += 1
            last = now
            stop.wait(0.5)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield audit
    finally:
        stop.set()
        thread.join(timeout=30)


def _serving_pod(namespace: str, index: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"web-{index}", "namespace": namespace, "labels": {"app": "web"},
                     "annotations": {"kubegang.io/fake-runtime": SERVING_RUNTIME}},
        "spec": {"restartPolicy": "Never",
                 "containers": [{"name": "server", "image": "server:1",
                                 "resources": {"limits": {"nvidia.com/gpu": GPUS}}}]},
    }


def _run(ops: Any, *, opted_out: bool) -> tuple[Audit, str]:
    ops.cluster.use_shape("superpod-h100")
    serving_ns = f"{ops.namespace}-serving"
    labels = {"kubegang.io/routing": "disabled"} if opted_out else {}
    ops.cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": serving_ns, "labels": labels}})
    q = ops.queue("train", [(H100, GANGS * REPLICAS * GPUS)])
    try:
        # One apply, interleaved as a busy cluster sees them: each gang's reservation races the serving
        # pods the default scheduler binds meanwhile.
        per_gang = -(-SERVING_PODS // GANGS)
        serving = iter(range(SERVING_PODS))
        items: list[dict[str, Any]] = []
        for g in range(GANGS):
            items.append(ops.job_manifest(f"big-{g}", q, REPLICAS, GPUS))
            items += [_serving_pod(serving_ns, i) for _, i in zip(range(per_gang), serving, strict=False)]
        with _audit(ops, serving_ns) as audit:
            ops.cluster.apply({"apiVersion": "v1", "kind": "List", "items": items})
            for g in range(GANGS):
                ops.wait_phase(f"big-{g}", "Running", timeout=240)
        pods = ops.cluster.get_json("pods", "-n", serving_ns)["items"]
        return audit, str(sorted({p["spec"].get("schedulerName") for p in pods}))
    finally:
        ops.cluster.kubectl("delete", "namespace", serving_ns, "--wait=false", check=False)


def test_with_routing_serving_pods_go_around_reservations_and_no_gang_is_ever_partial(ops: Any) -> None:
    audit, schedulers = _run(ops, opted_out=False)
    print(f"\nrouting on: partial-gang GPU-seconds {audit.partial_gpu_seconds:.0f}, longest partial "
          f"{max(audit.longest_partial.values(), default=0):.1f}s over {audit.samples} samples")
    assert schedulers == "['kubegang']"  # the policy routed every serving pod to kubegang
    assert audit.overcommitted == []
    # Pods of a gang bind within a moment of each other; nothing sits partial waiting for GPUs.
    assert max(audit.longest_partial.values(), default=0) < 10, audit.longest_partial


def test_opted_out_serving_pods_intrude_and_the_gang_heals_within_seconds(ops: Any) -> None:
    audit, schedulers = _run(ops, opted_out=True)
    print(f"\nopted out: partial-gang GPU-seconds {audit.partial_gpu_seconds:.0f}, longest partial "
          f"{max(audit.longest_partial.values(), default=0):.1f}s over {audit.samples} samples")
    assert schedulers == "['default-scheduler']"
    assert audit.overcommitted == []
    # Healed in seconds, not the 300 s gang timeout (before: 120 GPUs held for about 300 s).
    assert max(audit.longest_partial.values(), default=0) < 30, audit.longest_partial
    repaired = [e for g in range(GANGS) for e in ops.events(f"big-{g}") if e["reason"] in ("Repaired", "GangDisplaced")]
    # Whether the default scheduler beats a reservation here is a race (the deterministic case is the
    # next test); when it does, the repair names the serving pod.
    print(f"repairs: {[(e['involvedObject']['name'], e['reason'], e['message']) for e in repaired]}")
    for event in repaired:
        assert "web-" in event["message"]


def test_a_pod_bound_by_hand_onto_a_planned_node_is_healed_around(ops: Any) -> None:
    """Deterministic intrusion: the gang's pods are held unbound by a scheduling gate, a pod with a
    manual ``nodeName`` takes one planned node's GPUs, and the gang's slot is re-placed at once."""
    ops.cluster.use_shape("superpod-h100")
    q = ops.queue("heal", [(H100, REPLICAS * GPUS)])
    job = ops.job_manifest("big", q, REPLICAS, GPUS)
    job["spec"]["template"]["spec"]["schedulingGates"] = [{"name": "kubegang-test/hold"}]
    ops.cluster.apply(job)
    ops.cluster.wait_for("the gang's pods to exist", lambda: len(ops.pods("big")) == REPLICAS, timeout=60)
    planned = {p["metadata"]["name"]: p["metadata"]["annotations"]["kubegang.io/node"] for p in ops.pods("big")}
    taken = planned["big-3"]
    ops.cluster.apply({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "by-hand", "namespace": ops.namespace, "labels": {"kubegang.io/routing": "disabled"}},
        "spec": {"nodeName": taken, "restartPolicy": "Never",
                 "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": GPUS}}}]},
    })

    def moved() -> bool:
        pods = {p["metadata"]["name"]: p for p in ops.pods("big")}
        pod = pods.get("big-3")
        return pod is not None and pod["metadata"]["annotations"]["kubegang.io/node"] != taken
    ops.cluster.wait_for("replica 3 to be re-placed off the taken node", moved, timeout=30, interval=0.5)
    events = [e for e in ops.events("big") if e["reason"] == "Repaired"]
    assert events and f"{ops.namespace}/by-hand" in events[0]["message"], events
    placement = {p["index"]: p["node"] for p in ops.status("big")["placement"]["pods"]}
    assert placement[3] != taken and all(placement[i] == planned[f"big-{i}"] for i in range(REPLICAS) if i != 3)
    for pod in ops.pods("big"):  # open the gate: every pod binds where the placement says
        ops.cluster.kubectl("patch", "pod", pod["metadata"]["name"], "-n", ops.namespace, "--type=json",
                            "-p", '[{"op": "remove", "path": "/spec/schedulingGates"}]')
    ops.wait_phase("big", "Running", timeout=90)
    assert {p["spec"]["nodeName"] for p in ops.running_pods("big")} == set(placement.values())

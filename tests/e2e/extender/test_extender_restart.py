"""Killing the extender mid-burst loses no reservation and double-allocates nothing (issues 5, 12).

Every GPU of the shape is spoken for: gangs reserve three quarters of them over gRPC and record the
placement in their GPUJob's status, as the operator's admission does; plain pods want the rest.
The operators are stopped for the test, so these hand-admitted GPUJobs are the only writer's.
Pods are created in a slow burst; the extender is SIGKILLed once some are bound and started again
while creation goes on, so gang pods appear both before and after the restart, racing plain pods
for the same GPUs. The restarted extender has no startup grace: it holds the GPUJobs' recorded
placements from its first list. Afterwards the API is audited against node capacity and the GPU
indices the gangs were planned, and the restarted ledger against the API.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections import Counter
from typing import Any

from kubegang.placement import GangRequest, Placement
from kubegang.podcontract import GPU_RESOURCE, GPUS_ANNOTATION, JOB_UID_LABEL, NODE_ANNOTATION

from .. import processes

GANGS = 12
PODS_PER_GANG = 2
BATCH = 3
PAUSE_S = 0.6
OPERATORS = ("kubegang-operator-0", "kubegang-operator-1")


def _gpujob(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubegang.io/v1alpha1", "kind": "GPUJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": PODS_PER_GANG, "queue": "extender-restart", "template": {"spec": {"containers": [{
            "name": "main", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {GPU_RESOURCE: "1"}}}]}}},
    }


def _record_admission(extender: Any, namespace: str, name: str, placement: Placement) -> None:
    """What the operator's step 4 writes: the job admitted, and where its pods go."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = {"status": {"phase": "Admitted", "admittedAt": now, "placement": {
        "level": placement.level.label, "domain": placement.domain,
        "pods": [{"index": a.pod, "node": a.node, "gpus": list(a.gpus)} for a in placement.assignments]}}}
    extender.cluster.kubectl("patch", "gpujob", name, "-n", namespace, "--subresource=status", "--type=merge",
                             "-p", json.dumps(status))


def _gpus(pod: dict[str, Any]) -> int:
    return sum(int(c["resources"].get("limits", {}).get(GPU_RESOURCE, 0)) for c in pod["spec"]["containers"])


def test_killing_the_extender_mid_burst_loses_no_reservation(extender: Any, namespace: str) -> None:
    stopped = {component: extender.kill(component) for component in OPERATORS}
    try:
        _burst_with_a_restart(extender, namespace)
    finally:
        extender.cluster.kubectl("delete", "gpujobs", "--all", "-n", namespace, "--wait=true", check=False)
        for component, argv in stopped.items():
            extender.start(argv, component=component)
        for port in extender.kubegang.ports["operator_metrics"]:
            extender.cluster.wait_for("restarted operator serving", lambda port=port: processes.http_ok(
                f"http://127.0.0.1:{port}/metrics"), timeout=60, interval=0.5)


def _burst_with_a_restart(extender: Any, namespace: str) -> None:
    capacity = extender.free_gpus()
    total = sum(capacity.values())
    planned: dict[str, tuple[str, tuple[int, ...]]] = {}
    manifests: list[dict[str, Any]] = []
    extender.create_all([_gpujob(f"g{g}", namespace) for g in range(GANGS)])
    uids = {j["metadata"]["name"]: j["metadata"]["uid"]
            for j in extender.cluster.get_json("gpujobs", "-n", namespace)["items"]}
    for g in range(GANGS):
        job = uids[f"g{g}"]
        outcome = extender.reserve(GangRequest(id=job, pods=PODS_PER_GANG, gpus_per_pod=1,
                                               cpu_milli=100, memory_mib=64))
        assert isinstance(outcome.result, Placement), outcome.result
        _record_admission(extender, namespace, f"g{g}", outcome.result)
        for a in outcome.result.assignments:
            name = f"g{g}-{a.pod}"
            planned[name] = (a.node, a.gpus)
            manifests.append(extender.gpu_pod(name, namespace, 1, job_uid=job, index=a.pod, node=a.node,
                                              gpu_indices=a.gpus))
    plain = total - GANGS * PODS_PER_GANG
    assert plain > 0 and sum(extender.free_gpus().values()) == plain
    # Plain pods interleaved with gang pods, so that both race for GPUs around the restart.
    for i in range(plain):
        manifests.insert(i * len(manifests) // plain, extender.gpu_pod(f"plain-{i}", namespace, 1,
                                                                        scheduler="default-scheduler"))

    errors: list[BaseException] = []

    def burst() -> None:
        try:
            for start in range(0, len(manifests), BATCH):
                extender.create_all(manifests[start:start + BATCH])
                time.sleep(PAUSE_S)
        except BaseException as exc:  # surfaced in the test thread below
            errors.append(exc)

    creator = threading.Thread(target=burst, name="burst")
    creator.start()
    extender.cluster.wait_for("first pods bound", lambda: sum(
        1 for p in extender.pods(namespace) if p["spec"].get("nodeName")) >= 4, timeout=60, interval=0.2)
    created_before = len(extender.pods(namespace))
    argv = extender.kill()
    extender.start(argv)
    # From its first list on, the restarted ledger holds the recorded placement of every gang whose
    # pods do not all exist, with no TTL (pods listed after the dump existed no earlier than it).
    snap = extender.snapshot()
    have = Counter((p["metadata"].get("labels") or {}).get(JOB_UID_LABEL) for p in extender.pods(namespace))
    missing = {uid for uid in uids.values() if have[uid] < PODS_PER_GANG}
    assert missing <= set(snap["reservations"]), (missing, sorted(snap["reservations"]))
    assert all(snap["reservations"][uid]["durable"] for uid in missing)
    creator.join(timeout=120)
    assert not errors, errors
    assert created_before < len(manifests), "the restart must fall inside the burst"

    def bound() -> list[dict[str, Any]]:
        return [p for p in extender.pods(namespace) if p["spec"].get("nodeName")]

    try:
        extender.cluster.wait_for(f"all {len(manifests)} pods bound", lambda: len(bound()) == len(manifests),
                                  timeout=120, interval=1)
    except AssertionError as exc:
        events = extender.cluster.get_json("events", "-n", namespace, "--field-selector",
                                           "reason=FailedScheduling")["items"]
        last = {e["involvedObject"]["name"]: e.get("message", "") for e in events}
        pending = sorted(p["metadata"]["name"] for p in extender.pods(namespace) if not p["spec"].get("nodeName"))
        raise AssertionError(f"{exc}; pending {pending}: {[last.get(n) for n in pending][:3]}") from None

    # --- audit the API: capacity, planned nodes, planned GPU indices ---------------------------
    pods = extender.pods(namespace)
    used: Counter[str] = Counter()
    indices: dict[str, list[int]] = {}
    for p in pods:
        node = p["spec"]["nodeName"]
        used[node] += _gpus(p)
        annotations = p["metadata"].get("annotations") or {}
        if JOB_UID_LABEL in (p["metadata"].get("labels") or {}):
            assert (node, annotations[NODE_ANNOTATION]) == (planned[p["metadata"]["name"]][0],) * 2
            gpus = [int(i) for i in annotations[GPUS_ANNOTATION].split(",")]
            assert tuple(gpus) == planned[p["metadata"]["name"]][1]
            indices.setdefault(node, []).extend(gpus)
    assert all(used[n] <= capacity[n] for n in used), (used, capacity)
    assert sum(used.values()) == total
    for node, seen in indices.items():
        assert len(seen) == len(set(seen)), f"GPU index planned twice on {node}: {sorted(seen)}"

    # --- the restarted ledger agrees with the API ----------------------------------------------
    def ledger_agrees() -> bool:
        snap = extender.snapshot()
        held = {p["pod"]: p["node"] for p in snap["pods"].values() if p["pod"].startswith(namespace + "/")}
        return held == {f"{namespace}/{p['metadata']['name']}": p["spec"]["nodeName"] for p in pods}

    extender.cluster.wait_for("ledger to agree with the API", ledger_agrees, timeout=30)
    snap = extender.snapshot()
    assert not snap["unplaced"], snap["unplaced"]
    assert not snap["reservations"], "every gang pod exists: nothing may stay reserved in memory"
    assert extender.free_gpus() == {n: capacity[n] - used[n] for n in capacity}
    for node in capacity:
        for gpu in snap["nodes"][node]["gpus"]:
            assert len(gpu["holders"]) <= 1, (node, gpu)

"""The extender through the real kube-scheduler: gangs land where planned, reserved GPUs stay reserved.

Issue 5, "Done when": pods of a reserved gang land on their planned nodes; a plain pod requesting
GPUs never takes reserved GPUs and gets the extender's reason when nothing fits.
"""

from __future__ import annotations

import time
from typing import Any

from kubegang.placement import GangRequest, Placement


def _bound(pods: list[dict[str, Any]]) -> dict[str, str]:
    return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName")}


def test_gang_pods_land_on_their_planned_nodes(extender: Any, namespace: str) -> None:
    job = extender.new_job_uid()
    gang = GangRequest(id=job, pods=3, gpus_per_pod=4)
    outcome = extender.reserve(gang)
    placement = outcome.result
    assert isinstance(placement, Placement), placement
    planned = {f"g-{a.pod}": a.node for a in placement.assignments}
    # The plan spreads over at least two nodes (3 x 4 GPUs > one 8-GPU node), so landing on the
    # planned node is a decision of the extender, not the only choice.
    assert len(set(planned.values())) >= 2

    extender.create_all([extender.gpu_pod(f"g-{a.pod}", namespace, 4, job_uid=job, index=a.pod, node=a.node,
                                          gpu_indices=a.gpus) for a in placement.assignments])
    extender.cluster.wait_for("gang pods bound", lambda: len(_bound(extender.pods(namespace))) == 3, timeout=60)
    assert _bound(extender.pods(namespace)) == planned

    snap = extender.snapshot()
    assert job not in snap["reservations"], "pods claimed every slot: no in-memory reservation is left"
    held = {p["pod"].split("/")[1]: (p["node"], p["gpuIndices"]) for p in snap["pods"].values()
            if p["owner"] == job}
    assert held == {f"g-{a.pod}": (a.node, list(a.gpus)) for a in placement.assignments}


def test_plain_gpu_pod_never_takes_reserved_gpus(extender: Any, namespace: str) -> None:
    job = extender.new_job_uid()
    total = sum(extender.free_gpus().values())
    # Every GPU of the shape, for a gang whose pods do not exist (yet).
    outcome = extender.reserve(GangRequest(id=job, pods=total // 8, gpus_per_pod=8))
    assert isinstance(outcome.result, Placement), outcome.result
    assert sum(extender.free_gpus().values()) == 0

    # default-scheduler: the extender applies to every profile for pods requesting GPUs.
    extender.create_all([extender.gpu_pod("plain", namespace, 1, scheduler="default-scheduler")])

    def failed_scheduling() -> list[str]:
        events = extender.cluster.get_json("events", "-n", namespace, "--field-selector",
                                           "involvedObject.name=plain,reason=FailedScheduling")["items"]
        return [str(e.get("message", "")) for e in events]

    extender.cluster.wait_for("FailedScheduling event of the plain pod", lambda: bool(failed_scheduling()),
                              timeout=60)
    message = failed_scheduling()[-1]
    assert "reserved" in message, message
    # Held long enough for kube-scheduler to retry: it stays Pending, on no node.
    time.sleep(3)
    assert not _bound(extender.pods(namespace))

    # Release changes nothing in the API; the extender nudges the waiting pod so that kube-scheduler
    # retries now rather than after its five-minute flush of unschedulable pods.
    assert extender.release(job) == total
    extender.cluster.wait_for("plain pod bound after Release",
                              lambda: "plain" in _bound(extender.pods(namespace)), timeout=30, interval=0.5)

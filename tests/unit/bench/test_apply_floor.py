"""The apply floor's status writes are the operator's: valid GPUJob status, Admitted then Running."""

from __future__ import annotations

from bench.e2e._workload import BenchJob
from bench.e2e.apply_floor import status_patches
from kubegang.api import GPUJobStatus


def test_the_floors_status_patches_are_what_the_operator_writes_for_a_job_that_starts() -> None:
    job = BenchJob(name="j-1", queue="leaf-03", pods=3, gpus_per_pod=8)
    admitted, running = status_patches(job)
    for patch in (admitted, running):
        GPUJobStatus.model_validate(patch)  # the CRD's own model: the API server would take it
    assert admitted["phase"] == "Admitted" and admitted["totalGPUs"] == 24
    assert [p["node"] for p in admitted["placement"]["pods"]] == ["node-0000", "node-0001", "node-0002"]
    assert running["phase"] == "Running" and running["readyReplicas"] == 3 and running["startedAt"]
    # Running keeps the Admitted condition and adds its own, as the supervisor's transition does.
    assert {c["type"]: c["status"] for c in running["conditions"]} == {"Admitted": "True", "Running": "True"}

"""Bad input against the real stack: one job's mistake is explained on that job and stops nothing else.

What docs/operator.md ("Reading conditions") and docs/api.md promise, driven with kubectl as a user
drives it: a GPUJob naming a PriorityClass that does not exist waits Unschedulable
(``PriorityClassNotFound``) and runs once the class is created; a Running GPUJob edited into a spec the
operator cannot read keeps running as its last readable spec, counted in its queue, with a Warning
Event; and the spec mistakes that used to fail only when the admitted gang's pods were created (a GPU
request without its limit, a torchrun job whose name cannot be a hostname) are refused at apply time.
"""

from __future__ import annotations

import json
import time
from typing import Any

from .conftest import H100


def _event_reasons(ops: Any, name: str) -> list[str]:
    return [e["reason"] for e in ops.events(name) if e.get("type") == "Warning"]


def test_a_job_naming_a_missing_priority_class_waits_and_runs_once_the_class_exists(ops: Any) -> None:
    ops.cluster.use_shape("superpod-h100")
    q = ops.queue("pc", [(H100, 16)])
    klass = f"{ops.namespace}-urgent"
    ops.job("urgent", q, 1, 8, priorityClassName=klass)
    ops.job("plain", q, 1, 8)  # one job's missing class holds back nobody else
    try:
        ops.wait_phase("plain", "Running", timeout=90)
        ops.wait_phase("urgent", "Unschedulable", timeout=60)
        cond = ops.condition("urgent", "Unschedulable")
        assert cond is not None and cond["reason"] == "PriorityClassNotFound", ops.status("urgent")
        assert cond["message"].startswith(f"spec.priorityClassName: no PriorityClass named '{klass}'"), cond
        assert ops.pods("urgent") == []
        ops.cluster.wait_for("a PriorityClassNotFound Event on the job",
                             lambda: "PriorityClassNotFound" in _event_reasons(ops, "urgent"), timeout=30)

        ops.cluster.apply({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                           "metadata": {"name": klass}, "value": 1000})
        ops.wait_phase("urgent", "Running", timeout=90)
        [pod] = ops.running_pods("urgent")
        assert pod["spec"]["priorityClassName"] == klass and pod["spec"]["priority"] == 1000
    finally:
        ops.cluster.kubectl("delete", "priorityclass", klass, "--ignore-not-found", "--wait=false", check=False)


def test_a_running_job_edited_into_an_unreadable_spec_runs_on_counted_in_its_queue(ops: Any) -> None:
    ops.cluster.use_shape("superpod-h100")
    q = ops.queue("edit", [(H100, 16)])
    ops.job("runner", q, 2, 8)
    ops.wait_phase("runner", "Running", timeout=90)
    pods = {p["metadata"]["uid"] for p in ops.running_pods("runner")}
    generation = ops.status("runner")["observedGeneration"]
    # The template keeps unknown fields and the schema checks only GPU counts, so "two" CPUs passes
    # `kubectl apply`; the operator cannot read the quantity.
    ops.cluster.kubectl("patch", "gpujob", "runner", "-n", ops.namespace, "--type=json", "-p", json.dumps([
        {"op": "add", "path": "/spec/template/spec/containers/0/resources/requests", "value": {"cpu": "two"}}]))
    ops.cluster.wait_for("an InvalidSpec Event naming the field",
                         lambda: any(e["reason"] == "InvalidSpec" and "cpu" in e["message"]
                                     for e in ops.events("runner")), timeout=30)
    ops.job("waiter", q, 1, 8)  # the queue is full: the unreadable job's 16 GPUs still count
    time.sleep(5)
    status = ops.status("runner")
    assert status["phase"] == "Running" and status["observedGeneration"] == generation, status
    assert {p["metadata"]["uid"] for p in ops.running_pods("runner")} == pods  # nothing restarted
    assert ops.phase("waiter") == "Queued", ops.status("waiter")
    assert ops.cluster.get_json("gpuqueue", q)["status"]["usedGPUs"] == 16

    ops.cluster.kubectl("delete", "gpujob", "runner", "-n", ops.namespace)
    ops.wait_phase("waiter", "Running", timeout=90)  # deleting it while unreadable gave its quota back


def test_spec_mistakes_that_pods_would_hit_are_refused_at_apply_time(ops: Any) -> None:
    q = ops.queue("apply", [(H100, 16)])
    request_only = ops.job_manifest("request-only", q, 1, 8)
    request_only["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": 8}}
    hostname = ops.job_manifest("train.v2", q, 2, 8, framework="torchrun")
    for manifest, field, words in (
            (request_only, "spec.template.spec.containers[0].resources", "needs a limit of the same count"),
            (hostname, "metadata.name", "lowercase letters, digits and '-', starting with a letter")):
        proc = ops.cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest), check=False)
        assert proc.returncode != 0 and field in proc.stderr and words in proc.stderr, proc.stderr
    assert ops.jobs() == []

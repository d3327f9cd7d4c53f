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

import pytest

from .. import processes
from .conftest import H100
from .test_kubectl_gang import gang


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


def test_a_holding_job_the_restarted_operators_never_read_is_counted_from_its_status(
        ops: Any, request: pytest.FixtureRequest) -> None:
    """An operator that starts (an upgrade, both replicas restarted) over a Running job whose spec it
    cannot read has no last readable spec to keep: it counts the job's quota from its status
    (docs/operator.md, InvalidSpec). Before, that quota was free and a second gang was admitted over it."""
    assert ops.cluster.cluster_dir is not None, "the test restarts the operators hack/cluster starts"
    ops.cluster.use_shape("superpod-h100")
    q = ops.queue("unread", [(H100, 16)])
    ops.job("old", q, 2, 8)
    ops.wait_phase("old", "Running", timeout=90)
    request.addfinalizer(ops.kubegang.restart)  # whatever happens, later tests get both operators back
    ports = ops.kubegang.ports["operator_metrics"]
    replicas = [f"kubegang-operator-{i}" for i in range(len(ports))]
    argvs = {name: processes.kill(ops.cluster.cluster_dir, name) for name in replicas}
    # Edited while no operator runs: the template keeps unknown fields, so "two" CPUs passes the API.
    ops.cluster.kubectl("patch", "gpujob", "old", "-n", ops.namespace, "--type=json", "-p", json.dumps([
        {"op": "add", "path": "/spec/template/spec/containers/0/resources/requests", "value": {"cpu": "two"}}]))
    for name, argv in argvs.items():
        processes.start(ops.cluster.cluster_dir, ops.cluster.kubeconfig, name, argv)
    for port in ports:
        ops.cluster.wait_for("the operator back", lambda port=port: processes.http_ok(
            f"http://127.0.0.1:{port}/metrics"), timeout=120, interval=0.5)
    ops.cluster.wait_for("a leader", lambda: ops.leader() is not None, timeout=60)
    ops.cluster.wait_for("an InvalidSpec Event saying what is counted", lambda: any(
        e["reason"] == "InvalidSpec" and "its quota is counted from its status: 16 GPUs" in e["message"]
        for e in ops.events("old")), timeout=60)
    ops.job("new", q, 1, 8)
    status = ops.wait_phase("new", "Queued", timeout=60)
    assert status.get("reason") == "QuotaExhausted", status
    time.sleep(5)  # a few more cycles
    assert ops.phase("new") == "Queued" and ops.pods("new") == [], ops.status("new")
    assert ops.phase("old") == "Running"
    assert ops.cluster.get_json("gpuqueue", q)["status"]["usedGPUs"] == 16

    ops.cluster.kubectl("delete", "gpujob", "old", "-n", ops.namespace)
    ops.wait_phase("new", "Running", timeout=90)  # deleting it gave its counted quota back


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


def test_a_running_gang_whose_replicas_are_edited_is_requeued_whole_at_its_new_size_not_as_a_restart(
        ops: Any) -> None:
    """docs/operator.md, ``Resized``: before, the edit read as "worker 2 disappeared" and spent a restart
    (with ``restartLimit: 0`` the job Failed)."""
    ops.cluster.use_shape("superpod-h100")
    q = ops.queue("resize", [(H100, 32)])
    ops.job("grow", q, 2, 8, restartLimit=0)
    ops.wait_phase("grow", "Running", timeout=90)
    ops.cluster.kubectl("patch", "gpujob", "grow", "-n", ops.namespace, "--type=merge", "-p",
                        json.dumps({"spec": {"replicas": 4}}))
    ops.cluster.wait_for("a Resized Event", lambda: "Resized" in _event_reasons(ops, "grow"), timeout=60)
    status = ops.wait_phase("grow", "Running", timeout=120)
    assert len(ops.running_pods("grow")) == 4 and len(status["placement"]["pods"]) == 4, status
    assert status.get("restarts", 0) == 0, status
    message = next(e["message"] for e in ops.events("grow") if e["reason"] == "Resized")
    assert "spec.replicas changed 2 -> 4" in message, message


def _why_held_back(ops: Any, name: str, reason: str) -> dict[str, Any]:
    """``kubectl gang why NAME`` as a user runs it, for a job the operator holds back: it names the reason
    (not "it would not be a head") and gives no "could start" estimate. Returns ``heldBack`` of ``-o json``."""
    text = gang(ops, "why", name, "-n", ops.namespace).stdout
    assert f"Next cycle: not considered ({reason})" in text, text
    assert "Estimate: none (it is not admitted until" in text and "could start" not in text, text
    report = json.loads(gang(ops, "why", name, "-n", ops.namespace, "-o", "json").stdout)
    assert report["heldBack"]["reason"] == reason and report["estimate"]["known"] is False, report
    return dict(report["heldBack"])


def test_a_pod_group_missing_pods_and_a_gang_waiting_on_a_stuck_pod_say_what_they_wait_for(ops: Any) -> None:
    """docs/operator.md, ``WaitingForPods`` and ``PreviousPodsTerminating``: both waits used to write
    nothing at all (the second kept "restarting the whole gang" for as long as the pod stayed). ``kubectl
    gang why`` says the same (it used to say "not considered (it would not be a head)" and estimate a start)."""
    ops.cluster.use_shape("superpod-h100")
    q = ops.queue("waits", [(H100, 32)])
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "lonely-0", "namespace": ops.namespace,
                        "labels": {"kubegang.io/pod-group": "lonely", "kubegang.io/group-size": "3",
                                   "kubegang.io/queue": q}},
           "spec": {"terminationGracePeriodSeconds": 0, "containers": [
               {"name": "main", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}
    ops.cluster.apply(pod)
    # A pod that fails after 15 s, given a finalizer (as a controller of the user's might) while it runs:
    # its gang restarts, and the old pod stays Terminating.
    stuck = ops.job_manifest("stuck", q, 1, 8, annotations={"kubegang.io/fake-runtime": "15s",
                                                            "kubegang.io/fake-exit-code": "1"})
    stuck["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 0
    ops.cluster.apply(stuck)
    try:
        ops.cluster.wait_for("the gang's pod", lambda: bool(ops.pods("stuck")), timeout=90)
        [first] = ops.pods("stuck")
        ops.cluster.kubectl("patch", "pod", first["metadata"]["name"], "-n", ops.namespace, "--type=merge", "-p",
                            '{"metadata":{"finalizers":["example.com/hold"]}}')
        lonely = ops.wait_phase("podgroup-lonely", "Queued", timeout=90)
        ops.cluster.wait_for("the pod group to say how many pods it waits for", lambda: (
            ops.status("podgroup-lonely").get("reason") == "WaitingForPods"), timeout=90)
        cond = ops.condition("podgroup-lonely", "Queued")
        assert cond is not None and "waiting for 2 more pods of pod group lonely" in cond["message"], lonely
        assert "kubegang.io/group-size=3" in cond["message"], cond
        held = _why_held_back(ops, "podgroup-lonely", "WaitingForPods")
        assert (held["missingPods"], held["replicas"]) == (2, 3), held

        ops.cluster.wait_for("the restarted gang to name the pod it waits for", lambda: (
            ops.status("stuck").get("reason") == "PreviousPodsTerminating"), timeout=120)
        cond = ops.condition("stuck", "Queued")
        assert cond is not None and first["metadata"]["name"] in cond["message"], cond
        assert "example.com/hold" in cond["message"], cond
        assert "PreviousPodsTerminating" in _event_reasons(ops, "stuck")
        held = _why_held_back(ops, "stuck", "PreviousPodsTerminating")
        assert held["pods"] == [first["metadata"]["name"]], held
    finally:
        for name in [p["metadata"]["name"] for p in ops.cluster.get_json("pods", "-n", ops.namespace)["items"]]:
            ops.cluster.kubectl("patch", "pod", name, "-n", ops.namespace, "--type=merge", "-p",
                                '{"metadata":{"finalizers":null}}', check=False)

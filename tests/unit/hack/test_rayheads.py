"""hack/rayheads.py: the stand-in Ray heads answer KubeRay's job API as a Ray head does (issue 17).

Driven over a real loopback socket with proxy-form requests, as KubeRay's ``net/http`` client sends
them through ``HTTP_PROXY``; the e2e test (tests/e2e/test_ray_gangs.py) runs a RayJob to Complete
through it with the real KubeRay operator.
"""

from __future__ import annotations

import http.client
import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "hack"))
import rayheads

HEAD = "http://rc-head-svc.team-a.svc.cluster.local:8265"
OTHER = "http://other-head-svc.team-b.svc.cluster.local:8265"


@pytest.fixture
def proxy() -> Iterator[int]:
    server = rayheads.serve(0, default_runtime=60)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


def _call(port: int, method: str, url: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, url, body=data, headers={"Content-Type": "application/json"} if data else {})
        resp = conn.getresponse()
        raw = resp.read().decode()
        try:
            return resp.status, json.loads(raw)
        except ValueError:
            return resp.status, raw
    finally:
        conn.close()


def test_a_submitted_job_runs_its_stated_time_then_succeeds(proxy: int) -> None:
    assert _call(proxy, "GET", f"{HEAD}/api/jobs/rj-1")[0] == 404  # unknown: KubeRay submits next
    code, answer = _call(proxy, "POST", f"{HEAD}/api/jobs/", {
        "entrypoint": "python train.py", "submission_id": "rj-1", "metadata": {"kubegang.io/fake-runtime": "1s"}})
    assert (code, answer) == (200, {"job_id": "rj-1", "submission_id": "rj-1"})
    code, info = _call(proxy, "GET", f"{HEAD}/api/jobs/rj-1")
    assert code == 200 and info["status"] == "RUNNING" and info["entrypoint"] == "python train.py"
    assert "end_time" not in info and info["start_time"] > 0
    time.sleep(1.1)
    code, info = _call(proxy, "GET", f"{HEAD}/api/jobs/rj-1")
    assert info["status"] == "SUCCEEDED" and info["end_time"] >= info["start_time"] + 1000
    assert _call(proxy, "GET", f"{HEAD}/api/jobs/rj-1/logs") == (200, {"logs": ""})


def test_each_head_has_its_own_jobs_and_a_repeated_submission_is_refused_in_rays_words(proxy: int) -> None:
    assert _call(proxy, "POST", f"{HEAD}/api/jobs/", {"entrypoint": "a", "submission_id": "s"})[0] == 200
    code, text = _call(proxy, "POST", f"{HEAD}/api/jobs/", {"entrypoint": "a", "submission_id": "s"})
    assert code == 500 and "Please use a different submission_id" in text  # what KubeRay looks for
    assert _call(proxy, "GET", f"{OTHER}/api/jobs/s")[0] == 404
    assert [j["submission_id"] for j in _call(proxy, "GET", f"{HEAD}/api/jobs/")[1]] == ["s"]
    assert _call(proxy, "GET", f"{OTHER}/api/jobs/")[1] == []


def test_stop_delete_a_stated_failure_and_bad_input(proxy: int) -> None:
    _call(proxy, "POST", f"{HEAD}/api/jobs/", {"entrypoint": "a", "submission_id": "long"})
    assert _call(proxy, "POST", f"{HEAD}/api/jobs/long/stop") == (200, {"stopped": True})
    assert _call(proxy, "GET", f"{HEAD}/api/jobs/long")[1]["status"] == "STOPPED"
    assert _call(proxy, "POST", f"{HEAD}/api/jobs/long/stop") == (200, {"stopped": False})
    assert _call(proxy, "DELETE", f"{HEAD}/api/jobs/long") == (200, {"deleted": True})
    assert _call(proxy, "GET", f"{HEAD}/api/jobs/long")[0] == 404
    assert _call(proxy, "POST", f"{HEAD}/api/jobs/nope/stop")[0] == 404

    _call(proxy, "POST", f"{HEAD}/api/jobs/", {"entrypoint": "a", "submission_id": "bad", "metadata": {
        "kubegang.io/fake-runtime": "0s", "kubegang.io/fake-result": "FAILED"}})
    assert _call(proxy, "GET", f"{HEAD}/api/jobs/bad")[1]["status"] == "FAILED"

    code, text = _call(proxy, "POST", f"{HEAD}/api/jobs/", {"submission_id": "x"})
    assert code == 400 and "entrypoint" in text
    assert _call(proxy, "GET", f"{HEAD}/api/serve/applications/")[0] == 404


def test_a_k8sjobmode_job_is_what_its_submitter_pod_says_and_is_asked_for_until_it_ends() -> None:
    phases = {"rj-1": "Pending"}
    asked: list[tuple[str, str]] = []

    def submitter(namespace: str, submission_id: str) -> rayheads.Job | None:
        asked.append((namespace, submission_id))
        phase = phases.get(submission_id)
        if phase not in ("Running", "Succeeded"):
            return None
        ended = rayheads.JobStatus.SUCCEEDED if phase == "Succeeded" else None
        return rayheads.Job(submission_id, "python train.py", {}, time.time(), 0.0 if ended else float("inf"),
                            ended=ended)

    server = rayheads.serve(0, default_runtime=60, submitted_elsewhere=submitter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = int(server.server_address[1])
    try:
        assert _call(port, "GET", f"{HEAD}/api/jobs/rj-1")[0] == 404  # the submitter has not run yet
        phases["rj-1"] = "Running"
        code, info = _call(port, "GET", f"{HEAD}/api/jobs/rj-1")
        assert code == 200 and info["status"] == "RUNNING" and "end_time" not in info
        phases["rj-1"] = "Succeeded"
        assert _call(port, "GET", f"{HEAD}/api/jobs/rj-1")[1]["status"] == "SUCCEEDED"
        assert asked == [("team-a", "rj-1")] * 3
        phases.clear()  # ended: remembered, not asked for again
        assert _call(port, "GET", f"{HEAD}/api/jobs/rj-1")[1]["status"] == "SUCCEEDED" and len(asked) == 3
    finally:
        server.shutdown()
        server.server_close()
    assert rayheads.namespace_of("rc-head-svc.team-a.svc.cluster.local:8265") == "team-a"
    assert rayheads.namespace_of("127.0.0.1:8265") == ""

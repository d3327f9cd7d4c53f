"""The Ray heads of fake nodes: the job API of each Ray cluster's head, for the real KubeRay operator.

KubeRay follows a RayJob through the dashboard of its cluster's head
(``http://<head-svc>.<namespace>.svc.cluster.local:8265/api/jobs/...``): it submits the entrypoint
there (``submissionMode: HTTPMode``) and polls the job until Ray says it ended, then marks the RayJob
Complete or Failed and, with ``shutdownAfterJobFinishes``, deletes the cluster. On kwok no Ray head
runs (a fake node runs no container) and there is no Service network, so without this a RayJob can be
admitted, placed and started but never finish. This process is what kwok is for pods, for Ray's job
API: it keeps a job table per head and runs each job for a stated time, nothing else.

How requests reach it: the KubeRay operator runs with ``HTTP_PROXY`` pointing here (its dashboard
client is a plain ``net/http`` client, which honours the variable; requests to the API server on
127.0.0.1 are never proxied). So every request arrives in proxy form, with the head's address in the
URL, and the head is told apart by that address (service, namespace).

What it answers (the routes KubeRay v1.5's ``dashboard_httpclient.go`` calls; anything else is 404):
``POST /api/jobs/`` submits (a second submission of one ``submission_id`` is refused as Ray refuses
it), ``GET /api/jobs/<id>`` is the job (404 if unknown: KubeRay then submits), ``GET /api/jobs/`` the
list, ``GET /api/jobs/<id>/logs``, ``POST /api/jobs/<id>/stop``, ``DELETE /api/jobs/<id>``.

How long a job runs, by submission mode:

- ``HTTPMode`` (KubeRay submits it here): the job's metadata ``kubegang.io/fake-runtime`` (``"30s"``,
  ``"5m"``; KubeRay sends the RayJob's ``spec.metadata``), as the fake pods' annotation of the same name,
  else ``--default-runtime`` seconds; ``kubegang.io/fake-result: FAILED`` ends it FAILED.
- ``K8sJobMode`` (the default): KubeRay's submitter pod would run ``ray job submit --submission-id ID``,
  which submits and then follows the job to its end; no fake node runs it, but kwok runs the pod's
  phases (its ``kubegang.io/fake-runtime``). So with ``--follow-submitters`` a job this head was never
  sent is looked up on the API server of ``hack/cluster``'s cluster: the RayJob of the head's namespace
  whose ``status.jobId`` it is, and that RayJob's submitter pod (``batch.kubernetes.io/job-name``). The
  job exists once the pod runs, is RUNNING while it runs, and ends SUCCEEDED or FAILED as the pod does.

Usage: rayheads.py --port PORT [--default-runtime SECONDS] [--follow-submitters]
(started by ``hack/cluster addon kuberay up``).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import devcluster as dc

from kubegang.kubectl._runtime import FAKE_RUNTIME_ANNOTATION, seconds

JOBS_PATH = "/api/jobs/"
FAKE_RESULT = "kubegang.io/fake-result"
"""Job metadata: the status a job ends in (``SUCCEEDED`` unless this says ``FAILED``)."""


class JobStatus(StrEnum):
    """Ray's job states (ray.job_submission.JobStatus), as KubeRay reads them."""

    RUNNING = "RUNNING"
    STOPPED = "STOPPED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


@dataclass
class Job:
    """One submitted job of one head."""

    submission_id: str
    entrypoint: str
    metadata: dict[str, str]
    started: float
    """Wall-clock seconds (Ray reports start and end times in epoch milliseconds)."""
    runtime: float
    stopped: float | None = None
    ended: JobStatus | None = None
    """How it ended, where that was read rather than timed (a submitter pod's phase)."""

    def status(self, now: float) -> JobStatus:
        if self.stopped is not None:
            return JobStatus.STOPPED
        if self.ended is not None:
            return self.ended
        if now < self.started + self.runtime:
            return JobStatus.RUNNING
        return JobStatus.FAILED if self.metadata.get(FAKE_RESULT) == JobStatus.FAILED.value else JobStatus.SUCCEEDED

    def info(self, now: float) -> dict[str, Any]:
        status = self.status(now)
        ended = self.stopped if self.stopped is not None else self.started + self.runtime
        out: dict[str, Any] = {
            "type": "SUBMISSION", "job_id": self.submission_id, "submission_id": self.submission_id,
            "entrypoint": self.entrypoint, "metadata": self.metadata, "status": status.value,
            "message": f"Job {status.value.lower()} (kubegang's stand-in Ray head: {self.runtime:g}s run).",
            "start_time": int(self.started * 1000)}
        if status is not JobStatus.RUNNING:
            out["end_time"] = int(ended * 1000)
        return out


Lookup = Callable[[str, str], Job | None]
"""(namespace, submission ID) -> the job a K8sJobMode submitter pod submitted, or None."""


def namespace_of(head: str) -> str:
    """The namespace of a head's address ``<service>.<namespace>.svc.<domain>:<port>`` ('' if not one)."""
    parts = head.split(":")[0].split(".")
    return parts[1] if len(parts) > 2 and parts[2] == "svc" else ""


class Submitters:
    """K8sJobMode: the job a RayJob's submitter pod submitted, as the API server shows that pod."""

    def __init__(self, paths: dc.Paths) -> None:
        self._paths = paths

    def _get(self, *args: str) -> list[dict[str, Any]]:
        out = dc.kubectl(self._paths, "get", *args, "-o", "json", check=False)
        try:
            return list(json.loads(out).get("items") or [])
        except ValueError:
            return []  # the API server did not answer: as if nothing were there yet, asked again next poll

    def __call__(self, namespace: str, submission_id: str) -> Job | None:
        if not namespace:
            return None
        rayjob = next((r for r in self._get("rayjobs", "-n", namespace)
                       if (r.get("status") or {}).get("jobId") == submission_id
                       and (r.get("spec") or {}).get("submissionMode", "K8sJobMode") == "K8sJobMode"), None)
        if rayjob is None:
            return None
        name = str(rayjob["metadata"]["name"])
        pods = self._get("pods", "-n", namespace, "-l", f"batch.kubernetes.io/job-name={name}")
        phases = {(p.get("status") or {}).get("phase") for p in pods}
        if not phases & {"Running", "Succeeded", "Failed"}:
            return None  # not submitted yet: the submitter has not run
        ended = (JobStatus.SUCCEEDED if "Succeeded" in phases
                 else JobStatus.FAILED if "Failed" in phases and "Running" not in phases else None)
        spec = rayjob.get("spec") or {}
        # Running: no end in sight (the pod's phase says when); ended: it ended when first seen so.
        return Job(submission_id, str(spec.get("entrypoint") or ""), dict(spec.get("metadata") or {}), time.time(),
                   0.0 if ended else float("inf"), ended=ended)


class Heads:
    """Every head's job table, keyed by the head's address (host:port of its Service)."""

    def __init__(self, default_runtime: float, submitted_elsewhere: Lookup | None = None) -> None:
        self.default_runtime = default_runtime
        self._jobs: dict[str, dict[str, Job]] = {}
        self._lock = threading.Lock()
        self._elsewhere = submitted_elsewhere

    def submit(self, head: str, body: dict[str, Any]) -> tuple[int, dict[str, Any] | str]:
        submission_id = str(body.get("submission_id") or f"raysubmit_{int(time.time() * 1000)}")
        entrypoint = body.get("entrypoint")
        if not isinstance(entrypoint, str) or not entrypoint:
            return 400, "entrypoint: a non-empty string is required"
        metadata = {str(k): str(v) for k, v in (body.get("metadata") or {}).items()}
        runtime = seconds(metadata.get(FAKE_RUNTIME_ANNOTATION, ""))
        with self._lock:
            jobs = self._jobs.setdefault(head, {})
            if submission_id in jobs:
                # Ray's own words: KubeRay recognises a repeated submission by them.
                return 500, (f"Job with submission_id {submission_id} already exists. "
                             "Please use a different submission_id.")
            jobs[submission_id] = Job(submission_id, entrypoint, metadata, time.time(),
                                      float(runtime) if runtime is not None else self.default_runtime)
        return 200, {"job_id": submission_id, "submission_id": submission_id}

    def job(self, head: str, submission_id: str) -> Job | None:
        with self._lock:
            known = self._jobs.get(head, {}).get(submission_id)
        if known is not None or self._elsewhere is None:
            return known
        found = self._elsewhere(namespace_of(head), submission_id)
        if found is not None and found.ended is not None:
            with self._lock:  # it will not change any more: no need to ask again
                self._jobs.setdefault(head, {}).setdefault(submission_id, found)
        return found

    def jobs(self, head: str) -> list[Job]:
        with self._lock:
            return list(self._jobs.get(head, {}).values())

    def stop(self, head: str, submission_id: str) -> bool | None:
        """Whether the job was stopped by this call; None if there is no such job."""
        with self._lock:
            job = self._jobs.get(head, {}).get(submission_id)
            if job is None:
                return None
            if job.status(time.time()) is not JobStatus.RUNNING:
                return False
            job.stopped = time.time()
            return True

    def delete(self, head: str, submission_id: str) -> bool:
        with self._lock:
            return self._jobs.get(head, {}).pop(submission_id, None) is not None


def handler_for(heads: Heads) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            sys.stderr.write(f"{time.strftime('%H:%M:%S')} {format % args}\n")

        def _route(self) -> tuple[str, str] | None:
            """(head, path below /api/jobs/) of a proxied request, or None if it is not one of Ray's."""
            url = urlsplit(self.path)
            head = url.netloc or self.headers.get("Host", "")
            path = JOBS_PATH if url.path == JOBS_PATH.rstrip("/") else url.path
            if not head or not path.startswith(JOBS_PATH):
                return None
            return head, path[len(JOBS_PATH):]

        def _reply(self, code: int, body: Any) -> None:
            data = (json.dumps(body) if not isinstance(body, str) else body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json" if not isinstance(body, str) else "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> dict[str, Any] | None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                return None
            return body if isinstance(body, dict) else None

        def do_GET(self) -> None:
            route = self._route()
            if route is None:
                return self._reply(404, "not a Ray job API path")
            head, rest = route
            now = time.time()
            if rest == "":
                return self._reply(200, [job.info(now) for job in heads.jobs(head)])
            submission_id, _, tail = rest.partition("/")
            job = heads.job(head, submission_id)
            if job is None or tail not in ("", "logs"):
                return self._reply(404, f"Job {submission_id} does not exist")
            if tail == "logs":
                return self._reply(200, {"logs": ""})
            return self._reply(200, job.info(now))

        def do_POST(self) -> None:
            route = self._route()
            body = self._body()
            if route is None:
                return self._reply(404, "not a Ray job API path")
            head, rest = route
            if rest == "":
                if body is None:
                    return self._reply(400, "the body must be a JSON object")
                return self._reply(*heads.submit(head, body))
            submission_id, _, tail = rest.partition("/")
            if tail != "stop":
                return self._reply(404, "not a Ray job API path")
            stopped = heads.stop(head, submission_id)
            if stopped is None:
                return self._reply(404, f"Job {submission_id} does not exist")
            return self._reply(200, {"stopped": stopped})

        def do_DELETE(self) -> None:
            route = self._route()
            if route is None or "/" in route[1] or not route[1]:
                return self._reply(404, "not a Ray job API path")
            if not heads.delete(*route):
                return self._reply(404, f"Job {route[1]} does not exist")
            return self._reply(200, {"deleted": True})

    return Handler


def serve(port: int, default_runtime: float, submitted_elsewhere: Lookup | None = None) -> ThreadingHTTPServer:
    """The stand-in, bound to loopback on ``port`` (0: any free port), not yet serving."""
    server = ThreadingHTTPServer(("127.0.0.1", port), handler_for(Heads(default_runtime, submitted_elsewhere)))
    server.daemon_threads = True
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rayheads.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--default-runtime", type=float, default=5.0,
                        help="seconds a job runs when its metadata states no kubegang.io/fake-runtime")
    parser.add_argument("--follow-submitters", action="store_true",
                        help="read K8sJobMode submitter pods from hack/cluster's cluster (KUBEGANG_CLUSTER_DIR)")
    args = parser.parse_args(argv)
    submitters = Submitters(dc.cluster_paths()) if args.follow_submitters else None
    server = serve(args.port, args.default_runtime, submitters)
    sys.stderr.write(f"stand-in Ray heads on http://127.0.0.1:{server.server_address[1]}\n")
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())

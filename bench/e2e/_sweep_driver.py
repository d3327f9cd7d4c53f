"""The sweep driver: keeps N trials in flight and submits the next one the moment one finishes.

This is how Ray Tune or Katib run a sweep on Kubernetes: a controller with a fixed number of
parallel trials creates each trial through the API (not kubectl: a controller holds a client), and
learns that a trial is over from the object it created: the pod's phase for a plain pod, the
GPUJob's ``status.phase`` for kubegang (the platform's own verdict on the job, which is what a user
of kubegang watches). Submissions go out from a few threads, so a wave of finishing trials is not
serialised behind one connection; every create request is stamped just before it is sent.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx

from bench.e2e._kube import Api

SUBMITTERS = 32
"""Most threads that send create requests (one per slot up to this): a wave of trials that finish
together is submitted at once, so the driver's own queueing stays out of what is measured."""


@dataclass
class TrialSubmission:
    name: str
    predecessor: str | None = None
    """The trial whose completion freed the slot this one took (None: one of the first N)."""
    submitted: float | None = None
    """When the create request was sent (seconds after the driver's t0)."""
    completed: float | None = None
    """When the driver learned the trial was over."""
    error: str | None = None


class SweepDriver:
    """Submits ``names`` in order through ``create``, ``concurrency`` at a time.

    ``completed(name)`` is called from the watch threads whenever a trial is seen finished (again and
    again is fine: only the first call counts).
    """

    def __init__(self, api: Api, path: str, manifest: Callable[[str], dict[str, object]],
                 names: Sequence[str], concurrency: int, t0: float) -> None:
        self._api = api
        self._path = path
        self._manifest = manifest
        self.trials = {n: TrialSubmission(n) for n in names}
        self._order = list(names)
        self._concurrency = concurrency
        self.t0 = t0
        self._done: queue.Queue[str] = queue.Queue()
        self._lock = threading.Lock()
        self._local = threading.local()
        self._clients: list[httpx.Client] = []

    def completed(self, name: str) -> None:
        at = time.monotonic() - self.t0
        with self._lock:
            trial = self.trials.get(name)
            if trial is None or trial.completed is not None or trial.submitted is None:
                return
            trial.completed = at
        self._done.put(name)

    def _client(self) -> httpx.Client:
        client: httpx.Client | None = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = self._api.client()
            with self._lock:
                self._clients.append(client)
        return client

    def _submit(self, trial: TrialSubmission) -> None:
        doc = self._manifest(trial.name)
        try:
            client = self._client()
            with self._lock:
                trial.submitted = time.monotonic() - self.t0
            resp = client.post(self._path, json=doc)
            if resp.status_code != 201:
                trial.error = f"create {trial.name}: HTTP {resp.status_code}: {resp.text[:300]}"
        except (httpx.HTTPError, OSError) as exc:
            trial.error = f"create {trial.name}: {type(exc).__name__}: {exc}"
        if trial.error is not None:
            self._done.put(trial.name)  # the slot is free again: a failed submission is no trial

    def run(self, timeout_s: float, stall_s: float) -> bool:
        """Submit every trial and wait until all are over; False at the timeout or after ``stall_s``
        without any trial finishing."""
        deadline = time.monotonic() + timeout_s
        remaining = len(self._order)
        workers = min(SUBMITTERS, self._concurrency)
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sweep-submit") as pool:
            nxt = 0
            for name in self._order[:self._concurrency]:
                pool.submit(self._submit, self.trials[name])
                nxt += 1
            while remaining:
                wait = min(stall_s, deadline - time.monotonic())
                if wait <= 0:
                    return False
                try:
                    done = self._done.get(timeout=wait)
                except queue.Empty:
                    return False
                remaining -= 1
                if nxt < len(self._order):
                    trial = self.trials[self._order[nxt]]
                    trial.predecessor = done
                    pool.submit(self._submit, trial)
                    nxt += 1
        return True

    def close(self) -> None:
        with self._lock:
            clients, self._clients = self._clients, []
        for client in clients:
            client.close()

    def errors(self) -> list[str]:
        return [t.error for t in self.trials.values() if t.error]

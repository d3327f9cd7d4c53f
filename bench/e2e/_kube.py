"""Talking to the control plane: kubectl as a user runs it, and raw API watches that timestamp events.

Submissions go through kubectl (the path a user takes, its cost included). Observation goes through
plain list+watch streams over httpx with the kubeconfig's client certificate: one JSON line per
event, stamped with ``time.monotonic()`` the moment it is read. A watch sees every change, so rates
come from real transition times, not from polling intervals.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

Event = tuple[float, str, dict[str, Any]]
"""(monotonic time read, event type, object)."""


@dataclass(frozen=True)
class Api:
    """Where the API server is and how to authenticate (client certificate from a kubeconfig)."""

    server: str
    ca: str
    cert: str
    key: str

    @classmethod
    def from_kubeconfig(cls, path: Path) -> Api:
        config = yaml.safe_load(path.read_text())
        ctx_name = config["current-context"]
        ctx = next(c["context"] for c in config["contexts"] if c["name"] == ctx_name)
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == ctx["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == ctx["user"])
        if "client-certificate" not in user:
            raise ValueError(f"{path}: user {ctx['user']} needs client-certificate/client-key files")
        return cls(cluster["server"], cluster["certificate-authority"], user["client-certificate"], user["client-key"])

    def client(self, timeout: float | None = 30.0) -> httpx.Client:
        # An SSLContext carries the client certificate (httpx 0.28 ignores ``cert=`` next to it).
        ctx = ssl.create_default_context(cafile=self.ca)
        ctx.load_cert_chain(self.cert, self.key)
        return httpx.Client(base_url=self.server, verify=ctx, timeout=httpx.Timeout(timeout, connect=10.0))


def list_items(api: Api, path: str, params: dict[str, str] | None = None) -> tuple[list[dict[str, Any]], str]:
    """Every object at ``path`` (paged) and the list's resourceVersion."""
    items: list[dict[str, Any]] = []
    query = {"limit": "500", **(params or {})}
    with api.client(120.0) as c:
        while True:
            resp = c.get(path, params=query)
            resp.raise_for_status()
            body = resp.json()
            items.extend(body.get("items", []))
            cont = body["metadata"].get("continue")
            if not cont:
                return items, str(body["metadata"]["resourceVersion"])
            query["continue"] = cont


class Watch:
    """A background list+watch of one collection; hands every event to ``on_event`` with its read time.

    Restarts the watch from the last resourceVersion when the server ends it; a 410 (too old) relists
    and replays the list as ADDED/MODIFIED events, so nothing is missed silently.
    """

    def __init__(self, api: Api, path: str, on_event: Callable[[Event], None]) -> None:
        self._api = api
        self._path = path
        self._on_event = on_event
        self._stop = threading.Event()
        self._ready = threading.Event()
        self.errors: list[str] = []
        self._thread = threading.Thread(target=self._run, name=f"watch {path}", daemon=True)

    def start(self, timeout: float = 60.0) -> None:
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError(f"watch {self._path} did not start within {timeout:.0f}s: {self.errors}")

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the stream to end and wait up to ``timeout`` for it; a stream with nothing to say ends
        at its next event or at the server's timeoutSeconds, so 0 leaves it to end by itself."""
        self._stop.set()
        self._thread.join(timeout=timeout)

    def _relist(self) -> str:
        items, rv = list_items(self._api, self._path)
        now = time.monotonic()
        for obj in items:
            self._on_event((now, "ADDED", obj))
        return rv

    def _run(self) -> None:
        rv = self._relist()
        self._ready.set()
        with self._api.client(None) as c:
            while not self._stop.is_set():
                params = {"watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true",
                          "timeoutSeconds": "60"}
                try:
                    with c.stream("GET", self._path, params=params) as resp:
                        resp.raise_for_status()
                        for line in resp.iter_lines():
                            if self._stop.is_set():
                                return
                            if not line:
                                continue
                            event = json.loads(line)
                            kind, obj = event["type"], event["object"]
                            if kind == "ERROR":
                                if obj.get("code") == 410:
                                    rv = self._relist()
                                    break
                                self.errors.append(str(obj.get("message")))
                                continue
                            rv = obj["metadata"]["resourceVersion"]
                            if kind != "BOOKMARK":
                                self._on_event((time.monotonic(), kind, obj))
                except (httpx.HTTPError, json.JSONDecodeError) as exc:
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                    time.sleep(0.5)


def kubectl_argv(kubectl: str, kubeconfig: Path, *args: str) -> list[str]:
    return [kubectl, "--kubeconfig", str(kubeconfig), *args]


def kubectl(kubectl_bin: str, kubeconfig: Path, *args: str, input_text: str | None = None,
            timeout: float = 600) -> str:
    proc = subprocess.run(kubectl_argv(kubectl_bin, kubeconfig, *args), input=input_text, capture_output=True,
                          text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return proc.stdout


def apply_parallel(kubectl_bin: str, kubeconfig: Path, chunks: Sequence[Sequence[dict[str, Any]]],
                   server_side: bool = True) -> list[float]:
    """``kubectl apply -f`` one multi-document file per chunk, all at once; each applier's seconds."""
    with tempfile.TemporaryDirectory(prefix="kubegang-bench-") as tmp:
        files = []
        for i, chunk in enumerate(chunks):
            path = Path(tmp) / f"burst-{i:02d}.yaml"
            path.write_text(yaml.safe_dump_all(list(chunk), sort_keys=False))
            files.append(path)

        def one(path: Path) -> float:
            t0 = time.monotonic()
            args = ["apply", "-f", str(path), "-o", "name"]
            if server_side:
                args.insert(1, "--server-side")
            kubectl(kubectl_bin, kubeconfig, *args)
            return time.monotonic() - t0

        with ThreadPoolExecutor(max_workers=len(files)) as pool:
            return list(pool.map(one, files))


def delete_collection(api: Api, path: str) -> None:
    """DELETE a collection at once with no grace period: fake pods need no kubelet to finish."""
    with api.client(300.0) as c:
        resp = c.request("DELETE", path, json={"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                                                "propagationPolicy": "Background"})
        if resp.status_code not in (200, 404):
            resp.raise_for_status()


def wait_until(what: str, predicate: Callable[[], bool], timeout: float, interval: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


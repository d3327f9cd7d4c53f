"""The operator's liveness endpoint is answered on its event loop: a hung loop fails it, which the /metrics
server (a thread) cannot show; the flag, the settings and the chart agree on it."""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, start_http_server

from kubegang.operator.__main__ import parser, settings_from_args
from kubegang.operator._health import serve_health
from kubegang.testing import free_port


def _get(url: str, timeout: float) -> int:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return int(resp.status)


def test_the_flag_sets_the_health_port_and_0_turns_it_off() -> None:
    args = parser().parse_args(["--extender-address", "x:1", "--health-port", "8081"])
    assert settings_from_args(args).health_port == 8081
    off = parser().parse_args(["--extender-address", "x:1"])
    assert settings_from_args(off).health_port == 0


@pytest.mark.asyncio(loop_scope="function")
async def test_a_hung_event_loop_fails_liveness_while_the_metrics_thread_keeps_answering() -> None:
    health, metrics = free_port(), free_port()
    server, _thread = start_http_server(metrics, addr="127.0.0.1", registry=CollectorRegistry())
    try:
        async with serve_health(health, host="127.0.0.1"):
            assert await asyncio.to_thread(_get, f"http://127.0.0.1:{health}/healthz", 5) == 200
            seen: dict[str, object] = {}

            def probe_both() -> None:  # while the loop hangs
                time.sleep(0.3)
                try:
                    seen["healthz"] = _get(f"http://127.0.0.1:{health}/healthz", 1)
                except (urllib.error.URLError, TimeoutError, OSError) as exc:
                    seen["healthz"] = exc
                seen["metrics"] = _get(f"http://127.0.0.1:{metrics}/metrics", 1)

            prober = threading.Thread(target=probe_both)
            prober.start()
            time.sleep(2.5)  # noqa: ASYNC251 -- the point: the loop hangs, as a blocking call in a handler would
            await asyncio.to_thread(prober.join, 10)
            assert isinstance(seen["healthz"], Exception), f"liveness answered {seen['healthz']} from a hung loop"
            assert seen["metrics"] == 200, "the metrics thread does not notice the hung loop"
    finally:
        server.shutdown()

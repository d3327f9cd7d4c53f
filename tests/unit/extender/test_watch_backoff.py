"""The extender's feed waits a jittered, growing delay between failed lists (kubegang.backoff), not a fixed
one in step with every other watcher, and starts from the shortest again once the API server answers."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import httpx2
import pytest

from kubegang.extender import _watch
from kubegang.extender._ledger import Ledger
from kubegang.extender._metrics import ExtenderMetrics
from kubegang.extender._watch import ClusterFeed

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_failed_initial_lists_back_off_jittered_and_growing(monkeypatch: pytest.MonkeyPatch) -> None:
    delays: list[float] = []
    down_for = 10  # initial-sync attempts that fail

    def handler(request: httpx2.Request) -> httpx2.Response:
        if len(delays) < down_for or request.url.params.get("watch"):  # watches keep failing: the loop waits
            raise httpx2.ConnectError("API server restarting", request=request)
        return httpx2.Response(200, json={"items": [], "metadata": {"resourceVersion": "1"}})

    real_sleep = asyncio.sleep

    async def record(delay: float) -> None:
        delays.append(delay)
        await real_sleep(0)

    monkeypatch.setattr(_watch.asyncio, "sleep", record)
    client = httpx2.AsyncClient(transport=httpx2.MockTransport(handler), base_url="https://api")
    feed = ClusterFeed(client, Ledger(), ExtenderMetrics(), retry_seconds=1.0, max_retry_seconds=30.0)
    task = asyncio.create_task(feed.run())
    try:
        for _ in range(1000):
            if feed.ledger.synced:
                break
            await real_sleep(0)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert feed.ledger.synced
    retries = delays[:down_for]
    assert len(retries) == down_for, delays
    assert retries[0] <= 1.0 and max(retries) <= 30.0
    assert max(retries[5:]) > 2.0, "the ceiling grows while the API server stays down"
    assert len(set(retries)) == len(retries), "jittered: no two waits alike"


async def test_the_extender_is_not_ready_once_a_watch_has_failed_for_a_minute() -> None:
    """Its ledger would miss pods bound meanwhile, and a gang placed from it could get GPUs a pod took:
    unready, it drops out of its Service and its callers wait, as they do when it is down."""
    from kubegang.extender._runtime import STALE_AFTER_SECONDS, ready

    watching = True

    def handler(request: httpx2.Request) -> httpx2.Response:
        if request.url.params.get("watch"):
            if not watching:
                raise httpx2.ConnectError("API server unreachable", request=request)
            return httpx2.Response(200, content=b'{"type": "BOOKMARK", "object": {"metadata": '
                                                b'{"resourceVersion": "2"}}}\n')
        return httpx2.Response(200, json={"items": [], "metadata": {"resourceVersion": "1"}})

    client = httpx2.AsyncClient(transport=httpx2.MockTransport(handler), base_url="https://api")
    feed = ClusterFeed(client, Ledger(), ExtenderMetrics(), retry_seconds=0.01, max_retry_seconds=0.01)
    await feed.initial_sync()
    nodes = feed.reflectors["nodes"]
    assert ready(feed.ledger, feed)
    watching = False
    task = asyncio.create_task(nodes.follow("1"))
    try:
        for _ in range(200):
            if nodes.failing_since is not None:
                break
            await asyncio.sleep(0.01)
        assert nodes.failing_since is not None
        assert ready(feed.ledger, feed)  # a moment's failure is not staleness
        nodes.failing_since -= STALE_AFTER_SECONDS  # a minute of failures
        assert not ready(feed.ledger, feed)
        watching = True  # the API server is back: the next event or bookmark is news again
        for _ in range(200):
            if nodes.failing_since is None:
                break
            await asyncio.sleep(0.01)
        assert ready(feed.ledger, feed)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_slow_requeue_patches_do_not_hold_up_the_expiry_of_reservations() -> None:
    import time

    from kubegang.extender import _runtime

    async def slow(request: httpx2.Request) -> httpx2.Response:
        await asyncio.sleep(0.4)  # an API server answering slowly (the real client waits up to 30 s)
        return httpx2.Response(200, json={})

    ledger = Ledger()
    feed = ClusterFeed(httpx2.AsyncClient(transport=httpx2.MockTransport(slow), base_url="https://api"),
                       ledger, ExtenderMetrics())
    expiries: list[float] = []
    real = ledger.expire

    def expire(now: float | None = None) -> Any:
        expiries.append(time.monotonic())
        return real(now)

    ledger.expire = expire  # type: ignore[method-assign]
    ledger.take_requeue = lambda limit: [("ns", f"p{i}") for i in range(3)]  # type: ignore[method-assign]
    task = asyncio.create_task(_runtime._housekeeping(ledger, ExtenderMetrics(), feed, 0.05, 50))
    await asyncio.sleep(1.0)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    gaps = [b - a for a, b in itertools.pairwise(expiries)]
    assert len(expiries) >= 10 and max(gaps) < 0.3, gaps  # was: one expiry per 1.2 s of patches

"""The extender's feed waits a jittered, growing delay between failed lists (kubegang.backoff), not a fixed
one in step with every other watcher, and starts from the shortest again once the API server answers."""

from __future__ import annotations

import asyncio

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

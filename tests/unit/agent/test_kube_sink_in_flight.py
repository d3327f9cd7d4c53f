"""A replay agent serving a whole shape sends at most ``max_in_flight`` writes at once: 1,024
publishers writing at the same moment timed out together on a loaded API server and never finished
the first pass. A write that waits for a slot is sent later, not dropped."""

from __future__ import annotations

import asyncio
from typing import Any

from kubegang.agent._kube import KubeSink


class SlowClient:
    def __init__(self) -> None:
        self.under_way = 0
        self.most = 0
        self.done = 0
        self.release = asyncio.Event()

    async def patch(self, *args: Any, **kwargs: Any) -> Any:
        self.under_way += 1
        self.most = max(self.most, self.under_way)
        try:
            await self.release.wait()
        finally:
            self.under_way -= 1
            self.done += 1


async def test_writes_beyond_the_cap_wait_for_a_slot_and_are_all_sent() -> None:
    client = SlowClient()
    sink = KubeSink(client, max_in_flight=3)  # type: ignore[arg-type]
    writes = [asyncio.create_task(sink.patch_status(f"node-{i}", {"gpus": []})) for i in range(20)]
    writes += [asyncio.create_task(sink.patch_labels(f"node-{i}", {"a": "b"})) for i in range(20)]
    for _ in range(20):
        await asyncio.sleep(0)
    assert client.under_way == 3
    client.release.set()
    await asyncio.gather(*writes)
    assert client.most == 3 and client.done == 40

"""A standby campaigns and answers /healthz, nothing else; a leader that loses the Lease stops its watches."""

from __future__ import annotations

import asyncio
import socket

import aiohttp

from kubegang.operator._standby import stand_by, until_lost


class Elector:
    def __init__(self) -> None:
        self.leading = asyncio.Event()
        self.holding = True

    def holds(self) -> bool:
        return self.leading.is_set() and self.holding


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_standby_answers_liveness_until_it_leads_then_frees_the_port() -> None:
    elector, port = Elector(), _free_port()
    standing = asyncio.create_task(stand_by(elector, health_port=port, host="127.0.0.1"))
    async with aiohttp.ClientSession() as session:
        for _ in range(50):
            try:
                async with session.get(f"http://127.0.0.1:{port}/healthz") as resp:
                    assert resp.status == 200
                    break
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.02)
        else:
            raise AssertionError("the standby never answered /healthz")
        assert not standing.done()
        elector.leading.set()
        await asyncio.wait_for(standing, 2)
    with socket.socket() as s:  # Kopf's liveness endpoint (a server: SO_REUSEADDR) takes the port next
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen()


async def test_a_leader_that_stops_holding_the_lease_stops_its_watches() -> None:
    elector, stop = Elector(), asyncio.Event()
    elector.leading.set()
    watching = asyncio.create_task(until_lost(elector, stop))
    await asyncio.sleep(0.05)
    assert not stop.is_set()
    elector.holding = False  # past its renew deadline
    await asyncio.wait_for(watching, 2)
    assert stop.is_set()

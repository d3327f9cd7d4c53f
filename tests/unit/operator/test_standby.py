"""A standby campaigns and answers /healthz, nothing else; a leader that loses the Lease stops its watches."""

from __future__ import annotations

import asyncio
import socket

import aiohttp

from kubegang.operator._health import serve_health
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


async def _healthz(session: aiohttp.ClientSession, port: int) -> int:
    for _ in range(50):
        try:
            async with session.get(f"http://127.0.0.1:{port}/healthz") as resp:
                return resp.status
        except aiohttp.ClientConnectionError:
            await asyncio.sleep(0.02)
    raise AssertionError("/healthz never answered")


async def test_liveness_is_answered_while_standing_by_and_after_taking_the_lead() -> None:
    elector, port = Elector(), _free_port()
    async with serve_health(port, host="127.0.0.1"), aiohttp.ClientSession() as session:
        standing = asyncio.create_task(stand_by(elector))
        assert await _healthz(session, port) == 200
        assert not standing.done()
        elector.leading.set()
        await asyncio.wait_for(standing, 2)
        assert await _healthz(session, port) == 200
    with socket.socket() as s:  # given back on exit
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen()


async def test_a_leader_that_stops_holding_the_lease_stops_its_watches() -> None:
    elector = Elector()
    elector.leading.set()
    watching = asyncio.create_task(until_lost(elector))
    await asyncio.sleep(0.05)
    assert not watching.done()
    elector.holding = False  # past its renew deadline
    await asyncio.wait_for(watching, 2)

"""Client CPU per Kubernetes-style request, httpx2 (lightkube's) against aiohttp.

``python -m bench.e2e.http_client_cost [--requests N] [--rounds N]``.

The leader's largest task is sending requests (docs/benchmarks-e2e-analysis.md, "The leader's CPU
now"): most of ``KubeApi.create``'s samples are in the HTTP client's send and response reading, not
in the objects. This measures that per-request cost alone, so a change of client can be judged
before it is made: a TLS server on loopback (a subprocess, so its CPU is not counted) answers every
POST with a small JSON object, and each client sends ``--requests`` POSTs with 20 in flight (the
operator's ``MAX_IN_FLIGHT``) over its own connection pool; the figure is this process's CPU per
request. Needs ``openssl`` for a throw-away certificate.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import httpx2

from kubegang.operator._kube import MAX_IN_FLIGHT as IN_FLIGHT

PATH = "/api/v1/namespaces/team-a/pods"
PAYLOAD = json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": {"containers": []}})

_SERVER = """
import json, ssl, sys
from aiohttp import web
body = json.dumps({"kind": "Pod", "metadata": {"name": "x", "resourceVersion": "1"}, "status": {}}).encode()
async def answer(request):
    await request.read()
    return web.Response(body=body, content_type="application/json")
app = web.Application()
app.router.add_route("*", "/{tail:.*}", answer)
ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
web.run_app(app, host="127.0.0.1", port=int(sys.argv[3]), ssl_context=ctx, print=None)
"""


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _per_request(send: Callable[[], Awaitable[None]], requests: int) -> float:
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one() -> None:
        async with gate:
            await send()

    await one()  # the first connection's handshake is not the steady cost
    start = _cpu()
    await asyncio.gather(*(one() for _ in range(requests)))
    return (_cpu() - start) / requests


async def httpx2_cost(base: str, ca: ssl.SSLContext, requests: int) -> float:
    async with httpx2.AsyncClient(verify=ca, base_url=base) as client:
        async def send() -> None:
            answer = await client.post(PATH, content=PAYLOAD, headers={"content-type": "application/json"})
            answer.json()
        return await _per_request(send, requests)


async def aiohttp_cost(base: str, ca: ssl.SSLContext, requests: int) -> float:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ca, limit=IN_FLIGHT)) as session:
        async def send() -> None:
            async with session.post(base + PATH, data=PAYLOAD, headers={"content-type": "application/json"}) as answer:
                json.loads(await answer.read())
        return await _per_request(send, requests)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--port", type=int, default=18443)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = Path(tmp, "cert.pem"), Path(tmp, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                        str(cert), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                       check=True, capture_output=True)
        server = subprocess.Popen([sys.executable, "-c", _SERVER, str(cert), str(key), str(args.port)])
        try:
            time.sleep(2.0)
            ca = ssl.create_default_context(cafile=str(cert))
            base = f"https://127.0.0.1:{args.port}"
            for round_ in range(args.rounds):
                ours = asyncio.run(httpx2_cost(base, ca, args.requests))
                other = asyncio.run(aiohttp_cost(base, ca, args.requests))
                print(f"round {round_ + 1}: httpx2 {ours * 1e6:.0f} us, aiohttp {other * 1e6:.0f} us client CPU "
                      f"per request ({ours / other:.1f}x)")
        finally:
            server.terminate()
            server.wait(timeout=10)


if __name__ == "__main__":
    main()

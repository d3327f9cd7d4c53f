"""Client CPU per Kubernetes-style request: httpx2 (lightkube's), aiohttp, and the operator's ``RestClient``.

``python -m bench.e2e.http_client_cost [--requests N] [--rounds N]``.

The leader's largest task is sending requests (docs/benchmarks-e2e-analysis.md, "The leader's CPU
now"): most of ``KubeApi.create``'s samples are in the HTTP client's send and response reading, not
in the objects. This measures that per-request cost alone, so a change of client can be judged
before it is made: a TLS server on loopback (a subprocess, so its CPU is not counted) answers every
POST with a small JSON object, and each client sends ``--requests`` POSTs with 20 in flight (the
operator's ``MAX_IN_FLIGHT``) over its own connection pool; the figure is this process's CPU per
request. The third figure is the client the operator's ``KubeApi`` sends its writes with
(``kubegang.restclient.RestClient``, aiohttp underneath, with its bearer-token header), so what the
leader pays is measured, not only what a bare client could. Needs ``openssl`` for a throw-away
certificate.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Generator
from pathlib import Path

import aiohttp
import httpx2

from bench.e2e._procstats import own_cpu_seconds
from kubegang.operator._kube import MAX_IN_FLIGHT as IN_FLIGHT
from kubegang.restclient import RestClient

PATH = "/api/v1/namespaces/team-a/pods"
PAYLOAD = json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": {"containers": []}})

WATCH_EVENTS = 20_000
"""Events in one watch stream of the second measurement (each a pod of about 2 KB, as kwok's are)."""

_SERVER = """
import json, ssl, sys
from aiohttp import web
body = json.dumps({"kind": "Pod", "metadata": {"name": "x", "resourceVersion": "1"}, "status": {}}).encode()
pod = {"kind": "Pod", "metadata": {"name": "job-0", "namespace": "team-a", "resourceVersion": "1",
       "labels": {"kubegang.io/job-name": "job", "kubegang.io/job-uid": "u" * 36},
       "annotations": {"kubegang.io/node": "node-0001", "kubegang.io/gpus": "0,1,2,3"}},
       "spec": {"nodeName": "node-0001", "containers": [{"name": "c", "image": "trainer:1",
                "env": [{"name": f"E{i}", "value": "v" * 20} for i in range(20)],
                "resources": {"limits": {"nvidia.com/gpu": "4"}}}]},
       "status": {"phase": "Running", "conditions": [{"type": t, "status": "True"} for t in ("Ready", "PodScheduled")]}}
events = b"".join(json.dumps({"type": "MODIFIED", "object": pod}).encode() + b"\\n" for _ in range(int(sys.argv[4])))
async def answer(request):
    await request.read()
    if request.query.get("watch"):
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        for start in range(0, len(events), 65536):
            await response.write(events[start:start + 65536])
        await response.write_eof()
        return response
    return web.Response(body=body, content_type="application/json")
app = web.Application()
app.router.add_route("*", "/{tail:.*}", answer)
ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
web.run_app(app, host="127.0.0.1", port=int(sys.argv[3]), ssl_context=ctx, print=None)
"""


async def _per_request(send: Callable[[], Awaitable[None]], requests: int) -> float:
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one() -> None:
        async with gate:
            await send()

    await one()  # the first connection's handshake is not the steady cost
    start = own_cpu_seconds()
    await asyncio.gather(*(one() for _ in range(requests)))
    return (own_cpu_seconds() - start) / requests


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


class _Token(httpx2.Auth):
    def auth_flow(self, request: httpx2.Request) -> Generator[httpx2.Request, httpx2.Response, None]:
        request.headers["Authorization"] = "Bearer bench"
        yield request


async def restclient_cost(base: str, ca: ssl.SSLContext, requests: int) -> float:
    client = RestClient(base, ca, _Token(), timeout_seconds=30, limit=IN_FLIGHT)
    body = json.loads(PAYLOAD)
    try:
        async def send() -> None:
            await client.request("POST", PATH, body)
        return await _per_request(send, requests)
    finally:
        await client.close()


async def httpx2_watch_cost(base: str, ca: ssl.SSLContext) -> float:
    """The production watch reader (``listwatch.Reflector.watch_once``, httpx2) per event."""
    from kubegang.listwatch import Collection, Reflector

    seen = [0]

    def sink(kind: str, obj: dict[str, object]) -> None:
        seen[0] += 1

    async with httpx2.AsyncClient(verify=ca, base_url=base) as client:
        reflector = Reflector(client, Collection("pods", "/api/v1/pods"), sink)
        start = own_cpu_seconds()
        await reflector.watch_once("1")
        return (own_cpu_seconds() - start) / max(seen[0], 1)


async def aiohttp_watch_cost(base: str, ca: ssl.SSLContext) -> float:
    """The same stream read line by line with aiohttp, each line decoded (the floor of a port)."""
    seen = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ca)) as session:
        start = own_cpu_seconds()
        async with session.get(base + "/api/v1/pods", params={"watch": "1"}) as answer:
            async for line in answer.content:
                if line.strip():
                    json.loads(line)
                    seen += 1
        return (own_cpu_seconds() - start) / max(seen, 1)


def _wait_for(port: int, server: subprocess.Popen[bytes]) -> None:
    import socket

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the loopback server exited with {server.returncode}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise SystemExit(f"the loopback server did not listen on {port} within 60 s")


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
        server = subprocess.Popen([sys.executable, "-c", _SERVER, str(cert), str(key), str(args.port),
                                   str(WATCH_EVENTS)])
        try:
            _wait_for(args.port, server)
            ca = ssl.create_default_context(cafile=str(cert))
            base = f"https://127.0.0.1:{args.port}"
            for round_ in range(args.rounds):
                ours = asyncio.run(httpx2_cost(base, ca, args.requests))
                other = asyncio.run(aiohttp_cost(base, ca, args.requests))
                operator = asyncio.run(restclient_cost(base, ca, args.requests))
                print(f"round {round_ + 1}: client CPU per request: httpx2 {ours * 1e6:.0f} us, aiohttp "
                      f"{other * 1e6:.0f} us, the operator's RestClient {operator * 1e6:.0f} us "
                      f"(httpx2 / RestClient {ours / operator:.1f}x)")
                watch = asyncio.run(httpx2_watch_cost(base, ca))
                floor = asyncio.run(aiohttp_watch_cost(base, ca))
                print(f"round {round_ + 1}: client CPU per watch event ({WATCH_EVENTS} in one stream): listwatch "
                      f"(httpx2) {watch * 1e6:.0f} us, aiohttp lines + json.loads {floor * 1e6:.0f} us")
        finally:
            server.terminate()
            server.wait(timeout=10)


if __name__ == "__main__":
    main()

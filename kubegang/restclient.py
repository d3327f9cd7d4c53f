"""``RestClient``: JSON requests to the API server over aiohttp, for the processes' hot write paths.

Why not lightkube's client there: the operator's leader spends most of a pod creation in the HTTP
client, and httpx2 (lightkube's transport) costs 1.3-1.6 ms of client CPU per request against
aiohttp's 0.27-0.31 ms with 20 in flight (``python -m bench.e2e.http_client_cost``). What lightkube
is good at stays lightkube's: the kubeconfig (contexts, in-cluster service account, client
certificates, exec plugins) is read by it, and its authentication flows are asked for the
``Authorization`` header, which is kept for ``AUTH_REFRESH_SECONDS`` and asked again after a 401.
Bodies are plain dicts in and out; an answer that is not 2xx raises ``ApiStatusError`` with the
``Status`` the API server sent. An answer that asks to be retried (429, or a 5xx with ``Retry-After``:
client-go's rule, which is also what says the server did not act on the request) is sent again after
the time it names, at most ``RETRIES`` times; ``before_retry`` may refuse (a leader past its deadline).
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
import httpx2

AUTH_REFRESH_SECONDS = 60.0
"""How long an Authorization header is reused before lightkube's flow is asked again (projected
service-account tokens rotate within the hour; exec credentials say their own expiry, and a 401 asks
at once)."""

RETRIES = 3
"""Retries of one request the API server asked to be retried (priority and fairness sheds load with 429)."""
RETRY_AFTER_CAP_SECONDS = 5.0
"""The longest ``Retry-After`` waited for before a retry (the server's own answer is 1 s)."""

MERGE_PATCH = "application/merge-patch+json"
JSON = "application/json"
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, application/json"
"""A list of the objects' metadata only (``PartialObjectMetadataList``): what a caller that needs names,
labels and annotations asks for, so neither side encodes or decodes the rest (a kwok node's status is
as large as its metadata). Plain JSON is the fallback a server without the conversion answers."""


class ApiStatusError(Exception):
    """The API server answered with an error ``Status``: ``code`` is the HTTP status (404 NotFound,
    409 Conflict or AlreadyExists, 422 Invalid, ...), ``reason`` the Status reason."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message


class _Authorization:
    """The ``Authorization`` header lightkube's auth flow for this user would send (None: none)."""

    def __init__(self, auth: httpx2.Auth | None, server: str) -> None:
        self._auth = auth
        self._server = server
        self._header: str | None = None
        self._at = -AUTH_REFRESH_SECONDS

    async def header(self) -> str | None:
        if self._auth is None:
            return None
        if time.monotonic() - self._at >= AUTH_REFRESH_SECONDS:
            flow = self._auth.async_auth_flow(httpx2.Request("GET", self._server))
            request = await flow.__anext__()
            await flow.aclose()
            self._header = request.headers.get("Authorization")
            self._at = time.monotonic()
        return self._header

    def forget(self) -> None:
        self._at = -AUTH_REFRESH_SECONDS


class RestClient:
    """Requests to one API server; ``limit`` connections are kept alive (callers keep at most that
    many requests under way, so none is opened for one call and closed)."""

    def __init__(self, server: str, ssl_context: ssl.SSLContext | bool, auth: httpx2.Auth | None, *,
                 timeout_seconds: float, limit: int) -> None:
        self.server = server.rstrip("/")
        self._ssl = ssl_context
        self._auth = _Authorization(auth, self.server)
        self._timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        self._limit = limit
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        # Made on first use: an aiohttp session belongs to the running loop.
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self._ssl, limit=self._limit), timeout=self._timeout)
        return self._session

    async def request(self, method: str, path: str, body: Mapping[str, Any] | None = None, *,
                      content_type: str = JSON, accept: str = JSON,
                      before_retry: Callable[[], None] | None = None) -> dict[str, Any]:
        """Send ``body`` (JSON) to ``path``; the decoded answer, or ``ApiStatusError``. ``accept`` may
        ask for another JSON form of the answer (``METADATA_LIST``). ``before_retry`` is called before
        a request the server asked to be retried is sent again, and may raise to stop."""
        data = None if body is None else json.dumps(body, separators=(",", ":"))
        asked_again = False
        retries = 0
        while True:
            headers = {"Accept": accept}
            if data is not None:
                headers["Content-Type"] = content_type
            authorization = await self._auth.header()
            if authorization:
                headers["Authorization"] = authorization
            async with self._open().request(method, self.server + path, data=data, headers=headers) as answer:
                raw = await answer.read()
                status = answer.status
                wait = _retry_after(status, answer.headers.get("Retry-After"))
            if status == 401 and not asked_again:
                asked_again = True
                self._auth.forget()  # a rotated token or an expired exec credential: ask again, once
                continue
            if wait is not None and retries < RETRIES:
                retries += 1
                await asyncio.sleep(wait)
                if before_retry is not None:
                    before_retry()
                continue
            break
        decoded = _decode(raw)
        if status >= 400:
            raise ApiStatusError(status, str(decoded.get("reason", "")) or answer.reason or "",
                                 str(decoded.get("message", "")) or raw[:200].decode(errors="replace"))
        return decoded

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _retry_after(status: int, header: str | None) -> float | None:
    """Seconds to wait before sending again a request the server answered so (client-go's rule: 429 or
    a 5xx that carries ``Retry-After``, which says it did not act on it); None: not to be retried."""
    if header is None or not (status == 429 or status >= 500):
        return None
    try:
        seconds = float(header)
    except ValueError:
        seconds = 1.0  # an HTTP date: rare from the API server; a second is its usual answer
    return min(max(seconds, 0.0), RETRY_AFTER_CAP_SECONDS)


def _decode(raw: bytes) -> dict[str, Any]:
    try:
        decoded = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return decoded if isinstance(decoded, dict) else {}


def rest_client(kubeconfig: str | None, *, timeout_seconds: float, limit: int) -> RestClient:
    """A client for the API server of ``kubeconfig`` (a file), or in-cluster / ``$KUBECONFIG`` when None.

    Raises ``ValueError`` naming the kubeconfig when it has no usable context.
    """
    from lightkube.config import client_adapter
    from lightkube.config.kubeconfig import KubeConfig
    from lightkube.core.exceptions import ConfigError

    try:
        config = (KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_env()).get()
    except ConfigError as exc:
        raise ValueError(f"kubeconfig {kubeconfig or '(from environment)'}: {exc}") from None
    if config is None or config.user is None:
        raise ValueError(f"kubeconfig {kubeconfig or '(from environment)'} has no current context with a user")
    context = client_adapter.verify_cluster(config.cluster, config.user, config.abs_file)
    return RestClient(config.cluster.server, context, client_adapter.user_auth(config.user),
                      timeout_seconds=timeout_seconds, limit=limit)

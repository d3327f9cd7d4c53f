"""How a kubegang process serves its control surfaces: flags, TLS, the checking middleware, /metrics.

Why one module: the three processes must offer the same flags (``--metrics-auth``,
``--metrics-tls-cert``, ``--metrics-tls-key``), the same TLS and the same refusals, and the chart, the
local stack and the docs describe them once. With auth on (the default) a metrics listener speaks HTTPS
and every protected path needs a bearer token that :class:`RequestAuthorizer` accepts; ``/healthz`` and
``/readyz`` stay open on it, because kubelet probes carry no token. Without a certificate the process
makes a self-signed one at start (as controller-runtime does), so auth never needs TLS files to exist;
the chart mounts a certificate Prometheus can verify instead.
"""

from __future__ import annotations

import argparse
import asyncio
import enum
import logging
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, disable_created_metrics, generate_latest

from kubegang._flags import check_cert_and_key
from kubegang.authn._review import DEFAULT_ALLOWED_TTL, RequestAuthorizer, ReviewApi, Verdict
from kubegang.tls import files_stamp

log = logging.getLogger(__name__)

_STATUS = {Verdict.UNAUTHENTICATED: 401, Verdict.FORBIDDEN: 403, Verdict.UNAVAILABLE: 503}
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class MetricsAuth(enum.Enum):
    """Whether a process checks who reads its metrics and debug endpoints."""

    ON = "on"
    """HTTPS, and a token that TokenReview and SubjectAccessReview accept (the default)."""
    OFF = "off"
    """Plain HTTP, anyone who reaches the port (a local run on loopback)."""


@dataclass(frozen=True)
class SecureServing:
    """How one process serves ``/metrics`` (and the extender ``/debug/snapshot``)."""

    auth: MetricsAuth = MetricsAuth.ON
    """Check callers (HTTPS + reviews), or serve plain HTTP to anyone."""
    cert: Path | None = None
    """Serving certificate (PEM) for the HTTPS listener; None: a self-signed one made at start."""
    key: Path | None = None
    """Its private key (PEM)."""
    allowed_ttl: float = DEFAULT_ALLOWED_TTL
    """Seconds an allowed token is trusted before it is reviewed again."""

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise ValueError("--metrics-tls-cert and --metrics-tls-key: give both, or neither")
        if self.cert is not None and self.key is not None:  # refused at start, not at the first handshake
            check_cert_and_key("--metrics-tls-cert", self.cert, "--metrics-tls-key", self.key)

    @property
    def checked(self) -> bool:
        """True when callers are checked (and the listener is HTTPS)."""
        return self.auth is MetricsAuth.ON

    @property
    def scheme(self) -> str:
        """``https`` or ``http``: what a scraper must use."""
        return "https" if self.checked else "http"

    def ssl_context(self) -> ssl.SSLContext | None:
        """The listener's TLS context (no client certificate asked for), or None for plain HTTP."""
        if not self.checked:
            return None
        if self.cert is not None and self.key is not None:
            return ReloadingCertificate(self.cert, self.key).listening_context()
        ctx = _server_context()
        from kubegang.tls import make_ca, make_leaf

        ca = make_ca("kubegang-metrics-self-signed")
        leaf = make_leaf(ca, socket.gethostname(), server_names=["localhost", "127.0.0.1", socket.gethostname()])
        with tempfile.TemporaryDirectory() as tmp:  # ssl loads from files only; they live for this call
            cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
            cert.write_bytes(leaf.cert_pem + ca.cert_pem)
            key.write_bytes(leaf.key_pem)
            key.chmod(0o600)
            ctx.load_cert_chain(str(cert), str(key))
        log.info("metrics: no --metrics-tls-cert given; serving HTTPS with a self-signed certificate")
        return ctx


def _server_context(cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert is not None and key is not None:
        ctx.load_cert_chain(str(cert), str(key))
    return ctx


RELOAD_CHECK_SECONDS = 10.0
"""Least time between two looks at the certificate files (a look is two ``stat`` calls)."""


class ReloadingCertificate:
    """A serving certificate that new connections get fresh from its files once they change.

    Why: cert-manager renews the metrics certificate and kubelet rewrites the mounted Secret in place;
    a listener that loaded it once would serve the old one until it expired and Prometheus refused it.
    The handshake itself looks (OpenSSL calls the SNI callback on every handshake, with or without SNI),
    at most every ``check_seconds``: two ``stat`` calls, and a load only when a file changed. Files that
    do not load (half written) are skipped, and the last good certificate stays in use. No client
    certificate is asked for: the token is the credential here (``kubegang.tls.ReloadingServerTLS`` is the
    mTLS counterpart).
    """

    def __init__(self, cert: Path, key: Path, *, check_seconds: float = RELOAD_CHECK_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._paths = (cert, key)
        self._check_seconds = check_seconds
        self._clock = clock
        self._stamp = files_stamp(self._paths)
        self._current = _server_context(cert, key)
        self._looked = clock()
        self.reloads = 0
        """Certificates loaded after the first."""

    def _look(self) -> None:
        now = self._clock()
        if now - self._looked < self._check_seconds:
            return
        self._looked = now
        try:
            stamp = files_stamp(self._paths)
            if stamp == self._stamp:
                return
            context = _server_context(*self._paths)
            if files_stamp(self._paths) != stamp:
                return  # changed while being read: look again next time
        except (OSError, ssl.SSLError) as exc:
            log.warning("metrics certificate %s changed but does not load (%s); keeping the last one",
                        self._paths[0], exc)
            return
        self._stamp, self._current = stamp, context
        self.reloads += 1
        log.info("metrics certificate %s reloaded", self._paths[0])

    def listening_context(self) -> ssl.SSLContext:
        """The context to listen with; each handshake moves onto the current certificate."""
        listening = _server_context(*self._paths)

        def switch(conn: ssl.SSLSocket | ssl.SSLObject, _name: str | None, _ctx: ssl.SSLContext) -> None:
            self._look()
            conn.context = self._current

        listening.sni_callback = switch
        return listening


def add_serving_flags(parser: argparse._ActionsContainer) -> None:
    """The three flags, identical in every process."""
    parser.add_argument("--metrics-auth", type=_auth, default=MetricsAuth.ON, metavar="on|off",
                        help="on (default): /metrics over HTTPS, readable only with a bearer token whose user RBAC "
                             "allows 'get' on the URL (TokenReview + SubjectAccessReview); off: plain HTTP for anyone")
    parser.add_argument("--metrics-tls-cert", type=Path, default=None,
                        help="serving certificate of the metrics listener (default: self-signed at start)")
    parser.add_argument("--metrics-tls-key", type=Path, default=None, help="its private key")


def serving_from_args(args: argparse.Namespace) -> SecureServing:
    """:class:`SecureServing` from the flags :func:`add_serving_flags` added (ValueError names the flag)."""
    return SecureServing(auth=args.metrics_auth, cert=args.metrics_tls_cert, key=args.metrics_tls_key)


def _auth(value: str) -> MetricsAuth:
    try:
        return MetricsAuth(value.lower())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--metrics-auth: expected on or off, got {value!r}") from None


def _bearer(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def checking_middleware(authorizer: RequestAuthorizer, protected: Iterable[str]) -> Middleware:
    """An aiohttp middleware that lets a request to a ``protected`` path through only when allowed.

    Each path is reviewed as a non-resource URL with verb ``get`` (RBAC: ``nonResourceURLs``).
    Other paths (health, readiness, the scheduler verbs) pass untouched.
    """
    paths = frozenset(protected)

    @web.middleware
    async def check(request: web.Request, handler: _Handler) -> web.StreamResponse:
        if request.path not in paths:
            return await handler(request)
        decision = await authorizer.check(_bearer(request), request.path, "get")
        if decision.verdict is Verdict.ALLOWED:
            return await handler(request)
        headers = {"WWW-Authenticate": 'Bearer realm="kubegang"'} if decision.verdict is Verdict.UNAUTHENTICATED else {}
        return web.Response(status=_STATUS[decision.verdict], text=decision.reason + "\n", headers=headers)

    return check


def metrics_handler(registry: CollectorRegistry) -> _Handler:
    """``GET /metrics`` in Prometheus' text format, from ``registry``.

    Without the ``*_created`` series prometheus_client adds to every counter, histogram and summary
    (one more series each, with the time it was made): Prometheus' text format does not use them, so
    each is a series of its own that no rule or dashboard reads, and it doubles the count of every
    labelled counter. The switch is process-wide; every kubegang process serves metrics here only.
    """
    disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus_client leaves it unannotated

    async def metrics(_: web.Request) -> web.StreamResponse:
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    return metrics


def guard(app: web.Application, serving: SecureServing, api: ReviewApi, protected: Iterable[str]) -> None:
    """Put the check in front of ``protected`` paths of ``app`` when ``serving`` says so.

    ``api`` sends the reviews with the process's own credentials; its client must belong to the event
    loop that serves ``app``.
    """
    if serving.checked:
        authorizer = RequestAuthorizer(api, allowed_ttl=serving.allowed_ttl)
        app.middlewares.append(checking_middleware(authorizer, protected))


class ThreadedSite:
    """An aiohttp app served from a thread with its own event loop (the operator's /metrics).

    Why a thread: the operator's loop runs its watches and the admission cycle; a scrape, and the reviews it
    may cause, must neither wait for that loop nor add to it.
    """

    def __init__(self, build: Callable[[], web.Application], host: str, port: int,
                 ssl_context: ssl.SSLContext | None) -> None:
        self._build, self._host, self._port, self._ssl = build, host, port, ssl_context
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.port = 0
        """The bound port, once started."""
        self._thread = threading.Thread(target=self._main, name=f"metrics-{port}", daemon=True)

    def start(self, timeout: float = 10.0) -> ThreadedSite:
        """Start and wait until the port is bound; re-raise the reason it could not be."""
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError(f"metrics listener on port {self._port} did not start within {timeout:.0f}s")
        if self._error is not None:
            raise self._error
        return self

    def _main(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        try:
            runner = web.AppRunner(self._build(), access_log=None, handle_signals=False)
            await runner.setup()
            await web.TCPSite(runner, self._host, self._port, ssl_context=self._ssl).start()
            self.port = int(runner.addresses[0][1])
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        await asyncio.Event().wait()  # serve until the process exits (daemon thread)

"""kube-scheduler's extender verbs over HTTPS: a thin adapter over :class:`SchedulerAuthority`.

Each handler does four things only: read a bounded body, validate it into the wire model, ask the
authority, and serialise the answer with Go field names. Whatever arrives — broken JSON, wrong
types, a body over the limit, an authority bug — the client gets a status and a message naming the
problem, the error is counted, and the server keeps serving.

Two listeners, on purpose (DESIGN.md, Security): the verbs and ``/debug/snapshot`` on the mTLS
port, ``/healthz``, ``/readyz`` and ``/metrics`` on a port that kubelet and Prometheus reach
without client certificates and that exposes no scheduling data. With ``--metrics-auth=on`` (the
default) that port is HTTPS and ``/metrics`` needs a bearer token RBAC allows ``get`` on it, and
``/debug/snapshot`` needs one too, on top of the client certificate (``kubegang.authn``); the health
paths stay open to kubelet.

There is no ``bind`` route: kube-scheduler's default binder binds, see docs/extender.md.
"""

from __future__ import annotations

import json
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import web
from pydantic import ValidationError

from kubegang.authn import ReviewApi, SecureServing, guard, metrics_handler
from kubegang.extender._authority import SchedulerAuthority
from kubegang.extender._metrics import ExtenderMetrics
from kubegang.extender._pods import DemandError, pod_demand
from kubegang.extender._wire import (
    MAX_EXTENDER_PRIORITY,
    MIN_EXTENDER_PRIORITY,
    ExtenderArgs,
    ExtenderFilterResult,
    ExtenderPreemptionArgs,
    ExtenderPreemptionResult,
    MetaPod,
    MetaVictims,
    _Wire,
)

log = logging.getLogger(__name__)
_M = TypeVar("_M", bound=_Wire)

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
"""Largest request body accepted; a 5,000-node ``NodeNames`` request is well under 200 KiB."""

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_AUTHORITY: web.AppKey[SchedulerAuthority] = web.AppKey("authority", SchedulerAuthority)
_METRICS: web.AppKey[ExtenderMetrics] = web.AppKey("metrics", ExtenderMetrics)


class BadRequest(Exception):
    """A request we refuse; ``status`` and ``message`` go back to the client verbatim."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message


def _json_response(data: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=json.dumps(data, separators=(",", ":")).encode(), status=status,
        content_type="application/json",
    )


def _describe(error: ValidationError) -> str:
    """One line per problem, each naming the field path the way the wire spells it."""
    parts = []
    for item in error.errors()[:10]:
        if item["type"] == "json_invalid":
            return f"malformed JSON: {item['msg']}"
        path = ".".join(str(p) for p in item["loc"]) or "(body)"
        parts.append(f"{path}: {item['msg']}")
    more = error.error_count() - len(parts)
    return "invalid request: " + "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


async def _read_model(request: web.Request, model: type[_M]) -> _M:
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge as exc:
        raise BadRequest(413, "too_large", f"request body too large: {exc.text}") from None
    if not body:
        raise BadRequest(400, "bad_request", "empty request body; expected a JSON object")
    try:
        return model.from_wire(body)
    except ValidationError as exc:
        raise BadRequest(400, "bad_request", _describe(exc)) from None


def _timed(verb: str, handler: _Handler) -> _Handler:
    """Wrap a handler with latency/count metrics and the never-crash error mapping."""

    async def wrapper(request: web.Request) -> web.StreamResponse:
        metrics = request.app[_METRICS]
        start = time.perf_counter()
        try:
            response = await handler(request)
        except BadRequest as exc:
            metrics.errors.labels(verb, exc.kind).inc()
            response = web.Response(status=exc.status, text=exc.message + "\n")
        except Exception:
            log.exception("extender verb %s failed", verb)
            metrics.errors.labels(verb, "internal").inc()
            response = web.Response(status=500, text=f"internal error in {verb}; see extender logs\n")
        metrics.request_duration.labels(verb).observe(time.perf_counter() - start)
        metrics.requests.labels(verb, str(response.status)).inc()
        return response

    return wrapper


def filter_answer(authority: SchedulerAuthority, args: ExtenderArgs) -> dict[str, Any]:
    """The ``ExtenderFilterResult`` for ``args`` (server-side work of ``filter``, minus I/O)."""
    try:
        pod = pod_demand(args.pod)
    except DemandError as exc:
        # 200 with Error: kube-scheduler shows this message on the pod, a 4xx would hide it.
        return ExtenderFilterResult(error=str(exc)).to_wire()
    verdict = authority.filter(pod, args.candidate_names())
    result: dict[str, Any] = {
        "FailedNodes": verdict.failed,
        "FailedAndUnresolvableNodes": verdict.unresolvable,
        "Error": "",
    }
    if args.node_names is None and args.nodes is not None:
        result["Nodes"] = args.nodes.keep(set(verdict.passed)).model_dump(mode="json", by_alias=True)
    else:
        result["NodeNames"] = verdict.passed
    return result


def prioritize_answer(authority: SchedulerAuthority, args: ExtenderArgs) -> list[dict[str, Any]]:
    """The ``HostPriorityList`` for ``args``; BadRequest for a pod that cannot be read."""
    try:
        pod = pod_demand(args.pod)
    except DemandError as exc:
        raise BadRequest(400, "bad_request", str(exc)) from None
    out = []
    for host, score in authority.prioritize(pod, args.candidate_names()):
        if not MIN_EXTENDER_PRIORITY <= score <= MAX_EXTENDER_PRIORITY:
            raise ValueError(f"authority scored {host} {score}, outside 0..10")
        out.append({"Host": host, "Score": score})
    return out


async def _filter(request: web.Request) -> web.StreamResponse:
    args = await _read_model(request, ExtenderArgs)
    return _json_response(filter_answer(request.app[_AUTHORITY], args))


async def _prioritize(request: web.Request) -> web.StreamResponse:
    args = await _read_model(request, ExtenderArgs)
    return _json_response(prioritize_answer(request.app[_AUTHORITY], args))


async def _preempt(request: web.Request) -> web.StreamResponse:
    args = await _read_model(request, ExtenderPreemptionArgs)
    try:
        pod = pod_demand(args.pod)
    except DemandError as exc:
        raise BadRequest(400, "bad_request", str(exc)) from None
    offered = args.meta_victims()
    candidates = {node: [p.uid for p in v.pods] for node, v in offered.items()}
    kept = request.app[_AUTHORITY].preempt(pod, candidates)
    result = ExtenderPreemptionResult(
        node_name_to_meta_victims={
            node: MetaVictims(
                pods=[MetaPod(uid=uid) for uid in uids],
                num_pdb_violations=offered[node].num_pdb_violations if node in offered else 0,
            )
            for node, uids in kept.items()
        }
    )
    return _json_response(result.to_wire())


async def _snapshot(request: web.Request) -> web.StreamResponse:
    return _json_response(request.app[_AUTHORITY].snapshot())


def build_extender_app(
    authority: SchedulerAuthority,
    metrics: ExtenderMetrics,
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    serving: SecureServing | None = None,
    reviews: ReviewApi | None = None,
) -> web.Application:
    """The mTLS application: ``POST /filter``, ``/prioritize``, ``/preempt``; ``GET /debug/snapshot``.

    With ``serving`` checked (and the ``reviews`` to ask), ``/debug/snapshot`` also needs a token.
    """
    app = web.Application(client_max_size=max_body_bytes)
    if serving is not None and reviews is not None:
        guard(app, serving, reviews, ["/debug/snapshot"])
    app[_AUTHORITY] = authority
    app[_METRICS] = metrics
    app.router.add_post("/filter", _timed("filter", _filter))
    app.router.add_post("/prioritize", _timed("prioritize", _prioritize))
    app.router.add_post("/preempt", _timed("preempt", _preempt))
    app.router.add_get("/debug/snapshot", _timed("snapshot", _snapshot))
    return app


def build_health_app(metrics: ExtenderMetrics, ready: Callable[[], bool], serving: SecureServing | None = None,
                     reviews: ReviewApi | None = None) -> web.Application:
    """The health application: ``/healthz`` (alive), ``/readyz`` (ledger synced), ``/metrics`` (checked
    when ``serving`` says so, with the ``reviews`` to ask)."""
    app = web.Application()
    if serving is not None and reviews is not None:
        guard(app, serving, reviews, ["/metrics"])

    async def healthz(_: web.Request) -> web.StreamResponse:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.StreamResponse:
        if ready():
            return web.Response(text="ok\n")
        return web.Response(status=503, text="ledger not synced yet\n")

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_handler(metrics.registry))
    return app


@dataclass
class RunningSite:
    """A started listener; ``port`` is the bound one (useful with port 0)."""

    runner: web.AppRunner
    """The aiohttp runner; ``await close()`` stops it."""
    host: str
    """Bound address."""
    port: int
    """Bound port."""

    async def close(self) -> None:
        """Stop accepting and finish in-flight requests."""
        await self.runner.cleanup()


async def serve(app: web.Application, host: str, port: int,
                ssl_context: ssl.SSLContext | None = None) -> RunningSite:
    """Start ``app`` on ``host:port`` (0 = ephemeral); TLS when ``ssl_context`` is given."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
    await site.start()
    bound = runner.addresses[0]
    return RunningSite(runner=runner, host=str(bound[0]), port=int(bound[1]))

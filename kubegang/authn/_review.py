"""Who may read a control surface: a bearer token checked with TokenReview, then SubjectAccessReview.

Why in the core: the operator, the extender and the agent all serve ``/metrics`` (and the extender
``/debug/snapshot``), and the rule "an anonymous caller reads nothing" must be one rule. It is the one
controller-runtime applies to Kueue's metrics (``filters.WithAuthenticationAndAuthorization``): the API
server says who the token belongs to (TokenReview) and whether that user may ``get`` the request's
non-resource URL (SubjectAccessReview), so access is granted with ordinary RBAC
(``nonResourceURLs: ["/metrics"], verbs: ["get"]``) and nothing here keeps its own list of users.

Answers are cached per (token, path, verb): a Prometheus scraping every 15 s costs one pair of reviews
per ``allowed_ttl`` rather than one per scrape, and a caller sending garbage costs one pair per
``denied_ttl``. A review that fails (API server unreachable) is not cached and answers UNAVAILABLE, so
the endpoint fails closed and recovers with the API server.
"""

from __future__ import annotations

import enum
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger(__name__)

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
"""Where TokenReviews are created."""
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
"""Where SubjectAccessReviews are created."""
DEFAULT_ALLOWED_TTL = 30.0
"""Seconds a positive answer is reused: two 15 s scrapes per review, and a revoked RoleBinding or an
expired token stops working within half a minute."""
DEFAULT_DENIED_TTL = 5.0
"""Seconds a refusal is reused: short, so that a binding just created works at once, yet a flood of
bad requests cannot turn into a flood of reviews."""
DEFAULT_CACHE_SIZE = 1024
"""Most answers kept; the oldest go first, so random tokens cannot grow the process."""


class Verdict(enum.Enum):
    """What a request is told."""

    ALLOWED = "allowed"
    """The token is valid and its user may do this: serve it."""
    UNAUTHENTICATED = "unauthenticated"
    """No token, or the API server does not know it: HTTP 401."""
    FORBIDDEN = "forbidden"
    """A valid token whose user RBAC does not allow this: HTTP 403."""
    UNAVAILABLE = "unavailable"
    """The API server could not be asked: HTTP 503 (fail closed, not cached)."""


@dataclass(frozen=True)
class Decision:
    """A verdict, the user it is about (when known), and why, for the response body and the log."""

    verdict: Verdict
    """The outcome."""
    user: str | None
    """The authenticated user name; None when there is none."""
    reason: str
    """One line for the caller."""


class ReviewApi(Protocol):
    """Creates a review object and returns the API server's answer (the object with its status)."""

    async def create_review(self, path: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """POST ``body`` to ``path``; raise on any failure (network, non-2xx)."""
        ...


class ReviewError(Exception):
    """The API server could not answer a review."""


class RequestAuthorizer:
    """Decides whether a bearer token may ``verb`` a non-resource ``path`` (see the module docstring)."""

    def __init__(
        self,
        api: ReviewApi,
        *,
        allowed_ttl: float = DEFAULT_ALLOWED_TTL,
        denied_ttl: float = DEFAULT_DENIED_TTL,
        cache_size: int = DEFAULT_CACHE_SIZE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if allowed_ttl < 0 or denied_ttl < 0 or cache_size < 1:
            raise ValueError(
                f"RequestAuthorizer: allowed_ttl and denied_ttl must be >= 0 and cache_size >= 1, got "
                f"{allowed_ttl}, {denied_ttl}, {cache_size}"
            )
        self._api = api
        self._allowed_ttl = allowed_ttl
        self._denied_ttl = denied_ttl
        self._cache_size = cache_size
        self._clock = clock
        self._cache: OrderedDict[tuple[str, str, str], tuple[float, Decision]] = OrderedDict()
        self.reviews = 0
        """Review pairs sent to the API server so far (what the cache saves is visible in tests)."""

    async def check(self, token: str | None, path: str, verb: str = "get") -> Decision:
        """The decision for one request; never raises."""
        if not token:
            return Decision(Verdict.UNAUTHENTICATED, None, "a bearer token is required (Authorization: Bearer ...)")
        # The token itself is never kept: a hash keys the cache.
        key = (hashlib.sha256(token.encode()).hexdigest(), path, verb)
        now = self._clock()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            self._cache.move_to_end(key)
            return cached[1]
        try:
            decision = await self._review(token, path, verb)
        except Exception as exc:  # any failure to ask is a refusal, never a crash or an open door
            log.warning("cannot review a request for %s: %s", path, exc)
            return Decision(Verdict.UNAVAILABLE, None, f"cannot check the token with the API server: {exc}")
        ttl = self._allowed_ttl if decision.verdict is Verdict.ALLOWED else self._denied_ttl
        self._cache[key] = (now + ttl, decision)
        self._cache.move_to_end(key)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return decision

    async def _review(self, token: str, path: str, verb: str) -> Decision:
        self.reviews += 1
        answer = await self._api.create_review(TOKEN_REVIEWS, {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}})
        status = answer.get("status") or {}
        if not status.get("authenticated"):
            return Decision(Verdict.UNAUTHENTICATED, None,
                            f"the token is not valid: {status.get('error') or 'not authenticated'}")
        user = status.get("user") or {}
        name = str(user.get("username", ""))
        spec: dict[str, Any] = {"user": name, "groups": list(user.get("groups") or []),
                                "nonResourceAttributes": {"path": path, "verb": verb}}
        if user.get("uid"):
            spec["uid"] = user["uid"]
        if user.get("extra"):
            spec["extra"] = user["extra"]
        answer = await self._api.create_review(ACCESS_REVIEWS, {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec})
        status = answer.get("status") or {}
        if status.get("allowed") and not status.get("denied"):
            return Decision(Verdict.ALLOWED, name, "allowed")
        why = status.get("reason") or status.get("evaluationError") or "no RBAC rule allows it"
        return Decision(Verdict.FORBIDDEN, name, f'user "{name}" may not {verb} {path}: {why}')


class KubeReviewApi:
    """:class:`ReviewApi` over an httpx2 client whose base URL and credentials are the API server's."""

    def __init__(self, client: Any) -> None:
        self._client = client

    async def create_review(self, path: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        response = await self._client.post(path, json=dict(body))
        if response.status_code // 100 != 2:
            raise ReviewError(f"POST {path}: HTTP {response.status_code}: {response.text[:200]}")
        answer: Mapping[str, Any] = response.json()
        return answer

    async def aclose(self) -> None:
        """Close the client."""
        await self._client.aclose()


def kube_review_api(kubeconfig: str | None) -> KubeReviewApi:
    """Reviews sent with the process's own credentials (``kubeconfig``, else in-cluster / $KUBECONFIG).

    Its client must be made on the event loop that uses it (the operator serves from a thread).
    """
    import httpx2
    from lightkube.config import client_adapter
    from lightkube.config.kubeconfig import KubeConfig

    config = (KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_env()).get()
    if config is None:
        raise ValueError(f"kubeconfig {kubeconfig or '(from environment)'} has no current context")
    return KubeReviewApi(client_adapter.AsyncClient(config, client_adapter.ConnectionParams(
        timeout=httpx2.Timeout(10.0))))

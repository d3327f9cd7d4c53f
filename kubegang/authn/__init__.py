"""Authenticated control surfaces: ``/metrics`` and ``/debug/snapshot`` readable only with RBAC.

A bearer token is checked with TokenReview, its user with a SubjectAccessReview for the request's
non-resource URL (``get``), answers are cached briefly, and a listener with auth on speaks HTTPS.
Used by the operator, the extender and the agent alike (docs/metrics.md, "Who may scrape").
"""

from kubegang.authn._review import (
    ACCESS_REVIEWS,
    DEFAULT_ALLOWED_TTL,
    DEFAULT_DENIED_TTL,
    TOKEN_REVIEWS,
    Decision,
    KubeReviewApi,
    RequestAuthorizer,
    ReviewApi,
    ReviewError,
    Verdict,
    kube_review_api,
)
from kubegang.authn._serve import (
    MetricsAuth,
    SecureServing,
    ThreadedSite,
    add_serving_flags,
    checking_middleware,
    guard,
    metrics_handler,
    serving_from_args,
)

__all__ = [
    "ACCESS_REVIEWS",
    "DEFAULT_ALLOWED_TTL",
    "DEFAULT_DENIED_TTL",
    "TOKEN_REVIEWS",
    "Decision",
    "KubeReviewApi",
    "MetricsAuth",
    "RequestAuthorizer",
    "ReviewApi",
    "ReviewError",
    "SecureServing",
    "ThreadedSite",
    "Verdict",
    "add_serving_flags",
    "checking_middleware",
    "guard",
    "kube_review_api",
    "metrics_handler",
    "serving_from_args",
]

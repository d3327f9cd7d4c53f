"""Extender metrics that docs/metrics.md describes by value, read after what they count."""

from __future__ import annotations

from kubegang.extender._metrics import ExtenderMetrics
from kubegang.extender._runtime import publish

from .test_ledger import make, reserve  # type: ignore[import-not-found]


def test_the_reservations_gauge_counts_the_reservations_held() -> None:
    """kubegang_extender_reservations: gang reservations held and not yet turned into pods."""
    ledger, metrics = make(4), ExtenderMetrics()

    def held() -> float | None:
        publish(ledger, metrics)  # the housekeeping refresh
        return metrics.registry.get_sample_value("kubegang_extender_reservations")

    assert held() == 0
    reserve(ledger, "job-1", pods=2)
    reserve(ledger, "job-2", pods=1)
    assert held() == 2
    ledger.release("job-1")
    assert held() == 1

"""The extender learns the cluster's pod shapes, so FGD scoring measures fragmentation against them."""

from __future__ import annotations

from kubegang.placement import TaskShape

from .test_ledger import make, pod


def test_pods_that_hold_gpus_are_counted_once_in_the_workload_mix() -> None:
    ledger = make(nodes=4)
    before = dict(ledger._mix.distribution())
    for i in range(300):
        ledger.upsert_pod(pod(f"u{i}", 3, node_name=f"n{i % 4}", phase="Running"))
        ledger.delete_pod(f"u{i}")
    for _ in range(3):  # the same pod seen again (a resync) is not counted again
        ledger.upsert_pod(pod("again", 3, node_name="n0", phase="Running"))
    ledger._mix.refresh()
    after = dict(ledger._mix.distribution())
    three = TaskShape(3)
    assert three not in before
    assert after[three] > 0.5
    assert ledger._snapshot.workload is ledger._mix

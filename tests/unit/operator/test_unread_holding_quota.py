"""A GPUJob that holds an admission and was never readable is counted in its queue from its status.

An operator upgraded over an object its new model refuses, or a new leader meeting a job edited (``cpu:
"two"``, which the CRD lets through) while no operator ran, has no readable view of it to keep. It used
to leave such a job uncounted, so its queue's quota went to a second gang. Now what is readable without
the spec model is counted: ``spec.queue`` and ``status.totalGPUs``, in the flavour of the nodes of
``status.placement`` (``ClusterCache.unread_holding``, ``QuotaBook.record_holder``). These tests drive
the real cache, quota book, cycle and report (conftest's ``World``, the ``Controller`` step).
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest

from kubegang.admission import AdmitResult
from kubegang.operator._admission import Admission
from kubegang.operator._cache import UnreadHolding
from kubegang.operator._controller import Controller
from kubegang.operator._quota_book import QuotaBook
from kubegang.operator._types import WaitReason

from .conftest import LOWER_PRIORITY, World, gpu_queue, make_job_body

FLAVOR = "nvidia.com/gpu"
RUNNING = {"phase": "Running", "admittedAt": "2025-01-01T00:00:01Z", "totalGPUs": 8,
           "placement": {"pods": [{"index": 0, "node": "n1", "gpus": list(range(8))}]}}


def _never_read(name: str = "old", status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    """A job of 8 GPUs that holds an admission (``status``), its template CPU request unreadable."""
    body = make_job_body(name, replicas=1, gpus=8, status=copy.deepcopy(RUNNING if status is None else status),
                         **spec)
    body["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "two"}
    return body


def _readable(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with its spec fixed (a new generation), as the watch delivers it."""
    fixed = copy.deepcopy(body)
    fixed["metadata"]["generation"] = 2
    fixed["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "2"}
    return fixed


def _second(w: World) -> None:
    w.submit(make_job_body("b", replicas=1, gpus=8, created="2025-01-01T00:00:05Z", priority=1000))


def _usage(w: World, queue: str = "team-a") -> dict[str, int]:
    return dict(w.quota.tree.status(queue).usage)


async def _queued_for_quota(w: World) -> None:
    [b] = await w.cycle()
    assert (b.job, b.result, b.reason) == ("team-a/b", AdmitResult.QUEUED, WaitReason.QUOTA_EXHAUSTED), b


async def test_a_running_job_never_read_takes_its_queues_quota_from_its_status() -> None:
    # Its queue lets a higher priority evict lower ones: the job still cannot be a victim (the cycle
    # cannot evict what it cannot read), so the second gang waits for quota.
    w = World({"team-a": 8}, {"n1": 8, "n2": 8}, preemption=LOWER_PRIORITY)
    assert w.cache.upsert_job(_never_read()) is None
    _second(w)
    await _queued_for_quota(w)
    assert "uid-old" in w.quota.tree and "uid-b" not in w.quota.tree
    assert _usage(w) == {FLAVOR: 8000}
    b = w.cache.job("uid-b")
    assert b is not None
    assert w.quota.running() == [] and w.quota.preemption_candidates(b) == []
    assert w.cache.holding() == [] and w.kube.deleted == []


async def test_deleting_a_job_never_read_frees_its_quota() -> None:
    w = World({"team-a": 8}, {"n1": 8, "n2": 8})
    w.cache.upsert_job(_never_read())
    _second(w)
    await _queued_for_quota(w)
    w.delete_job("uid-old")
    [b] = await w.cycle()
    assert b.result is AdmitResult.ADMITTED, b
    assert "uid-old" not in w.quota.tree and _usage(w) == {FLAVOR: 8000}


async def test_a_job_never_read_that_becomes_readable_is_counted_once() -> None:
    w = World({"team-a": 8}, {"n1": 8, "n2": 8})
    old = _never_read()
    w.cache.upsert_job(old)
    _second(w)
    await _queued_for_quota(w)
    assert w.cache.upsert_job(_readable(old)) is not None
    assert "uid-old" not in w.cache.unread_holding
    await _queued_for_quota(w)
    assert _usage(w) == {FLAVOR: 8000}  # its 8 GPUs, not 16
    assert [job.uid for job in w.quota.running()] == ["uid-old"]  # now the job it is
    w.cache.upsert_queue(gpu_queue("team-a", 8, weight=2))  # and after a rebuild, still once
    await _queued_for_quota(w)
    assert _usage(w) == {FLAVOR: 8000}


async def test_a_rebuilt_tree_and_a_new_leader_keep_a_job_never_read_counted() -> None:
    w = World({"team-a": 8}, {"n1": 8, "n2": 8})
    w.cache.upsert_job(_never_read())
    _second(w)
    await _queued_for_quota(w)
    w.cache.upsert_queue(gpu_queue("team-a", 8, weight=2))  # a queue edit rebuilds the tree
    await _queued_for_quota(w)
    assert _usage(w) == {FLAVOR: 8000}
    book = QuotaBook(priority_of=w.cache.priority_of, node_products=lambda: w.cache.gpu_products)
    Admission(w.cache, book, w.placement, w.kube).sync_queues()  # a new leader on the same cache
    assert "uid-old" in book.tree and dict(book.tree.status("team-a").usage) == {FLAVOR: 8000}
    assert book.running() == []


async def test_a_job_never_read_that_stops_holding_gives_its_quota_back() -> None:
    w = World({"team-a": 8}, {"n1": 8, "n2": 8})
    w.cache.upsert_job(_never_read())
    _second(w)
    await _queued_for_quota(w)
    w.cache.upsert_job(_never_read(status={"phase": "Queued", "totalGPUs": 8}))
    [b] = await w.cycle()
    assert b.result is AdmitResult.ADMITTED, b
    assert "uid-old" not in w.quota.tree


async def test_a_changed_total_replaces_the_count() -> None:
    w = World({"team-a": 8}, {"n1": 8, "n2": 8})
    w.cache.upsert_job(_never_read(status={**RUNNING, "totalGPUs": 0.5}))
    await w.cycle()
    assert _usage(w) == {FLAVOR: 500}  # a shared GPU's share, in thousandths
    w.cache.upsert_job(_never_read())
    await w.cycle()
    assert _usage(w) == {FLAVOR: 8000}


@pytest.mark.parametrize(("field", "status", "spec"), [
    ("status.totalGPUs is missing", {"phase": "Running"}, {}),
    ("status.totalGPUs is not a number of GPUs: 'eight'", {**RUNNING, "totalGPUs": "eight"}, {}),
    ("spec.queue is not a queue name: 7", RUNNING, {"queue": 7}),
])
async def test_a_job_never_read_whose_holding_cannot_be_read_either_is_not_counted(
        field: str, status: dict[str, Any], spec: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    w = World({"team-a": 8}, {"n1": 8, "n2": 8})
    with caplog.at_level(logging.WARNING, logger="kubegang.operator.cache"):
        for _ in range(2):
            assert w.cache.upsert_job(_never_read(status=status, **spec)) is None
    assert sum(field in r.getMessage() for r in caplog.records) == 1  # logged once
    _second(w)
    [b] = await w.cycle()
    assert b.result is AdmitResult.ADMITTED, b
    assert "uid-old" not in w.quota.tree
    await Controller(w.cache, w.admission, leadership=None, kube=w.kube).step()  # type: ignore[arg-type]
    [event] = [e for e in w.kube.events if e[:2] == ("GPUJob/team-a/old", "InvalidSpec")]
    assert "neither counts its quota" in event[2] and field in event[2], event
    assert "team-a/old" not in w.kube.status  # its phase is left alone


async def test_the_event_of_a_job_never_read_says_what_is_counted() -> None:
    w = World({"team-a": 8}, {"n1": 8, "n2": 8})
    w.cache.upsert_job(_never_read())
    await Controller(w.cache, w.admission, leadership=None, kube=w.kube).step()  # type: ignore[arg-type]
    [event] = [e for e in w.kube.events if e[:2] == ("GPUJob/team-a/old", "InvalidSpec")]
    assert event[3] and "its quota is counted from its status: 8 GPUs (status.totalGPUs) in queue team-a" \
        in event[2], event
    assert "neither counts" not in event[2]
    assert "team-a/old" not in w.kube.status


def test_the_flavour_of_a_job_never_read_is_the_product_of_its_placements_nodes() -> None:
    book = QuotaBook(priority_of=lambda job: 0, node_products=lambda: {"n2": "H100"})
    book.set_queues([gpu_queue("q", resources=[{"flavor": "A100", "nominal": 8}, {"flavor": "H100", "nominal": 8}])])
    assert book.record_holder(UnreadHolding("u1", "ns/a", "q", 8000, frozenset({"n2"})))
    assert book.record_holder(UnreadHolding("u2", "ns/b", "q", 4000, frozenset({"elsewhere"})))
    assert not book.record_holder(UnreadHolding("u1", "ns/a", "q", 8000, frozenset({"n2"})))  # once
    assert (book.tree.job_usage("u1"), book.tree.job_usage("u2")) == ({"H100": 8000}, {"A100": 4000})
    assert book.running() == [] and book.release_holder("u1") and "u1" not in book.tree
    assert not book.release_holder("u1")

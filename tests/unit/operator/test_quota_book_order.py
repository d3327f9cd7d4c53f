"""``QuotaBook.order`` builds only the leaves' heads into the core's queues; the order it returns is the
one the core gives with every waiting job pushed."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kubegang.operator._job import job_view
from kubegang.operator._quota_book import QuotaBook
from kubegang.quota import PendingJob, PendingQueues

from .conftest import make_job_body
from .test_quota_book import queue

_job = st.tuples(
    st.sampled_from(["team-a", "team-b", "team-c", "org", "nowhere"]),  # a parent and an unknown queue too
    st.sampled_from([None, 0, 5, 10]),  # spec.priority (None: the queue's default)
    st.integers(0, 3),  # creation second: ties are the rule in a burst
    st.integers(1, 3),  # replicas
    st.integers(0, 4),  # admitted before the order is asked (moves the fair share)
)


@settings(max_examples=80, deadline=None)
@given(st.lists(_job, max_size=30))
def test_order_is_the_core_order_of_every_waiting_job(jobs: list[tuple[Any, ...]]) -> None:
    book = QuotaBook(priority_of=lambda job: 0)
    assert book.set_queues([queue("org", 0), queue("team-a", 32, "org"), queue("team-b", 16, "org"),
                            queue("team-c", 8, "org", priority=3)]) == []
    views = []
    for i, (name, priority, second, replicas, admitted) in enumerate(jobs):
        spec: dict[str, Any] = {} if priority is None else {"priority": priority}
        view = job_view(make_job_body(f"j{i}", queue=name, replicas=replicas, gpus=1,
                                      created=f"2025-01-01T00:00:0{second}Z", **spec))
        if admitted == 0 and book.admit(view).ok:
            continue  # holds quota now: shapes the shares of the rest
        views.append(view)
    leaves = set(book.tree.leaves)
    core = PendingQueues(book.tree)
    for view in views:
        if view.queue in leaves:
            core.push(PendingJob(view.uid, view.queue, book.usage_of(view), book.priority(view),
                                 view.created.timestamp()))
    expected = [head.job_id for head in core.heads()] + [v.uid for v in views if v.queue not in leaves]
    assert [view.uid for view in book.order(views)] == expected

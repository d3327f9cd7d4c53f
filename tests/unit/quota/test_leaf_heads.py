"""``leaf_heads`` builds only each leaf's head, and orders them as ``PendingQueues.heads`` does with every
job pushed."""

from __future__ import annotations

from random import Random

from hypothesis import given, settings
from hypothesis import strategies as st

from kubegang.quota import FlavorQuota, PendingJob, PendingQueues, QueueLanes, QueueSpec, QuotaTree, leaf_heads

H100 = "NVIDIA-H100-80GB-HBM3"

_job = st.tuples(st.sampled_from(["t0", "t1", "t2", "nowhere"]), st.integers(0, 2), st.integers(0, 2),
                 st.integers(1, 8))


@settings(max_examples=100, deadline=None)
@given(st.lists(_job, max_size=40), st.lists(st.integers(0, 12), min_size=3, max_size=3))
def test_leaf_heads_is_the_order_of_every_job_pushed(jobs: list[tuple[str, int, int, int]], held: list[int]) -> None:
    specs = [QueueSpec("org", quotas={H100: FlavorQuota(24)})]
    specs += [QueueSpec(f"t{i}", parent="org", quotas={H100: FlavorQuota(4 * (i + 1))}) for i in range(3)]
    tree = QuotaTree(specs)
    for i, gpus in enumerate(held):  # shares that differ, so fair share decides between heads
        if gpus:
            tree.admit(f"held-{i}", f"t{i}", {H100: gpus})
    pending = [PendingJob(f"j{i}", queue, {H100: gpus}, priority, float(created))
               for i, (queue, priority, created, gpus) in enumerate(jobs)]
    full = PendingQueues(tree)
    for job in pending:
        full.push(job)
    built: list[str] = []

    def as_pending(job: PendingJob) -> PendingJob:
        built.append(job.job_id)
        return job

    heads = leaf_heads(tree, pending, lambda job: (job.queue, job.priority, job.created), as_pending)
    assert [job.job_id for job in heads] == [job.job_id for job in full.heads()]
    assert len(built) == len({job.queue for job in pending})  # one PendingJob per queue, not per job


@settings(max_examples=100, deadline=None)
@given(st.lists(_job, max_size=40), st.lists(st.integers(0, 12), min_size=3, max_size=3), st.randoms())
def test_lanes_fronts_give_the_heads_of_the_jobs_not_yet_tried(
        jobs: list[tuple[str, int, int, int]], held: list[int], rnd: Random) -> None:
    """Round after round, ``leaf_heads`` over the lanes' fronts is ``leaf_heads`` over every job not yet
    tried: what the admission cycle computed before it sorted each queue once."""
    specs = [QueueSpec("org", quotas={H100: FlavorQuota(24)})]
    specs += [QueueSpec(f"t{i}", parent="org", quotas={H100: FlavorQuota(4 * (i + 1))}) for i in range(3)]
    tree = QuotaTree(specs)
    for i, gpus in enumerate(held):
        if gpus:
            tree.admit(f"held-{i}", f"t{i}", {H100: gpus})
    pending = [PendingJob(f"j{i}", queue, {H100: gpus}, priority, float(created))
               for i, (queue, priority, created, gpus) in enumerate(jobs)]

    def rank(job: PendingJob) -> tuple[str, int, float]:
        return job.queue, job.priority, job.created

    lanes = QueueLanes([(job, rank(job)) for job in pending], lambda job: job.job_id)
    tried: set[str] = set()
    while True:
        left = [job for job in pending if job.job_id not in tried]
        expected = leaf_heads(tree, left, rank, lambda job: job)
        fronts = lanes.fronts(tried)
        assert [job.job_id for job in leaf_heads(tree, fronts, rank, lambda job: job)] == [
            job.job_id for job in expected]
        assert len(fronts) == len({job.queue for job in left})  # one job per queue
        if not expected:
            break
        tried |= {job.job_id for job in expected if rnd.random() < 0.7} or {expected[0].job_id}


def test_a_job_in_no_queue_is_a_lane_of_its_own() -> None:
    """Jobs ranked None (no leaf queue) are all at the front at once, in the order given."""
    jobs = ["a", "stray-1", "b", "stray-2"]
    lanes = QueueLanes([(job, None if job.startswith("stray") else ("q", 0, 0.0)) for job in jobs], str)
    assert lanes.fronts(set()) == ["a", "stray-1", "stray-2"]
    assert lanes.fronts({"a", "stray-1"}) == ["b", "stray-2"]

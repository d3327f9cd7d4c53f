"""``leaf_heads`` builds only each leaf's head, and orders them as ``PendingQueues.heads`` does with every
job pushed."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kubegang.quota import FlavorQuota, PendingJob, PendingQueues, QueueSpec, QuotaTree, leaf_heads

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

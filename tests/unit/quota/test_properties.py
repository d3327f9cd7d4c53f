"""Property tests: after any sequence of admit / release / preempt, the quota invariants hold.

The invariants are checked against an oracle that recomputes every number from the specs and the
list of admitted jobs, independently of the tree's incremental bookkeeping.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from kubegang.quota import (
    Candidate,
    FlavorQuota,
    Ok,
    PendingJob,
    QueueSpec,
    QuotaTree,
    Refusal,
    RunningJob,
    Unschedulable,
    candidates_for,
    fits_after_eviction,
    quota_victims,
)
from kubegang.quota import PreemptionPolicy as Policy
from kubegang.quota import ReclaimFromBorrowers as Reclaim
from kubegang.quota import WithinQueue as Within

FLAVORS = ("A", "B")


@st.composite
def quotas(draw: st.DrawFn, *, is_root: bool, is_leaf: bool) -> dict[str, FlavorQuota]:
    out: dict[str, FlavorQuota] = {}
    for flavor in FLAVORS:
        if not draw(st.booleans()):
            continue
        nominal = draw(st.integers(0, 12))
        limit = st.none() | st.integers(0, 12)
        borrowing = None if is_root else draw(limit)
        lending = None if is_root else draw(st.none() | st.integers(0, nominal if is_leaf else 20))
        out[flavor] = FlavorQuota(nominal, borrowing, lending)
    return out


@st.composite
def trees(draw: st.DrawFn) -> list[QueueSpec]:
    shape = draw(st.lists(st.integers(0, 3), min_size=1, max_size=3))  # children per middle queue
    specs = [QueueSpec("r", quotas=draw(quotas(is_root=True, is_leaf=False)))]
    for i, n_children in enumerate(shape):
        policy = Policy(
            within_queue=draw(st.sampled_from(Within)),
            reclaim_from_borrowers=draw(st.sampled_from(Reclaim)),
        )
        specs.append(
            QueueSpec(
                f"m{i}",
                parent="r",
                weight=draw(st.sampled_from([0.5, 1.0, 2.0])),
                quotas=draw(quotas(is_root=False, is_leaf=n_children == 0)),
                preemption=policy,
            )
        )
        for j in range(n_children):
            specs.append(
                QueueSpec(
                    f"m{i}l{j}",
                    parent=f"m{i}",
                    quotas=draw(quotas(is_root=False, is_leaf=True)),
                    preemption=policy,
                )
            )
    return specs


usages = st.fixed_dictionaries({"A": st.integers(0, 10), "B": st.integers(0, 4)})


@dataclass
class Oracle:
    """Every number recomputed from the specs and the jobs, by the definitions in docs/quota.md."""

    specs: list[QueueSpec]
    jobs: dict[str, tuple[str, dict[str, int]]] = field(default_factory=dict)

    def children(self, name: str) -> list[str]:
        return [s.name for s in self.specs if s.parent == name]

    def spec(self, name: str) -> QueueSpec:
        return next(s for s in self.specs if s.name == name)

    def q(self, name: str, f: str) -> FlavorQuota:
        return self.spec(name).quotas.get(f, FlavorQuota())

    def quota(self, name: str, f: str) -> int:
        return self.q(name, f).nominal + sum(self.quota(c, f) - self.kept(c, f) for c in self.children(name))

    def kept(self, name: str, f: str) -> int:
        ll = self.q(name, f).lending_limit
        return 0 if ll is None else max(0, self.quota(name, f) - ll)

    def usage(self, name: str, f: str) -> int:
        return sum(u.get(f, 0) for q, u in self.jobs.values() if q == name) + sum(
            self.usage(c, f) for c in self.children(name)
        )

    def charged(self, name: str, f: str) -> int:
        kids = self.children(name)
        if not kids:
            return self.usage(name, f)
        return sum(max(0, self.charged(c, f) - self.kept(c, f)) for c in kids)

    def violations(self) -> list[str]:
        out = []
        for s in self.specs:
            for f in FLAVORS:
                c, quota = self.charged(s.name, f), self.quota(s.name, f)
                limit = self.q(s.name, f).borrowing_limit
                if s.parent is None and c > quota:
                    out.append(f"root {s.name} charged {c} > quota {quota} of {f}")
                if s.parent is not None and limit is not None and c > quota + limit:
                    out.append(f"{s.name} charged {c} > quota {quota} + borrowingLimit {limit} of {f}")
        return out


def snapshot(tree: QuotaTree) -> tuple[object, ...]:
    return (
        sorted(tree.jobs),
        [(q, tree.usage(q), tree.borrowed(q), tree.available(q)) for q in tree.queues],
    )


def check(tree: QuotaTree, oracle: Oracle) -> None:
    assert oracle.violations() == []
    for s in oracle.specs:
        for f in FLAVORS:
            # The sum of usage in a subtree equals the sum of its jobs.
            assert tree.usage(s.name).get(f, 0) == oracle.usage(s.name, f)
            borrowed = max(0, oracle.charged(s.name, f) - oracle.quota(s.name, f))
            assert tree.borrowed(s.name).get(f, 0) == borrowed
    # No lender below what it keeps: a leaf can always take what it keeps and does not use.
    for leaf in tree.leaves:
        keep = {f: oracle.kept(leaf, f) - oracle.usage(leaf, f) for f in FLAVORS}
        keep = {f: v for f, v in keep.items() if v > 0}
        if keep:
            assert tree.can_admit(leaf, keep) == Ok(), (leaf, keep)
    # The same for a parent: what it keeps and does not use (kept - charged) is left for its subtree, so a
    # leaf below it that no borrowing limit on the way holds back (its own included) can take all of it.
    for parent in (s.name for s in oracle.specs if oracle.children(s.name)):
        for f in FLAVORS:
            unused = oracle.kept(parent, f) - oracle.charged(parent, f)
            if unused <= 0:
                continue
            for leaf in tree.leaves:
                path = tree.path(leaf)
                if parent not in path:
                    continue
                below = path[:path.index(parent)]
                if all(oracle.q(name, f).borrowing_limit is None for name in below):
                    assert tree.can_admit(leaf, {f: unused}) == Ok(), (parent, leaf, f, unused)


def assert_allowed_by_policy(tree: QuotaTree, preemptor: PendingJob, candidates: list[Candidate]) -> None:
    policy = tree.spec(preemptor.queue).preemption
    needed = {f for f, v in preemptor.usage.items() if v}
    assert len({c.job.job_id for c in candidates}) == len(candidates)
    for c in candidates:
        assert needed & {f for f, v in c.job.usage.items() if v}
        if c.job.queue == preemptor.queue:
            assert policy.within_queue is Within.LOWER_PRIORITY and c.job.priority < preemptor.priority
            continue
        lca = tree.lowest_common_ancestor(preemptor.queue, c.job.queue)
        assert lca is not None
        side = tree.path(c.job.queue)[tree.path(c.job.queue).index(lca) - 1]
        assert needed & set(tree.borrowed(side)), (side, tree.borrowed(side))
        if policy.reclaim_from_borrowers is Reclaim.NEVER or policy.reclaim_from_borrowers is Reclaim.LOWER_PRIORITY:
            assert c.job.priority < preemptor.priority


def assert_minimal_victims(tree: QuotaTree, preemptor: PendingJob, ids: list[str], victims: list[str]) -> None:
    """Victims come from the candidates in their order, suffice, are each needed, and were each still
    borrowing (another queue's) when chosen."""
    assert [v for v in ids if v in victims] == victims and len(set(victims)) == len(victims)
    assert fits_after_eviction(tree, preemptor, victims) == Ok()
    if not victims:
        assert tree.can_admit(preemptor.queue, preemptor.usage) == Ok()
    for v in victims:
        assert not fits_after_eviction(tree, preemptor, [x for x in victims if x != v]), f"{v} was not needed"
    needed = {f for f, a in preemptor.usage.items() if a}
    with tree.simulate():
        for v in victims:
            queue = tree.job_queue(v)
            if queue != preemptor.queue:
                lca = tree.lowest_common_ancestor(preemptor.queue, queue)
                assert lca is not None
                path = tree.path(queue)
                side = path[path.index(lca) - 1]
                uses = {f for f, a in tree.job_usage(v).items() if a}
                assert needed & uses & set(tree.borrowed(side)), f"{v}: {side} no longer borrows when chosen"
            tree.release(v)


def forced_add_is_valid(oracle: Oracle, job_id: str, queue: str, usage: dict[str, int]) -> bool:
    oracle.jobs[job_id] = (queue, usage)
    try:
        return not oracle.violations()
    finally:
        del oracle.jobs[job_id]


@settings(max_examples=150, deadline=None)
@given(specs=trees(), data=st.data())
def test_invariants_hold_after_any_sequence(specs: list[QueueSpec], data: st.DataObject) -> None:
    tree = QuotaTree(specs)
    oracle = Oracle(specs)
    leaves = tree.leaves
    running: dict[str, RunningJob] = {}
    for step in range(data.draw(st.integers(1, 25))):
        op = data.draw(st.sampled_from(["admit", "admit", "release", "preempt"]))
        job_id = f"j{step}"
        if op == "admit":
            queue = data.draw(st.sampled_from(leaves))
            usage = data.draw(usages)
            before = snapshot(tree)
            decision = tree.admit(job_id, queue, usage)
            if decision:
                oracle.jobs[job_id] = (queue, {f: v for f, v in usage.items() if v})
                running[job_id] = RunningJob(job_id, queue, usage, priority=data.draw(st.integers(0, 2)))
            else:
                # All or nothing, and refused exactly when the job would break a limit.
                assert snapshot(tree) == before
                assert not forced_add_is_valid(oracle, job_id, queue, usage)
                if isinstance(decision, Unschedulable):
                    assert not forced_add_is_valid(Oracle(specs), job_id, queue, usage)
                else:
                    assert isinstance(decision, Refusal)
                    for shortfall in decision.shortfalls:
                        assert f"needs {shortfall.needed} {shortfall.flavor}" in decision.reason
                        assert f"can get {shortfall.available} now" in decision.reason
        elif op == "release" and running:
            victim = data.draw(st.sampled_from(sorted(running)))
            assert tree.release(victim)
            del running[victim], oracle.jobs[victim]
        elif op == "preempt":
            preemptor = PendingJob(
                job_id,
                data.draw(st.sampled_from(leaves)),
                data.draw(usages),
                priority=data.draw(st.integers(0, 3)),
            )
            before = snapshot(tree)
            candidates = candidates_for(preemptor, tree, running.values())
            assert_allowed_by_policy(tree, preemptor, candidates)
            ids = [c.job.job_id for c in candidates]
            victims = quota_victims(tree, preemptor, ids)
            assert snapshot(tree) == before  # asking changes nothing
            if victims is not None:
                assert_minimal_victims(tree, preemptor, ids, victims)
                for victim in victims:
                    tree.release(victim)
                    del running[victim], oracle.jobs[victim]
                assert tree.admit(job_id, preemptor.queue, preemptor.usage) == Ok()
                usage = {f: v for f, v in preemptor.usage.items() if v}
                oracle.jobs[job_id] = (preemptor.queue, usage)
                running[job_id] = RunningJob(job_id, preemptor.queue, usage, priority=preemptor.priority)
        check(tree, oracle)


@settings(max_examples=100, deadline=None)
@given(specs=trees(), data=st.data())
def test_admitted_exactly_when_limits_allow(specs: list[QueueSpec], data: st.DataObject) -> None:
    """can_admit is neither too strict nor too lax: Ok exactly when no limit would be broken."""
    tree = QuotaTree(specs)
    oracle = Oracle(specs)
    for step in range(data.draw(st.integers(0, 10))):
        queue, usage = data.draw(st.sampled_from(tree.leaves)), data.draw(usages)
        if tree.admit(f"j{step}", queue, usage):
            oracle.jobs[f"j{step}"] = (queue, usage)
    queue, usage = data.draw(st.sampled_from(tree.leaves)), data.draw(usages)
    assert bool(tree.can_admit(queue, usage)) == forced_add_is_valid(oracle, "probe", queue, usage)
    assert bool(tree.can_ever_fit(queue, usage)) == forced_add_is_valid(Oracle(specs), "probe", queue, usage)


@settings(max_examples=200, deadline=None)
@given(specs=trees(), data=st.data())
def test_quota_victims_are_minimal_for_any_candidate_order(specs: list[QueueSpec], data: st.DataObject) -> None:
    """Whatever running jobs are offered, in whatever order: the answer is a minimal set that fits."""
    tree = QuotaTree(specs)
    for step in range(data.draw(st.integers(0, 14))):
        tree.admit(f"j{step}", data.draw(st.sampled_from(tree.leaves)), data.draw(usages))
    preemptor = PendingJob("p", data.draw(st.sampled_from(tree.leaves)), data.draw(usages))
    ids = data.draw(st.permutations(tree.jobs))
    before = snapshot(tree)
    victims = quota_victims(tree, preemptor, [*ids, "unknown"])
    assert snapshot(tree) == before
    if victims is None:
        assert not tree.can_admit(preemptor.queue, preemptor.usage)
    else:
        assert_minimal_victims(tree, preemptor, list(ids), victims)

"""The quota core over large trees: 10,000 leaves, 2,000 levels, messages a condition can hold.

The walks over a tree that were recursive (the tournament's ``order``, ``_parents_first``, the subtree
sums) are loops now; each is checked against the recursive version it replaced, kept here as a
reference, on random trees.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubegang.quota import (
    FlavorQuota,
    PendingJob,
    PendingQueues,
    QueueNames,
    QueueSpec,
    QuotaSpecError,
    QuotaTree,
    Unschedulable,
    admission_order,
    is_mig_flavor,
    queue_positions,
    validate_specs,
)
from kubegang.quota._fairshare import Contender, _by_leaf, _merge, share_path, tournament_order
from kubegang.quota._spec import _check_cycles, _parents_first
from kubegang.quota._tree import _Node

CONDITION_MESSAGE_LIMIT = 32_768
"""The CRD's limit on a condition's message: a longer one makes the job's status write fail."""

FLAVORS = ("A", "B")


# -- references: the recursive versions the loops replaced -------------------------------------------


def _reference_tournament_order(tree: QuotaTree, contenders: Sequence[Contender[Any]]) -> list[Any]:
    at_leaf, stray = _by_leaf(tree, contenders)
    children: dict[_Node, list[_Node]] = {}
    seen: set[_Node] = set()
    roots: list[_Node] = []
    for leaf in at_leaf:
        below: _Node | None = None
        for n in leaf.path:
            if below is not None:
                children.setdefault(n, []).append(below)
            if n in seen:
                break
            seen.add(n)
            if n.parent is None:
                roots.append(n)
            below = n

    def order(node: _Node, depth: int) -> list[Contender[Any]]:
        streams: list[list[Contender[Any]]] = []
        own = at_leaf.get(node)
        if own is not None:
            streams.append(sorted(own, key=lambda c: c.top))
        streams.extend(order(child, depth + 1) for child in children.get(node, ()))
        return _merge(streams, lambda c: c.key(depth))

    top = [order(root, 0) for root in roots]
    top.append(sorted(stray, key=lambda c: c.top))
    return [c.item for c in _merge(top, lambda c: c.top)]


def _reference_parents_first(by_name: Mapping[str, QueueSpec]) -> dict[str, QueueSpec]:
    ordered: dict[str, QueueSpec] = {}

    def visit(name: str) -> None:
        if name in ordered:
            return
        parent = by_name[name].parent
        if parent is not None:
            visit(parent)
        ordered[name] = by_name[name]

    for name in by_name:
        visit(name)
    return ordered


def _reference_check_cycles(by_name: Mapping[str, QueueSpec]) -> list[Any]:
    out = []
    reported: set[str] = set()
    for start in by_name:
        path: list[str] = []
        seen: set[str] = set()
        cur: str | None = start
        while cur is not None and cur in by_name and cur not in seen:
            seen.add(cur)
            path.append(cur)
            cur = by_name[cur].parent
        if cur is not None and cur in seen:
            cycle = path[path.index(cur):]
            if not reported.intersection(cycle):
                reported.update(cycle)
                out.append((cur, " -> ".join([*cycle, cur]), tuple(cycle)))
    return out


# -- random forests -------------------------------------------------------------------------------


@st.composite
def forests(draw: st.DrawFn, max_queues: int = 14) -> list[QueueSpec]:
    """Queues ``q0``.. whose parents come earlier (so no cycle), listed in a random order, with
    random quotas (lending never above nominal, no limits on roots)."""
    n = draw(st.integers(1, max_queues))
    parents: list[int | None] = [None]
    for i in range(1, n):
        parents.append(draw(st.none() | st.integers(0, i - 1)))
    specs = []
    for i, parent in enumerate(parents):
        quotas = {}
        for flavor in FLAVORS:
            if draw(st.booleans()):
                nominal = draw(st.integers(0, 8))
                borrowing = None if parent is None else draw(st.none() | st.integers(0, 8))
                lending = None if parent is None else draw(st.none() | st.integers(0, nominal))
                quotas[flavor] = FlavorQuota(nominal, borrowing, lending)
        specs.append(QueueSpec(f"q{i}", parent=None if parent is None else f"q{parent}",
                               weight=draw(st.sampled_from([0.5, 1.0, 2.0])), quotas=quotas))
    return draw(st.permutations(specs))


@settings(max_examples=200, deadline=None)
@given(forests(), st.data())
def test_the_tournament_loop_orders_as_the_recursion_did(specs: list[QueueSpec], data: st.DataObject) -> None:
    tree = QuotaTree(specs)
    leaves = list(tree.leaves)
    usage = st.fixed_dictionaries({"A": st.integers(0, 6), "B": st.integers(0, 3)})
    for k in range(data.draw(st.integers(0, 6))):  # what runs moves the shares
        tree.admit(f"run{k}", data.draw(st.sampled_from(leaves)), data.draw(usage))
    contenders = []
    queues = st.sampled_from([*tree.queues, "nowhere"])  # parents and unknown queues compete too
    for k in range(data.draw(st.integers(0, 12))):
        queue = data.draw(queues)
        request = data.draw(usage)
        try:
            shares: tuple[float, ...] | None = share_path(tree, queue, request)
        except KeyError:
            shares = None
        priority, created = data.draw(st.integers(0, 2)), float(data.draw(st.integers(0, 3)))
        contenders.append(Contender(f"j{k}", queue, priority, shares, (created, k)))
    assert tournament_order(tree, contenders) == _reference_tournament_order(tree, contenders)


@settings(max_examples=200, deadline=None)
@given(forests(max_queues=20))
def test_parents_first_loop_orders_as_the_recursion_did(specs: list[QueueSpec]) -> None:
    by_name = {s.name: s for s in specs}
    assert list(_parents_first(by_name)) == list(_reference_parents_first(by_name))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([None, "q0", "q1", "q2", "q3", "q4", "q5", "q6", "gone"]), min_size=1, max_size=7),
       st.randoms(use_true_random=False))
def test_cycle_check_reports_what_the_walk_from_every_queue_did(parents: list[str | None], rng: random.Random) -> None:
    specs = [QueueSpec(f"q{i}", parent=p) for i, p in enumerate(parents)]
    rng.shuffle(specs)
    by_name = {s.name: s for s in specs}
    assert [(p.queue, p.message.removeprefix("queues form a cycle: "), p.members) for p in _check_cycles(by_name)] \
        == _reference_check_cycles(by_name)


@settings(max_examples=200, deadline=None)
@given(forests(max_queues=20))
def test_each_queues_reach_is_what_a_job_could_take_with_every_other_queue_idle(specs: list[QueueSpec]) -> None:
    tree = QuotaTree(specs)
    for name in tree.queues:
        node = tree._node(name)
        for flavor in tree.flavors:
            assert node.reach[flavor] == tree._potential(node, flavor)[0], (name, flavor)


# -- 10,000 leaves ----------------------------------------------------------------------------------


def test_queue_and_leaf_names_are_built_once_and_answer_membership_by_set() -> None:
    n = 10_000
    tree = QuotaTree([QueueSpec("org", quotas={"A": FlavorQuota(n)})]
                     + [QueueSpec(f"leaf-{i:05d}", parent="org", quotas={"A": FlavorQuota(1)}) for i in range(n)])
    assert tree.leaves is tree.leaves and tree.queues is tree.queues  # nothing built per call
    assert isinstance(tree.leaves, QueueNames) and isinstance(tree.leaves, tuple)
    assert tree.queues[:2] == ("org", "leaf-00000") and len(tree.queues) == n + 1
    assert tree.leaves == tuple(f"leaf-{i:05d}" for i in range(n))
    assert "leaf-09999" in tree.leaves and "org" not in tree.leaves and "org" in tree.queues
    assert "nowhere" not in tree.queues and cast(Any, ["unhashable"]) not in tree.leaves
    # Only flavours are ever added to a built tree; its queues stay what they were.
    tree.record("j", "leaf-00001", {"B": 1})
    assert tree.flavors == ["A", "B"] and len(tree.leaves) == n and tree.leaves is tree.leaves


def test_not_a_leaf_names_a_few_of_its_leaves_not_all_of_them() -> None:
    names = [f"team-{i:04d}-with-a-long-descriptive-name" for i in range(1_000)]
    tree = QuotaTree([QueueSpec("org"), QueueSpec("dept", parent="org"), QueueSpec("solo", parent="org")]
                     + [QueueSpec(n, parent="dept", quotas={"A": FlavorQuota(8)}) for n in reversed(names)])
    decision = tree.can_admit("dept", {"A": 1})
    assert isinstance(decision, Unschedulable)
    assert decision.reason == ("queue dept is not a leaf queue; jobs enter leaf queues only (under it: "
                               + ", ".join(names[:10]) + " and 990 more)")
    assert len(_refusal(tree, "org")) < CONDITION_MESSAGE_LIMIT // 10
    assert _refusal(tree, "org").endswith("(under it: solo, " + ", ".join(names[:9]) + " and 991 more)")
    assert _refusal(tree, "nowhere") == "queue nowhere does not exist"


def _refusal(tree: QuotaTree, queue: str) -> str:
    """Why a job of ``queue`` (asking for nothing) is refused."""
    decision = tree.can_admit(queue, {})
    assert isinstance(decision, Unschedulable), decision
    return decision.reason


# -- 2,000 levels -----------------------------------------------------------------------------------


def _chain(depth: int) -> list[QueueSpec]:
    specs = [QueueSpec("q0", quotas={"A": FlavorQuota(8)})]
    specs += [QueueSpec(f"q{i}", parent=f"q{i - 1}", quotas={"A": FlavorQuota(1)}) for i in range(1, depth)]
    return specs[::-1]  # children first, the worst order for a parents-first sort


def test_a_two_thousand_level_tree_validates_admits_orders_and_explains() -> None:
    depth = 2_000
    specs = [*_chain(depth), QueueSpec("other", quotas={"A": FlavorQuota(4)})]
    assert list(validate_specs(specs))[:3] == ["q0", "q1", "q2"]
    tree = QuotaTree(specs)
    deepest = f"q{depth - 1}"
    assert tree.leaves == (deepest, "other")
    assert tree._node(deepest).reach == {"A": 8 + depth - 1}

    jobs = [PendingJob("deep", deepest, {"A": 2}, created=1.0), PendingJob("other", "other", {"A": 1}, created=2.0),
            PendingJob("deep-2", deepest, {"A": 1}, created=3.0)]
    assert [j.job_id for j in admission_order(tree, jobs)] == ["deep", "other"]
    pending = PendingQueues(tree)
    for job in jobs:
        pending.push(job)
    assert [j.job_id for j in pending.heads()] == ["deep", "other"]
    positions = queue_positions(tree, jobs)
    assert (positions["deep-2"].in_queue, positions["deep-2"].root) == (2, "q0")
    assert pending.pop() == jobs[0] and tree.admit("deep", deepest, {"A": 2})
    assert tree.usage("q0") == {"A": 2} and tree.borrowed(deepest) == {"A": 1}

    never = tree.can_admit(deepest, {"A": 10_000})
    assert isinstance(never, Unschedulable) and "q0's tree has 2007 in all" in never.reason
    assert _refusal(tree, "q5").endswith(f"(under it: {deepest})")


def test_a_cycle_still_refuses_the_tree_whatever_its_length() -> None:
    specs = [QueueSpec(f"c{i}", parent=f"c{(i + 1) % 3_000}") for i in range(3_000)]
    with pytest.raises(QuotaSpecError) as refused:
        validate_specs([*specs, QueueSpec("fine")])
    [problem] = refused.value.problems
    assert problem.kind == "ParentCycle" and len(problem.members) == 3_000


def test_mig_profile_flavours_are_recognised_by_the_device_plugins_resource_name() -> None:
    assert is_mig_flavor("nvidia.com/mig-1g.10gb") and is_mig_flavor("nvidia.com/mig-3g.40gb")
    for flavor in ("nvidia.com/gpu", "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.shared", "mig-1g.10gb"):
        assert not is_mig_flavor(flavor), flavor

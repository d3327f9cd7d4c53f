"""Borrowing and lending scenarios, atomic admission, reasons with numbers, what-if simulation."""

from __future__ import annotations

import pytest

from kubegang.quota import (
    FlavorQuota,
    Ok,
    QueueSpec,
    QuotaTree,
    Refusal,
    Unschedulable,
)

H100 = "NVIDIA-H100-80GB-HBM3"
MIG = "nvidia.com/mig-1g.10gb"


def two_teams(a: FlavorQuota, b: FlavorQuota) -> QuotaTree:
    return QuotaTree(
        [
            QueueSpec("org"),
            QueueSpec("team-a", parent="org", quotas={H100: a}),
            QueueSpec("team-b", parent="org", quotas={H100: b}),
        ]
    )


def test_team_a_borrows_team_b_idle_quota() -> None:
    tree = two_teams(FlavorQuota(8), FlavorQuota(8))
    assert tree.admit("a1", "team-a", {H100: 12}) == Ok()
    assert tree.usage("team-a") == {H100: 12}
    assert tree.borrowed("team-a") == {H100: 4}
    assert tree.usage("org") == {H100: 12}
    assert tree.available("team-b") == {H100: 4}


def test_team_b_cannot_get_its_nominal_back_without_preemption_and_the_reason_says_so() -> None:
    tree = two_teams(FlavorQuota(8), FlavorQuota(8))
    tree.admit("a1", "team-a", {H100: 12})
    decision = tree.can_admit("team-b", {H100: 8})
    assert isinstance(decision, Refusal)
    assert decision.shortfalls[0].available == 4
    assert "needs 8" in decision.reason and "can get 4" in decision.reason
    assert "4 lent to other queues, reclaimable by preemption" in decision.reason
    # B reclaims: once A's borrowing gang is gone, B fits.
    tree.release("a1")
    assert tree.admit("b1", "team-b", {H100: 8}) == Ok()


def test_borrowing_limit_caps_and_the_reason_names_the_numbers() -> None:
    tree = two_teams(FlavorQuota(8, borrowing_limit=6), FlavorQuota(8))
    tree.admit("a1", "team-a", {H100: 4})
    decision = tree.can_admit("team-a", {H100: 12})
    assert isinstance(decision, Refusal)
    assert decision.reason == (
        f"queue team-a needs 12 {H100} but can get 10 now: nominal 8, 4 in use, 4 free within nominal, "
        "can borrow 6 more (borrowingLimit 6, 0 borrowed)"
    )
    assert tree.admit("a2", "team-a", {H100: 10}) == Ok()
    assert tree.borrowed("team-a") == {H100: 6}
    assert not tree.can_admit("team-a", {H100: 1})


def test_lending_limit_keeps_the_rest_for_the_lender() -> None:
    tree = two_teams(FlavorQuota(8), FlavorQuota(8, lending_limit=2))
    # A can use its 8 and only 2 of B's.
    assert tree.admit("a1", "team-a", {H100: 10}) == Ok()
    decision = tree.can_admit("team-a", {H100: 1})
    assert isinstance(decision, Refusal)
    # B still has the 6 it keeps.
    assert tree.available("team-b") == {H100: 6}
    assert tree.admit("b1", "team-b", {H100: 6}) == Ok()


def test_job_larger_than_the_queue_can_ever_hold_is_unschedulable() -> None:
    tree = two_teams(FlavorQuota(8, borrowing_limit=4), FlavorQuota(8))
    decision = tree.can_admit("team-a", {H100: 13})
    assert isinstance(decision, Unschedulable)
    assert "at most 12" in decision.reason and "borrowingLimit 4" in decision.reason
    # Without a borrowing limit the whole tree bounds it, minus what others keep.
    tree = two_teams(FlavorQuota(8), FlavorQuota(8, lending_limit=3))
    decision = tree.can_ever_fit("team-a", {H100: 12})
    assert isinstance(decision, Unschedulable)
    assert "at most 11" in decision.reason and "keep 5" in decision.reason
    assert tree.can_ever_fit("team-a", {H100: 11}) == Ok()


def test_unknown_flavour_is_unschedulable_and_lists_known_flavours() -> None:
    tree = two_teams(FlavorQuota(8), FlavorQuota(8))
    decision = tree.can_admit("team-a", {MIG: 1})
    assert isinstance(decision, Unschedulable)
    assert MIG in decision.reason and H100 in decision.reason


def test_jobs_enter_leaves_only() -> None:
    tree = two_teams(FlavorQuota(8), FlavorQuota(8))
    decision = tree.can_admit("org", {H100: 1})
    assert isinstance(decision, Unschedulable)
    assert "not a leaf" in decision.reason and "team-a, team-b" in decision.reason
    assert "does not exist" in tree.can_admit("nope", {H100: 1}).reason  # type: ignore[union-attr]


def test_parent_nominal_is_shared_by_its_subtree() -> None:
    tree = QuotaTree(
        [
            QueueSpec("org", quotas={H100: FlavorQuota(16)}),
            QueueSpec("team-a", parent="org"),
            QueueSpec("team-b", parent="org", quotas={H100: FlavorQuota(4)}),
        ]
    )
    assert tree.admit("a1", "team-a", {H100: 16}) == Ok()
    assert tree.available("team-a") == {H100: 4}
    assert tree.available("team-b") == {H100: 4}


def test_three_levels_borrowing_limit_of_a_middle_queue() -> None:
    tree = QuotaTree(
        [
            QueueSpec("cluster"),
            QueueSpec("org-1", parent="cluster", quotas={H100: FlavorQuota(0, borrowing_limit=2)}),
            QueueSpec("org-2", parent="cluster", quotas={H100: FlavorQuota(16)}),
            QueueSpec("t1", parent="org-1", quotas={H100: FlavorQuota(8)}),
            QueueSpec("t2", parent="org-1", quotas={H100: FlavorQuota(8)}),
        ]
    )
    # org-1's subtree owns 16 and may take 2 of org-2's.
    assert tree.admit("j1", "t1", {H100: 18}) == Ok()
    decision = tree.can_admit("t2", {H100: 1})
    assert isinstance(decision, Refusal)
    assert "borrowingLimit 2 of queue org-1" in decision.reason
    assert tree.borrowed("org-1") == {H100: 2}
    assert tree.usage("cluster") == {H100: 18}


def test_refused_multi_flavour_admission_changes_nothing() -> None:
    tree = QuotaTree(
        [
            QueueSpec("org"),
            QueueSpec("t", parent="org", quotas={H100: FlavorQuota(8), MIG: FlavorQuota(2)}),
        ]
    )
    tree.admit("other", "t", {MIG: 1})
    decision = tree.admit("j", "t", {H100: 4, MIG: 2})
    assert isinstance(decision, Refusal)
    assert [s.flavor for s in decision.shortfalls] == [MIG]
    assert tree.usage("t") == {MIG: 1} and "j" not in tree


def test_release_returns_quota_and_unknown_release_is_false() -> None:
    tree = two_teams(FlavorQuota(8), FlavorQuota(8))
    tree.admit("a1", "team-a", {H100: 12})
    assert tree.release("a1") is True
    assert tree.release("a1") is False
    assert tree.usage("org") == {} and tree.borrowed("team-a") == {}


def test_duplicate_admission_is_an_error() -> None:
    tree = two_teams(FlavorQuota(8), FlavorQuota(8))
    tree.admit("a1", "team-a", {H100: 1})
    with pytest.raises(ValueError, match="already admitted"):
        tree.admit("a1", "team-b", {H100: 1})


@pytest.mark.parametrize("amount", [-1, 1.5, True])
def test_bad_usage_names_the_flavour(amount: object) -> None:
    tree = two_teams(FlavorQuota(8), FlavorQuota(8))
    with pytest.raises(ValueError, match=rf"usage\[{H100}\]"):
        tree.can_admit("team-a", {H100: amount})  # type: ignore[dict-item]


def test_simulate_undoes_everything() -> None:
    tree = two_teams(FlavorQuota(8), FlavorQuota(8))
    tree.admit("a1", "team-a", {H100: 12})
    with tree.simulate():
        tree.release("a1")
        assert tree.admit("b1", "team-b", {H100: 8}) == Ok()
        with tree.simulate():
            tree.release("b1")
            assert tree.usage("org") == {}
        assert tree.usage("org") == {H100: 8}
    assert tree.jobs == ["a1"]
    assert tree.usage("team-a") == {H100: 12} and tree.usage("team-b") == {}


def test_record_charges_a_running_job_beyond_a_lowered_quota() -> None:
    tree = two_teams(FlavorQuota(4), FlavorQuota(4))
    tree.record("a1", "team-a", {H100: 10, MIG: 1})
    assert tree.usage("org") == {H100: 10, MIG: 1}
    assert not tree.can_admit("team-b", {H100: 1})
    tree.release("a1")
    assert tree.admit("b1", "team-b", {H100: 8}) == Ok()


def test_status_reports_usage_borrowed_and_share() -> None:
    tree = two_teams(FlavorQuota(8), FlavorQuota(8))
    tree.admit("a1", "team-a", {H100: 12})
    status = tree.status("team-a")
    assert status.usage == {H100: 12} and status.borrowed == {H100: 4} and status.quota == {H100: 8}
    assert status.fair_share == pytest.approx(4 / 16)
    assert tree.status("team-b").fair_share == 0.0
    tree.admit("b1", "team-b", {H100: 1})
    assert tree.jobs_in("org") == ["a1", "b1"] and tree.jobs_in("team-b") == ["b1"]


def test_an_unlisted_flavour_may_be_borrowed_unless_listed_with_borrowing_limit_zero() -> None:
    """docs/quota.md: a flavour a queue does not list behaves as ``nominal: 0`` with no limits, so a team can
    borrow its organisation's flavour without listing it; listing it with ``borrowingLimit: 0`` forbids that."""
    tree = QuotaTree([
        QueueSpec("org", quotas={"H100": FlavorQuota(16)}),
        QueueSpec("open", parent="org"),
        QueueSpec("closed", parent="org", quotas={"H100": FlavorQuota(0, borrowing_limit=0)}),
    ])
    assert tree.admit("open-1", "open", {"H100": 16}) == Ok()
    tree.release("open-1")
    refused = tree.can_admit("closed", {"H100": 1})
    assert isinstance(refused, Unschedulable), refused  # never, not just now: the limit is in the spec
    assert tree.available("closed").get("H100", 0) == 0 and tree.available("open").get("H100", 0) == 16

"""Validation of queue specs: every problem is reported, naming the queue and the field."""

from __future__ import annotations

import pytest

from kubegang.quota import FlavorQuota, QueueSpec, QuotaSpecError, QuotaTree, validate_specs

H100 = "NVIDIA-H100-80GB-HBM3"


def problems(specs: list[QueueSpec]) -> list[str]:
    with pytest.raises(QuotaSpecError) as err:
        QuotaTree(specs)
    return [str(p) for p in err.value.problems]


def test_unknown_parent_names_queue_field_and_known_queues() -> None:
    (msg,) = problems([QueueSpec("org"), QueueSpec("team-a", parent="orgg")])
    assert msg.startswith("queue team-a: parent:")
    assert "'orgg'" in msg and "org" in msg


def test_unknown_parent_in_a_large_tree_names_ten_known_queues_and_counts_the_rest() -> None:
    # The message becomes a GPUQueue condition: bounded whatever the tree's size.
    specs = [QueueSpec(f"team-{i:04d}") for i in range(1000)] + [QueueSpec("lost", parent="nowhere")]
    (msg,) = problems(specs)
    assert "known queues: lost, team-0000, team-0001" in msg and msg.endswith("team-0008 and 991 more)"), msg
    assert len(msg) < 300, msg


def test_cycle_is_reported_once_with_its_path() -> None:
    msgs = problems([QueueSpec("a", parent="c"), QueueSpec("b", parent="a"), QueueSpec("c", parent="b")])
    assert len(msgs) == 1
    assert "cycle" in msgs[0] and "a" in msgs[0] and "b" in msgs[0] and "c" in msgs[0]


def test_own_parent_is_a_cycle() -> None:
    (msg,) = problems([QueueSpec("a", parent="a")])
    assert "cycle: a -> a" in msg


def test_duplicate_names_are_refused() -> None:
    (msg,) = problems([QueueSpec("a"), QueueSpec("a")])
    assert "queue a: name: defined twice" in msg


@pytest.mark.parametrize(
    ("quota", "field"),
    [
        (FlavorQuota(nominal=-1), f"quotas[{H100}].nominal"),
        (FlavorQuota(nominal=4, borrowing_limit=-2), f"quotas[{H100}].borrowingLimit"),
        (FlavorQuota(nominal=4, lending_limit=-1), f"quotas[{H100}].lendingLimit"),
        (FlavorQuota(nominal=4, lending_limit=5), f"quotas[{H100}].lendingLimit"),
    ],
)
def test_bad_numbers_name_the_field(quota: FlavorQuota, field: str) -> None:
    (msg,) = problems([QueueSpec("org"), QueueSpec("team-a", parent="org", quotas={H100: quota})])
    assert msg.startswith(f"queue team-a: {field}:")


def test_fractional_nominal_is_refused() -> None:
    bad = FlavorQuota(nominal=1.5)  # type: ignore[arg-type]
    (msg,) = problems([QueueSpec("org", quotas={H100: bad})])
    assert "nominal" in msg and "1.5" in msg


def test_limits_on_a_root_are_refused() -> None:
    msgs = problems([QueueSpec("org", quotas={H100: FlavorQuota(8, borrowing_limit=1, lending_limit=2)})])
    assert len(msgs) == 2
    assert all("root queue" in m for m in msgs)


@pytest.mark.parametrize("weight", [-1.0, float("nan"), float("inf")])
def test_bad_weight(weight: float) -> None:
    (msg,) = problems([QueueSpec("org", weight=weight)])
    assert msg.startswith("queue org: weight:")


def test_all_problems_are_reported_together() -> None:
    msgs = problems(
        [
            QueueSpec("org", weight=-1),
            QueueSpec("team-a", parent="nope"),
            QueueSpec("team-b", parent="org", quotas={H100: FlavorQuota(-3)}),
        ]
    )
    assert len(msgs) == 3


def test_parent_lending_limit_may_exceed_its_own_nominal() -> None:
    # A parent lends from its subtree quota, which includes what its children lend.
    specs = [
        QueueSpec("root"),
        QueueSpec("org", parent="root", quotas={H100: FlavorQuota(0, lending_limit=4)}),
        QueueSpec("team", parent="org", quotas={H100: FlavorQuota(8)}),
    ]
    assert list(validate_specs(specs)) == ["root", "org", "team"]


def test_parents_come_first_whatever_the_input_order() -> None:
    specs = [QueueSpec("team", parent="org"), QueueSpec("org", parent="root"), QueueSpec("root")]
    assert list(validate_specs(specs)) == ["root", "org", "team"]

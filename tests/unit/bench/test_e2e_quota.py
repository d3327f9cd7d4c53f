"""``bench.e2e.run --quota``: the leaves' nominal GPUs together as a multiple of the cluster's."""

from __future__ import annotations

import pytest

from bench.e2e._workload import leaf_names, leaf_share, queue_tree
from bench.e2e.run import parse_args


def test_quota_defaults_to_the_cluster_and_takes_a_multiple() -> None:
    assert parse_args(["--quick", "--contended"]).quota == 1.0
    assert parse_args(["--quick", "--contended", "--quota", "2"]).quota == 2.0


@pytest.mark.parametrize("bad", ["0", "-1"])
def test_a_quota_not_above_zero_is_refused_naming_the_option(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--quota", bad])
    assert "--quota" in capsys.readouterr().err


def test_twice_the_cluster_gives_each_leaf_twice_its_share() -> None:
    # What run_kubegang and the Kueue half pass for --quota 2 on 1,024 GPUs over 16 leaves.
    leaves = leaf_names(16)
    tree = queue_tree(leaves, round(1024 * 2.0), "nvidia.com/gpu", "ns")
    nominal = sum(doc["spec"]["resources"][0]["nominal"] for doc in tree[1:])
    assert nominal == 2048 == 2 * 16 * leaf_share(1024, leaves)

"""Node labels: GPU feature discovery's keys and values, plus kubegang's NVLink domain."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from kubegang.agent import build_status, label_value, node_labels, parse_dump

NOW = datetime(2026, 1, 1, tzinfo=UTC)
Load = Callable[[str], dict[str, Any]]
VALID = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"


@pytest.mark.parametrize(
    ("product", "label"),
    [
        ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
        ("NVIDIA A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB"),
        ("NVIDIA GeForce RTX 4090 (rev a1)", "NVIDIA-GeForce-RTX-4090-_rev-a1"),
        ("  Tesla V100  ", "Tesla-V100"),
        ("x" * 80, "x" * 63),
    ],
)
def test_product_label_values(product: str, label: str) -> None:
    import re

    assert label_value(product) == label
    assert re.match(VALID, label_value(product))


def test_labels_for_a_node_without_domain_remove_the_domain_labels(load_dump_fixture: Load) -> None:
    labels = node_labels(build_status(parse_dump(load_dump_fixture("h200-sxm-1gpu")), now=NOW))
    assert labels == {
        "kubegang.io/nvlink-domain": None,
        "nvidia.com/gpu.clique": None,
        "nvidia.com/gpu.count": "1",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-H200",
    }


def test_nvidia_labels_can_be_left_to_gpu_feature_discovery(load_dump_fixture: Load) -> None:
    status = build_status(parse_dump(load_dump_fixture("gb200-nvl72-tray")), now=NOW)
    assert node_labels(status, nvidia_labels=False) == {
        "kubegang.io/nvlink-domain": "7a1c3e52-9f4b-4c1d-8e2a-5b6f0d3c9a81.32766"
    }


def test_no_gpus_means_not_present() -> None:
    status = build_status(parse_dump({"devices": []}), now=NOW)
    labels = node_labels(status)
    assert labels["nvidia.com/gpu.present"] == "false" and labels["nvidia.com/gpu.count"] == "0"
    assert labels["nvidia.com/gpu.product"] is None


def test_without_nvml_no_label_is_touched() -> None:
    """The agent DaemonSet selects nodes by ``nvidia.com/gpu.present=true``: a ``false`` written
    before the driver has loaded would remove the agent from the node for good."""
    dump = {"init": {"code": 9, "error": "NVMLError_DriverNotLoaded", "msg": "Driver Not Loaded"}, "devices": []}
    status = build_status(parse_dump(dump), now=NOW)
    assert node_labels(status) == {}
    assert node_labels(status, nvidia_labels=False) == {}

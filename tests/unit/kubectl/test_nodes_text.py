"""``kubectl gang nodes`` with the agents' GPUNode objects (docs/why-pending.md): an unhealthy GPU is an
``x`` in the picture and counted under UNHEALTHY, and an NVLink domain of several nodes is one ``[...]``."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from kubegang.kubectl import Engine, nodes_report
from kubegang.kubectl._nodes import nodes_lines
from kubegang.kubectl._render import Style

from .conftest import H200, cluster, job


class Plain(Style):
    """No colour, so lines compare as text."""

    def __init__(self) -> None:
        self.on = False


def gpunode(name: str, *, unhealthy: Collection[int] = (), nvlink: str | None = None) -> dict[str, Any]:
    """A GPUNode as the agent publishes it: 8 GPUs, ``unhealthy`` ones with an XID, an NVLink domain."""
    gpus = [{"index": i, "product": H200,
             "health": {"healthy": i not in unhealthy, "reasons": ["xid 79"] if i in unhealthy else []}}
            for i in range(8)]
    status: dict[str, Any] = {"gpus": gpus, "gpuCount": 8, "healthyGpus": 8 - len(unhealthy)}
    if nvlink:
        status["nvlinkDomain"] = {"id": nvlink, "clusterUuid": "c-1", "cliqueId": 1, "state": "Ready",
                                  "status": "Success"}
    return {"apiVersion": "kubegang.io/v1alpha1", "kind": "GPUNode", "metadata": {"name": name}, "status": status}


def _lines_of(gpunodes: list[dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    """n0 runs a whole-node job; the GPUNodes given say the rest."""
    objects = cluster(job("run", "a", "team-a", 1, phase="Running", reason="Running", on=["n0"]))
    objects.gpunodes = gpunodes
    report = nodes_report(Engine(objects))
    return report, nodes_lines(report, Plain())


def test_an_unhealthy_gpu_is_an_x_and_counted_under_unhealthy() -> None:
    report, lines = _lines_of([gpunode("n1", unhealthy=(2, 5))])
    assert report["levels"]["leaf"] == [{"domain": "h200-leaves", "nodes": 4, "gpus": 32, "free": 22, "unhealthy": 2}]
    table = lines.index("leaf:")
    assert lines[table + 1].split() == ["DOMAIN", "NODES", "GPUS", "FREE", "UNHEALTHY"]
    assert lines[table + 2].split() == ["h200-leaves", "4", "32", "22", "2"]
    # Unhealthy first, then in use, then free: n1 has two bad GPUs and six free ones.
    assert "      ######## xx...... ........ ........" in lines


def test_an_nvlink_domain_of_several_nodes_is_one_bracketed_group() -> None:
    report, lines = _lines_of([gpunode("n0", nvlink="nvl-0"), gpunode("n1", nvlink="nvl-0", unhealthy=(0,))])
    assert {"domain": "nvl-0", "nodes": 2, "gpus": 16, "free": 7, "unhealthy": 1} in report["levels"]["nvlink"]
    assert "nvlink: every NVLink domain is a single node" not in lines
    nvlink = lines.index("nvlink:")
    assert lines[nvlink + 2].split() == ["nvl-0", "2", "16", "7", "1"]
    assert "      [######## x.......] ........ ........" in lines

"""One dump replayed for many fake nodes still gives every node GPUs of its own."""

from __future__ import annotations

from pathlib import Path

from kubegang.agent._replay import ReplayBackend

DUMP = Path(__file__).resolve().parents[2] / "fixtures" / "nvml" / "hgx-h100-8gpu.nvml.json"


def _uuids(backend: ReplayBackend) -> list[str]:
    return [d["UUID"] for d in backend.read()["devices"] if isinstance(d, dict) and isinstance(d.get("UUID"), str)]


def test_uuids_differ_between_nodes_and_are_stable_per_node() -> None:
    a, b = ReplayBackend(DUMP, node_name="su1-000"), ReplayBackend(DUMP, node_name="su1-001")
    ua, ub = _uuids(a), _uuids(b)
    assert len(ua) == 8
    assert len(set(ua)) == 8
    assert not set(ua) & set(ub)
    assert ua == _uuids(ReplayBackend(DUMP, node_name="su1-000"))
    assert all(u.startswith("GPU-") for u in ua)


def test_without_a_node_name_the_dump_is_served_as_recorded() -> None:
    plain = _uuids(ReplayBackend(DUMP))
    assert plain[0] == "GPU-f364ac8d-96dd-5bba-baf5-adebbb8cccd7"

"""HCAs and ports from a fake /sys/class/infiniband tree."""

from __future__ import annotations

from pathlib import Path

from kubegang.agent import read_hcas


def port(root: Path, hca: str, n: int, **files: str) -> None:
    d = root / hca / "ports" / str(n)
    (d / "gids").mkdir(parents=True)
    for name, text in files.items():
        target = d / "gids" / "0" if name == "gid0" else d / name
        target.write_text(text + "\n")


def test_reads_hcas_ports_guids_state_rate_and_link_layer(tmp_path: Path) -> None:
    (tmp_path / "mlx5_1").mkdir()
    (tmp_path / "mlx5_1" / "node_guid").write_text("b83f:d203:00a1:b2c4\n")
    port(
        tmp_path,
        "mlx5_1",
        1,
        state="4: ACTIVE",
        rate="400 Gb/sec (4X NDR)",
        link_layer="InfiniBand",
        gid0="fe80:0000:0000:0000:b83f:d203:00a1:b2c4",
    )
    port(tmp_path, "mlx5_0", 1, state="1: DOWN", rate="10 Gb/sec (4X SDR)", link_layer="Ethernet")
    port(tmp_path, "mlx5_0", 2, state="4: ACTIVE", rate="200 Gb/sec (2X NDR)", link_layer="Ethernet")

    hcas = read_hcas(tmp_path)

    assert isinstance(hcas, list)
    assert [h["name"] for h in hcas] == ["mlx5_0", "mlx5_1"]
    assert hcas[1] == {
        "name": "mlx5_1",
        "nodeGuid": "b83f:d203:00a1:b2c4",
        "ports": [
            {
                "port": 1,
                "guid": "b83f:d203:00a1:b2c4",
                "state": "ACTIVE",
                "rate": "400 Gb/sec (4X NDR)",
                "linkLayer": "InfiniBand",
            }
        ],
    }
    # Missing files leave nulls rather than failing the HCA.
    assert hcas[0]["nodeGuid"] is None
    assert [(p["port"], p["state"], p["guid"]) for p in hcas[0]["ports"]] == [
        (1, "DOWN", None),
        (2, "ACTIVE", None),
    ]


def test_no_infiniband_class_means_no_hcas(tmp_path: Path) -> None:
    assert read_hcas(tmp_path / "absent") == []


def test_an_unreadable_root_is_an_error_entry(tmp_path: Path) -> None:
    root = tmp_path / "file-not-dir"
    root.write_text("")
    entry = read_hcas(root)
    assert isinstance(entry, dict) and entry["error"] == "NotADirectoryError"

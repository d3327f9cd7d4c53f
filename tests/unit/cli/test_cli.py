"""The offline CLI answers with the production engine and exits non-zero when a gang cannot fit."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubegang.cli import main

SHAPES = Path(__file__).resolve().parents[3] / "hack" / "shapes"


def test_plan_places_a_rack_sized_gang_in_one_nvlink_domain(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--shape", str(SHAPES / "gb200-nvl72.yaml"), "--pods", "18", "--gpus-per-pod", "4"]) == 0
    out = capsys.readouterr().out
    assert "within nvlink" in out
    assert out.count("pod ") == 18


def test_plan_explains_why_a_gang_does_not_fit(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "--shape", str(SHAPES / "superpod-h100.yaml"), "--pods", "40", "--required", "leaf"])
    assert code == 1
    assert "needs 40 nodes x 8 GPUs in one leaf" in capsys.readouterr().out


def test_bad_level_and_missing_file_are_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        main(["plan", "--shape", "x", "--pods", "1", "--required", "rack"])
    assert main(["shape", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read shape" in capsys.readouterr().err

"""``bench.run_all --out DIR`` writes every artefact under DIR and nothing elsewhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import run_all


def _tiny(out: Path) -> list[str]:
    return ["--seeds", "1", "--gang-seeds", "2", "--jobs", "20", "--openb-nodes", "50", "--openb-tasks", "400",
            "--sweep-seeds", "2", "--sweep-trials", "20", "--scale-grid", "tiny", "--out", str(out)]


def _committed() -> dict[str, int]:
    """Modification times of what a default run writes: docs/benchmarks.md and docs/benchmarks/."""
    docs = run_all.DOCS
    paths = [docs / "benchmarks.md", *(docs / run_all.PLOTS_DIR).rglob("*")]
    return {str(p.relative_to(docs)): p.stat().st_mtime_ns for p in paths if p.exists()}


def test_every_artefact_lands_under_out_and_the_committed_plots_are_untouched(tmp_path: Path) -> None:
    before = _committed()
    assert run_all.main(_tiny(tmp_path)) == 0
    page = (tmp_path / "benchmarks.md").read_text()
    plots = tmp_path / run_all.PLOTS_DIR
    for link in [line.split("](", 1)[1].rstrip(")") for line in page.splitlines() if line.startswith("![")]:
        assert (tmp_path / link).is_file(), link  # every plot the page shows is beside it
    raw = json.loads((plots / run_all.RESULTS).read_text())
    assert raw["gangs"] and all("metrics" in row for row in raw["gangs"])
    assert raw["openb"]["workloads"]["default"]["runs"]["kubegang"]["curves"]  # per-seed curves
    assert [row["seed"] for row in raw["sweep"] if row["system"] == "kubegang"] == [1, 2, 1, 2]  # per seed, 2 variants
    assert raw["scale"]["plan"] and raw["scale"]["queue"] and raw["scale"]["nodes"]
    assert "## 4. The short-job sweep" in page and "## 5. Cost as the work grows" in page
    assert _committed() == before  # the committed page, plots and raw results were not touched


def test_a_markdown_file_as_out_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run_all.main(["--out", str(tmp_path / "benchmarks.md")])
    assert "--out is a directory" in capsys.readouterr().err


def test_section_3_says_whether_the_end_to_end_page_has_a_kueue_half(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    results = tmp_path / "results.json"
    monkeypatch.setattr(run_all, "E2E_RESULTS", results)
    results.write_text(json.dumps({"plain": {}, "kubegang": {}}))
    assert "has no Kueue half" in run_all._e2e_what()
    results.write_text(json.dumps({"plain": {}, "kubegang": {}, "kueue": {"pods": 1}}))
    what = run_all._e2e_what()
    assert "the same jobs through the real Kueue, and the same pods" in what and "no Kueue half" not in what

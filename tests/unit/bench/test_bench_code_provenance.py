"""The end-to-end benchmarks name the code their processes ran, and refuse to run another checkout's."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from bench.e2e import run


def test_the_results_name_this_checkouts_package_and_commit() -> None:
    found = run.code()
    assert Path(found["kubegang_package"]) == run.REPO / "kubegang"
    assert re.fullmatch(r"[0-9a-f]{40}", found["commit"]), found
    assert isinstance(found["uncommitted_changes"], bool)


def test_a_worktree_whose_interpreter_imports_another_checkout_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                                           tmp_path: Path) -> None:
    """A "before" worktree run with the main checkout's editable install would start the main checkout's
    processes: the harness says so and how to fix it, instead of measuring the wrong code."""
    monkeypatch.setattr(run, "REPO", tmp_path)
    with pytest.raises(RuntimeError, match=f"not from this checkout .*PYTHONPATH={re.escape(str(tmp_path))}"):
        run.code()


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_an_edit_to_an_already_dirty_tree_changes_what_is_recorded(tmp_path: Path) -> None:
    """A run records the checkout at its start and again when kubegang's processes start: an edit in
    between (to a tree that may already differ from its commit) must show as a difference."""
    _git(tmp_path, "init", "-q")
    (tmp_path / "core.py").write_text("A = 1\n")
    _git(tmp_path, "add", "core.py")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    clean = run.git_state(tmp_path)
    assert clean["uncommitted_changes"] is False and clean["uncommitted_digest"] is None
    (tmp_path / "core.py").write_text("A = 2\n")
    dirty = run.git_state(tmp_path)
    (tmp_path / "core.py").write_text("A = 3\n")
    dirtier = run.git_state(tmp_path)
    assert dirty["commit"] == dirtier["commit"] == clean["commit"]
    assert dirty["uncommitted_changes"] and dirtier["uncommitted_changes"]
    assert dirty["uncommitted_digest"] != dirtier["uncommitted_digest"]


def test_a_changed_checkout_is_recorded_with_the_half_it_reached() -> None:
    out = {"code": {**run.code(), "commit": "0" * 40}}
    run.check_code_unchanged(out, "kubegang")
    assert out["code_changed_before"]["kubegang"] == run.code()
    unchanged = {"code": run.code()}
    run.check_code_unchanged(unchanged, "kubegang")
    assert "code_changed_before" not in unchanged

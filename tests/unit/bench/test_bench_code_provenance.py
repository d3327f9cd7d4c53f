"""The end-to-end benchmarks name the code their processes ran, and refuse to run another checkout's."""

from __future__ import annotations

import re
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

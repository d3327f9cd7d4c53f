"""A plain ``pip install`` ships the cluster shapes: ``kubegang plan --shape NAME`` works outside the repo.

The wheel is built from a copy of what the Dockerfile copies (so nothing is written into the shared
working tree), its file list is checked, and the CLI is then run from the unpacked wheel in a
directory that has no ``hack/`` next to it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from kubegang.shapes import SHAPES_DIR, shipped_shapes

REPO = Path(__file__).resolve().parents[3]
SHIPPED = shipped_shapes()


def test_hack_shapes_are_links_to_the_packaged_shapes() -> None:
    assert SHAPES_DIR == REPO / "kubegang" / "_shapes"
    assert {"superpod-h100", "gb200-nvl72", "bench-1024", "openb"} <= set(SHIPPED)
    hack = {p.stem: p for p in (REPO / "hack" / "shapes").glob("*.yaml")}
    assert sorted(hack) == SHIPPED
    for name, link in hack.items():
        assert link.is_symlink(), f"{link} should link to kubegang/_shapes/{name}.yaml"
        assert link.resolve() == (SHAPES_DIR / f"{name}.yaml").resolve()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    for name in ("kubegang", "operator", "extender", "agent"):
        shutil.copytree(REPO / name, src / name, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc"))
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
         "-w", str(root / "dist"), str(src)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (whl,) = (root / "dist").glob("kubegang-*.whl")
    return whl


def test_the_wheel_carries_every_shipped_shape(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [s for s in SHIPPED if f"kubegang/_shapes/{s}.yaml" not in names]
    assert not missing, f"shapes not in {wheel.name}: {missing}"
    assert not [n for n in names if n.startswith("kubegang/_shapes/") and not n.endswith(".yaml")]


def test_plan_by_shape_name_from_the_installed_wheel_outside_the_repo(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]); import kubegang.cli as cli; "
        "assert cli.__file__.startswith(sys.argv[1]), cli.__file__; "
        "sys.exit(cli.main(sys.argv[2:]))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-c", script, str(site), "plan", "--shape", "superpod-h100", "--pods", "16",
         "--required", "leaf"],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "placed 16 x 8 GPUs within leaf" in proc.stdout


def test_the_wheel_declares_kubectl_gang_and_it_answers_help(wheel: Path, tmp_path: Path) -> None:
    """docs/install.md: ``pip install kubegang`` puts ``kubectl-gang`` on PATH (kubectl runs it as ``kubectl gang``)."""
    archive = zipfile.ZipFile(wheel)
    entry_points = next(n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt"))
    assert "kubectl-gang = kubegang.kubectl:main" in archive.read(entry_points).decode()
    site = tmp_path / "site"
    archive.extractall(site)
    script = "import sys; sys.path.insert(0, sys.argv[1]); import kubegang.kubectl as k; sys.exit(k.main(['--help']))"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", script, str(site)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "usage: kubectl gang" in proc.stdout

"""The image's install step, run here because no Docker engine is available: the build context that
.dockerignore lets through, installed the way the Dockerfile installs it (a fresh virtual environment,
binary wheels only, pip removed afterwards), and each process's entry point answers --help.

Slow (it installs every dependency from the package index into a new environment), so it is one test.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
ENTRY_POINTS = ("kubegang-operator", "kubegang-extender", "kubegang-agent")


def _allowed_context() -> list[str]:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    assert "*" in lines, ".dockerignore must start from nothing and allow-list what the image needs"
    return [line[1:].rstrip("/") for line in lines if line.startswith("!")]


def _build_context(target: Path) -> Path:
    target.mkdir()
    for entry in _allowed_context():
        source = REPO / entry
        if source.is_dir():
            shutil.copytree(source, target / entry, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, target / entry)
    return target


def test_dockerfile_install_step_gives_three_working_entry_points(tmp_path: Path) -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    copied = {m.rstrip("/") for line in re.findall(r"^COPY (?!--from)(.+) \S+$", dockerfile, flags=re.M)
              for m in line.split()}
    assert copied == set(_allowed_context()), "Dockerfile COPY lines and .dockerignore must agree"
    assert re.search(r"^USER 10001:10001$", dockerfile, flags=re.M), "the image must run as a numeric non-root user"
    assert "pip install --only-binary=:all: ." in dockerfile

    context = _build_context(tmp_path / "context")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    install = subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check",
                              "--only-binary=:all:", str(context)], capture_output=True, text=True, timeout=900)
    assert install.returncode == 0, install.stderr[-4000:]
    subprocess.run([str(venv / "bin" / "pip"), "uninstall", "-y", "--quiet", "pip", "setuptools", "wheel"],
                   check=True, capture_output=True, timeout=120)
    shutil.rmtree(context)  # the installed package must not lean on the source tree

    for name in ENTRY_POINTS:
        proc = subprocess.run([str(venv / "bin" / name), "--help"], capture_output=True, text=True, timeout=120,
                              cwd=tmp_path)
        assert proc.returncode == 0, f"{name} --help: {proc.stderr[-2000:]}"
        assert f"usage: {name}" in proc.stdout, proc.stdout[:500]
    site = subprocess.run([str(venv / "bin" / "python"), "-c",
                           "import kubegang.operator, kubegang.extender, kubegang.agent, sys; "
                           "print(list(kubegang.operator.__path__)[0], kubegang.agent.__file__)"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert site.returncode == 0, site.stderr
    assert str(venv) in site.stdout, "kubegang must be imported from the installed environment"
    assert not (venv / "bin" / "pip").exists()

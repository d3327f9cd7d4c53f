"""Dependencies whose internals kubegang imports are pinned below their next major version."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
INTERNAL_USE = {"lightkube": "2"}
"""Distribution → the major version that may move the internals we import (``lightkube.config.client_adapter``)."""


def test_dependencies_used_by_their_internals_have_an_upper_bound() -> None:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    for name, major in INTERNAL_USE.items():
        spec = next(d for d in deps if re.match(rf"{name}\b", d))
        assert f"<{major}" in spec.replace(" ", ""), f"{name}: {spec!r} has no upper bound <{major}"
        installed = int(version(name).split(".")[0])
        assert installed < int(major), f"{name} {version(name)} is installed, outside {spec!r}"

"""The values reference in charts/kubegang/README.md covers every key of values.yaml, with its default."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROW = re.compile(r"^\| `(?P<key>[^`]+)` \| `(?P<default>.*?)` \| .* \|$")


def _rows(chart_dir: Path) -> dict[str, str]:
    rows = {}
    for line in (chart_dir / "README.md").read_text().splitlines():
        match = ROW.match(line)
        if match:
            rows[match["key"]] = match["default"]
    return rows


def _leaves(values: dict[str, Any], prefix: str = "") -> Iterator[str]:
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            yield from _leaves(value, path + ".")
        else:
            yield path


def _get(values: Any, path: str) -> Any:
    for key in path.split("."):
        values = values[key]
    return values


def test_every_value_is_in_the_reference(chart_dir: Path) -> None:
    values = yaml.safe_load((chart_dir / "values.yaml").read_text())
    rows = _rows(chart_dir)
    assert rows, "no values table found in README.md"
    # A row may document a whole object (securityContext.pod, resources) instead of each of its leaves.
    missing = [leaf for leaf in _leaves(values)
               if not any(leaf == key or leaf.startswith(key + ".") for key in rows)]
    assert not missing, f"values.yaml keys without a row in README.md: {missing}"


def test_every_reference_row_names_a_value_and_its_default(chart_dir: Path) -> None:
    values = yaml.safe_load((chart_dir / "values.yaml").read_text())
    for key, default in _rows(chart_dir).items():
        try:
            value = _get(values, key)
        except (KeyError, TypeError):
            raise AssertionError(f"README.md documents {key}, which values.yaml does not have") from None
        assert json.loads(default) == value, f"{key}: README.md says {default}, values.yaml has {json.dumps(value)}"

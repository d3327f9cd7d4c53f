"""Shared fixtures for the agent's unit tests: the NVML dumps copied into tests/fixtures/nvml."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nvml"


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture
def load_dump_fixture() -> Callable[[str], dict[str, Any]]:
    """A fresh (mutable) copy of a fixture dump by name."""

    def load(name: str) -> dict[str, Any]:
        return copy.deepcopy(json.loads((FIXTURES / f"{name}.nvml.json").read_text()))

    return load

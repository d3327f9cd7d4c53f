"""Parametrises tests that take ``invalid_case`` or ``valid_case`` with the shared validation table."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest


def load_cases_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kubegang_api_cases", Path(__file__).with_name("cases.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


CASES = load_cases_module()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    for section in ("invalid", "valid"):
        fixture = f"{section}_case"
        if fixture in metafunc.fixturenames:
            cases = CASES.load(section)
            metafunc.parametrize(fixture, cases, ids=[case.name for case in cases])


@pytest.fixture
def k8s_path() -> object:
    """``cases.k8s_path``: a pydantic location in Kubernetes' spelling."""
    return CASES.k8s_path


@pytest.fixture
def invalid_cases() -> list[object]:
    """Every ``invalid`` case of the table."""
    return list(CASES.load("invalid"))

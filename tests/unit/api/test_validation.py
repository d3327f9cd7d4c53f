"""The shared validation table against the Python models: every invalid manifest is refused with an
error that names the field, every valid one is accepted, and every CEL rule has a Python twin."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import ValidationError

from kubegang.api import KINDS, crd_document, parse_manifest

Path = Callable[[tuple[int | str, ...]], str]


def _errors(error: ValidationError, k8s_path: Path) -> list[tuple[str, str]]:
    return [(k8s_path(tuple(e["loc"])), e["msg"]) for e in error.errors()]


def _within(path: str, field: str) -> bool:
    """Whether ``path`` is ``field`` or below it."""
    return path == field or path.startswith((f"{field}.", f"{field}["))


def _names_field(field: str, errors: list[tuple[str, str]]) -> bool:
    """An error at the field (or below it), or at an enclosing object whose message names the field."""
    leaf = re.sub(r"\[\d+\]$", "", field).rsplit(".", 1)[-1]
    return any(
        _within(path, field) or ((path == "" or _within(field, path)) and leaf in message) for path, message in errors
    )


def test_invalid_manifest_is_refused_naming_the_field(invalid_case: Any, k8s_path: Path) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_manifest(invalid_case.manifest)
    errors = _errors(caught.value, k8s_path)
    assert _names_field(invalid_case.field, errors), f"{invalid_case.field} not named in {errors}"


def test_valid_manifest_is_accepted_and_round_trips(valid_case: Any) -> None:
    model = parse_manifest(valid_case.manifest)
    assert parse_manifest(model.to_dict()) == model


def _cel_messages() -> list[str]:
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            found.extend(rule["message"] for rule in node.get("x-kubernetes-validations", []))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for model in KINDS:
        walk(crd_document(model)["spec"]["versions"][0]["schema"])
    return found


@pytest.mark.parametrize("message", _cel_messages(), ids=lambda m: m[:48])
def test_every_cel_rule_has_a_python_twin(message: str, invalid_cases: list[Any], k8s_path: Path) -> None:
    """Some invalid case is refused in Python with the very message the CEL rule gives."""
    refused_with: list[str] = []
    for case in invalid_cases:
        try:
            parse_manifest(case.manifest)
        except ValidationError as error:
            refused_with.extend(msg for _, msg in _errors(error, k8s_path))
    assert any(message in text for text in refused_with)

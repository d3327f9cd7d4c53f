"""The JSON Schema → structural schema converter on constructs the models may grow."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from kubegang.api import SchemaError, structural


class _Inner(BaseModel):
    """Inner."""

    model_config = ConfigDict(extra="forbid")
    n: int = Field(default=2, gt=0, le=9)


class _Outer(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    inner: _Inner | None = None
    """The ``inner`` one."""
    either: StrictInt | StrictStr = 1
    tags: dict[str, str] = Field(default_factory=dict)
    mode: str = Field(default="a", json_schema_extra={"enum": ["a", "b"]})


def test_optional_models_become_plain_typed_properties() -> None:
    schema = structural(_Outer.model_json_schema())
    inner = schema["properties"]["inner"]
    assert inner["type"] == "object" and inner["description"] == "The `inner` one."
    assert inner["properties"]["n"] == {
        "type": "integer",
        "default": 2,
        "exclusiveMinimum": True,
        "maximum": 9,
        "minimum": 0,
    }
    assert schema["properties"]["either"] == {"default": 1, "x-kubernetes-int-or-string": True}
    assert schema["properties"]["tags"] == {"type": "object", "additionalProperties": {"type": "string"}}
    assert "additionalProperties" not in schema and "required" not in schema


class _TwoModels(BaseModel):
    value: _Inner | _Outer


class _Open(BaseModel):
    value: dict[str, Any]


class _Unique(BaseModel):
    value: set[str]


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (_TwoModels, r"\.value: anyOf"),
        (_Open, r"\.value: an open object"),
        (_Unique, r"\.value: JSON Schema keyword 'uniqueItems'"),
    ],
)
def test_constructs_without_a_structural_form_are_refused_by_path(model: type[BaseModel], message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        structural(model.model_json_schema())

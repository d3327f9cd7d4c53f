"""pydantic JSON Schema → Kubernetes structural OpenAPI v3 schema.

Why a converter and not the pydantic output as is: kube-apiserver accepts only *structural* schemas
(every node typed, no ``$ref``, no ``anyOf`` for optional fields, ``additionalProperties`` never
next to ``properties``, no ``uniqueItems``), and it has its own spellings for what JSON Schema says
differently (``x-kubernetes-int-or-string`` for ``int | str``, ``exclusiveMinimum: true`` beside
``minimum``). The conversion is strict: any keyword it does not know raises :class:`SchemaError`,
so a new pydantic construct fails the generator instead of producing a CRD the API server refuses.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_COPIED = frozenset({
    "type", "format", "description", "enum", "minimum", "maximum", "minLength", "maxLength",
    "minItems", "maxItems", "minProperties", "maxProperties", "pattern", "multipleOf", "required",
})  # fmt: skip
_DROPPED = frozenset({"title", "examples"})
_NULL = {"type": "null"}
_FIRST = ("type", "description")
_STRING_BOUNDS = frozenset({"maxLength", "minLength", "pattern"})
_LITERAL = re.compile(r"``([^`]+)``")


class SchemaError(ValueError):
    """A JSON Schema construct that has no structural equivalent; the message names where."""


def structural(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The structural form of a pydantic model's JSON schema (``model_json_schema(by_alias=True)``)."""
    return _Converter(schema.get("$defs", {})).convert(schema, "")


class _Converter:
    def __init__(self, defs: Mapping[str, Any]) -> None:
        self._defs = defs

    def convert(self, node: Mapping[str, Any], path: str) -> dict[str, Any]:
        node = self._inline(node, path)
        if "anyOf" in node:
            node = self._collapse_any_of(node, path)
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _COPIED or key.startswith("x-kubernetes-"):
                out[key] = value
            elif key in _DROPPED or key == "$defs":
                continue
            elif key == "default":
                if value is not None:
                    out[key] = value
            elif key == "const":
                out["enum"] = [value]
            elif key in ("exclusiveMinimum", "exclusiveMaximum"):
                bound = "minimum" if key == "exclusiveMinimum" else "maximum"
                out[bound] = value
                out[key] = True
            elif key == "properties":
                out[key] = {name: self.convert(sub, f"{path}.{name}") for name, sub in value.items()}
            elif key == "items":
                out[key] = self.convert(value, f"{path}[*]")
            elif key == "additionalProperties":
                extra = self._additional(value, node, path)
                if extra is not None:
                    out[key] = extra
            else:
                raise SchemaError(f"{path or '<root>'}: JSON Schema keyword {key!r} has no structural equivalent")
        if "required" in out and not out["required"]:
            del out["required"]
        if "description" in out:
            out["description"] = _LITERAL.sub(r"`\1`", " ".join(str(out["description"]).split()))
        if "type" not in out and not (
            out.get("x-kubernetes-int-or-string") or out.get("x-kubernetes-preserve-unknown-fields")
        ):
            raise SchemaError(f"{path or '<root>'}: every schema node needs a type")
        return _ordered(out)

    def _inline(self, node: Mapping[str, Any], path: str) -> dict[str, Any]:
        """``$ref`` (and pydantic's single-element ``allOf`` wrapper) replaced by the definition;
        keys beside the reference (description, default) win over the definition's own."""
        node = dict(node)
        all_of = node.pop("allOf", None)
        if all_of is not None:
            if len(all_of) != 1:
                raise SchemaError(f"{path or '<root>'}: allOf with several schemas has no structural equivalent")
            node = {**all_of[0], **node}
        ref = node.pop("$ref", None)
        if ref is None:
            return node
        name = ref.rsplit("/", 1)[-1]
        if name not in self._defs:
            raise SchemaError(f"{path or '<root>'}: unresolved reference {ref!r}")
        target = self._inline(self._defs[name], path)
        return {**target, **node}

    def _collapse_any_of(self, node: dict[str, Any], path: str) -> dict[str, Any]:
        """``X | None`` becomes X (optional is "not required", never null); ``int | str`` becomes
        ``x-kubernetes-int-or-string``."""
        options = [self._inline(option, path) for option in node.pop("anyOf")]
        options = [option for option in options if option != _NULL]
        if len(options) == 1:
            return {**options[0], **node}
        types = sorted(str(option.get("type")) for option in options)
        if types == ["integer", "string"]:
            bounds = {k: v for option in options for k, v in option.items() if k != "type"}
            if set(bounds) <= _STRING_BOUNDS:
                return {"x-kubernetes-int-or-string": True, **bounds, **node}
        raise SchemaError(f"{path or '<root>'}: anyOf {types} has no structural equivalent")

    def _additional(self, value: Any, node: Mapping[str, Any], path: str) -> dict[str, Any] | None:
        """A map's value schema; ``false`` (closed object) is the structural default and is dropped;
        ``true`` is allowed only where unknown fields are preserved on purpose."""
        if value is False:
            return None
        if value is True:
            if node.get("x-kubernetes-preserve-unknown-fields"):
                return None
            raise SchemaError(
                f"{path or '<root>'}: an open object needs x-kubernetes-preserve-unknown-fields on purpose"
            )
        if "properties" in node:
            raise SchemaError(f"{path or '<root>'}: additionalProperties beside properties is not structural")
        return self.convert(value, f"{path}[*]")


def _ordered(node: dict[str, Any]) -> dict[str, Any]:
    """Keys in a stable, readable order: type and description first, then alphabetical (property
    order itself is kept: it is the declaration order, which is how the fields read best)."""
    keys = [k for k in _FIRST if k in node] + sorted(k for k in node if k not in _FIRST)
    return {k: node[k] for k in keys}

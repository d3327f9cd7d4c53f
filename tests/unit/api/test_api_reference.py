"""docs/api.md against the models: every documented field exists with the documented default and
rules, and every field of the models is documented.

The reference is read as a user reads it: the field tables under "## GPUJob" and "## GPUQueue"
(``| `field` | default | rules |``), the "Status" paragraph under each, and the ``kubectl get``
columns line. A field documented but not in the model fails, and so does a model field the page
does not mention. Rules are checked where the page states them in a form a machine can read: the
type word (``integer``, ``number``, ``boolean``), bounds (``≥ 1``, ``> 0``, ``≤ 1e9``, ``1..999``)
and the list of allowed values (``none``, ``torchrun``, ``mpi``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from kubegang.api import GPUJob, GPUJobSpec, GPUJobStatus, GPUQueue, GPUQueueSpec, GPUQueueStatus, openapi_schema
from kubegang.api._resource import Resource

API_MD = Path(__file__).resolve().parents[3] / "docs" / "api.md"
KINDS: dict[str, tuple[type[Resource], type[BaseModel], type[BaseModel]]] = {
    "GPUJob": (GPUJob, GPUJobSpec, GPUJobStatus),
    "GPUQueue": (GPUQueue, GPUQueueSpec, GPUQueueStatus),
}
_CODE = re.compile(r"`([^`]+)`")


@dataclass(frozen=True)
class Row:
    kind: str
    field: str
    """As documented: ``topology.required``, ``resources[]``."""
    default: str
    rules: str

    @property
    def path(self) -> list[str]:
        return self.field.removesuffix("[]").split(".")


def _section(kind: str) -> str:
    """The text of ``## <kind> ...`` up to the next ``## `` heading."""
    text = API_MD.read_text(encoding="utf-8")
    match = re.search(rf"^## {kind}\b.*?$(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert match, f"docs/api.md has no '## {kind}' section"
    return match.group(1)


def _cells(line: str) -> list[str]:
    # Split on the table's pipes, not on pipes inside `code` (none today, but cheap to respect).
    parts, current, in_code = [], "", False
    for char in line.strip().strip("|"):
        if char == "`":
            in_code = not in_code
        if char == "|" and not in_code:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    parts.append(current.strip())
    return parts


def field_rows(kind: str) -> list[Row]:
    """The rows of the kind's ``| field | default | rules |`` table."""
    lines = _section(kind).splitlines()
    start = next((i for i, line in enumerate(lines) if _cells(line)[:3] == ["field", "default", "rules"]), None)
    assert start is not None, f"docs/api.md: no '| field | default | rules |' table under '## {kind}'"
    rows = []
    for line in lines[start + 2:]:  # past the header and its |---| line
        if not line.strip().startswith("|"):
            break
        cells = _cells(line)
        assert len(cells) == 3, f"docs/api.md {kind} table: row with {len(cells)} cells: {line}"
        names = _CODE.findall(cells[0])
        assert len(names) == 1, f"docs/api.md {kind} table: the field cell should be one `name`: {line}"
        rows.append(Row(kind, names[0], cells[1], cells[2]))
    assert rows, f"docs/api.md: empty field table under '## {kind}'"
    return rows


def _by_alias(model: type[BaseModel]) -> dict[str, tuple[str, FieldInfo]]:
    return {(info.alias or name): (name, info) for name, info in model.model_fields.items()}


def _submodel(info: FieldInfo) -> type[BaseModel] | None:
    """The model a field holds (directly, optionally, or as list items)."""
    annotation: Any = info.annotation
    candidates = [annotation, *getattr(annotation, "__args__", ())]
    for candidate in candidates:
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _resolve(spec: type[BaseModel], path: list[str]) -> tuple[type[BaseModel], FieldInfo]:
    """(model that declares the last part, its FieldInfo); AssertionError naming the missing part."""
    model = spec
    for i, part in enumerate(path):
        fields = _by_alias(model)
        assert part in fields, (f"documented field {'.'.join(path)!r}: {model.__name__} has no {part!r} "
                                f"(it has: {', '.join(fields)})")
        info = fields[part][1]
        if i == len(path) - 1:
            return model, info
        sub = _submodel(info)
        assert sub is not None, f"documented field {'.'.join(path)!r}: {part!r} is not an object"
        model = sub
    raise AssertionError("empty path")


def _schema(kind: str, path: list[str]) -> dict[str, Any]:
    """The field's OpenAPI schema in the CRD (what kube-apiserver enforces)."""
    node: dict[str, Any] = openapi_schema(KINDS[kind][0])["properties"]["spec"]
    for part in path:
        if node.get("type") == "array":
            node = node["items"]
        assert part in node.get("properties", {}), f"the {kind} CRD schema has no {'.'.join(path)!r}"
        node = node["properties"][part]
    return node


def _documented_default(text: str) -> tuple[str, Any]:
    """("required" | "unset" | "value", value) from the default cell."""
    plain = _CODE.sub(r"\1", text).strip()
    word = plain.split(" ", 1)[0]
    if word == "required":
        return "required", None
    if word == "unset":
        return "unset", None
    if plain == "[]":
        return "value", []
    if plain in ("true", "false"):
        return "value", plain == "true"
    if re.fullmatch(r"-?\d+", plain):
        return "value", int(plain)
    if re.fullmatch(r"-?\d+\.\d*", plain):
        return "value", float(plain)
    return "value", plain


def _lead(rules: str) -> str:
    """The rules cell up to its first ``:`` or ``;`` — where the type, bounds and values are stated."""
    return re.split(r"[:;]", rules, maxsplit=1)[0]


def _bounds(rules: str) -> dict[str, tuple[float, bool]]:
    """{"min"/"max": (value, exclusive)} stated in the rules' lead."""
    lead = _lead(rules)
    out: dict[str, tuple[float, bool]] = {}
    if m := re.search(r"(?<![\d.])(\d+)\.\.(\d+)(?![\d.])", lead):
        out["min"], out["max"] = (float(m.group(1)), False), (float(m.group(2)), False)
    for sign, key, exclusive in (("≥", "min", False), (">", "min", True), ("≤", "max", False), ("<", "max", True)):
        if m := re.search(rf"{sign}\s*(-?\d+(?:\.\d+)?(?:e\d+)?)\b", lead):
            out[key] = (float(m.group(1)), exclusive)
    return out


def _values(rules: str) -> list[str] | None:
    """The allowed values when the rules cell starts with a list of them: `` `a`, `b`, `c` ``."""
    m = re.match(r"\s*(`[^`]+`(?:\s*,\s*`[^`]+`)+)", rules)
    return _CODE.findall(m.group(1)) if m else None


def _type_word(rules: str) -> str | None:
    m = re.match(r"\s*(integer|number|boolean)\b", rules)
    return m.group(1) if m else None


ROWS = [row for kind in KINDS for row in field_rows(kind)]


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r.kind}.{r.field}")
def test_documented_field_exists_with_its_default(row: Row) -> None:
    spec = KINDS[row.kind][1]
    _, info = _resolve(spec, row.path)
    how, value = _documented_default(row.default)
    where = f"docs/api.md {row.kind} `{row.field}` (default {row.default!r})"
    if how == "required":
        assert info.is_required(), f"{where}: the model does not require it (default {info.get_default()!r})"
        return
    assert not info.is_required(), f"{where}: the model requires it"
    actual = info.get_default(call_default_factory=True)
    if how == "unset":
        assert actual is None, f"{where}: the model's default is {actual!r}"
    elif isinstance(value, bool):
        assert actual is value, f"{where}: the model's default is {actual!r}"
    else:
        assert actual == value and not isinstance(actual, bool), f"{where}: the model's default is {actual!r}"


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r.kind}.{r.field}")
def test_documented_rules_are_the_schemas(row: Row) -> None:
    """Type, bounds and allowed values as the page states them are what kube-apiserver enforces."""
    schema = _schema(row.kind, row.path)
    where = f"docs/api.md {row.kind} `{row.field}` ({row.rules[:60]!r}...)"
    if word := _type_word(row.rules):
        assert schema.get("type") == word, f"{where}: the schema's type is {schema.get('type')!r}"
    for key, (value, exclusive) in _bounds(row.rules).items():
        bound = schema.get("minimum" if key == "min" else "maximum")
        assert bound is not None and float(bound) == value, f"{where}: the schema's {key}imum is {bound!r}"
        schema_exclusive = bool(schema.get("exclusiveMinimum" if key == "min" else "exclusiveMaximum"))
        assert schema_exclusive == exclusive, f"{where}: exclusive {key} is {schema_exclusive} in the schema"
    values = _values(row.rules)
    if values is None and _lead(row.rules).strip() == "same names":
        previous = ROWS[ROWS.index(row) - 1]
        values = _values(previous.rules)
    if values is not None:
        assert schema.get("enum") == values, f"{where}: the schema allows {schema.get('enum')!r}"


@pytest.mark.parametrize("kind", KINDS)
def test_every_spec_field_is_documented(kind: str) -> None:
    documented = {tuple(row.path) for row in field_rows(kind)}
    missing = []

    def walk(model: type[BaseModel], prefix: tuple[str, ...]) -> None:
        for alias, (_, info) in _by_alias(model).items():
            path = (*prefix, alias)
            if path in documented:
                continue
            sub = _submodel(info)
            # An object documented field by field (`topology.required`, `preemption.withinQueue`).
            if sub is not None and any(d[: len(path)] == path for d in documented):
                walk(sub, path)
            else:
                missing.append(".".join(path))

    walk(KINDS[kind][1], ())
    assert not missing, f"docs/api.md {kind} table does not document: {', '.join(missing)}"


@pytest.mark.parametrize("row", [r for r in ROWS if r.field.endswith("[]")], ids=lambda r: f"{r.kind}.{r.field}")
def test_list_item_fields_named_in_the_rules_are_the_models(row: Row) -> None:
    """``resources[]``: the `name`s its rules cell explains are exactly the item model's fields, and
    their bounds (``nominal`` (integer ≥ 0 ...)) are the schema's."""
    _, info = _resolve(KINDS[row.kind][1], row.path)
    item = _submodel(info)
    assert item is not None, f"docs/api.md {row.kind} `{row.field}`: not a list of objects in the model"
    fields = set(_by_alias(item))
    siblings = set(_by_alias(KINDS[row.kind][1]))  # "... need `parent`" names the spec's field
    named = {n for n in _CODE.findall(row.rules) if re.fullmatch(r"[a-z][A-Za-z]*", n)} - siblings
    assert named == fields, (f"docs/api.md {row.kind} `{row.field}` names {sorted(named)}; "
                             f"{item.__name__} has {sorted(fields)}")
    for name, detail in re.findall(r"`([a-z][A-Za-z]*)` \(([^)]*)\)", row.rules):
        schema = _schema(row.kind, [*row.path, name])
        for key, (value, exclusive) in _bounds(detail).items():
            bound = schema.get("minimum" if key == "min" else "maximum")
            assert bound is not None and float(bound) == value and not exclusive, (
                f"docs/api.md {row.kind} `{row.field}` `{name}` ({detail}): the schema's {key}imum is {bound!r}")
        if word := _type_word(detail):
            assert schema.get("type") == word, f"docs/api.md `{row.field}` `{name}`: type {schema.get('type')!r}"


def _top_level_names(paragraph: str) -> list[str]:
    """The `names` of a prose list outside any (...), {...} or [...]: the fields, not their parts."""
    names, depth, i = [], 0, 0
    while i < len(paragraph):
        char = paragraph[i]
        if char == "`":
            end = paragraph.index("`", i + 1)
            if depth == 0:
                names.append(paragraph[i + 1:end].removesuffix("[]"))
            i = end + 1
            continue
        depth += char in "({[" or 0
        depth -= char in ")}]" or 0
        i += 1
    return names


@pytest.mark.parametrize("kind", KINDS)
def test_status_paragraph_names_exactly_the_status_fields(kind: str) -> None:
    match = re.search(r"^Status\b[^:]*:(.*?)(?:\n\n|\Z)", _section(kind), flags=re.M | re.S)
    assert match, f"docs/api.md '## {kind}': no 'Status ...:' paragraph"
    documented = _top_level_names(match.group(1))
    fields = list(_by_alias(KINDS[kind][2]))
    assert sorted(documented) == sorted(fields), (
        f"docs/api.md {kind} status documents {sorted(set(documented) - set(fields))} the model lacks and "
        f"lacks {sorted(set(fields) - set(documented))}")


@pytest.mark.parametrize("kind", KINDS)
def test_kubectl_get_columns_are_the_crds(kind: str) -> None:
    match = re.search(r"`kubectl get \w+` columns: ([A-Z,\s]+?) \(`-o wide` adds ([A-Z,\s]+)\)", _section(kind))
    assert match, f"docs/api.md '## {kind}': no '`kubectl get ..` columns: ... (`-o wide` adds ...)' line"
    columns = KINDS[kind][0].crd.printer_columns
    normal = [c.name.upper() for c in columns if not c.priority] + ["AGE"]
    wide = [c.name.upper() for c in columns if c.priority]
    documented = [c.strip() for c in match.group(1).split(",")], [c.strip() for c in match.group(2).split(",")]
    assert documented == (normal, wide), f"docs/api.md {kind} columns {documented}; the CRD prints {(normal, wide)}"

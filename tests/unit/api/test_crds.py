"""crds/ against the generator, and the generated CRDs against the API server's structural rules."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubegang.api import KINDS, GPUJob, GPUQueue, crd_document
from kubegang.api.crdgen import drift, main, rendered, write
from kubegang.levels import REQUESTABLE_LEVELS

REPO = Path(__file__).resolve().parents[3]


def test_crds_folder_matches_the_models() -> None:
    assert drift(REPO / "crds") == "", "crds/ is stale: run `python -m kubegang.api.crdgen`"


def test_check_passes_on_fresh_output(tmp_path: Path) -> None:
    write(tmp_path)
    assert main(["--check", "--out", str(tmp_path)]) == 0


def test_check_fails_with_a_diff_on_an_edited_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path)
    edited = tmp_path / "gpujobs.kubegang.io.yaml"
    edited.write_text(edited.read_text().replace("default: 300", "default: 30"))
    assert main(["--check", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert re.search(r"^-\s+default: 30$", err, re.M) and re.search(r"^\+\s+default: 300$", err, re.M)
    assert "gpujobs.kubegang.io.yaml" in err


def test_check_reports_missing_and_stale_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path)
    (tmp_path / "gpuqueues.kubegang.io.yaml").unlink()
    (tmp_path / "oldkinds.kubegang.io.yaml").write_text("{}\n")
    assert main(["--check", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "gpuqueues.kubegang.io.yaml (missing)" in err
    assert "oldkinds.kubegang.io.yaml: no model generates this file" in err


def test_one_file_per_kind() -> None:
    assert sorted(rendered()) == sorted(f"{m.crd.plural}.kubegang.io.yaml" for m in KINDS)


def _schema(model: Any) -> dict[str, Any]:
    schema: dict[str, Any] = crd_document(model)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _nodes(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from _nodes(sub, f"{path}.{name}")
    if "items" in node:
        yield from _nodes(node["items"], f"{path}[*]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _nodes(node["additionalProperties"], f"{path}{{*}}")


@pytest.mark.parametrize("model", KINDS, ids=lambda m: m.crd.kind)
def test_schema_is_structural(model: Any) -> None:
    for path, node in _nodes(_schema(model)):
        assert not {"$ref", "$defs", "anyOf", "oneOf", "allOf", "not", "uniqueItems", "nullable"} & set(node), path
        assert (
            "type" in node
            or node.get("x-kubernetes-int-or-string")
            or (node.get("x-kubernetes-preserve-unknown-fields") and path)
        ), f"{path}: no type"
        if node.get("type") == "object":
            assert not ("properties" in node and "additionalProperties" in node), path
        assert "title" not in node, path
        assert node.get("default", "unset") is not None, f"{path}: null default"


@pytest.mark.parametrize("model", KINDS, ids=lambda m: m.crd.kind)
def test_unknown_fields_are_preserved_only_inside_the_pod_template(model: Any) -> None:
    preserving = [path for path, node in _nodes(_schema(model)) if node.get("x-kubernetes-preserve-unknown-fields")]
    assert all(path.startswith(".spec.template") for path in preserving), preserving


def test_gpujob_pod_template_is_opaque_but_its_gpu_limits_are_checked() -> None:
    nodes = dict(_nodes(_schema(GPUJob)))
    assert nodes[".spec.template"]["x-kubernetes-preserve-unknown-fields"] is True
    limits = nodes[".spec.template.spec.containers[*].resources.limits"]
    assert limits["additionalProperties"]["x-kubernetes-int-or-string"] is True
    assert "nvidia.com/gpu" in limits["x-kubernetes-validations"][0]["rule"]


def _rules(model: Any) -> dict[str, list[dict[str, str]]]:
    return {
        path: node["x-kubernetes-validations"]
        for path, node in _nodes(_schema(model))
        if "x-kubernetes-validations" in node
    }


def test_cel_rules_sit_where_their_fields_are() -> None:
    job, queue = _rules(GPUJob), _rules(GPUQueue)
    assert [r["fieldPath"] for r in job[".spec"]] == [".gpuFraction", ".gpuFraction", ".template", ".framework"]
    assert [r["fieldPath"] for r in job[".spec.topology"]] == [".preferred"]
    assert ".spec.template.spec.containers[*].resources.limits" in job
    assert [r["fieldPath"] for r in queue[""]] == [".spec.parent"]
    assert "self.metadata.name" in queue[""][0]["rule"]
    assert [r["fieldPath"] for r in queue[".spec.resources[*]"]] == [".lendingLimit"]
    assert [r["fieldPath"] for r in queue[".spec"]] == [".resources"]


def test_topology_rule_ranks_levels_as_the_core_does() -> None:
    rule = _rules(GPUJob)[".spec.topology"][0]["rule"]
    ranks = {name: int(rank) for name, rank in re.findall(r"'(\w+)': (\d+)", rule)}
    assert ranks == {level.label: int(level) for level in REQUESTABLE_LEVELS}


def _has_path(schema: dict[str, Any], json_path: str) -> bool:
    node = schema
    # JSONPath subscripts and filters (`[0]`, `[?(@.type=="Ready")]`) select items of the list they follow.
    for part in re.sub(r"\[[^\]]*\]", "", json_path).strip(".").split("."):
        if part == "metadata" and node is schema:
            return True
        node = node.get("items", node).get("properties", {}).get(part)
        if node is None:
            return False
    return True


@pytest.mark.parametrize("model", KINDS, ids=lambda m: m.crd.kind)
def test_printer_columns_and_selectable_fields_point_at_schema_fields(model: Any) -> None:
    version = crd_document(model)["spec"]["versions"][0]
    paths = [c["jsonPath"] for c in version["additionalPrinterColumns"]]
    paths += [f["jsonPath"] for f in version.get("selectableFields", [])]
    missing = [p for p in paths if not _has_path(version["schema"]["openAPIV3Schema"], p)]
    assert not missing
    assert version["additionalPrinterColumns"][-1] == {
        "name": "Age",
        "type": "date",
        "jsonPath": ".metadata.creationTimestamp",
    }


def test_gpujob_columns_and_names() -> None:
    doc = crd_document(GPUJob)
    columns = [c["name"] for c in doc["spec"]["versions"][0]["additionalPrinterColumns"] if "priority" not in c]
    assert columns == ["Queue", "Phase", "Reason", "Ready", "Replicas", "GPUs", "Age"]
    assert doc["spec"]["names"]["shortNames"] == ["gj"] and doc["spec"]["scope"] == "Namespaced"
    assert doc["spec"]["names"]["categories"] == ["kubegang"]
    assert doc["spec"]["versions"][0]["subresources"] == {"status": {}}


def test_gpuqueue_columns_and_names() -> None:
    doc = crd_document(GPUQueue)
    columns = [c["name"] for c in doc["spec"]["versions"][0]["additionalPrinterColumns"] if "priority" not in c]
    assert columns == ["Parent", "Weight", "Usage", "Pending", "Age"]
    assert doc["spec"]["names"]["shortNames"] == ["gq"] and doc["spec"]["scope"] == "Cluster"


@pytest.mark.parametrize("model", [m for m in KINDS if "spec" in m.model_fields], ids=lambda m: m.crd.kind)
def test_schema_defaults_are_the_model_defaults(model: Any) -> None:
    """What the API server fills in is what Python assumes when the field is absent."""
    spec_model = model.model_fields["spec"].annotation
    spec_schema = _schema(model)["properties"]["spec"]["properties"]
    for name, field in spec_model.model_fields.items():
        alias = field.alias or name
        if "default" not in spec_schema[alias]:
            continue
        default = field.get_default(call_default_factory=True)
        if spec_schema[alias]["default"] == {}:
            # An object defaulted to {} gets its own fields' defaults: the model built from {}.
            assert default == type(default).model_validate({}), alias
        else:
            assert spec_schema[alias]["default"] == default, alias

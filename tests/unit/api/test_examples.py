"""The manifests in examples/ are valid, and every kind users write has one."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kubegang.api import GPUJob, GPUQueue, parse_manifest

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
FILES = sorted(EXAMPLES.glob("gpu*.yaml"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_example_parses_as_its_kind(path: Path) -> None:
    documents = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    assert documents
    for document in documents:
        model = parse_manifest(document)
        assert model.kind.lower() == path.name.split("-", 1)[0]


def test_every_user_kind_has_an_example() -> None:
    prefixes = {path.name.split("-", 1)[0] for path in FILES}
    assert {GPUJob.crd.singular, GPUQueue.crd.singular} <= prefixes

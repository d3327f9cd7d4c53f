"""The checked-in gRPC code is exactly what the .proto generates (no drift, no hand edits)."""

from __future__ import annotations

from pathlib import Path

from kubegang.extender.gen_proto import DEFAULT_OUT, generate


def test_checked_in_code_matches_the_proto(tmp_path: Path) -> None:
    fresh = generate(tmp_path / "gen")
    assert fresh, "generation produced no files"
    for path in fresh:
        relative = path.relative_to(tmp_path / "gen")
        checked_in = DEFAULT_OUT / relative
        assert checked_in.exists(), f"{relative} is generated but not checked in; run gen_proto"
        assert checked_in.read_text() == path.read_text(), (
            f"kubegang/_generated/{relative} differs from the .proto; run "
            "`python -m kubegang.extender.gen_proto`"
        )
    generated = {
        p.relative_to(DEFAULT_OUT) for p in DEFAULT_OUT.rglob("*.py*") if "__pycache__" not in p.parts
    }
    assert generated == {p.relative_to(tmp_path / "gen") for p in fresh}, "stale generated files"


def test_generated_modules_import_and_name_the_service() -> None:
    from kubegang._generated.placement.v1 import placement_pb2, placement_pb2_grpc

    service = placement_pb2.DESCRIPTOR.services_by_name["Placement"]
    assert [m.name for m in service.methods] == ["Plan", "Reserve", "Release", "WhatIf", "Repair", "Room"]
    assert hasattr(placement_pb2_grpc, "PlacementStub")

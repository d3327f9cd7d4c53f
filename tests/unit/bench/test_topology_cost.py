"""``bench.topology_cost`` measures the production compile: the index of the size asked, what it keeps."""

from __future__ import annotations

import json

import pytest

from bench import topology_cost


def test_the_measure_compiles_the_fabric_it_names() -> None:
    small, large = topology_cost.measure(64, repeat=1), topology_cost.measure(256, repeat=1)
    assert (small["nodes"], small["gpus"]) == (64, 512)
    assert 0 < small["index_kept_mib"] < large["index_kept_mib"]  # the kept index grows with the fabric
    assert small["compile_peak_mib"] >= small["index_kept_mib"]
    assert small["compile_cpu_ms"] > 0


def test_the_command_prints_one_line_per_size(capsys: pytest.CaptureFixture[str]) -> None:
    assert topology_cost.main(["--nodes", "32,64", "--repeat", "1"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["nodes"] for line in lines] == [32, 64]

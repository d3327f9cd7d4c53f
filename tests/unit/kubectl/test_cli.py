"""The ``kubectl-gang`` entry point: help, bad input named with what is allowed, snapshot files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kubegang.kubectl import ClusterObjects, SnapshotFileError, main

from .conftest import cluster, job


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for command in ("why", "queues", "nodes", "topology", "what-if", "snapshot", "replay"):
        assert command in out


def test_a_bad_output_format_names_the_flag_and_the_allowed_values(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["queues", "-o", "xml"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument -o/--output" in err and "text, json, yaml" in err


def test_no_kubeconfig_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["queues", "--kubeconfig", str(tmp_path / "missing")]) == 2
    assert "cannot load a kubeconfig" in capsys.readouterr().err


def _saved(tmp_path: Path) -> Path:
    objects = cluster(job("run", "a", "team-a", 2, phase="Running", reason="Running", on=["n0", "n1"]),
                      job("wait", "a", "team-a", 4))
    path = tmp_path / "snap.json"
    objects.save(path)
    return path


def test_replay_answers_why_and_what_if_from_a_saved_snapshot(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = _saved(tmp_path)
    assert main(["replay", str(path), "--why", "wait", "-n", "a", "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["job"] == "a/wait" and report["quota"]["fits"] is False
    manifest = tmp_path / "job.yaml"
    manifest.write_text(json.dumps({k: v for k, v in job("try", "a", "team-a", 1).items() if k != "status"}))
    assert main(["replay", str(path), "-f", str(manifest), "-n", "a"]) == 0
    out = capsys.readouterr().out
    assert "What if GPUJob a/try were submitted now" in out and "Next cycle: would be admitted" in out


def test_replay_why_takes_a_source_name_as_the_live_command_does(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    objects = cluster(job("raycluster-rc", "a", "team-a", 4))
    path = tmp_path / "snap.json"
    objects.save(path)
    assert main(["replay", str(path), "--why", "raycluster/rc", "-n", "a", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["job"] == "a/raycluster-rc"
    with pytest.raises(SystemExit) as exit_:
        main(["replay", str(path), "--why", "deployment/rc"])
    assert exit_.value.code == 2 and "deployment" in capsys.readouterr().err


def test_replay_of_a_missing_job_and_of_a_bad_file_say_which(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = _saved(tmp_path)
    assert main(["replay", str(path), "--why", "nope", "-n", "a"]) == 1
    assert "GPUJob a/nope: not found" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"kind": "Something"}))
    assert main(["replay", str(bad), "--why", "x"]) == 2
    assert "kind must be 'kubegang.io/GangSnapshot'" in capsys.readouterr().err
    manifest = tmp_path / "two.yaml"
    manifest.write_text("kind: ConfigMap\n")
    assert main(["replay", str(path), "-f", str(manifest)]) == 2
    assert "must hold exactly one GPUJob" in capsys.readouterr().err


def test_an_invalid_manifest_names_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _saved(tmp_path)
    body = {k: v for k, v in job("try", "a", "team-a", 1).items() if k != "status"}
    body["spec"]["replicas"] = 0
    manifest = tmp_path / "job.yaml"
    manifest.write_text(json.dumps(body))
    assert main(["replay", str(path), "-f", str(manifest), "-n", "a"]) == 2
    assert "spec.replicas" in capsys.readouterr().err


def test_bundle_round_trip_and_field_errors(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    again = ClusterObjects.load(path)
    assert [j["metadata"]["name"] for j in again.jobs] == ["run", "wait"]
    data = json.loads(path.read_text())
    data["objects"]["pods"] = {"not": "a list"}
    with pytest.raises(SnapshotFileError, match=r"objects\.pods must be a list"):
        ClusterObjects.from_bundle(data)


def test_colour_only_on_a_terminal_and_never_with_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from kubegang.kubectl._render import Style

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert Style(Terminal()).bad("x") == "\x1b[31mx\x1b[0m"
    assert Style(io.StringIO()).bad("x") == "x"
    monkeypatch.setenv("NO_COLOR", "1")
    assert Style(Terminal()).bad("x") == "x"

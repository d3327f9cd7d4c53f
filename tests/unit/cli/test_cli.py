"""The offline CLI answers with the production engine and exits non-zero when a gang cannot fit."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from kubegang.cli import build_parser, main

SHAPES = Path(__file__).resolve().parents[3] / "hack" / "shapes"
LEVELS = "node, nvlink, leaf, spine, block, cluster"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def test_plan_places_a_rack_sized_gang_in_one_nvlink_domain(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--shape", str(SHAPES / "gb200-nvl72.yaml"), "--pods", "18", "--gpus-per-pod", "4"]) == 0
    out = capsys.readouterr().out
    assert "within nvlink" in out
    assert out.count("pod ") == 18


def test_plan_explains_why_a_gang_does_not_fit(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "--shape", str(SHAPES / "superpod-h100.yaml"), "--pods", "40", "--required", "leaf"])
    assert code == 1
    assert "needs 40 nodes x 8 GPUs in one leaf" in capsys.readouterr().out


def test_bad_level_and_missing_file_are_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        main(["plan", "--shape", "x", "--pods", "1", "--required", "rack"])
    assert main(["shape", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read shape" in capsys.readouterr().err


def test_help_names_exactly_the_commands_that_exist() -> None:
    parser = build_parser()
    commands = set(_subcommands(parser))
    text = parser.format_help()
    advertised = set(re.findall(r"\bkubegang (\w+)", text))
    assert advertised == commands, f"help mentions {sorted(advertised)}, commands are {sorted(commands)}"
    usage = re.search(r"\{([\w,]+)\}", text)
    assert usage is not None and set(usage.group(1).split(",")) == commands


@pytest.mark.parametrize("flag", ["--required", "--preferred"])
@pytest.mark.parametrize("value", ["rack", "gpu"])
def test_a_bad_level_names_the_flag_and_the_allowed_levels(
    capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["plan", "--shape", "superpod-h100", "--pods", "1", flag, value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}" in err
    assert repr(value) in err
    assert LEVELS in err
    assert "_level" not in err


def test_shipped_shapes_by_name_from_anywhere(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["plan", "--shape", "superpod-h100", "--pods", "16", "--required", "leaf"]) == 0
    assert "within leaf" in capsys.readouterr().out
    assert main(["shape", "gb200-nvl72"]) == 0
    assert capsys.readouterr().out.startswith("gb200-nvl72: 72 nodes, 288 GPUs")


def test_an_unknown_shape_name_lists_the_shipped_ones(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["plan", "--shape", "superpod-h1000", "--pods", "1"]) == 2
    err = capsys.readouterr().err
    assert "superpod-h1000" in err
    for name in ("bench-1024", "gb200-nvl72", "openb", "superpod-h100"):
        assert name in err


def test_a_path_still_wins_over_a_shipped_name(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "openb").write_text((SHAPES / "gb200-nvl72.yaml").read_text())
    assert main(["shape", "openb"]) == 0
    assert capsys.readouterr().out.startswith("gb200-nvl72:")


def _walk(parser: argparse.ArgumentParser, prog: str) -> list[tuple[str, argparse.Action]]:
    out: list[tuple[str, argparse.Action]] = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            out.extend((f"{prog} {choice.dest}", choice) for choice in action._choices_actions)
            for name, sub in action.choices.items():
                out.extend(_walk(sub, f"{prog} {name}"))
        else:
            out.append((prog, action))
    return out


def test_every_argument_has_help() -> None:
    actions = _walk(build_parser(), "kubegang")
    assert len(actions) > 10
    missing = [f"{prog}: {'/'.join(a.option_strings) or a.dest}" for prog, a in actions
               if not a.help or a.help == argparse.SUPPRESS]
    assert not missing, f"arguments without help: {missing}"

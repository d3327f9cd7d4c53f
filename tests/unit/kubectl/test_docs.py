"""docs/why-pending.md against the code: the commands and flags it shows exist, the report fields it
names are the report's, the README links it, and every alert's runbook_url points at its section."""

from __future__ import annotations

import argparse
import datetime as dt
import re
from pathlib import Path

import yaml

from kubegang.kubectl import Engine, nodes_report, why_report
from kubegang.kubectl._main import build_parser
from kubegang.kubectl._nodes import nodes_lines
from kubegang.kubectl._render import Style

from .conftest import cluster, job

REPO = Path(__file__).resolve().parents[3]
PAGE = REPO / "docs" / "why-pending.md"
RULES = REPO / "charts" / "kubegang" / "rules" / "kubegang-alerts.yaml"
RUNBOOKS = "https://github.com/kubegang/kubegang/blob/main/docs/why-pending.md#"


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_command_and_flag_the_page_shows_exists() -> None:
    commands = _subparsers(build_parser())
    text = PAGE.read_text()
    shown = re.findall(r"kubectl gang ([a-z-]+)((?: [^`\n]*)?)", text)
    assert {name for name, _ in shown} >= {"why", "queues", "nodes", "what-if", "snapshot", "replay"}
    for name, rest in shown:
        assert name in commands, f"docs/why-pending.md shows `kubectl gang {name}`, which is no command"
        parser = commands[name]
        if name == "snapshot":
            parser = _subparsers(parser)["save"]
        known = {s for a in parser._actions for s in a.option_strings}
        for flag in re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", rest):
            assert flag in known, f"docs/why-pending.md: `kubectl gang {name}` has no {flag}"


def test_the_report_fields_the_page_names_are_the_report_s() -> None:
    waiting = job("wait", "a", "team-a", 3)
    waiting["status"]["queuePosition"] = {"queue": 1, "cohort": 1, "ahead": 0, "aheadGPUs": 0}
    engine = Engine(cluster(job("run", "a", "team-a", 2, phase="Running", reason="Running", on=["n0", "n1"]),
                            waiting))
    report = why_report(engine, engine.find("a", "wait"), dt.datetime.now(dt.UTC))  # type: ignore[arg-type]
    for field in ("position", "ahead", "aheadNotVisible", "quota", "placementNow", "nextCycle", "estimate",
                  "operatorPosition", "hidden"):
        assert f"`{field}`" in PAGE.read_text() and field in report, field


def test_no_picture_leaves_the_picture_out() -> None:
    report = nodes_report(Engine(cluster()))

    class Plain(Style):
        def __init__(self) -> None:
            self.on = False

    assert not any(line.startswith("Fabric") for line in nodes_lines(report, Plain(), picture_too=False))
    assert any(line.startswith("Fabric") for line in nodes_lines(report, Plain()))


def test_the_readme_links_the_page() -> None:
    assert "(docs/why-pending.md)" in (REPO / "README.md").read_text()


def test_every_alert_s_runbook_url_points_at_its_section() -> None:
    headings = set(re.findall(r"^### (\w+)$", PAGE.read_text(), flags=re.M))
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    assert rules
    for rule in rules:
        assert rule["annotations"]["runbook_url"] == RUNBOOKS + rule["alert"].lower(), rule["alert"]
        assert rule["alert"] in headings, f"docs/why-pending.md has no '### {rule['alert']}'"


def test_the_page_names_the_report_field_of_a_missing_priority_class() -> None:
    objects = cluster(job("wait", "a", "team-a", 1, priorityClassName="urgent"))
    engine = Engine(objects)
    report = why_report(engine, engine.find("a", "wait"), dt.datetime.now(dt.UTC))  # type: ignore[arg-type]
    assert "priorityClassNotFound" in report and "`priorityClassNotFound`" in PAGE.read_text()

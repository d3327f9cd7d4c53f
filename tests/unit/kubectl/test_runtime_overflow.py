"""A running gang's run time that cannot be read, or that no date can hold, is an unknown end, never
an exception: ``kubectl gang why`` computes every running gang's end to answer for ANY waiting job, so
one such gang (``activeDeadlineSeconds: 1000000000000`` kept in the template, a fake runtime of
``99999999h`` or ``²m``) used to make every answer a traceback."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kubegang.kubectl import Engine, main, why_report
from kubegang.kubectl._render import Style
from kubegang.kubectl._runtime import ACTIVE_DEADLINE, FAKE_RUNTIME_ANNOTATION, TIME_LIMIT, RunTimes, seconds
from kubegang.kubectl._why import why_lines
from kubegang.operator._job import job_view

from .conftest import cluster, job

NOW = dt.datetime(2026, 12, 1, 10, 30, tzinfo=dt.UTC)


class Plain(Style):
    def __init__(self) -> None:
        self.on = False


def _deadline(value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(body: dict[str, Any]) -> None:
        body["spec"]["template"]["spec"][ACTIVE_DEADLINE] = value
    return mutate


def _fake(value: str) -> Callable[[dict[str, Any]], None]:
    def mutate(body: dict[str, Any]) -> None:
        body["spec"]["template"]["metadata"] = {"annotations": {FAKE_RUNTIME_ANNOTATION: value}}
    return mutate


ABSURD = {
    "activeDeadlineSeconds 10**12": _deadline(10**12),
    "activeDeadlineSeconds -10**12": _deadline(-10**12),
    "activeDeadlineSeconds 10**400": _deadline(10**400),  # too large even for a float
    "fake-runtime 99999999h": _fake("99999999h"),
    "fake-runtime 9...9h (400 digits)": _fake("9" * 400 + "h"),
    "fake-runtime ²m": _fake("\u00b2m"),
    "fake-runtime ١٥m (Arabic-Indic digits)": _fake("\u0661\u0665m"),
}


def _running(mutate: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    body = job("run", "a", "team-a", 2, phase="Running", reason="Running", on=["n0", "n1"])
    mutate(body)
    return body


@pytest.mark.parametrize("text", ["\u00b2m", "\u00b2", "\u0661\u0665m", "\uff11\uff15m", "1\u00b2h", "m", "", "-5m",
                                  "+5m", " 5m", "5 m", "5d", "5"])
def test_seconds_reads_ascii_digits_only(text: str) -> None:
    assert seconds(text) is None


def test_seconds_reads_go_durations_of_one_unit() -> None:
    assert (seconds("90s"), seconds("15m"), seconds("2h"), seconds("0s")) == (90, 900, 7200, 0)


@pytest.mark.parametrize("label", ABSURD)
def test_an_absurd_or_unreadable_run_time_is_an_unknown_end(label: str) -> None:
    view = job_view(_running(ABSURD[label]))
    assert RunTimes([view]).expected_end(view) is None


def test_an_unreadable_fake_runtime_falls_back_to_what_else_the_job_says() -> None:
    body = _running(_fake("\u00b2m"))
    body["spec"]["timeLimitSeconds"] = 600
    view = job_view(body)
    assert RunTimes([view]).run_time(view) == (600.0, TIME_LIMIT)
    assert RunTimes([view]).expected_end(view) == dt.datetime(2026, 12, 1, 10, 10, tzinfo=dt.UTC)


def test_a_run_time_a_date_can_hold_still_gives_the_end() -> None:
    view = job_view(_running(_deadline(86400 * 365)))
    assert RunTimes([view]).expected_end(view) == dt.datetime(2027, 12, 1, 10, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize("label", ABSURD)
def test_why_answers_for_a_waiting_job_whatever_a_running_gang_states(label: str) -> None:
    engine = Engine(cluster(_running(ABSURD[label]), job("first", "a", "team-a", 3)))
    view = engine.find("a", "first")
    assert view is not None
    report = why_report(engine, view, NOW)
    # The rest of the answer is kept: position, quota, placement, next cycle; only the estimate is unknown.
    assert report["position"]["inQueue"] == 1 and report["quota"]["fits"] is False
    assert report["nextCycle"]["considered"] is True and report["nextCycle"]["reason"] == "QuotaExhausted"
    assert report["estimate"]["known"] is False
    lines = why_lines(report, Plain())
    assert any(line.startswith("Next cycle: Queued (QuotaExhausted)") for line in lines)
    assert any(line.startswith("Estimate: none") for line in lines)


@pytest.mark.parametrize("label", ["activeDeadlineSeconds 10**12", "fake-runtime 99999999h", "fake-runtime ²m"])
def test_replay_why_does_not_break_on_a_running_gang_s_run_time(label: str, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "snap.json"
    cluster(_running(ABSURD[label]), job("first", "a", "team-a", 3)).save(path)
    assert main(["replay", str(path), "-n", "a", "--why", "first", "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["job"] == "a/first" and report["estimate"]["known"] is False

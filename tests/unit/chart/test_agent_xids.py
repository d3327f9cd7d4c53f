"""The chart passes the XID policy to the agent: nothing by default (the agent's defaults), the listed XIDs
otherwise, in the form the agent parses."""

from __future__ import annotations

from typing import Any

import pytest

from kubegang.agent import XidPolicy

Render = Any  # conftest.Render


def _agent_args(objects: Any) -> list[str]:
    args: list[str] = objects.one("DaemonSet", "-agent")["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def test_default_leaves_the_policy_to_the_agent(render: Render) -> None:
    assert not [a for a in _agent_args(render()) if a.startswith("--fatal-xids")]


def test_listed_xids_become_the_agents_fatal_set(render: Render) -> None:
    args = _agent_args(render("agent.fatalXids={79,94}"))
    flag = next(a for a in args if a.startswith("--fatal-xids="))
    assert flag == "--fatal-xids=79,94"
    assert set(XidPolicy.parse_fatal(flag.split("=", 1)[1]).fatal) == {79, 94}


def test_the_schema_refuses_a_bad_xid(run_helm: Any, chart_dir: Any) -> None:
    proc = run_helm("template", "kg", str(chart_dir), "--set", "agent.fatalXids={0}", check=False)
    assert proc.returncode != 0 and "fatalXids" in proc.stderr


@pytest.mark.parametrize("value", ["agent.fatalXids={79,79}"])
def test_the_schema_refuses_repeats(run_helm: Any, chart_dir: Any, value: str) -> None:
    proc = run_helm("template", "kg", str(chart_dir), "--set", value, check=False)
    assert proc.returncode != 0 and "fatalXids" in proc.stderr

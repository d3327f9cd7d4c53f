"""The agent's XID policy: hardware XIDs take a GPU out, application-level ones (94/95 included) do
not, a reset that 94/95 need shows as a pending row remap and clears with it, and the policy is
configurable from settings and the command line with errors that name the flag."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from kubegang.agent import APPLICATION_XIDS, FATAL_XIDS, XidClass, XidPolicy, build_status, parse_dump
from kubegang.agent.__main__ import main

NOW = datetime(2026, 1, 1, tzinfo=UTC)
Load = Callable[[str], dict[str, Any]]


def _health(dump: dict[str, Any], policy: XidPolicy | None = None) -> list[Any]:
    policy = policy or XidPolicy()
    return [g.health for g in build_status(parse_dump(dump), now=NOW, fatal_xids=policy.fatal).gpus]


def test_default_policy_classes() -> None:
    policy = XidPolicy()
    assert [policy.classify(x) for x in (79, 48, 74, 119)] == [XidClass.FATAL] * 4
    assert [policy.classify(x) for x in (13, 31, 43, 94, 95)] == [XidClass.APPLICATION] * 5
    assert policy.classify(62) is XidClass.OTHER
    assert not set(FATAL_XIDS) & set(APPLICATION_XIDS)


def test_contained_and_uncontained_ecc_errors_leave_the_gpu_in_service(load_dump_fixture: Load) -> None:
    dump = load_dump_fixture("hgx-h100-8gpu")
    dump["devices"][0]["XidEvents"] = {"94": 3}
    dump["devices"][1]["XidEvents"] = {"95": 1}
    dump["devices"][2]["XidEvents"] = {"79": 1}
    health = _health(dump)
    assert health[0].healthy and health[1].healthy
    assert not health[2].healthy and health[2].reasons == ["XID 79 (GPU has fallen off the bus) seen 1x"]


def test_a_reset_an_ecc_error_needs_shows_as_a_pending_remap_and_clears_with_the_reset(
    load_dump_fixture: Load,
) -> None:
    dump = load_dump_fixture("hgx-h100-8gpu")
    dump["devices"][1]["XidEvents"] = {"95": 1}
    dump["devices"][1]["RemappedRows"] = [0, 1, 1, 0]  # corrected, uncorrected, pending, failure
    before = _health(dump)[1]
    assert not before.healthy and before.reasons == ["row remapping pending; GPU reset required"]
    dump["devices"][1]["RemappedRows"] = [0, 1, 0, 0]  # after the reset: remapped, nothing pending
    assert _health(dump)[1].healthy, "the GPU comes back without restarting the agent"


def test_a_fleet_that_drains_on_every_contained_error_configures_it(load_dump_fixture: Load) -> None:
    policy = XidPolicy.parse_fatal("79, 94")
    assert dict(policy.fatal) == {79: FATAL_XIDS[79], 94: APPLICATION_XIDS[94]}
    assert 94 not in policy.application and 95 in policy.application
    dump = load_dump_fixture("hgx-h100-8gpu")
    dump["devices"][0]["XidEvents"] = {"94": 1}
    dump["devices"][1]["XidEvents"] = {"48": 1}  # not fatal any more under this policy
    health = _health(dump, policy)
    assert not health[0].healthy and "XID 94 (contained uncorrectable ECC error" in health[0].reasons[0]
    assert health[1].healthy
    assert XidPolicy.parse_fatal("") == XidPolicy() == XidPolicy.parse_fatal(None)
    assert XidPolicy.parse_fatal("1000").fatal == {1000: "configured as fatal"}


@pytest.mark.parametrize(("text", "needle"), [
    ("79,x", "--fatal-xids: expected comma-separated XID numbers, got '79,x'"),
    ("-3", "XIDs are positive 32-bit numbers, got [-3]"),
])
def test_bad_policies_name_the_flag(text: str, needle: str) -> None:
    with pytest.raises(ValueError, match="--fatal-xids") as info:
        XidPolicy.parse_fatal(text)
    assert needle in str(info.value)


def test_an_xid_cannot_be_both() -> None:
    with pytest.raises(ValueError, match=r"XIDs \[94\] are both fatal and application-level"):
        XidPolicy(fatal={94: "x"}, application={94: "y"})


def test_the_command_line_refuses_a_bad_policy_with_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--once", "--print", "--replay-dump", "x", "--fatal-xids", "79,,oops"]) == 2
    assert "--fatal-xids: expected comma-separated XID numbers" in capsys.readouterr().err

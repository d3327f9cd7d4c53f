"""Two listeners on one port are refused at start, naming both flags: the operator and the extender.

Were: the process started its first listener, then failed to bind the second with ``OSError: [Errno 98]
address already in use`` in a traceback that named no flag (the operator's main caught only ValueError),
and a pod restarted for ever. Now it is a usage error, exit status 2, as a port out of range is
(kubegang._flags). The chart refuses the same values by name (tests/unit/chart/test_distinct_ports.py).
The extender's case lives here too, beside the operator's, because both are one check.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kubegang.extender.__main__ import main as extender_main
from kubegang.extender.__main__ import settings_from_args as extender_settings
from kubegang.extender._settings import ExtenderSettings
from kubegang.operator.__main__ import main as operator_main
from kubegang.operator._settings import OperatorSettings

Main = Callable[[list[str]], int]

_EXTENDER = ["--tls-cert", "c", "--tls-key", "k", "--client-ca", "ca"]


def _usage_error(main: Main, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "usage:" in err and "Traceback" not in err
    return err


@pytest.mark.parametrize(("argv", "named"), [
    (["--health-port", "8080"], "--metrics-port and --health-port are both 8080"),
    (["--metrics-port", "8081", "--health-port", "8081"], "--metrics-port and --health-port are both 8081"),
], ids=["health-on-default-metrics", "both-8081"])
def test_the_operator_refuses_one_port_for_metrics_and_health(
        argv: list[str], named: str, capsys: pytest.CaptureFixture[str]) -> None:
    err = _usage_error(operator_main, ["--extender-address", "x:1", *argv], capsys)
    assert f"kubegang-operator: error: {named}: two listeners cannot bind one port" in err
    assert "address already in use" in err


@pytest.mark.parametrize(("argv", "named"), [
    (["--grpc-port", "8443"], "--https-port and --grpc-port are both 8443"),
    (["--health-port", "8443"], "--https-port and --health-port are both 8443"),
    (["--health-port", "9443"], "--grpc-port and --health-port are both 9443"),
    (["--https-port", "7000", "--grpc-port", "7000", "--health-port", "7000"],
     "--https-port and --grpc-port are both 7000"),
    (["--grpc-address", "127.0.0.1", "--grpc-port", "8443"], "--https-port and --grpc-port are both 8443"),
], ids=["grpc-on-https", "health-on-https", "health-on-grpc", "all-three", "specific-address-under-wildcard"])
def test_the_extender_refuses_one_port_for_two_listeners(
        argv: list[str], named: str, capsys: pytest.CaptureFixture[str]) -> None:
    err = _usage_error(extender_main, [*_EXTENDER, *argv], capsys)
    assert f"kubegang-extender: error: {named}: two listeners cannot bind one port" in err


def test_the_extender_takes_one_port_on_two_different_addresses() -> None:
    """127.0.0.1:8443 and 10.0.0.5:8443 are two sockets: both bind."""
    settings = extender_settings([*_EXTENDER, "--https-address", "10.0.0.5", "--grpc-address", "127.0.0.1",
                                  "--grpc-port", "8443"])
    assert (settings.https_port, settings.grpc_port) == (8443, 8443)


def _extender_settings(**fields: Any) -> ExtenderSettings:
    return ExtenderSettings(tls_cert=Path("c"), tls_key=Path("k"), client_ca=Path("ca"), **fields)


def test_distinct_ports_and_port_zero_are_no_clash() -> None:
    assert OperatorSettings(extender_address="x:1").port_clash() is None  # 8080 and 0 (off)
    assert OperatorSettings(extender_address="x:1", metrics_port=0, health_port=0).port_clash() is None
    assert OperatorSettings(extender_address="x:1", health_port=8081).port_clash() is None
    assert OperatorSettings(extender_address="x:1", health_port=8080).port_clash() == ("metrics_port", "health_port")
    assert _extender_settings().port_clash() is None
    # 0: a free port chosen at bind (how tests start the extender), never the same port twice.
    assert _extender_settings(https_port=0, grpc_port=0, health_port=0).port_clash() is None
    assert _extender_settings(grpc_port=8080).port_clash() == ("grpc_port", "health_port")
    ipv6_wildcard = _extender_settings(https_address="::", health_address="127.0.0.1", health_port=8443)
    assert ipv6_wildcard.port_clash() == ("https_port", "health_port")

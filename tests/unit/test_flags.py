"""Bad ports and TLS files are refused at start-up by every process, naming the flag (kubegang._flags).

A port out of range is an argparse usage error (exit status 2) naming the flag and the allowed range;
a CA, certificate or key that is not PEM (or a key that is not the certificate's) is one line on
stderr naming the flag and the file, exit status 2, and no traceback. Were: OverflowError from
``bind``, a gRPC port taken modulo 65536, ``ssl.SSLError`` tracebacks, and an operator that started
with a CA it could not use.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from kubegang._flags import check_ca, check_cert_and_key, port, port_or_zero
from kubegang.agent.__main__ import main as agent_main
from kubegang.authn import SecureServing
from kubegang.extender.__main__ import main as extender_main
from kubegang.extender.__main__ import settings_from_args as extender_settings
from kubegang.operator.__main__ import main as operator_main
from kubegang.operator.__main__ import parser as operator_parser
from kubegang.testing import free_port, unanswered_kubeconfig
from kubegang.tls import PemPaths, make_ca, make_leaf, write_pki

Main = Callable[[Sequence[str]], int]


@pytest.fixture
def pki(tmp_path: Path) -> PemPaths:
    return write_pki(tmp_path / "pki")


@pytest.fixture
def text(tmp_path: Path) -> Path:
    """A file that exists and is not PEM."""
    path = tmp_path / "notes.txt"
    path.write_text("this is not a certificate\n")
    return path


@pytest.fixture
def other_key(tmp_path: Path) -> Path:
    """A valid PEM key that belongs to no certificate of ``pki``."""
    path = tmp_path / "other.key"
    path.write_bytes(make_leaf(make_ca(), "x", server_names=["x"]).key_pem)
    return path


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    """A kubeconfig whose API server nobody answers: a process gets as far as loading its TLS files."""
    return unanswered_kubeconfig(tmp_path / "kubeconfig")


def _extender(pki: PemPaths, kubeconfig: Path, *extra: str) -> list[str]:
    return ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key), "--client-ca", str(pki.ca_cert),
            "--kubeconfig", str(kubeconfig), "--health-address", "127.0.0.1", "--health-port", str(free_port()),
            "--https-address", "127.0.0.1", "--https-port", str(free_port()),
            "--grpc-address", "127.0.0.1", "--grpc-port", str(free_port()), *extra]


def _operator(pki: PemPaths, tmp_path: Path, *extra: str) -> list[str]:
    # No kubeconfig: without the check the operator would start with files it cannot use and retry for ever;
    # a missing kubeconfig ends it (with another message) instead.
    return ["--extender-address", "127.0.0.1:1", "--tls-dir", str(pki.ca_cert.parent), "--leader-election", "off",
            "--kubeconfig", str(tmp_path / "no-kubeconfig"), "--metrics-port", "0", *extra]


# ---- ports: argparse usage errors ------------------------------------------------------------------------


@pytest.mark.parametrize(("main", "argv", "message"), [
    (operator_main, ["--extender-address", "x:1", "--metrics-port", "70000"],
     "argument --metrics-port: expected a port 0..65535 (0 disables), got '70000'"),
    (operator_main, ["--extender-address", "x:1", "--metrics-port", "0", "--health-port", "-1"],
     "argument --health-port: expected a port 0..65535 (0 disables), got '-1'"),
    (extender_main, ["--tls-cert", "c", "--tls-key", "k", "--client-ca", "ca", "--https-port", "99999"],
     "argument --https-port: expected a port 1..65535, got '99999'"),
    (extender_main, ["--tls-cert", "c", "--tls-key", "k", "--client-ca", "ca", "--grpc-port", "70000"],
     "argument --grpc-port: expected a port 1..65535, got '70000'"),
    (extender_main, ["--tls-cert", "c", "--tls-key", "k", "--client-ca", "ca", "--grpc-port", "0"],
     "argument --grpc-port: expected a port 1..65535, got '0'"),
    (extender_main, ["--tls-cert", "c", "--tls-key", "k", "--client-ca", "ca", "--health-port", "-1"],
     "argument --health-port: expected a port 1..65535, got '-1'"),
    (agent_main, ["--node-name", "n", "--metrics-port", "70000"],
     "argument --metrics-port: expected a port 0..65535 (0 disables), got '70000'"),
    (agent_main, ["--node-name", "n", "--metrics-port", "-1"],
     "argument --metrics-port: expected a port 0..65535 (0 disables), got '-1'"),
], ids=["operator-metrics", "operator-health", "extender-https", "extender-grpc", "extender-grpc-0",
        "extender-health", "agent-metrics", "agent-metrics-negative"])
def test_a_port_out_of_range_is_a_usage_error_naming_the_flag_and_the_range(
        main: Main, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert "usage:" in err and "Traceback" not in err


def test_the_port_types_accept_each_range_and_refuse_the_rest() -> None:
    assert (port("1"), port("65535"), port_or_zero("0"), port_or_zero("65535")) == (1, 65535, 0, 65535)
    args = operator_parser().parse_args(["--extender-address", "x:1", "--metrics-port", "0", "--health-port", "65535"])
    assert (args.metrics_port, args.health_port) == (0, 65535)
    s = extender_settings(["--tls-cert", "c", "--tls-key", "k", "--client-ca", "ca", "--https-port", "1",
                           "--grpc-port", "65535", "--health-port", "8080"])
    assert (s.https_port, s.grpc_port, s.health_port) == (1, 65535, 8080)
    for parse, bad in ((port, "0"), (port, "65536"), (port, "http"), (port_or_zero, "-1"), (port_or_zero, "1.5")):
        with pytest.raises(argparse.ArgumentTypeError, match=f"expected a port .*got '{bad}'"):
            parse(bad)


# ---- TLS files that are not PEM: one line naming the flag and the file, exit status 2 ---------------------


@pytest.mark.parametrize(("flag", "problem"), [
    ("--client-ca", "holds no PEM certificate"),
    ("--tls-cert", "holds no PEM certificate"),
    ("--tls-key", "is not an unencrypted PEM private key"),
])
def test_the_extender_refuses_an_mtls_file_that_is_not_pem(
        flag: str, problem: str, pki: PemPaths, text: Path, kubeconfig: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = _extender(pki, kubeconfig)
    argv[argv.index(flag) + 1] = str(text)
    assert extender_main(argv) == 2
    assert capsys.readouterr().err == f"kubegang-extender: {flag}: {text} {problem}\n"


def test_the_extender_refuses_a_metrics_certificate_that_is_not_pem(
        pki: PemPaths, text: Path, kubeconfig: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = _extender(pki, kubeconfig, "--metrics-tls-cert", str(text), "--metrics-tls-key", str(pki.server_key))
    assert extender_main(argv) == 2
    assert capsys.readouterr().err == f"kubegang-extender: --metrics-tls-cert: {text} holds no PEM certificate\n"


@pytest.mark.parametrize(("flag", "problem"), [
    ("--tls-ca", "holds no PEM certificate"),
    ("--tls-cert", "holds no PEM certificate"),
    ("--tls-key", "is not an unencrypted PEM private key"),
])
def test_the_operator_refuses_a_client_tls_file_that_is_not_pem(
        flag: str, problem: str, pki: PemPaths, text: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert operator_main(_operator(pki, tmp_path, flag, str(text))) == 2
    assert capsys.readouterr().err == f"kubegang-operator: {flag}: {text} {problem}\n"


def test_the_operator_names_tls_dir_for_a_file_taken_from_it(
        pki: PemPaths, other_key: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pki.client_key.write_bytes(other_key.read_bytes())
    assert operator_main(_operator(pki, tmp_path)) == 2
    assert capsys.readouterr().err == (
        f"kubegang-operator: --tls-dir: {pki.client_key} is not the private key of --tls-dir {pki.client_cert}\n")


def test_the_operator_refuses_a_metrics_certificate_that_is_not_pem(
        pki: PemPaths, text: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = _operator(pki, tmp_path, "--metrics-port", str(free_port()),
                     "--metrics-tls-cert", str(text), "--metrics-tls-key", str(pki.server_key))
    assert operator_main(argv) == 2
    assert capsys.readouterr().err == f"kubegang-operator: --metrics-tls-cert: {text} holds no PEM certificate\n"


@pytest.mark.parametrize("bad", ["text", "other_key"])
def test_the_agent_refuses_a_metrics_key_that_is_not_pem_or_not_the_certificates(
        bad: str, pki: PemPaths, text: Path, other_key: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, kubeconfig: Path) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    key = text if bad == "text" else other_key
    argv = ["--node-name", "n", "--metrics-port", str(free_port()),
            "--metrics-tls-cert", str(pki.server_cert), "--metrics-tls-key", str(key)]
    assert agent_main(argv) == 2
    problem = ("is not an unencrypted PEM private key" if bad == "text"
               else f"is not the private key of --metrics-tls-cert {pki.server_cert}")
    assert capsys.readouterr().err == f"kubegang-agent: --metrics-tls-key: {key} {problem}\n"


@pytest.mark.parametrize("process", ["operator", "extender", "agent"])
def test_no_process_prints_a_traceback_for_a_ca_or_certificate_that_is_not_pem(
        process: str, pki: PemPaths, text: Path, tmp_path: Path, kubeconfig: Path) -> None:
    """The real command line, in a process of its own: exit status 2 and one line on stderr."""
    argv = {
        "operator": _operator(pki, tmp_path, "--tls-ca", str(text)),
        "extender": _extender(pki, kubeconfig, "--client-ca", str(text)),
        "agent": ["--node-name", "n", "--metrics-port", str(free_port()),
                  "--metrics-tls-cert", str(text), "--metrics-tls-key", str(pki.server_key)],
    }[process]
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    done = subprocess.run([sys.executable, "-m", f"kubegang.{process}", *argv], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    flag = {"operator": "--tls-ca", "extender": "--client-ca", "agent": "--metrics-tls-cert"}[process]
    assert (done.returncode, done.stderr) == (2, f"kubegang-{process}: {flag}: {text} holds no PEM certificate\n")


# ---- the shared checks themselves -------------------------------------------------------------------------


def test_good_files_pass(pki: PemPaths) -> None:
    check_ca("--ca", pki.ca_cert)
    check_cert_and_key("--cert", pki.server_cert, "--key", pki.server_key)
    check_cert_and_key("--cert", pki.client_cert, "--key", pki.client_key)


def _refusal(check: Callable[[], object]) -> str:
    with pytest.raises(ValueError) as refused:
        check()
    return str(refused.value)


def test_each_bad_file_is_refused_naming_its_flag_and_path(
        pki: PemPaths, text: Path, other_key: Path, tmp_path: Path) -> None:
    assert _refusal(lambda: check_ca("--ca", text)) == f"--ca: {text} holds no PEM certificate"
    assert _refusal(lambda: check_ca("--ca", pki.ca_key)) == f"--ca: {pki.ca_key} holds no PEM certificate"
    assert _refusal(lambda: check_ca("--ca", tmp_path)) == f"--ca: {tmp_path} does not exist or is not a file"
    assert _refusal(lambda: check_cert_and_key("--cert", pki.server_cert, "--key", other_key)) == (
        f"--key: {other_key} is not the private key of --cert {pki.server_cert}")
    assert _refusal(lambda: check_cert_and_key("--cert", pki.server_cert, "--key", pki.server_cert)) == (
        f"--key: {pki.server_cert} is not an unencrypted PEM private key")
    assert _refusal(lambda: check_cert_and_key("--cert", text, "--key", pki.server_key)) == (
        f"--cert: {text} holds no PEM certificate")
    missing = tmp_path / "missing.key"
    assert _refusal(lambda: check_cert_and_key("--cert", pki.server_cert, "--key", missing)) == (
        f"--key: {missing} does not exist or is not a file")


def test_an_encrypted_key_is_refused_without_asking_for_a_password(pki: PemPaths, tmp_path: Path) -> None:
    key = serialization.load_pem_private_key(pki.server_key.read_bytes(), None)
    encrypted = tmp_path / "encrypted.key"
    encrypted.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                            serialization.BestAvailableEncryption(b"secret")))
    with pytest.raises(ValueError, match="is not an unencrypted PEM private key"):
        check_cert_and_key("--cert", pki.server_cert, "--key", encrypted)


def test_secure_serving_refuses_a_metrics_certificate_that_is_not_pem(pki: PemPaths, text: Path) -> None:
    assert _refusal(lambda: SecureServing(cert=text, key=pki.server_key)) == (
        f"--metrics-tls-cert: {text} holds no PEM certificate")
    assert SecureServing(cert=pki.server_cert, key=pki.server_key).cert == pki.server_cert

"""Checks of command-line values that every kubegang process shares: ports, and TLS files.

Why one module: the operator, the extender and the agent take the same kinds of values, and a bad one
must be the same clear refusal in each, at start-up, before anything is served. Without these checks a
port out of range failed deep inside ``bind`` (or, for gRPC, was silently taken modulo 65536), and a CA,
certificate or key that was not PEM failed inside ``ssl`` or gRPC with a traceback, or not until the
first connection.

- Ports are argparse types (:func:`port`, :func:`port_or_zero`): a bad one is a usage error, exit
  status 2, ``argument --flag: ...`` naming the allowed range, as for an unknown ``--log-level``.
- TLS files are read after parsing (:func:`check_ca`, :func:`check_cert_and_key`), because some are
  given as a directory (the operator's ``--tls-dir``) and most are optional: a ValueError names the flag
  and the file in one line, which each process prints after its own name and exits 2. The files are
  loaded by ``ssl`` (OpenSSL) as the listeners and the gRPC channel will load them, so what passes here
  is what they accept.
"""

from __future__ import annotations

import argparse
import ssl
from collections.abc import Callable
from pathlib import Path

PORT_MAX = 65535
"""The largest TCP port."""


def _port_type(lowest: int, note: str) -> Callable[[str], int]:
    allowed = f"{lowest}..{PORT_MAX}{note}"

    def parse(text: str) -> int:
        try:
            number = int(text)
        except ValueError:
            number = -1
        if not lowest <= number <= PORT_MAX:
            raise argparse.ArgumentTypeError(f"expected a port {allowed}, got {text!r}")
        return number

    return parse


port = _port_type(1, "")
"""argparse type of a port a listener must bind: 1..65535."""

port_or_zero = _port_type(0, " (0 disables)")
"""argparse type of a port whose 0 turns the listener off: 0..65535."""


def _readable(flag: str, path: Path) -> None:
    if not path.is_file():
        raise ValueError(f"{flag}: {path} does not exist or is not a file")
    try:
        with path.open("rb"):
            pass
    except OSError as exc:
        raise ValueError(f"{flag}: {path} cannot be read ({exc.strerror or exc})") from None


def check_ca(flag: str, path: Path) -> None:
    """Refuse (ValueError naming ``flag``) a file that holds no PEM certificate: a CA bundle, or a chain."""
    _readable(flag, path)
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=str(path))
    except ssl.SSLError:
        raise ValueError(f"{flag}: {path} holds no PEM certificate") from None


def _no_password() -> bytes:
    return b""  # an encrypted key then fails to load instead of OpenSSL asking on the terminal


def check_cert_and_key(cert_flag: str, cert: Path, key_flag: str, key: Path) -> None:
    """Refuse (ValueError naming the flag) a certificate that is not PEM, or a key that is not its own.

    The key must be an unencrypted PEM private key that belongs to the certificate's first entry, as
    ``ssl`` and gRPC need it.
    """
    check_ca(cert_flag, cert)
    _readable(key_flag, key)
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(str(cert), str(key), password=_no_password)
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise ValueError(f"{key_flag}: {key} is not the private key of {cert_flag} {cert}") from None
        raise ValueError(f"{key_flag}: {key} is not an unencrypted PEM private key") from None

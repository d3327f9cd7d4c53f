"""Certificates for kubegang's mTLS listeners: a throwaway CA and the leaf certificates it signs.

Why in the core: the extender's HTTPS and gRPC listeners accept only clients whose certificate
chains to one CA (kube-scheduler and the operator). Tests, the local demo and the chart docs all
need the same three kinds of files — CA, server, client — and the same two ``ssl`` contexts, so
they are made in one place with ``cryptography`` rather than with shell recipes that drift.

This module does no Kubernetes I/O. Keys are ECDSA P-256: small, fast to generate in tests, and
accepted by Go's TLS stack (kube-scheduler) and by gRPC's BoringSSL.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import enum
import ipaddress
import logging
import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

log = logging.getLogger(__name__)

DEFAULT_VALIDITY = dt.timedelta(days=365)
"""Lifetime of generated certificates unless told otherwise."""


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, both PEM-encoded."""

    cert_pem: bytes
    """The certificate (PEM)."""
    key_pem: bytes
    """The unencrypted PKCS#8 private key (PEM)."""


@dataclass(frozen=True)
class PemPaths:
    """Where :func:`write_pki` put the files."""

    ca_cert: Path
    """CA certificate: what both sides trust."""
    ca_key: Path
    """CA private key (keep it to sign more leaves; never mount it into a pod)."""
    server_cert: Path
    """Server certificate (extender)."""
    server_key: Path
    """Server private key."""
    client_cert: Path
    """Client certificate (kube-scheduler, operator)."""
    client_key: Path
    """Client private key."""


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def make_ca(common_name: str = "kubegang-ca", validity: dt.timedelta = DEFAULT_VALIDITY) -> KeyPair:
    """A self-signed CA allowed to sign leaf certificates only (path length 0)."""
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _san_entries(names: list[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for name in names:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            out.append(x509.DNSName(name))
    return out


def make_leaf(
    ca: KeyPair,
    common_name: str,
    *,
    server_names: list[str] | None = None,
    client: bool = False,
    organization: str | None = None,
    validity: dt.timedelta = DEFAULT_VALIDITY,
    not_before: dt.datetime | None = None,
) -> KeyPair:
    """A leaf certificate signed by ``ca``.

    ``server_names`` (DNS names or IP addresses) make it a server certificate with those SANs;
    ``client=True`` makes it usable for client authentication. Both may be set. ``organization``
    becomes the subject's O, which kube-apiserver reads as the user's group (``system:masters``).
    ``not_before`` (default: five minutes ago) starts its validity; a past start with a short
    ``validity`` makes the expired certificate that the mTLS tests present.
    """
    if not server_names and not client:
        raise ValueError("make_leaf: give server_names (for a server cert) and/or client=True")
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("make_leaf: the CA key must be an EC key made by make_ca")
    key = _new_key()
    usages: list[x509.ObjectIdentifier] = []
    if server_names:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    if client:
        usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    start = not_before if not_before is not None else _now() - dt.timedelta(minutes=5)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
            *([x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization)] if organization else []),
        ]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + validity)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if server_names:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(_san_entries(server_names)), critical=False
        )
    cert = builder.sign(ca_key, hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


DEFAULT_SERVER_NAMES = ["localhost", "127.0.0.1", "::1"]
"""SANs for a loopback server (tests, the local demo)."""


def write_pki(
    directory: Path,
    *,
    server_names: list[str] | None = None,
    server_cn: str = "kubegang-extender",
    client_cn: str = "kube-scheduler",
) -> PemPaths:
    """Generate a CA, a server and a client certificate and write them as PEM files.

    File names: ``ca.crt``/``ca.key``, ``server.crt``/``server.key``, ``client.crt``/``client.key``.
    Private keys are written with mode 0600.
    """
    directory.mkdir(parents=True, exist_ok=True)
    ca = make_ca()
    server = make_leaf(ca, server_cn, server_names=server_names or DEFAULT_SERVER_NAMES)
    client = make_leaf(ca, client_cn, client=True)
    paths = PemPaths(
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        server_cert=directory / "server.crt",
        server_key=directory / "server.key",
        client_cert=directory / "client.crt",
        client_key=directory / "client.key",
    )
    for path, data, secret in (
        (paths.ca_cert, ca.cert_pem, False),
        (paths.ca_key, ca.key_pem, True),
        (paths.server_cert, server.cert_pem, False),
        (paths.server_key, server.key_pem, True),
        (paths.client_cert, client.cert_pem, False),
        (paths.client_key, client.key_pem, True),
    ):
        path.write_bytes(data)
        if secret:
            path.chmod(0o600)
    return paths


def server_ssl_context(cert: Path, key: Path, client_ca: Path) -> ssl.SSLContext:
    """TLS 1.2+ server context that *requires* a client certificate chaining to ``client_ca``."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(client_ca))
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(cert), str(key))
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def client_ssl_context(ca: Path, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    """Client context trusting ``ca``; presents ``cert``/``key`` when given (mTLS)."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca))
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert is not None and key is not None:
        ctx.load_cert_chain(str(cert), str(key))
    elif (cert is None) != (key is None):
        raise ValueError("client_ssl_context: give both cert and key, or neither")
    return ctx


# ---- certificates that change while the server runs -------------------------------------------


class ReloadOutcome(enum.Enum):
    """What one look at the certificate files found."""

    UNCHANGED = "unchanged"
    """The files are as last loaded."""
    RELOADED = "reloaded"
    """They changed and the new certificate, key and CA are in use for new connections."""
    REFUSED = "refused"
    """They changed but do not load (a key that does not match, a file half written, a file gone): the
    last good material stays in use until the files change again and load."""


@dataclass(frozen=True)
class ServerMaterial:
    """One loaded generation of a server's TLS files: the bytes (for gRPC) and the ssl context."""

    cert_pem: bytes
    """Server certificate chain (PEM)."""
    key_pem: bytes
    """Its private key (PEM)."""
    ca_pem: bytes
    """CA bundle client certificates must chain to (PEM)."""
    context: ssl.SSLContext
    """:func:`server_ssl_context` over the same bytes."""
    generation: int
    """1 for the files loaded at start, +1 for each reload."""


_Stamp = tuple[tuple[int, int, int, int], ...]
_MISSING: _Stamp = ()
"""The state "a file is missing or unreadable", for :meth:`ReloadingServerTLS.check`."""


def files_stamp(paths: tuple[Path, ...]) -> _Stamp:
    """What tells whether files changed: mtime, size, inode and device of each (OSError if one is gone).

    ``stat`` follows symlinks: kubelet updates a mounted Secret by swapping the ``..data`` link, so the
    inode changes even when the size and a coarse mtime do not.
    """
    out = []
    for path in paths:
        st = os.stat(path)
        out.append((st.st_mtime_ns, st.st_size, st.st_ino, st.st_dev))
    return tuple(out)


class ReloadingServerTLS:
    """A server's certificate, key and client CA, reloaded when the files change, without a restart.

    Why: cert-manager renews the Secret and kubelet rewrites the mounted files in place, but a server
    that loaded them once keeps presenting the old certificate until it expires. Each look
    (:meth:`check`, run off the event loop by :meth:`watch` on a timer) stats the three files and
    rebuilds only when one changed; material that does not load is refused and the last good one
    stays, so a rotation caught half-way never takes a listener down. Connections already open keep
    the certificate they were made with; new ones get the current one:

    - HTTPS: :meth:`listening_context` is the context to listen with; its SNI callback (which OpenSSL
      calls on every handshake, with or without SNI) moves the connection onto the current context.
    - gRPC: a certificate-configuration fetcher (``kubegang.extender``) hands the current bytes over.
    """

    def __init__(self, cert: Path, key: Path, client_ca: Path) -> None:
        self._paths = (cert, key, client_ca)
        self._stamp: _Stamp | None = None
        self._refused: _Stamp | None = None
        self._current = self._load(1)
        self._listening: ssl.SSLContext | None = None

    @property
    def current(self) -> ServerMaterial:
        """The material new connections get."""
        return self._current

    def _load(self, generation: int) -> ServerMaterial:
        cert, key, ca = self._paths
        before = files_stamp(self._paths)
        data = (cert.read_bytes(), key.read_bytes(), ca.read_bytes())
        context = server_ssl_context(cert, key, ca)
        again = (cert.read_bytes(), key.read_bytes(), ca.read_bytes())
        if data != again or files_stamp(self._paths) != before:
            raise ValueError("the certificate files changed while being loaded")
        self._stamp = before
        return ServerMaterial(cert_pem=data[0], key_pem=data[1], ca_pem=data[2], context=context,
                              generation=generation)

    def check(self) -> ReloadOutcome:
        """Reload if the files changed since the last look (blocking file I/O: call it off the loop).

        Each state of the files is judged once: files that were refused and have not changed since
        are UNCHANGED at the next look, so REFUSED counts changes that did not load, not looks.
        """
        try:
            stamp = files_stamp(self._paths)
        except OSError as exc:
            return self._refuse(_MISSING, exc)
        if stamp in (self._stamp, self._refused):
            return ReloadOutcome.UNCHANGED
        try:
            material = self._load(self._current.generation + 1)
        except (OSError, ValueError, ssl.SSLError) as exc:
            return self._refuse(stamp, exc)
        self._current = material
        self._refused = None
        log.info("TLS files reloaded: generation %d", material.generation)
        return ReloadOutcome.RELOADED

    def _refuse(self, stamp: _Stamp, exc: Exception) -> ReloadOutcome:
        if stamp == self._refused:
            return ReloadOutcome.UNCHANGED
        self._refused = stamp
        log.warning("TLS files %s changed but do not load (%s); keeping generation %d",
                    ", ".join(map(str, self._paths)), exc, self._current.generation)
        return ReloadOutcome.REFUSED

    def listening_context(self) -> ssl.SSLContext:
        """The context an HTTPS listener is started with; every handshake uses :attr:`current`."""
        if self._listening is None:
            cert, key, ca = self._paths
            listening = server_ssl_context(cert, key, ca)

            def switch(conn: ssl.SSLSocket | ssl.SSLObject, _name: str | None, _ctx: ssl.SSLContext) -> None:
                conn.context = self._current.context

            listening.sni_callback = switch
            self._listening = listening
        return self._listening

    async def watch(self, every: float, on_check: Callable[[ReloadOutcome], None] | None = None) -> None:
        """Look at the files every ``every`` seconds until cancelled; ``on_check`` sees each outcome."""
        while True:
            await asyncio.sleep(every)
            try:
                outcome = await asyncio.to_thread(self.check)
            except Exception:  # check() refuses bad files itself; anything else must not end the watch
                log.exception("looking at the TLS files failed; trying again in %.0fs", every)
                continue
            if on_check is not None:
                on_check(outcome)

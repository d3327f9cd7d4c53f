"""Settings of the extender process: one dataclass, filled from the command line (``__main__``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kubegang.authn import MetricsAuth, SecureServing
from kubegang.extender._grpc import DEFAULT_RESERVE_TTL_SECONDS
from kubegang.extender._http import DEFAULT_MAX_BODY_BYTES

_ANY_ADDRESS = frozenset({"", "0.0.0.0", "::", "[::]"})
"""Addresses that bind every interface, so overlap any other address on the same port."""


@dataclass(frozen=True)
class ExtenderSettings:
    """Everything the extender needs to run; defaults match the Helm chart."""

    tls_cert: Path
    """Server certificate (PEM) for both mTLS listeners."""
    tls_key: Path
    """Its private key (PEM)."""
    client_ca: Path
    """CA that client certificates (kube-scheduler, operator) must chain to."""
    tls_reload_seconds: float = 10.0
    """How often the three files are checked for a change (a renewed Secret); a change is loaded for
    new connections of both listeners without a restart."""
    kubeconfig: str | None = None
    """kubeconfig path; None = in-cluster service account (or $KUBECONFIG)."""
    https_address: str = "0.0.0.0"
    """Address of the kube-scheduler verbs listener (HTTPS, mTLS)."""
    https_port: int = 8443
    """Port of the kube-scheduler verbs listener."""
    grpc_address: str = "0.0.0.0"
    """Address of the Placement gRPC listener (mTLS)."""
    grpc_port: int = 9443
    """Port of the Placement gRPC listener."""
    health_address: str = "0.0.0.0"
    """Address of the /healthz, /readyz and /metrics listener."""
    health_port: int = 8080
    """Port of that listener (HTTPS when ``metrics_auth`` is on)."""
    metrics_auth: MetricsAuth = MetricsAuth.ON
    """Check who reads /metrics and /debug/snapshot (``kubegang.authn``); off: /metrics on plain HTTP."""
    metrics_tls_cert: Path | None = None
    """Serving certificate of the health/metrics listener; None: self-signed at start."""
    metrics_tls_key: Path | None = None
    """Its private key."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    """Largest extender request body accepted (413 above)."""
    reservation_ttl_seconds: float = DEFAULT_RESERVE_TTL_SECONDS
    """TTL of a gang reservation when Reserve gives none."""
    housekeeping_seconds: float = 1.0
    """How often reservations are expired and ledger gauges refreshed."""
    requeue_batch: int = 50
    """Most waiting GPU pods annotated per housekeeping round after reserved GPUs were freed."""
    topology_preset: str = "default"
    """Which node labels name leaf/spine/block (``kubegang.topology.PRESETS``)."""
    log_level: str = "INFO"
    """Python logging level."""

    @property
    def serving(self) -> SecureServing:
        """How /metrics and /debug/snapshot are served (ValueError for a bad pair of files)."""
        return SecureServing(auth=self.metrics_auth, cert=self.metrics_tls_cert, key=self.metrics_tls_key)

    def port_clash(self) -> tuple[str, str] | None:
        """The first two port fields whose listeners would bind the same address and port, or None.

        The second of them would fail with "address already in use" after the first had started. Two
        listeners overlap on one port when their addresses are equal or either binds every interface
        (``0.0.0.0``, ``::``); port 0 (a free port chosen at bind, as tests use) clashes with nothing.
        """
        listeners = (("https_port", self.https_address, self.https_port),
                     ("grpc_port", self.grpc_address, self.grpc_port),
                     ("health_port", self.health_address, self.health_port))
        for i, (name, address, port) in enumerate(listeners):
            for other_name, other_address, other_port in listeners[i + 1:]:
                overlap = address == other_address or _ANY_ADDRESS & {address, other_address}
                if port and port == other_port and overlap:
                    return (name, other_name)
        return None

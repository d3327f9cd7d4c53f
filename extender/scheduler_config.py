"""Render ``config/scheduler/kubegang-scheduler.yaml``, the one scheduler configuration.

The e2e control plane and the local demo call :func:`render_scheduler_config`; the Helm chart
fills the same placeholders with ``replace`` (docs/extender.md shows the template line). Rendering
refuses unknown or missing values and checks the result is YAML of the expected kind, so a typo
fails here rather than as a scheduler that silently ignores the extender.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

TEMPLATE = Path(__file__).resolve().parents[1] / "config" / "scheduler" / "kubegang-scheduler.yaml"
"""The template in the repository checkout."""
_PLACEHOLDER = re.compile(r"@@([A-Z_]+)@@")


@dataclass(frozen=True)
class SchedulerConfigValues:
    """Values for the template's placeholders."""

    extender_url: str
    """``https://host:port`` of the extender's mTLS listener."""
    ca_file: str
    """CA certificate that signed the extender's server certificate."""
    cert_file: str
    """Client certificate kube-scheduler presents."""
    key_file: str
    """Private key of that client certificate."""
    server_name: str = ""
    """Name to verify the server certificate against; empty = the URL's host."""
    kubeconfig: str = ""
    """kubeconfig path; empty = in-cluster service account."""
    leader_elect: bool = True
    """Lease-based leader election (off for a single local scheduler)."""
    lease_namespace: str = "kube-system"
    """Namespace of the scheduler's Lease."""


def render_scheduler_config(values: SchedulerConfigValues, template: Path = TEMPLATE) -> str:
    """The configuration text with every placeholder filled."""
    if not values.extender_url.startswith("https://"):
        raise ValueError(f"extender_url must be https://...; got {values.extender_url!r} (mTLS only)")
    host = values.extender_url.removeprefix("https://").split("/")[0].rsplit(":", 1)[0].strip("[]")
    mapping = {
        "KUBECONFIG": values.kubeconfig,
        "LEADER_ELECT": "true" if values.leader_elect else "false",
        "LEASE_NAMESPACE": values.lease_namespace,
        "EXTENDER_URL": values.extender_url.rstrip("/"),
        "SERVER_NAME": values.server_name or host,
        "CA_FILE": values.ca_file,
        "CERT_FILE": values.cert_file,
        "KEY_FILE": values.key_file,
    }
    for key, value in mapping.items():
        if '"' in value or "\n" in value:
            raise ValueError(f"{key.lower()}: quotes and newlines are not allowed, got {value!r}")
    text = template.read_text()
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    used = set(_PLACEHOLDER.findall(body))
    if used != set(mapping):
        raise ValueError(f"template placeholders {sorted(used)} differ from the values {sorted(mapping)}")
    # Comment lines keep their placeholders: they document the template, not this rendering.
    rendered = "\n".join(
        line if line.lstrip().startswith("#") else _PLACEHOLDER.sub(lambda m: mapping[m.group(1)], line)
        for line in text.splitlines()
    ) + "\n"
    parsed: Any = yaml.safe_load(rendered)
    if not isinstance(parsed, dict) or parsed.get("kind") != "KubeSchedulerConfiguration":
        raise ValueError(f"{template} did not render to a KubeSchedulerConfiguration")
    return rendered


def write_scheduler_config(values: SchedulerConfigValues, path: Path) -> Path:
    """Render and write to ``path`` (for ``kube-scheduler --config``)."""
    path.write_text(render_scheduler_config(values))
    return path

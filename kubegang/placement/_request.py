"""What a gang asks for: P identical pods, each with whole GPUs or a fraction of one.

Plain frozen dataclasses, validated on construction so a bad request fails where it is built (the
operator converting a GPUJob, the extender converting a pod) with a message that names the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from kubegang.levels import Level
from kubegang.topology import Taint, flavour_key

MILLI = 1000
"""A whole GPU in thousandths: fractional (shared) pods are accounted per GPU in these units."""

_OPERATORS = ("Equal", "Exists")


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod toleration, with Kubernetes matching rules."""

    key: str = ""
    """Empty key with operator Exists tolerates every taint."""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    """Empty matches every effect."""

    def __post_init__(self) -> None:
        if self.operator not in _OPERATORS:
            raise ValueError(f"Toleration.operator must be Equal or Exists, got {self.operator!r}")

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


@dataclass(frozen=True, slots=True)
class GangRequest:
    """A gang: ``pods`` identical pods placed all together or not at all.

    Each pod takes ``gpus_per_pod`` whole GPUs, or (single-pod requests only) ``gpu_fraction_milli``
    thousandths of one shared GPU.
    """

    id: str
    """Stable identity (the GPUJob or pod UID); allocations are recorded under it."""
    pods: int = 1
    """Number of pods, >= 1."""
    gpus_per_pod: int = 1
    """Whole GPUs per pod, >= 1 (0 only together with ``gpu_fraction_milli``)."""
    gpu_fraction_milli: int = 0
    """1..999: a share of one GPU in thousandths; only for a single pod with ``gpus_per_pod`` 0."""
    cpu_milli: int = 0
    """CPU request per pod in millicores."""
    memory_mib: int = 0
    """Memory request per pod in MiB."""
    gpu_product: str | None = None
    """Only GPUs of this product (a flavour), e.g. ``NVIDIA-H100-80GB-HBM3``."""
    mig_profile: str | None = None
    """Only MIG devices of this profile (its own flavour); excludes ``gpu_product``."""
    node_selector: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """Labels every chosen node must carry."""
    tolerations: tuple[Toleration, ...] = ()
    excluded_nodes: frozenset[str] = frozenset()
    """Nodes never to use (e.g. those where a previous attempt of this gang failed)."""
    required_level: Level | None = None
    """All pods within one domain of this level; None means anywhere in the cluster."""
    preferred_level: Level | None = None
    """Reported as met or not; narrowest-first search already honours it whenever it can."""
    preferred_domain: str | None = None
    """A domain (of any level) tried first among those of its level that hold the gang: where a
    restarted gang last ran, so its nodes' caches and its neighbours stay the same."""

    def __post_init__(self) -> None:
        if not self.id:
            raise ValueError("GangRequest.id must be a non-empty string")
        if self.pods < 1:
            raise ValueError(f"GangRequest.pods must be >= 1, got {self.pods}")
        if self.gpus_per_pod < 0:
            raise ValueError(f"GangRequest.gpus_per_pod must be >= 0, got {self.gpus_per_pod}")
        if self.gpu_fraction_milli:
            if not 0 < self.gpu_fraction_milli < MILLI:
                raise ValueError(
                    f"GangRequest.gpu_fraction_milli must be in 1..999, got {self.gpu_fraction_milli}")
            if self.gpus_per_pod or self.pods != 1:
                raise ValueError("GangRequest.gpu_fraction_milli needs pods=1 and gpus_per_pod=0")
        elif self.gpus_per_pod == 0:
            raise ValueError("GangRequest.gpus_per_pod must be >= 1 (or set gpu_fraction_milli)")
        if self.cpu_milli < 0 or self.memory_mib < 0:
            raise ValueError("GangRequest.cpu_milli and memory_mib must be >= 0")
        if self.gpu_product and self.mig_profile:
            raise ValueError(
                "GangRequest.gpu_product and mig_profile are exclusive: a MIG profile is its own flavour")
        for name in ("required_level", "preferred_level"):
            level = getattr(self, name)
            if level is not None and level < Level.NODE:
                raise ValueError(f"GangRequest.{name} must be node or wider, got {level.label}")
        if (self.required_level is not None and self.preferred_level is not None
                and self.preferred_level > self.required_level):
            raise ValueError(
                f"GangRequest.preferred_level ({self.preferred_level.label}) must not be wider than "
                f"required_level ({self.required_level.label})"
            )

    @property
    def flavour(self) -> str:
        """The capacity-index key of the GPUs this gang may use."""
        return flavour_key(self.gpu_product, self.mig_profile)

    @property
    def fractional(self) -> bool:
        return self.gpu_fraction_milli > 0

    @property
    def total_gpus(self) -> int:
        """Whole GPUs the gang holds (a fractional pod counts as 0)."""
        return self.pods * self.gpus_per_pod

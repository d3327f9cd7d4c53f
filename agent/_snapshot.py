"""Parse a dump (``_dump``) into typed readings, recording every value that could not be read.

This is the only place that knows the dump's keys. Nothing here raises on bad or missing data:
each field is either a value or ``None`` plus an entry in ``NodeReadings.unknown`` that says which
reading failed and why, because on real hardware any NVML call may refuse (the H200 capture
refuses NVLink, NUMA id and retired pages) and one refusal must not hide the rest of the node.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from pydantic import ValidationError

from kubegang.api.gpunode import Hca, UnknownReading

from ._dump import Dump, NvmlReturn, describe_error, is_error

T = TypeVar("T")

# NVML's nvmlNvLinkDeviceType_t.
NVLINK_REMOTE_GPU = 0
NVLINK_REMOTE_SWITCH = 2
_INVALID_ARGUMENT = "NVMLError_InvalidArgument"


@dataclass(frozen=True)
class FabricReading:
    """One GPU's NVSwitch fabric registration (nvmlGpuFabricInfo v2/v3)."""

    cluster_uuid: str
    clique_id: int
    state: int
    status: int
    health_mask: int | None = None
    health_summary: int | None = None


@dataclass(frozen=True)
class LinkReading:
    """One active NVLink and what is at its other end."""

    link: int
    remote_bus_id: str | None
    remote_type: int | None


@dataclass(frozen=True)
class EccCounts:
    """ECC error counters; volatile since the last driver load, aggregate over the GPU's life."""

    corrected_volatile: int | None = None
    corrected_aggregate: int | None = None
    uncorrected_volatile: int | None = None
    uncorrected_aggregate: int | None = None


@dataclass(frozen=True)
class RemappedRows:
    """HBM row remapping (Ampere and later)."""

    correctable: int
    uncorrectable: int
    pending: bool
    failure: bool


@dataclass(frozen=True)
class GpuReadings:
    """Everything read from one GPU; ``None`` where unknown."""

    index: int
    uuid: str | None = None
    product: str | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    compute_capability: str | None = None
    mig_enabled: bool | None = None
    mig_profiles: tuple[str, ...] = ()
    pci_bus_id: str | None = None
    numa_node: int | None = None
    cpu_affinity: str | None = None
    links: tuple[LinkReading, ...] | None = None
    fabric: FabricReading | None = None
    ecc: EccCounts = EccCounts()
    retired_pages_single_bit: int | None = None
    retired_pages_double_bit: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows: RemappedRows | None = None
    temperature_celsius: int | None = None
    xid_counts: Mapping[int, int] | None = None
    """XID → events seen; None when unknown (the GPU's events are not watched), which must never
    read as "no XIDs"."""
    unreachable: str | None = None
    """Why the GPU could not be opened at all (its handle failed), else None."""
    lost: bool = False
    """A call on the GPU answered GPU-is-lost: it has fallen off the bus, whatever else it answered
    (a lost GPU's handle may still open, and the driver answer some calls from its cache)."""


@dataclass(frozen=True)
class NodeReadings:
    """One node's readings, ready to become a GPUNode status."""

    gpus: tuple[GpuReadings, ...]
    hcas: tuple[Hca, ...]
    unknown: tuple[UnknownReading, ...]
    driver_version: str | None = None
    nvml_error: str | None = None
    """Why NVML could not be used at all (init failed), else None."""


class _Unknowns:
    """Collects unknown readings while parsing."""

    def __init__(self) -> None:
        self.items: list[UnknownReading] = []
        self.lost = 0
        """Failed calls seen that answered GPU-is-lost (``_gpu`` compares before and after a GPU)."""

    def add(self, what: str, reason: str) -> None:
        self.items.append(UnknownReading(what=what, reason=reason))

    def refused(self, what: str, entry: dict[str, Any]) -> None:
        """A failed call that costs the reading ``what``."""
        self.note(entry)
        self.add(what, describe_error(entry))

    def note(self, entry: dict[str, Any]) -> None:
        """Count a failed call that answered GPU-is-lost, whether or not it costs a reading: unlike
        any other refusal, that answer is a verdict on the GPU. Taken on NVML's code, not the text."""
        if entry.get("code") == NvmlReturn.GPU_IS_LOST:  # no enum lookup: one per refused link
            self.lost += 1

    def read(self, source: Mapping[str, Any], key: str, what: str, convert: Callable[[Any], T]) -> T | None:
        """``convert(source[key])``, or None with the reason recorded."""
        if not isinstance(source, Mapping):
            self.add(what, f"malformed: expected an object holding {key}, got {source!r}")
            return None
        if key not in source:
            self.add(what, f"{key} not recorded")
            return None
        value = source[key]
        if is_error(value):
            self.refused(what, value)
            return None
        try:
            return convert(value)
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
            self.add(what, f"{key} malformed: {exc}")
            return None


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def _count(value: Any) -> int:
    """A size or a version number: never negative from NVML (unsigned there)."""
    number = _int(value)
    if number < 0:
        raise ValueError(f"expected a number >= 0, got {value!r}")
    return number


def _uint32(value: Any) -> int:
    """What NVML returns as an unsigned int (a clique id): a dump outside it is malformed, not a label
    longer than Kubernetes allows."""
    number = _int(value)
    if not 0 <= number < 2**32:
        raise ValueError(f"expected an unsigned 32-bit integer, got {value!r}")
    return number


def _str(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"expected a non-empty string, got {value!r}")
    return value


def _bits(words: Any) -> list[int]:
    """Set bit positions of a little-endian list of 64-bit words (NVML affinity masks)."""
    if not isinstance(words, list):
        raise TypeError(f"expected a list of 64-bit words, got {words!r}")
    bits: list[int] = []
    for w, word in enumerate(words):
        value = _int(word) & 0xFFFF_FFFF_FFFF_FFFF  # a word is 64 bits (two's complement if negative)
        while value:  # only the set bits: a replay agent parses thousands of these masks per poll
            low = value & -value
            bits.append(w * 64 + low.bit_length() - 1)
            value ^= low
    return bits


def cpu_list(cpus: list[int]) -> str:
    """Linux cpu-list syntax: ``[0, 1, 2, 5]`` → ``0-2,5``."""
    ranges: list[str] = []
    start = prev = None
    for cpu in sorted(cpus):
        if start is None:
            start = prev = cpu
        elif prev is not None and cpu == prev + 1:
            prev = cpu
        else:
            ranges.append(str(start) if start == prev else f"{start}-{prev}")
            start = prev = cpu
    if start is not None:
        ranges.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(ranges)


def _cpu_affinity(words: Any) -> str:
    cpus = _bits(words)
    if not cpus:
        raise ValueError("empty CPU affinity mask")
    return cpu_list(cpus)


def _numa_node(words: Any) -> int:
    nodes = _bits(words)
    if len(nodes) != 1:
        raise ValueError(f"memory affinity spans NUMA nodes {nodes}, expected exactly one")
    return nodes[0]


def cluster_uuid_text(raw: Any) -> str:
    """The 16 bytes of an NVML cluster UUID as canonical text (what GPU feature discovery prints)."""
    if isinstance(raw, str):
        return str(uuidlib.UUID(raw))
    if not isinstance(raw, list) or len(raw) < 16:
        raise TypeError(f"expected 16 bytes of cluster UUID, got {raw!r}")
    return str(uuidlib.UUID(bytes=bytes(_int(b) for b in raw[:16])))


def _fabric(value: Any) -> FabricReading:
    if not isinstance(value, dict):
        raise TypeError(f"expected fabric info, got {value!r}")
    mask = value.get("healthMask")
    summary = value.get("healthSummary")
    return FabricReading(
        cluster_uuid=cluster_uuid_text(value["clusterUuid"]),
        clique_id=_uint32(value["cliqueId"]),
        state=_int(value["state"]),
        status=_int(value["status"]),
        health_mask=mask if isinstance(mask, int) else None,
        health_summary=summary if isinstance(summary, int) else None,
    )


def _mig_profiles(value: Any, unknowns: _Unknowns) -> tuple[str, ...]:
    if not isinstance(value, dict):
        raise TypeError(f"expected a map of MIG profiles, got {value!r}")
    offered: dict[str, tuple[int, int]] = {}
    for info in value.values():
        if is_error(info):
            unknowns.note(info)
            continue  # a profile the GPU does not offer is a fact, not an unknown
        if not isinstance(info, dict):
            continue
        name = _str(info["name"]).removeprefix("MIG ")
        offered[name] = (_int(info.get("sliceCount", 0)), _int(info.get("memorySizeMB", 0)))
    return tuple(sorted(offered, key=lambda n: (*offered[n], n)))


def _links(index: int, value: Any, unknowns: _Unknowns) -> tuple[LinkReading, ...] | None:
    if not isinstance(value, list):
        raise TypeError(f"expected a list of links, got {value!r}")
    active: list[LinkReading] = []
    errors: list[str] = []
    unresolved: list[str] = []
    readable = 0
    for entry in value:
        if not isinstance(entry, Mapping):
            errors.append(f"link entry malformed: {entry!r}")
            continue
        state = entry.get("state")
        if isinstance(state, dict) and is_error(state):
            unknowns.note(state)
            # InvalidArgument: the link does not exist on this GPU (NVML probes up to 36).
            if state["error"] != _INVALID_ARGUMENT:
                errors.append(describe_error(state))
            continue
        readable += 1
        if state != 1:
            continue
        pci = entry.get("remotePci")
        bus = pci.get("busId") if isinstance(pci, dict) and not is_error(pci) else None
        kind = entry.get("remoteType")
        for answer in (kind, pci):
            if is_error(answer):
                unknowns.note(answer)
        kind = kind if isinstance(kind, int) and not isinstance(kind, bool) else None
        # The far end is known from its type (an NVSwitch) or its PCI address (a GPU); without
        # either the link's peer cannot be placed in the matrix.
        if kind != NVLINK_REMOTE_SWITCH:
            failed = next((v for v in (entry.get("remoteType"), pci) if is_error(v)), None)
            if failed is not None and (kind is None or bus is None):
                unresolved.append(describe_error(failed))
        active.append(
            LinkReading(link=_int(entry["link"]), remote_bus_id=bus if isinstance(bus, str) else None, remote_type=kind)
        )
    if readable == 0 and errors:
        unknowns.add(f"gpu{index}.nvlink", f"{errors[0]} (all {len(errors)} links)")
        return None
    if unresolved:
        unknowns.add(f"gpu{index}.nvlinkPeers", f"{unresolved[0]} (remote end of {len(unresolved)} active links)")
    return tuple(active)


def _ecc(index: int, device: Mapping[str, Any], unknowns: _Unknowns) -> EccCounts:
    if "EccErrors" not in device:
        unknowns.add(f"gpu{index}.ecc", "EccErrors not recorded")
        return EccCounts()
    table = device["EccErrors"]
    if is_error(table):
        unknowns.refused(f"gpu{index}.ecc", table)
        return EccCounts()
    if not isinstance(table, dict):
        unknowns.add(f"gpu{index}.ecc", "EccErrors malformed")
        return EccCounts()
    counts: dict[str, int | None] = {}
    for kind in ("corrected", "uncorrected"):
        for counter in ("volatile", "aggregate"):
            what = f"gpu{index}.ecc.{kind}.{counter}"
            counts[f"{kind}_{counter}"] = unknowns.read(table.get(kind, {}), counter, what, _int)
    return EccCounts(**counts)


def _retired_pages(index: int, device: Mapping[str, Any], unknowns: _Unknowns) -> tuple[int | None, int | None]:
    def convert(value: Any) -> tuple[int, int]:
        return _int(value["multipleSingleBit"]), _int(value["doubleBit"])

    pages = unknowns.read(device, "RetiredPages", f"gpu{index}.retiredPages", convert)
    return pages if pages is not None else (None, None)


def _remapped(value: Any) -> RemappedRows:
    correctable, uncorrectable, pending, failure = value
    return RemappedRows(_int(correctable), _int(uncorrectable), bool(_int(pending)), bool(_int(failure)))


def _xids(value: Any) -> dict[int, int]:
    if not isinstance(value, dict):
        raise TypeError(f"expected a map of XID to count, got {value!r}")
    return {int(xid): _int(count) for xid, count in value.items()}


def _compute_capability(value: Any) -> str:
    major, minor = value
    return f"{_count(major)}.{_count(minor)}"


def _gpu(position: int, device: Any, unknowns: _Unknowns) -> GpuReadings:
    if not isinstance(device, dict):
        unknowns.add(f"gpu{position}", "device entry malformed")
        return GpuReadings(index=position, unreachable="device entry malformed")
    index = device.get("index", position)
    index = index if isinstance(index, int) and index >= 0 else position
    handle = device.get("handle")
    if is_error(handle):
        reason = describe_error(handle)
        unknowns.add(f"gpu{index}", reason)
        return GpuReadings(index=index, unreachable=reason)

    def read(key: str, what: str, convert: Callable[[Any], T]) -> T | None:
        return unknowns.read(device, key, f"gpu{index}.{what}", convert)

    lost_before = unknowns.lost
    memory = read("MemoryInfo", "memory", lambda v: (_count(v["total"]), _count(v["used"])))
    # Prefer the versioned struct (it carries health); fall back to the legacy call.
    legacy = "GpuFabricInfo" in device and ("GpuFabricInfoV" not in device or is_error(device["GpuFabricInfoV"]))
    fabric_key = "GpuFabricInfo" if legacy else "GpuFabricInfoV"
    links = read("nvlinks", "nvlink", lambda v: _links(index, v, unknowns))
    pending = read("RetiredPagesPendingStatus", "retiredPagesPending", lambda v: bool(_int(v)))
    single, double = _retired_pages(index, device, unknowns)
    gpu = GpuReadings(
        index=index,
        uuid=read("UUID", "uuid", _str),
        product=read("Name", "product", _str),
        memory_total_bytes=memory[0] if memory else None,
        memory_used_bytes=memory[1] if memory else None,
        compute_capability=read("CudaComputeCapability", "computeCapability", _compute_capability),
        mig_enabled=read("MigMode", "migMode", lambda v: bool(_int(v[0]))),
        mig_profiles=read("gpuInstanceProfiles", "migProfiles", lambda v: _mig_profiles(v, unknowns)) or (),
        pci_bus_id=read("PciInfo", "pciBusId", lambda v: _str(v["busId"]).lower()),
        numa_node=read("MemoryAffinity", "numaNode", _numa_node),
        cpu_affinity=read("CpuAffinity", "cpuAffinity", _cpu_affinity),
        links=links,
        fabric=read(fabric_key, "fabric", _fabric),
        ecc=_ecc(index, device, unknowns),
        retired_pages_single_bit=single,
        retired_pages_double_bit=double,
        retired_pages_pending=pending,
        remapped_rows=read("RemappedRows", "remappedRows", _remapped),
        temperature_celsius=read("Temperature", "temperature", _int),
        xid_counts=read("XidEvents", "xidEvents", _xids),
    )
    return replace(gpu, lost=True) if unknowns.lost > lost_before else gpu


def _hcas(dump: Dump, unknowns: _Unknowns) -> tuple[Hca, ...]:
    def convert(value: Any) -> tuple[Hca, ...]:
        if not isinstance(value, list):
            raise TypeError(f"expected a list of HCAs, got {value!r}")
        try:
            return tuple(Hca.model_validate(hca) for hca in value)
        except ValidationError as exc:
            raise ValueError(str(exc).splitlines()[0]) from None

    return unknowns.read(dump, "infiniband", "infiniband", convert) or ()


def parse_dump(dump: Dump) -> NodeReadings:
    """Typed readings of one node's dump; never raises on the dump's content."""
    unknowns = _Unknowns()
    init = dump.get("init")
    if is_error(init):
        reason = describe_error(init)
        unknowns.add("nvml", reason)
        return NodeReadings(gpus=(), hcas=_hcas(dump, unknowns), unknown=tuple(unknowns.items), nvml_error=reason)
    devices = dump.get("devices")
    devices = devices if isinstance(devices, list) else []
    gpus = tuple(_gpu(position, device, unknowns) for position, device in enumerate(devices))
    driver = dump.get("driver")
    return NodeReadings(
        gpus=tuple(sorted(gpus, key=lambda g: g.index)),
        hcas=_hcas(dump, unknowns),
        unknown=tuple(unknowns.items),
        driver_version=driver if isinstance(driver, str) else None,
    )

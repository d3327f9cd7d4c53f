"""The real backend: NVML through nvidia-ml-py, written out in the dump format.

Every call is made through ``_call``, which turns any exception into the dump's error entry, so a
call that real hardware refuses (NotSupported in a VM, NoPermission without root, InvalidArgument
for a link that does not exist, GPU-is-lost) costs one field, never the GPU or the node.

XIDs arrive as events, not as a value to read: a daemon thread waits on an NVML event set and
counts critical-XID events per GPU. Other event types can arrive even when only XIDs were asked
for (the H200 capture got a clock event within 13 ms of registering every supported type), so
the thread filters on the event type rather than treating any event as a fault. The counts are
cumulative since the agent started: an XID that took a GPU out of service keeps it out until the
agent restarts (typically with the GPU reset or the node rebooted). Only a GPU whose registration
succeeded has counts; for any other the dump records why its XIDs are unknown, because "no XIDs"
from a GPU nobody listened to would pass for a clean record.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from ._dump import Dump, NvmlReturn, error_entry
from ._infiniband import DEFAULT_ROOT, read_hcas

log = logging.getLogger(__name__)

_EVENT_XID = 8  # nvmlEventTypeXidCriticalError
_AFFINITY_WORDS = 16  # 1,024 CPUs / NUMA nodes


def plain(value: Any) -> Any:
    """A ctypes structure, array or bytes as JSON-ready Python values."""
    if isinstance(value, ctypes.Structure):
        return {name: plain(getattr(value, name)) for name, *_ in value._fields_}
    if isinstance(value, ctypes.Array):
        return [plain(item) for item in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace").rstrip("\x00")
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return plain(fn(*args))
    except Exception as exc:  # any failure is data: record it and carry on
        return error_entry(exc)


class NvmlBackend:
    """Reads the local GPUs. ``nvml`` is the pynvml module (a fake in tests)."""

    def __init__(
        self,
        *,
        infiniband_root: Path = DEFAULT_ROOT,
        nvml: ModuleType | Any = None,
        watch_events: bool = True,
    ) -> None:
        if nvml is None:
            import pynvml

            nvml = pynvml
        self._nvml = nvml
        self._infiniband_root = infiniband_root
        self._init_error: dict[str, Any] | None = None
        self._xids: dict[str, dict[int, int]] = {}
        self._xid_lock = threading.Lock()
        self._stop = threading.Event()
        self._events: threading.Thread | None = None
        self._watch_error: str | None = "XID event watch not running"
        self._xid_refused: dict[int, dict[str, Any] | None] = {}
        """GPU index → None once registered for XID events, or the error its registration answered."""
        self._watch_events = watch_events
        self._init()

    def _init(self) -> None:
        """nvmlInit, and the XID watch once it succeeds; a failure is kept as the dump's ``init`` error
        and tried again at the next read (a driver container may start after the agent)."""
        try:
            self._nvml.nvmlInit()
        except Exception as exc:
            if self._init_error is None:
                log.error("NVML init failed (tried again at every poll): %s", exc)
            self._init_error = error_entry(exc)
            return
        if self._init_error is not None:
            log.info("NVML init succeeded after failing")
        self._init_error = None
        if self._watch_events:
            self._start_xid_watch()

    # -- reading ----------------------------------------------------------------------------
    def read(self) -> Dump:
        started = time.perf_counter()
        dump: Dump = {"infiniband": read_hcas(self._infiniband_root)}
        if self._init_error is not None:
            self._init()
        if self._init_error is not None:
            dump.update(init=self._init_error, devices=[])
            return dump
        n = self._nvml
        dump["driver"] = _call(n.nvmlSystemGetDriverVersion)
        dump["nvml"] = _call(n.nvmlSystemGetNVMLVersion)
        dump["cuda_driver"] = _call(n.nvmlSystemGetCudaDriverVersion)
        count = _call(n.nvmlDeviceGetCount)
        dump["count"] = count
        devices = [self._device(i) for i in range(count)] if isinstance(count, int) else []
        if not isinstance(count, int):
            dump["init"] = count
        dump["devices"] = devices
        dump["elapsed_s"] = time.perf_counter() - started
        return dump

    def _device(self, index: int) -> dict[str, Any]:
        n = self._nvml
        try:
            handle = n.nvmlDeviceGetHandleByIndex(index)
        except Exception as exc:
            return {"index": index, "handle": error_entry(exc)}
        d: dict[str, Any] = {"index": index}
        d["UUID"] = uuid = _call(n.nvmlDeviceGetUUID, handle)
        d["Name"] = _call(n.nvmlDeviceGetName, handle)
        d["MemoryInfo"] = _call(n.nvmlDeviceGetMemoryInfo, handle)
        d["CudaComputeCapability"] = _call(n.nvmlDeviceGetCudaComputeCapability, handle)
        d["MigMode"] = _call(n.nvmlDeviceGetMigMode, handle)
        d["gpuInstanceProfiles"] = {
            name: _call(n.nvmlDeviceGetGpuInstanceProfileInfo, handle, getattr(n, name))
            for name in sorted(dir(n))
            if name.startswith("NVML_GPU_INSTANCE_PROFILE_") and not name.endswith("_COUNT")
        }
        d["PciInfo"] = _call(n.nvmlDeviceGetPciInfo, handle)
        d["NumaNodeId"] = _call(n.nvmlDeviceGetNumaNodeId, handle)
        d["CpuAffinity"] = _call(n.nvmlDeviceGetCpuAffinity, handle, _AFFINITY_WORDS)
        d["MemoryAffinity"] = _call(
            n.nvmlDeviceGetMemoryAffinity, handle, _AFFINITY_WORDS, getattr(n, "NVML_AFFINITY_SCOPE_NODE", 0)
        )
        d["nvlinks"] = [self._link(handle, link) for link in range(getattr(n, "NVML_NVLINK_MAX_LINKS", 18))]
        d["GpuFabricInfoV"] = self._fabric(handle)
        d["EccMode"] = _call(n.nvmlDeviceGetEccMode, handle)
        d["EccErrors"] = {
            kind: {
                counter: _call(n.nvmlDeviceGetTotalEccErrors, handle, error_type, counter_type)
                for counter, counter_type in (("volatile", 0), ("aggregate", 1))
            }
            for kind, error_type in (("corrected", 0), ("uncorrected", 1))
        }
        single = _call(n.nvmlDeviceGetRetiredPages, handle, 0)
        double = _call(n.nvmlDeviceGetRetiredPages, handle, 1)
        d["RetiredPages"] = next(
            (v for v in (single, double) if isinstance(v, dict)),
            {"multipleSingleBit": len(single), "doubleBit": len(double)},
        )
        d["RetiredPagesPendingStatus"] = _call(n.nvmlDeviceGetRetiredPagesPendingStatus, handle)
        d["RemappedRows"] = _call(n.nvmlDeviceGetRemappedRows, handle)
        d["Temperature"] = _call(n.nvmlDeviceGetTemperature, handle, getattr(n, "NVML_TEMPERATURE_GPU", 0))
        d["XidEvents"] = self._xid_reading(index, uuid)
        return d

    def _xid_reading(self, index: int, uuid: Any) -> Any:
        """The GPU's XID counts, or an error entry saying why they are unknown: a GPU whose events
        are not watched has not had zero XIDs."""
        watch_error = self._watch_error
        if watch_error:
            return {"error": "XidWatchUnavailable", "msg": watch_error}
        if index not in self._xid_refused:
            return {"error": "XidWatchUnavailable", "msg": "GPU not registered for XID events"}
        refused = self._xid_refused[index]
        if refused is not None:
            return refused
        if not isinstance(uuid, str):
            return {"error": "XidWatchUnavailable", "msg": "XIDs are counted by UUID, which cannot be read"}
        with self._xid_lock:
            counts = dict(self._xids.get(uuid, {}))
        return {str(xid): c for xid, c in sorted(counts.items())}

    def _link(self, handle: Any, link: int) -> dict[str, Any]:
        n = self._nvml
        entry: dict[str, Any] = {"link": link, "state": _call(n.nvmlDeviceGetNvLinkState, handle, link)}
        if entry["state"] == 1:
            entry["remotePci"] = _call(n.nvmlDeviceGetNvLinkRemotePciInfo, handle, link)
            entry["remoteType"] = _call(n.nvmlDeviceGetNvLinkRemoteDeviceType, handle, link)
            entry["version"] = _call(n.nvmlDeviceGetNvLinkVersion, handle, link)
        return entry

    def _fabric(self, handle: Any) -> Any:
        """Fabric info, newest struct the driver accepts first (v3 adds the health summary)."""
        n = self._nvml
        last: Any = error_entry(RuntimeError("no fabric info API in this nvidia-ml-py"))
        for struct in ("c_nvmlGpuFabricInfo_v3_t", "c_nvmlGpuFabricInfo_v2_t"):
            if not hasattr(n, struct) or not hasattr(n, "nvmlDeviceGetGpuFabricInfoV"):
                continue
            info = getattr(n, struct)()
            try:
                n.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info))
            except Exception as exc:
                last = error_entry(exc)
                if getattr(exc, "value", None) in (NvmlReturn.ARGUMENT_VERSION_MISMATCH, NvmlReturn.FUNCTION_NOT_FOUND):
                    continue  # an older struct, or the legacy call below, may still answer
                return last
            return plain(info)
        if hasattr(n, "c_nvmlGpuFabricInfo_t") and hasattr(n, "nvmlDeviceGetGpuFabricInfo"):
            info = n.c_nvmlGpuFabricInfo_t()
            try:
                n.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
            except Exception as exc:
                return error_entry(exc)
            return plain(info)
        return last

    # -- XID events -------------------------------------------------------------------------
    def _start_xid_watch(self) -> None:
        """Register every GPU for XID events, then wait for them in a thread. Registering here,
        before the first read returns, means no read reports the counts of a GPU not yet watched."""
        n = self._nvml
        try:
            event_set = n.nvmlEventSetCreate()
        except Exception as exc:
            log.warning("cannot create NVML event set, XIDs will not be seen: %s", exc)
            self._watch_error = f"cannot create NVML event set: {exc}"
            return
        try:
            count = n.nvmlDeviceGetCount()
        except Exception as exc:
            log.warning("cannot count the GPUs to watch, XIDs will not be seen: %s", exc)
            self._watch_error = f"cannot count the GPUs to watch: {exc}"
            self._free_event_set(event_set)
            return
        self._xid_refused = {index: self._register_xids(event_set, index) for index in range(count)}
        self._watch_error = None
        self._events = threading.Thread(
            target=self._watch_xids, args=(event_set,), name="nvml-xid-events", daemon=True
        )
        self._events.start()

    def _register_xids(self, event_set: Any, index: int) -> dict[str, Any] | None:
        """Register one GPU for critical-XID events: None, or the error it answered (NotSupported,
        GPU is lost, any other), which becomes that GPU's XID reading. The other GPUs are still
        watched."""
        n = self._nvml
        try:
            n.nvmlDeviceRegisterEvents(n.nvmlDeviceGetHandleByIndex(index), _EVENT_XID, event_set)
        except Exception as exc:
            log.warning("gpu %d: cannot watch XID events, its XIDs are unknown: %s", index, exc)
            entry = error_entry(exc)
            return {**entry, "msg": f"XID event registration refused: {entry['msg']}"}
        return None

    def _watch_xids(self, event_set: Any) -> None:
        n = self._nvml
        try:
            while not self._stop.is_set():
                try:
                    data = n.nvmlEventSetWait(event_set, 500)
                except Exception as exc:
                    if getattr(exc, "value", None) != NvmlReturn.TIMEOUT:
                        log.warning("NVML event wait failed: %s", exc)
                        self._stop.wait(1.0)
                    continue
                self._record_event(data)
        except Exception as exc:
            log.exception("XID event watch stopped")
            self._watch_error = f"XID event watch stopped: {exc}"
        finally:
            self._free_event_set(event_set)

    def _free_event_set(self, event_set: Any) -> None:
        try:
            self._nvml.nvmlEventSetFree(event_set)
        except Exception as exc:
            log.debug("nvmlEventSetFree: %s", exc)

    def _record_event(self, data: Any) -> None:
        if getattr(data, "eventType", None) != _EVENT_XID:
            return  # clock, P-state …: not faults
        xid = int(getattr(data, "eventData", 0))
        try:
            uuid = plain(self._nvml.nvmlDeviceGetUUID(data.device))
        except Exception as exc:
            log.warning("XID %d on a GPU whose UUID cannot be read: %s", xid, exc)
            return
        log.warning("XID %d on %s", xid, uuid)
        with self._xid_lock:
            per_gpu = self._xids.setdefault(uuid, {})
            per_gpu[xid] = per_gpu.get(xid, 0) + 1

    def version(self) -> None:
        return None  # live readings: every poll reads

    def close(self) -> None:
        self._stop.set()
        if self._events is not None:
            self._events.join(timeout=2.0)
        if self._init_error is None:
            try:
                self._nvml.nvmlShutdown()
            except Exception as exc:
                log.debug("nvmlShutdown: %s", exc)

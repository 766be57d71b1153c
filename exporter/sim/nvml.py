"""A simulated NVML at the ``pynvml`` function boundary, for tests, the demo and the benchmark.

:class:`SimNvml` has the same function names and signatures as the ``pynvml`` module and
returns what the real wrappers return: ``c_nvmlFieldValue_t`` arrays with a per-field
``nvmlReturn``, ``nvmlPciInfo_t`` structures, plain ints and strings. Failures are the real
``pynvml.NVMLError`` subclasses (``NVMLError_GpuIsLost``, ``NVMLError_NotSupported``,
``NVMLError_LibraryNotFound``), built with ``pynvml.NVMLError(code)`` exactly as the wrapper
does. The agent takes either the ``pynvml`` module or a ``SimNvml`` as its library, so the same
sampler code runs against both; nothing below the function boundary is imitated.

Counters are a function of a clock (``time.monotonic`` unless a test passes its own), so two
reads a second apart differ by exactly one second of traffic. Scenarios, comma-separated
(``--nvml sim:degraded,mig``):

- ``h100`` (always on): 8 H100 SXM GPUs x 18 NVLink4 links with steady, per-link traffic.
- ``degraded``: GPU 3 link 7 inactive (no traffic, replay errors), GPU 5 PCIe down-trained to Gen3 x8.
- ``lost-gpu``: GPU 2 falls off the bus after 10 s (``NVMLError_GpuIsLost`` on every call).
- ``unsupported``: GPUs 0-3 lack the PCIe byte counters (fields 197/198), GPU 1 lacks the raw
  NVLink fields (140/141), GPU 2 lacks NVLink error counters.
- ``wrap``: PCIe byte counters are 32-bit (``valueType`` uint) and start near 2**32.
- ``hang``: from 5 s on, every call on GPU 4 blocks until :meth:`SimNvml.release` (or 1 h).
- ``mig``: GPU 0 runs in MIG mode with two MIG devices.
- ``nodriver``: ``nvmlInit`` raises ``NVMLError_LibraryNotFound``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import pynvml

SCENARIOS = ("h100", "degraded", "lost-gpu", "unsupported", "wrap", "hang", "mig", "nodriver")

KIB = 1024
# H100 SXM: 18 NVLink4 links at 25 GB/s per direction; a training job keeps them around half busy.
_LINK_RATE_KIB = 12 * 1024 * 1024  # ~12.9 GB/s per link and direction
_PCIE_RATE = 9_000_000_000  # bytes/s, data loader + NIC traffic through the host bridge
_LINK_COUNTERS = frozenset({
    pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
    pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX, pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX,
})
_ERROR_FIELDS = {
    pynvml.NVML_NVLINK_ERROR_DL_REPLAY: 0.5,
    pynvml.NVML_NVLINK_ERROR_DL_RECOVERY: 0.0,
    pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT: 0.1,
    pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA: 0.0,
    pynvml.NVML_NVLINK_ERROR_DL_ECC_DATA: 0.0,
}


def _error(code: int) -> pynvml.NVMLError:
    """The exception the real wrapper raises for ``code`` (``NVMLError.__new__`` picks the subclass)."""
    return pynvml.NVMLError(code)


@dataclass
class SimGpu:
    """One simulated GPU: its identity, links and what fails on it."""

    index: int
    uuid: str
    bus_id: str
    links: int = 18
    link_down: set[int] = field(default_factory=set)
    link_errors: set[int] = field(default_factory=set)
    unsupported: set[int] = field(default_factory=set)  # field ids answering NOT_SUPPORTED
    no_error_counters: bool = False
    pcie_gen: tuple[int, int] = (5, 5)  # current, max
    pcie_width: tuple[int, int] = (16, 16)
    pcie_rate: int = _PCIE_RATE
    pcie_32bit: bool = False
    pcie_offset: int = 0
    lost_at: float | None = None
    hang_from: float | None = None  # calls block from this clock time on
    mig: list[str] = field(default_factory=list)
    reset_at: float = 0.0  # counters count from here (a GPU reset zeroes them)


@dataclass
class SimMig:
    """A MIG device handle: its parent GPU and its slot."""

    parent: SimGpu
    slot: int


class SimNvml:
    """The simulated library; see the module docstring for scenarios."""

    name = "sim"

    def __init__(
        self,
        scenarios: Iterable[str] = ("h100",),
        *,
        gpus: int = 8,
        links: int = 18,
        clock: Callable[[], float] = time.monotonic,
        hang_seconds: float = 3600.0,
    ) -> None:
        wanted = set(scenarios) | {"h100"}
        unknown = wanted - set(SCENARIOS)
        if unknown:
            raise ValueError(f"unknown NVML scenario(s) {sorted(unknown)}; known: {', '.join(SCENARIOS)}")
        self.scenarios = wanted
        self.clock = clock
        self.t0 = clock()
        self.calls = 0
        self.initialized = False
        self.hang_seconds = hang_seconds
        self._release = threading.Event()
        self._plans: dict[tuple, tuple] = {}
        self.gpus = [
            SimGpu(i, f"GPU-{i:08x}-5e1a-4c0d-9a3b-00000000000{i % 10}", f"00000000:{0x18 + 0x10 * i:02X}:00.0", links=links)
            for i in range(gpus)
        ]
        if "degraded" in wanted and gpus > 5:
            self.gpus[3].link_down.add(7)
            self.gpus[3].link_errors.add(7)
            self.gpus[5].pcie_gen = (3, 5)
            self.gpus[5].pcie_width = (8, 16)
        if "lost-gpu" in wanted and gpus > 2:
            self.gpus[2].lost_at = self.t0 + 10.0
        if "unsupported" in wanted and gpus > 3:
            for g in self.gpus[:4]:
                g.unsupported |= {pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES}
            self.gpus[1].unsupported |= {pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX, pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX}
            self.gpus[2].no_error_counters = True
        if "wrap" in wanted:
            for g in self.gpus:
                # 1 GB/s so that one wrap (4.3 s) spans several 1 s samples; first wrap after ~2.5 s.
                g.pcie_32bit = True
                g.pcie_rate = 1_000_000_000
                g.pcie_offset = 2**32 - 2_500_000_000 - 1000 * g.index
        if "hang" in wanted and gpus > 4:
            self.gpus[4].hang_from = self.t0 + 5.0  # after discovery, like a driver that wedges mid-run
        if "mig" in wanted:
            self.gpus[0].mig = [f"MIG-{k}a1b2c3d-0000-4000-8000-00000000000{k}" for k in range(2)]

    # ----- controls used by tests and the demo -------------------------------------------------

    def lose(self, index: int) -> None:
        """GPU ``index`` falls off the bus now."""
        self.gpus[index].lost_at = self.clock()

    def recover(self, index: int) -> None:
        """GPU ``index`` is back after a reset: counters restart from zero."""
        gpu = self.gpus[index]
        gpu.lost_at = None
        gpu.reset_at = self.clock() - self.t0
        gpu.pcie_offset = 0
        self._plans.clear()

    def hang(self, index: int) -> None:
        """Calls on GPU ``index`` block from now on (until :meth:`release`)."""
        self._release.clear()
        self.gpus[index].hang_from = self.clock()

    def release(self) -> None:
        """Unblock every hanging call (and make later calls return at once)."""
        self._release.set()

    # ----- internals ----------------------------------------------------------------------------

    def _gpu(self, handle: SimGpu) -> SimGpu:
        self.calls += 1
        if not self.initialized:
            raise _error(pynvml.NVML_ERROR_UNINITIALIZED)
        if handle.hang_from is not None and self.clock() >= handle.hang_from and not self._release.is_set():
            self._release.wait(self.hang_seconds)
        if handle.lost_at is not None and self.clock() >= handle.lost_at:
            raise _error(pynvml.NVML_ERROR_GPU_IS_LOST)
        return handle

    def _elapsed(self, gpu: SimGpu) -> float:
        return max(0.0, self.clock() - self.t0 - gpu.reset_at)

    def _link_kib_per_second(self, gpu: SimGpu, link: int, fid: int) -> float:
        if link in gpu.link_down:
            return 0.0
        # Each GPU/link/direction has its own steady rate (70-130% of the nominal) so tests can
        # tell series apart; raw counters include ~6% protocol overhead.
        share = 0.7 + 0.6 * (((gpu.index * 31 + link * 7 + fid) % 17) / 16)
        raw = 1.06 if fid in (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX, pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX) else 1.0
        return _LINK_RATE_KIB * share * raw

    def _link_kib(self, gpu: SimGpu, link: int, fid: int) -> int:
        """The counter value a read returns now (tests compare exported bytes with it)."""
        return int(self._link_kib_per_second(gpu, link, fid) * self._elapsed(gpu))

    def _pcie_bytes(self, gpu: SimGpu, fid: int) -> int:
        share = 1.0 if fid == pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES else 0.8
        return int(gpu.pcie_rate * share * self._elapsed(gpu)) + gpu.pcie_offset

    # ----- the pynvml surface -------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self.calls += 1
        if "nodriver" in self.scenarios:
            raise _error(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self.initialized = False

    def nvmlSystemGetDriverVersion(self) -> str:
        self.calls += 1
        return "570.124.06"

    def nvmlDeviceGetCount(self) -> int:
        self.calls += 1
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> SimGpu:
        self.calls += 1
        if not 0 <= index < len(self.gpus):
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._gpu(self.gpus[index])

    def nvmlDeviceGetUUID(self, handle: SimGpu | SimMig) -> str:
        if isinstance(handle, SimMig):
            return self._gpu(handle.parent).mig[handle.slot]
        return self._gpu(handle).uuid

    def nvmlDeviceGetName(self, handle: SimGpu) -> str:
        self._gpu(handle)
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetPciInfo(self, handle: SimGpu) -> pynvml.nvmlPciInfo_t:
        gpu = self._gpu(handle)
        info = pynvml.nvmlPciInfo_t()
        info.busId = gpu.bus_id.encode()
        info.busIdLegacy = gpu.bus_id[4:].encode()
        info.bus = int(gpu.bus_id.split(":")[1], 16)
        info.pciDeviceId = 0x233010DE
        return info

    def nvmlDeviceGetMigMode(self, handle: SimGpu) -> list[int]:
        gpu = self._gpu(handle)
        if "mig" not in self.scenarios:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if gpu.mig else pynvml.NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: SimGpu) -> int:
        self._gpu(handle)
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: SimGpu, index: int) -> SimMig:
        gpu = self._gpu(handle)
        if index >= len(gpu.mig):
            raise _error(pynvml.NVML_ERROR_NOT_FOUND)
        return SimMig(gpu, index)

    def nvmlDeviceGetGpuInstanceId(self, mig: SimMig) -> int:
        self._gpu(mig.parent)
        return 1 + mig.slot

    def nvmlDeviceGetFieldValues(self, handle: SimGpu, fieldIds: Sequence[int | tuple[int, int]]):
        """Real ``c_nvmlFieldValue_t`` arrays. The per-request layout (ids, return codes, types,
        static values) is built once and copied; only the counters are filled per call, so the
        benchmark measures the agent rather than this simulator."""
        gpu = self._gpu(handle)
        key = (gpu.index, tuple(fieldIds))
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._plan(gpu, key[1])
        array_type, template, counters = plan
        values = array_type.from_buffer_copy(template)
        elapsed = self._elapsed(gpu)
        for i, per_second, offset, wrap in counters:
            value = int(per_second * elapsed) + offset
            if wrap:
                values[i].value.uiVal = value % 2**32
            else:
                values[i].value.ullVal = value
        return values

    def _plan(self, gpu: SimGpu, specs: tuple) -> tuple[type, bytes, list[tuple[int, float, int, bool]]]:
        array_type = pynvml.c_nvmlFieldValue_t * len(specs)
        values = array_type()
        now_us = int(time.time() * 1_000_000)
        counters: list[tuple[int, float, int, bool]] = []
        for i, spec in enumerate(specs):
            fid, scope = spec if isinstance(spec, tuple) else (spec, 0)
            v = values[i]
            v.fieldId, v.scopeId, v.timestamp, v.latencyUsec = fid, scope, now_us, 0
            v.nvmlReturn = pynvml.NVML_SUCCESS
            v.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            if fid in gpu.unsupported:
                v.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
            elif fid in (pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES):
                share = 1.0 if fid == pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES else 0.8
                if gpu.pcie_32bit:
                    v.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                counters.append((i, gpu.pcie_rate * share, gpu.pcie_offset, gpu.pcie_32bit))
            elif fid == pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT:
                v.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                v.value.uiVal = gpu.links
            elif scope >= gpu.links:
                v.nvmlReturn = pynvml.NVML_ERROR_INVALID_ARGUMENT
            elif fid in _LINK_COUNTERS:
                counters.append((i, self._link_kib_per_second(gpu, scope, fid), 0, False))
            elif fid == pynvml.NVML_FI_DEV_NVLINK_GET_STATE:
                v.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                v.value.uiVal = pynvml.NVML_NVLINK_STATE_INACTIVE if scope in gpu.link_down else pynvml.NVML_NVLINK_STATE_ACTIVE
            elif fid == pynvml.NVML_FI_DEV_NVLINK_GET_VERSION:
                v.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                v.value.uiVal = 6  # NVML's enum for NVLink 4.0
            else:
                v.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return array_type, bytes(values), counters

    def nvmlDeviceGetNvLinkState(self, handle: SimGpu, link: int) -> int:
        gpu = self._gpu(handle)
        if link >= gpu.links:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return pynvml.NVML_FEATURE_DISABLED if link in gpu.link_down else pynvml.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkVersion(self, handle: SimGpu, link: int) -> int:
        gpu = self._gpu(handle)
        if link >= gpu.links:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return 6

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: SimGpu, link: int, counter: int) -> int:
        gpu = self._gpu(handle)
        if gpu.no_error_counters:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if link >= gpu.links or counter not in _ERROR_FIELDS:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if link not in gpu.link_errors:
            return 0
        return int(_ERROR_FIELDS[counter] * self._elapsed(gpu))

    def nvmlDeviceGetPcieThroughput(self, handle: SimGpu, counter: int) -> int:
        gpu = self._gpu(handle)
        share = 1.0 if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES else 0.8
        return int(gpu.pcie_rate * share / 1024)  # KB/s (KiB) over the driver's 20 ms window

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: SimGpu) -> int:
        return self._gpu(handle).pcie_gen[0]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: SimGpu) -> int:
        return self._gpu(handle).pcie_gen[1]

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: SimGpu) -> int:
        return self._gpu(handle).pcie_width[0]

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: SimGpu) -> int:
        return self._gpu(handle).pcie_width[1]


def parse_spec(spec: str) -> list[str]:
    """``sim`` or ``sim:degraded,mig`` -> scenario names (``h100`` is implied)."""
    _, _, rest = spec.partition(":")
    return [s.strip() for s in rest.split(",") if s.strip()] or ["h100"]

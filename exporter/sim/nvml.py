"""A simulated NVML at the ``pynvml`` function boundary, for tests, the demo and the benchmark.

:class:`SimNvml` has the same function names and signatures as the ``pynvml`` module and
returns what the real wrappers return: ``c_nvmlFieldValue_t`` arrays with a per-field
``nvmlReturn`` and ``valueType``, ``nvmlPciInfo_t``, the versioned ``c_nvmlGpuFabricInfo_v2_t``/
``_v3_t`` and ``c_nvmlPlatformInfo_v2_t`` structures the caller passes in, plain ints and
strings. Failures are the real ``pynvml.NVMLError`` subclasses, built with
``pynvml.NVMLError(code)`` exactly as the wrapper does. What a GPU answers comes from its
generation's profile (:mod:`exporter.sim.gpus`: a100, h100, h200, b200, gb200), so the agent is
tested against each generation's return codes and value types, never against one shape.

Counters are a function of a clock (``time.monotonic`` unless a test passes its own): a link or
PCIe counter reads ``rate x elapsed + offset`` (modulo 2**32 where the profile reports 32 bits),
and each value's ``timestamp`` follows the same clock, so a test knows exactly how many bytes
moved. Scenarios, comma-separated after the profile (``--nvml sim:gb200,degraded``):

- ``degraded``: GPU 3 link 7 inactive (no traffic, replay errors), GPU 5 (the last of 4) PCIe down-trained to Gen3 x8.
- ``lost-gpu``: GPU 2 falls off the bus after 10 s (``NVMLError_GpuIsLost`` on every call).
- ``unsupported``: GPUs 0-3 lack the PCIe byte counters (fields 197/198), GPU 1 lacks the raw
  NVLink fields (140/141), GPU 2 lacks every NVLink error counter.
- ``wrap``: PCIe byte counters are 32-bit, run at 1 GB/s and start near 2**32.
- ``hang``: from 5 s on, every call on GPU 4 blocks until :meth:`SimNvml.release` (or 1 h).
- ``mig``: GPU 0 runs in MIG mode with two MIG devices.
- ``straggler``: GPU 5's NVLink and PCIe traffic run at 30% of its peers'.
- ``fabric-degraded``: GPU 1 reports degraded fabric bandwidth (health mask), where fabric info exists.
- ``latency`` / ``latency-idle``: every call takes the time a real one takes (:data:`CALL_COSTS`),
  spent on the CPU (as a driver that polls for the reply) or waiting (as one that sleeps).
- ``nodriver``: ``nvmlInit`` raises ``NVMLError_LibraryNotFound``.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import struct
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pynvml

from .gpus import (
    DEFAULT_PROFILE,
    LINK_STATE,
    LINK_VERSION,
    NVLINK5_BYTES,
    NVLINK5_ERRORS,
    NVLINK_DATA,
    NVLINK_DL_ERRORS,
    NVLINK_RAW,
    PCIE_BYTES,
    PROFILES,
    UINT,
    ULL,
    GpuProfile,
)

SCENARIOS = ("degraded", "lost-gpu", "unsupported", "wrap", "hang", "mig", "straggler", "fabric-degraded",
             "latency", "latency-idle", "nodriver")
KIB = 1024
UINT_MAX = 0xFFFFFFFF  # scopeId for "all links" (nvml.h line 2599)
_COUNTERS = frozenset((*NVLINK_DATA, *NVLINK_RAW, *NVLINK5_BYTES))
# Errors per second on a link with errors; the rest stay 0. The agent reads error counters every
# 10th sample (exporter.node.nvml.SLOW_SAMPLE_EVERY), so a 20 s window of the demo's
# GangscopeNVLinkErrorsRising (more than 10 errors) holds one or two 10 s steps: at 2/s that is
# 20 or 40 errors, at 0.1/s 1 or 2, never at the threshold. (At 0.5/s it was 5 or 10: the alert
# flapped every 10 s.)
_ERROR_RATES = {
    pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY: 2.0,
    pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_CRC: 0.1,
    pynvml.NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS: 2.0,
    pynvml.NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_SUCCESSFUL_EVENTS: 2.0,
    pynvml.NVML_FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS: 2.0,
}
_LEGACY_ERRORS = {  # nvmlDeviceGetNvLinkErrorCounter counter -> errors per second on a link with errors
    pynvml.NVML_NVLINK_ERROR_DL_REPLAY: 2.0,
    pynvml.NVML_NVLINK_ERROR_DL_RECOVERY: 0.0,
    pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT: 0.1,
    pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA: 0.0,
    pynvml.NVML_NVLINK_ERROR_DL_ECC_DATA: 0.0,
}
# Health mask of a healthy NVL72 GPU: every check supported and FALSE, configuration correct
# (nvml.h lines 3824-3875: two bits per check at shifts 0, 2, 4, 6; four bits at 8).
HEALTHY_FABRIC = 2 | 2 << 2 | 2 << 4 | 2 << 6 | 1 << 8

# What a call costs on a real GPU, for the ``latency`` scenarios (seconds). Measured with ctypes
# on an RTX 5090 (driver 610.57.04, GSP firmware) in a research digest stored in the code index
# the project's tools search (not a repository we can name): the two PCIe byte-counter fields
# "in 0.2-0.4 ms", nvmlDeviceGetPcieThroughput "blocks ~21 ms per call" (its 20 ms window),
# link generation/width and other plain getters "0.3-3 us". A field-value call is charged the
# midpoint 0.3 ms plus 2 us per entry beyond two (an assumption: the digest measured only small
# batches; "batched field_values_for costs the sum of the slowest members"). scripts/gpu-smoke
# measures these times, and whether they are spent on the CPU, on a real GPU.
CALL_COSTS = {
    "nvmlDeviceGetFieldValues": 300e-6,
    "nvmlDeviceGetFieldValues/entry": 2e-6,
    "nvmlDeviceGetPcieThroughput": 21e-3,
    "call": 3e-6,
}


def _error(code: int) -> pynvml.NVMLError:
    """The exception the real wrapper raises for ``code`` (``NVMLError.__new__`` picks the subclass)."""
    return pynvml.NVMLError(code)


def fabric_version(struct: type[ctypes.Structure], version: int) -> int:
    """NVML_STRUCT_VERSION: the struct's size in the low 24 bits, the version in the high 8."""
    return ctypes.sizeof(struct) | version << 24


_BURN = memoryview(bytes(2**20))  # hashed to spend CPU time outside the interpreter lock (~0.7 ms a pass)


@functools.cache
def _hash_rate() -> float:
    """Bytes per second sha256 hashes here (the fastest of a few passes), measured on first use."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        hashlib.sha256(_BURN)
        best = min(best, time.perf_counter() - t0)
    return len(_BURN) / best
_ENTRY = ctypes.sizeof(pynvml.c_nvmlFieldValue_t)  # 40 bytes: timestamp at 8, the value union at 32
_TIMESTAMP, _VALUE = struct.Struct("<q"), struct.Struct("<Q")
_FABRIC_V2 = fabric_version(pynvml.c_nvmlGpuFabricInfo_v2_t, 2)
_FABRIC_V3 = fabric_version(pynvml.c_nvmlGpuFabricInfo_v3_t, 3)
_PLATFORM_V1 = fabric_version(pynvml.c_nvmlPlatformInfo_v1_t, 1)
_PLATFORM_V2 = fabric_version(pynvml.c_nvmlPlatformInfo_v2_t, 2)
# nvmlGpuFabricState_t is one unsigned char (nvml.h 3808) that nvidia-ml-py declares c_uint; the
# three bytes after it are padding that NVML does not write. The simulator fills them, as stack
# garbage would, so that a reader that forgets the & 0xFF sees a state that is not one.
PADDING = 0xA5A5A500
# "One greater than the largest field ID defined above" (nvml.h 2957, NVML_FI_MAX at go-nvml
# @2f9e261; nvidia-ml-py 13.615 has a newer 308): an id at or above it is INVALID_ARGUMENT.
FI_MAX = 303


@dataclass
class SimGpu:
    """One simulated GPU: its identity, links and what fails on it."""

    index: int
    uuid: str
    bus_id: str
    links: int = 18
    link_down: set[int] = field(default_factory=set)
    link_errors: set[int] = field(default_factory=set)
    unsupported: dict[int, int] = field(default_factory=dict)  # field id -> return code, beyond the profile's
    no_error_counters: bool = False
    pcie_gen: tuple[int, int] = (5, 5)  # current, max
    pcie_width: tuple[int, int] = (16, 16)
    pcie_rate: float = 0.0  # bytes/s transmitted (received: 80% of it)
    pcie_value_type: int | None = UINT
    pcie_offset: int = 0
    traffic: float = 1.0  # share of the profile's busy traffic (a straggler runs below 1)
    # Counters integrate traffic over time: `busy_base` traffic-seconds before `busy_since` (seconds
    # of elapsed), then `traffic` per second (set_traffic changes it without a counter going back).
    busy_base: float = 0.0
    busy_since: float = 0.0
    lost_at: float | None = None
    hang_from: float | None = None  # calls block from this clock time on
    mig: list[str] = field(default_factory=list)
    reset_at: float = 0.0  # counters count from here (a GPU reset zeroes them)
    fabric_health: int = HEALTHY_FABRIC
    module_id: int = 0
    pcie_wrap: int | None = None  # the range the PCIe counters wrap at, whatever valueType says
    refresh: float = 0.0  # the driver refreshes this GPU's counters every so many seconds (0: on every read)
    nvlink_value_type: int = ULL  # UINT: a driver that reports the NVLink byte counters 32-bit
    nvlink_offset: int = 0  # where the NVLink byte counters start (in the field's unit)
    nvlink_wrap: int | None = None  # the range the NVLink byte counters wrap at, whatever valueType says
    minor: int = 0  # /dev/nvidiaN; the driver numbers GPUs in probe order, not NVML's PCI order


@dataclass
class SimMig:
    """A MIG device handle: its parent GPU and its slot."""

    parent: SimGpu
    slot: int


@dataclass(frozen=True)
class Chassis:
    """Where a GB200 node sits: the platform info every GPU of the node reports, and its NVLink domain."""

    cluster_uuid: str = "7b968a6d-c8aa-45e1-9e07-e1e51be99c31"
    clique_id: int = 1
    serial: str = "1821224012345"  # 13 characters, as on Blackwell (nvml.h line 1464)
    slot: int = 1
    tray: int = 0
    host_id: int = 1


class SimNvml:
    """The simulated library; see the module docstring for profiles and scenarios."""

    name = "sim"

    def __init__(
        self,
        scenarios: Iterable[str] = (),
        *,
        profile: str | None = None,
        gpus: int | None = None,
        links: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        hang_seconds: float = 3600.0,
        chassis: Chassis | None = None,
    ) -> None:
        wanted = set(scenarios)
        named = wanted & set(PROFILES)
        if len(named) > 1 or (profile and named and named != {profile}):
            raise ValueError(f"one GPU profile per node, got {sorted(n for n in named | {profile} if n)}")
        profile = profile or (named.pop() if named else DEFAULT_PROFILE)
        wanted -= set(PROFILES)
        if profile not in PROFILES:
            raise ValueError(f"unknown GPU profile {profile!r}; known: {', '.join(PROFILES)}")
        unknown = wanted - set(SCENARIOS)
        if unknown:
            raise ValueError(f"unknown NVML scenario(s) {sorted(unknown)}; known: {', '.join(SCENARIOS)}")
        self.profile: GpuProfile = PROFILES[profile]
        self.scenarios = wanted
        self.clock = clock
        self.t0 = clock()
        self.wall0 = time.time()
        self.calls = 0
        self.initialized = False
        self.hang_seconds = hang_seconds
        self.chassis = chassis or Chassis()
        self._release = threading.Event()
        self._plans: dict[tuple, tuple] = {}
        self._costs = CALL_COSTS if wanted & {"latency", "latency-idle"} else None
        self._spin = "latency" in wanted
        p = self.profile
        count = p.gpus if gpus is None else gpus
        self.gpus = [
            SimGpu(i, f"GPU-{i:08x}-5e1a-4c0d-9a3b-00000000000{i % 10}", f"00000000:{0x18 + 0x10 * i:02X}:00.0",
                   links=p.links if links is None else links, pcie_gen=(p.pcie_gen, p.pcie_gen),
                   pcie_width=(p.pcie_width, p.pcie_width), pcie_rate=p.pcie_rate, pcie_value_type=p.pcie_value_type,
                   module_id=i + 1, minor=i)
            for i in range(count)
        ]
        if p.name != DEFAULT_PROFILE:  # h100 keeps the UUIDs older tests and fixtures name
            for g in self.gpus:
                g.uuid = f"GPU-{i_hex(p.name, g.index)}"
        if "degraded" in wanted and count > 3:
            self.gpus[3].link_down.add(7)
            self.gpus[3].link_errors.add(7)
            slow = self.gpus[min(5, count - 1)]
            slow.pcie_gen = (3, p.pcie_gen)
            slow.pcie_width = (8, p.pcie_width)
        if "lost-gpu" in wanted and count > 2:
            self.gpus[2].lost_at = self.t0 + 10.0
        if "unsupported" in wanted and count > 3:
            for g in self.gpus[:4]:
                g.pcie_value_type = None
            self.gpus[1].unsupported |= dict.fromkeys(NVLINK_RAW, pynvml.NVML_ERROR_NOT_SUPPORTED)
            self.gpus[2].unsupported |= dict.fromkeys((*NVLINK_DL_ERRORS, *NVLINK5_ERRORS), pynvml.NVML_ERROR_NOT_SUPPORTED)
            self.gpus[2].no_error_counters = True
        if "wrap" in wanted:
            for g in self.gpus:
                # 1 GB/s so that one wrap (4.3 s) spans several 1 s samples; first wrap after ~2.5 s.
                g.pcie_value_type = UINT
                g.pcie_rate = 1 * 10**9
                g.pcie_offset = 2**32 - 2_500_000_000 - 1000 * g.index
        if "hang" in wanted and count > 4:
            self.gpus[4].hang_from = self.t0 + 5.0  # after discovery, like a driver that wedges mid-run
        if "mig" in wanted:
            self.gpus[0].mig = [f"MIG-{k}a1b2c3d-0000-4000-8000-00000000000{k}" for k in range(2)]
        if "straggler" in wanted and count > 5:
            self.gpus[5].traffic = 0.3
        if "fabric-degraded" in wanted and count > 1:
            self.degrade_fabric(1)

    # ----- controls used by tests and the demo -------------------------------------------------

    def lose(self, index: int) -> None:
        """GPU ``index`` falls off the bus now."""
        self.gpus[index].lost_at = self.clock()

    def recover(self, index: int) -> None:
        """GPU ``index`` is back after a reset: counters restart from zero."""
        gpu = self.gpus[index]
        gpu.lost_at = None
        gpu.reset_at = self.clock() - self.t0
        gpu.busy_base = gpu.busy_since = 0.0
        gpu.pcie_offset = 0
        self._plans.clear()

    def reset_counters(self, index: int) -> None:
        """GPU ``index`` was reset between two reads, without a read seeing it lost."""
        self.recover(index)

    def unlose(self, index: int) -> None:
        """GPU ``index`` answers again without a reset: its counters went on from where they were."""
        self.gpus[index].lost_at = None

    def step_wall(self, seconds: float) -> None:
        """NTP steps the wall clock NVML stamps values with; the monotonic clock does not move."""
        self.wall0 += seconds

    def hang(self, index: int) -> None:
        """Calls on GPU ``index`` block from now on (until :meth:`release`)."""
        self._release.clear()
        self.gpus[index].hang_from = self.clock()

    def release(self) -> None:
        """Unblock every hanging call (and make later calls return at once)."""
        self._release.set()

    def fail_links(self, index: int, links: Iterable[int]) -> None:
        """GPU ``index``'s NVLink ``links`` go inactive now (and carry nothing from here on): a link
        that was trained and dropped, which GangscopeNVLinkDown pages for."""
        self.gpus[index].link_down |= set(links)
        self._plans.clear()

    def degrade_fabric(self, index: int) -> None:
        """GPU ``index``'s fabric bandwidth is degraded (health mask bits 0-1 = TRUE)."""
        gpu = self.gpus[index]
        gpu.fabric_health = (gpu.fabric_health & ~0x3) | pynvml.NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE

    def set_traffic(self, index: int, share: float) -> None:
        """GPU ``index``'s NVLink and PCIe traffic runs at ``share`` of its busy rate from now on
        (the demo's lagging GPU): its counters keep what they counted and grow at the new rate."""
        gpu = self.gpus[index]
        now = self.elapsed(gpu)
        gpu.busy_base, gpu.busy_since, gpu.traffic = self.busy_seconds(gpu), now, share

    def set_pcie_rate(self, index: int, rate: float, value_type: int | None = UINT, wrap: int | None = None) -> None:
        """Drive GPU ``index``'s PCIe counters at ``rate`` bytes/s from zero now, ``value_type`` wide
        (``wrap``: a driver that types them so but wraps them at this range)."""
        gpu = self.gpus[index]
        gpu.pcie_rate, gpu.pcie_value_type, gpu.pcie_offset, gpu.pcie_wrap = rate, value_type, 0, wrap
        gpu.reset_at = self.clock() - self.t0
        gpu.busy_base = gpu.busy_since = 0.0
        self._plans.clear()

    # ----- what a read returns (tests compare exported bytes with these) -------------------------

    def elapsed(self, gpu: SimGpu) -> float:
        return max(0.0, self.clock() - self.t0 - gpu.reset_at)

    def link_rate(self, gpu: SimGpu, link: int, fid: int) -> float:
        """Bytes/s on a link for a counter field (before the field's unit)."""
        return self._busy_link_rate(gpu, link, fid) * gpu.traffic

    def _busy_link_rate(self, gpu: SimGpu, link: int, fid: int) -> float:
        if link in gpu.link_down or link in self.profile.sleeping_links:
            return 0.0
        # Each GPU/link/direction has its own steady rate (35-65% of the link's maximum) so tests
        # can tell series apart; raw counters include ~6% protocol overhead.
        share = 0.35 + 0.3 * (((gpu.index * 31 + link * 7 + fid) % 17) / 16)
        raw = 1.06 if fid in NVLINK_RAW else 1.0
        return self.profile.link_rate * share * raw

    def busy_seconds(self, gpu: SimGpu) -> float:
        """Seconds at full traffic that the GPU's counters have counted (elapsed x traffic while it never changed)."""
        return gpu.busy_base + gpu.traffic * max(0.0, self.elapsed(gpu) - gpu.busy_since)

    def link_counter(self, gpu: SimGpu, link: int, fid: int) -> int:
        """The raw counter a read returns now: KiB for 138-141, bytes for 202/204."""
        unit = 1 if fid in NVLINK5_BYTES else KIB
        return int(self._busy_link_rate(gpu, link, fid) * self.busy_seconds(gpu) / unit)

    def pcie_rate(self, gpu: SimGpu, fid: int) -> float:
        share = 1.0 if fid == pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES else 0.8
        return gpu.pcie_rate * share * gpu.traffic

    def pcie_bytes(self, gpu: SimGpu, fid: int) -> int:
        """Bytes moved since the counter's origin (before any wrap)."""
        full = gpu.pcie_rate * (1.0 if fid == pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES else 0.8)
        return int(full * self.busy_seconds(gpu)) + gpu.pcie_offset

    # ----- internals ----------------------------------------------------------------------------

    def _spend(self, seconds: float) -> None:
        """Charge a call's real cost: busy on the CPU (``latency``) or asleep (``latency-idle``).

        A real call is a C function that ctypes runs without the interpreter lock, so the busy
        time is spent hashing (hashlib releases the lock on buffers over 2 KiB), not in a Python
        loop that would hold the lock and stall the agent's other threads as no driver does."""
        if not self._spin:
            time.sleep(seconds)
            return
        end = time.perf_counter() + seconds
        # hashes of the right length, so the lock is released and taken back about once, as by one C call
        while (left := end - time.perf_counter()) > 0:
            hashlib.sha256(_BURN[: max(4096, min(len(_BURN), int(left * _hash_rate())))])

    def _gpu(self, handle: SimGpu, cost: str = "call") -> SimGpu:
        self.calls += 1
        if not self.initialized:
            raise _error(pynvml.NVML_ERROR_UNINITIALIZED)
        if self._costs is not None and cost:
            self._spend(self._costs[cost])
        if handle.hang_from is not None and self.clock() >= handle.hang_from and not self._release.is_set():
            self._release.wait(self.hang_seconds)
        if handle.lost_at is not None and self.clock() >= handle.lost_at:
            raise _error(pynvml.NVML_ERROR_GPU_IS_LOST)
        return handle

    def _field_error(self, gpu: SimGpu, fid: int) -> int | None:
        if fid in PCIE_BYTES and gpu.pcie_value_type is None:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        if fid in gpu.unsupported:
            return gpu.unsupported[fid]
        if fid in PCIE_BYTES:
            return None
        return self.profile.field_error(fid)

    def _timestamp_us(self) -> int:
        return int((self.wall0 + self.clock() - self.t0) * 1_000_000)

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
        return self.profile.driver

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

    def nvmlDeviceGetMinorNumber(self, handle: SimGpu) -> int:
        return self._gpu(handle).minor

    def nvmlDeviceGetName(self, handle: SimGpu) -> str:
        self._gpu(handle)
        return self.profile.product

    def nvmlDeviceGetPciInfo(self, handle: SimGpu) -> pynvml.nvmlPciInfo_t:
        gpu = self._gpu(handle)
        info = pynvml.nvmlPciInfo_t()
        info.busId = gpu.bus_id.encode()
        info.busIdLegacy = gpu.bus_id[4:].encode()
        info.bus = int(gpu.bus_id.split(":")[1], 16)
        info.pciDeviceId = self.profile.pci_device_id
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

    def nvmlDeviceGetFieldValues(self, handle: SimGpu, fieldIds: Sequence[int | tuple[int, int]]) -> ctypes.Array[Any]:
        """Real ``c_nvmlFieldValue_t`` arrays. The per-request layout (ids, return codes, types,
        static values) is built once and copied; only the counters and timestamps are filled per
        call, so the benchmark measures the agent rather than this simulator."""
        gpu = self._gpu(handle, cost="")
        if self._costs is not None:
            self._spend(self._costs["nvmlDeviceGetFieldValues"]
                        + self._costs["nvmlDeviceGetFieldValues/entry"] * max(0, len(fieldIds) - 2))
        key = (gpu.index, tuple(fieldIds))
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._plan(gpu, key[1])
        array_type, template, counters = plan
        buf = bytearray(template)
        elapsed = self.elapsed(gpu)
        if gpu.refresh:  # the value of the driver's last refresh
            elapsed = elapsed // gpu.refresh * gpu.refresh
        now_us = self._timestamp_us()
        for i in range(len(buf) // _ENTRY):
            _TIMESTAMP.pack_into(buf, i * _ENTRY + 8, now_us)
        for i, per_second, offset, modulus in counters:  # a 32-bit value fills the union's low half
            _VALUE.pack_into(buf, i * _ENTRY + 32, (int(per_second * elapsed) + offset) % modulus)
        return array_type.from_buffer_copy(buf)

    def _plan(self, gpu: SimGpu, specs: tuple) -> tuple[type[ctypes.Array[Any]], bytes, list[tuple[int, float, int, int]]]:
        array_type = pynvml.c_nvmlFieldValue_t * len(specs)
        values = array_type()
        counters: list[tuple[int, float, int, int]] = []
        latency = int(1e6 * self._costs["nvmlDeviceGetFieldValues"]) if self._costs else 0
        for i, spec in enumerate(specs):
            fid, scope = spec if isinstance(spec, tuple) else (spec, 0)
            v = values[i]
            v.fieldId, v.scopeId, v.latencyUsec = fid, scope, latency
            v.nvmlReturn = pynvml.NVML_SUCCESS
            v.valueType = ULL
            code = pynvml.NVML_ERROR_INVALID_ARGUMENT if not 0 < fid < FI_MAX else self._field_error(gpu, fid)
            links = range(gpu.links) if scope == UINT_MAX else (scope,)
            if code is not None:
                v.nvmlReturn = code
            elif fid in PCIE_BYTES:
                v.valueType = gpu.pcie_value_type
                counters.append((i, self.pcie_rate(gpu, fid), gpu.pcie_offset,
                                 gpu.pcie_wrap or (2**32 if gpu.pcie_value_type == UINT else 2**64)))
            elif fid == pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT:
                v.valueType = UINT
                v.value.uiVal = gpu.links
            elif scope != UINT_MAX and scope >= gpu.links:
                v.nvmlReturn = pynvml.NVML_ERROR_INVALID_ARGUMENT
            elif fid in _COUNTERS:  # the aggregate scope sums every link (nvml.h line 2599)
                unit = 1 if fid in NVLINK5_BYTES else KIB
                v.valueType = gpu.nvlink_value_type
                counters.append((i, sum(self.link_rate(gpu, link, fid) for link in links) / unit, gpu.nvlink_offset,
                                 gpu.nvlink_wrap or (2**32 if gpu.nvlink_value_type == UINT else 2**64)))
            elif fid in (*NVLINK_DL_ERRORS, *NVLINK5_ERRORS):
                rate = _ERROR_RATES.get(fid, 0.0) if scope in gpu.link_errors else 0.0
                counters.append((i, rate, 0, 2**64))
            elif fid == LINK_STATE:
                v.valueType = UINT
                v.value.uiVal = (pynvml.NVML_NVLINK_STATE_INACTIVE if scope in gpu.link_down
                                 else pynvml.NVML_NVLINK_STATE_SLEEP if scope in self.profile.sleeping_links
                                 else pynvml.NVML_NVLINK_STATE_ACTIVE)
            elif fid == LINK_VERSION:
                v.valueType = UINT
                v.value.uiVal = self.profile.nvlink_version
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
        return self.profile.nvlink_version

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: SimGpu, link: int, counter: int) -> int:
        gpu = self._gpu(handle)
        if gpu.no_error_counters or not self.profile.error_counter_api:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if link >= gpu.links or counter not in _LEGACY_ERRORS:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if link not in gpu.link_errors:
            return 0
        return int(_LEGACY_ERRORS[counter] * self.elapsed(gpu))

    def nvmlDeviceGetPcieThroughput(self, handle: SimGpu, counter: int) -> int:
        gpu = self._gpu(handle, cost="nvmlDeviceGetPcieThroughput")
        fid = pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES else pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES
        return int(self.pcie_rate(gpu, fid) / 1024)  # KB/s (KiB) over the driver's 20 ms window

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: SimGpu) -> int:
        return self._gpu(handle).pcie_gen[0]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: SimGpu) -> int:
        return self._gpu(handle).pcie_gen[1]

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: SimGpu) -> int:
        return self._gpu(handle).pcie_width[0]

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: SimGpu) -> int:
        return self._gpu(handle).pcie_width[1]

    def nvmlDeviceGetGpuFabricInfoV(self, handle: SimGpu, arg: object) -> int:
        """Fills the caller's versioned struct, like the C function (mock bridge/fabric.go: a
        version other than v2/v3 is ARGUMENT_VERSION_MISMATCH, checked before support). The
        struct must come by reference (:func:`_struct_arg`); ``state`` is written as the C
        library leaves it: one byte, the three bytes after it not NVML's (:data:`PADDING`)."""
        gpu = self._gpu(handle)
        info = _struct_arg(arg, (pynvml.c_nvmlGpuFabricInfo_v2_t, pynvml.c_nvmlGpuFabricInfo_v3_t))
        p = self.profile
        if info.version not in (_FABRIC_V2, _FABRIC_V3) or info.version != fabric_version(type(info), info.version >> 24):
            raise _error(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        if info.version == _FABRIC_V3 and not p.fabric_v3:
            raise _error(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        if p.fabric == "none":
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        info.status = pynvml.NVML_SUCCESS
        info.state = PADDING | pynvml.NVML_GPU_FABRIC_STATE_COMPLETED
        if p.fabric == "nvl72":
            raw = uuidlib.UUID(self.chassis.cluster_uuid).bytes
            for i, b in enumerate(raw):
                info.clusterUuid[i] = b
            info.cliqueId = self.chassis.clique_id
            info.healthMask = gpu.fabric_health
            if info.version == _FABRIC_V3:
                info.healthSummary = (pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY if gpu.fabric_health == HEALTHY_FABRIC
                                      else pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY)
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetPlatformInfo(self, handle: SimGpu, arg: object) -> int:
        """``nvmlPlatformInfo_t *`` (nvml.h 8595): INVALID_ARGUMENT for no struct, ARGUMENT_VERSION_MISMATCH
        for a version that is not v1/v2 of the struct passed (nvml.h 8590-8593)."""
        gpu = self._gpu(handle)
        info = _struct_arg(arg, (pynvml.c_nvmlPlatformInfo_v1_t, pynvml.c_nvmlPlatformInfo_v2_t))
        if info.version not in (_PLATFORM_V1, _PLATFORM_V2) or info.version != fabric_version(type(info), info.version >> 24):
            raise _error(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        code = self.profile.platform
        if code is not None:
            raise _error(code)
        if info.version != _PLATFORM_V2:
            raise _error(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        c = self.chassis
        info.chassisSerialNumber = c.serial.encode()
        info.slotNumber, info.trayIndex, info.hostId = bytes([c.slot]), bytes([c.tray]), bytes([c.host_id])
        info.peerType, info.moduleId = b"\x01", bytes([gpu.module_id])
        return pynvml.NVML_SUCCESS


def _struct_arg(arg: object, types: tuple[type[ctypes.Structure], ...]) -> ctypes.Structure:
    """The struct behind a ``ctypes.byref``/``ctypes.pointer`` argument, as a C function takes it.

    nvidia-ml-py's wrappers (``nvmlDeviceGetGpuFabricInfoV``, ``nvmlDeviceGetPlatformInfo``) pass
    their argument to C without ``argtypes``; ctypes then copies a bare struct onto the stack by
    value, and NVML writes through whatever the pointer register held (the agent crashed so).
    The C stand-in (exporter/sim/libnvml) sees such a call as a bad pointer or a wrong version;
    this simulator refuses it as INVALID_ARGUMENT, as it refuses anything that is not a pointer
    to one of ``types``."""
    if isinstance(arg, ctypes._Pointer):
        target: object = arg.contents
    elif type(arg).__name__ == "CArgObject":  # ctypes.byref(...)
        target = arg._obj  # type: ignore[attr-defined]
    else:  # a struct by value, None, an int...
        raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
    if not isinstance(target, types):
        raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
    return target


def i_hex(profile: str, index: int) -> str:
    """A stable UUID body for a non-default profile's GPU."""
    return str(uuidlib.uuid5(uuidlib.NAMESPACE_OID, f"gangscope-sim/{profile}/{index}"))


def parse_spec(spec: str) -> list[str]:
    """``sim`` or ``sim:gb200,degraded`` -> profile and scenario names."""
    _, _, rest = spec.partition(":")
    return [s.strip() for s in rest.split(",") if s.strip()]

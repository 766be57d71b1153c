"""NVML: per-GPU NVLink and PCIe counters, link state, errors, fabric and platform, off the scrape path.

Two halves:

- :class:`NvmlReader` is the only code that calls the library (the ``pynvml`` module, or
  :class:`exporter.sim.nvml.SimNvml` with the same functions), on the GPU's own thread
  (:class:`~exporter.node.worker.GpuWorker`) or on the fast PCIe reader's (below), never on the
  event loop. At first contact it *probes* every field family
  (:mod:`exporter.node.fields`) on every link in one ``nvmlDeviceGetFieldValues`` call and
  decides, for that device, from each field's own return code and ``valueType``: which byte
  counters carry NVLink traffic (138/139, else the NVLink5 202/204), which error counters exist
  (161-163, else 213-221, else the legacy per-call API), and how PCIe bytes are read: a 64-bit
  counter with the sample, a 32-bit one also between samples, by one fast-read thread for the
  node, at a period derived from the link's maximum rate so that no wrap is missed, and no
  counter at all by integrating the 20 ms ``nvmlDeviceGetPcieThroughput`` rate over time. Each sample is then one field-value call
  per GPU; a family the device does not support is remembered, logged once and reported in
  ``gangscope_gpu_field_supported``, never asked for again.
- :class:`NvmlSampler` runs on the event loop: every ``--sample-interval`` it hands each GPU its
  sample job and waits for it with a deadline of ``--nvml-timeout`` from when the GPU's current
  call started. A GPU that misses it is reported down and not asked again until its call
  returns; the others are rendered as their answers arrive. A scrape only reads rendered lines.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pynvml
import structlog

from ..exposition import Exposition, format_value
from ..health import SourceHealth
from . import families as F
from . import fields as FF
from .counters import MonotonicCounter
from .hardware import FabricInfo, PlatformInfo, read_fabric, read_platform
from .worker import GpuWorker, TimedLibrary, stamp_busy

log = structlog.get_logger(__name__)

FI_LINK_COUNT = pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT
FI_STATE, FI_VERSION = pynvml.NVML_FI_DEV_NVLINK_GET_STATE, pynvml.NVML_FI_DEV_NVLINK_GET_VERSION
FI_PCIE_TX, FI_PCIE_RX = FF.PCIE_BYTES.ids
PCIE_DIRECTIONS = {FI_PCIE_TX: "transmit", FI_PCIE_RX: "receive"}
FAST_REQUEST = [(FI_PCIE_TX, 0), (FI_PCIE_RX, 0)]
NVLINK_BYTE_FAMILIES = (FF.NVLINK_DATA, FF.NVLINK_RAW, FF.NVLINK5_BYTES)
# NVLink errors change rarely: read them (and the fabric state) every Nth sample, every 10 s at
# the default interval, which alerts on increase() over minutes cannot notice.
SLOW_SAMPLE_EVERY = 10
INIT_RETRY_SECONDS = 60.0
# A counter that stays the same this long while it was moving is idle, not waiting for a driver
# refresh (drivers refresh their counters every few ms to ~100 ms).
MAX_REFRESH = 1.0
PROBE_ATTEMPTS = 3  # probes before a GPU whose PCIe counters keep failing transiently falls back to the rate
BOUND_SLACK = 1.05  # the maximum rate is an upper bound; timestamps have microsecond jitter
BOUND_BYTES = 65536


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


class FieldRequest:
    """One ``nvmlDeviceGetFieldValues`` request, its ``nvmlFieldValue_t`` array built once.

    nvidia-ml-py's wrapper builds a new array and sets each entry's ids through ctypes at every
    call (pynvml.py ``nvmlDeviceGetFieldValues``): 140 us of the interpreter for a 90-entry sample
    and a third of a fast PCIe read. Where the library is nvidia-ml-py, the reader calls the same C
    function pointer the wrapper calls (``_nvmlGetFunctionPointer``, the wrapper's own cache) with
    this array, reset from its template first, by reference as the wrapper passes it
    (``nvmlFieldValue_t *values``, nvml.h 3043). The simulator gets the wrapper's call instead."""

    __slots__ = ("array", "count", "ref", "specs", "template")

    def __init__(self, specs: list[tuple[int, int]]) -> None:
        self.specs = specs
        self.count = ctypes.c_int32(len(specs))
        self.array = (pynvml.c_nvmlFieldValue_t * len(specs))()
        for entry, (fid, scope) in zip(self.array, specs):
            entry.fieldId, entry.scopeId = fid, scope
        self.template = bytes(self.array)
        self.ref = ctypes.byref(self.array)


@dataclass(slots=True)
class PcieDirection:
    """One direction's PCIe byte counter and what its reads need to stay exact. One record, not a
    dict per attribute keyed by direction: the fast reader folds it 20 times a second per GPU."""

    counter: MonotonicCounter = field(default_factory=MonotonicCounter)
    ts: tuple[float, float] | None = None  # monotonic (before, after) the read that last changed it
    wall: int | None = None  # NVML's timestamp (us) of that read: a cross-check only
    stale: bool = False  # reads since the last change returned the same value
    bps: float = 0.0  # bytes/s between the last two reads
    gap_rate: tuple[float, float] | None = None  # (when, bytes/s) of the 20 ms throughput, for gaps


@dataclass
class GpuDevice:
    """What the reader knows about one GPU; only the GPU's own thread touches it."""

    index: int
    handle: Any = None
    uuid: str = ""
    name: str = ""
    pci_bus_id: str = ""
    minor: int | None = None  # /dev/nvidiaN: the number DRA devices (gpu-N) and GKE's nvidiaN name
    links: int = 0
    max_gen: int | None = None
    max_width: int | None = None
    mig: list[tuple[str, int]] = field(default_factory=list)  # (MIG uuid, GPU instance id)
    platform: PlatformInfo | None = None
    lost: bool = False  # seen GPU_IS_LOST: once it is back, each counter's next read decides whether it was reset
    # what the device supports, decided by the probe
    probed: bool = False
    probes: int = 0  # probes made; one whose PCIe fields failed transiently is repeated (PROBE_ATTEMPTS)
    support: dict[str, bool] = field(default_factory=dict)  # family -> supported
    unsupported: set[tuple[int, int]] = field(default_factory=set)  # (field id, scope) never asked again
    unsupported_calls: set[str] = field(default_factory=set)
    field_values: bool = True  # False when the GPU rejects nvmlDeviceGetFieldValues outright
    data_ids: tuple[int, ...] = ()  # the NVLink byte counters read: 138/139 or 202/204
    data_unit: int = 1024
    error_ids: tuple[int, ...] = ()  # error fields read (161-163 and/or 213-221)
    error_api: bool = False  # the legacy nvmlDeviceGetNvLinkErrorCounter instead
    pcie_mode: str = ""  # field: with the sample; fast: also between samples; throughput: integrated rate
    pcie_modulus: int = 0  # the range assumed: 2**32 for a 64-bit-typed counter until a value above it is seen
    pcie_typed: int = 0  # the range its valueType claims
    pcie_period: float | None = None  # seconds between fast reads (None: no fast reads)
    pcie_max_rate: float = FF.PCIE_FALLBACK_RATE
    fabric_v3: bool = True
    fabric: FabricInfo | None = None
    # monotonic totals, folded on this thread
    link_counters: dict[tuple[int, int], MonotonicCounter] = field(default_factory=dict)
    link_32bit: set[tuple[int, int]] = field(default_factory=set)  # (field id, link) of byte counters read as 32-bit
    # NVLink byte counter field id -> the range assumed: 2**32 where typed so, or typed 64-bit while
    # no value above 2**32 was seen (as for PCIe); absent: 64-bit
    link_modulus: dict[int, int] = field(default_factory=dict)
    nvlink_period: float | None = None  # seconds between fast reads of the NVLink byte counters (None: with the sample)
    nvlink_ts: tuple[float, float] | None = None  # monotonic (before, after) the last read of the fast-read NVLink counters
    fields_ts: tuple[float, float] | None = None  # monotonic (before, after) the last sample's field-value call
    error_counters: dict[tuple[int, str], MonotonicCounter] = field(default_factory=dict)
    pcie: dict[str, PcieDirection] = field(default_factory=dict)  # "transmit"/"receive" -> its counter
    pcie_refresh: float = 0.0  # the driver's refresh period as seen (a value unchanged while traffic flows)
    pcie_seen_64: bool = False  # a PCIe value above 2**32 was seen: 64-bit for good (a re-probe after a reset keeps it)
    gap_rate_wanted: bool = False  # a gap asked the GPU's worker to measure the throughput after its sample
    pcie_rate: tuple[int, int] | None = None  # last nvmlDeviceGetPcieThroughput answer (bytes/s)
    curr_gen: int | None = None  # current PCIe link generation and width, read with the slow samples
    curr_width: int | None = None
    fast_failures: int = 0
    clock_steps: int = 0  # reads whose NVML wall-clock interval disagreed with the monotonic one
    # slow? -> the sample's field request; None -> the fast read's (its thread, under ``lock``)
    requests: dict[bool | None, FieldRequest] = field(default_factory=dict)
    # Held while the GPU's own worker samples it or the fast reader reads it: their folds never interleave.
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def fast(self) -> bool:
        """Whether the fast reader reads this GPU (32-bit PCIe or NVLink counters that wrap between samples)."""
        return self.pcie_mode == "fast" or self.nvlink_period is not None

    def counters(self) -> list[MonotonicCounter]:
        return [*self.link_counters.values(), *self.error_counters.values(), *(p.counter for p in self.pcie.values())]


@dataclass
class GpuSample:
    """One GPU's readings from one sample (or why it failed): totals, so late or lost samples lose nothing."""

    index: int
    ok: bool = True
    error: str = ""
    link_bytes: dict[tuple[int, int], int] = field(default_factory=dict)  # (field id, link) -> bytes
    link_up: dict[int, int] = field(default_factory=dict)
    version: dict[int, int] = field(default_factory=dict)
    nvlink_errors: dict[tuple[int, str], int] = field(default_factory=dict)
    pcie: dict[str, int] = field(default_factory=dict)  # direction -> bytes
    pcie_gaps: int = 0
    nvlink_gaps: int | None = None  # only for a GPU whose NVLink byte counters are 32-bit
    pcie_period: float | None = None
    pcie_rate: tuple[int, int] | None = None  # bytes/s (tx, rx) where the counters are unsupported
    gen: tuple[int | None, int | None] = (None, None)
    width: tuple[int | None, int | None] = (None, None)
    support: dict[str, bool] = field(default_factory=dict)
    fabric: FabricInfo | None = None
    failed_calls: int = 0


class NvmlReader:
    """NVML access for one library; every method may block in the driver, so each runs on its GPU's thread."""

    def __init__(self, lib: Any, pcie_interval: float | None = None, clock: Callable[[], float] = time.monotonic,
                 node: str = "", sample_interval: float = 1.0) -> None:
        self.node = node
        self.lib = lib
        self.sample_interval = sample_interval  # a 32-bit NVLink counter that can wrap faster is read by the fast reader
        # None: per device from valueType and link rate; 0: PCIe counters only with the sample; > 0: fixed
        self.pcie_interval = pcie_interval
        # Intervals between counter reads come from this clock, read around each call; NVML's own
        # timestamps are wall-clock time, which NTP steps (and they are only cross-checked).
        self.clock = clock
        self._get_field_values: Any = None  # nvidia-ml-py's C function pointer, where the library is nvidia-ml-py

    @property
    def log(self) -> Any:
        """The module's logger with this node bound: in the demo (and the tests) many agents
        share one process, and an event without its node is useless there. Bound per event, not
        once, so that structlog's configuration at the time (a test's capture) applies."""
        return log.bind(node=self.node) if self.node else log

    def init(self) -> tuple[str, int]:
        """``nvmlInit``, the driver version and the GPU count; raises ``pynvml.NVMLError`` when NVML is unusable."""
        self.lib.nvmlInit()
        pointer = getattr(self.lib, "_nvmlGetFunctionPointer", None)
        if pointer is not None:
            try:
                self._get_field_values = pointer("nvmlDeviceGetFieldValues")
            except pynvml.NVMLError:  # FUNCTION_NOT_FOUND: the wrapper's call raises it per GPU, as the probe expects
                self._get_field_values = None
        return _text(self.lib.nvmlSystemGetDriverVersion()), int(self.lib.nvmlDeviceGetCount())

    def _field_values(self, dev: GpuDevice, request: FieldRequest) -> list[tuple[int, int, int, int]]:
        """(timestamp, return code, value, counter range) of each field of ``request``; raises what
        the wrapper raises for a failed call."""
        fn = self._get_field_values
        if fn is None:
            return FF.unpack_fields(self.lib.nvmlDeviceGetFieldValues(dev.handle, request.specs))
        ctypes.memmove(request.array, request.template, len(request.template))
        stamp_busy()
        ret = fn(dev.handle, request.count, request.ref)
        if ret != pynvml.NVML_SUCCESS:
            raise pynvml.NVMLError(ret)
        return FF.unpack_fields(request.array)

    # ----- discovery ---------------------------------------------------------------------------

    def _call(self, dev: GpuDevice, name: str, *args: Any, out: GpuSample | None = None, family: str = "") -> Any:
        """A call besides the field values. NOT_SUPPORTED (or a missing symbol) is remembered: None
        now and from then on; another failure is counted on ``out`` and gives None; a lost GPU raises."""
        if name in dev.unsupported_calls:
            return None
        try:
            result = getattr(self.lib, name)(dev.handle, *args)
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound) as exc:
            dev.unsupported_calls.add(name)
            if family:
                self._decide(dev, family, False, str(exc))
            return None
        except pynvml.NVMLError_GpuIsLost:
            raise
        except pynvml.NVMLError as exc:
            if out is None:
                raise
            out.failed_calls += 1
            self.log.debug("nvml_call_failed", gpu=dev.index, call=name, error=str(exc))
            return None
        if family:
            self._decide(dev, family, True)
        return result

    def _decide(self, dev: GpuDevice, family: str, supported: bool, why: str = "") -> None:
        if dev.support.get(family) == supported:
            return
        dev.support[family] = supported
        if not supported:
            self.log.info("nvml_family_unsupported", gpu=dev.index, uuid=dev.uuid, family=family, answer=why)

    def open(self, dev: GpuDevice) -> None:
        """Handle, identity, links and static facts; after a loss, the counters restart from zero."""
        lib = self.lib
        handle = lib.nvmlDeviceGetHandleByIndex(dev.index)
        dev.uuid = _text(lib.nvmlDeviceGetUUID(handle))
        dev.name = _text(lib.nvmlDeviceGetName(handle))
        dev.pci_bus_id = _text(lib.nvmlDeviceGetPciInfo(handle).busId)
        dev.handle = handle
        dev.minor = self._call(dev, "nvmlDeviceGetMinorNumber")
        if dev.lost:  # back, through a reset that zeroed its counters or without one: each next read decides
            for counter in dev.counters():
                counter.resume()
            dev.lost = False
        dev.links = self._link_count(dev)
        dev.requests.clear()
        dev.max_gen = self._call(dev, "nvmlDeviceGetMaxPcieLinkGeneration")
        dev.max_width = self._call(dev, "nvmlDeviceGetMaxPcieLinkWidth")
        dev.pcie_max_rate = FF.pcie_max_rate(dev.max_gen, dev.max_width)
        try:
            dev.mig = self._mig_devices(dev)
        except pynvml.NVMLError_GpuIsLost:
            raise
        except pynvml.NVMLError as exc:  # MIG enumeration failing must not hide the whole GPU
            self.log.warning("mig_enumeration_failed", gpu=dev.index, error=str(exc))
            dev.mig = []
        dev.platform = self._platform(dev)

    def _link_count(self, dev: GpuDevice) -> int:
        try:
            fv = self.lib.nvmlDeviceGetFieldValues(dev.handle, [FI_LINK_COUNT])[0]
            if fv.nvmlReturn == pynvml.NVML_SUCCESS:
                return int(FF.field_value(fv)[0])
        except pynvml.NVMLError_NotSupported:
            pass
        # Older drivers: probe links until one is out of range or NVLink is absent.
        count = 0
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            try:
                self.lib.nvmlDeviceGetNvLinkState(dev.handle, link)
            except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_InvalidArgument):
                break
            count += 1
        return count

    def _mig_devices(self, dev: GpuDevice) -> list[tuple[str, int]]:
        mode = self._call(dev, "nvmlDeviceGetMigMode")
        if not mode or mode[0] != pynvml.NVML_DEVICE_MIG_ENABLE:
            return []
        out = []
        for i in range(self.lib.nvmlDeviceGetMaxMigDeviceCount(dev.handle)):
            try:
                mig = self.lib.nvmlDeviceGetMigDeviceHandleByIndex(dev.handle, i)
            except pynvml.NVMLError_NotFound:
                continue
            out.append((_text(self.lib.nvmlDeviceGetUUID(mig)), int(self.lib.nvmlDeviceGetGpuInstanceId(mig))))
        return out

    def _platform(self, dev: GpuDevice) -> PlatformInfo | None:
        """``nvmlDeviceGetPlatformInfo`` with a v2 struct (the version nvidia-ml-py sets); static, read at open.

        The struct goes by reference: the C function takes ``nvmlPlatformInfo_t *`` (nvml.h 8595)
        and nvidia-ml-py's wrapper hands its argument to C as it is, without ``argtypes``
        (pynvml.py ``nvmlDeviceGetPlatformInfo``), so a bare struct would be copied by value and
        NVML would write through whatever the pointer register held."""
        info = pynvml.c_nvmlPlatformInfo_v2_t()
        try:
            if self._call(dev, "nvmlDeviceGetPlatformInfo", ctypes.byref(info), family=FF.PLATFORM) is None:
                return None
        except pynvml.NVMLError_GpuIsLost:
            raise
        except pynvml.NVMLError as exc:  # e.g. ARGUMENT_VERSION_MISMATCH on a driver without v2
            dev.unsupported_calls.add("nvmlDeviceGetPlatformInfo")
            self._decide(dev, FF.PLATFORM, False, str(exc))
            return None
        return read_platform(info)

    # ----- the probe: what this device supports ---------------------------------------------------

    def _probe(self, dev: GpuDevice, out: GpuSample) -> None:
        """Every field family on every link in one call; the answers decide what is read from now on."""
        request = [(fid, link) for fam in FF.FIELD_FAMILIES if fam.per_link for link in range(dev.links) for fid in fam.ids]
        request += [(fid, 0) for fid in FF.PCIE_BYTES.ids]
        t0 = self.clock()
        try:
            values = self.lib.nvmlDeviceGetFieldValues(dev.handle, request)
        except pynvml.NVMLError_NotSupported:
            dev.field_values = False
            values = []
        t1 = self.clock()
        answered: dict[str, bool] = {}
        pcie_modulus: dict[int, int] = {}
        pcie_values: dict[int, int] = {}
        pcie_stamps: dict[int, int] = {}
        link_moduli: dict[int, int] = {}  # NVLink byte counter field id -> typed range, and its largest value
        link_largest: dict[int, int] = {}
        pcie_transient = False
        for key, fv in zip(request, values):
            fam = FF.FAMILY_OF[key[0]]
            ret = fv.nvmlReturn
            if ret == pynvml.NVML_SUCCESS:
                answered[fam.name] = True
                if fam is FF.PCIE_BYTES:
                    value, modulus = FF.field_value(fv)
                    pcie_modulus[key[0]] = modulus
                    pcie_values[key[0]] = int(value)
                    pcie_stamps[key[0]] = int(fv.timestamp)
                elif fam in NVLINK_BYTE_FAMILIES:
                    value, modulus = FF.field_value(fv)
                    link_moduli[key[0]] = min(modulus, link_moduli.get(key[0], modulus))
                    link_largest[key[0]] = max(int(value), link_largest.get(key[0], 0))
                continue
            if ret == pynvml.NVML_ERROR_GPU_IS_LOST:
                raise pynvml.NVMLError(ret)
            if FF.unsupported(fam, ret) or ret == pynvml.NVML_ERROR_INVALID_ARGUMENT:
                if not FF.unsupported(fam, ret):  # not a known quirk: say so, then stop asking
                    self.log.warning("nvml_field_invalid_argument", gpu=dev.index, field=key[0], scope=key[1])
                    out.failed_calls += 1
                dev.unsupported.add(key)
                answered.setdefault(fam.name, False)
            else:  # a transient failure: the family is asked again next time
                out.failed_calls += 1
                pcie_transient |= fam is FF.PCIE_BYTES
        for fam in FF.FIELD_FAMILIES:
            if fam.name in answered:
                self._decide(dev, fam.name, answered[fam.name], "NOT_SUPPORTED or INVALID_ARGUMENT on every link")
            elif not dev.field_values or (fam.per_link and dev.links == 0):
                self._decide(dev, fam.name, False, "no field values" if not dev.field_values else "no NVLink")
        sup = dev.support
        # NVLink5 GPUs that answer both read 202/204: bytes, not KiB, and 138/139 are deprecated
        # there ("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX ... deprecated" for Blackwell, nvml.h 2741-2750).
        if sup.get(FF.NVLINK5_BYTES.name):
            dev.data_ids, dev.data_unit = FF.NVLINK5_BYTES.ids, 1
        elif sup.get(FF.NVLINK_DATA.name):
            dev.data_ids, dev.data_unit = FF.NVLINK_DATA.ids, 1024
        else:
            dev.data_ids = ()
        self._choose_nvlink(dev, link_moduli, link_largest)
        dev.error_ids = tuple(fid for fam in (FF.NVLINK_ERRORS, FF.NVLINK5_ERRORS) if sup.get(fam.name) for fid in fam.ids)
        dev.error_api = False
        if not dev.error_ids and dev.links:
            dev.error_api = self._call(dev, "nvmlDeviceGetNvLinkErrorCounter", 0, pynvml.NVML_NVLINK_ERROR_DL_REPLAY,
                                       out=out, family=FF.ERROR_COUNTER_API) is not None
        dev.probes += 1
        if pcie_transient and dev.probes < PROBE_ATTEMPTS:
            # One failed read of 197/198 must not settle the GPU on the integrated-rate estimate
            # for good: decide PCIe (and probe again) at the next sample.
            dev.requests.clear()
            return
        self._choose_pcie(dev, pcie_modulus, pcie_values, out)
        if dev.pcie_mode in ("fast", "field"):  # the probe's reads are the counters' first observations
            for fid, value in pcie_values.items():
                self._fold_pcie(dev, PCIE_DIRECTIONS[fid], value, t0, t1, pcie_stamps[fid])
        dev.probed = True
        dev.requests.clear()

    def _choose_nvlink(self, dev: GpuDevice, moduli: dict[int, int], largest: dict[int, int]) -> None:
        """The range each NVLink byte counter is read with, and whether the fast reader reads them.

        As for PCIe, a counter typed 64-bit whose values are below 2**32 is read as 32-bit until a
        value above proves otherwise. A 32-bit counter that can wrap within the sample interval at
        the link's maximum rate (202/204 count bytes: 2**32 of them pass in 67 ms) is read between
        samples too, by the fast reader, every 3/4 of that time (50 ms), so that its wraps are
        counted; the KiB counters 138-141 take over a minute to wrap and are read with the sample."""
        dev.link_modulus = {fid: 2**32 if m == 2**64 else m for fid, m in moduli.items()
                            if 0 < m < 2**64 or (m == 2**64 and largest.get(fid, 0) < 2**32)}
        dev.nvlink_period = None
        unit = 1 if dev.data_ids == FF.NVLINK5_BYTES.ids else 1024
        wrapping = [dev.link_modulus[fid] * unit for fid in dev.data_ids if fid in dev.link_modulus]
        if wrapping:
            period = FF.fast_period(min(wrapping), FF.NVLINK_MAX_RATE)
            if period < self.sample_interval:
                dev.nvlink_period = period
        if wrapping:
            self.log.info("nvml_nvlink_counters", gpu=dev.index, bits=32, fast_period=dev.nvlink_period)

    def _choose_pcie(self, dev: GpuDevice, moduli: dict[int, int], values: dict[int, int], out: GpuSample) -> None:
        """Field 197/198 with the sample (64-bit), between samples too (32-bit), or the integrated rate.

        A counter typed 64-bit whose value is below 2**32 is read as 32-bit until a value above
        2**32 proves it (a driver that declares ``unsigned long long`` but wraps at 32 bits would
        otherwise lose 4 GiB at each wrap, silently)."""
        if len(moduli) < 2:
            dev.pcie_mode, dev.pcie_period = "throughput", None
            if self._call(dev, "nvmlDeviceGetPcieThroughput", pynvml.NVML_PCIE_UTIL_TX_BYTES, out=out,
                          family=FF.PCIE_THROUGHPUT) is None:
                dev.pcie_mode = ""
            return
        dev.pcie_typed = min(moduli.values())
        dev.pcie_modulus = dev.pcie_typed
        dev.pcie_seen_64 |= max(values.values(), default=0) >= 2**32
        if dev.pcie_typed == 2**64 and not dev.pcie_seen_64:
            dev.pcie_modulus = 2**32
        wraps = 0 < dev.pcie_modulus < 2**64
        dev.gap_rate_wanted = wraps  # have the throughput ready for the first gap
        if not wraps or self.pcie_interval == 0:
            dev.pcie_mode, dev.pcie_period = "field", None
        else:
            dev.pcie_mode = "fast"
            dev.pcie_period = self.pcie_interval or FF.fast_period(dev.pcie_modulus, dev.pcie_max_rate)
        self.log.info("nvml_pcie_counters", gpu=dev.index, bits=dev.pcie_modulus.bit_length() - 1, mode=dev.pcie_mode,
                 period=dev.pcie_period, max_rate=dev.pcie_max_rate)

    # ----- sampling ----------------------------------------------------------------------------

    def _request(self, dev: GpuDevice, slow: bool) -> FieldRequest:
        """The sample's fields: NVLink counters and state (versions and errors with the slow
        samples), and the PCIe counters in the same call, so a sample is one call per GPU."""
        request = dev.requests.get(slow)
        if request is None:
            ids = [*dev.data_ids, *FF.NVLINK_RAW.ids, FI_STATE]
            if slow:
                ids += [FI_VERSION, *dev.error_ids]
            wanted = [(fid, link) for link in range(dev.links) for fid in ids]
            if dev.pcie_mode in ("field", "fast"):
                wanted += [(fid, 0) for fid in FF.PCIE_BYTES.ids]
            request = dev.requests[slow] = FieldRequest([spec for spec in wanted if spec not in dev.unsupported])
        return request

    def sample(self, dev: GpuDevice, slow: bool) -> GpuSample:
        """Read one GPU. Never raises for NVML errors: a failed GPU comes back with ``ok=False``."""
        with dev.lock:
            out = self._sample(dev, slow)
        self.refresh_gap_rate(dev)
        return out

    def _sample(self, dev: GpuDevice, slow: bool) -> GpuSample:
        out = GpuSample(dev.index)
        try:
            if dev.handle is None:
                self.open(dev)
            if not dev.probed:
                self._probe(dev, out)
            if dev.field_values:
                self._read_fields(dev, slow, out)
            self._read_state_fallback(dev, out)
            self._read_pcie(dev, out, slow)
            if slow:
                if dev.error_api:
                    self._read_error_api(dev, out)
                self._read_fabric(dev, out)
        except pynvml.NVMLError as exc:
            out.ok = False
            out.error = str(exc)
            if isinstance(exc, pynvml.NVMLError_GpuIsLost):
                self._lost(dev)
            return out
        out.failed_calls += dev.fast_failures
        dev.fast_failures = 0
        out.link_bytes = {key: c.total * dev.data_unit for key, c in dev.link_counters.items() if key[0] in dev.data_ids}
        out.link_bytes.update({key: c.total * 1024 for key, c in dev.link_counters.items() if key[0] in FF.NVLINK_RAW.ids})
        out.nvlink_errors = {key: c.total for key, c in dev.error_counters.items()}
        out.pcie = {d: p.counter.total for d, p in dev.pcie.items()}
        out.pcie_gaps = sum(p.counter.gaps for p in dev.pcie.values())
        if dev.link_32bit:
            out.nvlink_gaps = sum(c.gaps for c in dev.link_counters.values())
        out.pcie_period = dev.pcie_period
        out.pcie_rate = dev.pcie_rate if dev.pcie_mode == "throughput" else None
        out.support = dict(dev.support)
        out.fabric = dev.fabric
        return out

    def _lost(self, dev: GpuDevice) -> None:
        dev.handle = None  # re-open (and re-check identity) once it is back
        for direction in dev.pcie.values():
            direction.stale = False
        dev.lost = True
        dev.probed = False  # a replaced board or new driver may answer differently
        dev.pcie_period = dev.nvlink_period = dev.nvlink_ts = None

    def _read_fields(self, dev: GpuDevice, slow: bool, out: GpuSample) -> None:
        request = self._request(dev, slow)
        if not request.specs:
            return
        t0 = self.clock()
        try:
            values = self._field_values(dev, request)
        except pynvml.NVMLError_NotSupported:
            dev.field_values = False
            return
        t1 = self.clock()
        last, dev.fields_ts = dev.fields_ts, (t0, t1)
        fast_links = False
        for key, (ts, ret, value, modulus) in zip(request.specs, values):  # NVML fills the array in request order
            if ret != pynvml.NVML_SUCCESS:
                if ret == pynvml.NVML_ERROR_GPU_IS_LOST:
                    raise pynvml.NVMLError(ret)
                if FF.unsupported(FF.FAMILY_OF[key[0]], ret):  # after the probe: stop asking for this one
                    dev.unsupported.add(key)
                    dev.requests.clear()
                else:
                    out.failed_calls += 1
                continue
            fid, link = key
            if fid == FI_STATE:
                out.link_up[link] = 1 if value in FF.LINK_UP_STATES else 0
            elif fid == FI_VERSION:
                out.version[link] = value
            elif fid in PCIE_DIRECTIONS:
                self._fold_pcie(dev, PCIE_DIRECTIONS[fid], value, t0, t1, ts)
            elif fid in FF.ERROR_TYPES:
                counter = dev.error_counters.get((link, FF.ERROR_TYPES[fid]))
                if counter is None:
                    counter = dev.error_counters[(link, FF.ERROR_TYPES[fid])] = MonotonicCounter()
                counter.update(value, modulus)
            elif dev.nvlink_period is not None and fid in dev.data_ids:
                self._fold_fast_link(dev, key, value, (t0, t1))
                fast_links = True
            else:
                counter = dev.link_counters.get(key)
                if counter is None:
                    counter = dev.link_counters[key] = MonotonicCounter()
                modulus = self._link_range(dev, fid, value, modulus)
                if 0 < modulus < 2**64 and last is not None:
                    self._fold_link(dev, key, counter, value, modulus, last, (t0, t1))
                else:
                    counter.update(value, modulus)
        if fast_links:
            dev.nvlink_ts = (t0, t1)

    def _fold_pcie(self, dev: GpuDevice, direction: str, value: int, t0: float, t1: float, wall_us: int) -> None:
        """A PCIe byte counter read between monotonic times ``t0`` and ``t1``: wraps are unambiguous
        while the counter could not have moved a whole range since the read that last changed it,
        at the link's maximum rate over the widest interval the two reads allow (from before the
        last one to after this one, plus the driver's refresh period).

        A value unchanged while traffic flows means the driver refreshes the counter more slowly
        than it is read: the read is skipped (the next change is measured from the last one), the
        refresh period is noted and the fast period is never shorter than it."""
        reads = dev.pcie.get(direction)
        if reads is None:
            reads = dev.pcie[direction] = PcieDirection()
        counter, last = reads.counter, reads.ts
        if value > 2**32 and dev.pcie_modulus == 2**32 and dev.pcie_typed == 2**64:
            self._proven_64bit(dev)
        modulus = dev.pcie_modulus
        since = t0 - last[1] if last is not None else 0.0  # from the read that last changed it
        if value == counter.last and reads.bps > 0 and 0 < since < MAX_REFRESH:
            reads.stale = True  # not refreshed yet (longer than MAX_REFRESH: traffic stopped)
            return
        if reads.stale:
            reads.stale = False
            if value != counter.last and 0 < since < MAX_REFRESH:
                dev.pcie_refresh = max(dev.pcie_refresh, since)
                self._adapt_period(dev)
        before, gaps = counter.total, counter.gaps
        if last is None:
            counter.update(value, modulus)
            mid = 0.0
        else:
            mid = (t0 + t1 - last[0] - last[1]) / 2
            if 0 < modulus < 2**64:
                # the most time that can separate the two values: from before the last read to after this one
                bound = dev.pcie_max_rate * (t1 - last[0] + dev.pcie_refresh) * BOUND_SLACK + BOUND_BYTES
                if bound >= modulus:  # a gap: how many wraps it holds is estimated from the 20 ms rate
                    counter.update(value, modulus, bound, self._gap_rate(dev, direction) * mid)
                else:
                    counter.update(value, modulus, bound, reads.bps * mid)
            else:
                counter.update(value, modulus)
        if mid > 0 and gaps == counter.gaps:  # a rate from an estimate would carry its error to the next gap
            reads.bps = (counter.total - before) / mid
        if last is not None and reads.wall is not None:
            wall = (wall_us - reads.wall) / 1e6
            if wall_us and abs(wall - mid) > 0.5 + (t1 - t0):  # NVML's clock stepped (NTP), or its timestamps are stale
                dev.clock_steps += 1
                if dev.clock_steps == 1:  # said once per GPU: the counters do not depend on it
                    log.info("nvml_timestamps_disagree", gpu=dev.index, nvml_seconds=round(wall, 3),
                             monotonic_seconds=round(mid, 3))
        reads.ts = (t0, t1)
        reads.wall = wall_us

    def _link_range(self, dev: GpuDevice, fid: int, value: int, typed: int) -> int:
        """The range an NVLink byte counter is read with: 64-bit once a value above 2**32 proves it."""
        assumed = dev.link_modulus.get(fid)
        if assumed is None:
            return typed
        if value >= assumed:  # typed 64-bit and now past 2**32: 64-bit, read with the sample from now on
            del dev.link_modulus[fid]
            dev.link_32bit -= {key for key in dev.link_32bit if key[0] == fid}
            if fid in dev.data_ids and dev.nvlink_period is not None:
                dev.nvlink_period = None
                dev.requests.clear()
            self.log.info("nvml_nvlink_counters_64bit", gpu=dev.index, field=fid)
            return typed
        return assumed

    def _fold_fast_link(self, dev: GpuDevice, key: tuple[int, int], value: int, now: tuple[float, float]) -> None:
        """A fast-read NVLink byte counter, read by the fast reader or the sample: its bound counts
        from the last read of any of them (both read every link at once)."""
        counter = dev.link_counters.get(key)
        if counter is None:
            counter = dev.link_counters[key] = MonotonicCounter()
        modulus = self._link_range(dev, key[0], value, 2**64)
        if dev.nvlink_ts is not None and modulus < 2**64:
            self._fold_link(dev, key, counter, value, modulus, dev.nvlink_ts, now)
        else:
            counter.update(value, modulus)
            if modulus < 2**64:
                dev.link_32bit.add(key)

    def _fold_link(self, dev: GpuDevice, key: tuple[int, int], counter: MonotonicCounter, value: int, modulus: int,
                   last: tuple[float, float], now: tuple[float, float]) -> None:
        """An NVLink byte counter the driver reports 32-bit, guarded as PCIe is: wraps are exact
        while the link could not have moved a whole range between the reads (at
        :data:`~exporter.node.fields.NVLINK_MAX_RATE`); beyond that the wraps cannot be known (no
        independent rate exists for a link: the counter's own would only repeat its undercount),
        so none is added, the total is a lower bound, and the read is counted in
        ``gangscope_nvlink_read_gaps_total``. 138-141 count KiB (2**32 of them take 68 s at that
        rate: exact with 1 s samples); 202/204 count bytes (67 ms: read by the fast reader, see
        :meth:`_choose_nvlink`)."""
        unit = 1 if key[0] in FF.NVLINK5_BYTES.ids else 1024
        wide = now[1] - last[0]
        bound = FF.NVLINK_MAX_RATE * wide * BOUND_SLACK / unit + BOUND_BYTES
        counter.update(value, modulus, bound, 0.0)
        dev.link_32bit.add(key)

    def _gap_rate(self, dev: GpuDevice, direction: str) -> float:
        """Bytes/s to estimate a gap with, without blocking: the driver's 20 ms
        ``nvmlDeviceGetPcieThroughput`` (KB/s, nvml.h 638-639) as the GPU's own worker last measured
        it, while under a sample interval and a second old, else the counter's own rate over its
        last interval that was no gap (a rate from an estimate would carry its error on). Each gap
        asks the worker for a fresh measurement after its next sample (:meth:`refresh_gap_rate`).

        The call blocks for its 20 ms window (21 ms measured). Made on the fast reader it held up
        every other GPU's read past its wrap time: one gap then caused the next, one per GPU and
        direction each second for good, under CPU contention or with slow NVML calls."""
        dev.gap_rate_wanted = True
        reads = dev.pcie[direction]
        cached = reads.gap_rate
        if cached is not None and self.clock() - cached[0] < self.sample_interval + 1.0:
            return cached[1]
        return reads.bps

    def refresh_gap_rate(self, dev: GpuDevice) -> None:
        """On the GPU's own worker, outside ``dev.lock`` (so the fast reader reads on meanwhile):
        measure the 20 ms PCIe throughput a gap asked for."""
        if not dev.gap_rate_wanted or dev.handle is None:
            return
        dev.gap_rate_wanted = False
        for direction, counter in (("transmit", pynvml.NVML_PCIE_UTIL_TX_BYTES), ("receive", pynvml.NVML_PCIE_UTIL_RX_BYTES)):
            try:
                rate = float(self.lib.nvmlDeviceGetPcieThroughput(dev.handle, counter)) * 1024
            except pynvml.NVMLError:  # unsupported, or the GPU was lost: the counter's own rate stands in
                continue
            reads = dev.pcie.get(direction)
            if reads is not None:
                reads.gap_rate = (self.clock(), rate)

    def _proven_64bit(self, dev: GpuDevice) -> None:
        """A 64-bit-typed PCIe counter passed 2**32: it is 64-bit, read with the sample from now on."""
        dev.pcie_modulus = 2**64
        dev.pcie_seen_64 = True
        if dev.pcie_mode == "fast" and not self.pcie_interval:
            dev.pcie_mode, dev.pcie_period = "field", None
            dev.requests.clear()
        log.info("nvml_pcie_counters_64bit", gpu=dev.index, mode=dev.pcie_mode)

    def _adapt_period(self, dev: GpuDevice) -> None:
        if dev.pcie_mode == "fast" and dev.pcie_period is not None and dev.pcie_period < dev.pcie_refresh:
            dev.pcie_period = dev.pcie_refresh
            log.info("nvml_pcie_refresh_slower_than_reads", gpu=dev.index, refresh=round(dev.pcie_refresh, 4))

    def read_fast(self, dev: GpuDevice) -> None:
        """A fast read of the 32-bit PCIe and NVLink byte counters that wrap between samples (the
        caller holds ``dev.lock``), in one call. Failures are counted into the next sample; a lost
        GPU is left to the next sample to report."""
        if dev.handle is None or not dev.fast:
            return
        request = dev.requests.get(None)
        if request is None:
            wanted = FAST_REQUEST if dev.pcie_mode == "fast" else []
            if dev.nvlink_period is not None:
                wanted = [*wanted, *((fid, link) for link in range(dev.links) for fid in dev.data_ids)]
            request = dev.requests[None] = FieldRequest([spec for spec in wanted if spec not in dev.unsupported])
        t0 = self.clock()
        try:
            values = self._field_values(dev, request)
        except pynvml.NVMLError_GpuIsLost:
            self._lost(dev)
            return
        except pynvml.NVMLError:
            dev.fast_failures += 1
            return
        t1 = self.clock()
        for key, (ts, ret, value, _) in zip(request.specs, values):
            if ret:  # not NVML_SUCCESS (0, nvml.h)
                dev.fast_failures += 1
            elif (direction := PCIE_DIRECTIONS.get(key[0])) is not None:
                self._fold_pcie(dev, direction, value, t0, t1, ts)
            else:
                self._fold_fast_link(dev, key, value, (t0, t1))
        if dev.nvlink_period is not None:
            dev.nvlink_ts = (t0, t1)

    def _read_state_fallback(self, dev: GpuDevice, out: GpuSample) -> None:
        """``nvmlDeviceGetNvLinkState`` for links whose state field is not answered (older drivers)."""
        if dev.field_values and dev.support.get(FF.NVLINK_STATE.name, True):
            return
        for link in range(dev.links):
            try:
                out.link_up[link] = int(self.lib.nvmlDeviceGetNvLinkState(dev.handle, link) == pynvml.NVML_FEATURE_ENABLED)
            except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_InvalidArgument):
                continue

    def _read_pcie(self, dev: GpuDevice, out: GpuSample, slow: bool) -> None:
        if dev.pcie_mode == "throughput":
            tx = self._call(dev, "nvmlDeviceGetPcieThroughput", pynvml.NVML_PCIE_UTIL_TX_BYTES, out=out)
            rx = self._call(dev, "nvmlDeviceGetPcieThroughput", pynvml.NVML_PCIE_UTIL_RX_BYTES, out=out)
            now = self.clock()
            if tx is not None and rx is not None:
                rate = (int(tx) * 1024, int(rx) * 1024)  # KB/s (1 KB granularity, nvml.h 638) -> bytes/s
                # Integrate the 20 ms spot rate over the time since the last sample (a step function:
                # unbiased over many samples, not exact within one).
                for direction, r in zip(("transmit", "receive"), rate):
                    reads = dev.pcie.get(direction)
                    if reads is None:
                        reads = dev.pcie[direction] = PcieDirection()
                    reads.counter.total += 0 if reads.ts is None else int(r * (now - reads.ts[1]))
                    reads.ts = (now, now)
                dev.pcie_rate = rate
        if slow or dev.curr_gen is None:  # a link trains down rarely: read with the errors, every 10 s
            dev.curr_gen = self._call(dev, "nvmlDeviceGetCurrPcieLinkGeneration", out=out, family=FF.PCIE_LINK)
            dev.curr_width = self._call(dev, "nvmlDeviceGetCurrPcieLinkWidth", out=out)
        out.gen = (dev.curr_gen, dev.max_gen)
        out.width = (dev.curr_width, dev.max_width)

    def _read_error_api(self, dev: GpuDevice, out: GpuSample) -> None:
        for link in range(dev.links):
            for name, counter_id in FF.LEGACY_ERROR_TYPES:
                if (-counter_id - 1, link) in dev.unsupported:
                    continue
                try:
                    raw = int(self.lib.nvmlDeviceGetNvLinkErrorCounter(dev.handle, link, counter_id))
                except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_InvalidArgument):
                    dev.unsupported.add((-counter_id - 1, link))  # negative ids: legacy counters, not fields
                    continue
                except pynvml.NVMLError_GpuIsLost:
                    raise
                except pynvml.NVMLError:
                    out.failed_calls += 1
                    continue
                dev.error_counters.setdefault((link, name), MonotonicCounter()).update(raw, 2**64)

    def _read_fabric(self, dev: GpuDevice, out: GpuSample) -> None:
        """``nvmlDeviceGetGpuFabricInfoV`` with the newest struct the driver knows (v3, else v2): the
        caller sets the version and the driver answers ARGUMENT_VERSION_MISMATCH to one it predates
        (nvml.h 7835-7841; NVIDIA's mock library, bridge/fabric.go, does the same). By reference:
        ``nvmlGpuFabricInfoV_t *`` (nvml.h 7852), and pynvml passes its argument through untouched."""
        name = "nvmlDeviceGetGpuFabricInfoV"
        if name in dev.unsupported_calls:
            return
        info = pynvml.c_nvmlGpuFabricInfo_v3_t() if dev.fabric_v3 else pynvml.c_nvmlGpuFabricInfoV_t()
        try:
            self.lib.nvmlDeviceGetGpuFabricInfoV(dev.handle, ctypes.byref(info))
        except pynvml.NVMLError_ArgumentVersionMismatch as exc:
            if dev.fabric_v3:
                dev.fabric_v3 = False
                self._read_fabric(dev, out)
            else:
                dev.unsupported_calls.add(name)
                self._decide(dev, FF.FABRIC, False, str(exc))
            return
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound) as exc:
            dev.unsupported_calls.add(name)
            self._decide(dev, FF.FABRIC, False, str(exc))
            return
        except pynvml.NVMLError_GpuIsLost:
            raise
        except pynvml.NVMLError as exc:
            out.failed_calls += 1
            self.log.debug("nvml_call_failed", gpu=dev.index, call=name, error=str(exc))
            return
        self._decide(dev, FF.FABRIC, True)
        dev.fabric = read_fabric(info, dev.fabric_v3)


@dataclass
class GpuState:
    """Loop-side state of one GPU: its worker, last sample and rendered prefixes."""

    dev: GpuDevice
    worker: GpuWorker
    fast_excluded: bool = False  # hung during a fast read: left out of them until a sample succeeds
    up: bool = False
    errors_total: int = 0
    last: GpuSample | None = None
    inflight: concurrent.futures.Future | None = None
    prefixes: dict[tuple, str] = field(default_factory=dict)
    # The NVLink byte counters' lines in exposition order: the link keys they were planned for, then
    # each family's (key, prefix) pairs. Rebuilt when the keys change or the prefixes are cleared.
    counter_plan: tuple[tuple, list[tuple[F.Family, list[tuple[tuple[int, int], str]]]]] | None = None
    identity: tuple = ()
    fingerprint: tuple | None = None


class NvmlSampler:
    """Background sampling of every GPU, each on its own thread, rendered into the exposition."""

    def __init__(
        self,
        lib_factory: Callable[[], Any],
        exposition: Exposition,
        health: SourceHealth,
        base_labels: Callable[[], Sequence[tuple[str, str]]],
        interval: float = 1.0,
        timeout: float = 2.0,
        pcie_interval: float | None = None,
        on_inventory: Callable[[], None] | None = None,
        background_pcie: bool = True,
        clock: Callable[[], float] = time.monotonic,
        node: str = "",
    ) -> None:
        self._lib_factory = lib_factory
        self.clock = clock  # intervals between counter reads (tests pass their simulated clock)
        self.node = node
        self.exposition = exposition
        self.health = health
        self.base_labels = base_labels
        self.interval = interval
        self.timeout = timeout
        self.pcie_interval = pcie_interval
        self.on_inventory = on_inventory
        # False: no fast-read thread; the caller drives read_fast_now() (tests with their own clock)
        self.background_pcie = background_pcie
        self._fast: GpuWorker | None = None
        self._fast_generation = 0
        self._fast_on: GpuState | None = None  # the GPU the fast reader is reading now
        self.reader: NvmlReader | None = None
        self.driver = ""
        self.gpus: dict[int, GpuState] = {}
        self.rounds = 0
        self._init_pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="nvml-init")
        exposition.register(*F.GPU_FAMILIES)

    # ----- inventory for the pod mapping -------------------------------------------------------

    @property
    def log(self) -> Any:
        """The module's logger with this node bound: in the demo (and the tests) many agents
        share one process, and an event without its node is useless there. Bound per event, not
        once, so that structlog's configuration at the time (a test's capture) applies."""
        return log.bind(node=self.node) if self.node else log

    def inventory(self) -> dict[str, tuple[int, str]]:
        """Device UUID (GPU-... or MIG-...) -> (GPU index, parent GPU UUID)."""
        out: dict[str, tuple[int, str]] = {}
        for idx, st in self.gpus.items():
            if st.dev.uuid:
                out[st.dev.uuid] = (idx, st.dev.uuid)
            for mig_uuid, _ in st.dev.mig:
                out[mig_uuid] = (idx, st.dev.uuid)
        return out

    # ----- lifecycle ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Initialise NVML (retrying while absent), then sample every ``interval`` seconds."""
        while not await self.start():
            await asyncio.sleep(INIT_RETRY_SECONDS)
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            await self.health.guarded(self.sample_once())
            next_at += self.interval
            delay = next_at - loop.time()
            if delay < 0:  # a slow round: skip the missed ticks instead of bursting
                next_at = loop.time()
                delay = 0
            await asyncio.sleep(delay)

    async def start(self) -> bool:
        """``nvmlInit`` and the GPU count (bounded by 5 x the timeout), then one worker thread per GPU.
        Each GPU is opened and probed on its own thread by its first sample."""
        try:
            lib = self._lib_factory()
            reader = NvmlReader(TimedLibrary(lib), self.pcie_interval, self.clock, self.node, self.interval)
            fut = self._init_pool.submit(reader.init)
            # asyncio.timeout, not wait_for: Python 3.11's wait_for returns a result that arrives in
            # the same loop iteration as a cancellation and drops the cancellation
            # (python/cpython#86296, fixed by the 3.12 rewrite on asyncio.timeout, #98518): a stop
            # as NVML came up left the sampler running and the agent waiting for it.
            async with asyncio.timeout(self.timeout * 5):
                driver, count = await asyncio.wrap_future(fut)
        except (pynvml.NVMLError, OSError) as exc:
            self.log.warning("nvml_unavailable", error=str(exc))
            self.health.down(f"NVML unavailable: {exc}")
            return False
        except TimeoutError:
            self.log.warning("nvml_init_timeout", timeout=self.timeout * 5)
            self.health.down("nvmlInit timed out")
            return False
        self.reader, self.driver = reader, driver
        self.gpus = {i: GpuState(GpuDevice(i), GpuWorker(f"nvml-gpu{i}")) for i in range(count)}
        if self.background_pcie:
            self._start_fast()
        self.log.info("nvml_started", driver=driver, gpus=count)
        self.health.sync_ok(objects=0)
        # Nothing is rendered before the first sample: gangscope_gpu_up must never say 0 for a
        # GPU that was simply not asked yet. ``run`` samples right after this.
        return True

    def close(self) -> None:
        for st in self.gpus.values():
            st.worker.close()
        if self._fast is not None:
            self._fast.close()
        self._init_pool.shutdown(wait=False, cancel_futures=True)

    def stuck(self) -> bool:
        """Whether a driver call is still running (the interpreter would wait for it at exit)."""
        workers = [st.worker for st in self.gpus.values()] + ([self._fast] if self._fast else [])
        return any(w.stuck for w in workers)

    # ----- the fast PCIe reads -----------------------------------------------------------------
    #
    # 32-bit PCIe counters wrap in 67 ms at Gen5 x16, so they are read every ~50 ms between samples.
    # One thread reads every such GPU at each tick: a thread per GPU woken 20 times a second cost
    # more CPU than the reads (bench/agent.py measured 1.9% against 0.8% of a core for 8 GPUs). A
    # GPU that hangs during a fast read is caught by the same deadline as any call: the reader is
    # replaced by a new thread that leaves that GPU out (the hung one is abandoned, as a hung GPU
    # worker is), and the others lose at most the reads of that interval, which the counters then
    # bridge with their recent rate and count in gangscope_pcie_read_gaps_total. The GPU's own
    # worker reports it down; once a sample of it succeeds, fast reads resume.

    def _start_fast(self) -> None:
        generation = self._fast_generation = self._fast_generation + 1
        self._fast = GpuWorker(f"nvml-pcie-{generation}", lambda: self._read_fast(generation), self._fast_period)

    def _fast_period(self) -> float | None:
        periods = [p for st in self.gpus.values() if not st.fast_excluded
                   for p in (st.dev.pcie_period if st.dev.pcie_mode == "fast" else None, st.dev.nvlink_period) if p]
        return min(periods) if periods else None

    def _read_fast(self, generation: int) -> None:
        assert self.reader is not None
        for st in list(self.gpus.values()):
            if generation != self._fast_generation:
                return  # replaced while stuck in an earlier GPU's read
            if st.fast_excluded or not st.dev.fast or not st.dev.lock.acquire(blocking=False):
                continue  # its own worker is sampling it, and reads the counters itself
            try:
                self._fast_on = st
                self.reader.read_fast(st.dev)
            finally:
                self._fast_on = None
                st.dev.lock.release()

    def _check_fast(self) -> None:
        """Replace a fast reader stuck in one GPU's call longer than the deadline."""
        fast, st = self._fast, self._fast_on
        started = fast.busy_since if fast is not None else None
        if st is None or started is None or time.monotonic() - started <= self.timeout:
            return
        st.fast_excluded = True
        self.log.warning("gpu_fast_reads_stopped", gpu=st.dev.index, uuid=st.dev.uuid, stuck_for=round(time.monotonic() - started, 2))
        assert fast is not None
        fast.close()
        self._start_fast()

    @property
    def fast_ticks(self) -> int:
        """Rounds of fast PCIe reads done by the current reader thread."""
        return self._fast.ticks if self._fast is not None else 0

    def read_fast_now(self) -> None:
        """Every GPU's fast read, here and now (tests drive it with their own clock)."""
        self._read_fast(self._fast_generation)

    async def sample_once(self) -> None:
        """One round: every idle GPU sampled on its own thread, each bounded by its own deadline."""
        assert self.reader is not None
        if self.background_pcie:
            self._check_fast()
        slow = self.rounds % SLOW_SAMPLE_EVERY == 0
        self.rounds += 1
        jobs = []
        for st in self.gpus.values():
            if st.inflight is not None and not st.inflight.done():
                continue  # still stuck in the driver since an earlier round: already reported
            st.inflight = st.worker.submit(self.reader.sample, st.dev, slow)
            jobs.append(self._collect(st, st.inflight))
        if not jobs:
            return
        periods = self._fast_period()
        changed = await asyncio.gather(*jobs)
        if self._fast is not None and self._fast_period() != periods:  # a GPU was probed: start its fast reads now
            self._fast.wake()
        self.health.sync_ok(objects=sum(1 for st in self.gpus.values() if st.up))
        if any(changed) and self.on_inventory:
            self.on_inventory()

    async def _collect(self, st: GpuState, fut: concurrent.futures.Future) -> bool:
        """Wait for one GPU's sample: ``timeout`` from the start of the call its thread is in
        (a call that returns and another that starts renew it). Returns whether its identity changed."""
        waiting = asyncio.wrap_future(fut)
        while True:
            started = st.worker.busy_since
            remaining = self.timeout if started is None else started + self.timeout - time.monotonic()
            if remaining <= 0:
                break
            done, _ = await asyncio.wait({waiting}, timeout=remaining)
            if done:
                break
        if not waiting.done():
            self.apply(st, GpuSample(st.dev.index, ok=False, error=f"NVML call took longer than {self.timeout}s"))
            return False
        changed = (st.dev.uuid, tuple(st.dev.mig)) != st.identity
        if changed:
            st.identity = (st.dev.uuid, tuple(st.dev.mig))
            st.prefixes.clear()
            st.counter_plan = None
            st.fingerprint = None
        exc = waiting.exception()
        if exc is not None:  # not an NVMLError (the reader handles those): a bug or a broken binding
            self.log.error("gpu_sample_crashed", gpu=st.dev.index, error=repr(exc))
            self.health.internal_error()
            self.apply(st, GpuSample(st.dev.index, ok=False, error=repr(exc)))
        else:
            sample = waiting.result()
            if sample.ok and st.fast_excluded:  # the hung call returned (the sample got the GPU's lock)
                st.fast_excluded = False
                self.log.info("gpu_fast_reads_resumed", gpu=st.dev.index)
            self.apply(st, sample)
        return changed

    def apply(self, st: GpuState, sample: GpuSample) -> None:
        """Take a sample's readings and re-render the GPU's lines."""
        was_up = st.up
        st.up = sample.ok
        st.errors_total += sample.failed_calls + (0 if sample.ok else 1)
        if not sample.ok:
            if was_up or st.last is not None:
                self.log.warning("gpu_down", gpu=st.dev.index, uuid=st.dev.uuid, error=sample.error)
            st.last = None
            self.render(st)
            return
        if not was_up and self.rounds > 1:
            self.log.info("gpu_up", gpu=st.dev.index, uuid=st.dev.uuid)
        if st.last is not None:  # link state, version and errors are read only now and then: keep the last
            for attr in ("version", "link_up"):
                if not getattr(sample, attr):
                    setattr(sample, attr, getattr(st.last, attr))
        st.last = sample
        self.render(st)

    # ----- rendering ---------------------------------------------------------------------------

    def relabel(self) -> None:
        """The node's topology labels changed: rebuild every prefix and re-render."""
        for st in self.gpus.values():
            st.prefixes.clear()
            st.counter_plan = None
            st.fingerprint = None
            self.render(st)

    def _prefix(self, st: GpuState, fam: F.Family, *extra: tuple[str, str]) -> str:
        key = (fam.name, *extra)
        prefix = st.prefixes.get(key)
        if prefix is None:
            own = [("gpu", str(st.dev.index))]
            if fam in (F.GPU_UP, F.GPU_ERRORS):
                own.append(("uuid", st.dev.uuid))
            prefix = st.prefixes[key] = F.series_prefix(fam, [*own, *extra], self.base_labels())
        return prefix

    def render(self, st: GpuState) -> None:
        """Counters every sample (owner ``("gpu_counters", i)``); everything else (identity, up,
        link state, errors, PCIe link, fabric, support) only when it changed (owner ``("gpu", i)``)."""
        self._render_counters(st)
        sample = st.last
        fingerprint = (
            st.up, st.errors_total, st.dev.uuid, tuple(st.dev.mig), self.driver, st.dev.platform,
            None if sample is None else (tuple(sample.link_up.items()), tuple(sample.version.items()),
                                         sample.pcie_rate, sample.gen, sample.width, tuple(sample.nvlink_errors.items()),
                                         tuple(sample.support.items()), sample.fabric, sample.pcie_period),
        )
        if fingerprint == st.fingerprint:
            return
        st.fingerprint = fingerprint
        dev, base = st.dev, self.base_labels()
        gpu = str(dev.index)
        out: dict[F.Family, list[str]] = {
            F.GPU_UP: [f"{self._prefix(st, F.GPU_UP)}{1 if st.up else 0}\n"],
            F.GPU_ERRORS: [f"{self._prefix(st, F.GPU_ERRORS)}{st.errors_total}\n"],
        }
        if dev.uuid:
            out[F.GPU_INFO] = [F.sample(
                F.GPU_INFO, [("gpu", gpu), ("uuid", dev.uuid), ("name", dev.name), ("pci_bus_id", dev.pci_bus_id),
                             ("driver_version", self.driver)], base, 1)]
            out[F.MIG_INFO] = [
                F.sample(F.MIG_INFO, [("gpu", gpu), ("uuid", dev.uuid), ("mig_uuid", m), ("gpu_instance", str(gi))], base, 1)
                for m, gi in dev.mig
            ]
        if dev.platform is not None:
            p = dev.platform
            out[F.PLATFORM_INFO] = [F.sample(
                F.PLATFORM_INFO, [("gpu", gpu), ("chassis_serial", p.chassis_serial), ("slot", str(p.slot)),
                                  ("tray", str(p.tray)), ("host_id", str(p.host_id))], base, 1)]
        if sample is not None:
            out[F.NVLINK_UP] = [f"{self._prefix(st, F.NVLINK_UP, ('link', str(l)))}{v}\n" for l, v in sorted(sample.link_up.items())]
            out[F.NVLINK_VERSION] = [f"{self._prefix(st, F.NVLINK_VERSION, ('link', str(l)))}{v}\n" for l, v in sorted(sample.version.items())]
            out[F.NVLINK_ERRORS] = [
                f"{self._prefix(st, F.NVLINK_ERRORS, ('link', str(l)), ('type', t))}{v}\n"
                for (l, t), v in sorted(sample.nvlink_errors.items())
            ]
            if sample.pcie_rate is not None:
                out[F.PCIE_THROUGHPUT] = [
                    f"{self._prefix(st, F.PCIE_THROUGHPUT, ('direction', d))}{v}\n"
                    for d, v in (("transmit", sample.pcie_rate[0]), ("receive", sample.pcie_rate[1]))
                ]
            if sample.pcie_period is not None:
                out[F.PCIE_READ_INTERVAL] = [f"{self._prefix(st, F.PCIE_READ_INTERVAL)}{format_value(sample.pcie_period)}\n"]
            out[F.PCIE_GENERATION] = [
                f"{self._prefix(st, F.PCIE_GENERATION, ('kind', k))}{format_value(v)}\n"
                for k, v in (("current", sample.gen[0]), ("max", sample.gen[1])) if v is not None
            ]
            out[F.PCIE_WIDTH] = [
                f"{self._prefix(st, F.PCIE_WIDTH, ('kind', k))}{format_value(v)}\n"
                for k, v in (("current", sample.width[0]), ("max", sample.width[1])) if v is not None
            ]
            out[F.FIELD_SUPPORTED] = [
                f"{self._prefix(st, F.FIELD_SUPPORTED, ('family', name))}{int(ok)}\n" for name, ok in sorted(sample.support.items())
            ]
            fab = sample.fabric
            if fab is not None:
                out[F.FABRIC_INFO] = [F.sample(
                    F.FABRIC_INFO, [("gpu", gpu), ("uuid", dev.uuid), ("cluster_uuid", fab.cluster_uuid),
                                    ("clique_id", fab.clique_id), ("state", fab.state)], base, 1)]
                out[F.FABRIC_HEALTH] = [f"{self._prefix(st, F.FABRIC_HEALTH, ('check', c))}{v}\n" for c, v in fab.health]
        self.exposition.set(("gpu", dev.index), out)

    def _render_counters(self, st: GpuState) -> None:
        """The counters, every sample: 36 NVLink lines a GPU at 18 links, so their order and
        prefixes are planned once (:attr:`GpuState.counter_plan`) and only the values are formatted."""
        sample = st.last
        out: dict[F.Family, list[str]] = {}
        if sample is not None:
            links = sample.link_bytes
            keys = tuple(links)
            plan = st.counter_plan
            if plan is None or plan[0] != keys:
                by_family: dict[F.Family, list[tuple[tuple[int, int], str]]] = {}
                for key in sorted(keys, key=lambda k: (k[1], k[0])):
                    fam = F.NVLINK_BYTE_FAMILIES[key[0]]
                    by_family.setdefault(fam, []).append((key, self._prefix(st, fam, ('link', str(key[1])))))
                plan = st.counter_plan = (keys, list(by_family.items()))
            for fam, entries in plan[1]:
                out[fam] = [f"{prefix}{links[key]}\n" for key, prefix in entries]
            for direction, fam in (("transmit", F.PCIE_TX), ("receive", F.PCIE_RX)):
                total = sample.pcie.get(direction)
                if total is not None:
                    out[fam] = [f"{self._prefix(st, fam)}{total}\n"]
            if sample.pcie:
                out[F.PCIE_GAPS] = [f"{self._prefix(st, F.PCIE_GAPS)}{sample.pcie_gaps}\n"]
            if sample.nvlink_gaps is not None:
                out[F.NVLINK_GAPS] = [f"{self._prefix(st, F.NVLINK_GAPS)}{sample.nvlink_gaps}\n"]
        self.exposition.set(("gpu_counters", st.dev.index), out)

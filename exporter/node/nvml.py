"""NVML: per-GPU NVLink and PCIe counters, link state and errors, sampled off the scrape path.

Two halves:

- :class:`NvmlReader` runs in a worker thread and is the only code that calls the library
  (the ``pynvml`` module, or :class:`exporter.sim.nvml.SimNvml` with the same functions). Per GPU
  and sample it makes **one** ``nvmlDeviceGetFieldValues`` call for every link's data and raw
  transmit/receive counters (fields 138-141, KiB), link state (165) and version (166), plus the
  PCIe byte counters (197/198); each field's own ``nvmlReturn`` is checked, and fields a GPU
  answers ``NOT_SUPPORTED`` for are remembered and never asked for again.
- :class:`NvmlSampler` runs on the event loop: every ``--sample-interval`` it hands each GPU
  to the thread pool, waits at most ``--nvml-timeout`` for the round, turns raw counters into
  monotonic byte counters and renders the GPU's lines into the exposition. A scrape only reads
  those lines; a hung driver call costs one worker thread and marks its GPU down, nothing else.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pynvml
import structlog

from ..exposition import Exposition, format_value
from ..health import SourceHealth
from . import families as F
from .counters import MonotonicCounter

log = structlog.get_logger(__name__)

FI_TX, FI_RX = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
FI_RAW_TX, FI_RAW_RX = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX, pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX
FI_STATE, FI_VERSION = pynvml.NVML_FI_DEV_NVLINK_GET_STATE, pynvml.NVML_FI_DEV_NVLINK_GET_VERSION
FI_LINK_COUNT = pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT
FI_PCIE_TX, FI_PCIE_RX = pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES
LINK_FIELDS = (FI_TX, FI_RX, FI_RAW_TX, FI_RAW_RX, FI_STATE, FI_VERSION)
NVLINK_COUNTER_FAMILIES = {FI_TX: F.NVLINK_TX, FI_RX: F.NVLINK_RX, FI_RAW_TX: F.NVLINK_RAW_TX, FI_RAW_RX: F.NVLINK_RAW_RX}
PCIE_COUNTER_FAMILIES = {FI_PCIE_TX: F.PCIE_TX, FI_PCIE_RX: F.PCIE_RX}
ERROR_TYPES = (
    ("replay", pynvml.NVML_NVLINK_ERROR_DL_REPLAY),
    ("recovery", pynvml.NVML_NVLINK_ERROR_DL_RECOVERY),
    ("crc_flit", pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT),
    ("crc_data", pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA),
    ("ecc", pynvml.NVML_NVLINK_ERROR_DL_ECC_DATA),
)
# Field 165 states that mean "trained and usable" (SLEEP is the L1 low-power state of a good link).
_LINK_UP_STATES = frozenset({pynvml.NVML_NVLINK_STATE_ACTIVE, pynvml.NVML_NVLINK_STATE_SLEEP})
_VALUE = {  # valueType -> (union member, counter width for wrap detection)
    pynvml.NVML_VALUE_TYPE_DOUBLE: ("dVal", 0),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: ("uiVal", 2**32),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: ("ulVal", 2**64),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: ("ullVal", 2**64),
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: ("sllVal", 0),
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: ("siVal", 0),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: ("usVal", 2**16),
}
_SKIP = (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_INVALID_ARGUMENT)
# NVLink error counters change rarely and cost 5 calls per link: read them every Nth sample
# (every 10 s at the default interval), which alerts on increase() over minutes cannot notice.
ERROR_SAMPLE_EVERY = 10
INIT_RETRY_SECONDS = 60.0


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def field_value(fv: Any) -> tuple[float, int]:
    """A successful ``c_nvmlFieldValue_t``'s value and its counter width (0: not a wrapping counter)."""
    member, modulus = _VALUE.get(fv.valueType, ("ullVal", 2**64))
    return getattr(fv.value, member), modulus


@dataclass
class GpuDevice:
    """What the reader knows about one GPU; only the thread sampling it touches it."""

    index: int
    handle: Any = None
    uuid: str = ""
    name: str = ""
    pci_bus_id: str = ""
    links: int = 0
    max_gen: int | None = None
    max_width: int | None = None
    mig: list[tuple[str, int]] = field(default_factory=list)  # (MIG uuid, GPU instance id)
    unsupported: set[tuple[int, int]] = field(default_factory=set)  # (field id, scope)
    unsupported_errors: set[tuple[int, int]] = field(default_factory=set)  # (counter, link)
    unsupported_calls: set[str] = field(default_factory=set)
    field_values: bool = True  # False when the GPU rejects nvmlDeviceGetFieldValues outright
    request: list[tuple[int, int]] | None = None

    def field_request(self) -> list[tuple[int, int]]:
        if self.request is None:
            wanted = [(fid, link) for link in range(self.links) for fid in LINK_FIELDS]
            wanted += [(FI_PCIE_TX, 0), (FI_PCIE_RX, 0)]
            self.request = [spec for spec in wanted if spec not in self.unsupported]
        return self.request


@dataclass
class GpuSample:
    """One GPU's raw readings from one sample (or why it failed)."""

    index: int
    ok: bool = True
    error: str = ""
    counters: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)  # (fid, link) -> (raw, width)
    link_up: dict[int, int] = field(default_factory=dict)
    version: dict[int, int] = field(default_factory=dict)
    nvlink_errors: dict[tuple[int, str], int] | None = None  # None: not read this sample
    pcie_rate: tuple[int, int] | None = None  # bytes/s (tx, rx) where the counters are unsupported
    gen: tuple[int | None, int | None] = (None, None)
    width: tuple[int | None, int | None] = (None, None)
    failed_calls: int = 0


class NvmlReader:
    """Thread-side NVML access; every method may block in the driver."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib

    def start(self) -> tuple[str, list[GpuDevice]]:
        """``nvmlInit`` and discovery; raises ``pynvml.NVMLError`` when NVML is unusable."""
        self.lib.nvmlInit()
        driver = _text(self.lib.nvmlSystemGetDriverVersion())
        devices = [GpuDevice(i) for i in range(self.lib.nvmlDeviceGetCount())]
        for dev in devices:
            try:
                self._open(dev)
            except pynvml.NVMLError as exc:
                log.warning("gpu_open_failed", gpu=dev.index, error=str(exc))
        return driver, devices

    def _call(self, dev: GpuDevice, name: str, *args: Any, out: GpuSample | None = None) -> Any:
        """A call besides the field values. NOT_SUPPORTED is remembered (None now and from then
        on); another failure is counted on ``out`` and gives None; a lost GPU raises."""
        if name in dev.unsupported_calls:
            return None
        try:
            return getattr(self.lib, name)(dev.handle, *args)
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
            dev.unsupported_calls.add(name)
            return None
        except pynvml.NVMLError_GpuIsLost:
            raise
        except pynvml.NVMLError as exc:
            if out is None:
                raise
            out.failed_calls += 1
            log.debug("nvml_call_failed", gpu=dev.index, call=name, error=str(exc))
            return None

    def _open(self, dev: GpuDevice) -> None:
        lib = self.lib
        handle = lib.nvmlDeviceGetHandleByIndex(dev.index)
        dev.uuid = _text(lib.nvmlDeviceGetUUID(handle))
        dev.name = _text(lib.nvmlDeviceGetName(handle))
        dev.pci_bus_id = _text(lib.nvmlDeviceGetPciInfo(handle).busId)
        dev.handle = handle
        dev.links = self._link_count(dev)
        dev.request = None
        dev.max_gen = self._call(dev, "nvmlDeviceGetMaxPcieLinkGeneration")
        dev.max_width = self._call(dev, "nvmlDeviceGetMaxPcieLinkWidth")
        try:
            dev.mig = self._mig_devices(dev)
        except pynvml.NVMLError_GpuIsLost:
            raise
        except pynvml.NVMLError as exc:  # MIG enumeration failing must not hide the whole GPU
            log.warning("mig_enumeration_failed", gpu=dev.index, error=str(exc))
            dev.mig = []

    def _link_count(self, dev: GpuDevice) -> int:
        try:
            fv = self.lib.nvmlDeviceGetFieldValues(dev.handle, [FI_LINK_COUNT])[0]
            if fv.nvmlReturn == pynvml.NVML_SUCCESS:
                return int(field_value(fv)[0])
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

    def sample(self, dev: GpuDevice, read_errors: bool) -> GpuSample:
        """Read one GPU. Never raises for NVML errors: a failed GPU comes back with ``ok=False``."""
        out = GpuSample(dev.index)
        try:
            if dev.handle is None:
                self._open(dev)
            self._read_fields(dev, out)
            self._read_pcie(dev, out)
            if read_errors:
                self._read_errors(dev, out)
        except pynvml.NVMLError as exc:
            out.ok = False
            out.error = str(exc)
            if isinstance(exc, pynvml.NVMLError_GpuIsLost):
                dev.handle = None  # re-open (and re-check identity) once it is back
        return out

    def _read_fields(self, dev: GpuDevice, out: GpuSample) -> None:
        if not dev.field_values:
            self._read_link_state(dev, range(dev.links), out)
            return
        request = dev.field_request()
        try:
            values = self.lib.nvmlDeviceGetFieldValues(dev.handle, request)
        except pynvml.NVMLError_NotSupported:
            dev.field_values = False
            self._read_link_state(dev, range(dev.links), out)
            return
        fallback_state: list[int] = []
        link_up, version, counters = out.link_up, out.version, out.counters
        for key, fv in zip(request, values):  # NVML fills the array in request order
            ret = fv.nvmlReturn
            if ret != pynvml.NVML_SUCCESS:
                if ret in _SKIP:
                    dev.unsupported.add(key)
                    dev.request = None
                    if key[0] == FI_STATE:
                        fallback_state.append(key[1])
                elif ret == pynvml.NVML_ERROR_GPU_IS_LOST:
                    raise pynvml.NVMLError(ret)
                else:
                    out.failed_calls += 1
                continue
            fid = key[0]
            if fid == FI_STATE:
                link_up[key[1]] = 1 if fv.value.uiVal in _LINK_UP_STATES else 0
            elif fid == FI_VERSION:
                version[key[1]] = int(field_value(fv)[0])
            elif fv.valueType == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
                counters[key] = (fv.value.ullVal, 2**64)
            else:
                value, modulus = field_value(fv)
                counters[key] = (int(value), modulus)
        fallback_state += [link for (fid, link) in dev.unsupported if fid == FI_STATE and link not in out.link_up]
        self._read_link_state(dev, sorted(set(fallback_state)), out)

    def _read_link_state(self, dev: GpuDevice, links: Sequence[int] | range, out: GpuSample) -> None:
        """``nvmlDeviceGetNvLinkState`` for links whose state field is not supported."""
        for link in links:
            try:
                out.link_up[link] = int(self.lib.nvmlDeviceGetNvLinkState(dev.handle, link) == pynvml.NVML_FEATURE_ENABLED)
            except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_InvalidArgument):
                continue

    def _read_pcie(self, dev: GpuDevice, out: GpuSample) -> None:
        if (FI_PCIE_TX, 0) in dev.unsupported and (FI_PCIE_RX, 0) in dev.unsupported:
            tx = self._call(dev, "nvmlDeviceGetPcieThroughput", pynvml.NVML_PCIE_UTIL_TX_BYTES, out=out)
            rx = self._call(dev, "nvmlDeviceGetPcieThroughput", pynvml.NVML_PCIE_UTIL_RX_BYTES, out=out)
            if tx is not None and rx is not None:
                out.pcie_rate = (int(tx) * 1024, int(rx) * 1024)  # KB/s -> bytes/s
        out.gen = (self._call(dev, "nvmlDeviceGetCurrPcieLinkGeneration", out=out), dev.max_gen)
        out.width = (self._call(dev, "nvmlDeviceGetCurrPcieLinkWidth", out=out), dev.max_width)

    def _read_errors(self, dev: GpuDevice, out: GpuSample) -> None:
        errors: dict[tuple[int, str], int] = {}
        for link in range(dev.links):
            for name, counter in ERROR_TYPES:
                if (counter, link) in dev.unsupported_errors:
                    continue
                try:
                    errors[(link, name)] = int(self.lib.nvmlDeviceGetNvLinkErrorCounter(dev.handle, link, counter))
                except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_InvalidArgument):
                    dev.unsupported_errors.add((counter, link))
                except pynvml.NVMLError_GpuIsLost:
                    raise
                except pynvml.NVMLError:
                    out.failed_calls += 1
        out.nvlink_errors = errors


@dataclass
class GpuState:
    """Loop-side state of one GPU: monotonic totals and the last sample, for re-rendering."""

    dev: GpuDevice
    up: bool = False
    errors_total: int = 0
    counters: dict[tuple[int, int], MonotonicCounter] = field(default_factory=dict)
    nvlink_errors: dict[tuple[int, str], MonotonicCounter] = field(default_factory=dict)
    last: GpuSample | None = None
    inflight: concurrent.futures.Future | None = None
    prefixes: dict[tuple, str] = field(default_factory=dict)
    identity: tuple = ()
    fingerprint: tuple | None = None


class NvmlSampler:
    """Background sampling of every GPU, rendered into the exposition after each round."""

    def __init__(
        self,
        lib_factory: Callable[[], Any],
        exposition: Exposition,
        health: SourceHealth,
        base_labels: Callable[[], Sequence[tuple[str, str]]],
        interval: float = 1.0,
        timeout: float = 2.0,
        workers: int = 4,
        on_inventory: Callable[[], None] | None = None,
    ) -> None:
        self._lib_factory = lib_factory
        self.exposition = exposition
        self.health = health
        self.base_labels = base_labels
        self.interval = interval
        self.timeout = timeout
        self.executor = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="nvml")
        self.on_inventory = on_inventory
        self.reader: NvmlReader | None = None
        self.driver = ""
        self.gpus: dict[int, GpuState] = {}
        self.rounds = 0
        exposition.register(*F.GPU_FAMILIES)

    # ----- inventory for the pod mapping -------------------------------------------------------

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
        try:
            lib = self._lib_factory()
            reader = NvmlReader(lib)
            fut = self.executor.submit(reader.start)
            driver, devices = await asyncio.wait_for(asyncio.wrap_future(fut), self.timeout * 5)
        except (pynvml.NVMLError, OSError) as exc:
            log.warning("nvml_unavailable", error=str(exc))
            self.health.down(f"NVML unavailable: {exc}")
            return False
        except TimeoutError:
            log.warning("nvml_init_timeout", timeout=self.timeout * 5)
            self.health.down("nvmlInit timed out")
            return False
        self.reader, self.driver = reader, driver
        self.gpus = {d.index: GpuState(d, identity=(d.uuid, tuple(d.mig))) for d in devices}
        log.info("nvml_started", driver=driver, gpus=len(devices), links=[d.links for d in devices])
        self.health.sync_ok(objects=len(devices))
        # Nothing is rendered before the first sample: gangscope_gpu_up must never say 0 for a
        # GPU that was simply not asked yet. ``run`` samples right after this.
        if self.on_inventory:
            self.on_inventory()
        return True

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)

    def stuck(self) -> bool:
        """Whether a driver call is still running (the interpreter would wait for it at exit)."""
        return any(st.inflight is not None and not st.inflight.done() for st in self.gpus.values())

    async def sample_once(self) -> None:
        """One round: every idle GPU sampled in the pool, the round bounded by ``timeout``."""
        assert self.reader is not None
        read_errors = self.rounds % ERROR_SAMPLE_EVERY == 0
        self.rounds += 1
        waiting: dict[asyncio.Future, GpuState] = {}
        for st in self.gpus.values():
            if st.inflight is not None and not st.inflight.done():
                continue  # still stuck in the driver since an earlier round: already reported
            st.inflight = self.executor.submit(self.reader.sample, st.dev, read_errors)
            waiting[asyncio.wrap_future(st.inflight)] = st
        if not waiting:
            return
        done, pending = await asyncio.wait(waiting, timeout=self.timeout)
        identity_changed = False
        for fut in sorted(done, key=lambda f: waiting[f].dev.index):  # first renders in GPU order
            st = waiting[fut]
            if (st.dev.uuid, tuple(st.dev.mig)) != st.identity:
                st.identity = (st.dev.uuid, tuple(st.dev.mig))
                st.prefixes.clear()
                st.fingerprint = None
                identity_changed = True
            exc = fut.exception()
            if exc is not None:  # not an NVMLError (the reader handles those): a bug or a broken binding
                log.error("gpu_sample_crashed", gpu=st.dev.index, error=repr(exc))
                self.health.internal_error()
                self.apply(st, GpuSample(st.dev.index, ok=False, error=repr(exc)))
            else:
                self.apply(st, fut.result())
        for fut in pending:
            st = waiting[fut]
            self.apply(st, GpuSample(st.dev.index, ok=False, error=f"NVML call took longer than {self.timeout}s"))
        self.health.sync_ok(objects=sum(1 for st in self.gpus.values() if st.up))
        if identity_changed and self.on_inventory:
            self.on_inventory()

    def apply(self, st: GpuState, sample: GpuSample) -> None:
        """Fold a sample into the GPU's monotonic totals and re-render its lines."""
        was_up = st.up
        st.up = sample.ok
        st.errors_total += sample.failed_calls + (0 if sample.ok else 1)
        if not sample.ok:
            if was_up or st.last is not None:
                log.warning("gpu_down", gpu=st.dev.index, uuid=st.dev.uuid, error=sample.error)
            st.last = None
            self.render(st)
            return
        if not was_up and self.rounds > 1:
            log.info("gpu_up", gpu=st.dev.index, uuid=st.dev.uuid)
        for key, (raw, modulus) in sample.counters.items():
            counter = st.counters.get(key)
            if counter is None:
                counter = st.counters[key] = MonotonicCounter()
            counter.update(raw, modulus)
        if sample.nvlink_errors is not None:
            for key, raw in sample.nvlink_errors.items():
                counter = st.nvlink_errors.get(key)
                if counter is None:
                    counter = st.nvlink_errors[key] = MonotonicCounter()
                counter.update(raw, 2**64)
        st.last = sample
        self.render(st)

    # ----- rendering ---------------------------------------------------------------------------

    def relabel(self) -> None:
        """The node's topology labels changed: rebuild every prefix and re-render."""
        for st in self.gpus.values():
            st.prefixes.clear()
            st.fingerprint = None
            self.render(st)

    def _prefix(self, st: GpuState, fam: F.Family, *extra: tuple[str, str]) -> str:
        key = (fam.name, *extra)
        prefix = st.prefixes.get(key)
        if prefix is None:
            own = [("gpu", str(st.dev.index))]
            if fam in (F.GPU_UP, F.GPU_ERRORS):
                own.append(("uuid", st.dev.uuid))
            prefix = st.prefixes[key] = F.series_prefix(fam, [*own, *extra, *self.base_labels()])
        return prefix

    def render(self, st: GpuState) -> None:
        """Counters every sample (owner ``("gpu_counters", i)``); everything else (identity, up,
        link state, errors, PCIe link) only when it changed (owner ``("gpu", i)``): after the first
        sample a round re-renders 74 lines per GPU, not 200."""
        self._render_counters(st)
        sample = st.last
        fingerprint = (
            st.up, st.errors_total, st.dev.uuid, tuple(st.dev.mig), self.driver,
            None if sample is None else (tuple(sample.link_up.items()), tuple(sample.version.items()),
                                         sample.pcie_rate, sample.gen, sample.width,
                                         tuple(c.total for c in st.nvlink_errors.values())),
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
            out[F.GPU_INFO] = [F.GPU_INFO.sample(
                [("gpu", gpu), ("uuid", dev.uuid), ("name", dev.name), ("pci_bus_id", dev.pci_bus_id),
                 ("driver_version", self.driver), *base], 1)]
            out[F.MIG_INFO] = [
                F.MIG_INFO.sample([("gpu", gpu), ("uuid", dev.uuid), ("mig_uuid", m), ("gpu_instance", str(gi)), *base], 1)
                for m, gi in dev.mig
            ]
        if sample is not None:
            out[F.NVLINK_UP] = [f"{self._prefix(st, F.NVLINK_UP, ('link', str(l)))}{v}\n" for l, v in sorted(sample.link_up.items())]
            out[F.NVLINK_VERSION] = [f"{self._prefix(st, F.NVLINK_VERSION, ('link', str(l)))}{v}\n" for l, v in sorted(sample.version.items())]
            out[F.NVLINK_ERRORS] = [
                f"{self._prefix(st, F.NVLINK_ERRORS, ('link', str(l)), ('type', t))}{c.total}\n"
                for (l, t), c in sorted(st.nvlink_errors.items())
            ]
            if sample.pcie_rate is not None:
                out[F.PCIE_THROUGHPUT] = [
                    f"{self._prefix(st, F.PCIE_THROUGHPUT, ('direction', d))}{v}\n"
                    for d, v in (("transmit", sample.pcie_rate[0]), ("receive", sample.pcie_rate[1]))
                ]
            out[F.PCIE_GENERATION] = [
                f"{self._prefix(st, F.PCIE_GENERATION, ('kind', k))}{format_value(v)}\n"
                for k, v in (("current", sample.gen[0]), ("max", sample.gen[1])) if v is not None
            ]
            out[F.PCIE_WIDTH] = [
                f"{self._prefix(st, F.PCIE_WIDTH, ('kind', k))}{format_value(v)}\n"
                for k, v in (("current", sample.width[0]), ("max", sample.width[1])) if v is not None
            ]
        self.exposition.set(("gpu", dev.index), out)

    def _render_counters(self, st: GpuState) -> None:
        sample = st.last
        out: dict[F.Family, list[str]] = {}
        if sample is not None:
            for fid, fam in NVLINK_COUNTER_FAMILIES.items():
                out[fam] = [
                    f"{self._prefix(st, fam, ('link', str(link)))}{st.counters[(fid, link)].total * 1024}\n"
                    for link in range(st.dev.links) if (fid, link) in sample.counters
                ]
            for fid, fam in PCIE_COUNTER_FAMILIES.items():
                if (fid, 0) in sample.counters:
                    out[fam] = [f"{self._prefix(st, fam)}{st.counters[(fid, 0)].total}\n"]
        self.exposition.set(("gpu_counters", st.dev.index), out)

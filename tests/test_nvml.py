"""NVML sampling against the simulated library: field parsing, exact counters, failures, bounds."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

import pynvml
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.exposition import Exposition
from exporter.health import SourceHealth
from exporter.node.counters import MonotonicCounter
from exporter.node.fields import fast_period, field_value, pcie_max_rate
from exporter.node.nvml import NvmlReader, NvmlSampler
from exporter.sim.gpus import PROFILES, UINT, ULL
from exporter.sim.nvml import UINT_MAX, SimNvml
from waiting import cancels_are_kept, gate

BASE = (("node", "n1"), ("rack", "r1"), ("host", "n1"))
FI_TX, FI_RX = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
FI_RAW_TX = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX
FI_PCIE_TX, FI_PCIE_RX = pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES
GB = 10**9


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def samples(expo: Exposition) -> dict[tuple[str, frozenset], float]:
    out = {}
    for fam in text_string_to_metric_families(expo.render(False).decode()):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(expo: Exposition, metric: str, **labels: str) -> float | None:
    want = {**dict(BASE), **labels}
    return samples(expo).get((metric, frozenset(want.items())))


def make(sim: SimNvml, timeout: float = 2.0, background: bool = False, **kw) -> tuple[Exposition, SourceHealth, NvmlSampler]:
    """A sampler on ``sim``; without ``background`` the test drives the fast PCIe reads with its own clock."""
    expo = Exposition()
    health = SourceHealth("nvml", expo)
    sampler = NvmlSampler(lambda: sim, expo, health, lambda: BASE, interval=1.0, timeout=timeout,
                          background_pcie=background, clock=getattr(sim, "clock", time.monotonic), **kw)
    return expo, health, sampler


def supported(expo: Exposition, gpu: int = 0) -> dict[str, float]:
    return {dict(k)["family"]: v for (n, k), v in samples(expo).items()
            if n == "gangscope_gpu_field_supported" and dict(k)["gpu"] == str(gpu)}


# ----- field values: real c_nvmlFieldValue_t arrays ------------------------------------------------


def test_field_value_reads_the_union_member_named_by_value_type() -> None:
    arr = (pynvml.c_nvmlFieldValue_t * 3)()
    arr[0].valueType, arr[0].value.uiVal = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, 2**32 - 1
    arr[1].valueType, arr[1].value.ullVal = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, 2**63 + 5
    arr[2].valueType, arr[2].value.dVal = pynvml.NVML_VALUE_TYPE_DOUBLE, 1.5
    assert field_value(arr[0]) == (2**32 - 1, 2**32)
    assert field_value(arr[1]) == (2**63 + 5, 2**64)
    assert field_value(arr[2]) == (1.5, 0)


def test_sim_aggregate_scope_is_the_sum_of_the_links() -> None:
    """nvml.h line 2599: "A scopeId of UINT_MAX returns aggregate value summed up across all links"."""
    clock = Clock()
    sim = SimNvml(gpus=1, clock=clock)
    sim.nvmlInit()
    h = sim.nvmlDeviceGetHandleByIndex(0)
    clock.t += 10
    vals = sim.nvmlDeviceGetFieldValues(h, [(FI_TX, UINT_MAX)] + [(FI_TX, link) for link in range(18)])
    assert abs(vals[0].value.ullVal - sum(v.value.ullVal for v in vals[1:])) <= 18


class RequestLog(SimNvml):
    """Records every field-value request as (GPU index, request)."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.requests: list[tuple[int, list]] = []

    def nvmlDeviceGetFieldValues(self, handle, fieldIds):
        self.requests.append((handle.index, list(fieldIds)))
        return super().nvmlDeviceGetFieldValues(handle, fieldIds)


class Recording(RequestLog):
    """Answers one field with UNKNOWN and one with a bare INVALID_ARGUMENT, like a real partial failure."""

    def nvmlDeviceGetFieldValues(self, handle, fieldIds):
        values = super().nvmlDeviceGetFieldValues(handle, fieldIds)
        for v in values:
            if (v.fieldId, v.scopeId) == (FI_TX, 3):
                v.nvmlReturn = pynvml.NVML_ERROR_UNKNOWN
            if (v.fieldId, v.scopeId) == (FI_RAW_TX, 5):
                v.nvmlReturn = pynvml.NVML_ERROR_INVALID_ARGUMENT  # not a known quirk for 140
        return values


async def test_one_call_per_gpu_and_per_field_returns_are_checked() -> None:
    sim = Recording(gpus=1, links=18)
    expo, _, sampler = make(sim, pcie_interval=0)  # PCIe with the sample: one call carries everything
    assert await sampler.start()
    await sampler.sample_once()  # open, probe (one call for every family on every link), sample
    sim.requests.clear()
    await sampler.sample_once()
    assert len(sim.requests) == 1, "all links and fields in one nvmlDeviceGetFieldValues call"
    request = sim.requests[0][1]
    # data, raw and state per link (version and errors only every 10th sample), PCIe once
    assert len(request) == 18 * 5 - 1 + 2
    assert (FI_RAW_TX, 5) not in request, "INVALID_ARGUMENT on 140 stopped it being asked for"
    assert (FI_TX, 3) in request, "a failed (not unsupported) field is asked for again"
    assert all(not (isinstance(f, tuple) and f[0] in (202, 204)) for f in request), "138/139 work: no NVLink5 bytes"
    # the bare INVALID_ARGUMENT counts once; UNKNOWN on (138, 3) every time it is asked (probe + 2 samples)
    assert value(expo, "gangscope_gpu_errors_total", gpu="0", uuid=sim.gpus[0].uuid) == 1 + 3
    assert value(expo, "gangscope_nvlink_transmit_bytes_total", gpu="0", link="3") is None
    assert value(expo, "gangscope_nvlink_transmit_bytes_total", gpu="0", link="4") is not None
    sampler.close()


# ----- counters ---------------------------------------------------------------------------------


def test_monotonic_counter_wrap_and_reset() -> None:
    c = MonotonicCounter()
    assert c.update(2**32 - 100, 2**32) == 2**32 - 100  # starts at the device's own value
    assert c.update(50, 2**32) == 2**32 + 50  # wrapped: +150
    assert c.update(70, 2**32) == 2**32 + 70
    assert c.update(10, 2**64) == 2**32 + 80  # 64-bit counter went down: a reset, counted from 0
    assert c.update(10, 0) == 2**32 + 80


def test_bounded_counter_takes_any_wrap_within_the_bound_and_reads_the_rest_as_reset() -> None:
    c = MonotonicCounter()
    c.update(4_000_000_000, 2**32, 0)
    # 3.2 GB moved (64 GB/s x 50 ms): more than half the range, still an exact wrap
    assert c.update((4_000_000_000 + 3_200_000_000) % 2**32, 2**32, 3.4e9) == 7_200_000_000
    # forward distance 4.0 GB exceeds what 3.4 GB of bound allows: the device was reset
    total = c.total
    assert c.update(c.last - 294_967_296, 2**32, 3.4e9) == total + c.last
    # a step beyond the bound that no reset explains (the counter is above its last value, or a
    # reset would have counted past the bound): the driver refreshed in a burst, taken forward
    total = c.total
    assert c.update(c.last + 70_000_000, 2**32, 1e6) == total + 70_000_000
    burst = MonotonicCounter()  # the same across a wrap: 60 MB after it cannot be a reset within a 1 MB bound
    burst.update(2**32 - 10_000_000, 2**32, 0)
    assert burst.update(60_000_000, 2**32, 1e6) == 2**32 + 60_000_000
    assert burst.update(500_000, 2**32, 1e6) == 2**32 + 60_000_000 + 500_000  # below the last and within the bound: a reset
    # reads further apart than one wrap: as many wraps as the recent rate predicts, counted as a gap
    before = c.total
    c.update((c.last + 1000) % 2**32, 2**32, 5e9)
    assert (c.total - before, c.gaps) == (1000, 1)
    c.update((c.last + 1000) % 2**32, 2**32, 9e9, expected=4.3e9)
    assert (c.total - before, c.gaps) == (2000 + 2**32, 2)
    c.update((c.last + 1000) % 2**32, 2**32, 5e9, expected=40e9)  # never more wraps than the bound allows
    assert (c.total - before, c.gaps) == (3000 + 2 * 2**32, 3)
    before = c.total
    c.resume()  # seen lost and back: lower than before, so it was reset and counts from zero
    assert c.update(123, 2**32, 1e9) == before + 123
    assert c.gaps == 4  # a 32-bit counter may have wrapped while the GPU was away: unknowable


def test_fast_period_is_derived_from_the_link() -> None:
    assert pcie_max_rate(5, 16) == 64e9
    assert abs(fast_period(2**32, pcie_max_rate(5, 16)) - 0.0503) < 0.001  # Gen5 x16: every 50 ms
    assert abs(fast_period(2**32, pcie_max_rate(4, 16)) - 0.1007) < 0.001  # Gen4 x16: every 100 ms
    assert pcie_max_rate(None, 16) == pcie_max_rate(6, 16)  # unknown: the fastest link there is


async def test_nvlink_kib_become_exact_byte_counters() -> None:
    clock = Clock()
    sim = SimNvml(clock=clock)
    expo, _, sampler = make(sim)
    assert await sampler.start()
    await sampler.sample_once()
    first = value(expo, "gangscope_nvlink_transmit_bytes_total", gpu="0", link="0")
    assert first == 0
    clock.t += 1.0
    await sampler.sample_once()
    kib = sim.link_counter(sim.gpus[0], 0, FI_TX)
    assert kib > 0
    assert value(expo, "gangscope_nvlink_transmit_bytes_total", gpu="0", link="0") == kib * 1024
    assert value(expo, "gangscope_nvlink_link_up", gpu="0", link="17") == 1
    assert value(expo, "gangscope_nvlink_version", gpu="0", link="0") == 6
    assert value(expo, "gangscope_gpu_up", gpu="0", uuid=sim.gpus[0].uuid) == 1
    names = [n for (n, _) in samples(expo)]
    assert names.count("gangscope_nvlink_receive_bytes_total") == 8 * 18
    assert names.count("gangscope_nvlink_errors_total") == 8 * 18 * 3  # fields 161-163 per link
    sampler.close()


async def run_pcie(rate: float, value_type: int, seconds: int, reset_at: int | None = None) -> tuple[float, float, int]:
    """Drive one GPU's PCIe at ``rate`` for ``seconds`` of simulated time, reading it as the agent
    does (fast reads at the period the reader chose, a sample each second), with a GPU reset
    (lost, back with zeroed counters) at ``reset_at``. Returns (exported increase, bytes the
    simulation moved, gaps)."""
    clock = Clock()
    sim = SimNvml(gpus=1, clock=clock)
    sim.set_pcie_rate(0, rate, value_type)
    # 32-bit: wraps in the first read period; 64-bit: above 2**32 from the start, so proven 64-bit
    sim.gpus[0].pcie_offset = 2**32 - 123_456_789 if value_type == UINT else 2**40
    expo, _, sampler = make(sim)
    assert await sampler.start()
    await sampler.sample_once()
    dev = sampler.gpus[0].dev
    period = dev.pcie_period
    assert (period is not None) == (value_type == UINT), "fast reads only for a wrapping counter"
    start = value(expo, "gangscope_pcie_transmit_bytes_total", gpu="0")
    moved, step = 0.0, period or 1.0
    t = 0.0
    while t < seconds - 1e-9:
        clock.t += step
        t += step
        moved += rate * step
        sampler.read_fast_now()
        if reset_at is not None and abs(t - reset_at) < step / 2:
            await sampler.sample_once()  # the last read before the failure (what moves after it is unobservable)
            sim.lose(0)
            await sampler.sample_once()
            assert value(expo, "gangscope_pcie_transmit_bytes_total", gpu="0") is None
            clock.t += 5  # the reset takes 5 s; nothing moves meanwhile
            sim.recover(0)
        if int(t + 1e-9) != int(t - step + 1e-9):  # a sample each second
            await sampler.sample_once()
    await sampler.sample_once()
    exported = value(expo, "gangscope_pcie_transmit_bytes_total", gpu="0") - start
    gaps = value(expo, "gangscope_pcie_read_gaps_total", gpu="0")
    sampler.close()
    return exported, moved, int(gaps)


@pytest.mark.parametrize("value_type", [UINT, ULL], ids=["32-bit", "64-bit"])
@pytest.mark.parametrize("gbps", [1, 9, 40, 64])
async def test_pcie_bytes_are_exact_at_line_rate_across_wraps_and_resets(gbps: int, value_type: int) -> None:
    exported, moved, gaps = await run_pcie(gbps * GB, value_type, seconds=30, reset_at=12)
    assert moved > 0 and abs(exported - moved) <= 0.01 * moved, (exported, moved)
    if value_type == UINT:
        assert moved / 2**32 > 5, "the test crosses several wraps"
    # A 32-bit counter of a GPU that was lost and came back may have wrapped meanwhile: the one
    # read after it is a gap (counted, and exact here: the value below the last says "reset").
    assert gaps == (2 if value_type == UINT else 0)  # one per direction


async def test_pcie_read_only_with_the_sample_is_a_counted_lower_bound() -> None:
    """--pcie-interval 0 on a 32-bit counter at 40 GB/s: each 1 s sample misses wraps, and says so."""
    clock = Clock()
    sim = SimNvml(gpus=1, clock=clock)
    sim.set_pcie_rate(0, 40 * GB, UINT)
    expo, _, sampler = make(sim, pcie_interval=0)
    assert await sampler.start()
    await sampler.sample_once()
    assert sampler.gpus[0].dev.pcie_period is None
    for _ in range(5):
        clock.t += 1
        await sampler.sample_once()
    assert value(expo, "gangscope_pcie_read_gaps_total", gpu="0") == 5 * 2  # both directions
    # how many wraps each gap holds is estimated from the 20 ms throughput (steady here: exact)
    assert value(expo, "gangscope_pcie_transmit_bytes_total", gpu="0") == 5 * 40 * GB
    sampler.close()


async def test_fast_reads_run_in_the_background_in_real_time() -> None:
    """The fast reader reads 32-bit counters between samples on its own: 9 GB/s wraps every 0.48 s."""
    sim = SimNvml(gpus=2)
    for i in range(2):
        sim.set_pcie_rate(i, 9 * GB, UINT)
    expo, _, sampler = make(sim, background=True)
    sampler.interval = 0.5
    assert await sampler.start()
    await sampler.sample_once()
    t0 = time.monotonic()
    start = value(expo, "gangscope_pcie_transmit_bytes_total", gpu="1")
    for _ in range(6):
        await asyncio.sleep(0.5)
        await sampler.sample_once()
    elapsed_rate = 9 * GB * (time.monotonic() - t0)
    exported = value(expo, "gangscope_pcie_transmit_bytes_total", gpu="1") - start
    # the exported total lags the truth by at most one read period at the end
    assert abs(exported - elapsed_rate) <= 0.05 * elapsed_rate + 9 * GB * 0.2, (exported, elapsed_rate)
    assert value(expo, "gangscope_pcie_read_interval_seconds", gpu="1") == pytest.approx(0.0503, abs=0.001)
    assert sampler.fast_ticks >= 10
    # A reader delayed past one wrap period on this shared machine would be a gap: counted, and the
    # recent rate still puts the right number of wraps in it.
    sampler.close()


async def test_a_gpu_hung_in_a_fast_read_leaves_the_others_read() -> None:
    """GPU 2 wedges while the fast reader is on it: the reader is replaced without it, the other
    GPUs' counters stay exact (a gap at most, bridged and counted), GPU 2 is reported down by its
    own deadline, and it is read fast again once it answers."""
    sim = SimNvml(gpus=4, hang_seconds=30)
    for i in range(4):
        sim.set_pcie_rate(i, 9 * GB, UINT)
    expo, _, sampler = make(sim, timeout=0.3, background=True)
    assert await sampler.start()
    await sampler.sample_once()
    await asyncio.sleep(0.3)
    start = value(expo, "gangscope_pcie_transmit_bytes_total", gpu="1")
    t0 = time.monotonic()
    sim.hang(2)
    for _ in range(5):
        await asyncio.sleep(0.4)
        await sampler.sample_once()
    assert sampler.gpus[2].fast_excluded
    assert value(expo, "gangscope_gpu_up", gpu="2", uuid=sim.gpus[2].uuid) == 0
    assert value(expo, "gangscope_gpu_up", gpu="1", uuid=sim.gpus[1].uuid) == 1
    moved = 9 * GB * (time.monotonic() - t0)
    exported = value(expo, "gangscope_pcie_transmit_bytes_total", gpu="1") - start
    # reads missed while the reader was stuck (and any this loaded machine delays) are gaps,
    # bridged with the recent rate: the total stays right
    assert abs(exported - moved) <= 0.05 * moved + 9 * GB * 0.5, (exported, moved)
    ticks = sampler.fast_ticks
    await asyncio.sleep(0.3)
    assert sampler.fast_ticks > ticks, "the replacement reader keeps reading"
    sim.release()
    await asyncio.sleep(0.2)
    await sampler.sample_once()
    await sampler.sample_once()
    assert not sampler.gpus[2].fast_excluded
    assert value(expo, "gangscope_gpu_up", gpu="2", uuid=sim.gpus[2].uuid) == 1
    sampler.close()


async def test_counter_reset_after_gpu_reset_keeps_counting_up() -> None:
    clock = Clock()
    sim = SimNvml(gpus=2, clock=clock)
    expo, _, sampler = make(sim)
    assert await sampler.start()
    clock.t += 5
    await sampler.sample_once()
    before = value(expo, "gangscope_nvlink_receive_bytes_total", gpu="1", link="2")
    sim.lose(1)
    await sampler.sample_once()
    assert value(expo, "gangscope_nvlink_receive_bytes_total", gpu="1", link="2") is None  # no stale series
    sim.recover(1)  # counters restart at zero
    clock.t += 1
    await sampler.sample_once()
    after = value(expo, "gangscope_nvlink_receive_bytes_total", gpu="1", link="2")
    assert after == before + sim.link_counter(sim.gpus[1], 2, FI_RX) * 1024
    sampler.close()


# ----- every generation ---------------------------------------------------------------------------

EXPECTED_SUPPORT = {  # profile -> families answered (1) and reported unsupported (0)
    "a100": {"nvlink_throughput": 1, "nvlink_raw_throughput": 1, "nvlink5_bytes": 0, "nvlink_state": 1, "nvlink_version": 1,
             "nvlink_errors": 1, "nvlink5_errors": 0, "pcie_bytes": 0, "pcie_throughput": 1, "pcie_link": 1, "fabric": 0,
             "platform": 0},
    "h100": {"nvlink_throughput": 1, "nvlink_raw_throughput": 1, "nvlink5_bytes": 0, "nvlink_state": 1, "nvlink_version": 1,
             "nvlink_errors": 1, "nvlink5_errors": 0, "pcie_bytes": 1, "pcie_link": 1, "fabric": 1, "platform": 0},
    "b200": {"nvlink_throughput": 1, "nvlink_raw_throughput": 1, "nvlink5_bytes": 1, "nvlink_state": 1, "nvlink_version": 1,
             "nvlink_errors": 0, "nvlink5_errors": 1, "pcie_bytes": 1, "pcie_link": 1, "fabric": 1, "platform": 0},
    "gb200": {"nvlink_throughput": 0, "nvlink_raw_throughput": 0, "nvlink5_bytes": 1, "nvlink_state": 1, "nvlink_version": 1,
              "nvlink_errors": 0, "nvlink5_errors": 1, "pcie_bytes": 1, "pcie_link": 1, "fabric": 1, "platform": 1},
}
EXPECTED_SUPPORT["h200"] = EXPECTED_SUPPORT["h100"]


@pytest.mark.parametrize("profile", sorted(PROFILES))
async def test_every_generation_is_read_from_what_it_answers(profile: str) -> None:
    """Each profile's return codes and value types decide the sources; unsupported families are
    reported per device, never as errors, and nothing an unsupported field would give is exported."""
    clock = Clock()
    sim = SimNvml(["degraded"], profile=profile, clock=clock)
    expo, _, sampler = make(sim)
    assert await sampler.start()
    await sampler.sample_once()
    clock.t += 20
    for _ in range(SLOW := 10):
        sampler.read_fast_now()
        await sampler.sample_once()
    del SLOW
    p = sim.profile
    assert supported(expo) == EXPECTED_SUPPORT[profile]
    names = {n for n, _ in samples(expo)}
    assert value(expo, "gangscope_gpu_errors_total", gpu="0", uuid=sim.gpus[0].uuid) == 0
    # NVLink bytes: 202/204 (bytes) where supported, else 138/139 (KiB); exactly what the counters say
    fid = pynvml.NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES if EXPECTED_SUPPORT[profile]["nvlink5_bytes"] else FI_TX
    unit = 1024 if fid == FI_TX else 1
    assert value(expo, "gangscope_nvlink_transmit_bytes_total", gpu="1", link="2") == sim.link_counter(sim.gpus[1], 2, fid) * unit
    assert ("gangscope_nvlink_raw_transmit_bytes_total" in names) == bool(EXPECTED_SUPPORT[profile]["nvlink_raw_throughput"])
    links = [k for (n, k) in samples(expo) if n == "gangscope_nvlink_link_up" and dict(k)["gpu"] == "0"]
    assert len(links) == p.links
    for link in p.sleeping_links:  # state 2 = sleep: an idle, trained link
        assert value(expo, "gangscope_nvlink_link_up", gpu="0", link=str(link)) == 1
    assert value(expo, "gangscope_nvlink_link_up", gpu="3", link="7") == 0
    assert value(expo, "gangscope_nvlink_version", gpu="0", link="0") == p.nvlink_version
    # errors on the degraded link, from whichever family the generation has
    types = {dict(k)["type"] for (n, k) in samples(expo) if n == "gangscope_nvlink_errors_total"}
    if EXPECTED_SUPPORT[profile]["nvlink_errors"]:
        assert types == {"replay", "recovery", "crc"}
        assert value(expo, "gangscope_nvlink_errors_total", gpu="3", link="7", type="replay") == 40
    else:
        assert types == {"link_recovery_successful", "link_recovery_failed", "link_recovery", "effective", "symbol"}
        assert value(expo, "gangscope_nvlink_errors_total", gpu="3", link="7", type="symbol") == 40
    # PCIe: counters read at a period from the link where 32-bit, with the sample where 64-bit
    if p.pcie_value_type == UINT:
        assert value(expo, "gangscope_pcie_read_interval_seconds", gpu="0") == pytest.approx(
            0.75 * 2**32 / pcie_max_rate(p.pcie_gen, p.pcie_width))
    else:
        assert "gangscope_pcie_read_interval_seconds" not in names
    assert value(expo, "gangscope_pcie_transmit_bytes_total", gpu="0") > 0
    assert ("gangscope_pcie_throughput_bytes_per_second" in names) == (p.pcie_value_type is None)
    assert ("gangscope_gpu_platform_info" in names) == (p.platform is None)
    sampler.close()


class CountingCalls(SimNvml):
    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.names: list[str] = []

    def __getattribute__(self, name: str):
        if name.startswith("nvmlDevice"):
            object.__getattribute__(self, "names").append(name)
        return object.__getattribute__(self, name)


async def test_blackwell_never_calls_what_it_removed() -> None:
    """Fields 161-163 and nvmlDeviceGetNvLinkErrorCounter are gone on Blackwell (nvml.h 2645-2668,
    NVML change log r570): after the probe the agent asks only for 213-221, in the batch."""
    sim = CountingCalls(profile="b200")
    _, _, sampler = make(sim)
    assert await sampler.start()
    for _ in range(11):
        await sampler.sample_once()
    assert "nvmlDeviceGetNvLinkErrorCounter" not in sim.names
    # it has the byte counters: the 20 ms rate is asked only to estimate a gap (this test reads
    # no counters between samples), at most once a second per GPU and direction
    assert {st.dev.pcie_mode for st in sampler.gpus.values()} == {"fast"}
    assert sim.names.count("nvmlDeviceGetPcieThroughput") <= 8 * 2
    sampler.close()


async def test_legacy_error_api_is_only_the_fallback() -> None:
    """A GPU without fields 161-163 or 213-221 but with nvmlDeviceGetNvLinkErrorCounter: read through the call."""
    clock = Clock()
    sim = CountingCalls(["degraded"], clock=clock)
    for g in sim.gpus:
        g.unsupported |= dict.fromkeys((161, 162, 163), pynvml.NVML_ERROR_NOT_SUPPORTED)
    expo, _, sampler = make(sim)
    assert await sampler.start()
    clock.t += 20
    await sampler.sample_once()
    assert "nvmlDeviceGetNvLinkErrorCounter" in sim.names
    assert value(expo, "gangscope_nvlink_errors_total", gpu="3", link="7", type="replay") == 40
    assert value(expo, "gangscope_nvlink_errors_total", gpu="3", link="7", type="crc_flit") == 2
    assert supported(expo, 3)["nvlink_error_counter_api"] == 1
    sampler.close()


async def test_fabric_and_platform_info_of_an_nvl72_gpu() -> None:
    sim = SimNvml(["fabric-degraded"], profile="gb200")
    expo, _, sampler = make(sim)
    assert await sampler.start()
    await sampler.sample_once()
    c = sim.chassis
    assert value(expo, "gangscope_gpu_fabric_info", gpu="2", uuid=sim.gpus[2].uuid, cluster_uuid=c.cluster_uuid,
                 clique_id=str(c.clique_id), state="completed") == 1
    assert value(expo, "gangscope_gpu_platform_info", gpu="2", chassis_serial=c.serial, slot=str(c.slot),
                 tray=str(c.tray), host_id=str(c.host_id)) == 1
    checks = {dict(k)["check"]: v for (n, k), v in samples(expo).items()
              if n == "gangscope_gpu_fabric_health" and dict(k)["gpu"] == "1"}
    assert checks == {"degraded_bandwidth": 1, "route_recovery": 0, "route_unhealthy": 0, "access_timeout": 0,
                      "incorrect_configuration": 0, "unhealthy": 1}
    assert value(expo, "gangscope_gpu_fabric_health", gpu="2", check="degraded_bandwidth") == 0
    sampler.close()


async def test_fabric_info_falls_back_to_the_v2_struct_on_an_older_driver() -> None:
    sim = SimNvml(profile="gb200")
    sim.profile = replace(sim.profile, fabric_v3=False)
    expo, _, sampler = make(sim)
    assert await sampler.start()
    await sampler.sample_once()
    assert value(expo, "gangscope_gpu_fabric_info", gpu="0", uuid=sim.gpus[0].uuid, cluster_uuid=sim.chassis.cluster_uuid,
                 clique_id="1", state="completed") == 1
    assert value(expo, "gangscope_gpu_fabric_health", gpu="0", check="unhealthy") is None  # no summary in v2
    assert value(expo, "gangscope_gpu_fabric_health", gpu="0", check="route_unhealthy") == 0
    assert not sampler.gpus[0].dev.fabric_v3
    sampler.close()


async def test_hgx_fabric_without_a_multi_node_domain_has_no_clique() -> None:
    """H100/B200 HGX register with the fabric manager but belong to no multi-node cluster: go-nvlib's
    IsFabricAttached (a zero cluster UUID) and so no clique, as GPU feature discovery does."""
    sim = SimNvml(profile="h100", gpus=1)
    expo, _, sampler = make(sim)
    assert await sampler.start()
    await sampler.sample_once()
    assert value(expo, "gangscope_gpu_fabric_info", gpu="0", uuid=sim.gpus[0].uuid, cluster_uuid="", clique_id="",
                 state="completed") == 1
    sampler.close()


# ----- failures ---------------------------------------------------------------------------------


async def test_lost_gpu_is_reported_and_the_others_keep_reporting() -> None:
    clock = Clock()
    sim = SimNvml(clock=clock)
    expo, health, sampler = make(sim)
    assert await sampler.start()
    await sampler.sample_once()
    sim.lose(2)
    clock.t += 1
    await sampler.sample_once()
    await sampler.sample_once()
    uuid2 = sim.gpus[2].uuid
    assert value(expo, "gangscope_gpu_up", gpu="2", uuid=uuid2) == 0
    assert value(expo, "gangscope_gpu_errors_total", gpu="2", uuid=uuid2) == 2
    assert value(expo, "gangscope_gpu_info", gpu="2", uuid=uuid2, name="NVIDIA H100 80GB HBM3",
                 pci_bus_id=sim.gpus[2].bus_id, driver_version="570.124.06") == 1
    assert value(expo, "gangscope_nvlink_transmit_bytes_total", gpu="2", link="0") is None
    for gpu in (0, 1, 3, 7):
        assert value(expo, "gangscope_gpu_up", gpu=str(gpu), uuid=sim.gpus[gpu].uuid) == 1
        assert value(expo, "gangscope_nvlink_transmit_bytes_total", gpu=str(gpu), link="0") > 0
    assert health.up and health.objects == 7
    sampler.close()


async def test_every_warning_of_a_lost_gpu_names_its_node() -> None:
    """Many agents share the demo's process (and the tests'): a warning without its node is useless."""
    from structlog.testing import capture_logs

    clock = Clock()
    sim = SimNvml(clock=clock)
    _, _, sampler = make(sim, node="gpu-b1-r1-n3")
    assert await sampler.start()
    await sampler.sample_once()
    sim.lose(2)
    clock.t += 1
    with capture_logs() as logs:
        await sampler.sample_once()
    down = [e for e in logs if e["event"] == "gpu_down"]
    assert [(e["node"], e["gpu"]) for e in down] == [("gpu-b1-r1-n3", 2)]
    assert all(e.get("node") == "gpu-b1-r1-n3" for e in logs if e["log_level"] in ("warning", "error"))
    sampler.close()


async def test_no_nvml_library_means_source_down_not_a_crash() -> None:
    sim = SimNvml(["nodriver"])
    expo, health, sampler = make(sim)
    assert not await sampler.start()
    s = samples(expo)
    assert s[("gangscope_source_up", frozenset({("source", "nvml")}))] == 0
    assert s[("gangscope_source_errors_total", frozenset({("source", "nvml")}))] == 1
    assert not [n for (n, _) in s if n.startswith("gangscope_gpu_")]
    assert "library" in health.detail.lower()


async def test_real_pynvml_without_a_driver_is_library_not_found() -> None:
    """The real binding on this machine (no NVIDIA driver): the agent's path for ``--nvml real``."""
    expo, health, sampler = make(None)  # type: ignore[arg-type]
    sampler._lib_factory = lambda: pynvml
    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("an NVIDIA driver is present")
    except pynvml.NVMLError:
        pass
    assert not await sampler.start()
    assert not health.up and health.errors == 1


async def test_hung_gpus_cost_their_own_threads_only() -> None:
    """Half the GPUs wedge in the driver: the round ends at the deadline, the other half is
    reported up with fresh counters, and a stuck GPU is not asked again until its call returns."""
    clock = Clock()
    sim = SimNvml(hang_seconds=30, clock=clock)
    expo, _, sampler = make(sim, timeout=0.3)
    assert await sampler.start()
    await sampler.sample_once()
    for i in range(4):
        sim.hang(i)
    clock.t += 1
    t0 = time.monotonic()
    await sampler.sample_once()
    assert time.monotonic() - t0 < 1.5, "the round is bounded by --nvml-timeout"
    for i in range(8):
        assert value(expo, "gangscope_gpu_up", gpu=str(i), uuid=sim.gpus[i].uuid) == (0 if i < 4 else 1)
    fresh = sim.link_counter(sim.gpus[5], 0, FI_TX) * 1024
    assert value(expo, "gangscope_nvlink_transmit_bytes_total", gpu="5", link="0") == fresh
    stuck = sampler.gpus[0].inflight
    await sampler.sample_once()
    assert sampler.gpus[0].inflight is stuck, "a GPU stuck in the driver is not sampled again"
    assert sampler.stuck()
    sim.release()
    await asyncio.sleep(0.1)
    await sampler.sample_once()
    assert all(value(expo, "gangscope_gpu_up", gpu=str(i), uuid=sim.gpus[i].uuid) == 1 for i in range(8))
    sampler.close()


class SlowCalls(SimNvml):
    """Every call on GPU 2 takes ``delay`` seconds: each under the deadline, all of them together over it."""

    delay = 0.12

    def _gpu(self, handle, cost="call"):
        gpu = super()._gpu(handle, cost)
        if gpu.index == 2:
            time.sleep(self.delay)
        return gpu


async def test_the_deadline_runs_from_each_calls_start() -> None:
    sim = SlowCalls(gpus=4)
    expo, _, sampler = make(sim, timeout=0.3)
    assert await sampler.start()
    t0 = time.monotonic()
    await sampler.sample_once()  # GPU 2: open + probe + sample, a dozen calls of 0.12 s
    assert time.monotonic() - t0 > 0.6, "the slow GPU's sample took longer than one deadline"
    assert value(expo, "gangscope_gpu_up", gpu="2", uuid=sim.gpus[2].uuid) == 1
    assert value(expo, "gangscope_gpu_errors_total", gpu="2", uuid=sim.gpus[2].uuid) == 0
    SlowCalls.delay = 0.5  # one call now outlasts the deadline
    try:
        await sampler.sample_once()
        assert value(expo, "gangscope_gpu_up", gpu="2", uuid=sim.gpus[2].uuid) == 0
        assert value(expo, "gangscope_gpu_up", gpu="1", uuid=sim.gpus[1].uuid) == 1
    finally:
        SlowCalls.delay = 0.12
        await asyncio.sleep(1.0)
        sampler.close()


async def test_unsupported_fields_fall_back_and_are_remembered_per_gpu() -> None:
    sim = RequestLog(["unsupported"])
    expo, _, sampler = make(sim)
    assert await sampler.start()
    await sampler.sample_once()
    sim.requests.clear()
    await sampler.sample_once()
    # GPUs 0-3: no PCIe byte counters -> the 20 ms throughput rate, integrated; GPUs 4-7: counters.
    assert supported(expo, 0)["pcie_bytes"] == 0 and supported(expo, 5)["pcie_bytes"] == 1
    assert value(expo, "gangscope_pcie_throughput_bytes_per_second", gpu="0", direction="transmit") > 0
    assert value(expo, "gangscope_pcie_throughput_bytes_per_second", gpu="5", direction="transmit") is None
    assert value(expo, "gangscope_pcie_transmit_bytes_total", gpu="0") is not None
    # GPU 1 without raw fields, GPU 2 without any error counter; nobody counts these as errors.
    assert supported(expo, 1)["nvlink_raw_throughput"] == 0 and supported(expo, 0)["nvlink_raw_throughput"] == 1
    assert value(expo, "gangscope_nvlink_raw_transmit_bytes_total", gpu="1", link="0") is None
    assert supported(expo, 2)["nvlink_errors"] == 0 and supported(expo, 2)["nvlink_error_counter_api"] == 0
    assert value(expo, "gangscope_nvlink_errors_total", gpu="2", link="0", type="replay") is None
    assert value(expo, "gangscope_gpu_errors_total", gpu="1", uuid=sim.gpus[1].uuid) == 0
    asked = {gpu: {f[0] for f in r} for gpu, r in sim.requests}
    assert 140 not in asked[1], "GPU 1 is not asked for raw fields again"
    assert 140 in asked[0], "the other GPUs still are"
    sampler.close()


async def test_invalid_argument_quirk_counts_as_unsupported_without_errors() -> None:
    """A100 answers INVALID_ARGUMENT to the NVLink5 fields (Datadog's older-architecture quirk)."""
    sim = SimNvml(profile="a100", gpus=1)
    expo, _, sampler = make(sim)
    assert await sampler.start()
    await sampler.sample_once()
    await sampler.sample_once()
    assert supported(expo)["nvlink5_errors"] == 0 and supported(expo)["nvlink5_bytes"] == 0
    assert value(expo, "gangscope_gpu_errors_total", gpu="0", uuid=sim.gpus[0].uuid) == 0
    sampler.close()


async def test_degraded_link_and_pcie_and_mig_inventory() -> None:
    clock = Clock()
    sim = SimNvml(["degraded", "mig"], clock=clock)
    expo, _, sampler = make(sim)
    assert await sampler.start()
    clock.t += 20
    await sampler.sample_once()
    assert value(expo, "gangscope_nvlink_link_up", gpu="3", link="7") == 0
    assert value(expo, "gangscope_nvlink_link_up", gpu="3", link="6") == 1
    assert value(expo, "gangscope_nvlink_errors_total", gpu="3", link="7", type="replay") == 40
    assert value(expo, "gangscope_pcie_link_generation", gpu="5", kind="current") == 3  # PCIe down-trained
    assert value(expo, "gangscope_pcie_link_width", gpu="5", kind="current") == 8
    assert value(expo, "gangscope_pcie_link_width", gpu="5", kind="max") == 16
    inv = sampler.inventory()
    mig = sim.gpus[0].mig[1]
    assert inv[mig] == (0, sim.gpus[0].uuid)
    assert value(expo, "gangscope_gpu_mig_device_info", gpu="0", uuid=sim.gpus[0].uuid, mig_uuid=mig, gpu_instance="2") == 1
    sampler.close()


@pytest.mark.parametrize("profile", sorted(PROFILES))
async def test_exposition_passes_promtool_and_both_parsers(profile: str) -> None:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse

    sim = SimNvml(["degraded", "unsupported", "mig", "fabric-degraded"], profile=profile)
    expo, _, sampler = make(sim)
    assert await sampler.start()
    await sampler.sample_once()
    sim.lose(2)
    await sampler.sample_once()
    text = expo.render(False)
    assert len(list(text_string_to_metric_families(text.decode()))) > 10
    assert len(list(om_parse(expo.render(True).decode()))) > 10
    proc = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sampler.close()


class FlakyPcie(SimNvml):
    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle):
        if handle.index == 1:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
        return super().nvmlDeviceGetCurrPcieLinkGeneration(handle)

    def nvmlDeviceGetMigMode(self, handle):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)


async def test_a_failing_auxiliary_call_is_counted_but_the_gpu_stays_up() -> None:
    sim = FlakyPcie(gpus=2)
    expo, _, sampler = make(sim)
    assert await sampler.start()
    await sampler.sample_once()  # MIG enumeration failing does not hide the GPUs
    uuid1 = sim.gpus[1].uuid
    assert value(expo, "gangscope_gpu_up", gpu="1", uuid=uuid1) == 1
    assert value(expo, "gangscope_gpu_errors_total", gpu="1", uuid=uuid1) == 1
    assert value(expo, "gangscope_pcie_link_generation", gpu="1", kind="current") is None
    assert value(expo, "gangscope_pcie_link_generation", gpu="1", kind="max") == 5
    assert value(expo, "gangscope_gpu_errors_total", gpu="0", uuid=sim.gpus[0].uuid) == 0
    sampler.close()


def test_reader_probe_keeps_transient_failures_retryable() -> None:
    """A field that fails with UNKNOWN during the probe is neither supported nor unsupported: asked again."""
    sim = Recording(gpus=1)
    reader = NvmlReader(sim)
    sim.nvmlInit()
    from exporter.node.nvml import GpuDevice

    dev = GpuDevice(0)
    out = reader.sample(dev, slow=False)
    assert out.ok and (FI_TX, 3) not in dev.unsupported and (FI_RAW_TX, 5) in dev.unsupported


def test_the_flag_lists_every_profile() -> None:
    from exporter.node.main import SIM_PROFILES

    assert SIM_PROFILES == tuple(PROFILES)


async def test_a_stop_as_nvml_init_returns_stops_the_sampler() -> None:
    """The sampler cancelled just as ``nvmlInit`` returned (an agent stopped as its NVML came up)
    stops. Python 3.11's ``asyncio.wait_for`` returned the call's result there and dropped the
    cancellation, and the agent then waited for a sampler that never stopped."""

    def start() -> tuple[Awaitable[None], Callable[[], None], Callable[[], None]]:
        sim = SimNvml()
        opened = gate(sim, "nvmlInit")
        sampler = make(sim)[2]
        return sampler.run(), opened.set, sampler.close

    await cancels_are_kept(start)

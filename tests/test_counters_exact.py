"""Counters that stay exact, or say that they are not: one driver behaviour per test, against the
simulator's exact truth (rate x time on its clock, which the sampler reads its intervals from).
"""

from __future__ import annotations

import pynvml
import pytest

from exporter.sim.gpus import UINT, ULL
from exporter.sim.nvml import SimNvml
from test_nvml import GB, Clock, make, value


async def drive(sim: SimNvml, clock: Clock, sampler, seconds: float, step: float | None = None, between=None) -> None:
    """``seconds`` of simulated time: fast reads at the reader's period (or ``step``), a sample each second."""
    dev = sampler.gpus[0].dev
    t = 0.0
    while t < seconds - 1e-9:
        dt = step or dev.pcie_period or 1.0
        clock.t += dt
        t += dt
        sampler.read_fast_now()
        if between is not None:
            between(t)
        if int(t + 1e-9) != int(t - dt + 1e-9):
            await sampler.sample_once()
    await sampler.sample_once()


def tx(expo) -> float:
    return value(expo, "gangscope_pcie_transmit_bytes_total", gpu="0")


def truth(sim: SimNvml) -> int:
    """Bytes GPU 0 transmitted since its counters' origin (before any wrap)."""
    return sim.pcie_bytes(sim.gpus[0], pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES) - sim.gpus[0].pcie_offset


def gaps(expo) -> float:
    return value(expo, "gangscope_pcie_read_gaps_total", gpu="0")


async def test_ntp_steps_of_the_wall_clock_change_no_byte() -> None:
    """NVML stamps values with wall-clock time; NTP steps it back 1 s, then forward 30 s. The
    intervals come from the monotonic clock read around each call: the total is rate x time."""
    clock = Clock()
    sim = SimNvml(gpus=1, clock=clock)
    sim.set_pcie_rate(0, 40 * GB, UINT)
    expo, _, sampler = make(sim)
    assert await sampler.start()
    await sampler.sample_once()
    start = tx(expo)
    steps = {3.0: -1.0, 6.0: 30.0}

    def ntp(t: float) -> None:
        for at, seconds in list(steps.items()):
            if t >= at:
                sim.step_wall(seconds)
                del steps[at]

    await drive(sim, clock, sampler, 10, between=ntp)
    assert not steps
    assert tx(expo) - start == sim.pcie_bytes(sim.gpus[0], pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES) - (start)
    assert gaps(expo) == 0
    assert sampler.gpus[0].dev.clock_steps == 2 * 2  # seen by the cross-check, one read per direction and step
    sampler.close()


async def test_a_64bit_typed_counter_that_wraps_at_32_bits() -> None:
    """valueType says unsigned long long, the values wrap at 2**32: read as 32-bit (fast reads)
    until a value above 2**32 proves otherwise, so every wrap is counted."""
    clock = Clock()
    sim = SimNvml(gpus=1, clock=clock)
    sim.set_pcie_rate(0, 40 * GB, ULL, wrap=2**32)
    expo, _, sampler = make(sim)
    assert await sampler.start()
    await sampler.sample_once()
    dev = sampler.gpus[0].dev
    assert (dev.pcie_mode, dev.pcie_modulus) == ("fast", 2**32)
    await drive(sim, clock, sampler, 10)
    assert tx(expo) == truth(sim) > 90 * 2**32
    assert gaps(expo) == 0 and dev.pcie_mode == "fast"
    sampler.close()


async def test_a_64bit_counter_proves_itself_and_is_then_read_with_the_sample() -> None:
    clock = Clock()
    sim = SimNvml(gpus=1, clock=clock)
    sim.set_pcie_rate(0, 40 * GB, ULL)
    expo, _, sampler = make(sim)
    assert await sampler.start()
    await sampler.sample_once()
    dev = sampler.gpus[0].dev
    assert dev.pcie_mode == "fast"  # 0 so far: unproven
    await drive(sim, clock, sampler, 3)
    assert (dev.pcie_mode, dev.pcie_modulus, dev.pcie_period) == ("field", 2**64, None)
    await drive(sim, clock, sampler, 5, step=1.0)  # no fast reads any more
    assert tx(expo) == truth(sim) > 300 * GB
    assert gaps(expo) == 0
    sampler.close()


async def test_a_32bit_step_beyond_three_quarters_of_the_range_is_a_gap() -> None:
    """Reads 60 ms apart at 64 GB/s (Gen5 x16 line rate): 3.84 GB per step, within the bound
    (exact) but beyond 3/4 of 2**32: each is counted as a gap."""
    clock = Clock()
    sim = SimNvml(gpus=1, clock=clock)
    sim.set_pcie_rate(0, 64 * GB, UINT)
    expo, _, sampler = make(sim)
    assert await sampler.start()
    await sampler.sample_once()
    await drive(sim, clock, sampler, 0.6, step=0.06)
    assert tx(expo) == truth(sim)
    assert gaps(expo) == 10  # ten reads of transmit (receive moves 80% of it: 3.07 GB, below 3/4)
    sampler.close()


async def test_a_call_stretched_before_the_driver_takes_its_value_stays_exact() -> None:
    """A loaded machine stretches a call before the driver takes its value (the thread descheduled
    in the wrapper): 120 ms here, 1.4 wraps at 48 GiB/s, then the next read 80 ms later. Each read
    is a gap (its window spans the stretch) whose estimate, from the calls' midpoints, is off by
    the time the value was taken from the middle of its call; the next read's estimate is off by
    the same time the other way, so the total is exact again once the reads are."""
    clock = Clock()
    sim = SimNvml(gpus=1, clock=clock)
    sim.set_pcie_rate(0, 48 * 1024**3, UINT)
    sim.gpus[0].pcie_rate = 48 * 1024**3  # the 20 ms throughput the gap is estimated with
    expo, _, sampler = make(sim)
    assert await sampler.start()
    await sampler.sample_once()
    await drive(sim, clock, sampler, 0.5)
    lib = sampler.reader.lib.__dict__  # the reader's TimedLibrary keeps each function it wrapped

    def stretched(handle, fields):
        clock.t += 0.12
        return sim.nvmlDeviceGetFieldValues(handle, fields)

    read, lib["nvmlDeviceGetFieldValues"] = lib["nvmlDeviceGetFieldValues"], stretched
    sampler.read_fast_now()
    lib["nvmlDeviceGetFieldValues"] = read
    clock.t += 0.08
    sampler.read_fast_now()
    await sampler.sample_once()
    assert tx(expo) == truth(sim)
    assert gaps(expo) == 2 * 2  # both reads, both directions
    sampler.close()


async def test_a_driver_that_refreshes_every_100ms_is_detected_and_read_no_faster() -> None:
    """Values change only every 100 ms: reads in between return the same value while traffic
    flows. The reader notes the refresh, stops reading faster than it, and stays exact."""
    clock = Clock()
    sim = SimNvml(gpus=1, clock=clock)
    sim.set_pcie_rate(0, 9 * GB, UINT)  # Gen5 x16 link: fast period 50 ms, half the refresh
    sim.gpus[0].refresh = 0.1
    expo, _, sampler = make(sim)
    assert await sampler.start()
    await sampler.sample_once()
    dev = sampler.gpus[0].dev
    assert abs(dev.pcie_period - 0.0503) < 0.001
    await drive(sim, clock, sampler, 3, step=0.025)
    assert 0.099 <= dev.pcie_refresh < 0.15 and dev.pcie_period == dev.pcie_refresh
    assert abs(tx(expo) - truth(sim)) <= 9 * GB * 0.1  # the value of the last refresh: at most one period behind
    sampler.close()


async def test_a_gpu_lost_and_back_without_a_reset_adds_only_what_moved() -> None:
    """GPU_IS_LOST for 3 s, then it answers again with its counters where they were (no reset):
    the totals go on; the whole counter is not added again."""
    clock = Clock()
    sim = SimNvml(gpus=1, clock=clock)
    sim.set_pcie_rate(0, 9 * GB, ULL)
    sim.gpus[0].pcie_offset = 2**40  # 64-bit from the start
    expo, _, sampler = make(sim)
    assert await sampler.start()
    clock.t += 5
    await sampler.sample_once()
    start = value(expo, "gangscope_nvlink_transmit_bytes_total", gpu="0", link="0")
    pcie_start = tx(expo)
    sim.lose(0)
    clock.t += 3
    await sampler.sample_once()
    sim.unlose(0)
    clock.t += 1
    await sampler.sample_once()
    link = value(expo, "gangscope_nvlink_transmit_bytes_total", gpu="0", link="0")
    kib = sim.link_counter(sim.gpus[0], 0, pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX)
    assert start > 0 and link == kib * 1024  # what the device counted, once (not start + the whole counter)
    assert tx(expo) - pcie_start == int(9 * GB * 4)
    sampler.close()


class FailsOnce(SimNvml):
    """Field 197 answers UNKNOWN to the first request that asks for it (a transient driver error)."""

    failed = False

    def nvmlDeviceGetFieldValues(self, handle, fieldIds):
        values = super().nvmlDeviceGetFieldValues(handle, fieldIds)
        for v in values:
            if v.fieldId == pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES and not self.failed:
                v.nvmlReturn = pynvml.NVML_ERROR_UNKNOWN
                self.failed = True
        return values


async def test_one_transient_error_in_the_first_probe_does_not_lock_in_the_estimate() -> None:
    clock = Clock()
    sim = FailsOnce(gpus=1, clock=clock)
    sim.set_pcie_rate(0, 9 * GB, UINT)
    expo, _, sampler = make(sim)
    assert await sampler.start()
    await sampler.sample_once()
    dev = sampler.gpus[0].dev
    assert not dev.probed and dev.pcie_mode == ""
    clock.t += 1
    await sampler.sample_once()
    assert dev.probed and dev.pcie_mode == "fast"
    assert value(expo, "gangscope_gpu_errors_total", gpu="0", uuid=sim.gpus[0].uuid) == 1
    assert value(expo, "gangscope_pcie_throughput_bytes_per_second", gpu="0", direction="transmit") is None
    sampler.close()


async def test_blackwell_prefers_the_nvlink5_byte_counters_where_both_answer() -> None:
    clock = Clock()
    sim = SimNvml(profile="b200", gpus=1, clock=clock)
    expo, _, sampler = make(sim)
    assert await sampler.start()
    clock.t += 2
    await sampler.sample_once()
    assert sampler.gpus[0].dev.data_ids == (pynvml.NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES, pynvml.NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES)
    assert value(expo, "gangscope_nvlink_transmit_bytes_total", gpu="0", link="3") == sim.link_counter(
        sim.gpus[0], 3, pynvml.NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES)
    sampler.close()


async def test_a_32bit_nvlink_kib_counter_wraps_exactly_and_says_nothing() -> None:
    """138/139 reported 32-bit: 2**32 KiB take over a minute at NVLink rates, so 1 s samples see
    every wrap, judged against the link's maximum rate; no gap."""
    clock = Clock()
    sim = SimNvml(gpus=1, clock=clock)
    sim.gpus[0].nvlink_value_type = UINT
    sim.gpus[0].nvlink_offset = 2**32 - 5_000_000  # KiB: wraps within the first seconds
    expo, _, sampler = make(sim)
    assert await sampler.start()
    await sampler.sample_once()
    for _ in range(5):
        clock.t += 1
        await sampler.sample_once()
    fid = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
    truth = (sim.gpus[0].nvlink_offset + sim.link_counter(sim.gpus[0], 0, fid)) * 1024
    assert truth > 2**32 * 1024
    assert value(expo, "gangscope_nvlink_transmit_bytes_total", gpu="0", link="0") == truth
    assert value(expo, "gangscope_nvlink_read_gaps_total", gpu="0") == 0
    sampler.close()


def link_truth(sim: SimNvml, link: int, fid: int) -> int:
    """Bytes a GPU 0 NVLink5 counter counted since it started (before any wrap)."""
    return sim.gpus[0].nvlink_offset + sim.link_counter(sim.gpus[0], link, fid)


async def nvlink5_32bit(wrap_only: bool) -> None:
    """202/204 wrapping at 32 bits (typed so, or typed 64-bit: values never above 2**32) wrap every
    0.1-0.2 s at NVLink5 rates, within a 1 s sample: the fast reader reads them every 50 ms, and
    every wrap is counted, on every link, with no gap."""
    clock = Clock()
    sim = SimNvml(profile="gb200", gpus=1, clock=clock)
    if wrap_only:
        sim.gpus[0].nvlink_wrap = 2**32
    else:
        sim.gpus[0].nvlink_value_type = UINT
    expo, _, sampler = make(sim)
    assert await sampler.start()
    await sampler.sample_once()
    dev = sampler.gpus[0].dev
    assert dev.nvlink_period == pytest.approx(0.75 * 2**32 / 64e9)
    assert dev.fast
    await drive(sim, clock, sampler, 3, step=dev.nvlink_period)
    fid = pynvml.NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES
    assert link_truth(sim, 0, fid) > 20 * 2**32
    for link in range(sim.gpus[0].links):
        assert value(expo, "gangscope_nvlink_transmit_bytes_total", gpu="0", link=str(link)) == link_truth(sim, link, fid)
        assert value(expo, "gangscope_nvlink_receive_bytes_total", gpu="0", link=str(link)) == link_truth(
            sim, link, pynvml.NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES)
    assert value(expo, "gangscope_nvlink_read_gaps_total", gpu="0") == 0
    sampler.close()


async def test_a_32bit_nvlink5_byte_counter_is_read_by_the_fast_reader_and_stays_exact() -> None:
    await nvlink5_32bit(wrap_only=False)


async def test_a_64bit_typed_nvlink5_counter_below_2_32_is_read_as_32bit() -> None:
    await nvlink5_32bit(wrap_only=True)


async def test_a_32bit_nvlink5_counter_read_too_late_is_a_counted_lower_bound() -> None:
    """The fast reader stalled for a second: the wraps across it cannot be known (a link has no
    independent rate), so each counter adds only its forward distance, and each read is a gap."""
    clock = Clock()
    sim = SimNvml(profile="gb200", gpus=1, clock=clock)
    sim.gpus[0].nvlink_value_type = UINT
    expo, _, sampler = make(sim)
    assert await sampler.start()
    await sampler.sample_once()
    fid = pynvml.NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES
    before = value(expo, "gangscope_nvlink_transmit_bytes_total", gpu="0", link="0")
    raw = sim.link_counter(sim.gpus[0], 0, fid) % 2**32
    clock.t += 1
    await sampler.sample_once()
    forward = (sim.link_counter(sim.gpus[0], 0, fid) - raw) % 2**32
    assert value(expo, "gangscope_nvlink_transmit_bytes_total", gpu="0", link="0") == before + forward
    assert before + forward < link_truth(sim, 0, fid)
    assert value(expo, "gangscope_nvlink_read_gaps_total", gpu="0") == 2 * sim.gpus[0].links  # tx and rx, every link
    sampler.close()


async def test_nvlink_gap_series_until_64bit_typed_counters_pass_2_32() -> None:
    """KiB counters typed 64-bit below 2**32 are read as 32-bit (a gap series, at 0); once a
    value passes 2**32 they are 64-bit and the series goes; counters above it from the start never
    have one."""
    clock = Clock()
    sim = SimNvml(gpus=2, clock=clock)
    sim.gpus[0].nvlink_offset = 2**32 - 100_000_000  # KiB: passes 2**32 within the first seconds
    sim.gpus[1].nvlink_offset = 2**33
    expo, _, sampler = make(sim)
    assert await sampler.start()
    await sampler.sample_once()
    clock.t += 1
    await sampler.sample_once()
    assert value(expo, "gangscope_nvlink_read_gaps_total", gpu="0") == 0
    assert sampler.gpus[0].dev.nvlink_period is None  # KiB: 2**32 of them take over a minute at line rate
    for _ in range(10):
        clock.t += 1
        await sampler.sample_once()
    fid = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
    assert sim.link_counter(sim.gpus[0], 0, fid) + sim.gpus[0].nvlink_offset > 2**32
    assert value(expo, "gangscope_nvlink_read_gaps_total", gpu="0") is None
    assert value(expo, "gangscope_nvlink_read_gaps_total", gpu="1") is None
    assert value(expo, "gangscope_nvlink_transmit_bytes_total", gpu="0", link="0") == (
        sim.link_counter(sim.gpus[0], 0, fid) + sim.gpus[0].nvlink_offset) * 1024
    sampler.close()


async def test_a_gap_never_waits_for_the_throughput_on_the_fast_reader() -> None:
    """nvmlDeviceGetPcieThroughput blocks for its 20 ms window: made by the fast reader at a gap it
    delayed every other GPU's read past its wrap, and one gap caused the next. A gap is estimated
    from the last measurement (or the counter's own rate) and the GPU's worker measures after its
    sample, outside the lock the fast reader takes."""
    clock = Clock()
    sim = SimNvml(gpus=1, clock=clock)
    sim.set_pcie_rate(0, 40 * GB, UINT)
    calls: list[str] = []
    throughput = sim.nvmlDeviceGetPcieThroughput

    def counted(handle, counter):
        calls.append("locked" if sampler.gpus[0].dev.lock.locked() else "free")
        return throughput(handle, counter)

    sim.nvmlDeviceGetPcieThroughput = counted
    expo, _, sampler = make(sim)
    assert await sampler.start()
    await sampler.sample_once()
    assert calls == ["free", "free"]  # measured once after the probe, ready for the first gap
    await drive(sim, clock, sampler, 0.5)
    clock.t += 0.2  # the fast reader missed three periods: a gap in each direction
    sampler.read_fast_now()
    assert gaps(expo) == 0 and calls == ["free", "free"]  # not rendered yet, and nothing measured meanwhile
    await sampler.sample_once()
    assert gaps(expo) == 2 and tx(expo) == truth(sim)
    assert calls == ["free"] * 4  # the worker measured again after its sample, without the lock
    sampler.close()

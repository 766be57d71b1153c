"""NVML sampling against the simulated library: field parsing, counters, failures, bounds."""

from __future__ import annotations

import asyncio
import subprocess
import time

import pynvml
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.exposition import Exposition
from exporter.health import SourceHealth
from exporter.node.counters import MonotonicCounter
from exporter.node.nvml import FI_PCIE_TX, FI_RAW_TX, FI_TX, NvmlReader, NvmlSampler, field_value
from exporter.sim.nvml import SimNvml

BASE = (("node", "n1"), ("rack", "r1"), ("host", "n1"))


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


def make(sim: SimNvml, timeout: float = 2.0) -> tuple[Exposition, SourceHealth, NvmlSampler]:
    expo = Exposition()
    health = SourceHealth("nvml", expo)
    return expo, health, NvmlSampler(lambda: sim, expo, health, lambda: BASE, interval=1.0, timeout=timeout)


# ----- field values: real c_nvmlFieldValue_t arrays ------------------------------------------------


def test_field_value_reads_the_union_member_named_by_value_type() -> None:
    arr = (pynvml.c_nvmlFieldValue_t * 3)()
    arr[0].valueType, arr[0].value.uiVal = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, 2**32 - 1
    arr[1].valueType, arr[1].value.ullVal = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, 2**63 + 5
    arr[2].valueType, arr[2].value.dVal = pynvml.NVML_VALUE_TYPE_DOUBLE, 1.5
    assert field_value(arr[0]) == (2**32 - 1, 2**32)
    assert field_value(arr[1]) == (2**63 + 5, 2**64)
    assert field_value(arr[2]) == (1.5, 0)


class FaultyFields(SimNvml):
    """Answers one field with UNKNOWN and another with NOT_SUPPORTED, like a real partial failure."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.requests: list[list] = []

    def nvmlDeviceGetFieldValues(self, handle, fieldIds):
        self.requests.append(list(fieldIds))
        values = super().nvmlDeviceGetFieldValues(handle, fieldIds)
        for v in values:
            if (v.fieldId, v.scopeId) == (FI_TX, 3):
                v.nvmlReturn = pynvml.NVML_ERROR_UNKNOWN
            if (v.fieldId, v.scopeId) == (FI_RAW_TX, 5):
                v.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return values


def test_one_call_per_gpu_and_per_field_returns_are_checked() -> None:
    sim = FaultyFields(gpus=1, links=18)
    reader = NvmlReader(sim)
    _, (dev,) = reader.start()
    sim.requests.clear()
    s1 = reader.sample(dev, read_errors=False)
    assert len(sim.requests) == 1, "all links and fields in one nvmlDeviceGetFieldValues call"
    assert len(sim.requests[0]) == 18 * 6 + 2
    assert s1.ok and s1.failed_calls == 1
    assert (FI_TX, 3) not in s1.counters and (FI_RAW_TX, 5) not in s1.counters
    assert (FI_TX, 4) in s1.counters and (FI_PCIE_TX, 0) in s1.counters
    s2 = reader.sample(dev, read_errors=False)
    assert (FI_RAW_TX, 5) not in sim.requests[-1], "an unsupported field is not asked for again"
    assert (FI_TX, 3) in sim.requests[-1], "a failed (not unsupported) field is retried"
    assert len(sim.requests[-1]) == 18 * 6 + 1 and s2.failed_calls == 1


# ----- counters ---------------------------------------------------------------------------------


def test_monotonic_counter_wrap_and_reset() -> None:
    c = MonotonicCounter()
    assert c.update(2**32 - 100, 2**32) == 2**32 - 100  # starts at the device's own value
    assert c.update(50, 2**32) == 2**32 + 50  # wrapped: +150
    assert c.update(70, 2**32) == 2**32 + 70
    assert c.update(10, 2**64) == 2**32 + 80  # 64-bit counter went down: a reset, counted from 0
    assert c.update(10, 0) == 2**32 + 80


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
    kib = sim._link_kib(sim.gpus[0], 0, FI_TX)
    assert kib > 0
    assert value(expo, "gangscope_nvlink_transmit_bytes_total", gpu="0", link="0") == kib * 1024
    assert value(expo, "gangscope_nvlink_link_up", gpu="0", link="17") == 1
    assert value(expo, "gangscope_nvlink_version", gpu="0", link="0") == 6
    assert value(expo, "gangscope_gpu_up", gpu="0", uuid=sim.gpus[0].uuid) == 1
    # 8 GPUs x 18 links for each per-link family
    names = [n for (n, _) in samples(expo)]
    assert names.count("gangscope_nvlink_receive_bytes_total") == 8 * 18
    assert names.count("gangscope_nvlink_errors_total") == 8 * 18 * 5


async def test_pcie_counter_wraps_are_accumulated_never_negative() -> None:
    clock = Clock()
    sim = SimNvml(["wrap"], gpus=1, clock=clock)
    expo, _, sampler = make(sim)
    assert await sampler.start()
    seen = []
    for _ in range(8):  # 8 s at 1 GB/s through a 32-bit counter: wraps near 2.5 s and 6.8 s
        await sampler.sample_once()
        seen.append(value(expo, "gangscope_pcie_transmit_bytes_total", gpu="0"))
        clock.t += 1.0
    deltas = [b - a for a, b in zip(seen, seen[1:])]
    assert deltas == [1_000_000_000] * 7
    assert sim._pcie_bytes(sim.gpus[0], FI_PCIE_TX) % 2**32 < seen[0]  # the device counter wrapped, ours did not


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
    assert after == before + sim._link_kib(sim.gpus[1], 2, pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX) * 1024


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


async def test_no_nvml_library_means_source_down_not_a_crash() -> None:
    sim = SimNvml(["nodriver"])
    expo, health, sampler = make(sim)
    assert not await sampler.start()
    s = samples(expo)
    assert s[("gangscope_source_up", frozenset({("source", "nvml")}))] == 0
    assert s[("gangscope_source_errors_total", frozenset({("source", "nvml")}))] == 1
    assert not [n for (n, _) in s if n.startswith("gangscope_gpu_")]
    assert "Library" in health.detail or "library" in health.detail.lower()


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


async def test_hanging_call_is_bounded_and_does_not_pile_up() -> None:
    sim = SimNvml(hang_seconds=30)
    expo, _, sampler = make(sim, timeout=0.2)
    assert await sampler.start()
    sim.hang(4)
    t0 = time.monotonic()
    await sampler.sample_once()
    assert time.monotonic() - t0 < 1.0, "the round is bounded by --nvml-timeout"
    uuid4 = sim.gpus[4].uuid
    assert value(expo, "gangscope_gpu_up", gpu="4", uuid=uuid4) == 0
    assert value(expo, "gangscope_gpu_up", gpu="3", uuid=sim.gpus[3].uuid) == 1
    stuck = sampler.gpus[4].inflight
    await sampler.sample_once()
    assert sampler.gpus[4].inflight is stuck, "a GPU stuck in the driver is not sampled again"
    assert value(expo, "gangscope_gpu_up", gpu="3", uuid=sim.gpus[3].uuid) == 1
    sim.release()
    await asyncio.sleep(0.05)
    await sampler.sample_once()
    assert value(expo, "gangscope_gpu_up", gpu="4", uuid=uuid4) == 1
    sampler.close()


async def test_unsupported_fields_fall_back_and_are_remembered_per_gpu() -> None:
    sim = SimNvml(["unsupported"])
    expo, _, sampler = make(sim)
    assert await sampler.start()
    await sampler.sample_once()
    await sampler.sample_once()
    # GPUs 0-3: no PCIe byte counters -> the 20 ms throughput gauge; GPUs 4-7: counters.
    assert value(expo, "gangscope_pcie_transmit_bytes_total", gpu="0") is None
    assert value(expo, "gangscope_pcie_throughput_bytes_per_second", gpu="0", direction="transmit") > 0
    assert value(expo, "gangscope_pcie_throughput_bytes_per_second", gpu="5", direction="transmit") is None
    assert value(expo, "gangscope_pcie_transmit_bytes_total", gpu="5") is not None
    # GPU 1 without raw fields; GPU 2 without error counters; nobody counts these as errors.
    assert value(expo, "gangscope_nvlink_raw_transmit_bytes_total", gpu="1", link="0") is None
    assert value(expo, "gangscope_nvlink_raw_transmit_bytes_total", gpu="0", link="0") is not None
    assert value(expo, "gangscope_nvlink_errors_total", gpu="2", link="0", type="replay") is None
    assert value(expo, "gangscope_gpu_errors_total", gpu="1", uuid=sim.gpus[1].uuid) == 0
    assert (pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, 0) in sampler.gpus[0].dev.unsupported
    assert not sampler.gpus[5].dev.unsupported


async def test_degraded_link_and_pcie_and_mig_inventory() -> None:
    clock = Clock()
    sim = SimNvml(["degraded", "mig"], clock=clock)
    expo, _, sampler = make(sim)
    assert await sampler.start()
    clock.t += 20
    await sampler.sample_once()
    assert value(expo, "gangscope_nvlink_link_up", gpu="3", link="7") == 0
    assert value(expo, "gangscope_nvlink_link_up", gpu="3", link="6") == 1
    assert value(expo, "gangscope_nvlink_errors_total", gpu="3", link="7", type="replay") == 10
    assert value(expo, "gangscope_pcie_link_generation", gpu="5", kind="current") == 3
    assert value(expo, "gangscope_pcie_link_width", gpu="5", kind="current") == 8
    assert value(expo, "gangscope_pcie_link_width", gpu="5", kind="max") == 16
    inv = sampler.inventory()
    mig = sim.gpus[0].mig[1]
    assert inv[mig] == (0, sim.gpus[0].uuid)
    assert value(expo, "gangscope_gpu_mig_device_info", gpu="0", uuid=sim.gpus[0].uuid, mig_uuid=mig, gpu_instance="2") == 1


async def test_exposition_passes_promtool_and_both_parsers() -> None:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse

    sim = SimNvml(["degraded", "unsupported", "mig"])
    expo, _, sampler = make(sim)
    assert await sampler.start()
    await sampler.sample_once()
    sim.lose(6)
    await sampler.sample_once()
    text = expo.render(False)
    assert len(list(text_string_to_metric_families(text.decode()))) > 10
    assert len(list(om_parse(expo.render(True).decode()))) > 10
    proc = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


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
    assert await sampler.start()  # MIG enumeration failing does not hide the GPUs
    await sampler.sample_once()
    uuid1 = sim.gpus[1].uuid
    assert value(expo, "gangscope_gpu_up", gpu="1", uuid=uuid1) == 1
    assert value(expo, "gangscope_gpu_errors_total", gpu="1", uuid=uuid1) == 1
    assert value(expo, "gangscope_pcie_link_generation", gpu="1", kind="current") is None
    assert value(expo, "gangscope_pcie_link_generation", gpu="1", kind="max") == 5
    assert value(expo, "gangscope_gpu_errors_total", gpu="0", uuid=sim.gpus[0].uuid) == 0

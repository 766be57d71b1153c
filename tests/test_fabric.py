"""InfiniBand and NIC counters from the fixture sysfs tree (tests/fixtures/sysfs)."""

from __future__ import annotations

import shutil
from pathlib import Path

from exporter.exposition import Exposition
from exporter.health import SourceHealth
from exporter.node import families as F
from exporter.node.fabric import FabricSampler, parse_rate, read_fabric

FIXTURE = Path(__file__).parent / "fixtures" / "sysfs"
BASE = (("node", "gpu-a1"), ("block", "b1"), ("rack", "r2"), ("host", "gpu-a1"))

EXPECTED = """\
gangscope_fabric_port_transmit_bytes_total{device="mlx5_0",port="1",node="gpu-a1",block="b1",rack="r2",host="gpu-a1"} 4000000
gangscope_fabric_port_transmit_bytes_total{device="mlx5_1",port="1",node="gpu-a1",block="b1",rack="r2",host="gpu-a1"} 493827156048
gangscope_fabric_port_transmit_bytes_total{device="mlx5_2",port="1",node="gpu-a1",block="b1",rack="r2",host="gpu-a1"} 0
gangscope_fabric_port_receive_bytes_total{device="mlx5_0",port="1",node="gpu-a1",block="b1",rack="r2",host="gpu-a1"} 8000000
gangscope_fabric_port_receive_bytes_total{device="mlx5_1",port="1",node="gpu-a1",block="b1",rack="r2",host="gpu-a1"} 395061728436
gangscope_fabric_port_receive_bytes_total{device="mlx5_2",port="1",node="gpu-a1",block="b1",rack="r2",host="gpu-a1"} 0
gangscope_fabric_port_rate_bytes_per_second{device="mlx5_0",port="1",node="gpu-a1",block="b1",rack="r2",host="gpu-a1"} 50000000000
gangscope_fabric_port_rate_bytes_per_second{device="mlx5_1",port="1",node="gpu-a1",block="b1",rack="r2",host="gpu-a1"} 25000000000
gangscope_fabric_port_rate_bytes_per_second{device="mlx5_2",port="1",node="gpu-a1",block="b1",rack="r2",host="gpu-a1"} 1250000000
gangscope_fabric_port_up{device="mlx5_0",port="1",node="gpu-a1",block="b1",rack="r2",host="gpu-a1"} 1
gangscope_fabric_port_up{device="mlx5_1",port="1",node="gpu-a1",block="b1",rack="r2",host="gpu-a1"} 1
gangscope_fabric_port_up{device="mlx5_2",port="1",node="gpu-a1",block="b1",rack="r2",host="gpu-a1"} 0
gangscope_nic_transmit_bytes_total{interface="ens1f0",node="gpu-a1",block="b1",rack="r2",host="gpu-a1"} 555000
gangscope_nic_receive_bytes_total{interface="ens1f0",node="gpu-a1",block="b1",rack="r2",host="gpu-a1"} 777000
"""


def sample_lines(expo: Exposition) -> str:
    return "".join(l + "\n" for l in expo.render(False).decode().splitlines() if l and not l.startswith("#") and "source" not in l
                   and not l.startswith(("gangscope_exposition", "gangscope_internal_errors")))


def test_parse_rate() -> None:
    assert parse_rate("400 Gb/sec (4X NDR)") == 50e9
    assert parse_rate("2.5 Gb/sec (1X SDR)") == 2.5e9 / 8
    assert parse_rate("garbage") is None


async def test_fixture_tree_exposition() -> None:
    expo = Exposition()
    health = SourceHealth("fabric", expo)
    sampler = FabricSampler(str(FIXTURE), expo, health, lambda: BASE)
    await sampler.sample_once()
    assert sample_lines(expo) == EXPECTED
    assert health.up and health.objects == 4


async def test_counters_advance_and_survive_a_reset(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    shutil.copytree(FIXTURE, root)
    counter = root / "class/infiniband/mlx5_0/ports/1/counters/port_xmit_data"
    nic = root / "class/net/ens1f0/statistics/tx_bytes"
    expo = Exposition()
    sampler = FabricSampler(str(root), expo, SourceHealth("fabric", expo), lambda: BASE)
    await sampler.sample_once()
    counter.write_text("1000250\n")
    nic.write_text("556000\n")
    await sampler.sample_once()
    assert sampler.counters[("ib", "mlx5_0", "1", "tx")].total * 4 == 4_001_000
    counter.write_text("10\n")  # HCA reset: the device counter restarts
    await sampler.sample_once()
    text = expo.render(False).decode()
    assert 'gangscope_fabric_port_transmit_bytes_total{device="mlx5_0",port="1",node="gpu-a1",block="b1",rack="r2",host="gpu-a1"} 4001040' in text
    assert 'gangscope_nic_transmit_bytes_total{interface="ens1f0",node="gpu-a1",block="b1",rack="r2",host="gpu-a1"} 556000' in text


async def test_unreadable_counter_is_counted_not_fatal(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    shutil.copytree(FIXTURE, root)
    (root / "class/infiniband/mlx5_0/ports/1/counters/port_xmit_data").write_text("not a number\n")
    snap = read_fabric(str(root))
    assert snap.errors == 1 and ("mlx5_0", "1") not in snap.ports and ("mlx5_1", "1") in snap.ports
    expo = Exposition()
    health = SourceHealth("fabric", expo)
    await FabricSampler(str(root), expo, health, lambda: BASE).sample_once()
    assert health.up and health.errors == 1


async def test_no_fabric_at_all(tmp_path: Path) -> None:
    expo = Exposition()
    health = SourceHealth("fabric", expo)
    await FabricSampler(str(tmp_path), expo, health, lambda: BASE).sample_once()
    assert health.up and health.objects == 0
    assert all(expo.series_count(f.name) == 0 for f in F.FABRIC_FAMILIES)

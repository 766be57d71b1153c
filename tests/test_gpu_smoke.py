"""scripts/gpu-smoke, whole, on the C stand-ins of libnvidia-ml.so.1 and libcuda.so.1.

The script loads NVML through the real nvidia-ml-py and CUDA through ctypes, both by soname,
so with ``LD_LIBRARY_PATH`` on the stand-ins (exporter/sim/libnvml) it runs unchanged: the fake
driver's copies advance the stand-in NVML's PCIe and NVLink counters in their shared state file,
in the reverse device order of NVML's, so the byte comparison, the wraps and the ordinal-to-index
mapping are exercised for real. It must pass as it is and fail when told to expect other bytes.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from exporter.sim import libnvml
from stub_libs import ROOT


@pytest.fixture(scope="session")
def stub_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return libnvml.build(tmp_path_factory.getbasetemp() / "libnvml")


def smoke(stub_dir: Path, tmp_path: Path, profile: str, gpus: int, *args: str) -> tuple[subprocess.CompletedProcess, libnvml.StubState]:
    state = libnvml.StubState(tmp_path / "state")
    for g in range(gpus):  # 32-bit counters wrap early; 64-bit ones (GB200) are above 2**32 from the start
        state.gpu(g).pcie_tx = state.gpu(g).pcie_rx = 2**32 - 1000 * (g + 1) + (2**40 if profile == "gb200" else 0)
    env = libnvml.environment(stub_dir, profile, state.path, gpus=gpus)
    # A Gen1 x2 link (0.5 GB/s: the agent reads 32-bit counters every 6.4 s, a wrap takes 8.6 s)
    # copied at 0.45 GB/s: a fast reader that this shared, overloaded test machine delays by two
    # seconds still sees every wrap, so the gap check is about the agent, not about the machine.
    env |= {"GANGSCOPE_STUB_PCIE_GEN": "1", "GANGSCOPE_STUB_PCIE_WIDTH": "2", "GANGSCOPE_STUB_COPY_GBPS": "0.45"}
    result = subprocess.run([str(ROOT / "scripts" / "gpu-smoke"), "--out", str(tmp_path / "out"), "--refresh-seconds", "0.5",
                             *args], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    return result, state


def test_one_h200_passes_byte_for_byte_and_says_nvlink_was_not_exercised(stub_dir: Path, tmp_path: Path) -> None:
    result, state = smoke(stub_dir, tmp_path, "h200", 1, "--gib", "9")  # from just below 2**32: three wraps each way
    out = result.stdout
    assert result.returncode == 0, out[-5000:] + result.stderr[-2000:]
    assert re.search(r"^\s+197 PCIE_COUNT_TX_BYTES\s+pcie_bytes\s+SUCCESS/unsigned_int x1$", out, re.M), out[:3000]
    assert "nvmlDeviceGetGpuFabricInfoV v3 SUCCESS, v2 SUCCESS; nvmlDeviceGetPlatformInfo v2 ERROR_NOT_SUPPORTED" in out
    assert "raw state 0xa5a5a503 (byte 3)" in out
    assert re.search(r"the fast read \(197\+198\)\s+[\d.]+ /\s+[\d.]+\s+CPU\s+[\d.]+", out)
    assert re.search(r"^\s+197 PCIE_COUNT_TX_BYTES\s+unsigned_int\s+\d+", out, re.M)  # the refresh table
    passes = re.findall(r"^  PASS  GPU 0 (h2d|d2h): (\d+) bytes .* rose (\d+) \(\+([\d.]+)%\)$", out, re.M)
    assert [p[0] for p in passes] == ["h2d", "d2h"], out[-3000:]
    for _, moved, rose, _ in passes:
        assert int(moved) >= 2 * 2**32 and int(moved) <= int(rose) <= int(moved) * 1.1
    assert "NOT EXERCISED  NVLink: one GPU" in out
    assert "PASS  GPU 0 -> " not in out
    assert "result: PASS" in out
    assert (tmp_path / "out" / "metrics.prom").read_text().count("gangscope_pcie_transmit_bytes_total{") == 1
    assert (tmp_path / "out" / "agent.log").stat().st_size > 0
    assert state.s.refusals == 0


def test_two_gb200s_map_cuda_ordinals_by_bus_id_and_check_nvlink_per_link(stub_dir: Path, tmp_path: Path) -> None:
    result, state = smoke(stub_dir, tmp_path, "gb200", 2, "--gib", "4.5")
    out = result.stdout
    assert result.returncode == 0, out[-5000:] + result.stderr[-2000:]
    assert "CUDA device 0 = bus 0000:28:00.0 = NVML GPU 1" in out  # the fake driver's reverse order
    assert "CUDA device 1 = bus 0000:18:00.0 = NVML GPU 0" in out
    assert len(re.findall(r"^  PASS  GPU \d -> \d: NVLink (transmit|receive)", out, re.M)) == 4
    assert "nvmlDeviceGetPlatformInfo v2 SUCCESS" in out
    assert "result: PASS" in out
    assert state.s.refusals == 0


def test_a_count_that_differs_from_the_bytes_copied_fails(stub_dir: Path, tmp_path: Path) -> None:
    result, _ = smoke(stub_dir, tmp_path, "h200", 1, "--gib", "1", "--expect-scale", "1.5")
    assert result.returncode == 1, result.stdout[-3000:]
    assert len(re.findall(r"^  FAIL  GPU 0 (h2d|d2h):", result.stdout, re.M)) == 2
    assert "result: FAIL (2 check(s))" in result.stdout
    assert (tmp_path / "out" / "metrics.prom").exists() and (tmp_path / "out" / "agent.log").exists()


def test_no_cuda_driver_is_status_2(stub_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libnvidia-ml.so.1").symlink_to(stub_dir / "libnvidia-ml.so.1")
    state = libnvml.StubState(tmp_path / "state")
    result = subprocess.run([str(ROOT / "scripts" / "gpu-smoke"), "--out", str(tmp_path / "out")], cwd=ROOT, capture_output=True,
                            text=True, timeout=120, env=libnvml.environment(tmp_path / "lib", "h200", state.path, gpus=1))
    assert result.returncode == 2, result.stdout[-3000:]
    assert "no CUDA driver to drive traffic with" in result.stdout

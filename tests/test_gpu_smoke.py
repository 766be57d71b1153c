"""scripts/gpu-smoke's dry path: the same field dump, agent and comparison on the simulated NVML.

No GPU is lent to these tests, so the script is exercised against a simulated generation whose
rates are known: it must pass when the agent exports them, and fail when told to expect other
rates (its check can fail).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def smoke(*args: str, wrapper: bool = False) -> subprocess.CompletedProcess:
    cmd = [str(ROOT / "scripts" / "gpu-smoke")] if wrapper else [sys.executable, str(ROOT / "scripts" / "gpu_smoke.py")]
    return subprocess.run([*cmd, *args], cwd=ROOT, capture_output=True, text=True, timeout=180)


def test_dry_run_on_a_gb200_passes_and_prints_every_field() -> None:
    result = smoke("--sim", "gb200", "--seconds", "3", wrapper=True)
    out = result.stdout
    assert result.returncode == 0, out[-4000:] + result.stderr[-2000:]
    # every field the agent reads, with its return code and valueType, for each of the 4 GPUs
    assert len(re.findall(r"^GPU \d: NVIDIA GB200 ", out, re.M)) == 4
    assert re.search(r"^\s+197 PCIE_COUNT_TX_BYTES\s+pcie_bytes\s+SUCCESS/unsigned_long_long x1$", out, re.M), out[:3000]
    assert re.search(r"^\s+138 NVLINK_THROUGHPUT_DATA_TX\s+nvlink_throughput\s+ERROR_NOT_SUPPORTED/- x18$", out, re.M)
    assert re.search(r"^\s+202 NVLINK_COUNT_XMIT_BYTES\s+nvlink5_bytes\s+SUCCESS/unsigned_long_long x18$", out, re.M)
    assert re.search(r"^\s+nvmlDeviceGetPlatformInfo \(v2\)\s+SUCCESS$", out, re.M)
    assert "fabric: state 3, status SUCCESS, clique 1" in out
    rows = re.findall(r"^\s+GPU \d (pcie|nvlink)_(transmit|receive)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+ok$", out, re.M)
    assert len(rows) == 4 * 4, out[-3000:]
    assert "result: PASS" in out


def test_a_rate_that_differs_by_more_than_a_fifth_fails() -> None:
    """The A100 profile reads PCIe from the integrated 20 ms throughput rate (no byte counters); the
    comparison is told the copy loop moved 1.5x what it did, and must fail."""
    result = smoke("--sim", "a100", "--seconds", "3", "--expect-scale", "1.5")
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-2000:]
    assert re.search(r"^\s+197 PCIE_COUNT_TX_BYTES\s+pcie_bytes\s+ERROR_NOT_SUPPORTED/- x1$", result.stdout, re.M)
    fails = re.findall(r"\s+([\d.]+)\s+FAIL$", result.stdout, re.M)
    assert len(fails) == 8 * 4 and all(abs(float(r) - 1 / 1.5) < 0.1 for r in fails)
    assert "result: FAIL" in result.stdout

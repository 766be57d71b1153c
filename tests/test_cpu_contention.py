"""The fast PCIe reader under CPU contention: the real agent (``--nvml real`` over the C stand-in)
on an 8-GPU H200 node whose 32-bit PCIe counters wrap eleven times a second, while as many
CPU-bound processes as the machine has cores run at the agent's own priority (other pods on the
node, in the same CPU cgroup share).

The stand-in keeps the truth: each counter grows at a steady flow on the monotonic clock, and
it records every value a read returned and how many reads came later than one wrap at the link's
maximum rate after the previous one (reads no reader can count every wrap across). The agent
must export, for every GPU and direction, exactly a value some read returned (its first value as
the origin, as the device's own counter), and must have counted at least those late reads in
``gangscope_pcie_read_gaps_total``: a period it missed is a counted gap, estimated from the
throughput, never a silent loss of 4 GiB. No timing is asserted: how late the reads were is the
stand-in's record, and the assertions hold whatever the machine's load.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from exporter.sim import libnvml
from stub_libs import scrape, series, start_agent, stop, wait_until

PROFILE = "h200"
GPUS = libnvml.GPU_COUNTS[PROFILE]
FLOW = 48 * 1024**3  # bytes/s per direction: 12 wraps of a 32-bit counter a second, 3/4 of Gen5 x16
MAX_RATE = 32e9 / 8 * 16  # Gen5 x16, the stand-in's link (exporter.node.fields.pcie_max_rate)
# A read later than this after the previous one may hide a wrap at the link's maximum rate (the
# agent's bound: maximum rate x interval x 5% slack, exporter/node/nvml.py _fold_pcie).
LATE_NS = math.floor(2**32 / (MAX_RATE * 1.05) * 1e9)
DIRECTIONS = {"transmit": 0, "receive": 1}
HOG = "while True:\n    pass\n"


def labels(gpu: int) -> tuple[tuple[str, str], ...]:
    return (("gpu", str(gpu)), ("host", "stub-node"), ("node", "stub-node"))


@pytest.fixture(scope="module")
def stub_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return libnvml.build(tmp_path_factory.getbasetemp() / "libnvml")


def seen(gpu: libnvml.StubGpu, direction: int) -> dict[int, int]:
    """The values the last reads of one counter returned, shifted to the agent's origin (its total
    starts at the device's 32-bit value, not at the 64-bit truth) -> late reads up to that one."""
    origin = gpu.pcie_first[direction] - gpu.pcie_first[direction] % 2**32
    n = min(gpu.pcie_seen_n[direction], libnvml.SEEN)
    return {gpu.pcie_seen[direction][i] - origin: gpu.pcie_seen_late[direction][i] for i in range(n)}


def test_the_fast_reader_under_cpu_hogs_counts_every_late_read_and_stays_exact(stub_dir: Path, tmp_path: Path) -> None:
    state = libnvml.StubState(tmp_path / "state")
    start = time.monotonic_ns()
    for g in range(GPUS):
        gpu = state.gpu(g)
        gpu.pcie_flow, gpu.flow_from_ns, gpu.late_ns = FLOW, start, LATE_NS
        gpu.pcie_rate[0] = gpu.pcie_rate[1] = FLOW  # what the 20 ms throughput reports: the gap estimate
    proc, port = start_agent(stub_dir, PROFILE, state.path, tmp_path)
    hogs: list[subprocess.Popen] = []
    try:
        wait_until(lambda: ("gangscope_pcie_read_interval_seconds", labels(0)) in series(scrape(port)), proc)
        nice = os.getpriority(os.PRIO_PROCESS, proc.pid)
        hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in os.sched_getaffinity(0)]  # one per core it may use
        assert all(os.getpriority(os.PRIO_PROCESS, h.pid) == nice for h in hogs)  # the agent's own priority
        reads = state.gpu(GPUS - 1).pcie_seen_n[0]
        # 200 fast reads of the last GPU (10 s at the 50 ms period), every one of them under the hogs
        wait_until(lambda: state.gpu(GPUS - 1).pcie_seen_n[0] >= reads + 200, proc, timeout=300)
        for _ in range(20):  # a scrape older than the stand-in's record of 64 reads is asked again
            got = series(scrape(port))
            late: dict[int, int] = {}  # GPU -> late reads up to the ones its exported totals match
            misses = []
            for g in range(GPUS):
                for direction, d in DIRECTIONS.items():
                    total = got.get((f"gangscope_pcie_{direction}_bytes_total", labels(g)))
                    values = seen(state.gpu(g), d)
                    if total is None or int(total) not in values:
                        wraps = [(total - v) / 2**32 for v in values if total is not None and (total - v) % 2**32 == 0]
                        misses.append((g, direction, total, min(values), max(values), wraps))
                    else:
                        late[g] = late.get(g, 0) + values[int(total)]
            if not misses:
                break
            # Within the reads on record but none of them: a wrap lost or invented. Older: ask again.
            assert all(total is None or total < low for _, _, total, low, _, _ in misses), misses
        else:
            pytest.fail(f"no scrape matched the stand-in's recent reads: {misses}")
        gaps = {g: got[("gangscope_pcie_read_gaps_total", labels(g))] for g in range(GPUS)}
        print(f"reads later than {LATE_NS / 1e6:.1f} ms (stand-in): {late}; gaps counted (agent): {gaps}")
        for g in range(GPUS):
            # Every late read is a counted gap (the agent may count more: its interval spans both
            # calls' whole duration, the stand-in's only their starts).
            assert gaps[g] >= late[g], (g, gaps, late)
            uuid = libnvml.gpu_uuid(PROFILE, g)
            assert got[("gangscope_gpu_errors_total", (("gpu", str(g)), ("host", "stub-node"), ("node", "stub-node"),
                                                       ("uuid", uuid)))] == 0
        assert state.s.refusals == 0
    finally:
        for h in hogs:
            h.kill()
        for h in hogs:
            h.wait()
        code = stop(proc)
    assert code == 0, (tmp_path / f"agent-{port}.log").read_text()[-3000:]

"""The agent at NVML's C ABI: the real nvidia-ml-py over a stand-in libnvidia-ml.so.1 built with gcc.

The simulator answers at the pynvml function boundary and so cannot see how arguments reach C;
a struct passed by value there crashed the agent on every Hopper and Blackwell node. Here the
C stand-in (exporter/sim/libnvml/nvml_stub.c, written from nvml.h) sits under the real
wrappers: it refuses NULL and garbage pointers and wrong struct versions, counts each refusal,
and writes garbage into the padding after the 1-byte fabric state. The agent runs as a process
(``--nvml real``) on every GPU generation's profile and must stay up, refuse-free, and serve
exactly the series that generation supports with exactly the stand-in's counter values.
"""

from __future__ import annotations

import ctypes
import mmap
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from exporter.sim import libnvml
from stub_libs import ROOT, scrape, series, start_agent, stop, wait_until

GPUS = libnvml.GPU_COUNTS
LINKS = {"a100": 12, "h100": 18, "h200": 18, "b200": 18, "gb200": 18}
CLUSTER = "7b968a6d-c8aa-45e1-9e07-e1e51be99c31"


@pytest.fixture(scope="session")
def stub_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return libnvml.build(tmp_path_factory.getbasetemp() / "libnvml")


def run_python(stub_dir: Path, state: Path, profile: str, code: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter that loads the stand-in through pynvml's own search."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env=libnvml.environment(stub_dir, profile, state))


# ----- the stand-in refuses what NVML cannot take ------------------------------------------------

CALLS = """
import ctypes, pynvml
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
lib = pynvml.nvmlLib
def code(fn):
    try:
        fn()
        return "SUCCESS"
    except pynvml.NVMLError as exc:
        return {2: "INVALID_ARGUMENT", 25: "ARGUMENT_VERSION_MISMATCH", 3: "NOT_SUPPORTED"}.get(exc.value, str(exc.value))
"""


def test_the_old_by_value_fabric_and_platform_calls_are_refused(stub_dir: Path, tmp_path: Path) -> None:
    """What the agent did before: the bare struct to nvidia-ml-py's wrapper, which ctypes copies
    onto the stack. The stand-in must refuse it (or the child dies); by reference it answers."""
    state = libnvml.StubState(tmp_path / "state")
    result = run_python(stub_dir, state.path, "gb200", CALLS + """
fab = pynvml.c_nvmlGpuFabricInfo_v3_t()
plat = pynvml.c_nvmlPlatformInfo_v2_t()
print("fabric by value", code(lambda: pynvml.nvmlDeviceGetGpuFabricInfoV(h, fab)))
print("platform by value", code(lambda: pynvml.nvmlDeviceGetPlatformInfo(h, plat)))
print("fabric by reference", code(lambda: pynvml.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(fab))), hex(fab.state))
print("platform by reference", code(lambda: pynvml.nvmlDeviceGetPlatformInfo(h, ctypes.byref(plat))))
""")
    out = result.stdout.splitlines()
    refused = {"INVALID_ARGUMENT", "ARGUMENT_VERSION_MISMATCH"}
    if result.returncode < 0:  # the child was killed by a signal: refused too, the hard way
        assert out == [] or out[0].split()[-1] in refused, result.stdout
        return
    assert result.returncode == 0, result.stderr
    assert out[0].split()[-1] in refused and out[1].split()[-1] in refused, out
    # the one-byte state, and the padding after it that a 4-byte read takes along
    assert out[2] == "fabric by reference SUCCESS 0xa5a5a503", out
    assert out[3] == "platform by reference SUCCESS"
    assert state.s.refusals == 2
    assert "nvml-stub: refused nvmlDeviceGetGpuFabricInfoV" in result.stderr


@pytest.mark.parametrize("pointer, why", [
    ("None", "NULL pointer"),
    ("ctypes.c_void_p(0x1234)", "not a user-space address"),
    ("ctypes.c_void_p(ctypes.addressof(ctypes.create_string_buffer(64)) + 1)", "misaligned pointer"),
    ("ctypes.c_void_p(unmapped)", "unmapped memory"),
])
def test_null_and_garbage_pointers_are_invalid_arguments(stub_dir: Path, tmp_path: Path, pointer: str, why: str) -> None:
    state = libnvml.StubState(tmp_path / "state")
    result = run_python(stub_dir, state.path, "h200", CALLS + f"""
import mmap
m = mmap.mmap(-1, 4096)
unmapped = ctypes.addressof(ctypes.c_char.from_buffer(m))
del m  # unmapped from here on (no exported buffer holds it)
import gc; gc.collect()
arg = {pointer}
print(lib.nvmlDeviceGetGpuFabricInfoV(h, arg), lib.nvmlDeviceGetPlatformInfo(h, arg),
      lib.nvmlDeviceGetFieldValues(h, 1, arg), lib.nvmlDeviceGetPciInfo_v3(h, arg), lib.nvmlDeviceGetCount_v2(arg))
""")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2"] * 5, result.stdout
    assert state.s.refusals == 5
    assert result.stderr.count(f": {why} (") == 5, result.stderr


def test_struct_versions_are_checked(stub_dir: Path, tmp_path: Path) -> None:
    """NVML_STRUCT_VERSION(name, ver) = sizeof | ver << 24 (nvml.h 141-142). A driver without v3
    answers ARGUMENT_VERSION_MISMATCH to it (the agent then asks with v2) without counting a
    refusal; a version that names no struct is a refusal."""
    state = libnvml.StubState(tmp_path / "state")
    result = run_python(stub_dir, state.path, "a100", CALLS + """
v3, v2 = pynvml.c_nvmlGpuFabricInfo_v3_t(), pynvml.c_nvmlGpuFabricInfo_v2_t()
print(hex(v3.version), hex(v2.version), hex(ctypes.sizeof(v3) | 3 << 24), hex(ctypes.sizeof(v2) | 2 << 24))
print(code(lambda: pynvml.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(v3))))
print(code(lambda: pynvml.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(v2))))
v2.version = 0x01000024
print(code(lambda: pynvml.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(v2))))
p = pynvml.c_nvmlPlatformInfo_v2_t()
p.version = 0x0300002c
print(code(lambda: pynvml.nvmlDeviceGetPlatformInfo(h, ctypes.byref(p))))
""")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["0x3000028 0x2000024 0x3000028 0x2000024", "ARGUMENT_VERSION_MISMATCH",
                                          "NOT_SUPPORTED", "ARGUMENT_VERSION_MISMATCH", "ARGUMENT_VERSION_MISMATCH"]
    assert state.s.refusals == 2


def test_errors_before_init_lost_gpus_and_field_ids(stub_dir: Path, tmp_path: Path) -> None:
    state = libnvml.StubState(tmp_path / "state")
    state.gpu(1).lost = 1
    result = run_python(stub_dir, state.path, "h200", """
import ctypes, pynvml
pynvml._LoadNvmlLibrary()
lib = pynvml.nvmlLib
n = ctypes.c_uint()
print(lib.nvmlDeviceGetCount_v2(ctypes.byref(n)))  # before nvmlInit: UNINITIALIZED
pynvml.nvmlInit()
h = ctypes.c_void_p()
print(lib.nvmlDeviceGetHandleByIndex_v2(1, ctypes.byref(h)))  # lost: GPU_IS_LOST
h0 = pynvml.nvmlDeviceGetHandleByIndex(0)
vals = pynvml.nvmlDeviceGetFieldValues(h0, [(138, 17), (138, 18), (303, 0), (165, 0xFFFFFFFF), (91, 0)])
print([v.nvmlReturn for v in vals])
print(lib.nvmlDeviceGetFieldValues(ctypes.c_void_p(0x5000000), 1, ctypes.byref(vals)))  # a handle it never gave
""")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["1", "15", "[0, 2, 2, 2, 0]", "2"]


# ----- the agent on every generation -----------------------------------------------------------

def key(name: str, **labels: object) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A series key as :func:`stub_libs.series` makes it, with the node's labels."""
    return name, tuple(sorted({"node": "stub-node", "host": "stub-node", **{k: str(v) for k, v in labels.items()}}.items()))


def link_bytes(gpu: int, link: int) -> int:
    return (gpu * 100 + link + 1) * 1024 * 1000  # whole KiB, so 138/139 report them exactly


def prepare(state: libnvml.StubState, profile: str) -> None:
    for g in range(GPUS[profile]):
        gpu = state.gpu(g)
        gpu.pcie_tx, gpu.pcie_rx = 3_000_000_000 + g, 1_000_000_000 + g
        gpu.pcie_rate[0], gpu.pcie_rate[1] = 1024 * 1000 * (g + 1), 1024 * 500 * (g + 1)
        for link in range(LINKS[profile]):
            gpu.nvlink_tx[link] = link_bytes(g, link)
            gpu.nvlink_rx[link] = 2 * link_bytes(g, link)


def expected(profile: str, pcie_extra: int = 0, link_extra: int = 0) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every byte-counter series that generation supports, with its value, after ``*_extra``
    bytes more were transmitted on PCIe and on each link."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for g in range(GPUS[profile]):
        if profile != "a100":  # A100: no PCIe byte counters (the integrated 20 ms rate instead)
            out[key("gangscope_pcie_transmit_bytes_total", gpu=g)] = 3_000_000_000 + g + pcie_extra
            out[key("gangscope_pcie_receive_bytes_total", gpu=g)] = 1_000_000_000 + g
        for link in range(LINKS[profile]):
            labels = key("", gpu=g, link=link)[1]
            tx, rx = link_bytes(g, link) + link_extra, 2 * link_bytes(g, link)
            out[("gangscope_nvlink_transmit_bytes_total", labels)] = tx
            out[("gangscope_nvlink_receive_bytes_total", labels)] = rx
            if profile != "gb200":  # GB200: 202/204 only, no raw counters
                out[("gangscope_nvlink_raw_transmit_bytes_total", labels)] = (tx + tx // 16) // 1024 * 1024
                out[("gangscope_nvlink_raw_receive_bytes_total", labels)] = (rx + rx // 16) // 1024 * 1024
    return out


def byte_series(got: dict, profile: str) -> dict:
    """The byte counters whose values the stand-in decides (A100's PCIe totals integrate a rate over
    the agent's own clock: only their presence is checked)."""
    return {k: v for k, v in got.items() if k[0].endswith("_bytes_total") and not (profile == "a100" and "pcie" in k[0])}


@pytest.mark.parametrize("profile", sorted(GPUS))
def test_the_agent_stays_up_and_serves_what_the_generation_supports(stub_dir: Path, tmp_path: Path, profile: str) -> None:
    state = libnvml.StubState(tmp_path / "state")
    prepare(state, profile)
    gpus = GPUS[profile]
    proc, port = start_agent(stub_dir, profile, state.path, tmp_path, "--sample-interval", "0.1")
    try:
        # 40 sample rounds at least, four of them slow ones (fabric info, errors): the by-value
        # fabric call crashed the agent within the first of them.
        def rounds_done() -> bool:
            assert state.s.refusals == 0, "the stand-in refused an argument: " + (tmp_path / f"agent-{port}.log").read_text()[-2000:]
            return state.s.field_calls >= 40 * gpus and (profile == "a100" or state.s.fabric_calls >= 3 * gpus)

        wait_until(rounds_done, proc)
        wait_until(lambda: byte_series(series(scrape(port)), profile) == expected(profile), proc, timeout=20)
        got = series(scrape(port))
        assert proc.poll() is None
        assert state.s.refusals == 0
        for g in range(gpus):
            uuid = libnvml.gpu_uuid(profile, g)
            assert got[key("gangscope_gpu_up", gpu=g, uuid=uuid)] == 1
            assert got[key("gangscope_gpu_errors_total", gpu=g, uuid=uuid)] == 0
            fabric = [k for k in got if k[0] == "gangscope_gpu_fabric_info" and ("gpu", str(g)) in k[1]]
            platform = [k for k in got if k[0] == "gangscope_gpu_platform_info" and ("gpu", str(g)) in k[1]]
            if profile == "a100":  # no fabric (Hopper or newer), no platform info (Blackwell)
                assert fabric == [] and platform == []
                rate = got[key("gangscope_pcie_throughput_bytes_per_second", direction="transmit", gpu=g)]
                assert rate == 1024 * 1000 * (g + 1)
                assert key("gangscope_pcie_transmit_bytes_total", gpu=g) in got
                continue
            labels = dict(fabric[0][1])
            assert labels["state"] == "completed"  # 0xa5a5a503 unmasked would be "unknown"
            assert (labels["cluster_uuid"], labels["clique_id"]) == ((CLUSTER, "1") if profile == "gb200" else ("", ""))
            assert len(platform) == (1 if profile == "gb200" else 0)
            if platform:
                assert dict(platform[0][1])["chassis_serial"] == "1821224012345"
        # Traffic: the exported totals follow the counters exactly.
        for g in range(gpus):
            state.gpu(g).pcie_tx += 7
            for link in range(LINKS[profile]):
                state.gpu(g).nvlink_tx[link] += 7 * 1024
        shifted = expected(profile, 7, 7 * 1024)
        wait_until(lambda: byte_series(series(scrape(port)), profile) == shifted, proc, timeout=20)
        assert state.s.refusals == 0
    finally:
        code = stop(proc)
    assert code == 0, (tmp_path / f"agent-{port}.log").read_text()[-3000:]


def test_state_layout_matches_the_c_header() -> None:
    """The Python mirror of stub_state.h: a field added on one side only would shift the other."""
    header = (Path(libnvml.__file__).parent / "stub_state.h").read_text()
    for name, _ in libnvml.StubStateLayout._fields_ + libnvml.StubGpu._fields_:
        assert f" {name}" in header or f" {name}[" in header, name
    assert ctypes.sizeof(libnvml.StubStateLayout) == 7 * 8 + 8 * ctypes.sizeof(libnvml.StubGpu)
    assert mmap.PAGESIZE > 0

"""Stand-ins for ``libnvidia-ml.so.1`` and ``libcuda.so.1`` with the real C ABI, built with gcc.

:mod:`exporter.sim.nvml` answers at the ``pynvml`` function boundary, so it cannot see how
nvidia-ml-py hands arguments to C: the wrappers pass them through without ``argtypes``, and a
struct passed by value reaches NVML as a garbage pointer. These libraries sit below the real
nvidia-ml-py instead (``nvml_stub.c``, written from NVML's header; ``cuda_stub.c``, from
CUDA's), refuse what the real ones refuse, and count every refusal in a state file that tests
read and write (:class:`StubState`, the layout of ``stub_state.h``).

nvidia-ml-py loads the library with ``CDLL("libnvidia-ml.so.1")`` (pynvml.py ``_LoadNvmlLibrary``),
so the dynamic loader's search decides which one: a process started with
``LD_LIBRARY_PATH=<build dir>`` (:func:`environment`) gets the stand-in. Inside an already
running process, :func:`preload` loads it by path first; ``dlopen`` then returns that library
for its soname.
"""

from __future__ import annotations

import ctypes
import hashlib
import mmap
import os
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = {"libnvidia-ml.so.1": "nvml_stub.c", "libcuda.so.1": "cuda_stub.c"}
PROFILES = ("a100", "h100", "h200", "b200", "gb200")
MAX_GPUS, MAX_LINKS, SEEN = 8, 18, 64
MAGIC = 0x4E564D4C


class StubGpu(ctypes.Structure):
    """``struct stub_gpu`` (stub_state.h)."""

    _fields_ = [
        ("pcie_tx", ctypes.c_uint64),
        ("pcie_rx", ctypes.c_uint64),
        ("nvlink_tx", ctypes.c_uint64 * MAX_LINKS),
        ("nvlink_rx", ctypes.c_uint64 * MAX_LINKS),
        ("replay", ctypes.c_uint64 * MAX_LINKS),
        ("pcie_rate", ctypes.c_uint64 * 2),
        ("lost", ctypes.c_uint32),
        ("link_down", ctypes.c_uint32),
        ("fabric_health", ctypes.c_uint32),
        ("pad", ctypes.c_uint32),
        ("pcie_flow", ctypes.c_uint64),
        ("flow_from_ns", ctypes.c_int64),
        ("late_ns", ctypes.c_int64),
        ("pcie_first", ctypes.c_uint64 * 2),
        ("pcie_seen", (ctypes.c_uint64 * SEEN) * 2),
        ("pcie_seen_late", (ctypes.c_uint64 * SEEN) * 2),
        ("pcie_seen_n", ctypes.c_uint64 * 2),
        ("pcie_last_ns", ctypes.c_int64 * 2),
        ("pcie_late", ctypes.c_uint64 * 2),
    ]


class StubStateLayout(ctypes.Structure):
    """``struct stub_state`` (stub_state.h)."""

    _fields_ = [
        ("magic", ctypes.c_uint32),
        ("version", ctypes.c_uint32),
        ("calls", ctypes.c_uint64),
        ("refusals", ctypes.c_uint64),
        ("wall_offset_us", ctypes.c_int64),
        ("cuda_bytes", ctypes.c_uint64),
        ("field_calls", ctypes.c_uint64),
        ("fabric_calls", ctypes.c_uint64),
        ("gpu", StubGpu * MAX_GPUS),
    ]


HEALTHY_FABRIC = 2 | 2 << 2 | 2 << 4 | 2 << 6 | 1 << 8


class StubState:
    """The shared state file, mapped here: counters to set, lost GPUs, the refusal count."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        size = ctypes.sizeof(StubStateLayout)
        if not self.path.exists() or self.path.stat().st_size != size:
            self.path.write_bytes(bytes(size))
        self._file = self.path.open("r+b")
        self._map = mmap.mmap(self._file.fileno(), size)
        self.s = StubStateLayout.from_buffer(self._map)
        if self.s.magic != MAGIC:
            self.s.magic, self.s.version = MAGIC, 1
            for g in self.s.gpu:
                g.fabric_health = HEALTHY_FABRIC

    def gpu(self, index: int) -> StubGpu:
        return self.s.gpu[index]


PCI_DEVICE_IDS = {"a100": 0x20B2, "h100": 0x2330, "h200": 0x2335, "b200": 0x2901, "gb200": 0x2941}
GPU_COUNTS = {"a100": 8, "h100": 8, "h200": 8, "b200": 8, "gb200": 4}


def gpu_uuid(profile: str, index: int) -> str:
    """The UUID the stand-in reports for GPU ``index`` (nvml_stub.c ``nvmlDeviceGetUUID``)."""
    return f"GPU-{0x51AB0000 + index:08x}-{PCI_DEVICE_IDS[profile]:04x}-4c0d-9a3b-{index:012x}"


def _digest() -> str:
    h = hashlib.sha256()
    for name in (*SOURCES.values(), "stub_state.h"):
        h.update((HERE / name).read_bytes())
    return h.hexdigest()[:16]


def build(dest: Path) -> Path:
    """Compile both libraries into ``dest`` (once per source version); returns ``dest``."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    stamp = dest / ".digest"
    if stamp.exists() and stamp.read_text() == _digest() and all((dest / n).exists() for n in SOURCES):
        return dest
    for lib, src in SOURCES.items():
        subprocess.run(["gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", f"-Wl,-soname,{lib}",
                        "-o", str(dest / lib), str(HERE / src)], check=True, capture_output=True, text=True)
    stamp.write_text(_digest())
    return dest


def environment(libdir: Path, profile: str, state: Path | None = None, *, gpus: int | None = None,
                call_us: int = 0, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a process that must load the stand-ins of ``profile``."""
    env = dict(os.environ if base is None else base)
    env["LD_LIBRARY_PATH"] = str(libdir) + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    env["GANGSCOPE_STUB_PROFILE"] = profile
    env["GANGSCOPE_STUB_CALL_US"] = str(call_us)
    if state is not None:
        env["GANGSCOPE_STUB_STATE"] = str(state)
    if gpus is not None:
        env["GANGSCOPE_STUB_GPUS"] = str(gpus)
    return env


def preload(libdir: Path) -> ctypes.CDLL:
    """Load the NVML stand-in into this process, so that pynvml's ``CDLL("libnvidia-ml.so.1")`` gets it."""
    return ctypes.CDLL(str(Path(libdir) / "libnvidia-ml.so.1"))

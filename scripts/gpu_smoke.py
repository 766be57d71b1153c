"""gpu-smoke: what the driver answers, and whether the agent's counters equal the bytes we copy.

Run through ``scripts/gpu-smoke`` (which picks the Python environment). Needs only what the
project installs (nvidia-ml-py, prometheus-client) and the driver's own ``libcuda.so.1``: the
traffic is driven through the CUDA *driver* API with ctypes (no toolkit, no torch), from pinned
host buffers, so the copies are DMA and the bytes on the bus are the bytes asked for.

1. **What NVML answers**, per GPU: every field family the agent reads on every link (return
   code and ``valueType``), fabric info (v3, then v2) and platform info, both by reference; the
   wall and CPU time of one ``nvmlDeviceGetFieldValues`` call of the fast read and of a sample.
2. **The agent** runs as in a cluster (``--nvml real``, 1 s samples, no Kubernetes).
3. **Refresh periods under load**: while host-to-device copies run, fields 197/198, 138-141 and
   202/204 are read back to back for a while; for each, how often its value changed, and whether
   NVML's timestamp moved with the value or on every read.
4. **Exact bytes**: host-to-device then device-to-host copies of ``--gib`` GiB each (by default
   five times 2^32 bytes, so a 32-bit counter wraps five times) on every GPU; the agent's PCIe
   receive (resp. transmit) counter must rise by at least the bytes copied and at most
   ``OVERHEAD`` more. With two or more GPUs, a peer copy from each GPU to the next: the sender's
   NVLink transmit and the receiver's receive counters, summed over links, the same way, and the
   per-link sum against NVML's all-links aggregate (scope UINT_MAX). With one GPU the NVLink
   check says it was not exercised: it does not pass.
5. **Health**: any ``gangscope_gpu_errors_total`` or ``gangscope_pcie_read_gaps_total`` increase,
   an INVALID_ARGUMENT or ARGUMENT_VERSION_MISMATCH from the fabric or platform calls, a GPU down,
   fail the run. The agent's CPU and memory (from /proc) are printed.

CUDA ordinals are mapped to NVML indices by PCI bus id (CUDA orders devices fastest first unless
told otherwise). The metrics page and the agent log are written to ``--out`` (default: a folder
under /tmp, printed) whatever the result.
Exit status: 0 every check passed, 1 one failed or NVML/the agent did not work, 2 no CUDA driver.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from exporter.node import fields as FF  # noqa: E402
from exporter.node.hardware import read_fabric, read_platform  # noqa: E402

# The counters may count more than the payload (TLP headers, read requests): a rise of up to
# this much beyond the bytes copied passes; less than the bytes copied never does.
OVERHEAD = 0.10
CHUNK = 256 * 2**20  # bytes per copy call
CODES = {v: k[len("NVML_"):] for k, v in vars(pynvml).items() if k.startswith(("NVML_ERROR_", "NVML_SUCCESS")) and isinstance(v, int)}
VALUE_TYPES = {v: k[len("NVML_VALUE_TYPE_"):].lower() for k, v in vars(pynvml).items()
               if k.startswith("NVML_VALUE_TYPE_") and k != "NVML_VALUE_TYPE_COUNT" and isinstance(v, int)}
FIELD_NAMES = {v: k[len("NVML_FI_DEV_"):] for k, v in vars(pynvml).items() if k.startswith("NVML_FI_DEV_") and isinstance(v, int)}
ALL_LINKS = 0xFFFFFFFF  # "A scopeId of UINT_MAX returns aggregate value summed up across all links" (nvml.h 2598-2599)
REFRESH_FIELDS = (*FF.PCIE_BYTES.ids, *FF.NVLINK_DATA.ids, *FF.NVLINK_RAW.ids, *FF.NVLINK5_BYTES.ids)


def say(title: str) -> None:
    print(f"\n=== {title}", flush=True)


class Result:
    """Checks that passed, failed, or were not exercised; the exit status follows from them."""

    def __init__(self) -> None:
        self.failures: list[str] = []

    def check(self, ok: bool, what: str) -> bool:
        print(f"  {'PASS' if ok else 'FAIL'}  {what}", flush=True)
        if not ok:
            self.failures.append(what)
        return ok


# ----- 1. what NVML answers ----------------------------------------------------------------------


def answer(call: Callable[[], Any]) -> str:
    try:
        call()
        return "SUCCESS"
    except pynvml.NVMLError as exc:
        return CODES.get(exc.value, str(exc.value))


def link_count(h: Any) -> int:
    fv = pynvml.nvmlDeviceGetFieldValues(h, [pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT])[0]
    return int(FF.field_value(fv)[0]) if fv.nvmlReturn == pynvml.NVML_SUCCESS else 0


def cost(call: Callable[[], Any], n: int = 200) -> tuple[float, float, float]:
    """p50 and p99 wall time and mean CPU time (this thread's) of ``call``, in microseconds."""
    walls = []
    cpu0 = time.thread_time()
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        walls.append((time.perf_counter() - t0) * 1e6)
    cpu = (time.thread_time() - cpu0) / n * 1e6
    q = statistics.quantiles(walls, n=100)
    return q[49], q[98], cpu


def dump_gpu(index: int, result: Result) -> int:
    h = pynvml.nvmlDeviceGetHandleByIndex(index)
    links = link_count(h)
    print(f"\nGPU {index}: {pynvml.nvmlDeviceGetName(h)} {pynvml.nvmlDeviceGetUUID(h)} "
          f"bus {pynvml.nvmlDeviceGetPciInfo(h).busId}, {links} NVLink links")
    request = [(fid, link) for fam in FF.FIELD_FAMILIES if fam.per_link for link in range(max(links, 1)) for fid in fam.ids]
    request += [(fid, 0) for fid in FF.PCIE_BYTES.ids] + [(fid, ALL_LINKS) for fid in FF.NVLINK_DATA.ids]
    rows: dict[tuple[int, bool], dict[tuple[str, str], int]] = {}
    for (fid, scope), fv in zip(request, pynvml.nvmlDeviceGetFieldValues(h, request)):
        vt = VALUE_TYPES.get(fv.valueType, str(fv.valueType)) if fv.nvmlReturn == pynvml.NVML_SUCCESS else "-"
        row = rows.setdefault((fid, scope == ALL_LINKS), {})
        k = (CODES.get(fv.nvmlReturn, str(fv.nvmlReturn)), vt)
        row[k] = row.get(k, 0) + 1
    print(f"  {'field':<48} {'family':<22} answers (return code / valueType x scopes)")
    for (fid, aggregate), answers in sorted(rows.items()):
        name = FIELD_NAMES.get(fid, str(fid)) + (" (UINT_MAX)" if aggregate else "")
        text = ", ".join(f"{c}/{vt} x{n}" for (c, vt), n in sorted(answers.items()))
        print(f"  {fid:>3} {name:<44} {FF.FAMILY_OF[fid].name:<22} {text}")
    # Fabric and platform, by reference (the C functions take pointers; pynvml passes its argument through).
    v3, v2, platform = pynvml.c_nvmlGpuFabricInfo_v3_t(), pynvml.c_nvmlGpuFabricInfo_v2_t(), pynvml.c_nvmlPlatformInfo_v2_t()
    a3 = answer(lambda: pynvml.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(v3)))
    a2 = answer(lambda: pynvml.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(v2)))
    ap = answer(lambda: pynvml.nvmlDeviceGetPlatformInfo(h, ctypes.byref(platform)))
    print(f"  nvmlDeviceGetGpuFabricInfoV v3 {a3}, v2 {a2}; nvmlDeviceGetPlatformInfo v2 {ap}")
    if a3 == "SUCCESS":
        print(f"  fabric: raw state {v3.state:#x} (byte {v3.state & 0xFF}), status {CODES.get(v3.status, v3.status)}, "
              f"clique {v3.cliqueId}, cluster {bytes(v3.clusterUuid).hex()}, healthMask {v3.healthMask:#x}, "
              f"summary {v3.healthSummary} -> {read_fabric(v3, True)}")
    if ap == "SUCCESS":
        print(f"  platform: {read_platform(platform)}")
    result.check(a3 != "INVALID_ARGUMENT" and a2 not in ("INVALID_ARGUMENT", "ARGUMENT_VERSION_MISMATCH"),
                 f"GPU {index}: fabric info takes the v3 or v2 struct by reference")
    result.check(ap not in ("INVALID_ARGUMENT", "ARGUMENT_VERSION_MISMATCH"), f"GPU {index}: platform info takes the v2 struct")
    fast = [(fid, 0) for fid in FF.PCIE_BYTES.ids]
    batch = [(fid, link) for link in range(links) for fid in (*FF.NVLINK_DATA.ids, *FF.NVLINK_RAW.ids,
                                                              pynvml.NVML_FI_DEV_NVLINK_GET_STATE)] + fast
    print("  nvmlDeviceGetFieldValues cost over 200 calls: wall p50 / p99, CPU mean (us)")
    for name, req in (("the fast read (197+198)", fast), (f"a sample ({len(batch)} fields)", batch)):
        p50, p99, cpu = cost(lambda: pynvml.nvmlDeviceGetFieldValues(h, req))
        print(f"    {name:<32} {p50:9.1f} / {p99:9.1f}   CPU {cpu:9.1f}")
    return links


# ----- CUDA through the driver API ---------------------------------------------------------------


class Cuda:
    """The few driver API calls the copies need, with their C signatures (cuda.h: the _v2 names are
    what cuMemAlloc, cuCtxCreate, cuMemcpyHtoD... are #defined to)."""

    def __init__(self) -> None:
        self.lib = lib = ctypes.CDLL("libcuda.so.1")
        c_int, c_uint, c_size, c_ptr, c_ull = ctypes.c_int, ctypes.c_uint, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_ulonglong
        sig = {
            "cuInit": [c_uint], "cuDeviceGetCount": [ctypes.POINTER(c_int)], "cuDeviceGet": [ctypes.POINTER(c_int), c_int],
            "cuDeviceGetPCIBusId": [ctypes.c_char_p, c_int, c_int], "cuCtxCreate_v2": [ctypes.POINTER(c_ptr), c_uint, c_int],
            "cuCtxSetCurrent": [c_ptr], "cuCtxSynchronize": [], "cuMemAlloc_v2": [ctypes.POINTER(c_ull), c_size],
            "cuMemHostAlloc": [ctypes.POINTER(c_ptr), c_size, c_uint], "cuMemcpyHtoD_v2": [c_ull, c_ptr, c_size],
            "cuMemcpyDtoH_v2": [c_ptr, c_ull, c_size], "cuMemcpyPeer": [c_ull, c_ptr, c_ull, c_ptr, c_size],
            "cuGetErrorString": [c_int, ctypes.POINTER(ctypes.c_char_p)],
        }
        for name, args in sig.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, c_int
        self.call("cuInit", 0)
        n = ctypes.c_int()
        self.call("cuDeviceGetCount", ctypes.byref(n))
        self.count = n.value
        self.ctx: list[ctypes.c_void_p] = []
        self.dev: list[int] = []
        self.host: list[ctypes.c_void_p] = []
        self.bus: list[str] = []
        for ordinal in range(self.count):
            d = ctypes.c_int()
            self.call("cuDeviceGet", ctypes.byref(d), ordinal)
            buf = ctypes.create_string_buffer(32)
            self.call("cuDeviceGetPCIBusId", buf, 32, d.value)
            self.bus.append(buf.value.decode())
            ctx = ctypes.c_void_p()
            self.call("cuCtxCreate_v2", ctypes.byref(ctx), 0, d.value)
            dptr, hptr = ctypes.c_ulonglong(), ctypes.c_void_p()
            self.call("cuMemAlloc_v2", ctypes.byref(dptr), CHUNK)
            self.call("cuMemHostAlloc", ctypes.byref(hptr), CHUNK, 0)  # pinned: DMA, no staging copy
            self.ctx.append(ctx)
            self.dev.append(dptr.value)
            self.host.append(hptr)

    def call(self, name: str, *args: Any) -> None:
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            text = ctypes.c_char_p()
            self.lib.cuGetErrorString(rc, ctypes.byref(text))
            raise RuntimeError(f"{name}: CUDA error {rc} ({(text.value or b'?').decode()})")

    def copy(self, kind: str, ordinal: int, nbytes: int, peer: int = -1) -> int:
        """``nbytes`` (rounded up to whole chunks) host-to-device, device-to-host or to ``peer``; returns bytes moved."""
        self.call("cuCtxSetCurrent", self.ctx[ordinal])
        done = 0
        while done < nbytes:
            if kind == "h2d":
                self.call("cuMemcpyHtoD_v2", self.dev[ordinal], self.host[ordinal], CHUNK)
            elif kind == "d2h":
                self.call("cuMemcpyDtoH_v2", self.host[ordinal], self.dev[ordinal], CHUNK)
            else:
                self.call("cuMemcpyPeer", self.dev[peer], self.ctx[peer], self.dev[ordinal], self.ctx[ordinal], CHUNK)
            done += CHUNK
        self.call("cuCtxSynchronize")
        return done


def text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def bus_key(bus_id: str) -> tuple[int, int, int, int]:
    """(domain, bus, device, function) of "0000:18:00.0" (CUDA) or "00000000:18:00.0" (NVML)."""
    domain, bus, rest = bus_id.strip().lower().split(":")
    dev, fn = rest.split(".")
    return int(domain, 16), int(bus, 16), int(dev, 16), int(fn, 16)


# ----- the agent -----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict[tuple[str, str, str], float]:
    """(metric, gpu, link) -> value for the agent's GPU series."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[tuple[str, str, str], float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.startswith(("gangscope_gpu_", "gangscope_pcie_", "gangscope_nvlink_")) or s.name == "gangscope_source_up":
                out[(s.name, s.labels.get("gpu", s.labels.get("source", "")), s.labels.get("link", ""))] = s.value
    return out


def settled(port: int, metric: str, gpu: str) -> float:
    """A GPU's total of ``metric`` over its links once two samples in a row agree to within 1 MiB
    (the copies ended; an idle GPU's own background traffic is far below that)."""
    last = None
    for _ in range(30):
        now = sum(v for (m, g, _), v in scrape(port).items() if m == metric and g == gpu)
        if last is not None and abs(now - last) <= 2**20:
            return now
        last = now
        time.sleep(1.1)
    return last or 0.0


def proc_usage(pid: int) -> tuple[float, float]:
    """(CPU seconds, RSS MiB) of a process, from /proc (no psutil)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    rss = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("VmRSS:"))
    return cpu, rss / 1024


# ----- 3. refresh periods --------------------------------------------------------------------------


def refresh(h: Any, links: int, seconds: float) -> None:
    """Read each counter field back to back for ``seconds``; print how often value and timestamp changed."""
    request = [(fid, 0) for fid in REFRESH_FIELDS if links or fid in FF.PCIE_BYTES.ids]
    changes: dict[int, list[float]] = {fid: [] for fid, _ in request}
    ts_moves = {fid: 0 for fid, _ in request}
    last: dict[int, tuple[int, int]] = {}
    types: dict[int, str] = {}
    reads = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        values = pynvml.nvmlDeviceGetFieldValues(h, request)
        now = time.monotonic()
        reads += 1
        for (fid, _), fv in zip(request, values):
            if fv.nvmlReturn != pynvml.NVML_SUCCESS:
                types[fid] = CODES.get(fv.nvmlReturn, str(fv.nvmlReturn))
                continue
            types[fid] = VALUE_TYPES.get(fv.valueType, str(fv.valueType))
            value = int(FF.field_value(fv)[0])
            if fid in last:
                if value != last[fid][0]:
                    changes[fid].append(now)
                if fv.timestamp != last[fid][1]:
                    ts_moves[fid] += 1
            last[fid] = (value, fv.timestamp)
    print(f"  {reads} reads in {seconds:.1f} s ({seconds / max(reads, 1) * 1e6:.0f} us apart)")
    print(f"  {'field':<36} {'valueType':<20} {'value changes':>14} {'refresh (ms, median)':>21} {'timestamp moves':>16}")
    for fid, _ in request:
        times = changes[fid]
        period = statistics.median(b - a for a, b in zip(times, times[1:])) * 1e3 if len(times) > 2 else float("nan")
        print(f"  {fid:>3} {FIELD_NAMES.get(fid, ''):<32} {types.get(fid, '-'):<20} {len(times):>14} {period:>21.1f} "
              f"{ts_moves[fid]:>16}  {'(with the value)' if ts_moves[fid] <= len(times) + 1 else '(on every read)'}")


# ----- main ----------------------------------------------------------------------------------------


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gib", type=float, default=5 * 4, help="GiB copied per direction and GPU (default 20: five 32-bit wraps)")
    p.add_argument("--refresh-seconds", type=float, default=3.0, help="how long the refresh periods are measured")
    p.add_argument("--expect-scale", type=float, default=1.0,
                   help="multiply the bytes copied before comparing (a self-test of the check: 1.5 must fail)")
    p.add_argument("--out", default=os.environ.get("OUT", ""), help="folder for the metrics page and the agent log")
    args = p.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="gpu-smoke-out-"))
    out.mkdir(parents=True, exist_ok=True)
    result = Result()

    say("what NVML answers")
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        print(f"driver {pynvml.nvmlSystemGetDriverVersion()}, {count} GPU(s)")
        links = [dump_gpu(i, result) for i in range(count)]
    except pynvml.NVMLError as exc:
        print(f"NVML unusable: {exc}")
        return 1

    say("CUDA driver API")
    try:
        cuda = Cuda()
    except (OSError, RuntimeError) as exc:
        print(f"no CUDA driver to drive traffic with: {exc}")
        return 2
    nvml_of: dict[int, int] = {}
    by_bus = {bus_key(text(pynvml.nvmlDeviceGetPciInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).busId)): i for i in range(count)}
    for ordinal, bus in enumerate(cuda.bus):
        nvml_of[ordinal] = by_bus[bus_key(bus)]
        print(f"  CUDA device {ordinal} = bus {bus} = NVML GPU {nvml_of[ordinal]}")

    port = free_port()
    work = Path(tempfile.mkdtemp(prefix="gpu-smoke-"))
    cmd = [sys.executable, "-m", "exporter.node.main", "--nvml", "real", "--listen", f"127.0.0.1:{port}",
           "--node-name", socket.gethostname(), "--kubeconfig", str(work / "no-kubeconfig"),
           "--pod-resources-socket", str(work / "no-kubelet.sock"), "--sysfs", str(work), "--sample-interval", "1",
           "--log-level", "info"]
    say(f"agent on 127.0.0.1:{port}")
    log = (out / "agent.log").open("wb")
    agent = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=log, stderr=log)
    try:
        for _ in range(150):
            try:
                state = scrape(port)
                if state.get(("gangscope_source_up", "nvml", "")) == 1 and sum(
                        1 for k in state if k[0] == "gangscope_gpu_up") == count:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        else:
            print("the agent did not come up:\n" + (out / "agent.log").read_text()[-3000:])
            return 1
        time.sleep(2.5)  # probes done, fast PCIe reads running
        before = scrape(port)
        cpu0, wall0 = proc_usage(agent.pid)[0], time.monotonic()
        result.check(all(before.get(("gangscope_gpu_up", str(i), ""), 0) == 1 for i in range(count)), "every GPU up in the agent")

        say("refresh periods under load (host-to-device copies on CUDA device 0)")
        stop = threading.Event()

        def load() -> None:
            while not stop.is_set():
                cuda.copy("h2d", 0, CHUNK)

        loader = threading.Thread(target=load, daemon=True)
        loader.start()
        refresh(pynvml.nvmlDeviceGetHandleByIndex(nvml_of[0]), links[nvml_of[0]], args.refresh_seconds)
        stop.set()
        loader.join()

        say(f"exact bytes: {args.gib:g} GiB per direction and GPU, counters may add up to {OVERHEAD:.0%}")
        nbytes = int(args.gib * 2**30)
        for kind, metric in (("h2d", "gangscope_pcie_receive_bytes_total"), ("d2h", "gangscope_pcie_transmit_bytes_total")):
            for ordinal in range(cuda.count):
                gpu = str(nvml_of[ordinal])
                start = settled(port, metric, gpu)
                t0 = time.monotonic()
                moved = cuda.copy(kind, ordinal, nbytes)
                dt = time.monotonic() - t0
                delta = settled(port, metric, gpu) - start
                want = moved * args.expect_scale
                result.check(want <= delta <= want * (1 + OVERHEAD),
                             f"GPU {gpu} {kind}: {moved} bytes in {dt:.2f} s ({moved / dt / 1e9:.1f} GB/s, "
                             f"{moved / 2**32:.1f} x 2^32), {metric[len('gangscope_'):]} rose {delta:.0f} "
                             f"({delta / want - 1:+.2%})")
        if cuda.count < 2:
            print("  NOT EXERCISED  NVLink: one GPU, no peer to copy to (no NVLink check ran)")
        else:
            for ordinal in range(cuda.count):
                peer = (ordinal + 1) % cuda.count
                src, dst = str(nvml_of[ordinal]), str(nvml_of[peer])
                tx0 = settled(port, "gangscope_nvlink_transmit_bytes_total", src)
                rx0 = settled(port, "gangscope_nvlink_receive_bytes_total", dst)
                moved = cuda.copy("p2p", ordinal, nbytes, peer)
                want = moved * args.expect_scale
                tx = settled(port, "gangscope_nvlink_transmit_bytes_total", src) - tx0
                rx = settled(port, "gangscope_nvlink_receive_bytes_total", dst) - rx0
                result.check(want <= tx <= want * (1 + OVERHEAD), f"GPU {src} -> {dst}: NVLink transmit on {src} rose {tx:.0f} "
                                                                 f"for {moved} bytes ({tx / want - 1:+.2%})")
                result.check(want <= rx <= want * (1 + OVERHEAD), f"GPU {src} -> {dst}: NVLink receive on {dst} rose {rx:.0f} "
                                                                 f"({rx / want - 1:+.2%})")
            for i in range(count):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                fid = FF.NVLINK_DATA.ids[0]
                vals = pynvml.nvmlDeviceGetFieldValues(h, [(fid, ALL_LINKS)] + [(fid, link) for link in range(links[i])])
                if vals[0].nvmlReturn == pynvml.NVML_SUCCESS:
                    per_link = sum(int(v.value.ullVal) for v in vals[1:] if v.nvmlReturn == pynvml.NVML_SUCCESS)
                    result.check(abs(int(vals[0].value.ullVal) - per_link) <= links[i],
                                 f"GPU {i}: NVLink per-link sum {per_link} KiB = all-links total {vals[0].value.ullVal} KiB")

        say("health")
        after = scrape(port)
        for i in range(count):
            g = str(i)
            for metric in ("gangscope_gpu_errors_total", "gangscope_pcie_read_gaps_total"):
                b, a = before.get((metric, g, ""), 0.0), after.get((metric, g, ""), 0.0)
                result.check(a == b, f"GPU {g}: {metric} {b:g} -> {a:g}")
            result.check(after.get(("gangscope_gpu_up", g, ""), 0) == 1, f"GPU {g} still up")
        cpu1, rss = proc_usage(agent.pid)
        print(f"  agent CPU {100 * (cpu1 - cpu0) / (time.monotonic() - wall0):.2f}% of one core during the run, RSS {rss:.1f} MiB")
    finally:
        try:
            (out / "metrics.prom").write_bytes(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read())
        except OSError:
            pass
        agent.terminate()
        try:
            agent.wait(timeout=10)
        except subprocess.TimeoutExpired:
            agent.kill()
        log.close()
        print(f"\nmetrics page and agent log: {out}")
    say("result: " + ("PASS" if not result.failures else f"FAIL ({len(result.failures)} check(s))"))
    return 0 if not result.failures else 1


if __name__ == "__main__":
    sys.exit(main())

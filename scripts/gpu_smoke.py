"""gpu-smoke: what the driver answers, and whether the agent's counters match traffic we drive.

Run through ``scripts/gpu-smoke`` (which picks the Python environment). Three steps:

1. **Fields.** One ``nvmlDeviceGetFieldValues`` call per GPU with every field family the agent
   reads, on every link, then the auxiliary calls (fabric info v3/v2, platform info, PCIe
   throughput, the legacy error counter): each field's return code and ``valueType``, and the
   wall time of the calls the agent repeats (the per-call cost the benchmark assumes).
2. **Traffic.** The agent runs as it would in a cluster (``--nvml real``, 1 s samples). A CUDA copy
   loop (torch, else cupy) drives known traffic in phases: host-to-device copies (PCIe receive),
   device-to-host copies (PCIe transmit), and with two or more GPUs peer copies around a ring
   (NVLink transmit on the sender, receive on the next GPU), measuring its own bandwidth.
3. **Compare.** The agent's exported rate per GPU and direction, taken between its first and last
   new sample inside each phase, against the copy loop's: more than 20% apart fails.

``--sim PROFILE`` runs the same steps against the simulated NVML of that generation, whose rates
are known, so the script itself is tested where no GPU is (tests/test_gpu_smoke.py).
Exit status: 0 when every comparison passed, 1 when one failed or NVML/the agent did not work,
2 when no traffic could be driven (no CUDA): the field table is still printed.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
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

TOLERANCE = 0.20
CODES = {v: k[len("NVML_"):] for k, v in vars(pynvml).items() if k.startswith(("NVML_ERROR_", "NVML_SUCCESS")) and isinstance(v, int)}
VALUE_TYPES = {v: k[len("NVML_VALUE_TYPE_"):].lower() for k, v in vars(pynvml).items()
               if k.startswith("NVML_VALUE_TYPE_") and k != "NVML_VALUE_TYPE_COUNT" and isinstance(v, int)}
FIELD_NAMES = {v: k[len("NVML_FI_DEV_"):] for k, v in vars(pynvml).items() if k.startswith("NVML_FI_DEV_") and isinstance(v, int)}


def say(title: str) -> None:
    print(f"\n=== {title}", flush=True)


# ----- 1. fields ---------------------------------------------------------------------------------


def timed(fn: Callable[[], Any], n: int = 200) -> tuple[float, float]:
    """p50 and p99 wall time of ``fn`` in microseconds."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    q = statistics.quantiles(times, n=100)
    return q[49], q[98]


def answer(call: Callable[[], Any]) -> str:
    try:
        call()
        return "SUCCESS"
    except pynvml.NVMLError as exc:
        return CODES.get(exc.value, str(exc.value))


def dump_fields(lib: Any) -> None:
    lib.nvmlInit()
    say(f"driver {lib.nvmlSystemGetDriverVersion()}, {lib.nvmlDeviceGetCount()} GPU(s)")
    for index in range(lib.nvmlDeviceGetCount()):
        h = lib.nvmlDeviceGetHandleByIndex(index)
        links_fv = lib.nvmlDeviceGetFieldValues(h, [pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT])[0]
        links = int(FF.field_value(links_fv)[0]) if links_fv.nvmlReturn == pynvml.NVML_SUCCESS else 0
        gen = answer(lambda: lib.nvmlDeviceGetMaxPcieLinkGeneration(h))
        print(f"\nGPU {index}: {lib.nvmlDeviceGetName(h)} {lib.nvmlDeviceGetUUID(h)}, {links} NVLink links, "
              f"max PCIe gen {lib.nvmlDeviceGetMaxPcieLinkGeneration(h) if gen == 'SUCCESS' else gen}")
        request = [(fid, link) for fam in FF.FIELD_FAMILIES if fam.per_link for link in range(max(links, 1)) for fid in fam.ids]
        request += [(fid, 0) for fid in FF.PCIE_BYTES.ids]
        request += [(fid, 0xFFFFFFFF) for fid in FF.NVLINK_DATA.ids]  # the all-links aggregate (nvml.h line 2599)
        values = lib.nvmlDeviceGetFieldValues(h, request)
        rows: dict[tuple[int, bool], dict[tuple[str, str], int]] = {}
        for (fid, scope), fv in zip(request, values):
            vt = VALUE_TYPES.get(fv.valueType, str(fv.valueType)) if fv.nvmlReturn == pynvml.NVML_SUCCESS else "-"
            key = (CODES.get(fv.nvmlReturn, str(fv.nvmlReturn)), vt)
            row = rows.setdefault((fid, scope == 0xFFFFFFFF), {})
            row[key] = row.get(key, 0) + 1
        print(f"  {'field':<48} {'family':<22} {'answers (return code / valueType x scopes)'}")
        for (fid, aggregate), answers in sorted(rows.items()):
            fam = FF.FAMILY_OF[fid].name
            name = FIELD_NAMES.get(fid, str(fid)) + (" (UINT_MAX)" if aggregate else "")
            text = ", ".join(f"{code}/{vt} x{n}" for (code, vt), n in sorted(answers.items()))
            print(f"  {fid:>3} {name:<44} {fam:<22} {text}")
        v3 = pynvml.c_nvmlGpuFabricInfo_v3_t()
        v2 = pynvml.c_nvmlGpuFabricInfoV_t()
        platform = pynvml.c_nvmlPlatformInfo_v2_t()
        calls = {
            "nvmlDeviceGetGpuFabricInfoV (v3)": lambda: lib.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(v3)),
            "nvmlDeviceGetGpuFabricInfoV (v2)": lambda: lib.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(v2)),
            "nvmlDeviceGetPlatformInfo (v2)": lambda: lib.nvmlDeviceGetPlatformInfo(h, ctypes.byref(platform)),
            "nvmlDeviceGetPcieThroughput (TX)": lambda: lib.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_TX_BYTES),
            "nvmlDeviceGetNvLinkErrorCounter (link 0, replay)":
                lambda: lib.nvmlDeviceGetNvLinkErrorCounter(h, 0, pynvml.NVML_NVLINK_ERROR_DL_REPLAY),
            "nvmlDeviceGetCurrPcieLinkGeneration": lambda: lib.nvmlDeviceGetCurrPcieLinkGeneration(h),
        }
        for name, call in calls.items():
            print(f"  {name:<52} {answer(call)}")
        if answer(calls["nvmlDeviceGetGpuFabricInfoV (v3)"]) == "SUCCESS":
            print(f"  fabric: state {v3.state}, status {CODES.get(v3.status, v3.status)}, clique {v3.cliqueId}, "
                  f"cluster {bytes(v3.clusterUuid).hex()}, healthMask {v3.healthMask:#x}, summary {v3.healthSummary}")
        if answer(calls["nvmlDeviceGetPlatformInfo (v2)"]) == "SUCCESS":
            from exporter.node.hardware import read_platform

            print(f"  platform: {read_platform(platform)}")
        pcie = [(fid, 0) for fid in FF.PCIE_BYTES.ids]
        batch = [(fid, link) for link in range(links) for fid in (*FF.NVLINK_DATA.ids, *FF.NVLINK_RAW.ids, pynvml.NVML_FI_DEV_NVLINK_GET_STATE)]
        print("  wall time per call, p50 / p99 over 200 calls:")
        for name, call in (("PCIe fields 197+198 (the fast read)", lambda: lib.nvmlDeviceGetFieldValues(h, pcie)),
                           (f"the sample's batch ({len(batch)} fields)", lambda: lib.nvmlDeviceGetFieldValues(h, batch or pcie)),
                           ("nvmlDeviceGetCurrPcieLinkGeneration", calls["nvmlDeviceGetCurrPcieLinkGeneration"])):
            p50, p99 = timed(call)
            print(f"    {name:<44} {p50:9.1f} / {p99:9.1f} us")
        cpu0 = time.process_time()
        wall0 = time.perf_counter()
        for _ in range(200):
            lib.nvmlDeviceGetFieldValues(h, pcie)
        share = (time.process_time() - cpu0) / (time.perf_counter() - wall0)
        print(f"    CPU time / wall time of the fast read: {share:.2f} (1: the driver spins, 0: it waits)")


# ----- 2. traffic ----------------------------------------------------------------------------------

LOADER = r'''
import json, sys, time
kind, seconds = sys.argv[1], float(sys.argv[2])
size = 256 * 2**20
try:
    import torch
    assert torch.cuda.is_available()
    n = torch.cuda.device_count()
    host = torch.empty(size, dtype=torch.uint8).pin_memory()
    bufs = [torch.empty(size, dtype=torch.uint8, device=f"cuda:{i}") for i in range(n)]

    def step(i):
        with torch.cuda.device(i):
            if kind == "h2d":
                bufs[i].copy_(host, non_blocking=True)
            elif kind == "d2h":
                host.copy_(bufs[i], non_blocking=True)
            else:
                bufs[(i + 1) % n].copy_(bufs[i], non_blocking=True)

    def sync():
        for i in range(n):
            torch.cuda.synchronize(i)
except Exception as exc:
    import cupy, numpy
    n = cupy.cuda.runtime.getDeviceCount()
    bufs = []
    for i in range(n):
        with cupy.cuda.Device(i):
            bufs.append(cupy.empty(size, dtype=cupy.uint8))
    host = cupy.cuda.alloc_pinned_memory(size)
    hview = numpy.frombuffer(host, numpy.uint8, size)

    def step(i):
        with cupy.cuda.Device(i):
            if kind == "h2d":
                bufs[i].set(hview)
            elif kind == "d2h":
                bufs[i].get(out=hview)
            else:
                j = (i + 1) % n
                cupy.cuda.runtime.memcpyPeer(bufs[j].data.ptr, j, bufs[i].data.ptr, i, size)

    def sync():
        for i in range(n):
            cupy.cuda.Device(i).synchronize()

moved = [0] * n
sync()
t0 = time.perf_counter()
while time.perf_counter() - t0 < seconds:
    for i in range(n):
        step(i)
        moved[i] += size
    sync()
dt = time.perf_counter() - t0
print(json.dumps({"kind": kind, "gpus": n, "rate": [m / dt for m in moved]}), flush=True)
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict[tuple[str, str, str], float]:
    """(metric, gpu, direction-or-link) -> value, summing NVLink links per GPU."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[tuple[str, str, str], float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.startswith(("gangscope_nvlink_transmit", "gangscope_nvlink_receive", "gangscope_pcie_transmit",
                                  "gangscope_pcie_receive")) and s.name.endswith("_bytes_total"):
                key = (s.name, s.labels["gpu"], "")
                out[key] = out.get(key, 0.0) + s.value
            elif s.name in ("gangscope_gpu_up", "gangscope_source_up"):
                out[(s.name, s.labels.get("gpu", s.labels.get("source", "")), "")] = s.value
    return out


def watch(port: int, seconds: float) -> dict[tuple[str, str, str], float]:
    """Exported bytes/s per counter over ``seconds``, between the first and the last new sample seen
    (polling every 0.1 s): rates at sample boundaries, not diluted by the 1 s sample grid."""
    first: dict[tuple, tuple[float, float]] = {}
    last: dict[tuple, tuple[float, float]] = {}
    seen: dict[tuple, float] = {}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        now = time.monotonic()
        for key, value in scrape(port).items():
            if not key[0].endswith("_bytes_total"):
                continue
            if key in seen and value != seen[key]:
                first.setdefault(key, (now, value))
                last[key] = (now, value)
            seen[key] = value
        time.sleep(0.1)
    return {k: (last[k][1] - first[k][1]) / (last[k][0] - first[k][0]) for k in last if last[k][0] > first[k][0]}


def compare(title: str, pairs: list[tuple[str, float, float]], scale: float) -> bool:
    """(what, copy loop bytes/s, exported bytes/s) rows; True when every one is within TOLERANCE."""
    print(f"\n  {title}")
    print(f"    {'counter':<50} {'copy loop GB/s':>15} {'exported GB/s':>15} {'ratio':>7}")
    ok = True
    for what, expected, got in pairs:
        expected *= scale
        ratio = got / expected if expected else float("inf")
        good = abs(ratio - 1) <= TOLERANCE
        ok &= good
        print(f"    {what:<50} {expected / 1e9:15.2f} {got / 1e9:15.2f} {ratio:7.2f}  {'ok' if good else 'FAIL'}")
    return ok


def sim_expected(profile: str) -> list[tuple[str, str, float]]:
    """What the simulated NVML of ``profile`` moves per GPU: (metric, gpu, bytes/s)."""
    from exporter.sim.nvml import SimNvml

    sim = SimNvml(profile=profile)
    nvlink = FF.NVLINK_DATA.ids if sim.profile.field_error(FF.NVLINK_DATA.ids[0]) is None else FF.NVLINK5_BYTES.ids
    out = []
    for g in sim.gpus:
        out.append(("gangscope_pcie_transmit_bytes_total", str(g.index), sim.pcie_rate(g, FF.PCIE_BYTES.ids[0])))
        out.append(("gangscope_pcie_receive_bytes_total", str(g.index), sim.pcie_rate(g, FF.PCIE_BYTES.ids[1])))
        for metric, fid in zip(("gangscope_nvlink_transmit_bytes_total", "gangscope_nvlink_receive_bytes_total"), nvlink):
            out.append((metric, str(g.index), sum(sim.link_rate(g, link, fid) for link in range(g.links))))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=8.0, help="length of each traffic phase (default 8)")
    p.add_argument("--sim", metavar="PROFILE", help="run against the simulated NVML of this GPU generation")
    p.add_argument("--expect-scale", type=float, default=1.0,
                   help="multiply the copy loop's figures before comparing (a self-test of the check: 1.5 must fail)")
    p.add_argument("--out", default=os.environ.get("OUT", ""), help="folder for the scrapes and the agent log")
    args = p.parse_args()

    if args.sim:
        from exporter.sim.nvml import SimNvml

        lib: Any = SimNvml(profile=args.sim)
    else:
        lib = pynvml
    say("fields and calls, as the driver answers them")
    try:
        dump_fields(lib)
    except pynvml.NVMLError as exc:
        print(f"NVML unusable: {exc}")
        return 1

    port = free_port()
    work = Path(tempfile.mkdtemp(prefix="gpu-smoke-"))
    agent_cmd = [sys.executable, "-m", "exporter.node.main", "--nvml", "sim" if args.sim else "real",
                 *(["--sim-profile", args.sim] if args.sim else []), "--listen", f"127.0.0.1:{port}",
                 "--node-name", socket.gethostname(), "--kubeconfig", str(work / "no-kubeconfig"),
                 "--pod-resources-socket", str(work / "no-kubelet.sock"), "--sysfs", str(work), "--sample-interval", "1",
                 "--log-level", "info"]
    say(f"agent on 127.0.0.1:{port}: {' '.join(agent_cmd[2:])}")
    log = (work / "agent.log").open("wb")
    agent = subprocess.Popen(agent_cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=log, stderr=log)
    try:
        for _ in range(100):
            try:
                if scrape(port).get(("gangscope_source_up", "nvml", "")) == 1 and any(
                        k[0] == "gangscope_gpu_up" for k in scrape(port)):
                    break
            except OSError:
                pass
            time.sleep(0.2)
        else:
            print("the agent did not come up:\n" + (work / "agent.log").read_text()[-3000:])
            return 1
        time.sleep(2.5)  # first samples, probes, the fast PCIe reads starting
        state = scrape(port)
        down = [k[1] for k, v in state.items() if k[0] == "gangscope_gpu_up" and v != 1]
        if down:
            print(f"GPUs down in the agent: {down}")
            return 1
        ok = True
        say("traffic")
        if args.sim:
            got = watch(port, args.seconds)
            ok = compare(f"simulated {args.sim} traffic ({args.seconds:.0f} s)",
                         [(f"GPU {gpu} {metric[len('gangscope_'):-len('_bytes_total')]}", rate, got.get((metric, gpu, ""), 0.0))
                          for metric, gpu, rate in sim_expected(args.sim)], args.expect_scale)
        else:
            count = pynvml.nvmlDeviceGetCount()
            phases = [("h2d", "gangscope_pcie_receive_bytes_total", 0), ("d2h", "gangscope_pcie_transmit_bytes_total", 0)]
            if count > 1:
                phases += [("p2p", "gangscope_nvlink_transmit_bytes_total", 0), ("p2p", "gangscope_nvlink_receive_bytes_total", 1)]
            done: dict[str, tuple[dict, dict]] = {}
            for kind, _, _ in phases:
                if kind in done:
                    continue
                loader = subprocess.Popen([sys.executable, "-c", LOADER, kind, str(args.seconds + 3)], stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True)
                time.sleep(1.5)
                got = watch(port, args.seconds)
                out, err = loader.communicate(timeout=args.seconds + 60)
                if loader.returncode != 0 or not out.strip():
                    print(f"no CUDA copy loop ({err.strip().splitlines()[-1] if err.strip() else 'no output'}): "
                          "install torch or cupy to drive traffic")
                    return 2
                done[kind] = (json.loads(out.strip().splitlines()[-1]), got)
            for kind, metric, shift in phases:
                measured, got = done[kind]
                n = measured["gpus"]
                rows = [(f"GPU {(i + shift) % n} {metric[len('gangscope_'):-len('_bytes_total')]}", measured["rate"][i],
                         got.get((metric, str((i + shift) % n), ""), 0.0)) for i in range(n)]
                ok &= compare(f"{kind} copies, {args.seconds:.0f} s", rows, args.expect_scale)
        import psutil

        proc = psutil.Process(agent.pid)
        c0, w0 = proc.cpu_times(), time.monotonic()
        time.sleep(5)
        c1, w1 = proc.cpu_times(), time.monotonic()
        say(f"agent CPU: {((c1.user + c1.system) - (c0.user + c0.system)) / (w1 - w0) * 100:.2f}% of one core, "
            f"RSS {proc.memory_info().rss / 2**20:.1f} MiB")
        if args.out:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            (Path(args.out) / "metrics.prom").write_bytes(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read())
        say("result: " + ("PASS: every exported rate is within 20% of the traffic driven" if ok else "FAIL"))
        return 0 if ok else 1
    finally:
        agent.terminate()
        try:
            agent.wait(timeout=10)
        except subprocess.TimeoutExpired:
            agent.kill()
        log.close()
        if args.out:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            (Path(args.out) / "agent.log").write_bytes((work / "agent.log").read_bytes())


if __name__ == "__main__":
    sys.exit(main())

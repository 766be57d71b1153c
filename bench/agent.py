"""Benchmark: the node agent on a simulated 8-GPU x 18-link node. One command, prints a table.

    .venv/bin/python bench/agent.py [--scrapes 1000] [--idle 20]

The agent runs as its own process (``gangscope agent --nvml sim``, 1 s sample interval, a real
gRPC kubelet with 8 single-GPU pods, the fixture sysfs tree), so RSS and CPU are the agent's
alone. The simulated NVML answers in microseconds, so the figures are gangscope's own cost:

- scrape latency p50/p99 over ``--scrapes`` sequential scrapes (Prometheus text, and
  OpenMetrics with gzip as Prometheus asks for it), measured by the client;
- CPU per second of wall time while idle (sampler, pod-resources poller, fabric reader), from
  the process's CPU times over ``--idle`` seconds without scrapes;
- RSS after warm-up and after all scrapes.

Targets (issue 4): scrape p99 < 10 ms, sampler < 1% of a core at 1 s, RSS < 60 MB.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from exporter.sim.kubelet import SimContainer, SimKubelet, SimPod  # noqa: E402
from exporter.sim.nvml import SimNvml  # noqa: E402



def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


async def scrape_many(port: int, n: int, openmetrics_gzip: bool) -> tuple[list[float], int, int]:
    headers = {"Accept": "application/openmetrics-text; version=1.0.0", "Accept-Encoding": "gzip"} if openmetrics_gzip \
        else {"Accept": "text/plain", "Accept-Encoding": "identity"}
    times, size, lines = [], 0, 0
    async with aiohttp.ClientSession(auto_decompress=False) as s:
        for _ in range(n):
            t0 = time.perf_counter()
            async with s.get(f"http://127.0.0.1:{port}/metrics", headers=headers) as r:
                body = await r.read()
            times.append((time.perf_counter() - t0) * 1000)
            size = len(body)
            if not openmetrics_gzip:
                lines = body.count(b"\n")
    return times, size, lines


async def main(args: argparse.Namespace) -> None:
    sim = SimNvml()
    tmp = tempfile.mkdtemp(prefix="gsb-", dir="/tmp")
    sock = os.path.join(tmp, "kubelet.sock")
    kubelet = SimKubelet(sock, [SimPod("team-a", f"train-{i}", [SimContainer("trainer", [("nvidia.com/gpu", [g.uuid])])])
                                for i, g in enumerate(sim.gpus)])
    await kubelet.start()
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter.node.main", "--nvml", "sim", "--listen", f"127.0.0.1:{port}", "--sample-interval", "1",
         "--pod-resources-socket", sock, "--sysfs", str(ROOT / "tests/fixtures/sysfs"), "--node-name", "bench-node",
         "--kubeconfig", os.path.join(tmp, "no-kubeconfig"), "--log-level", "error"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    ps = psutil.Process(proc.pid)
    try:
        async with aiohttp.ClientSession() as s:
            for _ in range(200):
                try:
                    async with s.get(f"http://127.0.0.1:{port}/metrics") as r:
                        if b"gangscope_gpu_pod_info{" in await r.read():
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
            else:
                raise SystemExit("agent did not come up")
        await asyncio.sleep(3)  # warm-up: a few samples, first pod-resources answer
        rss_warm = ps.memory_info().rss
        c0, w0 = ps.cpu_times(), time.monotonic()
        await asyncio.sleep(args.idle)
        c1, w1 = ps.cpu_times(), time.monotonic()
        idle_cpu = ((c1.user + c1.system) - (c0.user + c0.system)) / (w1 - w0)
        text_times, text_size, lines = await scrape_many(port, args.scrapes, False)
        gz_times, gz_size, _ = await scrape_many(port, args.scrapes, True)
        rss_end = ps.memory_info().rss
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        await kubelet.stop()
        os.rmdir(tmp)

    rows = [
        ("node", "8 GPUs x 18 NVLink links (simulated NVML), 8 pods, 3 IB ports + 1 NIC", ""),
        ("series per scrape", f"{lines} lines", ""),
        ("scrape p50 / p99, text", f"{pct(text_times, 50):.2f} / {pct(text_times, 99):.2f} ms  ({text_size / 1024:.0f} KiB)",
         "p99 < 10 ms"),
        ("scrape p50 / p99, OpenMetrics+gzip", f"{pct(gz_times, 50):.2f} / {pct(gz_times, 99):.2f} ms  ({gz_size / 1024:.0f} KiB)",
         "p99 < 10 ms"),
        ("agent CPU while idle, 1 s samples", f"{idle_cpu * 100:.2f}% of one core", "< 1%"),
        ("RSS after warm-up / after scrapes", f"{rss_warm / 2**20:.1f} / {rss_end / 2**20:.1f} MiB", "< 60 MB"),
    ]
    width = max(len(r[0]) for r in rows)
    vwidth = max(len(r[1]) for r in rows)
    print(f"{'measure':<{width}} | {'value':<{vwidth}} | target")
    print(f"{'-' * width}-|-{'-' * vwidth}-|-------")
    for name, val, target in rows:
        print(f"{name:<{width}} | {val:<{vwidth}} | {target}")
    print(f"({args.scrapes} scrapes each, CPU over {args.idle:.0f} s idle, {os.cpu_count()} CPUs)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=1000)
    parser.add_argument("--idle", type=float, default=20.0)
    asyncio.run(main(parser.parse_args()))

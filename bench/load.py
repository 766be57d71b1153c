"""Benchmark: 100 concurrent scrapes of the collector and of the agent while watch events arrive.

    .venv/bin/python bench/load.py [--workloads 2000] [--rounds 10] [--concurrency 100] [--rate 200]

Three processes besides this one, so each figure is one process's own: the simulated API
server (a child process) holding a realistic cluster of ``--workloads`` Workloads and their
PodGroups (bench/cluster.py) and changing it at ``--rate`` changes/s with bench/cluster.py's
realistic stream (plus a Pod annotation change on the agent's node every tenth) for the whole
run; ``gangscope collector`` and ``gangscope agent --nvml sim`` (8 GPUs x 18 NVLink
links, the fixture sysfs tree, a real gRPC kubelet with 8 pods served from this process).

For each process and each format (Prometheus text; OpenMetrics with gzip, as Prometheus asks)
it fires ``--rounds`` bursts of ``--concurrency`` simultaneous scrapes and times each from
request to last byte, so a figure includes the wait behind the other 99 (the queueing is the
point). Every page must be complete (OpenMetrics ends with ``# EOF``) and parse with
prometheus_client's parsers; the table counts those that do not. The client is one asyncio
process; its own reading of 100 large bodies is part of what the slowest scrape waits for.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import hashlib
import multiprocessing as mp
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families as parse_text  # noqa: E402

from exporter.kube.resources import AGENT_NODE, AGENT_PODS, COLLECTOR_RESOURCES  # noqa: E402
from exporter.sim.kubelet import SimContainer, SimKubelet, SimPod  # noqa: E402
from exporter.sim.nvml import SimNvml  # noqa: E402

AGENT_NODE_NAME = "bench-node"
OM_GZIP = {"Accept": "application/openmetrics-text; version=1.0.0", "Accept-Encoding": "gzip"}
TEXT = {"Accept": "text/plain", "Accept-Encoding": "identity"}


# --- the simulated API server and its churn, in a child process -------------------------------


def agent_pod(i: int, generation: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"train-{i}", "namespace": "team-a", "labels": {"kueue.x-k8s.io/podset": "workers"},
                         "annotations": {"kueue.x-k8s.io/workload": f"job-{generation}"}},
            "spec": {"nodeName": AGENT_NODE_NAME}}


def serve_sim(n_workloads: int, n_nodes: int, rate: float, conn: Any, paused: Any) -> None:
    """Child process: serve a realistic cluster (bench/cluster.py), then change it at ``rate``
    changes/s with its realistic stream (bench/cluster.py's Churn) until killed; while
    ``paused`` is set, nothing changes. Every tenth step also changes a Pod on the agent's node.
    Reports ``(url, kubeconfig)`` once serving, then nothing."""
    from cluster import Churn, build_cluster  # bench/cluster.py

    from exporter.sim.apiserver import SimApiServer

    async def churn() -> None:
        # Keep the resume history short: hundreds of events/s for hours must not grow the simulator.
        sim = SimApiServer(bookmark_interval=30, history_limit=2000)
        for r in (*COLLECTOR_RESOURCES, AGENT_NODE, AGENT_PODS):
            sim.serve(r)
        cluster = build_cluster(n_workloads, n_nodes)
        sim.bulk_load(cluster.objects())
        sim.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": AGENT_NODE_NAME,
                    "labels": {"kubernetes.io/hostname": AGENT_NODE_NAME}}})
        for i in range(8):
            sim.create(agent_pod(i, 0))
        await sim.start()
        conn.send((sim.url, sim.kubeconfig()))
        stream = Churn(cluster)
        verbs = {"create": sim.create, "update": sim.update, "delete": sim.delete}
        step = 0
        start, tick = time.monotonic(), 0.02
        while True:
            if paused.is_set():
                await asyncio.sleep(tick)
                start, step = time.monotonic(), 0
                continue
            due = int((time.monotonic() - start) * rate)
            while step < due:
                for change in stream.next():
                    verbs[change.verb](change.obj)
                if step % 10 == 0:
                    sim.update(agent_pod(step // 10 % 8, step // 10))
                step += 1
            await asyncio.sleep(tick)

    asyncio.run(churn())


def start_sim(n_workloads: int, n_nodes: int, rate: float) -> tuple[BaseProcess, str, dict[str, Any], Any]:
    parent, child = mp.Pipe()
    paused = mp.get_context("fork").Event()
    proc = mp.get_context("fork").Process(target=serve_sim, args=(n_workloads, n_nodes, rate, child, paused), daemon=True)
    proc.start()
    url, kubeconfig = parent.recv()
    return proc, url, kubeconfig, paused


# --- the processes under test ----------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *argv], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def start_collector(kubeconfig: str, port: int, *extra: str) -> subprocess.Popen:
    return spawn(["-m", "exporter", "collector", "--kubeconfig", kubeconfig, "--listen", f"127.0.0.1:{port}",
                  "--log-level", "error", *extra])


def start_agent(kubeconfig: str, port: int, sock: str) -> subprocess.Popen:
    return spawn(["-m", "exporter.node.main", "--nvml", "sim", "--listen", f"127.0.0.1:{port}", "--sample-interval", "1",
                  "--pod-resources-socket", sock, "--sysfs", str(ROOT / "tests/fixtures/sysfs"),
                  "--node-name", AGENT_NODE_NAME, "--kubeconfig", kubeconfig, "--log-level", "error"])


async def wait_for(port: int, marker: bytes, proc: subprocess.Popen, timeout: float = 300) -> None:
    """Until ``/metrics`` contains ``marker`` (the process has synced what the benchmark needs)."""
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise SystemExit(f"process exited {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
            try:
                async with s.get(f"http://127.0.0.1:{port}/metrics", headers=TEXT) as r:
                    if marker in await r.read():
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    raise SystemExit(f"port {port}: {marker!r} not served in {timeout:.0f} s")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# --- measuring -------------------------------------------------------------------------------


class Pages:
    """Collects pages during the bursts and checks them afterwards (so parsing does not slow the
    client while it is timing): complete and parseable; byte-identical pages are parsed once.
    Under churn nearly every page differs: past ``KEEP`` distinct pages, a page is only checked
    to be complete when it arrives (it decompresses and ends as its format must), not kept."""

    KEEP = 20

    def __init__(self, openmetrics: bool, gzipped: bool) -> None:
        self.openmetrics, self.gzipped = openmetrics, gzipped
        self.bad = 0
        self.samples = 0
        self._bodies: dict[bytes, bytes] = {}
        self._count: dict[bytes, int] = {}
        self._seen: set[bytes] = set()

    def add(self, body: bytes) -> None:
        key = hashlib.sha256(body).digest()
        self._seen.add(key)
        if key in self._bodies or len(self._bodies) < self.KEEP:
            self._bodies.setdefault(key, body)
            self._count[key] = self._count.get(key, 0) + 1
        elif not self._complete(body):
            self.bad += 1

    def _complete(self, body: bytes) -> bool:
        try:
            text = gzip.decompress(body) if self.gzipped else body
        except (OSError, EOFError):
            return False
        return text.endswith(b"# EOF\n" if self.openmetrics else b"\n")

    def check(self) -> None:
        for key, body in self._bodies.items():
            if not self._parses(body):
                self.bad += self._count[key]

    def _parses(self, body: bytes) -> bool:
        try:
            text = (gzip.decompress(body) if self.gzipped else body).decode()
            if self.openmetrics and not text.endswith("# EOF\n"):
                return False
            families = list((parse_openmetrics if self.openmetrics else parse_text)(text))
        except (OSError, EOFError, UnicodeDecodeError, ValueError):
            return False
        self.samples = sum(len(f.samples) for f in families)
        return True

    @property
    def distinct(self) -> int:
        return len(self._seen)


async def bursts(port: int, headers: dict[str, str], rounds: int, concurrency: int) -> tuple[list[float], Pages, int]:
    """``rounds`` bursts of ``concurrency`` simultaneous scrapes: latencies (ms), pages, page bytes."""
    pages = Pages("openmetrics" in headers["Accept"], headers["Accept-Encoding"] == "gzip")
    times: list[float] = []
    size = 0

    async def one(session: aiohttp.ClientSession) -> tuple[float, bytes, int]:
        t0 = time.perf_counter()
        async with session.get(f"http://127.0.0.1:{port}/metrics", headers=headers) as r:
            body = await r.read()
            status = r.status
        return (time.perf_counter() - t0) * 1000, body, status

    connector = aiohttp.TCPConnector(limit=concurrency, force_close=True)  # each scrape its own connection
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as s:
        for _ in range(rounds):
            for ms, body, status in await asyncio.gather(*(one(s) for _ in range(concurrency))):
                times.append(ms)
                size = len(body)
                if status == 200:
                    pages.add(body)
                else:
                    pages.bad += 1
    return times, pages, size


def pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    print(" | ".join(h.ljust(w) for h, w in zip(headers, widths)))
    print("-|-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(c.ljust(w) for c, w in zip(r, widths)))


async def measure(name: str, port: int, proc: subprocess.Popen, args: argparse.Namespace) -> list[list[str]]:
    rows = []
    ps = psutil.Process(proc.pid)
    for label, headers in (("text", TEXT), ("OpenMetrics+gzip", OM_GZIP)):
        c0, t0 = ps.cpu_times(), time.monotonic()
        times, pages, size = await bursts(port, headers, args.rounds, args.concurrency)
        c1, elapsed = ps.cpu_times(), time.monotonic() - t0
        cpu = ((c1.user + c1.system) - (c0.user + c0.system)) / elapsed
        pages.check()
        rows.append([name, label, f"{pages.samples:,}", f"{size / 1024:,.0f} KiB", str(len(times)),
                     f"{pct(times, 50):.1f}", f"{pct(times, 99):.1f}", f"{max(times):.1f}",
                     f"{pages.bad}", f"{pages.distinct}", f"{cpu * 100:.0f}%", f"{ps.memory_info().rss / 2**20:.0f} MiB"])
    return rows


async def main(args: argparse.Namespace) -> None:
    sim_proc, url, kubeconfig, _ = start_sim(args.workloads, args.nodes, args.rate)
    tmp = tempfile.mkdtemp(prefix="gsload-", dir="/tmp")
    kc = os.path.join(tmp, "kubeconfig")
    Path(kc).write_bytes(orjson.dumps(kubeconfig))
    sock = os.path.join(tmp, "kubelet.sock")
    nvml = SimNvml()  # the agent's simulated GPUs have the same UUIDs: the kubelet can name them
    kubelet = SimKubelet(sock, [SimPod("team-a", f"train-{i}", [SimContainer("trainer", [("nvidia.com/gpu", [g.uuid])])])
                                for i, g in enumerate(nvml.gpus)])
    await kubelet.start()
    collector_port, agent_port = free_port(), free_port()
    collector = start_collector(kc, collector_port)
    agent = start_agent(kc, agent_port, sock)
    token = kubeconfig["users"][0]["user"]["token"]

    async def resource_version() -> int:  # one per change, across all resources
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as s:
            async with s.get(url + "/api/v1/pods", params={"limit": "1"}) as r:
                return int((await r.json())["metadata"]["resourceVersion"])

    try:
        await wait_for(collector_port, b"gangscope_workload_info{", collector)
        await wait_for(agent_port, b'gangscope_gpu_pod_info{', agent)
        await asyncio.sleep(2)  # warm-up: watch streams steady, a few NVML samples taken
        rv0, t0 = await resource_version(), time.monotonic()
        rows = await measure("collector", collector_port, collector, args)
        rows += await measure("agent", agent_port, agent, args)
        rate = (await resource_version() - rv0) / (time.monotonic() - t0)
    finally:
        stop(collector)
        stop(agent)
        await kubelet.stop()
        sim_proc.kill()
        sim_proc.join()
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)
    print_table(["process", "format", "samples", "page", "scrapes", "p50 ms", "p99 ms", "max ms",
                 "bad pages", "distinct pages", "server CPU", "RSS"], rows)
    print(f"({args.rounds} bursts of {args.concurrency} concurrent scrapes per row; collector: {args.workloads:,} Workloads "
          f"and their PodGroups (bench/cluster.py), {args.nodes:,} Nodes; agent: 8 GPUs x 18 NVLink links, 8 pods; "
          f"{rate:.0f} object changes/s during the scrapes; server CPU in % of one core; {os.cpu_count()} CPUs)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=2000)
    parser.add_argument("--nodes", type=int, default=1024)
    parser.add_argument("--rate", type=float, default=200.0, help="object changes per second (default 200)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=100)
    asyncio.run(main(parser.parse_args()))

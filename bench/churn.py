"""Benchmark: the collector under a realistic stream of changes, scraped while it runs.

    .venv/bin/python bench/churn.py [--workloads 20000] [--rates 200 1000] [--seconds 30]

Three processes, so each figure is one process's own:

* the simulated API server (a child process) serving a realistic cluster (bench/cluster.py:
  20,000 Workloads of ~16 hosts, their PodGroups, 16,384 Nodes) and changing it at each rate for
  ``--seconds`` through its watch streams: bench/cluster.py's Churn (condition updates of pending
  Workloads, admissions on new hosts, pods ready, evictions, finishes, deletes, new jobs,
  PodGroup phases). Each changed object carries the monotonic time it was sent in an annotation;
* the collector, in this process, pinned to one core, with its default flags;
* a scraper (a child process) scraping a gzip (as Prometheus asks) and an identity page, then
  pausing ``--scrape-pause`` seconds, timing each from request to last byte: many times the load
  of a Prometheus pair at a 15 s interval, so that p99 has samples.

Measured per rate: the events applied and the collector's CPU (one core), so events/s per core;
event-to-exposition latency (from the sim writing the change to its lines being in the
exposition, so any scrape after it serves them: queueing, HTTP, decode, parse, join, render)
p50/p99; scrape latency p50/p99 for gzip and identity during the stream, and their ratio (target:
gzip p99 under 1.5x identity p99); then prometheus_client's ``generate_latest`` plus gzip (its
HTTP handler's ``gzip.compress``) of the same samples, against gangscope's time to a complete
gzip response of a page that changed since the last scrape (target: at least 20x faster).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cluster import Churn, build_cluster  # noqa: E402
from collector import in_child  # noqa: E402

from exporter.kube.resources import COLLECTOR_RESOURCES  # noqa: E402

SENT = "bench.gangscope.dev/sent-ns"


def serve_sim(n: int, nodes: int, conn: Any, control: Any) -> None:  # child process
    from exporter.sim.apiserver import SimApiServer

    async def main() -> None:
        sim = SimApiServer(bookmark_interval=30, history_limit=20_000)
        for r in COLLECTOR_RESOURCES:
            sim.serve(r)
        cluster = build_cluster(n, nodes)
        sim.bulk_load(cluster.objects())
        await sim.start()
        conn.send((sim.url, sim.kubeconfig(), len(cluster.jobs)))
        churn = Churn(cluster)
        verbs = {"create": sim.create, "update": sim.update, "delete": sim.delete}
        loop = asyncio.get_running_loop()
        while True:
            rate, seconds = await loop.run_in_executor(None, control.recv)
            sent = 0
            start = time.monotonic()
            while (now := time.monotonic()) - start < seconds:
                due = int((now - start) * rate)
                while sent < due:
                    for change in churn.next():
                        meta = change.obj["metadata"]
                        meta.setdefault("annotations", {})[SENT] = str(time.monotonic_ns())
                        try:
                            verbs[change.verb](change.obj)
                        except (KeyError, ValueError):  # a job deleted twice by the stream: skip
                            continue
                        sent += 1
                await asyncio.sleep(0.002)
            control.send((sent, dict(churn.counts)))

    asyncio.run(main())


def scraper(port: int, seconds: float, pause: float, cores: list[int], conn: Any) -> None:  # child process
    if cores:
        os.sched_setaffinity(0, set(cores))  # not the collector's core

    async def main() -> dict[str, list[float]]:
        times: dict[str, list[float]] = {"gzip": [], "identity": []}
        async with aiohttp.ClientSession(auto_decompress=False) as s:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                for enc in ("gzip", "identity"):
                    t = time.perf_counter()
                    async with s.get(f"http://127.0.0.1:{port}/metrics", headers={"Accept-Encoding": enc}) as r:
                        await r.read()
                    times[enc].append((time.perf_counter() - t) * 1000)
                await asyncio.sleep(pause)
        return times

    conn.send(asyncio.run(main()))


class Timed:
    """A source's handler, timing each watch event from the sim's write to its exposition."""

    def __init__(self, inner: Any, latencies: list[float]) -> None:
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_lat", latencies)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._inner, name, value)

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        self._inner.apply(event_type, obj)
        sent = ((obj.get("metadata") or {}).get("annotations") or {}).get(SENT)
        if sent and event_type != "DELETED":
            self._lat.append((time.monotonic_ns() - int(sent)) / 1e6)


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def run(args: argparse.Namespace) -> None:
    from exporter.cluster.main import Collector, add_arguments, tune_gc
    from exporter.logs import setup_logging

    setup_logging("warning")
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if cores:
        os.sched_setaffinity(0, set(cores[:args.cores]))  # the collector: --cores cores (default one)
    parent, child = mp.Pipe()
    control, control_child = mp.Pipe()
    sim = mp.get_context("fork").Process(target=serve_sim, args=(args.workloads, args.nodes, child, control_child), daemon=True)
    sim.start()
    if cores and len(cores) > args.cores and sim.pid is not None:  # the sim (and the scraper it forks from): the other cores
        os.sched_setaffinity(sim.pid, set(cores[args.cores:]))
    url, kubeconfig, jobs = parent.recv()
    tmp = Path(tempfile.mkdtemp(prefix="gschurn-"))
    (tmp / "kubeconfig").write_bytes(orjson.dumps(kubeconfig))
    tune_gc()
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    collector = Collector(parser.parse_args(["--kubeconfig", str(tmp / "kubeconfig"), "--listen", "127.0.0.1:0"]))
    latencies: list[float] = []
    for source in ("workloads", "podgroups_coscheduling"):
        collector.handlers[source] = Timed(collector.handlers[source], latencies)
    t0 = time.perf_counter()
    await collector.start()
    await collector.wait_ready(600)
    sync = time.perf_counter() - t0
    proc = psutil.Process()
    print(f"{jobs:,} Workloads + PodGroups, {args.nodes:,} Nodes; synced in {sync:.1f} s; RSS {proc.memory_info().rss / 2**20:.0f} MiB")
    loop = asyncio.get_running_loop()
    rows = []
    for rate in args.rates:
        latencies.clear()
        cpu0 = proc.cpu_times()
        control.send((rate, args.seconds))
        scrapes = loop.run_in_executor(None, in_child, scraper, collector.port, args.seconds, args.scrape_pause,
                                           cores[args.cores:])
        sent, counts = await loop.run_in_executor(None, control.recv)
        times = await scrapes
        await asyncio.sleep(1)  # the last events drain
        cpu1 = proc.cpu_times()
        cpu = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
        rows.append((rate, sent, cpu, list(latencies), times, counts, proc.memory_info().rss))
    # prometheus_client on the same samples of a changed page: generate_latest + its gzip.compress,
    # against gangscope's complete gzip response of a page that changed since the last scrape.
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.metrics_core import Metric
    from prometheus_client.parser import text_string_to_metric_families

    async with aiohttp.ClientSession(auto_decompress=False) as s:
        changed: list[float] = []
        for _ in range(5):
            control.send((args.rates[-1], 0.5))
            await loop.run_in_executor(None, control.recv)
            await asyncio.sleep(0.5)
            t = time.perf_counter()
            async with s.get(f"http://127.0.0.1:{collector.port}/metrics", headers={"Accept-Encoding": "gzip"}) as r:
                body = await r.read()
            changed.append((time.perf_counter() - t) * 1000)
    families = list(text_string_to_metric_families(gzip.decompress(body).decode()))

    class Same:
        def collect(self) -> Iterator[Metric]:
            return iter(families)

    registry = CollectorRegistry()
    registry.register(Same())
    gen = []
    for _ in range(3):
        t = time.perf_counter()
        gzip.compress(generate_latest(registry))
        gen.append((time.perf_counter() - t) * 1000)
    await collector.stop()
    sim.kill()
    sim.join()
    (tmp / "kubeconfig").unlink()
    tmp.rmdir()

    print(f"{'rate/s':>6} {'events':>7} {'CPU s':>6} {'events/s/core':>13} {'e2e p50 ms':>10} {'e2e p99 ms':>10} "
          f"{'gzip p50':>8} {'gzip p99':>8} {'ident p50':>9} {'ident p99':>9} {'gz/id p99':>9} {'RSS MiB':>7}")
    for rate, sent, cpu, lat, times, counts, rss in rows:
        gz, ident = times["gzip"], times["identity"]
        print(f"{rate:>6} {sent:>7} {cpu:>6.1f} {sent / cpu if cpu else 0:>13,.0f} {pct(lat, .5):>10.1f} {pct(lat, .99):>10.1f} "
              f"{pct(gz, .5):>8.0f} {pct(gz, .99):>8.0f} {pct(ident, .5):>9.0f} {pct(ident, .99):>9.0f} "
              f"{pct(gz, .99) / pct(ident, .99):>9.2f} {rss / 2**20:>7.0f}")
        print(f"{'':>6} ({len(gz)} + {len(ident)} scrapes in {args.seconds:.0f} s; mix: "
              + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + ")")
    print("targets: 1,000 changes/s sustained on one core (events/s/core at least 1,000), event-to-exposition p99 "
          "under 1,000 ms, gzip scrape p99 under 1,000 ms, RSS under 450 MiB at 200 changes/s")
    for rate, sent, cpu, lat, times, counts, rss in rows:
        checks = [("events/s/core", sent / cpu >= 1000 if cpu else False) if rate >= 1000 else None,
                  ("e2e p99", pct(lat, .99) < 1000), ("gzip p99", pct(times["gzip"], .99) < 1000),
                  ("RSS", rss < 450 * 2**20) if rate <= 200 else None]
        print(f"{rate:>6}/s: " + ", ".join(f"{name} {'met' if ok else 'NOT MET'}" for name, ok in filter(None, checks)))
    print(f"load average (1 min) at the end: {os.getloadavg()[0]:.1f} (a shared machine: latencies move with it)")
    g, c = statistics.median(gen), statistics.median(changed)
    samples = sum(len(f.samples) for f in families)
    print(f"changed page, {samples:,} samples: gangscope complete gzip response {c:.0f} ms (median of 5); "
          f"prometheus_client generate_latest + gzip.compress {g:,.0f} ms: {g / c:.0f}x (target >= 20x)")
    print("(collector CPU includes serving the scrapes; events/s/core = events applied / collector CPU seconds)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", type=int, default=20_000)
    ap.add_argument("--nodes", type=int, default=16_384)
    ap.add_argument("--rates", type=int, nargs="+", default=[200, 1000])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--scrape-pause", type=float, default=1.0,
                    help="seconds between a gzip and an identity scrape and the next pair (default 1)")
    ap.add_argument("--cores", type=int, default=1, help="cores the collector may use (default 1)")
    asyncio.run(run(ap.parse_args()))

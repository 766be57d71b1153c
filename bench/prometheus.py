"""Benchmark: what the collector costs a real Prometheus scraping the benchmark cluster.

Run: ``.venv/bin/python bench/prometheus.py [--workloads 20000] [--nodes 16384] [--minutes 5]``.
Prints one table, the targets beside the figures.

The simulated API server (a child process) serves bench/cluster.py's cluster; ``gangscope
collector`` runs as its own process with its default flags; Debian's ``prometheus`` (2.42, the
package scripts/setup-env installs) scrapes it every 15 s for ``--minutes``, with no rules (what is
measured is the target's cost, not the rules'). Sampled every 15 s with psutil: Prometheus' and
the collector's RSS and CPU. At the end, from Prometheus' own API: its head series
(``prometheus_tsdb_head_series`` from its own /metrics), ``scrape_duration_seconds`` of the collector's target over the
run (first scrape, mean, max) and ``scrape_samples_scraped``; then the page once, identity and
gzip. The load average of the machine is printed beside the figures: on a shared machine, scrape
durations and CPU move with it.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import multiprocessing as mp
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from collector import _serve_sim, print_table  # noqa: E402
from load import free_port  # noqa: E402

INTERVAL = 15
TARGETS = {"rss": 1.5 * 2**30, "mean": 1.5, "first": 10.0}


async def wait_ready(session: aiohttp.ClientSession, url: str, proc: subprocess.Popen, what: str) -> None:
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode}")
        try:
            async with session.get(url) as r:
                if r.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.2)


async def query(session: aiohttp.ClientSession, base: str, expr: str, **params: Any) -> list[dict[str, Any]]:
    path = "query_range" if "start" in params else "query"
    async with session.get(f"{base}/api/v1/{path}", params={"query": expr, **{k: str(v) for k, v in params.items()}},
                           headers={"Accept-Encoding": "identity"}) as r:
        body = orjson.loads(await r.read())
    return body["data"]["result"]


async def run(args: argparse.Namespace) -> list[tuple[str, str]]:
    binary = shutil.which("prometheus")
    if binary is None:
        raise SystemExit("bench/prometheus.py needs Debian's prometheus (scripts/setup-env installs it)")
    parent, child = mp.Pipe()
    sim = mp.get_context("fork").Process(target=_serve_sim, args=(args.workloads, args.nodes, child), daemon=True)
    sim.start()
    _, kubeconfig, _ = parent.recv()
    work = Path(tempfile.mkdtemp(prefix="gsprom-"))
    kc = work / "kubeconfig"
    kc.write_bytes(orjson.dumps(kubeconfig))
    port, prom_port = free_port(), free_port()
    collector = subprocess.Popen([sys.executable, "-m", "exporter", "collector", "--kubeconfig", str(kc),
                                  "--listen", f"127.0.0.1:{port}", "--log-level", "error"],
                                 cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    prom: subprocess.Popen | None = None
    base = f"http://127.0.0.1:{prom_port}"
    try:
        async with aiohttp.ClientSession(auto_decompress=False, timeout=aiohttp.ClientTimeout(total=300)) as s:
            t0 = time.perf_counter()
            await wait_ready(s, f"http://127.0.0.1:{port}/readyz", collector, "the collector")
            sync = time.perf_counter() - t0
            (work / "prometheus.yml").write_text(
                f"global: {{scrape_interval: {INTERVAL}s, scrape_timeout: {INTERVAL}s}}\n"
                "scrape_configs:\n"
                f"  - job_name: gangscope-collector\n    static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n")
            prom = subprocess.Popen([binary, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'tsdb'}",
                                     f"--web.listen-address=127.0.0.1:{prom_port}"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            await wait_ready(s, f"{base}/-/ready", prom, "prometheus")
            start = time.time()
            pp, cp = psutil.Process(prom.pid), psutil.Process(collector.pid)
            p_cpu0, c_cpu0 = sum(pp.cpu_times()[:2]), sum(cp.cpu_times()[:2])
            p_rss, c_rss, loads = [], [], []
            while time.time() - start < args.minutes * 60:
                await asyncio.sleep(INTERVAL)
                p_rss.append(pp.memory_info().rss)
                c_rss.append(cp.memory_info().rss)
                loads.append(os.getloadavg()[0])
            elapsed = time.time() - start
            p_cpu, c_cpu = sum(pp.cpu_times()[:2]) - p_cpu0, sum(cp.cpu_times()[:2]) - c_cpu0
            end = time.time()
            async with s.get(f"{base}/metrics", headers={"Accept-Encoding": "identity"}) as r:
                own = (await r.read()).decode()
            head = next(float(line.split()[-1]) for line in own.splitlines() if line.startswith("prometheus_tsdb_head_series "))
            durations = await query(s, base, 'scrape_duration_seconds{job="gangscope-collector"}',
                                    start=start, end=end, step=INTERVAL)
            samples = await query(s, base, 'scrape_samples_scraped{job="gangscope-collector"}')
            d = [float(v) for _, v in durations[0]["values"]] if durations else []
            async with s.get(f"http://127.0.0.1:{port}/metrics", headers={"Accept-Encoding": "gzip"}) as r:
                zipped = await r.read()
            page = gzip.decompress(zipped)
    finally:
        for p in (prom, collector):
            if p is not None:
                p.terminate()
                p.wait(timeout=30)
        sim.kill()
        sim.join()
        shutil.rmtree(work, ignore_errors=True)

    def met(ok: bool) -> str:
        return "met" if ok else "NOT MET"

    first, mean = (d[0], statistics.fmean(d)) if d else (float("nan"), float("nan"))
    rss = max(p_rss)
    return [
        ("cluster", f"{args.workloads:,} Workloads and their PodGroups, {args.nodes:,} Nodes; collector at default flags"),
        ("run", f"{elapsed / 60:.1f} min at {INTERVAL} s, {len(d)} scrapes; load average {min(loads):.1f}-{max(loads):.1f} "
                f"(mean {statistics.fmean(loads):.1f})"),
        ("collector sync (start to /readyz)", f"{sync:.1f} s"),
        ("Prometheus head series", f"{head:,.0f}"),
        ("samples per scrape", f"{float(samples[0]['value'][1]):,.0f}" if samples else "?"),
        ("Prometheus RSS, last / max", f"{p_rss[-1] / 2**30:.2f} / {rss / 2**30:.2f} GiB  "
                                       f"(target under {TARGETS['rss'] / 2**30:.1f} GiB: {met(rss < TARGETS['rss'])})"),
        ("scrape_duration_seconds, first", f"{first:.2f} s  (target under {TARGETS['first']:.0f} s: {met(first < TARGETS['first'])})"),
        ("scrape_duration_seconds, mean / max", f"{mean:.2f} / {max(d, default=float('nan')):.2f} s  "
                                                f"(mean target under {TARGETS['mean']} s: {met(mean < TARGETS['mean'])})"),
        ("Prometheus CPU", f"{p_cpu / elapsed:.2f} cores"),
        ("collector RSS, last / max", f"{c_rss[-1] / 2**20:.0f} / {max(c_rss) / 2**20:.0f} MiB"),
        ("collector CPU", f"{c_cpu / elapsed:.2f} cores"),
        ("page, identity / gzip", f"{len(page) / 1e6:.1f} / {len(zipped) / 1e6:.1f} MB"),
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", type=int, default=20_000)
    p.add_argument("--nodes", type=int, default=16_384)
    p.add_argument("--minutes", type=float, default=5.0)
    print_table(asyncio.run(run(p.parse_args())))


if __name__ == "__main__":
    main()

"""Soak: the collector under steady churn; its memory must stop growing once steady.

    .venv/bin/python bench/soak.py [--minutes 10] [--rate 200] [--workloads 2000]

The simulated API server runs in a child process (bench/load.py's) with a realistic cluster of
``--workloads`` Workloads and their PodGroups (bench/cluster.py) and changes it at ``--rate``
changes/s for the whole run with bench/cluster.py's realistic stream: new jobs and deletions of
finished ones balance, so the live set stays about the same size while names, hosts and times
are always new (no label value, store key or cache entry is reused for long).
``gangscope collector`` runs as its own process; Prometheus is played by a scrape every
``--scrape-interval`` seconds (OpenMetrics, gzip). RSS of the collector process (psutil) is
sampled every 5 s.

Printed: RSS after the initial sync (start), at the end of the first third (steady: caches,
arenas and the watch history have filled), and at the end, with the change from steady to
end and the largest sample; also the change rate actually achieved, the scrapes that failed,
and whether the Workloads served at the end are the server's (the stream paused, the collector
caught up). Exit status 1 if RSS
grew more than ``--max-growth`` MiB from steady to end or a scrape failed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from load import OM_GZIP, free_port, start_collector, start_sim, stop, wait_for  # noqa: E402
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics  # noqa: E402

MiB = 2**20


async def scrape(session: aiohttp.ClientSession, port: int) -> set[tuple[str, str]]:
    """One Prometheus-like scrape; the Workloads it serves."""
    async with session.get(f"http://127.0.0.1:{port}/metrics", headers=OM_GZIP) as r:
        r.raise_for_status()
        text = await r.text()  # aiohttp undoes the gzip
    return {(s.labels["namespace"], s.labels["workload"]) for f in parse_openmetrics(text) for s in f.samples
            if s.name == "gangscope_workload_info"}


async def main(args: argparse.Namespace) -> int:
    sim_proc, url, kubeconfig, paused = start_sim(args.workloads, args.nodes, args.rate)
    tmp = tempfile.mkdtemp(prefix="gssoak-", dir="/tmp")
    kc = os.path.join(tmp, "kubeconfig")
    Path(kc).write_bytes(orjson.dumps(kubeconfig))
    token = kubeconfig["users"][0]["user"]["token"]
    port = free_port()
    collector = start_collector(kc, port)
    ps = psutil.Process(collector.pid)
    samples: list[tuple[float, float]] = []  # (seconds since start, RSS MiB)
    failures = 0
    scrapes = 0
    served: set[tuple[str, str]] = set()
    truth: set[tuple[str, str]] = set()

    async def resource_version(s: aiohttp.ClientSession) -> int:
        async with s.get(url + "/api/v1/pods", params={"limit": "1"}, headers={"Authorization": f"Bearer {token}"}) as r:
            return int((await r.json())["metadata"]["resourceVersion"])

    try:
        await wait_for(port, b"gangscope_workload_info{", collector)
        duration = args.minutes * 60
        async with aiohttp.ClientSession() as s:
            rv0, t0 = await resource_version(s), time.monotonic()
            next_scrape = t0
            while (now := time.monotonic()) - t0 < duration:
                if collector.poll() is not None:
                    raise SystemExit(f"collector exited {collector.returncode}")
                samples.append((now - t0, ps.memory_info().rss / MiB))
                if now >= next_scrape:
                    next_scrape += args.scrape_interval
                    scrapes += 1
                    try:
                        served = await scrape(s, port)
                    except (aiohttp.ClientError, ValueError) as e:
                        failures += 1
                        print(f"scrape failed: {type(e).__name__} {e}", file=sys.stderr)
                await asyncio.sleep(5)
            rate = (await resource_version(s) - rv0) / (time.monotonic() - t0)
            samples.append((time.monotonic() - t0, ps.memory_info().rss / MiB))
            paused.set()  # the stream stops; the collector catches up; then it must serve what the server has
            await asyncio.sleep(3)
            async with s.get(url + "/apis/kueue.x-k8s.io/v1beta2/workloads", headers={"Authorization": f"Bearer {token}"}) as r:
                truth = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in (await r.json())["items"]}
            served = await scrape(s, port)
            scrapes += 1
    finally:
        stop(collector)
        sim_proc.kill()
        sim_proc.join()
        os.unlink(kc)
        os.rmdir(tmp)

    start = samples[0][1]
    third = next(rss for t, rss in samples if t >= samples[-1][0] / 3)
    end = samples[-1][1]
    peak = max(rss for _, rss in samples)
    growth = end - third
    live_ok = served == truth
    print("measure                      | value")
    print("-----------------------------|------")
    print(f"run                          | {samples[-1][0] / 60:.1f} min, {rate:.0f} object changes/s achieved "
          f"(asked {args.rate:.0f} changes/s, each one to three objects, plus a Pod change per ten), "
          f"{args.workloads:,} Workloads and their PodGroups (bench/cluster.py)")
    print(f"RSS start (after sync)       | {start:.1f} MiB")
    print(f"RSS steady (t={samples[-1][0] / 3 / 60:.1f} min)       | {third:.1f} MiB")
    print(f"RSS end                      | {end:.1f} MiB")
    print(f"RSS change steady -> end     | {growth:+.1f} MiB ({growth / third * 100:+.1f}%)")
    print(f"RSS largest sample           | {peak:.1f} MiB")
    print(f"scrapes / failed             | {scrapes} / {failures}")
    print(f"Workloads served at the end  | {len(served)} of the server's {len(truth)}: "
          f"{'equal' if live_ok else 'DIFFERENT'} ({len(served - truth)} ghosts, {len(truth - served)} missing)")
    series = ", ".join(f"{t / 60:.1f}m {rss:.0f}" for t, rss in samples[:: max(1, len(samples) // 12)])
    print(f"RSS samples (MiB)            | {series}")
    return 0 if growth <= args.max_growth and failures == 0 and live_ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=200.0, help="object changes per second (default 200)")
    parser.add_argument("--workloads", type=int, default=2000)
    parser.add_argument("--nodes", type=int, default=1024)
    parser.add_argument("--scrape-interval", type=float, default=15.0)
    parser.add_argument("--max-growth", type=float, default=10.0, help="MiB of RSS growth allowed after steady (default 10)")
    sys.exit(asyncio.run(main(parser.parse_args())))

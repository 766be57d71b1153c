"""Soak: the collector under steady churn; its memory must stop growing once steady.

    .venv/bin/python bench/soak.py [--minutes 10] [--rate 200] [--workloads 2000] [--population 200]

The simulated API server runs in a child process (bench/load.py's) with ``--workloads``
fixture-shaped Workloads and ``--population`` churning ones, and changes them at ``--rate``
events/s for the whole run: create, modify, delete in turn, so every name is new (no label
value, store key or cache entry is ever reused) while the live set stays the same size.
``gangscope collector`` runs as its own process; Prometheus is played by a scrape every
``--scrape-interval`` seconds (OpenMetrics, gzip). RSS of the collector process (psutil) is
sampled every 5 s.

Printed: RSS after the initial sync (start), at the end of the first third (steady: caches,
arenas and the watch history have filled), and at the end, with the change from steady to
end and the largest sample; also the change rate actually achieved, the scrapes that failed,
and whether the churning Workloads served at the end are the live set. Exit status 1 if RSS
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


async def scrape(session: aiohttp.ClientSession, port: int) -> set[str]:
    """One Prometheus-like scrape; the names of the churning Workloads it serves."""
    async with session.get(f"http://127.0.0.1:{port}/metrics", headers=OM_GZIP) as r:
        r.raise_for_status()
        text = await r.text()  # aiohttp undoes the gzip
    return {s.labels["workload"] for f in parse_openmetrics(text) for s in f.samples
            if s.name == "gangscope_workload_info" and s.labels.get("namespace") == "churn"}


async def main(args: argparse.Namespace) -> int:
    sim_proc, url, kubeconfig = start_sim(args.workloads, args.nodes, args.rate, args.population)
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
    served: set[str] = set()

    async def resource_version(s: aiohttp.ClientSession) -> int:
        async with s.get(url + "/api/v1/pods", params={"limit": "1"}, headers={"Authorization": f"Bearer {token}"}) as r:
            return int((await r.json())["metadata"]["resourceVersion"])

    try:
        await wait_for(port, b'workload="churn-', collector)
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
    # The live churn set is `population` (one more right after a create): the served set must match it.
    live_ok = args.population <= len(served) <= args.population + 1
    print("measure                      | value")
    print("-----------------------------|------")
    print(f"run                          | {samples[-1][0] / 60:.1f} min, {rate:.0f} object changes/s achieved "
          f"(asked {args.rate:.0f} Workload changes/s, plus a Pod change per ten), "
          f"{args.workloads:,} + {args.population} churning Workloads")
    print(f"RSS start (after sync)       | {start:.1f} MiB")
    print(f"RSS steady (t={samples[-1][0] / 3 / 60:.1f} min)       | {third:.1f} MiB")
    print(f"RSS end                      | {end:.1f} MiB")
    print(f"RSS change steady -> end     | {growth:+.1f} MiB ({growth / third * 100:+.1f}%)")
    print(f"RSS largest sample           | {peak:.1f} MiB")
    print(f"scrapes / failed             | {scrapes} / {failures}")
    print(f"churning Workloads served    | {len(served)} (live set {args.population}..{args.population + 1})")
    series = ", ".join(f"{t / 60:.1f}m {rss:.0f}" for t, rss in samples[:: max(1, len(samples) // 12)])
    print(f"RSS samples (MiB)            | {series}")
    return 0 if growth <= args.max_growth and failures == 0 and live_ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=200.0, help="object changes per second (default 200)")
    parser.add_argument("--workloads", type=int, default=2000)
    parser.add_argument("--nodes", type=int, default=1024)
    parser.add_argument("--population", type=int, default=200, help="churning Workloads kept alive (default 200)")
    parser.add_argument("--scrape-interval", type=float, default=15.0)
    parser.add_argument("--max-growth", type=float, default=10.0, help="MiB of RSS growth allowed after steady (default 10)")
    sys.exit(asyncio.run(main(parser.parse_args())))

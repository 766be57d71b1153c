"""Benchmark: a cluster too large for one collector, split over shards.

    .venv/bin/python bench/shards.py [--workloads 100000] [--shards 4]

The simulated API server (a child process) serves a realistic cluster (bench/cluster.py) of
``--workloads`` Workloads, their PodGroups and 16,384 Nodes. Then ``gangscope collector
--shard i --total-shards N`` runs for each shard in turn, as its own process with its default
flags, alone on the machine (so each shard's sync is its own, not a share of two cores), and
reports: the namespaces and Workloads it kept, its sync time (process start to ``/readyz`` 200,
so imports and credentials included), its RSS after the sync, and the series it serves. The
server honours ``shardSelector`` (as a 1.36+ API server with ShardedListAndWatch does), so each
shard receives only its namespaces; ``--client-side`` makes it ignore the selector, and each
shard then receives, decodes and drops the others' objects too. The server serves the cluster's
Namespaces, so the shards cut the hash space at their quantiles (``--shard-ranges balanced``).

First, without starting anything: how the cluster's namespaces and Workloads fall over the
shards with equal ranges and with the balanced cuts (exporter.kube.sharding.balanced_bounds),
against the target (the largest shard within 1.2x of an even share of Workloads).
``--balance-only`` stops there.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import multiprocessing as mp
import os
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

from load import free_port  # noqa: E402

from exporter.kube.resources import COLLECTOR_RESOURCES, NAMESPACES  # noqa: E402
from exporter.kube.scope import Scope  # noqa: E402
from exporter.kube.sharding import balanced_bounds  # noqa: E402

BALANCE_TARGET = 1.2  # the largest shard's Workloads over an even share


def serve_sim(n: int, nodes: int, server_side: bool, conn: Any) -> None:  # child process
    from cluster import build_cluster

    from exporter.sim.apiserver import SimApiServer

    async def main() -> None:
        sim = SimApiServer(bookmark_interval=30)
        sim.shard_selectors = server_side
        for r in COLLECTOR_RESOURCES:
            sim.serve(r)
        cluster = build_cluster(n, nodes)
        sim.serve(NAMESPACES)
        sim.bulk_load(cluster.objects() + [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
                                           for ns in sorted({j.namespace for j in cluster.jobs})])
        await sim.start()
        conn.send((sim.url, sim.kubeconfig(), sorted({j.namespace for j in cluster.jobs}), cluster.hosts_per_workload()))
        await asyncio.Event().wait()

    asyncio.run(main())


async def shard(kubeconfig: str, i: int, total: int) -> dict[str, float]:
    port = free_port()
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "exporter", "collector", "--kubeconfig", kubeconfig,
                             "--listen", f"127.0.0.1:{port}", "--shard", str(i), "--total-shards", str(total),
                             "--log-level", "error"], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        async with aiohttp.ClientSession(auto_decompress=False) as s:
            while True:
                if proc.poll() is not None:
                    raise SystemExit(proc.stderr.read().decode()[-2000:])  # type: ignore[union-attr]
                try:
                    async with s.get(f"http://127.0.0.1:{port}/readyz") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.05)
            sync = time.perf_counter() - t0
            await asyncio.sleep(2)  # the cyclic GC's first pass after the sync, as in a running collector
            rss = psutil.Process(proc.pid).memory_info().rss
            async with s.get(f"http://127.0.0.1:{port}/metrics", headers={"Accept-Encoding": "gzip"}) as r:
                page = gzip.decompress(await r.read())
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    lines = [line for line in page.split(b"\n") if line and not line.startswith(b"#")]
    workloads = sum(1 for line in lines if line.startswith(b"gangscope_workload_info{"))
    namespaces = {line.split(b'namespace="', 1)[1].split(b'"', 1)[0] for line in lines
                  if line.startswith(b"gangscope_workload_info{")}
    return {"sync": sync, "rss": rss, "series": len(lines), "workloads": workloads, "namespaces": len(namespaces),
            "page": len(page)}


def balance(n: int, nodes: int, total: int) -> None:
    """Namespaces and Workloads per shard with equal and with balanced ranges (no process)."""
    from collections import Counter

    from cluster import build_cluster

    per_ns = Counter(j.namespace for j in build_cluster(n, nodes).jobs)
    print(f"{n:,} Workloads in {len(per_ns)} namespaces over {total} shards")
    print(f"{'ranges':>8} {'namespaces per shard':>24} {'Workloads per shard':>32} {'largest / even':>15}  target")
    for name, bounds in (("equal", ()), ("balanced", balanced_bounds([(ns, None) for ns in per_ns], total))):
        scopes = [Scope(shard=i, total_shards=total, bounds=bounds) for i in range(total)]
        spaces = [[ns for ns in per_ns if sc.keeps(ns)] for sc in scopes]
        assert sorted(ns for sp in spaces for ns in sp) == sorted(per_ns), "every namespace on exactly one shard"
        wls = [sum(per_ns[ns] for ns in sp) for sp in spaces]
        ratio = max(wls) / (n / total)
        print(f"{name:>8} {'/'.join(str(len(sp)) for sp in spaces):>24} {'/'.join(f'{w:,}' for w in wls):>32} "
              f"{ratio:>14.2f}x  at most {BALANCE_TARGET}x: {'met' if ratio <= BALANCE_TARGET else 'NOT MET'}")
    print()


async def main(args: argparse.Namespace) -> None:
    balance(args.workloads, args.nodes, args.shards)
    if args.balance_only:
        return
    parent, child = mp.Pipe()
    sim = mp.get_context("fork").Process(target=serve_sim, args=(args.workloads, args.nodes, not args.client_side, child),
                                         daemon=True)
    sim.start()
    url, kubeconfig, namespaces, hosts = parent.recv()
    tmp = Path(tempfile.mkdtemp(prefix="gsshards-"))
    kc = tmp / "kubeconfig"
    kc.write_bytes(orjson.dumps(kubeconfig))
    rows = []
    try:
        for i in range(args.shards):
            rows.append(await shard(str(kc), i, args.shards))
    finally:
        sim.kill()
        sim.join()
        kc.unlink()
        tmp.rmdir()
    print(f"{args.workloads:,} Workloads ({hosts:.1f} hosts per admitted one) and their PodGroups in {len(namespaces)} "
          f"namespaces, {args.nodes:,} Nodes; {args.shards} shards, each alone; shardSelector "
          f"{'ignored: client-side filtering' if args.client_side else 'honoured by the server'}")
    print(f"{'shard':>5} {'namespaces':>10} {'Workloads':>9} {'series':>9} {'page MB':>8} {'sync s':>7} {'RSS MiB':>8}")
    for i, r in enumerate(rows):
        print(f"{i:>5} {r['namespaces']:>10.0f} {r['workloads']:>9,.0f} {r['series']:>9,.0f} {r['page'] / 1e6:>8.1f} "
              f"{r['sync']:>7.1f} {r['rss'] / 2**20:>8.0f}")
    print(f"{'all':>5} {sum(r['namespaces'] for r in rows):>10.0f} {sum(r['workloads'] for r in rows):>9,.0f} "
          f"{sum(r['series'] for r in rows):>9,.0f}")
    print("(sync: process start to /readyz 200; RSS 2 s after; series: sample lines served, process figures included)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", type=int, default=100_000)
    ap.add_argument("--nodes", type=int, default=16_384)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--client-side", action="store_true", help="the server ignores shardSelector")
    ap.add_argument("--balance-only", action="store_true", help="print the split of the namespaces and stop")
    asyncio.run(main(ap.parse_args()))

"""Benchmark: a cluster too large for one collector, split over shards.

    .venv/bin/python bench/shards.py [--workloads 100000] [--shards 4] [--balance-only]

The simulated API server (a child process) serves a realistic cluster (bench/cluster.py) of
``--workloads`` Workloads, their PodGroups and 16,384 Nodes. Then ``gangscope collector
--shard i --total-shards N`` runs for each shard in turn, as its own process with its default
flags, alone on the machine (so each shard's sync is its own, not a share of two cores), and
reports: the namespaces and Workloads it kept, its sync time (process start to ``/readyz`` 200,
so imports and credentials included), its RSS after the sync, and the series it serves. The
server honours ``shardSelector`` (as a 1.36+ API server with ShardedListAndWatch does), so each
shard receives only its namespaces; ``--client-side`` makes it ignore the selector, and each
shard then receives, decodes and drops the others' objects too. The server serves the cluster's
Namespaces and the ConfigMap of the cuts weighted by Workloads, published beforehand as shard 0
publishes it (exporter.kube.shard_cuts), so every shard runs on those cuts (``--shard-cuts-interval
0``: no shard counts during the measurement).

First, without starting anything: how the cluster's namespaces and Workloads fall over the
shards with equal ranges, with the namespace-count cuts (exporter.kube.sharding.balanced_bounds)
and with the cuts weighted by each namespace's Workloads (exporter.kube.weighted_cuts), against
the target (the largest shard within 1.2x of an even share of Workloads). ``--balance-only``
stops there, and prints it for 20,000 and 100,000 Workloads over 2, 3 and 4 shards (or the
``--workloads`` and ``--shards`` given).
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

from exporter.kube.resources import COLLECTOR_RESOURCES, NAMESPACES, SHARD_CUTS, SHARD_CUTS_CONFIGMAP  # noqa: E402
from exporter.kube.scope import Scope  # noqa: E402
from exporter.kube.sharding import balanced_bounds  # noqa: E402
from exporter.kube.weighted_cuts import PublishedCuts, configmap_data, namespace_weights, weighted_bounds  # noqa: E402

BALANCE_TARGET = 1.2  # the largest shard's Workloads over an even share
HOME = "bench"  # the namespace of the cuts' ConfigMap


def serve_sim(n: int, nodes: int, total: int, server_side: bool, conn: Any) -> None:  # child process
    from collections import Counter

    from cluster import build_cluster

    from exporter.sim.apiserver import SimApiServer

    async def main() -> None:
        sim = SimApiServer(bookmark_interval=30)
        sim.shard_selectors = server_side
        for r in (*COLLECTOR_RESOURCES, NAMESPACES, SHARD_CUTS):
            sim.serve(r)
        cluster = build_cluster(n, nodes)
        per_ns = Counter(j.namespace for j in cluster.jobs)
        cuts = PublishedCuts(total, weighted_bounds(namespace_weights(per_ns, per_ns), total), time.time(), n, len(per_ns))
        sim.bulk_load(cluster.objects() + [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
                                           for ns in sorted(per_ns)] + [
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": SHARD_CUTS_CONFIGMAP, "namespace": HOME},
             "data": configmap_data(cuts)}])
        await sim.start()
        conn.send((sim.url, sim.kubeconfig(), sorted({j.namespace for j in cluster.jobs}), cluster.hosts_per_workload()))
        await asyncio.Event().wait()

    asyncio.run(main())


async def shard(kubeconfig: str, i: int, total: int) -> dict[str, float]:
    port = free_port()
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "exporter", "collector", "--kubeconfig", kubeconfig,
                             "--listen", f"127.0.0.1:{port}", "--shard", str(i), "--total-shards", str(total),
                             "--shard-cuts-configmap", f"{HOME}/{SHARD_CUTS_CONFIGMAP}", "--shard-cuts-interval", "0",
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


def balance(n: int, nodes: int, totals: tuple[int, ...]) -> None:
    """Namespaces and Workloads per shard with each kind of cuts (no process)."""
    from collections import Counter

    from cluster import build_cluster

    per_ns = Counter(j.namespace for j in build_cluster(n, nodes).jobs)
    print(f"{n:,} Workloads in {len(per_ns)} namespaces (bench/cluster.py); target: the largest shard at most "
          f"{BALANCE_TARGET}x an even share of Workloads")
    print(f"{'shards':>6} {'cuts':>10} {'namespaces per shard':>22} {'Workloads per shard':>38} {'largest / even':>15}  target")
    for total in totals:
        for name, bounds in (("equal", ()), ("namespaces", balanced_bounds([(ns, None) for ns in per_ns], total)),
                             ("Workloads", weighted_bounds(namespace_weights(per_ns, per_ns), total))):
            scopes = [Scope(shard=i, total_shards=total, bounds=bounds) for i in range(total)]
            spaces = [[ns for ns in per_ns if sc.keeps(ns)] for sc in scopes]
            assert sorted(ns for sp in spaces for ns in sp) == sorted(per_ns), "every namespace on exactly one shard"
            wls = [sum(per_ns[ns] for ns in sp) for sp in spaces]
            ratio = max(wls) / (n / total)
            print(f"{total:>6} {name:>10} {' / '.join(str(len(sp)) for sp in spaces):>22} "
                  f"{' / '.join(f'{w:,}' for w in wls):>38} {ratio:>14.3f}x  "
                  f"{'met' if ratio <= BALANCE_TARGET else 'NOT MET'}")
    print()


async def main(args: argparse.Namespace) -> None:
    if args.balance_only:
        for n in [args.workloads] if args.workloads else [20_000, 100_000]:
            balance(n, args.nodes, (args.shards,) if args.shards else (2, 3, 4))
        return
    args.workloads, args.shards = args.workloads or 100_000, args.shards or 4
    balance(args.workloads, args.nodes, (args.shards,))
    parent, child = mp.Pipe()
    sim = mp.get_context("fork").Process(target=serve_sim, daemon=True,
                                         args=(args.workloads, args.nodes, args.shards, not args.client_side, child))
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
          f"{'ignored: client-side filtering' if args.client_side else 'honoured by the server'}; cuts weighted by Workloads")
    print(f"{'shard':>5} {'namespaces':>10} {'Workloads':>9} {'series':>9} {'page MB':>8} {'sync s':>7} {'RSS MiB':>8}")
    for i, r in enumerate(rows):
        print(f"{i:>5} {r['namespaces']:>10.0f} {r['workloads']:>9,.0f} {r['series']:>9,.0f} {r['page'] / 1e6:>8.1f} "
              f"{r['sync']:>7.1f} {r['rss'] / 2**20:>8.0f}")
    print(f"{'all':>5} {sum(r['namespaces'] for r in rows):>10.0f} {sum(r['workloads'] for r in rows):>9,.0f} "
          f"{sum(r['series'] for r in rows):>9,.0f}")
    print("(sync: process start to /readyz 200; RSS 2 s after; series: sample lines served, process figures included)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", type=int, default=None, help="default 100,000 (--balance-only: 20,000 and 100,000)")
    ap.add_argument("--nodes", type=int, default=16_384)
    ap.add_argument("--shards", type=int, default=None, help="default 4 (--balance-only: 2, 3 and 4)")
    ap.add_argument("--client-side", action="store_true", help="the server ignores shardSelector")
    ap.add_argument("--balance-only", action="store_true", help="print how the cuts split the Workloads and stop")
    asyncio.run(main(ap.parse_args()))

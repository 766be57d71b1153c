"""Benchmark: a realistic cluster's Workloads and PodGroups through the store and the gang index.

Reports the initial sync (both LISTs handed to the handlers, joins and rendering included), the
cost of watch events of a realistic change stream (bench/cluster.py's Churn: condition updates,
admissions on new hosts, evictions, finishes, deletes, creates, PodGroup phases) in events per
second on one core (target: at least 5,000), per kind, and the scrape render time.

    .venv/bin/python bench/gangs.py [--workloads 20000] [--events 20000]

The objects are decoded JSON (what the informer hands over), so the figures exclude HTTP and
orjson; bench/collector.py measures those and bench/churn.py the whole path under a stream. The
cluster (bench/cluster.py) joins a third of its pairs by each key (template label, owner uid,
owner name); the collector's defaults apply (--max-series-per-family).
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import sys
import time
from pathlib import Path

import orjson
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cluster import Churn, build_cluster  # noqa: E402

from exporter.cluster.collector import build_collector  # noqa: E402
from exporter.config import DEFAULT_MAX_SERIES_PER_FAMILY  # noqa: E402
from exporter.exposition import Exposition  # noqa: E402


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mb() -> float:
    return psutil.Process().memory_info().rss / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", type=int, default=20_000)
    ap.add_argument("--nodes", type=int, default=16_384)
    ap.add_argument("--events", type=int, default=20_000)
    args = ap.parse_args()
    n = args.workloads
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core
    cluster = build_cluster(n, args.nodes)
    # What the informer hands over: freshly decoded objects, not the generator's (shared) dicts.
    decode = orjson.loads
    nodes, wls, pgs = (decode(orjson.dumps(objs)) for objs in (cluster.nodes, cluster.workloads, cluster.podgroups))
    topo = decode(orjson.dumps([cluster.topology]))
    churn = Churn(cluster)
    stream = [(c.what, c.verb, c.obj["kind"], decode(orjson.dumps(c.obj))) for _ in range(args.events) for c in churn.next()]
    expo = Exposition(DEFAULT_MAX_SERIES_PER_FAMILY)
    store, handlers, gangs = build_collector(expo)
    gc.collect()

    handlers["topologies"].replace(topo)
    t = time.perf_counter()
    handlers["nodes"].replace(nodes)
    handlers["workloads"].replace(wls)
    t_wl = time.perf_counter() - t
    t = time.perf_counter()
    handlers["podgroups_coscheduling"].replace(pgs)
    t_pg = time.perf_counter() - t
    joined = sum(1 for g in gangs.gangs.values() if g.workload is not None)
    assert joined == n, f"only {joined} of {n} PodGroups joined"
    del wls, pgs, nodes  # what the informer handed over is gone after a LIST; the records remain
    gc.collect()
    rss_synced = current_rss_mb()

    per_kind: dict[str, list[float]] = {}
    verbs = {"create": "ADDED", "update": "MODIFIED", "delete": "DELETED"}
    route = {"Workload": handlers["workloads"], "PodGroup": handlers["podgroups_coscheduling"]}
    clock = time.perf_counter
    t_all = clock()
    for what, verb, kind, obj in stream:
        t = clock()
        route[kind].apply(verbs[verb], obj)
        per_kind.setdefault(what, []).append(clock() - t)
    t_all = clock() - t_all

    t = time.perf_counter()
    body = expo.render(False)
    t_first = time.perf_counter() - t
    t = time.perf_counter()
    expo.render(False)
    t_scrape = time.perf_counter() - t

    print(f"objects                 {n} Workloads ({cluster.hosts_per_workload():.1f} hosts per admitted one) + {n} PodGroups, "
          f"{joined} joined, {len(cluster.nodes)} Nodes (bench/cluster.py)")
    print(f"sync nodes + workloads  {t_wl:.2f} s ({n / t_wl:,.0f} Workloads/s)")
    print(f"sync podgroups + join   {t_pg:.2f} s ({n / t_pg:,.0f}/s)")
    print(f"watch events (mixed)    {len(stream)} events in {t_all:.2f} s -> {len(stream) / t_all:,.0f} events/s on one core "
          "(parse, store, join, re-render; target >= 5,000)")
    for what, times in sorted(per_kind.items()):
        print(f"  {what:<21} {len(times):>6} events, {sum(times) / len(times) * 1e6:6.0f} us each -> "
              f"{len(times) / sum(times):>8,.0f}/s")
    print(f"render after events     {t_first * 1e3:.0f} ms; unchanged scrape {t_scrape * 1e3:.1f} ms; {len(body) / 1e6:.1f} MB")
    print(f"RSS after sync          {rss_synced:.0f} MiB (store, gang index, exposition; inputs freed; the generator's "
          f"cluster and event list are in this process too)")
    print(f"max RSS                 {rss_mb():.0f} MB (includes the benchmark's own input and event objects)")


if __name__ == "__main__":
    main()

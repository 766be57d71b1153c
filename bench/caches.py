"""Benchmark: does each sharing or rendering cache of the collector pay off on a realistic cluster?

    .venv/bin/python bench/caches.py [--workloads 20000] [--events 20000] [--repeat 2]

Times are the process's CPU seconds, so other work on the machine does not move them. Each
cache of exporter/cluster (parsed conditions, shared string maps, hostname assignments
and their domains, placed paths, rendered suffixes and fragments, interned strings, parsed
timestamps) is switched off in turn, in a fresh process, and the same realistic cluster
(bench/cluster.py) is synced and then driven by the same stream of changes (bench/cluster.py's
Churn). A cache earns its place when switching it off costs measurably more sync time, event
time or memory than the noise between repeated runs of the baseline.

The input is orjson-encoded once and decoded by 500-object pages, as the informer hands LISTs
over, so what is measured is the store's and the exposition's cost; RSS is the process's growth
over the sync. Switching a cache off replaces its dictionary with one that never holds anything
(the code then computes every value), which is exactly the code without the cache.
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


class Forgetful(dict):
    """A dict that never keeps anything: a cache switched off."""

    def __getitem__(self, key: Any) -> Any:
        raise KeyError(key)

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def get(self, key: Any, default: Any = None) -> Any:
        return default

    def __contains__(self, key: object) -> bool:
        return False


def _switch_off(name: str, store: Any) -> None:
    """Turn one cache off (module caches before any parsing, the store's after it is built)."""
    import exporter.cluster.workloads as workloads

    if name == "intern":
        workloads._intern = lambda s: s
        return
    if name.startswith("store."):
        setattr(store, name[len("store."):], Forgetful())
        return
    if name == "_TIME_CACHE":
        try:
            import exporter.fields as fields
        except ImportError:
            import exporter.cluster.fields as fields  # type: ignore[no-redef, import-not-found]  # an older checkout
        fields._TIME_CACHE = Forgetful()
        return
    setattr(workloads, name, Forgetful())


def caches() -> list[str]:
    """The caches present in this checkout (some may have been removed)."""
    import exporter.cluster.workloads as workloads
    from exporter.cluster.store import ClusterStore
    from exporter.exposition import Exposition

    names = [n for n in ("_CONDITIONS", "_DOMAINS", "_ASSIGNMENTS", "_MAPS", "_PLACED_PARTS", "_POD_TAILS",
                         "_CONDITION_TAILS") if hasattr(workloads, n)]
    if hasattr(workloads, "_intern"):
        names.append("intern")
    names.append("_TIME_CACHE")
    store = ClusterStore(Exposition())
    names += [f"store.{n}" for n in ("_place_cache", "_placements", "_fragments") if hasattr(store, n)]
    return names


def run_one(path: str, off: list[str], conn: Any) -> None:  # in a fresh process
    from exporter.cluster.collector import build_collector
    from exporter.cluster.main import tune_gc
    from exporter.config import DEFAULT_MAX_SERIES_PER_FAMILY
    from exporter.exposition import Exposition

    tune_gc()
    data = Path(path).read_bytes()
    inputs = orjson.loads(data)  # lists of raw JSON strings per source: decoded page by page below
    del data
    for name in off:
        if not name.startswith("store."):
            _switch_off(name, None)
    expo = Exposition(DEFAULT_MAX_SERIES_PER_FAMILY)
    store, handlers, _ = build_collector(expo)
    for name in off:
        if name.startswith("store."):
            _switch_off(name, store)
    gc.collect()
    proc = psutil.Process()
    rss0 = proc.memory_info().rss
    gc.disable()  # as during the collector's first sync
    clock = time.process_time  # CPU seconds: other processes on the machine do not count
    t = clock()
    for source in ("topologies", "nodes", "workloads", "podgroups_coscheduling"):
        h = handlers[source]
        if hasattr(h, "begin_replace"):  # paged, as the informer feeds it
            h.begin_replace()
            for page in inputs[source]:
                h.add_page(orjson.loads(page))
            h.end_replace(True)
        else:
            h.replace([o for page in inputs[source] for o in orjson.loads(page)])
    sync = clock() - t
    gc.enable()
    gc.freeze()
    rss = proc.memory_info().rss - rss0
    verbs = {"create": "ADDED", "update": "MODIFIED", "delete": "DELETED"}
    route = {"Workload": handlers["workloads"], "PodGroup": handlers["podgroups_coscheduling"]}
    events = [(route[kind], verbs[verb], orjson.loads(raw)) for kind, verb, raw in inputs["events"]]
    t = clock()
    for h, verb, obj in events:
        h.apply(verb, obj)
    ev = clock() - t
    conn.send((sync, rss, len(events) / ev))


def prepare(workloads: int, nodes: int, n_events: int, path: Path) -> None:
    from cluster import Churn, build_cluster

    cluster = build_cluster(workloads, nodes)

    def pages(objs: list[dict]) -> list[str]:
        return [orjson.dumps(objs[i:i + 500]).decode() for i in range(0, len(objs), 500)]

    inputs: dict[str, list[Any]] = {"topologies": pages([cluster.topology]), "nodes": pages(cluster.nodes),
              "workloads": pages(cluster.workloads), "podgroups_coscheduling": pages(cluster.podgroups)}
    churn = Churn(cluster)
    inputs["events"] = [(c.obj["kind"], c.verb, orjson.dumps(c.obj).decode()) for _ in range(n_events) for c in churn.next()]
    path.write_bytes(orjson.dumps(inputs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", type=int, default=20_000)
    ap.add_argument("--nodes", type=int, default=16_384)
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--only", nargs="*", help="caches to measure (default: every one present)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gscaches-") as tmp:
        path = Path(tmp) / "input.json"
        prepare(args.workloads, args.nodes, args.events, path)
        configs: list[tuple[str, list[str]]] = [("(all on)", [])] + [(c, [c]) for c in (args.only or caches())]
        if not args.only:
            configs.append(("(all off)", caches()))
        results: dict[str, list[tuple[float, int, float]]] = {name: [] for name, _ in configs}
        ctx = mp.get_context("spawn")
        for _ in range(args.repeat):  # interleaved, so load changes on the machine hit every config alike
            for name, off in configs:
                parent, child = ctx.Pipe()
                p = ctx.Process(target=run_one, args=(str(path), off, child))
                p.start()
                results[name].append(parent.recv())
                p.join()
    base = results["(all on)"]
    b_sync = statistics.median(r[0] for r in base)
    b_rss = statistics.median(r[1] for r in base)
    b_ev = statistics.median(r[2] for r in base)
    spread = max(r[0] for r in base) / min(r[0] for r in base) - 1 if len(base) > 1 else 0.0
    print(f"{'cache switched off':<22} {'sync CPU s':>7} {'vs on':>7} {'RSS MiB':>8} {'vs on':>8} {'events/s':>9} {'vs on':>7}")
    for name, runs in results.items():
        sync = statistics.median(r[0] for r in runs)
        rss = statistics.median(r[1] for r in runs)
        ev = statistics.median(r[2] for r in runs)
        print(f"{name:<22} {sync:7.2f} {sync / b_sync - 1:+7.1%} {rss / 2**20:8.0f} {(rss - b_rss) / 2**20:+8.0f} "
              f"{ev:9,.0f} {ev / b_ev - 1:+7.1%}")
    print(f"({args.workloads:,} Workloads + PodGroups, {args.nodes:,} Nodes, {len(base) and args.events:,} churn steps; "
          f"median of {args.repeat}; the baseline's sync varied {spread:.0%} between its runs)")


if __name__ == "__main__":
    main()

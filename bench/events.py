"""Benchmark: what one watch event costs the collector, by what it changes.

Run: ``.venv/bin/python bench/events.py [--workloads N] [--nodes N] [--events N]``. Prints one table.

The collector's store, gang index and capacity (``gangscope snapshot``'s wiring, no timers) hold
the benchmark cluster (bench/cluster.py); then each kind of event is applied to a sample of its
objects as the informer hands it over: the event's JSON line decoded with orjson, then the
handler's ``apply``. Measured per event, in CPU time (median of 5 rounds over the sample):

* a Workload or PodGroup event that changes only ``resourceVersion`` and ``managedFields``
  (what every write of a controller that changed nothing else sends; target under 50 us), and
  how many gzip blocks of the page it invalidated (target 0);
* for comparison, a Workload event that changes what gangscope reads (its queue name); offline,
  each such event also flushes the capacity and the fits, which the collector does once a second.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson  # noqa: E402

from exporter.cluster.collector import build_collector  # noqa: E402
from exporter.cluster.main import tune_gc  # noqa: E402
from exporter.exposition import Block, Exposition  # noqa: E402
from exporter.logs import setup_logging  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cluster import build_cluster  # noqa: E402
from collector import print_table  # noqa: E402

SOURCES = (("topologies", "Topology"), ("resourceflavors", "ResourceFlavor"), ("nodes", "Node"),
           ("localqueues", "LocalQueue"), ("workloads", "Workload"), ("podgroups_coscheduling", "PodGroup"))


def rv_only(obj: dict[str, Any], n: int) -> dict[str, Any]:
    """``obj`` as its next write that changed nothing else: a new resourceVersion, managedFields rewritten."""
    meta = obj["metadata"]
    return obj | {"metadata": meta | {"resourceVersion": str(10_000_000 + n), "managedFields": [
        {"manager": "kueue", "operation": "Update", "apiVersion": obj["apiVersion"], "time": "2026-12-01T00:00:00Z",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:conditions": {}}}}]}}


def requeued(obj: dict[str, Any], n: int) -> dict[str, Any]:
    """``obj`` moved to another LocalQueue: a change its lines show."""
    return rv_only(obj, n) | {"spec": obj["spec"] | {"queueName": f"queue-{n % 7}"}}


def blocks(expo: Exposition) -> dict[int, int]:
    return {id(b): b.version for b in expo.render_blocks(False) if isinstance(b, Block)}


def measure(expo: Exposition, handler: Any, objects: list[dict[str, Any]],
            change: Callable[[dict[str, Any], int], dict[str, Any]]) -> tuple[float, int]:
    """Median CPU microseconds per event over 5 rounds, and the gzip blocks the first round invalidated."""
    per_round, invalidated = [], 0
    for r in range(5):
        lines = [orjson.dumps({"type": "MODIFIED", "object": change(o, r * len(objects) + i)})
                 for i, o in enumerate(objects)]
        before = blocks(expo)
        t = time.process_time()
        for line in lines:
            event = orjson.loads(line)
            handler.apply(event["type"], event["object"])
        per_round.append((time.process_time() - t) / len(lines) * 1e6)
        if r == 0:
            after = blocks(expo)
            invalidated = sum(1 for k, v in after.items() if before.get(k) != v)
    return statistics.median(per_round), invalidated


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", type=int, default=20_000)
    p.add_argument("--nodes", type=int, default=16_384)
    p.add_argument("--events", type=int, default=2_000, help="objects of each kind in the sample")
    a = p.parse_args()
    setup_logging("warning")
    tune_gc()
    cluster = build_cluster(a.workloads, a.nodes)
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for obj in cluster.objects():
        by_kind.setdefault(obj["kind"], []).append(obj)
    expo = Exposition()
    _, handlers, _ = build_collector(expo)
    for source, kind in SOURCES:
        handlers[source].replace(by_kind.get(kind, []))
    step = max(1, a.workloads // a.events)
    workloads, podgroups = by_kind["Workload"][::step], by_kind["PodGroup"][::step]
    total = len(blocks(expo))
    wl_noop, wl_noop_blocks = measure(expo, handlers["workloads"], workloads, rv_only)
    pg_noop, pg_noop_blocks = measure(expo, handlers["podgroups_coscheduling"], podgroups, rv_only)
    wl_real, wl_real_blocks = measure(expo, handlers["workloads"], workloads, requeued)
    ok = "met" if max(wl_noop, pg_noop) < 50 and not (wl_noop_blocks or pg_noop_blocks) else "NOT MET"
    print_table([
        ("cluster (bench/cluster.py)", f"{a.workloads} Workloads + PodGroups, {a.nodes} Nodes"),
        ("events of each kind (every Nth object)", f"{len(workloads)}"),
        ("gzip blocks on the page", f"{total}"),
        ("Workload, resourceVersion/managedFields only", f"{wl_noop:.1f} us/event, {wl_noop_blocks} blocks invalidated"),
        ("PodGroup, resourceVersion/managedFields only", f"{pg_noop:.1f} us/event, {pg_noop_blocks} blocks invalidated"),
        ("target: under 50 us, no block", ok),
        ("Workload moved to another queue (for comparison; offline",
         f"{wl_real:.1f} us/event, {wl_real_blocks} blocks invalidated by {len(workloads)} events"),
        (" each such event also flushes the capacity and fits)", "(the collector flushes them once a second)"),
        ("load average (1 min) at the end", f"{os.getloadavg()[0]:.1f}  (CPU time; a shared machine)"),
    ])


if __name__ == "__main__":
    main()

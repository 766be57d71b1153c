"""Benchmark: the series budget of the benchmark cluster at default flags.

Run: ``.venv/bin/python bench/budget.py [--workloads 20000] [--nodes 16384]``. Prints two tables.

The cluster of bench/cluster.py (20,000 Workloads and their Coscheduling PodGroups, 16,384 Nodes)
goes through the collector's store and gang index in this process, each source as one LIST in the
order the collector's dependencies want (Topologies, ResourceFlavors, Nodes, LocalQueues, then
Workloads and PodGroups), with the default flags. No HTTP: what is measured is the page, not the
sync (bench/collector.py measures that). Printed: the series and the page (identity and gzip at
level 1), against the budget; then the series per Workload by its stage (its own, its gangs' and
its PodGroups' together) and the series that belong to no Workload (per Node and per domain).
"""

from __future__ import annotations

import argparse
import collections
import gzip
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cluster import build_cluster  # noqa: E402
from collector import print_table  # noqa: E402

from exporter.cluster.collector import build_collector  # noqa: E402
from exporter.exposition import Exposition  # noqa: E402
from exporter.health import SourceHealth  # noqa: E402
from exporter.kube.resources import (  # noqa: E402
    COSCHEDULING_PODGROUPS, LOCAL_QUEUES, NODES, RESOURCE_FLAVORS, TOPOLOGIES, WORKLOADS,
)
from exporter.logs import setup_logging  # noqa: E402

ORDER = (TOPOLOGIES, RESOURCE_FLAVORS, NODES, LOCAL_QUEUES, WORKLOADS, COSCHEDULING_PODGROUPS)
MAX_SERIES, MAX_PAGE_MB, MAX_FINISHED = 400_000, 60.0, 12
_NS, _WL, _PG = (re.compile(rb'\b%s="([^"]*)"' % k) for k in (b"namespace", b"workload", b"podgroup"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", type=int, default=20_000)
    p.add_argument("--nodes", type=int, default=16_384)
    a = p.parse_args()
    setup_logging("warning")
    cluster = build_cluster(a.workloads, a.nodes)
    expo = Exposition()
    store, handlers, gangs = build_collector(expo)
    by_source: dict[str, list[dict]] = collections.defaultdict(list)
    source_of = {(r.group, r.kind): r.source for r in ORDER}
    for obj in cluster.objects():
        by_source[source_of[(obj["apiVersion"].rpartition("/")[0], obj["kind"])]].append(obj)
    t0 = time.perf_counter()
    for r in ORDER:
        h = handlers[r.source]
        h.health = SourceHealth(r.source, expo)
        h.replace(by_source[r.source])
    fed = time.perf_counter() - t0
    page = expo.render(False)
    zipped = len(gzip.compress(page, 1))

    workload_of = {(g.podgroup.namespace, g.podgroup.name): g.workload.key
                   for g in gangs.gangs.values() if g.workload is not None}
    stage_of = {k: wl.stage for k, wl in store.workloads.items()}
    per_stage: collections.Counter[str] = collections.Counter()
    elsewhere: collections.Counter[str] = collections.Counter()
    total = 0
    for line in page.split(b"\n"):
        if not line or line[:1] == b"#":
            continue
        total += 1
        ns, wl, pg = _NS.search(line), _WL.search(line), _PG.search(line)
        key = None
        if ns and wl and wl.group(1):
            key = (ns.group(1).decode(), wl.group(1).decode())
        elif ns and pg:
            key = workload_of.get((ns.group(1).decode(), pg.group(1).decode()))
        if key in stage_of:
            per_stage[stage_of[key]] += 1
        else:
            elsewhere[line.split(b"{", 1)[0].split(b" ", 1)[0].decode()] += 1
    stages = collections.Counter(stage_of.values())
    finished = per_stage["finished"] / stages["finished"] if stages["finished"] else 0.0
    print_table([
        ("Workloads / Nodes", f"{len(store.workloads):,} / {len(store.nodes):,}  (fed in {fed:.1f} s)"),
        ("series", f"{total:,}  (target at most {MAX_SERIES:,}: {'met' if total <= MAX_SERIES else 'NOT MET'})"),
        ("page, identity", f"{len(page) / 1e6:.1f} MB  (target at most {MAX_PAGE_MB:.0f} MB: "
                           f"{'met' if len(page) / 1e6 <= MAX_PAGE_MB else 'NOT MET'})"),
        ("page, gzip level 1", f"{zipped / 1e6:.1f} MB"),
        ("series per Workload, all stages", f"{sum(per_stage.values()) / max(len(stage_of), 1):.1f}"),
        ("series per finished Workload", f"{finished:.1f}  (target at most {MAX_FINISHED}: "
                                         f"{'met' if finished <= MAX_FINISHED else 'NOT MET'})"),
    ])
    print()
    print_table([(f"stage {s} ({n:,} Workloads)", f"{per_stage[s] / n:.1f} series each, {per_stage[s]:,} in all")
                 for s, n in stages.most_common()]
                + [(f"no Workload: {name}", f"{n:,}") for name, n in elsewhere.most_common()])


if __name__ == "__main__":
    main()

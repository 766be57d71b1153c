"""Any order of arrival gives the same series: a dump is whatever ``kubectl get`` printed, in any
order, and a live collector's sources list and watch concurrently, so a ClusterQueue, a
ResourceFlavor, a Topology, a LocalQueue, a Node or a pod that arrives after what depends on it
must re-evaluate it (the fit of a Workload whose ClusterQueue came later was left unknown).

The objects: the demo's whole cluster (every kind the collector reads, ClusterQueues included) and
the real Kueue objects of tests/fixtures/kueue/real. The reference is :func:`exporter.loader.feed`
(dependencies first); the other orders are each source listed in turn in a shuffled order (a
collector's first sync), and every object as a watch event in a shuffled stream after empty lists
(a cluster filled after the collector started).
"""

from __future__ import annotations

import random
import re
from datetime import UTC, datetime
from typing import Any

import pytest

from exporter import loader
from exporter.cluster.collector import build_collector
from exporter.exposition import Exposition
from exporter.health import SourceHealth
from exporter.kube.resources import COLLECTOR_RESOURCES, POD_RESOURCES
from exporter.sim.scenario import build_default
from kueue_objects import FIXTURES

NOW = datetime(2026, 12, 7, 8, 0, tzinfo=UTC)
# What depends on the moment an object was seen, not on the objects: a gang phase first seen
# without an API timestamp is dated by observation; the sources' own bookkeeping.
OBSERVED = ("gangscope_podgroup_phase_timestamp_seconds", "gangscope_source_", "gangscope_internal_errors_total",
            "gangscope_parse_errors_total")


def _demo() -> list[dict[str, Any]]:
    return build_default(NOW).all_objects()


def _demo_kueue_only() -> list[dict[str, Any]]:
    """A dump of Kueue's objects and the Nodes, no pods: nothing arrives after the ClusterQueues
    that would ask every fit again by chance."""
    return [o for o in _demo() if o["apiVersion"].startswith("kueue.x-k8s.io/") or o["kind"] == "Node"]


def _real() -> list[dict[str, Any]]:
    """One object per (kind, namespace, name), the last of the files' snapshots (as the loader
    keeps it): a LIST holds each object once."""
    latest: dict[tuple[str, str, str], dict[str, Any]] = {}
    for _, obj in loader.load_path(FIXTURES / "real").objects:
        meta = obj.get("metadata") or {}
        latest[(obj["kind"], str(meta.get("namespace")), str(meta.get("name")))] = obj
    return list(latest.values())


def _by_source(objects: list[dict[str, Any]], handlers: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    by_type = {(r.group, r.kind): r.source for r in COLLECTOR_RESOURCES if r not in POD_RESOURCES}
    by_type.update(loader.DUMP_SOURCES)
    out: dict[str, list[dict[str, Any]]] = {}
    for obj in objects:
        source = by_type.get((loader.group_of(obj["apiVersion"]), obj["kind"]))
        if source in handlers:
            out.setdefault(source, []).append(obj)
    return out


def _series(exposition: Exposition) -> dict[str, str]:
    lines = exposition.render(False).decode().splitlines()
    return {k: v for k, _, v in (line.rpartition(" ") for line in lines if line and not line.startswith("#"))
            if not k.startswith(OBSERVED)}


def fed_by_loader(objects: list[dict[str, Any]]) -> dict[str, str]:
    exposition = Exposition()
    _, handlers, _ = build_collector(exposition)
    loader.feed(exposition, handlers, [("dump", o) for o in objects], "test", quiet=True)
    return _series(exposition)


def listed_in_turn(objects: list[dict[str, Any]], seed: int) -> dict[str, str]:
    exposition = Exposition()
    _, handlers, _ = build_collector(exposition)
    per = _by_source(objects, handlers)
    order = sorted(per)
    random.Random(seed).shuffle(order)
    for source in order:
        handlers[source].health = SourceHealth(source, exposition)
        items = per[source][:]
        random.Random(seed).shuffle(items)
        handlers[source].replace(items)
    return _series(exposition)


def watched_in_any_order(objects: list[dict[str, Any]], seed: int) -> dict[str, str]:
    exposition = Exposition()
    _, handlers, _ = build_collector(exposition)
    per = _by_source(objects, handlers)
    for source in per:
        handlers[source].health = SourceHealth(source, exposition)
        handlers[source].replace([])
    events = [(s, o) for s, objs in per.items() for o in objs]
    random.Random(seed).shuffle(events)
    for source, obj in events:
        handlers[source].apply("ADDED", obj)
    return _series(exposition)


def _diff(want: dict[str, str], got: dict[str, str]) -> list[str]:
    return sorted(f"{k}: {want.get(k)} != {got.get(k)}" for k in want.keys() | got.keys() if want.get(k) != got.get(k))


@pytest.mark.parametrize("objects", [_demo, _demo_kueue_only, _real], ids=["demo", "demo-kueue-only", "real-fixtures"])
@pytest.mark.parametrize("seed", range(4))
def test_every_order_gives_the_loaders_series(objects: Any, seed: int) -> None:
    objs = objects()
    want = fed_by_loader(objs)
    if objects is not _real:
        assert _fitted(want), "the demo's waiting TAS Workloads have a fit"
    assert not _diff(want, listed_in_turn(objs, seed))
    assert not _diff(want, watched_in_any_order(objs, seed))


def _fitted(series: dict[str, str]) -> set[tuple[str, str]]:
    return {(m["namespace"], m["workload"]) for k in series if k.startswith("gangscope_workload_fit{")
            for m in [dict(re.findall(r'(\w+)="([^"]*)"', k))]}


def test_a_clusterqueue_that_comes_late_gives_its_workloads_a_fit_and_takes_it_away() -> None:
    objs = _demo()
    queues_last = [o for o in objs if o["kind"] != "ClusterQueue"] + [o for o in objs if o["kind"] == "ClusterQueue"]
    assert _fitted(fed_by_loader(queues_last)) == _fitted(fed_by_loader(objs)) != set()
    exposition = Exposition()
    store, handlers, _ = build_collector(exposition)
    per = _by_source(objs, handlers)
    for source in ("topologies", "resourceflavors", "nodes", "localqueues", "workloads", "pods"):
        handlers[source].health = SourceHealth(source, exposition)
        handlers[source].replace(per[source])
    assert _fitted(_series(exposition)) == set()  # no queue known: no fit, never a guess
    queue = per["clusterqueues"][0]
    handlers["clusterqueues"].health = SourceHealth("clusterqueues", exposition)
    handlers["clusterqueues"].apply("ADDED", queue)
    name = queue["metadata"]["name"]
    fitted = _fitted(_series(exposition))
    assert fitted and all(store.workloads[k].cluster_queue == name for k in fitted)
    handlers["clusterqueues"].apply("DELETED", queue)
    assert _fitted(_series(exposition)) == set()

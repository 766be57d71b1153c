"""``gangscope snapshot``: the collector's metrics for the objects in a kubectl dump, no cluster.

The dump is fed through the same store and handlers as the live collector, in dependency order
(Topologies and ResourceFlavors, Nodes, LocalQueues, then Workloads and PodGroups), so the output
is what a collector that had just synced those objects would serve. An object that appears
twice (two snapshots of one Workload) is applied as a MODIFIED event, so transitions between
snapshots, such as an eviction, are counted as the collector would count them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .cluster.collector import build_collector
from .cluster.gangs import add_gang_arguments
from .config import add_logging, add_topology, topology_from_args
from .exposition import Exposition
from .health import SourceHealth
from .kube.resources import COLLECTOR_RESOURCES
from .loader import group_of, load_reporting
from .logs import start_logging

# Sources whose records others depend on come first.
ORDER = ("topologies", "resourceflavors", "nodes", "localqueues", "workloads")


def add_gpu_resource(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpu-resource", action="append", default=None, metavar="NAME",
                   help="extended resource counted as GPUs in gangscope_workload_requested_gpus "
                        "(repeatable; default nvidia.com/gpu)")


def gpu_resources(args: argparse.Namespace) -> tuple[str, ...]:
    return tuple(args.gpu_resource or ("nvidia.com/gpu",))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--from-file", required=True, type=Path, metavar="PATH",
                   help="kubectl get -o yaml|json output: a List, multi-document YAML, or a folder of them")
    p.add_argument("--format", choices=("text", "openmetrics"), default="text",
                   help="exposition format (default text, Prometheus 0.0.4)")
    add_gpu_resource(p)
    add_gang_arguments(p)
    add_topology(p)
    add_logging(p)


def run(args: argparse.Namespace) -> int:
    start_logging("snapshot", args, args.log_level)
    levels, overrides = topology_from_args(args)
    loaded = load_reporting(args.from_file, "gangscope snapshot")
    if loaded is None:
        return 1
    if not loaded.objects:
        print(f"gangscope snapshot: no readable Kubernetes objects in {args.from_file}", file=sys.stderr)
        return 1
    exposition = Exposition()
    fixed = levels.keys if args.topology_levels else ()
    _, handlers, _ = build_collector(exposition, gpu_resources=gpu_resources(args), level_keys=fixed,
                                     alias_overrides=overrides, assembly_timeout=args.assembly_timeout)
    feed(exposition, handlers, loaded.objects)
    sys.stdout.buffer.write(exposition.render(args.format == "openmetrics"))
    sys.stdout.flush()
    return 0


def feed(exposition: Exposition, handlers: dict, objects: list[tuple[str, dict]]) -> None:
    """Apply dump objects to the handlers as watch events, dependency order first."""
    by_type = {(r.group, r.kind): r.source for r in COLLECTOR_RESOURCES}
    per_source: dict[str, list[dict]] = {}
    skipped: dict[str, int] = {}
    for _, obj in objects:
        source = by_type.get((group_of(obj["apiVersion"]), obj["kind"]))
        if source is None or source not in handlers:
            skipped[obj["kind"]] = skipped.get(obj["kind"], 0) + 1
            continue
        per_source.setdefault(source, []).append(obj)
    for kind, n in sorted(skipped.items()):
        print(f"gangscope snapshot: {n} object(s) of kind {kind} ignored (not read by the collector)", file=sys.stderr)
    rank = {s: i for i, s in enumerate(ORDER)}
    for source in sorted(per_source, key=lambda s: (rank.get(s, len(ORDER)), s)):
        handler = handlers[source]
        health = SourceHealth(source, exposition)
        handler.health = health
        seen: set = set()
        for obj in per_source[source]:
            meta = obj.get("metadata")
            key = (str(meta.get("namespace")), str(meta.get("name"))) if isinstance(meta, dict) else None
            handler.apply("MODIFIED" if key in seen else "ADDED", obj)
            seen.add(key)
        health.sync_ok(objects=len(seen))

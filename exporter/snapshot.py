"""``gangscope snapshot``: the collector's metrics for the objects in a kubectl dump, no cluster.

The dump is fed through the same store and handlers as the live collector
(:func:`exporter.loader.feed`), so the output is what a collector that had just synced those
objects would serve.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .cluster.collector import add_collector_arguments, collector_from_args
from .config import add_logging
from .exposition import Exposition
from .loader import feed, load_reporting
from .logs import start_logging


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--from-file", required=True, type=Path, metavar="PATH",
                   help="kubectl get -o yaml|json output: a List, multi-document YAML, or a folder of them")
    p.add_argument("--format", choices=("text", "openmetrics"), default="text",
                   help="exposition format (default text, Prometheus 0.0.4)")
    add_collector_arguments(p)
    add_logging(p, "warning")


def run(args: argparse.Namespace) -> int:
    start_logging("snapshot", args, args.log_level)
    exposition = Exposition()
    _, handlers, _ = collector_from_args(exposition, args)  # flags that cannot work fail first
    loaded = load_reporting(args.from_file, "gangscope snapshot")
    if loaded is None:
        return 1
    if not loaded.objects:
        print(f"gangscope snapshot: no readable Kubernetes objects in {args.from_file}", file=sys.stderr)
        return 1
    feed(exposition, handlers, loaded.objects, "gangscope snapshot")
    sys.stdout.buffer.write(exposition.render(args.format == "openmetrics"))
    sys.stdout.flush()
    return 0

"""The ``gangscope`` command: one entry point, one module per subcommand.

Each subcommand module exposes ``add_arguments(parser)`` and ``run(args) -> int`` and is imported
only when chosen, so ``gangscope snapshot`` does not pay for gRPC or NVML imports.
"""

from __future__ import annotations

import argparse
import importlib
import platform
import sys

from . import __version__
from .topology import TopologyError

DESCRIPTION = ("why is my training job pending, or slow? Kueue admission, topology placement, gang assembly "
               "and GPU interconnect, per job and per topology domain")

VERSION = f"gangscope {__version__} (Python {platform.python_version()})"

SUBCOMMANDS = {
    "collector": ("exporter.cluster.main", "watch Kueue Workloads, Topologies and PodGroups and serve their metrics"),
    "agent": ("exporter.node.main", "serve per-GPU NVLink/PCIe/fabric metrics mapped to pods and topology"),
    "snapshot": ("exporter.snapshot", "print the metrics for objects in a kubectl get -o yaml|json dump"),
    "explain": ("exporter.explain", "explain, layer by layer, why a job is pending or slow"),
    "demo": ("exporter.demo", "run a simulated cluster, collector and agents on loopback"),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; with ``only``, just that subcommand's module is imported (the agent's memory)."""
    parser = argparse.ArgumentParser(prog="gangscope", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=VERSION)
    sub = parser.add_subparsers(dest="command", metavar="{" + ",".join(SUBCOMMANDS) + "}")
    for name, (module, help_text) in SUBCOMMANDS.items():
        sp = sub.add_parser(name, help=help_text, description=help_text)
        sp.add_argument("--version", action="version", version=VERSION)
        sp.set_defaults(_module=module)
        if only is None or name == only:
            importlib.import_module(module).add_arguments(sp)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in SUBCOMMANDS:
        if argv and argv[0] in ("-h", "--help", "--version"):
            build_parser().parse_args(argv)
        print(f"usage: gangscope {{{','.join(SUBCOMMANDS)}}} [options]", file=sys.stderr)
        if argv:
            print(f"gangscope: unknown command {argv[0]!r}", file=sys.stderr)
        return 2
    parser = build_parser(only=argv[0])
    args = parser.parse_args(argv)
    module = importlib.import_module(args._module)
    try:
        return int(module.run(args) or 0)
    except TopologyError as exc:  # --topology-levels/--topology-alias that cannot work: a usage error
        print(f"gangscope {argv[0]}: {exc}", file=sys.stderr)
        return 2

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
from .errors import CommandError
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


def build_parser(only: str | None = None) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The parser and each subcommand's own (whose usage its errors print); with ``only``, just
    that subcommand's module is imported (the agent's memory)."""
    parser = argparse.ArgumentParser(prog="gangscope", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=VERSION)
    sub = parser.add_subparsers(dest="command", metavar="{" + ",".join(SUBCOMMANDS) + "}")
    subparsers = {}
    for name, (module, help_text) in SUBCOMMANDS.items():
        sp = sub.add_parser(name, help=help_text, description=help_text)
        sp.add_argument("--version", action="version", version=VERSION)
        sp.set_defaults(_module=module)
        if only is None or name == only:
            importlib.import_module(module).add_arguments(sp)
        subparsers[name] = sp
    return parser, subparsers


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in SUBCOMMANDS:
        if argv and argv[0] in ("-h", "--help", "--version"):
            build_parser()[0].parse_args(argv)
        print(f"usage: gangscope {{{','.join(SUBCOMMANDS)}}} [options]", file=sys.stderr)
        if argv:
            print(f"gangscope: unknown command {argv[0]!r}", file=sys.stderr)
        return 2
    parser, subparsers = build_parser(only=argv[0])
    mine = subparsers[argv[0]]
    # Unknown flags are the subcommand's error: its usage, not the top level's (argparse hands
    # what a subparser does not know back to the top parser, which would print its own).
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        mine.error(f"unrecognized arguments: {' '.join(unknown)}")
    module = importlib.import_module(args._module)
    try:
        return int(module.run(args) or 0)
    except TopologyError as exc:  # --topology-levels/--topology-alias that cannot work: a usage error
        mine.print_usage(sys.stderr)
        print(f"gangscope {argv[0]}: error: {exc}", file=sys.stderr)
        return 2
    except CommandError as exc:  # an ordinary mistake (a bad --listen, a port in use): one line, no traceback
        print(f"gangscope {argv[0]}: {exc}", file=sys.stderr)
        return exc.status

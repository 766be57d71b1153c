"""Flags shared by the subcommands, so ``collector``, ``agent``, ``snapshot`` and ``explain`` spell
them the same way. Each subcommand module adds its own on top (``add_arguments``)."""

from __future__ import annotations

import argparse
import os

from .topology import TopologyLevels, parse_alias_overrides


def add_logging(p: argparse.ArgumentParser) -> None:
    p.add_argument("--log-level", default=os.environ.get("GANGSCOPE_LOG_LEVEL", "info"),
                   choices=["debug", "info", "warning", "error"], help="log verbosity (default info)")


def add_kube(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", default=None,
                   help="kubeconfig file (default: in-cluster service account, else $KUBECONFIG, else ~/.kube/config)")
    p.add_argument("--context", default=None, help="kubeconfig context (default: current-context)")
    p.add_argument("--insecure-skip-tls-verify", action="store_true", help="do not verify the API server's certificate")
    p.add_argument("--discovery-interval", type=float, default=60.0,
                   help="seconds between retries of sources that are not served or forbidden (default 60)")


def add_topology(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topology-levels", default="",
                   help="comma-separated node label keys, top level first; overrides the levels of Kueue Topology "
                        "objects (e.g. cloud.provider.com/topology-block,cloud.provider.com/topology-rack)")
    p.add_argument("--topology-alias", action="append", default=[], metavar="KEY=NAME",
                   help="Prometheus label name for a node label key (repeatable)")


DEFAULT_GPU_RESOURCES = ("nvidia.com/gpu",)


def add_gpu_resource(p: argparse.ArgumentParser) -> None:
    """``--gpu-resource`` of the collector, snapshot and explain (the agent's has device prefixes)."""
    p.add_argument("--gpu-resource", action="append", default=None, metavar="NAME",
                   help="extended resource counted as GPUs in gangscope_workload_requested_gpus "
                        "(repeatable; default nvidia.com/gpu)")


def gpu_resources(args: argparse.Namespace) -> tuple[str, ...]:
    return tuple(args.gpu_resource or DEFAULT_GPU_RESOURCES)


def topology_from_args(args: argparse.Namespace) -> tuple[TopologyLevels, dict[str, str]]:
    """Levels given by flags (possibly only the hostname) and the alias overrides."""
    overrides = parse_alias_overrides(args.topology_alias)
    keys = [k.strip() for k in args.topology_levels.split(",") if k.strip()]
    return TopologyLevels.build(keys, overrides), overrides


def add_serving(p: argparse.ArgumentParser, default_listen: str) -> None:
    p.add_argument("--listen", default=default_listen, help=f"HOST:PORT to serve /, /metrics, /healthz, /readyz (default {default_listen})")
    p.add_argument("--max-series-per-family", type=int, default=300_000,
                   help="cap on series per metric family; the excess is dropped and counted (0 = no cap, default 300000)")
    p.add_argument("--tls-cert", default=None, help="serve HTTPS with this certificate (PEM); reloaded when the file changes")
    p.add_argument("--tls-key", default=None, help="private key (PEM) for --tls-cert")
    p.add_argument("--metrics-auth", action="store_true",
                   help="require on every route but /, /healthz and /readyz a bearer token allowed to get that path, and for "
                        "/debug/explain also Workloads in its namespace (TokenReview + SubjectAccessReview)")

"""Flags shared by the subcommands, so ``collector``, ``agent``, ``snapshot`` and ``explain`` spell
them the same way. Each subcommand module adds its own on top (``add_arguments``)."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable

from .exposition import Exposition
from .topology import TopologyLevels, parse_alias_overrides


def add_logging(p: argparse.ArgumentParser, default: str = "info") -> None:
    """``--log-level``: ``default`` is info for the servers, warning for the one-shot commands
    (snapshot, explain, demo), whose output is their answer; $GANGSCOPE_LOG_LEVEL overrides it."""
    default = os.environ.get("GANGSCOPE_LOG_LEVEL", default)
    p.add_argument("--log-level", default=default, choices=["debug", "info", "warning", "error"],
                   help=f"log verbosity (default {default})")


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


# The scale one collector (one shard) is sized for: 20,000 Workloads of 16 hosts on average, the
# long tail up to 512, and their PodGroups (bench/collector.py). Its largest family, the Workloads'
# pods per host, then holds ~320,000 series; the family cap leaves 3x that before it drops
# anything, so it only ever stops a runaway, and one object can take at most 10,000 series of a
# family (a job on 10,000 hosts). Past the supported scale, shard (--total-shards) rather than
# raise the caps.
DEFAULT_MAX_SERIES_PER_FAMILY = 1_000_000
DEFAULT_MAX_SERIES_PER_OWNER = 10_000


def add_serving(p: argparse.ArgumentParser, default_listen: str) -> None:
    p.add_argument("--listen", default=default_listen, help=f"HOST:PORT to serve /, /metrics, /healthz, /readyz (default {default_listen})")
    p.add_argument("--max-series-per-family", type=int, default=DEFAULT_MAX_SERIES_PER_FAMILY,
                   help="cap on series per metric family; an object whose series would pass it is left out of that family, "
                        f"counted and logged (0 = no cap, default {DEFAULT_MAX_SERIES_PER_FAMILY})")
    p.add_argument("--max-series-per-owner", type=int, default=DEFAULT_MAX_SERIES_PER_OWNER,
                   help="cap on one object's series in one family; an object with more is left out of that family, counted "
                        f"and logged (0 = no cap, default {DEFAULT_MAX_SERIES_PER_OWNER})")
    p.add_argument("--cluster-name", default="",
                   help="add the label cluster=NAME to every series (one Prometheus for several clusters; default: none)")
    p.add_argument("--metric-allowlist", action="append", default=[], metavar="REGEX,...",
                   help="serve only the families whose full name matches one of these regular expressions "
                        "(comma-separated, repeatable; exclusive with --metric-denylist)")
    p.add_argument("--metric-denylist", action="append", default=[], metavar="REGEX,...",
                   help="serve every family but those whose full name matches one of these regular expressions "
                        "(comma-separated, repeatable)")
    p.add_argument("--tls-cert", default=None, help="serve HTTPS with this certificate (PEM); reloaded when the file changes")
    p.add_argument("--tls-key", default=None, help="private key (PEM) for --tls-cert")
    p.add_argument("--metrics-auth", action="store_true",
                   help="require on every route but /, /healthz and /readyz a bearer token allowed to get that path, and for "
                        "/debug/explain also Workloads in its namespace (TokenReview + SubjectAccessReview)")


def _patterns(values: list[str], flag: str) -> list[re.Pattern[str]]:
    out = []
    for value in values:
        for pattern in value.split(","):
            if pattern.strip():
                try:
                    out.append(re.compile(pattern.strip()))
                except re.error as exc:
                    raise ValueError(f"{flag}: {pattern!r} is not a regular expression: {exc}") from None
    return out


def family_filter(args: argparse.Namespace) -> Callable[[str], bool] | None:
    """Whether a family is served, from --metric-allowlist/--metric-denylist (kube-state-metrics'
    flags: exact names or regular expressions, matched against the whole family name); None
    when neither is given. Raises ValueError for both at once or a bad expression."""
    allow = _patterns(args.metric_allowlist, "--metric-allowlist")
    deny = _patterns(args.metric_denylist, "--metric-denylist")
    if allow and deny:
        raise ValueError("--metric-allowlist and --metric-denylist are mutually exclusive")
    if allow:
        return lambda name: any(p.fullmatch(name) for p in allow)
    if deny:
        return lambda name: not any(p.fullmatch(name) for p in deny)
    return None


def exposition_from_args(args: argparse.Namespace) -> Exposition:
    """The process's exposition with the serving flags' caps, family filter and cluster label."""
    return Exposition(args.max_series_per_family, args.max_series_per_owner, exported=family_filter(args),
                      const_labels=[("cluster", args.cluster_name)] if args.cluster_name else ())

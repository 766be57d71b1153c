"""Assembly of the collector's state: :func:`build_collector` is the one place that builds the
store, joins the gang index onto it and returns the handler of every watched resource;
``gangscope collector`` feeds it from informers, ``snapshot`` and ``explain`` from a dump, so all
go through the same parsing and rendering code. :func:`add_collector_arguments` and
:func:`collector_from_args` give the three commands the same flags for it.
"""

from __future__ import annotations

import argparse
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from ..config import add_gpu_resource, add_topology, gpu_resources, topology_from_args
from ..exposition import Exposition
from .capacity import DEFAULT_PLACEMENT_SIZES, parse_sizes
from .gang_state import KAI_DEFAULT_STALENESS_GRACE
from .gangs import DEFAULT_ASSEMBLY_TIMEOUT, GangIndex, add_gang_arguments, attach_gangs
from .jobs import DEFAULT_PROGRESS_STALE, add_job_arguments, attach_jobs
from .pods import PodStore, add_pod_arguments
from .ray import RayIndex
from .volcano_queues import VolcanoQueues
from .object_labels import LabelsAllowlist, allowlist_argument
from .object_labels import from_flag as labels_from_flag
from .store import DEFAULT_EVICTION_GRACE, DEFAULT_FINISHED_DETAIL, ClusterStore


def build_collector(exposition: Exposition, *, gpu_resources: Sequence[str] = ("nvidia.com/gpu",),
                    level_keys: Sequence[str] = (), alias_overrides: Mapping[str, str] | None = None,
                    assembly_timeout: float = DEFAULT_ASSEMBLY_TIMEOUT, eviction_level: str | None = None,
                    eviction_grace: float = DEFAULT_EVICTION_GRACE, watch_pods: bool = True,
                    progress_stale_after: float = DEFAULT_PROGRESS_STALE,
                    placement_sizes: Sequence[int] = DEFAULT_PLACEMENT_SIZES, shard: int = 0, total_shards: int = 1,
                    labels_allowlist: LabelsAllowlist | None = None, finished_detail: float = DEFAULT_FINISHED_DETAIL,
                    kai_grace: float = KAI_DEFAULT_STALENESS_GRACE,
                    ) -> tuple[ClusterStore, dict[str, Any], GangIndex]:
    """The store, the gang index joined onto it, and every handler keyed by ``Resource.source``
    (see exporter.kube.resources): Kueue objects and Nodes go to the store, the PodGroup
    sources (podgroups_*, compositepodgroups_native, workloads_native) to the gang index, the
    pod sources (pods_*, and "pods" for dumps) to its pod store (``gangs.pods``; none with
    ``watch_pods=False``), the job controllers (jobsets, trainjobs, leaderworkersets) to its job
    index (``gangs.jobs``), KubeRay's rayjobs and rayclusters to a :class:`exporter.cluster.ray.RayIndex`,
    Volcano's queues_volcano to ``gangs.volcano_queues`` (explain's word on a group waiting for its queue). ``shard``/``total_shards`` say which part of the Workloads this
    collector sees (sharding sets them; the per-domain series follow, see
    exporter.cluster.capacity; ``store.capacity.set_shards`` when they change).
    """
    store = ClusterStore(exposition, gpu_resources=gpu_resources, level_keys=level_keys,
                         alias_overrides=alias_overrides, eviction_level=eviction_level, eviction_grace=eviction_grace,
                         placement_sizes=placement_sizes, shard=shard, total_shards=total_shards,
                         labels_allowlist=labels_allowlist, finished_detail=finished_detail)
    pods = PodStore(gpu_resources) if watch_pods else None
    if pods is not None:
        store.capacity.attach_pods(pods)
    gangs = attach_gangs(store, assembly_timeout=assembly_timeout, pods=pods)
    gangs.kai_grace = kai_grace
    jobs = attach_jobs(store, gangs)
    jobs.stale_after = progress_stale_after
    gangs.volcano_queues = VolcanoQueues()
    handlers: dict[str, Any] = {**store.handlers(), **gangs.handlers(), **jobs.handlers(), **RayIndex(store).handlers(),
                                **gangs.volcano_queues.handlers(), **(pods.handlers() if pods is not None else {})}
    return store, handlers, gangs


def add_collector_arguments(p: argparse.ArgumentParser) -> None:
    """The flags that shape the collector's series: topology, GPUs, gangs, eviction domains."""
    add_topology(p)
    add_gpu_resource(p)
    add_gang_arguments(p)
    add_pod_arguments(p)
    add_job_arguments(p)
    p.add_argument("--eviction-level", default=None, metavar="LEVEL",
                   help="topology level (node label key or its label name) at which "
                        "gangscope_topology_evictions_total counts evictions (default: the level above the host)")
    p.add_argument("--metric-labels-allowlist", action="append", default=[], type=allowlist_argument,
                   metavar="RESOURCE=[KEY,...],...",
                   help="export these Kubernetes labels of Workloads and PodGroups as gangscope_workload_labels and "
                        "gangscope_podgroup_labels (kube-state-metrics' syntax: workloads=[team,app.kubernetes.io/*],"
                        "podgroups=[*]; * as the resource means both; repeatable; default: none)")
    p.add_argument("--eviction-domain-grace", type=float, default=DEFAULT_EVICTION_GRACE, metavar="SECONDS",
                   help="how long the eviction series of a domain that no Node has any more are kept (default 3600)")
    p.add_argument("--finished-detail", type=_seconds, default=DEFAULT_FINISHED_DETAIL, metavar="SECONDS",
                   help="how long a finished or deactivated Workload keeps its placement, gang and PodGroup series "
                        "(default 0: it keeps its summary only from the moment it finishes)")
    p.add_argument("--placement-sizes", type=_sizes, default=DEFAULT_PLACEMENT_SIZES, metavar="GPUS,...",
                   help="pod sizes in GPUs for which gangscope_domain_placeable_pods counts the pods each domain can "
                        "take now (default " + ",".join(map(str, DEFAULT_PLACEMENT_SIZES)) + ")")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"not a number of seconds >= 0: {text!r}")
    return value


def _sizes(text: str) -> tuple[int, ...]:
    try:
        return parse_sizes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def collector_from_args(exposition: Exposition, args: argparse.Namespace) -> tuple[ClusterStore, dict[str, Any], GangIndex]:
    """:func:`build_collector` with the flags of :func:`add_collector_arguments` (raises
    :class:`exporter.topology.TopologyError` for topology flags that cannot work)."""
    levels, overrides = topology_from_args(args)
    return build_collector(
        exposition, gpu_resources=gpu_resources(args), level_keys=levels.keys if args.topology_levels else (),
        alias_overrides=overrides, assembly_timeout=args.assembly_timeout, eviction_level=args.eviction_level,
        eviction_grace=args.eviction_domain_grace, watch_pods=not args.no_pods,
        progress_stale_after=args.progress_stale_after, placement_sizes=args.placement_sizes,
        labels_allowlist=labels_from_flag(args.metric_labels_allowlist), finished_detail=args.finished_detail,
        kai_grace=args.kai_staleness_grace_period)


def source_specs(args: argparse.Namespace, handlers: Mapping[str, Any], *, namespace: str | None = None,
                 exclude: Collection[str] = ()) -> list[Any]:
    """One :class:`exporter.kube.sources.SourceSpec` per watched resource that has a handler (but
    the sources in ``exclude``), with the resource's own selectors (the pod sources' scheduler
    names from the flags); with ``namespace``, namespaced resources are read in that namespace only
    (live explain, for a user whose RBAC covers one namespace)."""
    from ..kube.resources import COLLECTOR_RESOURCES
    from ..kube.sources import SourceSpec
    from .pods import pod_resources

    pods = pod_resources(args)
    resources = [pods.get(r.source, r) for r in COLLECTOR_RESOURCES if r.source in handlers and r.source not in exclude]
    return [SourceSpec(r, handlers[r.source], namespace=namespace if r.namespaced else None,
                       field_selector=r.field_selector, label_selector=r.label_selector)
            for r in resources]

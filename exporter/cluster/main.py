"""``gangscope collector``: watch Kueue objects (and PodGroups), serve their metrics.

Wiring only: the store and handlers come from :func:`exporter.cluster.collector.build_collector` (the
same code ``gangscope snapshot`` runs on a dump), one supervised informer per watched resource
from :mod:`exporter.kube.sources`, the visibility API poller from
:mod:`exporter.cluster.queue_positions`, and the shared HTTP endpoint from :mod:`exporter.serving`.
SIGTERM and SIGINT stop the informers and the server, then the process exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import signal
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog

from ..config import add_kube, add_logging, add_serving, exposition_from_args
from ..kube.backoff import BackoffPolicy
from ..kube.credentials import CredentialsError
from ..kube.resources import (COLLECTOR_RESOURCES, NAMESPACES, QUEUE_POSITIONS, SHARD_CUTS, SHARD_CUTS_CONFIGMAP,
                              STATEFULSETS)
from ..kube.scope import Scope, parse_namespaces
from ..kube.shard_cuts import DEFAULT_INTERVAL as CUTS_INTERVAL
from ..kube.shard_cuts import CutsPublisher, PublishedCutsWatch, ShardCuts, configmap_location
from ..kube.sharding import NamespaceList, StatefulSetWatch, balanced_bounds, export_shard, resolve_with_retry
from ..logs import start_logging
from ..topology import TopologyError
from .collector import add_collector_arguments, collector_from_args, source_specs
from .queue_positions import DEFAULT_INTERVAL, DEFAULT_LIMIT, QueuePositionPoller

log = structlog.get_logger(__name__)

DEFAULT_LISTEN = "0.0.0.0:9400"
# Listed before the others: the records every Workload's placement and lines depend on, Nodes and
# the Topologies, the LocalQueues its ClusterQueue label comes from, and the ClusterQueues and
# Cohorts whose flavors its fit and whose Active condition its pending reason read (their
# first LISTs done, the Workloads are rendered once rather than again when the Nodes arrive).
FIRST_SOURCES = ("topologies", "resourceflavors", "nodes", "localqueues", "clusterqueues", "cohorts")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_serving(p, DEFAULT_LISTEN)
    add_kube(p)
    add_scope(p)
    add_collector_arguments(p)
    p.add_argument("--queue-position-interval", type=float, default=DEFAULT_INTERVAL, metavar="SECONDS",
                   help="seconds between polls of Kueue's visibility API for pending Workloads' queue positions "
                        "(0: do not poll; default 30)")
    p.add_argument("--queue-position-limit", type=int, default=DEFAULT_LIMIT, metavar="N",
                   help="most Workloads asked for per ClusterQueue (or LocalQueue) and poll, in pages of 1000 "
                        "(Kueue's limit and offset parameters; default 10000)")
    add_logging(p)


def add_scope(p: argparse.ArgumentParser) -> None:
    """What the collector watches: kube-state-metrics' flags of the same names."""
    sources = ",".join(dict.fromkeys(r.source for r in COLLECTOR_RESOURCES))
    p.add_argument("--resources", default="", metavar="SOURCE,...",
                   help=f"watch only these sources (default: all of {sources})")
    p.add_argument("--namespaces", action="append", default=[], metavar="NS,...",
                   help="watch namespaced resources only in these namespaces, one watch each (a Role per namespace is "
                        "enough); default: all namespaces")
    p.add_argument("--namespaces-denylist", action="append", default=[], metavar="NS,...",
                   help="never watch these namespaces (comma-separated, repeatable)")
    p.add_argument("--shard", type=int, default=0, help="this collector's shard, 0 to --total-shards - 1 (default 0)")
    p.add_argument("--total-shards", type=int, default=1,
                   help="split the namespaces into this many shards by FNV-1a 64 hash ranges (default 1: no sharding)")
    p.add_argument("--shard-ranges", choices=("balanced", "equal"), default="balanced",
                   help="how the hash space is cut: balanced (at the quantiles of the namespaces' hashes, from the "
                        "namespace list every shard watches; default) or equal (equal ranges: no namespace list "
                        "needed; every shard must use the same)")
    p.add_argument("--shard-cuts-configmap", default=SHARD_CUTS_CONFIGMAP, metavar="[NAMESPACE/]NAME",
                   help="with balanced ranges, the ConfigMap where shard 0 publishes cuts weighted by each namespace's "
                        "Workloads and which every shard follows (namespace: --pod-namespace, else $POD_NAMESPACE; "
                        f"default {SHARD_CUTS_CONFIGMAP}; empty: cut by namespace counts only)")
    p.add_argument("--shard-cuts-interval", type=float, default=CUTS_INTERVAL, metavar="SECONDS",
                   help="seconds between shard 0's counts of Workloads per namespace for the weighted cuts "
                        "(0: shard 0 does not count; shards still follow cuts published in the ConfigMap; "
                        f"default {CUTS_INTERVAL:g})")
    p.add_argument("--pod", default=os.environ.get("POD_NAME", ""),
                   help="this collector's pod (with --pod-namespace): take the shard from the pod's StatefulSet ordinal "
                        "and the total from its spec.replicas, and follow changes (default $POD_NAME when "
                        "--pod-namespace is given)")
    p.add_argument("--pod-namespace", default="", help="namespace of --pod (enables automatic sharding)")


def scope_from_args(args: argparse.Namespace) -> Scope:
    """Raises ValueError on a bad namespace or shard."""
    if args.total_shards < 1:
        raise ValueError("--total-shards must be at least 1")
    if not args.shard_cuts_interval >= 0:
        raise ValueError("--shard-cuts-interval must be a number of seconds >= 0")
    return Scope(parse_namespaces(args.namespaces), parse_namespaces(args.namespaces_denylist), args.shard, args.total_shards)


def sources_from_args(args: argparse.Namespace) -> set[str]:
    """The --resources selection (every collector source by default). Raises ValueError on an unknown one."""
    known = list(dict.fromkeys(r.source for r in COLLECTOR_RESOURCES))
    chosen = {s.strip() for s in args.resources.split(",") if s.strip()} or set(known)
    unknown = sorted(chosen - set(known))
    if unknown:
        raise ValueError(f"--resources: unknown source(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return chosen


def tune_gc() -> None:
    """Run the cyclic garbage collector far less often than Python's default (every 700 net
    allocations). The collector holds millions of long-lived objects and allocates hundreds of
    thousands per relist; with the default thresholds, full collections rescanning them took
    more time than parsing itself (bench/collector.py). Records hold no reference cycles, so
    reference counting frees them; the cyclic collector still runs, just in larger batches."""
    gc.set_threshold(200_000, 50, 1000)


# The first sync must not keep the cyclic collector off forever (an API server that never
# answers would leave it disabled while retries create reference cycles): past this, it runs again.
FIRST_SYNC_GC_PAUSE = 300.0


async def settle_gc_after_first_sync(ready: Callable[[], Awaitable[None]], limit: float = FIRST_SYNC_GC_PAUSE) -> None:
    """Keep the cyclic garbage collector off during the first sync, then freeze what it built.

    The first LIST creates millions of objects that live as long as the process; collecting
    while they are made only rescans them (~8% of a 20,000-Workload sync, bench/collector.py).
    Once synced, ``gc.freeze()`` moves them out of the collector's generations, so no later
    collection scans them again: a full collection of that heap pauses the event loop ~0.3 s,
    after the freeze ~0. It changes no memory (RSS is the same), and objects frozen here are
    still freed by reference counting when a Workload is replaced or deleted."""
    gc.disable()
    try:
        async with asyncio.timeout(limit):
            await ready()
        gc.freeze()
    except TimeoutError:
        log.warning("first_sync_slow", seconds=limit)
    finally:
        gc.enable()


def run(args: argparse.Namespace) -> int:
    from .. import serving

    serving.check(args)  # a --listen that cannot work: the one error line, before the start is logged
    start_logging("collector", args, args.log_level)
    tune_gc()
    try:
        collector = Collector(args)
    except TopologyError as exc:
        log.error("bad_topology_flags", error=str(exc))
        return 2
    except ValueError as exc:  # the scope or the family filter (exporter.config, exporter.kube.scope)
        log.error("bad_flags", error=str(exc))
        return 2
    try:
        asyncio.run(serve(collector))
    except KeyboardInterrupt:  # a second Ctrl-C during shutdown
        return 130
    except CredentialsError as exc:  # no usable kubeconfig or service account: a configuration error
        log.error("no_credentials", error=str(exc))
        return 2
    return 0


async def serve(collector: Collector) -> None:
    """Run until SIGTERM or SIGINT, then stop the informers and the server."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await collector.start()
    try:
        await stop.wait()
    finally:
        log.info("collector_stopping")
        await collector.stop()


class Collector:
    """The running collector: store, informers and HTTP endpoint (tests and the demo start it too)."""

    def __init__(self, args: argparse.Namespace, *, backoff: BackoffPolicy | None = None,
                 client_options: Mapping[str, Any] | None = None) -> None:
        self.args = args
        self.exposition = exposition_from_args(args)
        self.scope = scope_from_args(args)
        self.selected = sources_from_args(args)
        self.autoshard = bool(args.pod_namespace and args.pod)
        self._shard_problem = "waiting for the shard assignment" if self.autoshard else ""
        self._reshards: list[asyncio.Task[None]] = []
        # Balanced ranges: the namespace list (or, with --namespaces, that list), see _balance
        self.balanced = args.shard_ranges == "balanced" and (self.autoshard or self.scope.sharded)
        self.namespace_list: NamespaceList | None = None
        self.namespace_sources: Any = None
        # Cuts weighted by Workloads: shard 0 publishes them in a ConfigMap, every shard follows (_balance)
        self.shard_cuts: ShardCuts | None = None
        self.cuts_location = configmap_location(args.shard_cuts_configmap, args.pod_namespace) \
            if self.balanced and not self.scope.namespaces else None
        self.publisher: CutsPublisher | None = None
        self._publisher_task: asyncio.Task[None] | None = None
        if self.balanced and self.scope.namespaces:
            self.scope = self.scope.with_bounds(self._static_bounds(self.scope.total_shards))
        export_shard(self.exposition, self.scope.shard, self.scope.total_shards)
        self.store, self.handlers, self.gangs = collector_from_args(self.exposition, args)
        self._scope_capacity()
        self._first_synced = False  # the first sync's held capacity rendered (_first_sync)
        self._backoff = backoff
        self._client_options = dict(client_options or {})
        self.port = 0

    async def start(self) -> None:
        from .. import serving

        from ..kube.client import KubeClient
        from ..kube.sources import SourceSet

        args = self.args
        self.client = await KubeClient.create(args.kubeconfig, args.context, args.insecure_skip_tls_verify,
                                              **self._client_options)
        specs = [spec for spec in source_specs(args, self.handlers) if spec.resource.source in self.selected]
        self.positions = QueuePositionPoller(self.client, self.store, self.exposition,
                                             interval=args.queue_position_interval, limit=args.queue_position_limit,
                                             discovery_interval=args.discovery_interval, scope=self.scope,
                                             ) if QUEUE_POSITIONS.source in self.selected else None
        self.sources = SourceSet(self.client, specs, self.exposition, discovery_interval=args.discovery_interval,
                                 backoff=self._backoff, scope=self.scope)
        self.shard_sources: SourceSet | None = None
        for name, state in self.sources.sources.items():
            self.handlers[name].health = state.health  # parse errors counted on the source's own health
        from ..explain import EXPLAIN_ROUTE, explain_route

        try:
            self.endpoint = await serving.start(
                args, self.exposition, self.ready, [explain_route(self.store, self.gangs)], post_json=self.client.post_json,
                title="gangscope collector", sources=self._healths, featured=self._worth_a_look,
                routes=[(EXPLAIN_ROUTE, "why a job is pending or slow, layer by layer (JSON; &pretty, or a browser, "
                                        "gets it indented)")])
        except BaseException:  # a port in use: nothing else started yet, and stop() would not be called
            await self.client.close()
            raise
        self.store.capacity.hold()  # until the first sync: its domains rendered once (_first_sync)
        self._first_sync_task = asyncio.create_task(self._first_sync(), name="collector:first-sync")
        self.gangs.start_timers()
        self.store.start_timers()
        self.port = self.endpoint.port
        self._gc_task = asyncio.create_task(settle_gc_after_first_sync(self.wait_ready))
        self._shard_task: asyncio.Task[None] | None = None
        if self.balanced and not self.scope.namespaces:
            await self._balance()
        if self.autoshard:
            self._shard_task = asyncio.create_task(self._follow_statefulset())
        else:
            # The PodGroup sources (the gang index's handlers) list last: a PodGroup listed before
            # its Workload is judged alone, then again when the Workload joins it; after it, once.
            await self.sources.start(first=FIRST_SOURCES, last=self.gangs.handlers())
            self._start_publisher()
        self._positions_task = (asyncio.create_task(self._poll_positions(), name="source:queue_positions")
                                if self.positions is not None and args.queue_position_interval > 0 else None)
        log.info("collector_started", listen=args.listen, port=self.port, sources=[s.resource.source for s in specs],
                 scope=self.scope.describe(), automatic_sharding=self.autoshard,
                 gpu_resources=list(self.store.gpu_resources), topology_labels=list(self.store.levels.aliases))

    def ready(self) -> tuple[bool, str]:
        if self._shard_problem:
            return False, self._shard_problem
        ready, detail = self.sources.ready()
        if ready and not self._first_synced:
            return False, "rendering the first sync"
        return ready, detail

    async def _first_sync(self, limit: float = FIRST_SYNC_GC_PAUSE) -> None:
        """Once every source has listed (or after ``limit`` seconds), render the capacity held
        since the start: each domain once, from every Node and Workload, not once per second
        of the sync as its numbers grow."""
        try:
            async with asyncio.timeout(limit):
                await self.sources.wait_ready()
        except TimeoutError:
            log.warning("first_sync_slow", seconds=limit)
        finally:
            self._first_synced = True
            self.store.capacity.release()
        self.store.capacity.flush()

    async def wait_ready(self, timeout: float | None = None) -> None:
        async with asyncio.timeout(timeout):
            while not self.ready()[0]:
                await asyncio.sleep(0.02)

    def _worth_a_look(self) -> tuple[str, list[tuple[str, str, str]]]:
        """The landing page's jobs worth a look (exporter.cluster.attention), each linked to its explain."""
        from urllib.parse import urlencode

        from .attention import worth_a_look

        jobs = self.gangs.jobs
        flagged = worth_a_look(self.store.workloads.values(), self.gangs.gangs.values(),
                               jobs.jobs.values() if jobs is not None else (), time.time(),
                               jobs.stale_after if jobs is not None else float("inf"))
        return "Jobs worth a look", [(f"/debug/explain?{urlencode({'namespace': f.namespace, 'name': f.name, 'pretty': ''})}",
                                      f"{f.namespace}/{f.name}", f.why) for f in flagged]

    def _healths(self) -> list[Any]:
        sets = [self.sources] + [s for s in (self.shard_sources, self.namespace_sources) if s is not None]
        return [state.health for s in sets for state in s.sources.values()] + (
            [self.publisher.health] if self.publisher is not None else [])

    async def _follow_statefulset(self) -> None:
        """Automatic sharding (exporter.kube.sharding): find this pod's place, start the sources
        within its shard, then follow the StatefulSet's replicas and reshard when they change."""
        from ..kube.sources import SourceSet, SourceSpec

        args = self.args

        def problem(detail: str) -> None:
            self._shard_problem = f"waiting for the shard assignment: {detail}"

        found = await resolve_with_retry(self.client, args.pod, args.pod_namespace, args.discovery_interval, problem,
                                         self._backoff)
        await self._reshard(found.ordinal, found.replicas)
        self._shard_problem = ""
        await self.sources.start(first=FIRST_SOURCES, last=self.gangs.handlers())
        self._start_publisher()
        lock = asyncio.Lock()

        async def reshard(replicas: int) -> None:
            async with lock:
                await self._reshard(found.ordinal, replicas)

        watch = StatefulSetWatch(found.statefulset, found.replicas,
                                 lambda replicas: self._reshards.append(asyncio.create_task(reshard(replicas))))
        self.shard_sources = SourceSet(self.client, [SourceSpec(STATEFULSETS, watch, namespace=args.pod_namespace,
                                                                field_selector=f"metadata.name={found.statefulset}")],
                                       self.exposition, discovery_interval=args.discovery_interval, backoff=self._backoff)
        await self.shard_sources.run()

    def _static_bounds(self, total: int) -> tuple[int, ...]:
        """--namespaces with balanced ranges: the cuts over that list, no watch needed."""
        s = self.scope
        return balanced_bounds([(ns, None) for ns in s.namespaces if ns not in s.denylist], total)

    async def _balance(self) -> None:
        """Watch the Namespaces and cut the hash space at their quantiles (exporter.kube.sharding),
        and the ConfigMap of the cuts weighted by Workloads, used instead when published for this
        total (exporter.kube.shard_cuts); the namespaced sources start once both are in (or after
        10 s without: equal ranges until the list comes) and move with the cuts."""
        from ..kube.sources import SourceSet, SourceSpec

        denied = set(self.scope.denylist)
        self.shard_cuts = ShardCuts(self.exposition, self.scope.total_shards, self._bounds_changed)
        self.namespace_list = NamespaceList(self.scope.total_shards, self.shard_cuts.set_namespace_bounds,
                                            keep=lambda ns: ns not in denied)
        specs = [SourceSpec(NAMESPACES, self.namespace_list)]
        if self.cuts_location is not None:
            namespace, name = self.cuts_location
            specs.append(SourceSpec(SHARD_CUTS, PublishedCutsWatch(namespace, name, self.shard_cuts.set_published),
                                    namespace=namespace, field_selector=f"metadata.name={name}"))
        else:
            log.info("shard_cuts_off", detail="no namespace for --shard-cuts-configmap (--pod-namespace, $POD_NAMESPACE) "
                     "or it is empty: cutting by namespace counts")
        self.namespace_sources = SourceSet(self.client, specs, self.exposition,
                                           discovery_interval=self.args.discovery_interval, backoff=self._backoff)
        await self.namespace_sources.start()
        try:
            await self.namespace_sources.wait_ready(timeout=10)
        except TimeoutError:
            log.warning("shard_namespaces_unlisted", detail="cutting equal ranges until the namespace list arrives")
        self.scope = self.scope.with_bounds(self._cuts())
        await self.sources.set_scope(self.scope)  # not started yet: the first LISTs use the cuts

    def _cuts(self) -> tuple[int, ...]:
        """The cuts in use now (exporter.kube.shard_cuts.ShardCuts), or () for equal ranges."""
        bounds = self.shard_cuts.bounds if self.shard_cuts is not None else ()
        return bounds if len(bounds) == self.scope.total_shards + 1 else ()

    def _bounds_changed(self, _: tuple[int, ...]) -> None:
        async def move() -> None:  # the cuts of when it runs: moves scheduled in a burst all end on the last
            self.scope = self.scope.with_bounds(self._cuts())
            log.info("collector_sharded", **self.scope.describe())
            await self.sources.set_scope(self.scope)

        self._reshards.append(asyncio.create_task(move()))

    def _start_publisher(self) -> None:
        """On shard 0, once its shard is known: measure and publish the weighted cuts, after its
        own first sync (or 5 minutes), so the count does not compete with it."""
        if self.cuts_location is None or self.shard_cuts is None or self.namespace_list is None \
                or self.scope.shard != 0 or self.args.shard_cuts_interval <= 0:
            return
        namespace, name = self.cuts_location
        denied, listed = set(self.scope.denylist), self.namespace_list
        self.publisher = publisher = CutsPublisher(
            self.client, self.exposition, namespace, name, total=lambda: self.scope.total_shards,
            namespaces=lambda: listed.namespaces, keep=lambda ns: ns not in denied,
            interval=self.args.shard_cuts_interval, discovery_interval=self.args.discovery_interval, backoff=self._backoff)
        self.shard_cuts.publisher = publisher

        async def run() -> None:
            with contextlib.suppress(TimeoutError):
                await self.sources.wait_ready(timeout=FIRST_SYNC_GC_PAUSE)
            await publisher.run()

        self._publisher_task = asyncio.create_task(run(), name="shard:cuts-publisher")

    def _scope_capacity(self) -> None:
        """Tell the capacity accounting which Workloads this collector sees: per-domain series that
        need every Workload only where it sees all (exporter.cluster.capacity, "Sharding")."""
        s = self.scope
        self.store.capacity.set_shards(s.shard, s.total_shards, every_namespace=not (s.namespaces or s.denylist or s.idle))
        self.store.set_cluster_queue_owner(s.shard == 0)

    async def _reshard(self, ordinal: int, replicas: int) -> None:
        self.scope = self.scope.with_shard(ordinal, replicas)
        if self.balanced and self.scope.namespaces:
            self.scope = self.scope.with_bounds(self._static_bounds(self.scope.total_shards))
        elif self.shard_cuts is not None and self.namespace_list is not None:
            self.shard_cuts.set_total(self.scope.total_shards)  # the cuts for the new total, if any yet
            self.namespace_list.set_total(self.scope.total_shards)
            self.scope = self.scope.with_bounds(self._cuts())
        export_shard(self.exposition, ordinal, replicas)
        self._scope_capacity()
        log.info("collector_sharded", **self.scope.describe())
        await self.sources.set_scope(self.scope)

    async def _poll_positions(self) -> None:
        """Queue positions wait for the first sync: the pending ClusterQueues come from the store."""
        await self.sources.wait_ready()
        assert self.positions is not None
        await self.positions.run()

    async def stop(self) -> None:
        tasks = [t for t in (self._gc_task, self._first_sync_task, self._positions_task, self._publisher_task)
                 if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._shard_task is not None:
            self._shard_task.cancel()
        for task in self._reshards:
            task.cancel()
        await asyncio.gather(*(t for t in (self._shard_task, *self._reshards) if t is not None), return_exceptions=True)
        if self.namespace_sources is not None:
            await self.namespace_sources.stop()
        self.gangs.stop_timers()
        self.store.stop_timers()
        await self.sources.stop()
        await self.endpoint.close()
        await self.client.close()

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
import gc
import signal
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog

from ..config import add_kube, add_logging, add_serving
from ..exposition import Exposition
from ..kube.backoff import BackoffPolicy
from ..kube.credentials import CredentialsError
from ..logs import start_logging
from ..topology import TopologyError
from .collector import add_collector_arguments, collector_from_args, source_specs
from .queue_positions import DEFAULT_INTERVAL, DEFAULT_LIMIT, QueuePositionPoller

log = structlog.get_logger(__name__)

DEFAULT_LISTEN = "0.0.0.0:9400"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_serving(p, DEFAULT_LISTEN)
    add_kube(p)
    add_collector_arguments(p)
    p.add_argument("--queue-position-interval", type=float, default=DEFAULT_INTERVAL, metavar="SECONDS",
                   help="seconds between polls of Kueue's visibility API for pending Workloads' queue positions "
                        "(0: do not poll; default 30)")
    p.add_argument("--queue-position-limit", type=int, default=DEFAULT_LIMIT, metavar="N",
                   help="Workloads asked for per ClusterQueue and poll (Kueue's limit parameter; default 1000)")
    add_logging(p)


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
    start_logging("collector", args, args.log_level)
    tune_gc()
    try:
        collector = Collector(args)
    except TopologyError as exc:
        log.error("bad_topology_flags", error=str(exc))
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
        self.exposition = Exposition(args.max_series_per_family)
        self.store, self.handlers, self.gangs = collector_from_args(self.exposition, args)
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
        specs = source_specs(args, self.handlers)
        self.positions = QueuePositionPoller(self.client, self.store, self.exposition,
                                             interval=args.queue_position_interval, limit=args.queue_position_limit,
                                             discovery_interval=args.discovery_interval)
        self.sources = SourceSet(self.client, specs, self.exposition, discovery_interval=args.discovery_interval,
                                 backoff=self._backoff)
        for name, state in self.sources.sources.items():
            self.handlers[name].health = state.health  # parse errors counted on the source's own health
        from ..explain import EXPLAIN_EXAMPLE, explain_route

        self.endpoint = await serving.start(
            args, self.exposition, self.sources.ready, [explain_route(self.store, self.gangs)], post_json=self.client.post_json,
            title="gangscope collector", links=[(EXPLAIN_EXAMPLE, "why a job is pending or slow, layer by layer (JSON)")],
            sources=lambda: [state.health for state in self.sources.sources.values()])
        self.gangs.start_timers()
        self.store.start_timers()
        self.port = self.endpoint.port
        self._gc_task = asyncio.create_task(settle_gc_after_first_sync(self.sources.wait_ready))
        await self.sources.start()
        self._positions_task = (asyncio.create_task(self._poll_positions(), name="source:queue_positions")
                                if args.queue_position_interval > 0 else None)
        log.info("collector_started", listen=args.listen, port=self.port, sources=[s.resource.source for s in specs],
                 gpu_resources=list(self.store.gpu_resources), topology_labels=list(self.store.levels.aliases))

    async def _poll_positions(self) -> None:
        """Queue positions wait for the first sync: the pending ClusterQueues come from the store."""
        await self.sources.wait_ready()
        await self.positions.run()

    async def stop(self) -> None:
        tasks = [t for t in (self._gc_task, self._positions_task) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.gangs.stop_timers()
        self.store.stop_timers()
        await self.sources.stop()
        await self.endpoint.close()
        await self.client.close()

"""Queue positions from Kueue's visibility API, polled off the scrape path.

Kueue serves the pending Workloads of a ClusterQueue, in the order it will consider them, as a
subresource of an aggregated API: ``GET /apis/visibility.kueue.x-k8s.io/<v>/clusterqueues/<cq>/
pendingworkloads?limit=&offset=`` answers a ``PendingWorkloadsSummary`` whose items carry
``positionInClusterQueue`` and ``positionInLocalQueue``, both counted from 0 (kueue
apis/visibility/v1beta2/types.go:66-80, PendingWorkload; pkg/visibility/storage/
pending_workloads_cq.go:64-91 walks ``PendingWorkloadsInfo``, the queue's heap and inadmissible
Workloads in order, and answers 404 for a ClusterQueue Kueue does not know (:73); the default
limit is 1000, pkg/constants/constants.go:43). It is a GET, not a watch, so a :class:`QueuePositionPoller` asks
every ``interval`` seconds, only for the ClusterQueues that hold Workloads waiting for quota, in
pages of up to 1000 with ``offset`` (pending_workloads_cq.go:69-90, ``boundedLimitOffset``), up
to ``limit`` Workloads per queue.

A collector limited to namespaces (``--namespaces``, a Role per namespace) asks the namespaced
``namespaces/<ns>/localqueues/<lq>/pendingworkloads`` instead, for each LocalQueue of its
namespaces that holds a waiting Workload: it answers the same items, only that LocalQueue's, with
their positions in the ClusterQueue and in the LocalQueue (pkg/visibility/storage/
pending_workloads_lq.go:65-95; 404 for a LocalQueue Kueue does not know). The ClusterQueue's
length is then unknown: the positions say "of at least" the last one seen.

Where the API is not served (``v1beta2``, else ``v1beta1``) or forbidden, the source
``queue_positions`` is down and everything else works; discovery is retried every
``discovery_interval``. Positions of a Workload that gets admitted or deleted are dropped at
once, the rest are replaced by the next poll.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import structlog

from ..exposition import Exposition, Family
from ..health import SourceHealth
from ..kube.client import ApiError, Forbidden, KubeClient, NotFound
from ..kube.discovery import served_version
from ..kube.resources import QUEUE_POSITIONS, QUEUE_POSITIONS_LOCAL
from ..kube.scope import Scope
from .clusterqueues import QueuePosition
from .store import ClusterStore, WorkloadKey
from .workload_state import in_queue

log = structlog.get_logger(__name__)

DEFAULT_INTERVAL = 30.0
DEFAULT_LIMIT = 10_000  # Workloads asked for per queue and poll, in pages of PAGE_SIZE
PAGE_SIZE = 1000  # Kueue's own default limit (pkg/constants/constants.go:43)

QUEUE_POSITION = Family(
    "gangscope_workload_queue_position", "gauge",
    "Position of the pending Workload in its ClusterQueue, from Kueue's visibility API (0: considered next).",
    ("namespace", "workload", "cluster_queue"),
)
LOCAL_QUEUE_POSITION = Family(
    "gangscope_workload_local_queue_position", "gauge",
    "Position of the pending Workload among its LocalQueue's Workloads in the ClusterQueue (0: first), from Kueue's "
    "visibility API.",
    ("namespace", "workload", "local_queue"),
)
FAMILIES = (QUEUE_POSITION, LOCAL_QUEUE_POSITION)


def pending_path(version: str, cluster_queue: str) -> str:
    return f"/apis/{QUEUE_POSITIONS.group}/{version}/clusterqueues/{cluster_queue}/pendingworkloads"


def local_pending_path(version: str, namespace: str, local_queue: str) -> str:
    return f"/apis/{QUEUE_POSITIONS_LOCAL.group}/{version}/namespaces/{namespace}/localqueues/{local_queue}/pendingworkloads"


def _items(body: Any, what: str) -> list[Any]:
    items = body.get("items") if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise ApiError(200, "BadResponse", f"pendingworkloads of {what}: no items list")
    return items


async def _pages(client: KubeClient, path: str, what: str, limit: int, page_size: int) -> tuple[list[Any], bool] | None:
    """Every item of a pendingworkloads answer, page by page with ``offset``, up to ``limit``;
    and whether the list ended before the limit (complete). None on 404."""
    out: list[Any] = []
    while len(out) < limit:
        size = min(page_size, limit - len(out))
        try:
            body: Any = await client.get_json(path, {"limit": str(size), "offset": str(len(out))})
        except NotFound:
            return None
        items = _items(body, what)
        out += items
        if len(items) < size:
            return out, True
    return out, False


def _position(item: Any) -> tuple[WorkloadKey, int, int, str] | None:
    meta = item.get("metadata") if isinstance(item, dict) else None
    ns, name = (meta.get("namespace"), meta.get("name")) if isinstance(meta, dict) else (None, None)
    pos, lpos, lq = (item.get("positionInClusterQueue"), item.get("positionInLocalQueue"),
                     item.get("localQueueName")) if isinstance(item, dict) else (None, None, None)
    if not (isinstance(ns, str) and isinstance(name, str) and type(pos) is int and type(lpos) is int and isinstance(lq, str)):
        return None
    return (ns, name), pos, lpos, lq


async def fetch_positions(client: KubeClient, version: str, cluster_queue: str, limit: int,
                          now: float, page_size: int = PAGE_SIZE) -> tuple[dict[WorkloadKey, QueuePosition], int] | None:
    """The positions Kueue lists for one ClusterQueue and the number of unusable items; None
    when Kueue does not know the ClusterQueue (404). Other errors are raised."""
    found = await _pages(client, pending_path(version, cluster_queue), cluster_queue, limit, page_size)
    if found is None:
        return None
    items, complete = found
    out: dict[WorkloadKey, QueuePosition] = {}
    bad = 0
    for item in items:
        p = _position(item)
        if p is None:
            bad += 1
            continue
        key, pos, lpos, lq = p
        out[key] = QueuePosition(cluster_queue, pos, len(items), complete, lq, lpos, now)
    return out, bad


async def fetch_local_positions(client: KubeClient, version: str, namespace: str, local_queue: str, cluster_queue: str,
                                limit: int, now: float, page_size: int = PAGE_SIZE,
                                ) -> tuple[dict[WorkloadKey, QueuePosition], int] | None:
    """The positions Kueue lists for one LocalQueue (the namespaced endpoint): the ClusterQueue's
    length is not known, so ``listed`` is the last position seen plus one, never complete."""
    found = await _pages(client, local_pending_path(version, namespace, local_queue), f"{namespace}/{local_queue}",
                         limit, page_size)
    if found is None:
        return None
    items, _ = found
    parsed = [_position(item) for item in items]
    good = [p for p in parsed if p is not None]
    at_least = max((pos for _, pos, _, _ in good), default=-1) + 1
    return ({key: QueuePosition(cluster_queue, pos, at_least, False, lq, lpos, now) for key, pos, lpos, lq in good},
            len(parsed) - len(good))


class QueuePositionPoller:
    """Polls the visibility API for the store's pending ClusterQueues and renders the positions."""

    def __init__(self, client: KubeClient, store: ClusterStore, exposition: Exposition, *,
                 interval: float = DEFAULT_INTERVAL, limit: int = DEFAULT_LIMIT, discovery_interval: float = 60.0,
                 clock: Callable[[], float] = time.time, scope: Scope | None = None, page_size: int = PAGE_SIZE) -> None:
        self.client, self.store, self.exposition = client, store, exposition
        self.interval, self.limit, self.discovery_interval, self.clock = interval, limit, discovery_interval, clock
        self.page_size = page_size
        # --namespaces: the namespaced LocalQueue endpoint, which a Role in each namespace grants
        self.resource = QUEUE_POSITIONS_LOCAL if scope is not None and scope.namespaces else QUEUE_POSITIONS
        exposition.register(*FAMILIES)
        self.health = SourceHealth(QUEUE_POSITIONS.source, exposition)
        self.version: str | None = None
        store.on_workload_change.append(self._workload_changed)

    def pending_cluster_queues(self) -> set[str]:
        """ClusterQueues that hold a Workload waiting for quota."""
        return {wl.cluster_queue for wl in self.store.workloads.values()
                if wl.cluster_queue and in_queue(wl.state)}

    def pending_local_queues(self) -> set[tuple[str, str, str]]:
        """(namespace, LocalQueue, its ClusterQueue) of the waiting Workloads (the store holds
        only those of the collector's namespaces)."""
        return {(wl.namespace, wl.queue_name, wl.cluster_queue) for wl in self.store.workloads.values()
                if wl.cluster_queue and wl.queue_name and in_queue(wl.state)}

    async def run(self) -> None:
        """Discover, poll every ``interval``, mark the source down when it is not served or
        forbidden; never returns (cancel it)."""
        r = self.resource
        while True:
            try:
                self.version = await served_version(self.client, r)
            except ApiError as e:
                self.health.down(f"discovery: {e}")
                await asyncio.sleep(self.discovery_interval)
                continue
            if self.version is None:
                self._set({})
                self.health.down(f"not served (looked for {r.plural}.{r.group} {'/'.join(r.versions)})", error=False)
                await asyncio.sleep(self.discovery_interval)
                continue
            try:
                await self.poll_once()
            except Forbidden as e:
                self._set({})
                log.warning("kube_source_forbidden", source=self.health.name, error=str(e))
                self.health.down(f"forbidden: {e.message}")
                await asyncio.sleep(self.discovery_interval)
                continue
            except ApiError as e:  # keep the last positions; retry at the next interval
                log.warning("queue_positions_failed", error=str(e))
                self.health.error(str(e))
            await asyncio.sleep(self.interval)

    async def poll_once(self) -> None:
        """One round over the pending ClusterQueues, or LocalQueues (``self.version`` must be set)."""
        assert self.version is not None
        positions: dict[WorkloadKey, QueuePosition] = {}
        bad = 0
        now = self.clock()
        if self.resource is QUEUE_POSITIONS_LOCAL:
            for ns, lq, cq in sorted(self.pending_local_queues()):
                found = await fetch_local_positions(self.client, self.version, ns, lq, cq, self.limit, now, self.page_size)
                if found is not None:
                    positions.update(found[0])
                    bad += found[1]
        else:
            for cq in sorted(self.pending_cluster_queues()):
                found = await fetch_positions(self.client, self.version, cq, self.limit, now, self.page_size)
                if found is not None:
                    positions.update(found[0])
                    bad += found[1]
        if bad:
            self.health.parse_error(bad)
        # A Workload admitted while the round ran is no longer waiting: drop what Kueue listed before.
        self._set({k: p for k, p in positions.items() if self._waiting(k)})
        self.health.sync_ok(objects=len(positions))

    def _waiting(self, key: WorkloadKey) -> bool:
        wl = self.store.workloads.get(key)
        return wl is not None and in_queue(wl.state)

    def _set(self, positions: dict[WorkloadKey, QueuePosition]) -> None:
        """Replace the positions: each Workload's two lines are an owner of their own, so a poll
        renders what it found and a Workload admitted meanwhile drops only its own lines."""
        old, self.store.queue_positions = self.store.queue_positions, positions
        for key in old.keys() - positions.keys():
            self.exposition.delete(("queue_position", *key))
        for key, p in positions.items():
            self._render(key, p)

    def _render(self, key: WorkloadKey, p: QueuePosition) -> None:
        ns, name = key
        self.exposition.set(("queue_position", ns, name), {
            QUEUE_POSITION: [QUEUE_POSITION.sample((ns, name, p.cluster_queue), p.position)],
            LOCAL_QUEUE_POSITION: [LOCAL_QUEUE_POSITION.sample((ns, name, p.local_queue), p.local_position)],
        })

    def _workload_changed(self, key: WorkloadKey) -> None:
        """The store's hook: a Workload that stopped waiting loses its position at once (its own
        lines: an admission under churn re-rendered its whole ClusterQueue's positions)."""
        if key in self.store.queue_positions and not self._waiting(key):
            del self.store.queue_positions[key]
            self.exposition.delete(("queue_position", *key))

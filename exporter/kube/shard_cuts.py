"""Shards cut by Workloads: shard 0 measures and publishes the cuts, every shard follows them.

Cuts at the quantiles of the namespaces' hashes (:class:`exporter.kube.sharding.NamespaceList`)
give every shard as many namespaces, not as many Workloads; only a count of the Workloads per
namespace can, and no shard sees the others' Workloads. So one shard measures for all
(:mod:`exporter.kube.weighted_cuts` holds the judgement, this module the I/O):

- :class:`CutsPublisher` runs on shard 0 only. At start and every ``--shard-cuts-interval``
  seconds it counts the Workloads of every namespace with one paginated metadata-only LIST
  (``PartialObjectMetadataList``: names and namespaces, no spec or status to decode), cuts the
  hash space by those counts and writes the cuts into one ConfigMap of its own namespace
  (``--shard-cuts-configmap``), only when :func:`~exporter.kube.weighted_cuts.reason_to_move`
  says the published ones have become clearly worse (or are missing, malformed, or for another
  number of shards), so cuts do not move under the churn of jobs. A write is conditional on the
  ``resourceVersion`` just read: two publishers (an HA pair of shard 0) cannot overwrite each
  other blindly; the loser gets 409 and judges again. Its health is the source ``shard_weights``.
- :class:`PublishedCutsWatch` is every shard's informer handler of that one ConfigMap (a watch
  with ``fieldSelector=metadata.name=...``; health: the source ``shard_cuts``).
- :class:`ShardCuts` decides which cuts a shard uses: the published ones when they were made
  for the shard's total, otherwise the namespace-count cuts (no ConfigMap yet, forbidden,
  malformed, another total), and says which in the log and in ``gangscope_shard_cuts_info``.

Shards that read the same version of the ConfigMap compute the same ranges, so the ranges still
partition the space; a namespace created after the measurement falls where its hash is. Nothing
here stops a shard from serving: a failed LIST, a forbidden write or a malformed ConfigMap is
counted and logged, and the shards keep the cuts they have (or the namespace-count ones).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import structlog

from ..exposition import Exposition, Family
from ..health import SourceHealth
from .backoff import Backoff, BackoffPolicy
from .client import ApiError, Forbidden, KubeClient, NotFound, report_failure
from .discovery import served_version
from .informer import PARTIAL_LIST_ACCEPT, collection_path
from .resources import WORKLOADS
from .weighted_cuts import (MOVE_THRESHOLD, PublishedCuts, configmap_data, largest_share, namespace_weights,
                            parse_configmap, reason_to_move, weighted_bounds)

log = structlog.get_logger(__name__)

DEFAULT_INTERVAL = 600.0
PUBLISHER_SOURCE = "shard_weights"
PAGE_SIZE = 500
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

CUTS_INFO = Family(
    "gangscope_shard_cuts_info", "info",
    "Which cuts of the hash space this shard uses: workloads (published by shard 0 from its count of Workloads per "
    "namespace), namespaces (the quantiles of the namespace list) or equal (equal ranges).", ("basis",),
)


def configmap_location(value: str, pod_namespace: str, environ: dict[str, str] | None = None) -> tuple[str, str] | None:
    """``--shard-cuts-configmap [NAMESPACE/]NAME`` as (namespace, name): without a namespace, the
    collector's own (``--pod-namespace``, else ``$POD_NAMESPACE``); None when the value is empty
    or no namespace is known (no weighted cuts). Raises ValueError on a malformed name."""
    if not value:
        return None
    namespace, _, name = value.rpartition("/")
    namespace = namespace or pod_namespace or (os.environ if environ is None else environ).get("POD_NAMESPACE", "")
    if not _DNS_SUBDOMAIN.match(name) or len(name) > 253:
        raise ValueError(f"--shard-cuts-configmap: {name!r} is not a ConfigMap name")
    if namespace and not _DNS_LABEL.match(namespace):
        raise ValueError(f"--shard-cuts-configmap: {namespace!r} is not a namespace name")
    return (namespace, name) if namespace else None


class ShardCuts:
    """Which cuts one shard uses (see the module docstring); ``on_bounds`` is called with the
    new cuts (``()``: equal ranges) whenever they change. On shard 0, ``publisher`` is woken
    when the published cuts go missing or bad, or the total changes: cuts for it at once, not
    at the next interval."""

    def __init__(self, exposition: Exposition, total: int, on_bounds: Callable[[tuple[int, ...]], None]) -> None:
        self.exposition, self.total, self._on_bounds = exposition, total, on_bounds
        self.namespace_bounds: tuple[int, ...] = ()
        self.published: PublishedCuts | None = None
        self.publisher: CutsPublisher | None = None
        self.bounds: tuple[int, ...] = ()
        self.basis = ""
        exposition.register(CUTS_INFO)
        self._update()

    def set_namespace_bounds(self, bounds: tuple[int, ...]) -> None:
        self.namespace_bounds = bounds
        self._update()

    def set_published(self, cuts: PublishedCuts | None) -> None:
        self.published = cuts
        self._update()
        if self.publisher is not None and (cuts is None or cuts.total != self.total):
            self.publisher.wake()

    def set_total(self, total: int) -> None:
        self.total = total
        self._update()
        if self.publisher is not None:
            self.publisher.wake()

    def _update(self) -> None:
        published = self.published
        if published is not None and published.total == self.total > 1:
            bounds, basis = published.bounds, "workloads"
        elif len(self.namespace_bounds) == self.total + 1 and self.total > 1:
            bounds, basis = self.namespace_bounds, "namespaces"
        else:
            bounds, basis = (), "equal"
        if basis != self.basis:
            why = {"workloads": "the cuts shard 0 published", "namespaces": (
                "no readable cuts published" if published is None else
                f"the published cuts are for {published.total} shards, not {self.total}"),
                "equal": "no namespace list yet" if self.total > 1 else "one shard"}[basis]
            log.info("shard_cuts_basis", basis=basis, why=why, total_shards=self.total,
                     **({"measured_workloads": published.workloads} if basis == "workloads" and published else {}))
            self.basis = basis
            self.exposition.set(("shard_cuts",), {CUTS_INFO: [CUTS_INFO.sample((basis,), 1)]})
        if bounds != self.bounds:
            self.bounds = bounds
            self._on_bounds(bounds)


class PublishedCutsWatch:
    """Informer handler of the one ConfigMap: ``on_cuts`` gets the cuts it publishes, or None when
    it is absent, deleted or malformed (a malformed one is also a parse error of the source,
    with what is wrong in the log)."""

    def __init__(self, namespace: str, name: str, on_cuts: Callable[[PublishedCuts | None], None]) -> None:
        self.namespace, self.name, self._on_cuts = namespace, name, on_cuts

    def replace(self, objects: list[dict[str, Any]]) -> None:
        mine = [o for o in objects if self._mine(o)]
        if not mine:
            self._on_cuts(None)
            return
        self.apply("MODIFIED", mine[0])

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        if not self._mine(obj):
            return
        if event_type == "DELETED":
            self._on_cuts(None)
            return
        try:
            cuts = parse_configmap(obj)
        except ValueError as exc:
            self._on_cuts(None)
            raise ValueError(f"ConfigMap {self.namespace}/{self.name} does not hold shard cuts ({exc}): "
                             "using the namespace-count cuts") from None
        self._on_cuts(cuts)

    def _mine(self, obj: Any) -> bool:
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        return isinstance(meta, dict) and meta.get("name") == self.name


async def count_workloads(client: KubeClient, version: str, page_size: int = PAGE_SIZE) -> Counter[str]:
    """Workloads per namespace, from a paginated metadata-only LIST of every namespace (a
    consistent read: the counts are of one moment). Raises ApiError (410 when a continue token
    expires: the caller tries again later)."""
    path = collection_path(WORKLOADS, version)
    counts: Counter[str] = Counter()
    token = ""
    while True:
        params = {"limit": str(page_size), **({"continue": token} if token else {})}
        page = await client.get_json(path, params, accept=PARTIAL_LIST_ACCEPT)
        meta = page.get("metadata") if isinstance(page, dict) else None
        items = page.get("items") if isinstance(page, dict) else None
        if items is None and isinstance(meta, dict) and isinstance(page, dict) and "items" in page:
            items = []  # an empty PartialObjectMetadataList says "items": null
        if not isinstance(items, list) or not isinstance(meta, dict):
            raise ApiError(200, "BadResponse", f"list {path}: not a List object")
        for item in items:
            item_meta = item.get("metadata") if isinstance(item, dict) else None
            ns = item_meta.get("namespace") if isinstance(item_meta, dict) else None
            if isinstance(ns, str) and ns:
                counts[ns] += 1
        token = str(meta.get("continue") or "")
        if not token:
            return counts


class CutsPublisher:
    """Shard 0's loop (see the module docstring): ``total`` and ``namespaces`` (the namespace
    list, so that namespaces without Workloads weigh too) are read at each round, ``keep`` drops
    the namespaces no shard keeps (the denylist). :meth:`wake` asks for a round now (the total
    changed; the ConfigMap went missing or bad)."""

    def __init__(self, client: KubeClient, exposition: Exposition, namespace: str, name: str, *,
                 total: Callable[[], int], namespaces: Callable[[], Iterable[str]],
                 keep: Callable[[str], bool] = lambda ns: True, interval: float = DEFAULT_INTERVAL,
                 discovery_interval: float = 60.0, threshold: float = MOVE_THRESHOLD, page_size: int = PAGE_SIZE,
                 backoff: BackoffPolicy | None = None, clock: Callable[[], float] = time.time) -> None:
        self.client, self.namespace, self.name = client, namespace, name
        self.total, self.namespaces, self.keep = total, namespaces, keep
        self.interval, self.discovery_interval, self.threshold = interval, discovery_interval, threshold
        self.page_size, self.clock = page_size, clock
        self.health = SourceHealth(PUBLISHER_SOURCE, exposition)
        self._errors = Backoff(backoff or BackoffPolicy())
        self._wake = asyncio.Event()

    @property
    def path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/configmaps"

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        """Measure and publish at once, then every ``interval`` or when woken; after a failure,
        again after a backoff (at most ``interval``). Never returns (cancel it)."""
        while True:
            self._wake.clear()
            delay = await self._round()
            if delay is None:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.interval):
                        await self._wake.wait()
            else:
                await asyncio.sleep(delay)

    async def _round(self) -> float | None:
        """One round; None when it went through, else how long to wait before the next."""
        try:
            await self.round()
        except Forbidden as e:
            log.warning("shard_cuts_forbidden", configmap=f"{self.namespace}/{self.name}", error=str(e))
            self.health.down(f"forbidden: {e.message}")
            return self.discovery_interval
        except ApiError as e:
            if e.status == 409:  # another publisher wrote between our read and write: judge its cuts
                log.info("shard_cuts_conflict", configmap=f"{self.namespace}/{self.name}", error=str(e))
            else:  # a failed LIST, a namespace that does not exist...: said once, then counted
                report_failure(self.client, log, "shard_cuts_failed", PUBLISHER_SOURCE, e,
                               configmap=f"{self.namespace}/{self.name}")
                self.health.error(str(e))
            return min(self._errors.next(), self.interval)
        self._errors.reset()
        return None

    async def round(self) -> None:
        """Count, judge, and write the ConfigMap if the published cuts should move."""
        version = await served_version(self.client, WORKLOADS)
        if version is None:
            self.health.down(f"not served (looked for {WORKLOADS.plural}.{WORKLOADS.group}): no Workloads to weigh by",
                             error=False)
            return
        total = self.total()
        if total <= 1:  # one shard: nothing to cut
            self.health.sync_ok(objects=0)
            return
        counts = await count_workloads(self.client, version, self.page_size)
        measured_at = self.clock()
        weights = namespace_weights({ns: n for ns, n in counts.items() if self.keep(ns)},
                                    [ns for ns in self.namespaces() if self.keep(ns)])
        fresh = weighted_bounds(weights, total)
        current, found = await self._read()
        reason = reason_to_move(current, fresh, weights, total, self.threshold)
        if reason is not None:
            cuts = PublishedCuts(total, fresh, measured_at, sum(counts.values()), len(weights))
            await self._write(found, cuts)
            log.info("shard_cuts_published", configmap=f"{self.namespace}/{self.name}", why=reason,
                     total_shards=total, workloads=cuts.workloads, namespaces=cuts.namespaces,
                     largest_share=round(largest_share(fresh, weights), 3))
        self.health.sync_ok(objects=sum(counts.values()), now=measured_at)

    async def _read(self) -> tuple[PublishedCuts | None, dict[str, Any] | None]:
        """The published cuts (None when absent or malformed) and the ConfigMap as read (None when absent)."""
        try:
            obj = await self.client.get_json(f"{self.path}/{self.name}")
        except NotFound:
            return None, None
        try:
            return parse_configmap(obj), obj
        except ValueError as exc:
            log.warning("shard_cuts_malformed", configmap=f"{self.namespace}/{self.name}", error=str(exc),
                        action="replacing it")
            self.health.parse_error()
            return None, obj

    async def _write(self, found: dict[str, Any] | None, cuts: PublishedCuts) -> None:
        """Create the ConfigMap, or replace its data keeping the rest (labels, annotations) and its
        ``resourceVersion``, so a write over a newer version fails with 409."""
        if found is None:
            await self.client.post_json(self.path, {
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": self.name, "namespace": self.namespace,
                             "labels": {"app.kubernetes.io/name": "gangscope", "app.kubernetes.io/component": "collector"}},
                "data": configmap_data(cuts)})
        else:
            await self.client.put_json(f"{self.path}/{self.name}", dict(found, data=configmap_data(cuts)))


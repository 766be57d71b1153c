"""Which shard this collector is: fixed by flags, or taken from its StatefulSet and kept current.

``gangscope_shard_ordinal{shard_ordinal}`` and ``gangscope_total_shards`` say it in the
exposition, as ``kube_state_metrics_shard_ordinal`` and ``kube_state_metrics_total_shards`` do
(kube-state-metrics pkg/sharding/metrics.go), so an alert can find a shard that is missing and
shards that disagree on the total (alerts/config.yaml: GangscopeShardsMissing,
GangscopeShardingMismatch).

Automatic sharding follows kube-state-metrics (pkg/metricshandler/metrics_handler.go at
c92fe0c5, ``Run``, ``detectStatefulSet``, ``shardingSettingsFromStatefulSet``,
``detectNominalFromPod``): with ``--pod`` and ``--pod-namespace`` (the downward API's pod name
and namespace) the collector reads its own Pod, follows the Pod's controller ownerReference to
its ``apps/v1`` StatefulSet, takes its ordinal from the Pod's name (the StatefulSet's name, a
dash, the ordinal) and the total from the StatefulSet's ``spec.replicas`` (1 when unset), then
watches that one StatefulSet (``fieldSelector=metadata.name=...``) and reshards live when the
replicas change: ``kubectl scale statefulset gangscope-collector --replicas=4`` and every shard
narrows to its new range without a restart. A pod whose ordinal is past the new total (being
scaled away) keeps no namespace, so no series is exported twice meanwhile.

**Ranges that balance.** Equal ranges of the FNV-1a space do not split namespaces evenly: names
that differ in a short suffix share the hash's top bits (``team-00`` .. ``team-11`` and
``ml-team-001`` .. ``300`` fall in one quarter). :func:`balanced_bounds` cuts the space at the
quantiles of the namespaces' hashes instead, so each shard holds the same number of namespaces
(12 over 3: 4/4/4), and each still asks the API server for one ``shardRange()`` and filters the
same way (exporter/kube/scope.py). The cuts are a pure function of the namespace list, names and
creation times, so every shard that has seen the same list computes the same cuts with no
coordination; a namespace created later goes to the shard whose range holds its hash. To keep
cuts still while the list changes a little, they are taken over a *reference* part of the list:
the oldest namespaces up to the largest checkpoint at or below their number, checkpoints growing
by ``threshold`` (10%: 1, 2, ... 20, 22, 24, ... 259, 284, 312 ...); namespaces created after
the reference fall wherever their hash is, and the cuts move only when the count crosses the next
checkpoint (or a namespace of the reference part is deleted). A move hands over whole
namespaces: the ranges always partition the space, so with the same list every namespace is on
exactly one shard. Two shards that have not yet seen the same namespace event disagree until
they have (a namespace on two shards or on none for that long).

Equal numbers of namespaces are not equal numbers of Workloads; where shard 0 has published cuts
weighted by them (:mod:`exporter.kube.shard_cuts`), every shard uses those instead, and these
namespace-count cuts are what each falls back to.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import structlog

from ..exposition import Exposition, Family
from .backoff import Backoff, BackoffPolicy
from .client import ApiError, KubeClient
from ..fields import parse_time
from .scope import HASH_SPACE, fnv1a_64

log = structlog.get_logger(__name__)

SHARD_ORDINAL = Family(
    "gangscope_shard_ordinal", "gauge",
    "This collector's shard (zero-indexed) of gangscope_total_shards; the label repeats the value, as "
    "kube_state_metrics_shard_ordinal does.", ("shard_ordinal",),
)
TOTAL_SHARDS = Family(
    "gangscope_total_shards", "gauge",
    "Shards the collector's namespaces are split into (1: not sharded). Shards that disagree double or lose namespaces.",
)


def export_shard(exposition: Exposition, shard: int, total: int) -> None:
    """The two series; a shard past the total (a pod being scaled away, keeping nothing) exports
    no ordinal, so it neither fills nor overflows the missing-shard arithmetic."""
    exposition.register(SHARD_ORDINAL, TOTAL_SHARDS)
    lines = {TOTAL_SHARDS: [TOTAL_SHARDS.sample([], total)]}
    if shard < total:
        lines[SHARD_ORDINAL] = [SHARD_ORDINAL.sample((str(shard),), shard)]
    exposition.set(("shard",), lines)


DEFAULT_THRESHOLD = 0.1  # the reference part of the namespace list grows in steps of 10%


def reference_size(n: int, threshold: float = DEFAULT_THRESHOLD) -> int:
    """The largest checkpoint at or below ``n``: 1, 2, 3, ..., each the last plus ``threshold``
    of it (rounded down, at least one more)."""
    size = 0
    while True:
        step = max(size + 1, math.floor(size * (1 + threshold)))
        if step > n:
            return size
        size = step


def balanced_bounds(namespaces: Iterable[tuple[str, float | None]], total: int,
                    threshold: float = DEFAULT_THRESHOLD) -> tuple[int, ...]:
    """``total + 1`` cuts of ``[0, 2^64)``, shard ``i`` holding ``[cut[i], cut[i + 1])``, from
    ``(name, creation time)`` of every namespace (see the module docstring): the reference part
    is the oldest :func:`reference_size` namespaces and every namespace created at the same time
    as the last of them (an unknown time counts as the oldest); shard ``i`` starts at the hash of
    the reference namespace of rank ``round(i * size / total)`` by hash. With no namespace, the
    equal ranges."""
    if total <= 1:
        return (0, HASH_SPACE)
    by_age = sorted(((created if created is not None else -math.inf, name) for name, created in namespaces))
    size = reference_size(len(by_age), threshold)
    if not size:
        return tuple(i * HASH_SPACE // total for i in range(total + 1))
    newest = by_age[size - 1][0]
    hashes = sorted(fnv1a_64(name) for created, name in by_age if created <= newest)
    n = len(hashes)
    return (0, *(hashes[min(round(i * n / total), n - 1)] for i in range(1, total)), HASH_SPACE)


class NamespaceList:
    """Informer handler of the Namespaces: their names and creation times, and the cuts of
    :func:`balanced_bounds` over them; ``on_bounds`` is called when the cuts change."""

    def __init__(self, total: int, on_bounds: Callable[[tuple[int, ...]], None],
                 threshold: float = DEFAULT_THRESHOLD, keep: Callable[[str], bool] = lambda ns: True) -> None:
        self.total, self.threshold, self._on_bounds, self._keep = total, threshold, on_bounds, keep
        self.namespaces: dict[str, float | None] = {}
        self.bounds: tuple[int, ...] = ()
        self.health: Any = None  # set by the informer's runner

    def replace(self, objects: list[dict[str, Any]]) -> None:
        self.namespaces = dict(filter(None, (_namespace(o) for o in objects)))
        self._update()

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        found = _namespace(obj)
        if found is None:
            return
        if event_type == "DELETED":
            self.namespaces.pop(found[0], None)
        else:
            self.namespaces[found[0]] = found[1]
        self._update()

    def set_total(self, total: int) -> None:
        self.total = total
        self._update()

    def _update(self) -> None:
        bounds = balanced_bounds([nc for nc in self.namespaces.items() if self._keep(nc[0])], self.total, self.threshold)
        if bounds != self.bounds:
            self.bounds = bounds
            log.info("shard_bounds_changed", namespaces=len(self.namespaces), total_shards=self.total)
            self._on_bounds(bounds)


def _namespace(obj: Any) -> tuple[str, float | None] | None:
    """A Namespace's name and creation time (None where absent or unreadable)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        return None
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return None
    created = meta.get("creationTimestamp")
    return name, parse_time(created) if isinstance(created, str) else None


class ShardingError(Exception):
    """The Pod or its StatefulSet cannot tell this collector's shard (not a StatefulSet pod, a
    name without an ordinal, no RBAC to read them)."""


def ordinal_from_pod_name(statefulset: str, pod: str) -> int:
    """``gangscope-collector-3`` of StatefulSet ``gangscope-collector`` -> 3."""
    prefix = statefulset + "-"
    suffix = pod[len(prefix):] if pod.startswith(prefix) else ""
    if not suffix.isdigit():
        raise ShardingError(f"pod {pod} is not named {prefix}<ordinal>")
    return int(suffix)


def replicas_of(statefulset: dict[str, Any]) -> int:
    spec = statefulset.get("spec") if isinstance(statefulset, dict) else None
    replicas = spec.get("replicas") if isinstance(spec, dict) else None
    return replicas if isinstance(replicas, int) and not isinstance(replicas, bool) and replicas >= 0 else 1


@dataclass
class Assignment:
    """This pod's place: its StatefulSet, ordinal and the StatefulSet's replicas."""

    statefulset: str
    ordinal: int
    replicas: int


async def find_assignment(client: KubeClient, pod: str, namespace: str) -> Assignment:
    """Read the Pod, its controller StatefulSet and that StatefulSet's replicas."""
    try:
        obj = await client.get_json(f"/api/v1/namespaces/{namespace}/pods/{pod}")
    except ApiError as exc:
        raise ShardingError(f"cannot read pod {namespace}/{pod}: {exc}") from None
    owners = (obj.get("metadata") or {}).get("ownerReferences") or [] if isinstance(obj, dict) else []
    for ref in owners:
        if isinstance(ref, dict) and ref.get("apiVersion") == "apps/v1" and ref.get("kind") == "StatefulSet" \
                and ref.get("controller") is True and isinstance(ref.get("name"), str):
            name = ref["name"]
            try:
                ss = await client.get_json(f"/apis/apps/v1/namespaces/{namespace}/statefulsets/{name}")
            except ApiError as exc:
                raise ShardingError(f"cannot read statefulset {namespace}/{name}: {exc}") from None
            return Assignment(name, ordinal_from_pod_name(name, pod), replicas_of(ss))
    raise ShardingError(f"pod {namespace}/{pod} has no StatefulSet controller to shard by")


class StatefulSetWatch:
    """Informer handler of the one StatefulSet: calls ``on_replicas`` when its replicas change."""

    def __init__(self, name: str, replicas: int, on_replicas: Callable[[int], None]) -> None:
        self.name, self.replicas, self._on_replicas = name, replicas, on_replicas

    def replace(self, objects: list[dict[str, Any]]) -> None:
        for obj in objects:
            self.apply("MODIFIED", obj)

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        if event_type == "DELETED" or (obj.get("metadata") or {}).get("name") != self.name:
            return
        replicas = replicas_of(obj)
        if replicas != self.replicas:
            log.info("shard_total_changed", statefulset=self.name, replicas=replicas, before=self.replicas)
            self.replicas = replicas
            self._on_replicas(replicas)


async def resolve_with_retry(client: KubeClient, pod: str, namespace: str, retry_limit: float,
                             on_error: Callable[[str], None], backoff: BackoffPolicy | None = None) -> Assignment:
    """:func:`find_assignment`, retried with backoff (at most every ``retry_limit`` seconds)
    until it works: a misconfigured shard waits, visibly (``on_error``), rather than exiting."""
    errors = Backoff(backoff or BackoffPolicy())
    while True:
        try:
            return await find_assignment(client, pod, namespace)
        except ShardingError as exc:
            log.error("shard_unknown", error=str(exc))
            on_error(str(exc))
            await asyncio.sleep(min(errors.next(), retry_limit))


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
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from ..exposition import Exposition, Family
from .backoff import Backoff, BackoffPolicy
from .client import ApiError, KubeClient
from .resources import STATEFULSETS

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


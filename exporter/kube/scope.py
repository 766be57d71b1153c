"""What one process watches of the namespaced resources: namespaces, a denylist, and its shard.

A collector can be scoped like kube-state-metrics: ``--namespaces`` (watch only these, one
informer per namespace, so a Role in each is all the RBAC it needs), ``--namespaces-denylist``
(watch everything else: a ``metadata.namespace!=`` field selector, checked again here), and
``--shard N --total-shards M`` (keep the namespaces whose hash falls in shard N's range).

Sharding is by **namespace**, not by object uid as kube-state-metrics does: a job's Workload,
PodGroup and pods share a namespace, so each shard joins them locally and exports whole jobs.
The hash and the ranges are Kubernetes' own (KEP-5866, server-side sharded list and watch,
alpha in 1.36): FNV-1a 64-bit of the field's bytes (k8s.io/apimachinery pkg/sharding/hash.go
``HashField``: ``fnv.New64a`` over ``[]byte(value)``), compared as ``start <= hash < end``
(pkg/sharding/selector.go ``Matches``), the space ``[0x0, 0x10000000000000000)`` cut into
``M`` contiguous ranges as the API reference's examples cut it (pkg/apis/meta/v1/types.go,
``ListOptions.ShardSelector``). So the informer can ask a 1.36+ API server with the
``ShardedListAndWatch`` feature gate for ``shardSelector=shardRange(object.metadata.namespace,
'0x...', '0x...')`` and get exactly the objects it would otherwise have filtered itself; a
server that ignores the parameter (it echoes ``metadata.shardInfo`` when it honours it) sends
everything, and the same hash filters here. Cluster-scoped resources (Nodes, Topologies,
ResourceFlavors) are watched whole by every shard.

Equal ranges split the hash space, not the namespaces: names that differ in a short suffix
(``team-00`` .. ``team-11``) share the hash's top bits and land on one shard. ``bounds`` cuts the
space elsewhere: where :func:`exporter.kube.sharding.balanced_bounds` puts the cuts, at the
quantiles of the namespaces' hashes, which every shard computes the same way from the namespace
list, or where shard 0 published cuts weighted by each namespace's Workloads
(:mod:`exporter.kube.shard_cuts`); the selector and the local filter then use those ranges.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

HASH_SPACE = 1 << 64
_FNV64_OFFSET = 0xCBF29CE484222325
_FNV64_PRIME = 0x100000001B3
_MASK = HASH_SPACE - 1
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def fnv1a_64(value: str) -> int:
    """FNV-1a 64-bit of ``value``'s UTF-8 bytes (Go's ``hash/fnv`` ``New64a``)."""
    h = _FNV64_OFFSET
    for byte in value.encode():
        h = ((h ^ byte) * _FNV64_PRIME) & _MASK
    return h


def shard_range(shard: int, total: int) -> tuple[int, int]:
    """``[start, end)`` of ``shard`` of ``total`` equal, contiguous ranges of the hash space."""
    if not 0 <= shard < total:
        raise ValueError(f"shard {shard} is not in [0, {total})")
    return shard * HASH_SPACE // total, (shard + 1) * HASH_SPACE // total


def _hex(value: int) -> str:
    """A bound as the API writes it: ``0x`` and 16 lowercase digits, or 2^64 with 17."""
    return f"0x{value:016x}"


@dataclass(frozen=True)
class Scope:
    """The namespaced objects one process keeps (see the module docstring). The default keeps all."""

    namespaces: tuple[str, ...] = ()  # only these (empty: every namespace)
    denylist: tuple[str, ...] = ()  # never these
    shard: int = 0
    total_shards: int = 1
    idle: bool = False  # keeps no namespace (a StatefulSet pod past the replicas, being scaled away)
    bounds: tuple[int, ...] = ()  # total_shards + 1 cuts from 0 to HASH_SPACE (empty: equal ranges)
    _kept: dict[str, bool] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.idle:
            shard_range(self.shard, self.total_shards)  # validates
        b = self.bounds
        if b and (len(b) != self.total_shards + 1 or b[0] != 0 or b[-1] != HASH_SPACE
                  or any(x > y for x, y in zip(b, b[1:]))):
            raise ValueError(f"bounds {b!r} do not cut [0, 2^64) into {self.total_shards} ranges")
        for ns in (*self.namespaces, *self.denylist):
            if not _DNS_LABEL.match(ns):
                raise ValueError(f"{ns!r} is not a namespace name")

    @property
    def sharded(self) -> bool:
        return self.total_shards > 1

    @property
    def range(self) -> tuple[int, int]:
        if self.bounds:
            return self.bounds[self.shard], self.bounds[self.shard + 1]
        return shard_range(self.shard, self.total_shards)

    def keeps(self, namespace: str) -> bool:
        """Whether objects of ``namespace`` are this process's (cached: namespaces are few)."""
        kept = self._kept.get(namespace)
        if kept is None:
            kept = not self.idle and namespace not in self.denylist and (not self.namespaces or namespace in self.namespaces)
            if kept and self.sharded:
                start, end = self.range
                kept = start <= fnv1a_64(namespace) < end
            if len(self._kept) > 100_000:
                self._kept.clear()
            self._kept[namespace] = kept
        return kept

    def watched_namespaces(self) -> tuple[str, ...] | None:
        """The namespaces to run one informer each for, or None for one cluster-wide informer."""
        if self.idle:
            return ()
        if not self.namespaces:
            return None
        return tuple(ns for ns in self.namespaces if self.keeps(ns))

    def field_selector(self) -> str | None:
        """The denylist as a field selector (what kube-state-metrics sends), or None."""
        return ",".join(f"metadata.namespace!={ns}" for ns in self.denylist) or None

    def shard_selector(self) -> str | None:
        """``shardRange(object.metadata.namespace, '0x...', '0x...')`` of this shard, or None."""
        if not self.sharded or self.idle:
            return None
        start, end = self.range
        return f"shardRange(object.metadata.namespace, '{_hex(start)}', '{_hex(end)}')"

    def describe(self) -> dict[str, object]:
        return {"namespaces": list(self.namespaces), "namespaces_denylist": list(self.denylist),
                "shard": self.shard, "total_shards": self.total_shards, "idle": self.idle,
                "bounds": [_hex(b) for b in self.bounds] or "equal"}

    def with_shard(self, shard: int, total_shards: int) -> Scope:
        """This scope as shard ``shard`` of ``total_shards``; one that keeps nothing when the
        shard is past the total (a StatefulSet pod being scaled away)."""
        total = max(total_shards, 1)
        return Scope(self.namespaces, self.denylist, shard, total, idle=shard >= total_shards,
                     bounds=self.bounds if len(self.bounds) == total + 1 else ())

    def with_bounds(self, bounds: tuple[int, ...]) -> Scope:
        """This scope with the hash space cut at ``bounds`` (empty: equal ranges)."""
        return Scope(self.namespaces, self.denylist, self.shard, self.total_shards, idle=self.idle, bounds=bounds)


def parse_namespaces(values: Iterable[str]) -> tuple[str, ...]:
    """Comma-separated and repeated flag values, deduplicated, in order."""
    out: dict[str, None] = {}
    for value in values:
        for ns in value.split(","):
            if ns.strip():
                out[ns.strip()] = None
    return tuple(out)

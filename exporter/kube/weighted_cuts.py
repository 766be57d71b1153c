"""Cuts of the hash space weighted by Workloads, and when to move them: pure functions of typed records.

Cutting the FNV-1a space at the quantiles of the namespaces' hashes
(:func:`exporter.kube.sharding.balanced_bounds`) gives every shard the same number of
namespaces, but namespaces are not equally large: on the benchmark cluster (a few large teams
and a long tail) the largest of 4 shards held 1.26x an even share of the Workloads. Here each
namespace weighs its number of Workloads instead (:func:`namespace_weights`; one without any
weighs :data:`NAMESPACE_FLOOR`, so empty namespaces still spread), and :func:`weighted_bounds`
cuts the hash-sorted namespaces so that the largest shard is as light as contiguous ranges can
make it, each shard otherwise ending nearest an even share. Each shard still owns one contiguous
range, asked for with one ``shardRange()``; one namespace is never split, so a namespace larger
than an even share makes its shard that large whatever the cuts.

A count of Workloads is not something every shard can compute alike (each sees only its own),
so shard 0 measures it and publishes the cuts in a ConfigMap (:func:`configmap_data`) that every
shard reads back (:func:`parse_configmap`): shards that read the same version compute the same
ranges, so the ranges still partition the space. Counts move with every job submitted and
deleted, and each move of the cuts relists the namespaces that change hands, so the published
cuts are replaced only when they have become clearly worse than fresh ones would be
(:func:`reason_to_move`: the largest shard more than :data:`MOVE_THRESHOLD` times what fresh cuts
would give it), or when they were made for another number of shards.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..fields import parse_time
from .scope import HASH_SPACE, fnv1a_64

NAMESPACE_FLOOR = 1  # the weight of a namespace without Workloads
MOVE_THRESHOLD = 1.1  # move published cuts when fresh ones make the largest shard 10% smaller

# The ConfigMap's keys (``data``); every value is a string, as ConfigMap data must be.
TOTAL_KEY, CUTS_KEY, MEASURED_KEY, WORKLOADS_KEY, NAMESPACES_KEY = (
    "totalShards", "cuts", "measuredAt", "workloads", "namespaces")


@dataclass(frozen=True)
class PublishedCuts:
    """The cuts shard 0 published: ``bounds`` are ``total + 1`` cuts of ``[0, 2^64)`` (shard
    ``i`` holds ``[bounds[i], bounds[i + 1])``), measured at ``measured_at`` (Unix seconds) over
    ``workloads`` Workloads in ``namespaces`` namespaces."""

    total: int
    bounds: tuple[int, ...]
    measured_at: float
    workloads: int
    namespaces: int


def namespace_weights(counts: Mapping[str, int], namespaces: Iterable[str] = (),
                      floor: int = NAMESPACE_FLOOR) -> dict[str, int]:
    """Every namespace of ``namespaces`` and of ``counts`` (Workloads per namespace), weighing its
    count, at least ``floor``."""
    weights = {ns: floor for ns in namespaces}
    for ns, n in counts.items():
        weights[ns] = max(n, floor)
    return weights


def weighted_bounds(weights: Mapping[str, int], total: int) -> tuple[int, ...]:
    """``total + 1`` cuts of ``[0, 2^64)``, the namespaces sorted by hash: the largest shard as
    light as contiguous ranges can make it (the smallest capacity that :func:`_bins` fits in
    ``total``), and within that, each shard ending where its running weight is nearest an even
    share of what is left (the first of two as near), taking more only where the rest would not
    fit the shards left. Cuts are namespaces' own hashes, as
    :func:`~exporter.kube.sharding.balanced_bounds`' are. With no namespace, the equal ranges."""
    if total <= 1:
        return (0, HASH_SPACE)
    items = sorted((fnv1a_64(ns), w) for ns, w in weights.items())
    if not items:
        return tuple(i * HASH_SPACE // total for i in range(total + 1))
    ws = [w for _, w in items]
    low, high = max(max(ws), -(-sum(ws) // total)), sum(ws)
    while low < high:  # the smallest capacity whose greedy fill needs at most ``total`` shards
        mid = (low + high) // 2
        low, high = (low, mid) if _bins(ws, mid)[0] <= total else (mid + 1, high)
    need = _bins(ws, low)  # need[q]: shards the namespaces from q on take at that capacity
    cuts, end, left = [0], 0, sum(ws)
    for i in range(1, total):
        shards, load = total - i + 1, 0  # this shard and those after it
        # nearest to left / shards: add while it brings the load closer (2 * (load + w/2) < 2 * left / shards)
        while end < len(ws) and load + ws[end] <= low and (2 * load + ws[end]) * shards < 2 * left:
            load += ws[end]
            end += 1
        while need[end] > shards - 1:  # the rest must fit the shards after this one (ends before the last namespace)
            load += ws[end]
            end += 1
        cuts.append(items[end][0])
        left -= load
    return (*cuts, HASH_SPACE)


def _bins(ws: list[int], capacity: int) -> list[int]:
    """For each start ``q`` (and ``len(ws)``), how many shards of ``capacity`` the weights from
    ``q`` on take when each is filled as far as it goes (which no other contiguous split beats)."""
    need = [0] * (len(ws) + 1)
    end, load = len(ws), 0  # the first shard from q is ws[q:end]
    for q in range(len(ws) - 1, -1, -1):
        load += ws[q]
        while load > capacity:
            end -= 1
            load -= ws[end]
        need[q] = 1 + need[end]
    return need


def shard_loads(bounds: tuple[int, ...], weights: Mapping[str, int]) -> list[int]:
    """The weight each shard of ``bounds`` holds (shard ``i``: ``bounds[i] <= hash < bounds[i + 1]``)."""
    loads = [0] * (len(bounds) - 1)
    for ns, w in weights.items():
        loads[bisect.bisect_right(bounds, fnv1a_64(ns)) - 1] += w
    return loads


def largest_share(bounds: tuple[int, ...], weights: Mapping[str, int]) -> float:
    """The largest shard's weight over an even share (1.0: perfectly even; 1.0 with no weight)."""
    loads = shard_loads(bounds, weights)
    whole = sum(loads)
    return max(loads) * len(loads) / whole if whole else 1.0


def reason_to_move(published: PublishedCuts | None, fresh: tuple[int, ...], weights: Mapping[str, int],
                   total: int, threshold: float = MOVE_THRESHOLD) -> str | None:
    """Why the published cuts should be replaced by ``fresh`` (cuts for ``total`` shards from
    ``weights``), or None to keep them: none published, published for another total, or on
    today's weights their largest shard is more than ``threshold`` times what ``fresh`` gives it.
    Comparing with the fresh cuts rather than with an even share keeps cuts still where no cut
    can do better (one namespace larger than a shard's share)."""
    if published is None:
        return "no cuts published"
    if published.total != total:
        return f"the published cuts are for {published.total} shards, not {total}"
    now, best = largest_share(published.bounds, weights), largest_share(fresh, weights)
    if now > threshold * best:
        return f"largest shard {now:.2f}x of an even share on the published cuts, {best:.2f}x on fresh ones"
    return None


def configmap_data(cuts: PublishedCuts) -> dict[str, str]:
    """The ConfigMap ``data`` that publishes ``cuts`` (decimal integers: 2^64 needs 65 bits)."""
    return {TOTAL_KEY: str(cuts.total), CUTS_KEY: ",".join(str(b) for b in cuts.bounds),
            MEASURED_KEY: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(cuts.measured_at)),
            WORKLOADS_KEY: str(cuts.workloads), NAMESPACES_KEY: str(cuts.namespaces)}


def parse_configmap(obj: Any) -> PublishedCuts:
    """The cuts a ConfigMap publishes. Raises ValueError saying what is wrong: a missing or
    unreadable key, cuts that are not ``totalShards + 1`` integers rising from 0 to 2^64."""
    data = obj.get("data") if isinstance(obj, dict) else None
    if not isinstance(data, dict):
        raise ValueError("no data")
    missing = [k for k in (TOTAL_KEY, CUTS_KEY, MEASURED_KEY, WORKLOADS_KEY, NAMESPACES_KEY)
               if not isinstance(data.get(k), str)]
    if missing:
        raise ValueError(f"data lacks {', '.join(missing)}")
    total, workloads, namespaces = (_count(data, k) for k in (TOTAL_KEY, WORKLOADS_KEY, NAMESPACES_KEY))
    if total < 1:
        raise ValueError(f"{TOTAL_KEY} {total} is not a number of shards")
    try:
        bounds = tuple(int(b) for b in data[CUTS_KEY].split(","))
    except ValueError:
        raise ValueError(f"{CUTS_KEY} {data[CUTS_KEY][:200]!r} are not comma-separated decimal integers") from None
    if len(bounds) != total + 1 or bounds[0] != 0 or bounds[-1] != HASH_SPACE \
            or any(a > b for a, b in zip(bounds, bounds[1:])):
        raise ValueError(f"{CUTS_KEY} are not {total + 1} cuts rising from 0 to 2^64")
    measured = parse_time(data[MEASURED_KEY])
    if measured is None:
        raise ValueError(f"{MEASURED_KEY} {data[MEASURED_KEY][:40]!r} is not an RFC 3339 time")
    return PublishedCuts(total, bounds, measured, workloads, namespaces)


def _count(data: dict[str, Any], key: str) -> int:
    value = data[key]
    if not (value.isascii() and value.isdigit()):
        raise ValueError(f"{key} {value[:40]!r} is not a whole number")
    return int(value)

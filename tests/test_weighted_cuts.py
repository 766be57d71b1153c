"""Cuts weighted by Workloads (exporter/kube/weighted_cuts.py), as pure functions: exact cuts for
given counts, the namespace-name cases the count cuts already meet, the benchmark cluster within
1.2x of an even share, when published cuts move, and the ConfigMap that carries them."""

from __future__ import annotations

import random
import sys
from collections import Counter
from pathlib import Path

import pytest

from exporter.kube.scope import HASH_SPACE, Scope, fnv1a_64
from exporter.kube.weighted_cuts import (PublishedCuts, configmap_data, largest_share, namespace_weights,
                                         parse_configmap, reason_to_move, shard_loads, weighted_bounds)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from cluster import build_cluster  # noqa: E402

T0 = 1787220000.0


def split(names: list[str], total: int, bounds: tuple[int, ...]) -> list[list[str]]:
    """The namespaces each shard keeps with ``bounds`` (the real filter); every one on exactly one shard."""
    kept = [[ns for ns in names if Scope(shard=i, total_shards=total, bounds=bounds).keeps(ns)] for i in range(total)]
    assert sorted(ns for shard in kept for ns in shard) == sorted(names), "every namespace on exactly one shard"
    return kept


def test_exact_cuts_for_given_counts() -> None:
    names = sorted(["alpha", "bravo", "charlie", "delta"], key=fnv1a_64)  # in hash order: h0 < h1 < h2 < h3
    h = [fnv1a_64(ns) for ns in names]
    weights = dict(zip(names, (6, 2, 2, 2)))  # 12 in all
    # 2 shards: the running weight before each namespace is 0, 6, 8, 10; nearest 6 is before names[1]
    # (no cut makes the largest shard lighter than 6: the heavy namespace is one)
    assert weighted_bounds(weights, 2) == (0, h[1], HASH_SPACE)
    assert shard_loads(weighted_bounds(weights, 2), weights) == [6, 6]
    # 3 shards: nearest 4 is 6 (before names[1]), nearest 8 is 8 (before names[2])
    assert weighted_bounds(weights, 3) == (0, h[1], h[2], HASH_SPACE)
    assert shard_loads(weighted_bounds(weights, 3), weights) == [6, 2, 4]
    assert largest_share(weighted_bounds(weights, 3), weights) == 1.5  # the one heavy namespace: no cut does better
    # as near before and after: the first (1 + 1 before names[2] is 2, exactly half of 4)
    even = dict(zip(names, (1, 1, 1, 1)))
    assert weighted_bounds(even, 2) == (0, h[2], HASH_SPACE)
    assert weighted_bounds({"alpha": 5}, 3) == (0, fnv1a_64("alpha"), fnv1a_64("alpha"), HASH_SPACE)  # never past the last
    assert weighted_bounds({}, 4) == tuple(i * HASH_SPACE // 4 for i in range(5))  # no namespace: equal ranges
    assert weighted_bounds(weights, 1) == (0, HASH_SPACE)


def test_namespaces_without_workloads_weigh_the_floor() -> None:
    assert namespace_weights({"a": 40, "b": 0}, ["a", "b", "c"]) == {"a": 40, "b": 1, "c": 1}
    assert namespace_weights({"d": 3}, []) == {"d": 3}  # Workloads in a namespace not (yet) listed: it counts


def test_shared_prefixes_split_evenly_as_with_the_count_cuts() -> None:
    teams = [f"team-{i:02d}" for i in range(12)]
    for counts in (Counter(), Counter({ns: 10 for ns in teams})):  # no Workloads, or as many in each
        assert [len(s) for s in split(teams, 3, weighted_bounds(namespace_weights(counts, teams), 3))] == [4, 4, 4]
    ml = [f"ml-team-{i:03d}" for i in range(1, 301)]
    assert [len(s) for s in split(ml, 4, weighted_bounds(namespace_weights({}, ml), 4))] == [75, 75, 75, 75]
    assert [len(s) for s in split(ml, 4, weighted_bounds(dict.fromkeys(ml, 7), 4))] == [75, 75, 75, 75]


@pytest.fixture(scope="module")
def bench_counts() -> Counter[str]:
    """Workloads per namespace of bench/cluster.py's defaults (20,000 Workloads, 300 namespaces)."""
    return Counter(j.namespace for j in build_cluster(20_000).jobs)


@pytest.mark.parametrize("total", [2, 3, 4])
def test_the_benchmark_cluster_is_within_1_2x_of_even_by_workloads(bench_counts: Counter[str], total: int) -> None:
    from exporter.kube.sharding import balanced_bounds

    weights = namespace_weights(bench_counts, bench_counts)
    bounds = weighted_bounds(weights, total)
    loads = [sum(bench_counts[ns] for ns in shard) for shard in split(list(bench_counts), total, bounds)]
    assert sum(loads) == 20_000 and max(loads) / (20_000 / total) <= 1.2
    assert largest_share(bounds, weights) == pytest.approx(max(loads) / (20_000 / total))  # every namespace has Workloads
    if total == 4:  # the namespace-count cuts miss the target on the same cluster
        counted = balanced_bounds([(ns, None) for ns in bench_counts], 4)
        assert largest_share(counted, weights) > 1.2


def test_cuts_hold_still_under_small_changes_and_move_for_large_ones(bench_counts: Counter[str]) -> None:
    weights = namespace_weights(bench_counts, bench_counts)
    published = PublishedCuts(4, weighted_bounds(weights, 4), T0, 20_000, 300)
    rng = random.Random(4)
    churned = Counter(bench_counts)
    for ns in rng.sample(sorted(churned), 60):  # a fifth of the namespaces gain or lose up to 10% of their jobs
        churned[ns] = max(0, churned[ns] + rng.randint(-churned[ns] // 10, churned[ns] // 10))
    for ns in ("new-team-a", "new-team-b"):  # and new, small namespaces appear
        churned[ns] = 15
    small = namespace_weights(churned, churned)
    assert weighted_bounds(small, 4) != published.bounds, "fresh cuts would move..."
    assert reason_to_move(published, weighted_bounds(small, 4), small, 4) is None, "...but not by enough to move them"
    large = Counter(bench_counts)
    largest_shard = max(range(4), key=lambda i: shard_loads(published.bounds, weights)[i])
    grown = next(ns for ns in sorted(bench_counts, key=bench_counts.__getitem__, reverse=True)
                 if Scope(shard=largest_shard, total_shards=4, bounds=published.bounds).keeps(ns))
    large[grown] += 3_000  # one team submits 3,000 more jobs in the already largest shard
    heavy = namespace_weights(large, large)
    reason = reason_to_move(published, weighted_bounds(heavy, 4), heavy, 4)
    assert reason is not None and "on the published cuts" in reason
    assert largest_share(weighted_bounds(heavy, 4), heavy) <= 1.2
    assert reason_to_move(None, published.bounds, weights, 4) == "no cuts published"
    assert "for 4 shards, not 3" in str(reason_to_move(published, weighted_bounds(weights, 3), weights, 3))


def test_one_namespace_larger_than_a_share_does_not_move_the_cuts_forever() -> None:
    """Compared with what fresh cuts would give, not with an even share: no cut splits a namespace."""
    weights = {"giant": 10_000, **{f"small-{i}": 10 for i in range(30)}}
    published = PublishedCuts(4, weighted_bounds(weights, 4), T0, 10_300, 31)
    assert largest_share(published.bounds, weights) > 3.5
    weights["small-3"] += 50
    assert reason_to_move(published, weighted_bounds(weights, 4), weights, 4) is None


def lightest_largest_shard(ws: list[int], total: int) -> int:
    """By brute force: the smallest largest shard over every split of ``ws`` into ``total`` contiguous runs."""
    from functools import cache

    @cache
    def best(start: int, shards: int) -> int:
        if shards == 1:
            return sum(ws[start:])
        return min(max(sum(ws[start:end]), best(end, shards - 1)) for end in range(start, len(ws) + 1))

    return best(0, total)


def test_the_largest_shard_is_as_light_as_any_contiguous_cut_makes_it() -> None:
    rng = random.Random(7)
    for _ in range(300):
        weights = {f"ns-{i}": rng.choice((1, 1, 2, 5, 40, 300)) for i in range(rng.randrange(1, 11))}
        total = rng.randrange(2, 6)
        ws = [w for _, w in sorted((fnv1a_64(ns), w) for ns, w in weights.items())]
        assert max(shard_loads(weighted_bounds(weights, total), weights)) == lightest_largest_shard(ws, total), weights
    many = {f"ns-{i}": 1 + i % 97 for i in range(20_000)}  # a large cluster: fast enough
    assert largest_share(weighted_bounds(many, 64), many) < 1.01


@pytest.mark.parametrize("total", [2, 3, 4, 7])
def test_every_namespace_on_exactly_one_shard_whatever_the_counts(total: int) -> None:
    rng = random.Random(total)
    for _ in range(30):
        names = list(dict.fromkeys(f"ns-{rng.randrange(10**6)}" for _ in range(rng.randrange(1, 120))))
        weights = {ns: rng.choice((0, 1, 3, 50, 2_000)) for ns in names}
        bounds = weighted_bounds(namespace_weights(weights, names), total)
        assert len(bounds) == total + 1 and bounds[0] == 0 and bounds[-1] == HASH_SPACE
        assert list(bounds) == sorted(bounds)
        kept = split(names + ["created-later", "another-one"], total, bounds)
        assert [sum(max(weights.get(ns, 0), 1) for ns in shard if ns in weights) for shard in kept] == \
            shard_loads(bounds, namespace_weights(weights, names))


def test_the_configmap_round_trips_and_bad_ones_say_what_is_wrong() -> None:
    cuts = PublishedCuts(3, weighted_bounds({"a": 4, "b": 9, "c": 1, "d": 7}, 3), T0, 21, 4)
    data = configmap_data(cuts)
    assert data["cuts"] == ",".join(str(b) for b in cuts.bounds) and data["cuts"].endswith(",18446744073709551616")
    assert data["measuredAt"] == "2026-08-20T10:00:00Z"
    assert parse_configmap({"data": data}) == cuts
    bad = {
        "no data": {},
        "data lacks cuts": {k: v for k, v in data.items() if k != "cuts"},
        "totalShards 'three' is not a whole number": dict(data, totalShards="three"),
        "totalShards 0 is not a number of shards": dict(data, totalShards="0"),
        "are not comma-separated decimal integers": dict(data, cuts="0,0x10,18446744073709551616"),
        "are not 4 cuts rising from 0 to 2^64": dict(data, cuts="0,5,18446744073709551616"),
        "are not 4 cuts rising": dict(data, cuts="0,9,5,18446744073709551616"),
        "cuts rising from 0 to 2^64": dict(data, cuts="1,2,3,18446744073709551616"),
        "measuredAt 'yesterday' is not an RFC 3339 time": dict(data, measuredAt="yesterday"),
        "workloads '-1' is not a whole number": dict(data, workloads="-1"),
    }
    for message, broken in bad.items():
        with pytest.raises(ValueError, match=message.replace("^", r"\^")):
            parse_configmap({"data": broken} if broken else {"metadata": {}})


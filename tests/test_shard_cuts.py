"""Shards cut by Workloads against the simulated API server: shard 0 counts and publishes the cuts
in a ConfigMap, every shard follows them, and whatever goes wrong with that ConfigMap (absent,
malformed, for another total, forbidden) the shards fall back to the namespace-count cuts and
keep serving. The collectors run the real wiring (tests/collectors.py); the cluster is
bench/cluster.py's, whose namespaces differ in size as real teams do."""

from __future__ import annotations

from typing import Any

import pytest

from collectors import make_collector, started_collector
from exporter.cluster.main import Collector
from exporter.kube.resources import SHARD_CUTS, WORKLOADS
from exporter.kube.scope import Scope
from exporter.kube.shard_cuts import configmap_location
from exporter.kube.weighted_cuts import (PublishedCuts, configmap_data, largest_share, namespace_weights,
                                         parse_configmap, reason_to_move, shard_loads, weighted_bounds)
from exporter.sim.apiserver import SimApiServer
from test_sharding import scrape, serve_cluster, serve_namespaces, set_replicas, shard_pod
from waiting import eventually

HOME = "gangscope"
NAME = "gangscope-shard-cuts"
CUTS_FLAGS = ("--shard-cuts-configmap", f"{HOME}/{NAME}")


def cluster(sim: SimApiServer, workloads: int = 240) -> set[str]:
    """bench/cluster.py's objects, their Namespaces and the collector's own, and ConfigMaps served
    (none written yet); every namespace."""
    namespaces = serve_cluster(sim, workloads=workloads) | {HOME}
    serve_namespaces(sim, namespaces)
    sim.serve(SHARD_CUTS)
    return namespaces


def published(sim: SimApiServer) -> dict[str, Any] | None:
    return next((o for o in sim.objects(SHARD_CUTS) if o["metadata"]["name"] == NAME), None)


def counts(sim: SimApiServer) -> dict[str, int]:
    out: dict[str, int] = {}
    for o in sim.objects(WORKLOADS):
        out[o["metadata"]["namespace"]] = out.get(o["metadata"]["namespace"], 0) + 1
    return out


def partitioned(sim: SimApiServer, shards: list[Collector]) -> bool:
    """Every Workload the server holds on exactly one shard."""
    parts = [set(c.store.workloads) for c in shards]
    every = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in sim.objects(WORKLOADS)}
    return sum(len(p) for p in parts) == len(every) and set().union(*parts) == every


def following(shards: list[Collector], cm: dict[str, Any] | None) -> bool:
    """Every shard cuts where ``cm`` says (and says so), and listed within those cuts."""
    if cm is None:
        return False
    bounds = parse_configmap(cm).bounds
    return all(c.shard_cuts is not None and c.shard_cuts.basis == "workloads" and c.scope.bounds == bounds
               and c.sources.ready()[0] for c in shards)


def config_map(total: int, bounds: tuple[int, ...], **data: str) -> dict[str, Any]:
    cuts = PublishedCuts(total, bounds, 1787220000.0, 100, 10)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": NAME, "namespace": HOME},
            "data": {**configmap_data(cuts), **data}}


async def test_shard_0_publishes_weighted_cuts_and_every_shard_follows(kube_sim: SimApiServer,
                                                                       kube_sim_kubeconfig: str) -> None:
    namespaces = cluster(kube_sim)
    shards = [await started_collector(kube_sim_kubeconfig, "--shard", str(i), "--total-shards", "3", *CUTS_FLAGS)
              for i in range(3)]
    try:
        await eventually(lambda: following(shards, published(kube_sim)), timeout=20)
        await eventually(lambda: partitioned(kube_sim, shards), timeout=20)
        cm = published(kube_sim)
        assert cm is not None
        cuts = parse_configmap(cm)
        assert (cuts.total, cuts.workloads, cuts.namespaces) == (3, 240, len(namespaces))
        weights = namespace_weights(counts(kube_sim), namespaces)
        by_count = shards[0].namespace_list.bounds  # type: ignore[union-attr]
        assert largest_share(cuts.bounds, weights) < largest_share(by_count, weights), "more even than by namespaces"
        assert largest_share(cuts.bounds, weights) <= 1.2
        loads = [len(c.store.workloads) for c in shards]
        assert loads == shard_loads(cuts.bounds, counts(kube_sim)) and max(loads) / (240 / 3) <= 1.2
        # Only shard 0 counted: one metadata-only LIST of every namespace's Workloads, paged.
        counted = [q for m, p, q in kube_sim.request_log
                   if m == "GET" and p.endswith("/workloads") and "shardSelector" not in q and "watch" not in q]
        assert counted and all(q.get("limit") == "500" for q in counted)
        assert shards[0].publisher is not None and shards[1].publisher is None and shards[2].publisher is None
        for i, c in enumerate(shards):
            series = await scrape(c.port)
            assert series[("gangscope_shard_cuts_info", frozenset({("basis", "workloads")}))] == 1
            assert not any(k[0] == "gangscope_shard_cuts_info" and ("basis", "workloads") not in k[1] for k in series)
            assert series[("gangscope_source_up", frozenset({("source", "shard_cuts")}))] == 1
            weights_up = series.get(("gangscope_source_up", frozenset({("source", "shard_weights")})))
            assert weights_up == (1 if i == 0 else None)

        # A few more jobs in the heaviest shard: fresh cuts would differ a little; the published ones stay.
        before = cm["metadata"]["resourceVersion"]
        wl = next(iter(kube_sim.objects(WORKLOADS)))
        heaviest = max(range(3), key=lambda i: len(shards[i].store.workloads))
        busy = max((ns for ns in namespaces if shards[heaviest].scope.keeps(ns)), key=lambda ns: weights[ns])
        for i in range(8):
            kube_sim.create({**wl, "metadata": {**wl["metadata"], "namespace": busy, "name": f"extra-{i}",
                                                "uid": f"extra-{i}", "resourceVersion": ""}})
        churned = namespace_weights(counts(kube_sim), namespaces)
        assert weighted_bounds(churned, 3) != cuts.bounds, "the premise: fresh cuts would differ"
        publisher = shards[0].publisher
        last = publisher.health.last_sync
        publisher.wake()
        await eventually(lambda: publisher.health.last_sync > last, timeout=10)
        assert published(kube_sim)["metadata"]["resourceVersion"] == before  # type: ignore[index]

        # One namespace of the lightest shard grows by 400 jobs: the cuts move, by whole namespaces.
        lightest = min(range(3), key=lambda i: len(shards[i].store.workloads))
        grown = next(ns for ns in sorted(namespaces) if Scope(shard=lightest, total_shards=3, bounds=cuts.bounds).keeps(ns)
                     and counts(kube_sim).get(ns))
        for i in range(400):
            kube_sim.create({**wl, "metadata": {**wl["metadata"], "namespace": grown, "name": f"burst-{i}",
                                                "uid": f"burst-{i}", "resourceVersion": ""}})
        weights = namespace_weights(counts(kube_sim), namespaces)
        assert reason_to_move(cuts, weighted_bounds(weights, 3), weights, 3) is not None  # the premise: past the threshold
        publisher.wake()
        await eventually(lambda: published(kube_sim)["metadata"]["resourceVersion"] != before, timeout=10)  # type: ignore[index]
        await eventually(lambda: following(shards, published(kube_sim)), timeout=20)
        await eventually(lambda: partitioned(kube_sim, shards), timeout=20)
        moved = parse_configmap(published(kube_sim))
        assert moved.bounds != cuts.bounds and moved.workloads == 648
        assert moved.bounds == weighted_bounds(namespace_weights(counts(kube_sim), namespaces), 3)
    finally:
        for c in shards:
            await c.stop()


async def test_a_shard_falls_back_to_the_namespace_count_cuts_and_keeps_serving(kube_sim: SimApiServer,
                                                                                kube_sim_kubeconfig: str) -> None:
    """No shard 0 runs here (shard 0 with --shard-cuts-interval 0 only follows): the test writes
    the ConfigMap. Absent, malformed, for another total or deleted, the namespace-count cuts; a
    malformed one is a parse error of the source shard_cuts, with what is wrong in the log."""
    cluster(kube_sim)
    shards = [await started_collector(kube_sim_kubeconfig, "--shard", str(i), "--total-shards", "2", *CUTS_FLAGS,
                                      "--shard-cuts-interval", "0") for i in range(2)]
    try:
        by_count = shards[0].namespace_list.bounds  # type: ignore[union-attr]
        assert all(c.shard_cuts.basis == "namespaces" and c.scope.bounds == by_count for c in shards)  # type: ignore[union-attr]
        assert all(c.publisher is None for c in shards)
        other = (0, by_count[1] // 2, 1 << 64)
        kube_sim.create(config_map(2, other))
        await eventually(lambda: following(shards, published(kube_sim)), timeout=10)
        await eventually(lambda: partitioned(kube_sim, shards), timeout=20)

        def fallen_back() -> bool:
            return all(c.shard_cuts.basis == "namespaces" and c.scope.bounds == by_count for c in shards)  # type: ignore[union-attr]

        malformed = config_map(2, other, cuts="0,12,nope")
        for wrong in (malformed, config_map(3, (0, 1 << 62, 1 << 63, 1 << 64))):  # well formed, for 3 shards
            kube_sim.update(wrong)
            await eventually(fallen_back, timeout=10)
            kube_sim.update(config_map(2, other))
            await eventually(lambda: following(shards, published(kube_sim)), timeout=10)
        series = await scrape(shards[1].port)
        assert series[("gangscope_parse_errors_total", frozenset({("source", "shard_cuts")}))] == 1  # the malformed one
        kube_sim.delete(published(kube_sim))  # type: ignore[arg-type]
        await eventually(fallen_back, timeout=10)
        await eventually(lambda: partitioned(kube_sim, shards), timeout=20)
        await eventually(lambda: all(c.ready()[0] for c in shards), timeout=20)
        series = await scrape(shards[1].port)
        assert series[("gangscope_shard_cuts_info", frozenset({("basis", "namespaces")}))] == 1
    finally:
        for c in shards:
            await c.stop()


async def test_forbidden_configmaps_leave_the_namespace_count_cuts(kube_sim: SimApiServer,
                                                                   kube_sim_kubeconfig: str) -> None:
    """RBAC without the ConfigMap: every shard down on shard_cuts and cutting by namespace counts,
    shard 0 down on shard_weights; all serving. Reading allowed but not writing: the same cuts,
    shard 0 says why. With the Role in place, shard 0 publishes and both follow."""
    cluster(kube_sim)
    kube_sim.forbid(SHARD_CUTS)
    shards = [await started_collector(kube_sim_kubeconfig, "--shard", str(i), "--total-shards", "2", *CUTS_FLAGS)
              for i in range(2)]
    try:
        publisher = shards[0].publisher
        assert publisher is not None
        await eventually(lambda: not publisher.health.up and "forbidden" in publisher.health.detail, timeout=10)
        await eventually(lambda: all(c.ready()[0] for c in shards), timeout=20)  # serving all the same
        assert all(c.shard_cuts.basis == "namespaces" for c in shards)  # type: ignore[union-attr]
        assert len({c.scope.bounds for c in shards}) == 1 and partitioned(kube_sim, shards)
        series = await scrape(shards[1].port)
        assert series[("gangscope_source_up", frozenset({("source", "shard_cuts")}))] == 0
        kube_sim.forbid(SHARD_CUTS, False)
        kube_sim.forbid_writes(SHARD_CUTS)
        await eventually(lambda: shards[1].namespace_sources.sources["shard_cuts"].state == "synced", timeout=10)
        errors = publisher.health.errors
        await eventually(lambda: publisher.health.errors > errors, timeout=10)  # tried again, refused again
        assert published(kube_sim) is None and all(c.shard_cuts.basis == "namespaces" for c in shards)  # type: ignore[union-attr]
        kube_sim.forbid_writes(SHARD_CUTS, False)
        await eventually(lambda: following(shards, published(kube_sim)), timeout=10)
        await eventually(lambda: partitioned(kube_sim, shards), timeout=20)
    finally:
        for c in shards:
            await c.stop()


async def test_a_configmap_namespace_that_does_not_exist_is_counted_and_logged(kube_sim: SimApiServer,
                                                                                kube_sim_kubeconfig: str) -> None:
    cluster(kube_sim)
    shards = [await started_collector(kube_sim_kubeconfig, "--shard", str(i), "--total-shards", "2",
                                      "--shard-cuts-configmap", f"nowhere/{NAME}") for i in range(2)]
    try:
        publisher = shards[0].publisher
        assert publisher is not None
        await eventually(lambda: publisher.health.errors >= 2, timeout=10)  # tried again, after a backoff
        assert 'namespaces "nowhere" not found' in publisher.health.detail
        await eventually(lambda: all(c.ready()[0] for c in shards), timeout=20)
        assert all(c.shard_cuts.basis == "namespaces" for c in shards) and partitioned(kube_sim, shards)  # type: ignore[union-attr]
    finally:
        for c in shards:
            await c.stop()


async def test_a_statefulset_shard_0_publishes_for_the_new_total_at_once(kube_sim: SimApiServer,
                                                                        kube_sim_kubeconfig: str) -> None:
    """Automatic sharding: the ConfigMap in the pod's own namespace by default; scaled from 2 to 3
    replicas, shard 0 publishes cuts for 3 without waiting for its interval (600 s here)."""
    cluster(kube_sim)
    shard_pod(kube_sim, replicas=2, ordinal=0)
    collector = make_collector(kube_sim_kubeconfig, "--pod", "gangscope-collector-0", "--pod-namespace", HOME)
    await collector.start()
    try:
        await eventually(lambda: following([collector], published(kube_sim)), timeout=20)
        assert parse_configmap(published(kube_sim)).total == 2
        set_replicas(kube_sim, 3)
        await eventually(lambda: parse_configmap(published(kube_sim)).total == 3, timeout=10)
        await eventually(lambda: following([collector], published(kube_sim)), timeout=10)
        assert collector.scope.total_shards == 3
    finally:
        await collector.stop()


def test_where_the_configmap_is() -> None:
    assert configmap_location("gangscope-shard-cuts", "gangscope", {}) == ("gangscope", "gangscope-shard-cuts")
    assert configmap_location("gangscope-shard-cuts", "", {"POD_NAMESPACE": "monitoring"}) == ("monitoring", "gangscope-shard-cuts")
    assert configmap_location("other/cuts", "gangscope", {}) == ("other", "cuts")
    assert configmap_location("gangscope-shard-cuts", "", {}) is None  # no namespace known: no weighted cuts
    assert configmap_location("", "gangscope", {}) is None
    for bad in ("Bad_Name", "ns/", "Bad_NS/cuts"):
        with pytest.raises(ValueError, match="--shard-cuts-configmap"):
            configmap_location(bad, "gangscope", {})

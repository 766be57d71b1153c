"""Sharding and HA against the simulated API server: the shards together are one collector.

The hash and its ranges are checked against Go's FNV-1a and the Kubernetes API reference's own
examples (exporter/kube/scope.py cites them); the collectors run the real wiring
(tests/collectors.py) over a realistic cluster from bench/cluster.py.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families as parse_text

from collectors import make_collector, started_collector
from exporter.cluster.main import Collector
from exporter.kube.resources import AGENT_PODS, COLLECTOR_RESOURCES, NAMESPACES, STATEFULSETS
from exporter.kube.scope import HASH_SPACE, Scope, fnv1a_64, shard_range
from exporter.kube.sharding import NamespaceList, balanced_bounds, reference_size
from exporter.sim.apiserver import SimApiServer
from waiting import eventually

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from cluster import build_cluster  # noqa: E402

# Series that say something about the process rather than the cluster: each shard has its own.
PROCESS_FAMILIES = ("gangscope_source_", "gangscope_parse_errors", "gangscope_internal_errors", "gangscope_build_info",
                    "gangscope_shard_ordinal", "gangscope_total_shards", "gangscope_shard_cuts_info",
                    "gangscope_exposition_dropped", "process_",
                    "python_info")
# Series that record when this process saw something rather than what the objects say: two
# processes (shards, replicas) started at different times differ there (docs/deploy.md, HA).
OBSERVED = ("gangscope_topology_evictions_total", "gangscope_podgroup_phase_timestamp_seconds",
            "gangscope_gang_idle_gpu_seconds_total")
Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


def test_fnv1a_64_is_go_hash_fnv_new64a() -> None:
    # Test vectors of the FNV reference (isthe.com/chongo/tech/comp/fnv) that Go's hash/fnv passes.
    assert fnv1a_64("") == 0xCBF29CE484222325
    assert fnv1a_64("a") == 0xAF63DC4C8601EC8C
    assert fnv1a_64("foobar") == 0x85944171F73967E8
    assert fnv1a_64("ünïcode") == fnv1a_64("ünïcode".encode().decode())  # bytes of UTF-8, not code points


def test_ranges_cut_the_hash_space_as_the_api_reference_does() -> None:
    for total in (1, 2, 3, 4, 7, 64):
        ranges = [shard_range(i, total) for i in range(total)]
        assert ranges[0][0] == 0 and ranges[-1][1] == HASH_SPACE
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    # ListOptions.shardSelector's 4-shard example (k8s.io/apimachinery pkg/apis/meta/v1/types.go), by namespace.
    assert [Scope(shard=i, total_shards=4).shard_selector() for i in range(4)] == [
        "shardRange(object.metadata.namespace, '0x0000000000000000', '0x4000000000000000')",
        "shardRange(object.metadata.namespace, '0x4000000000000000', '0x8000000000000000')",
        "shardRange(object.metadata.namespace, '0x8000000000000000', '0xc000000000000000')",
        "shardRange(object.metadata.namespace, '0xc000000000000000', '0x10000000000000000')",
    ]
    namespaces = [f"team-{i}" for i in range(500)]
    owners = [[s for s in range(3) if Scope(shard=s, total_shards=3).keeps(ns)] for ns in namespaces]
    assert all(len(o) == 1 for o in owners), "every namespace in exactly one shard"
    assert Scope(shard=5, total_shards=3, idle=True).keeps("team-1") is False
    with pytest.raises(ValueError):
        Scope(shard=3, total_shards=3)
    with pytest.raises(ValueError):
        Scope(namespaces=("Not_A_Namespace",))


def split(names: list[str], total: int, bounds: tuple[int, ...]) -> list[list[str]]:
    """The namespaces each shard keeps with ``bounds``; every namespace on exactly one shard."""
    kept = [[ns for ns in names if Scope(shard=i, total_shards=total, bounds=bounds).keeps(ns)] for i in range(total)]
    assert sorted(ns for shard in kept for ns in shard) == sorted(names), "every namespace on exactly one shard"
    return kept


def test_balanced_bounds_split_namespaces_with_shared_prefixes_evenly() -> None:
    teams = [f"team-{i:02d}" for i in range(12)]
    assert [len(s) for s in split(teams, 3, ())] == [12, 0, 0]  # equal ranges: all in one
    assert [len(s) for s in split(teams, 3, balanced_bounds([(ns, None) for ns in teams], 3))] == [4, 4, 4]
    ml = [f"ml-team-{i:03d}" for i in range(1, 301)]
    assert max(len(s) for s in split(ml, 4, ())) == 300
    assert [len(s) for s in split(ml, 4, balanced_bounds([(ns, T0) for ns in ml], 4))] == [75, 75, 75, 75]
    # one shardRange() per shard, the cuts at the namespaces' hashes
    bounds = balanced_bounds([(ns, None) for ns in teams], 3)
    start, end = Scope(shard=1, total_shards=3, bounds=bounds).range
    assert Scope(shard=1, total_shards=3, bounds=bounds).shard_selector() == (
        f"shardRange(object.metadata.namespace, '0x{start:016x}', '0x{end:016x}')")
    assert start in {fnv1a_64(ns) for ns in teams}


T0 = 1787220000.0


def test_bounds_hold_still_for_a_few_new_namespaces_and_move_past_the_threshold() -> None:
    """Namespaces created after the reference part fall where their hash is; the cuts move only
    when their count crosses the next checkpoint (10%), then by whole namespaces."""
    base = [(f"team-{i:03d}", T0) for i in range(200)]
    bounds = balanced_bounds(base, 4)
    assert reference_size(200) == 196 and reference_size(215) == 215 and reference_size(214) == 196
    grown = list(base)
    for i in range(14):  # 200 -> 214: under the next checkpoint (215)
        grown.append((f"new-{i}", T0 + 60 + i))
        assert balanced_bounds(grown, 4) == bounds
    kept = split([ns for ns, _ in grown], 4, bounds)
    assert {ns for ns, _ in base} <= {ns for shard in kept for ns in shard}
    grown.append(("new-14", T0 + 120))  # 215: the reference is every namespace again
    moved = balanced_bounds(grown, 4)
    assert moved != bounds
    after = split([ns for ns, _ in grown], 4, moved)
    assert [len(s) for s in after] == [54, 54, 53, 54]
    # a deletion of a namespace outside the reference part changes nothing
    assert balanced_bounds([nc for nc in grown[:-1] if nc[0] != "new-3"], 4) == bounds


@pytest.mark.parametrize("total", [2, 3, 4, 7])
def test_every_namespace_on_exactly_one_shard_whatever_the_list(total: int) -> None:
    import random

    rng = random.Random(total)
    names = [f"ns-{rng.randrange(10**6)}" for _ in range(150)]
    for step in range(40):
        listed = [(ns, T0 + i) for i, ns in enumerate(names)]
        bounds = balanced_bounds(listed, total)
        assert len(bounds) == total + 1 and bounds[0] == 0 and bounds[-1] == HASH_SPACE
        split(names + ["created-later", "another-one"], total, bounds)
        if step % 2:
            names.pop(rng.randrange(len(names)))
        else:
            names.append(f"ns-{rng.randrange(10**6)}")
    assert balanced_bounds([], 4) == tuple(i * HASH_SPACE // 4 for i in range(5))  # no list: the equal ranges
    assert balanced_bounds([("a", None)], 1) == (0, HASH_SPACE)
    with pytest.raises(ValueError):
        Scope(shard=0, total_shards=2, bounds=(0, 5))


def test_namespace_list_reports_the_cuts_when_they_change() -> None:
    seen: list[tuple[int, ...]] = []
    watch = NamespaceList(3, seen.append)
    ns = lambda name, at="2026-08-20T10:00:00Z": {"metadata": {"name": name, "creationTimestamp": at}}  # noqa: E731
    watch.replace([ns(f"team-{i:02d}") for i in range(12)])
    assert len(seen) == 1 and [len(s) for s in split([f"team-{i:02d}" for i in range(12)], 3, seen[0])] == [4, 4, 4]
    watch.apply("ADDED", ns("team-12", "2026-08-21T10:00:00Z"))  # 13 namespaces: still a checkpoint under 20
    assert len(seen) == 2
    watch.apply("MODIFIED", ns("team-12", "2026-08-21T10:00:00Z"))
    watch.apply("ADDED", {"metadata": {}})  # unreadable: ignored
    assert len(seen) == 2
    watch.apply("DELETED", ns("team-12"))
    assert seen[-1] == seen[0]
    watch.set_total(4)
    assert len(seen[-1]) == 5


def serve_cluster(sim: SimApiServer, workloads: int = 240, seed: int = 3, pods: bool = False) -> set[str]:
    for r in COLLECTOR_RESOURCES:
        sim.serve(r)
    cluster = build_cluster(workloads, nodes=512, seed=seed, namespaces=40)
    sim.bulk_load(cluster.objects() + (cluster.pods() if pods else []))
    return {j.namespace for j in cluster.jobs}


async def scrape(port: int) -> Series:
    async with aiohttp.ClientSession() as s:
        async with s.get(f"http://127.0.0.1:{port}/metrics") as r:
            text = await r.text()
    return {(s.name, frozenset(s.labels.items())): s.value for f in parse_text(text) for s in f.samples}


def cluster_series(series: Series) -> Series:
    return {k: v for k, v in series.items() if not k[0].startswith(PROCESS_FAMILIES)}


def read_series(series: Series) -> Series:
    """What the objects say: the cluster series, observed times as 0 (their presence still counts)."""
    return {k: (0.0 if k[0] in OBSERVED else v) for k, v in cluster_series(series).items()}


# Per-domain series that add up over shards (exporter/cluster/capacity.py, "Sharding"): every
# shard exports its own Workloads' used and its own pods' bound GPUs, shard 0 the Nodes' capacity
# and unavailable GPUs; Prometheus sums them (alerts/generate.py, capacity_rules).
ADDITIVE = ("gangscope_domain_gpus", "gangscope_domain_gpus_bound")


def whole_only(key: tuple[str, frozenset[tuple[str, str]]]) -> bool:
    """What needs every Workload's usage: only a collector that sees them all exports it."""
    return key[0] in ("gangscope_domain_placeable_pods", "gangscope_domains", "gangscope_workload_fit",
                      "gangscope_fragmentation_blocked_workloads") or (
        key[0] == "gangscope_domain_gpus" and ("state", "free") in key[1])


def free_from_sums(sums: Series, size: int = 0) -> dict[frozenset[tuple[str, str]], float]:
    """The recording rules' free GPUs (or placeable pods of ``size``) per domain from the shards'
    summed series: per host max(0, capacity - unavailable - used), summed up the levels."""
    per_host: dict[frozenset[tuple[str, str]], dict[str, float]] = {}
    for (name, labels), v in sums.items():
        d = dict(labels)
        if name == "gangscope_domain_gpus" and d["level"] == "host":
            path = frozenset((k, x) for k, x in labels if k not in ("level", "state"))
            per_host.setdefault(path, {})[d["state"]] = v
    out: dict[frozenset[tuple[str, str]], float] = {}
    for path, st in per_host.items():
        free = max(0.0, st["capacity"] - st["unavailable"] - st["used"])
        value = free // size if size else free
        names = dict(path)
        for level in ("block", "rack", "host"):
            if level in names:
                key = frozenset({("level", level), *((n, names[n]) for n in ("block", "rack", "host")[
                    : ("block", "rack", "host").index(level) + 1] if n in names)})
                out[key] = out.get(key, 0.0) + value
    return out


def namespaces_of(series: Series) -> set[str]:
    return {dict(labels)["namespace"] for _, labels in series if "namespace" in dict(labels)}


async def test_three_shards_together_are_one_collector(kube_sim: SimApiServer, kube_sim_kubeconfig: str) -> None:
    namespaces = serve_cluster(kube_sim, pods=True)
    whole = await started_collector(kube_sim_kubeconfig)
    shards = [await started_collector(kube_sim_kubeconfig, "--shard", str(i), "--total-shards", "3") for i in range(3)]
    try:
        def combine(parts: list[Series]) -> tuple[Series, Series]:
            union: Series = {}
            sums: Series = {}
            for part in parts:
                assert not any(whole_only(k) for k in part), "what needs every Workload is not exported by a shard"
                for k, v in part.items():
                    if k[0] in ADDITIVE:
                        sums[k] = sums.get(k, 0.0) + v
                    else:
                        assert k not in union, f"{k} in two shards"
                        union[k] = v
            return union, sums

        # The capacity flush runs up to a second after the last change, queue positions are polled
        # after the first sync: until every collector has done both.
        for _ in range(50):
            expected = read_series(await scrape(whole.port))
            parts = [read_series(await scrape(c.port)) for c in shards]
            union, sums = combine(parts)
            flushed = any(k[0] == "gangscope_domain_gpus" and ("state", "free") in k[1] for k in expected)
            if (flushed and sums == {k: v for k, v in expected.items() if k[0] in ADDITIVE and not whole_only(k)}
                    and union == {k: v for k, v in expected.items() if k[0] not in ADDITIVE and not whole_only(k)}):
                break
            await asyncio.sleep(0.2)
        assert union == {k: v for k, v in expected.items() if k[0] not in ADDITIVE and not whole_only(k)}
        assert sums == {k: v for k, v in expected.items() if k[0] in ADDITIVE and not whole_only(k)}
        # what the recording rules compute from the sums is what the whole collector exports
        # (a host's free GPUs and placeable pods are only recorded, above the host they are exported too)
        above_host = lambda d: {k: v for k, v in d.items() if ("level", "host") not in k}  # noqa: E731
        free = {k[1]: v for k, v in expected.items() if k[0] == "gangscope_domain_gpus" and ("state", "free") in k[1]}
        assert free and not [k for k in free if ("level", "host") in k]
        assert above_host(free_from_sums(sums)) == {labels - {("state", "free")}: v for labels, v in free.items()}
        eights = {k[1] - {("gpus_per_pod", "8")}: v for k, v in expected.items()
                  if k[0] == "gangscope_domain_placeable_pods" and ("gpus_per_pod", "8") in k[1]}
        assert eights and above_host(free_from_sums(sums, 8)) == eights
        # the numbers are not trivial: GPUs used and bound in each shard, capacity from shard 0 alone
        for i, part in enumerate(parts):
            states = {dict(k[1])["state"] for k, v in part.items() if k[0] == "gangscope_domain_gpus" and v}
            assert states == ({"capacity", "unavailable", "used"} if i == 0 else {"used"}), (i, states)
            assert any(v for k, v in part.items() if k[0] == "gangscope_domain_gpus_bound")
        assert len(expected) > 3000 and namespaces_of(expected) == namespaces
        for i, (part, collector) in enumerate(zip(parts, shards)):
            assert namespaces_of(part) == {ns for ns in namespaces if Scope(shard=i, total_shards=3).keeps(ns)}
            own = await scrape(collector.port)
            assert own[("gangscope_shard_ordinal", frozenset({("shard_ordinal", str(i))}))] == i
            assert own[("gangscope_total_shards", frozenset())] == 3
        # The simulated server honours shardSelector: each shard was sent only its namespaces.
        listed = [q for _, p, q in kube_sim.request_log if p.endswith("/workloads") and "shardSelector" in q]
        assert listed and all(s.sources.sources["workloads"].informer.shard_selector_honoured for s in shards)
    finally:
        for c in (whole, *shards):
            await c.stop()


def serve_namespaces(sim: SimApiServer, names: set[str], at: str = "2026-08-20T10:00:00Z") -> None:
    sim.serve(NAMESPACES)
    for ns in sorted(names):
        sim.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "creationTimestamp": at}})


async def test_balanced_shards_split_namespaces_evenly_and_hand_over_whole_namespaces(
        kube_sim: SimApiServer, kube_sim_kubeconfig: str) -> None:
    """Three shards cut at the namespaces' quantiles: each keeps a third of them, no Workload on
    two shards and none on none, before and after the cuts move with the namespace list."""
    namespaces = serve_cluster(kube_sim, workloads=120)
    serve_namespaces(kube_sim, namespaces | {"kube-system", "default"})
    shards = [await started_collector(kube_sim_kubeconfig, "--shard", str(i), "--total-shards", "3",
                                      "--namespaces-denylist", "kube-system,default") for i in range(3)]
    try:
        def kept() -> list[set[tuple[str, str]]]:
            return [set(c.store.workloads) for c in shards]

        def partition() -> bool:
            parts = kept()
            every = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in kube_sim.objects(COLLECTOR_RESOURCES[0])}
            return sum(len(p) for p in parts) == len(every) and set().union(*parts) == every

        await eventually(partition, timeout=20, interval=0.1)
        held = [{ns for ns, _ in p} for p in kept()]
        sizes = sorted(len({ns for ns in namespaces if c.scope.keeps(ns)}) for c in shards)
        assert sizes[-1] - sizes[0] <= 1 and sum(sizes) == len(namespaces)
        assert all(h <= {ns for ns in namespaces if c.scope.keeps(ns)} for h, c in zip(held, shards))
        assert len({c.scope.bounds for c in shards}) == 1 and shards[0].scope.bounds  # the same cuts, not equal ranges
        before = shards[0].scope.bounds
        # Many new namespaces (past the next checkpoint), each with a Workload: the cuts move
        # together, the handover leaves every Workload on exactly one shard.
        wl = next(iter(kube_sim.objects(COLLECTOR_RESOURCES[0])))
        for i in range(len(namespaces)):
            ns = f"zz-new-{i:03d}"
            kube_sim.create({"apiVersion": "v1", "kind": "Namespace",
                             "metadata": {"name": ns, "creationTimestamp": "2026-08-21T10:00:00Z"}})
            kube_sim.create({**wl, "metadata": {**wl["metadata"], "namespace": ns, "name": "late", "uid": f"late-{i}",
                                                 "resourceVersion": ""}})
        await eventually(lambda: len({c.scope.bounds for c in shards}) == 1 and shards[0].scope.bounds != before,
                         timeout=20, interval=0.1)
        await eventually(partition, timeout=30, interval=0.1)
    finally:
        for c in shards:
            await c.stop()


async def test_client_side_sharding_when_the_server_ignores_the_selector(kube_sim: SimApiServer,
                                                                         kube_sim_kubeconfig: str) -> None:
    namespaces = serve_cluster(kube_sim, workloads=120)
    kube_sim.shard_selectors = False  # an API server before 1.36, or without the feature gate
    collector = await started_collector(kube_sim_kubeconfig, "--shard", "1", "--total-shards", "2")
    try:
        mine = {ns for ns in namespaces if Scope(shard=1, total_shards=2).keeps(ns)}

        async def served_namespaces() -> set[str]:
            return namespaces_of(cluster_series(await scrape(collector.port)))

        async def all_served() -> bool:
            return await served_namespaces() == mine

        await eventually(all_served, timeout=10, interval=0.1)
        served = await served_namespaces()
        assert collector.sources.sources["workloads"].informer.shard_selector_honoured is False
        # Events of other shards' namespaces are dropped too, not only the list's objects.
        other = next(ns for ns in namespaces if ns not in served)
        wl = next(o for o in kube_sim.objects(COLLECTOR_RESOURCES[0]) if o["metadata"]["namespace"] == other)
        wl["metadata"]["labels"]["touched"] = "yes"
        kube_sim.update(wl)
        # A namespace of this shard that keeps Workloads after one is deleted (sets iterate in a
        # per-process hash order: the first one might hold a single Workload).
        mine = max(sorted(served), key=lambda ns: sum(o["metadata"]["namespace"] == ns
                                                      for o in kube_sim.objects(COLLECTOR_RESOURCES[0])))
        wl = next(o for o in kube_sim.objects(COLLECTOR_RESOURCES[0]) if o["metadata"]["namespace"] == mine)
        kube_sim.delete(wl)
        await eventually(lambda: collector.store.workload(mine, wl["metadata"]["name"]) is None)
        # (a namespace whose one Workload that was is gone: set order picks it in some runs)
        left = {o["metadata"]["namespace"] for o in kube_sim.objects(COLLECTOR_RESOURCES[0])}
        assert {w.namespace for w in collector.store.workloads.values()} == served & left
    finally:
        await collector.stop()


def shard_pod(sim: SimApiServer, replicas: int, ordinal: int) -> None:
    sim.serve(STATEFULSETS)
    sim.serve(AGENT_PODS)
    sim.create({"apiVersion": "apps/v1", "kind": "StatefulSet",
                "metadata": {"name": "gangscope-collector", "namespace": "gangscope", "uid": "ss-uid"},
                "spec": {"replicas": replicas, "serviceName": "gangscope-collector"}})
    sim.create({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": f"gangscope-collector-{ordinal}", "namespace": "gangscope",
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "gangscope-collector",
                             "uid": "ss-uid", "controller": True}]}, "spec": {}})


def set_replicas(sim: SimApiServer, replicas: int) -> None:
    ss = next(o for o in sim.objects(STATEFULSETS))
    ss["spec"]["replicas"] = replicas
    sim.update(ss)


async def test_statefulset_shards_follow_its_replicas(kube_sim: SimApiServer, kube_sim_kubeconfig: str) -> None:
    namespaces = serve_cluster(kube_sim)
    shard_pod(kube_sim, replicas=2, ordinal=1)
    collector = make_collector(kube_sim_kubeconfig, "--pod", "gangscope-collector-1", "--pod-namespace", "gangscope")
    await collector.start()
    try:
        await collector.wait_ready(10)

        async def served() -> tuple[set[str], Series]:
            series = await scrape(collector.port)
            return namespaces_of(cluster_series(series)), series

        def expected(total: int) -> set[str]:
            return {ns for ns in namespaces if Scope(shard=1, total_shards=total).keeps(ns)}

        got, series = await served()
        assert got == expected(2) and series[("gangscope_total_shards", frozenset())] == 2
        before = {k: v for k, v in series.items() if k[0] == "gangscope_workload_info"}
        set_replicas(kube_sim, 3)  # scaled up: shard 1 of 3 now
        for _ in range(200):
            got, series = await served()
            if got == expected(3):
                break
            await asyncio.sleep(0.05)
        assert got == expected(3), "exactly the namespaces of the new range, no others"
        assert series[("gangscope_total_shards", frozenset())] == 3
        assert series[("gangscope_shard_ordinal", frozenset({("shard_ordinal", "1")}))] == 1
        after = {k: v for k, v in series.items() if k[0] == "gangscope_workload_info"}
        kept = {k for k in before if dict(k[1])["namespace"] in expected(3)}
        assert kept <= after.keys(), "series of namespaces that stay are unchanged"
        set_replicas(kube_sim, 1)  # this pod is being scaled away: it keeps nothing
        for _ in range(200):
            got, series = await served()
            if not got:
                break
            await asyncio.sleep(0.05)
        assert not got and not any(k[0] == "gangscope_shard_ordinal" for k in series)
        assert series[("gangscope_total_shards", frozenset())] == 1
    finally:
        await collector.stop()


async def test_a_pod_without_a_statefulset_waits_not_ready(kube_sim: SimApiServer, kube_sim_kubeconfig: str) -> None:
    serve_cluster(kube_sim, workloads=10)
    kube_sim.serve(STATEFULSETS)
    kube_sim.serve(AGENT_PODS)
    kube_sim.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "lonely", "namespace": "gangscope"}, "spec": {}})
    collector = make_collector(kube_sim_kubeconfig, "--pod", "lonely", "--pod-namespace", "gangscope")
    await collector.start()
    try:
        await eventually(lambda: "no StatefulSet controller" in collector.ready()[1])
        assert not collector.ready()[0]
        async with aiohttp.ClientSession() as s:
            async with s.get(f"http://127.0.0.1:{collector.port}/readyz") as r:
                assert r.status == 503 and "StatefulSet" in await r.text()
    finally:
        await collector.stop()


async def test_two_replicas_serve_identical_series(kube_sim: SimApiServer, kube_sim_kubeconfig: str) -> None:
    """HA: a replica started later, after changes, serves what the first serves. Excluded: what
    is observed rather than read (documented in docs/deploy.md, "High availability")."""
    serve_cluster(kube_sim, workloads=150)
    poll = ("--queue-position-interval", "0.3")  # positions are polled (Kueue's visibility API): both have polled
    first = await started_collector(kube_sim_kubeconfig, *poll)
    try:
        for wl in list(kube_sim.objects(COLLECTOR_RESOURCES[0]))[:20]:
            for c in wl["status"]["conditions"]:
                if c["type"] == "QuotaReserved" and c["status"] == "False":
                    c["message"] = "couldn't assign flavors: 8 more needed"
            kube_sim.update(wl)
        second = await started_collector(kube_sim_kubeconfig, *poll)
        try:
            async def comparable(c: Collector) -> Series:
                return read_series(await scrape(c.port))

            async def same() -> bool:
                return await comparable(first) == await comparable(second)

            await eventually(same, timeout=10, interval=0.2)
            assert len(await comparable(first)) > 1000
        finally:
            await second.stop()
    finally:
        await first.stop()


async def test_watched_namespaces_need_only_roles(kube_sim: SimApiServer, kube_sim_kubeconfig: str) -> None:
    """--namespaces: one list and watch per namespace, so Roles in those namespaces are enough."""
    namespaces = sorted(serve_cluster(kube_sim, workloads=120))
    mine = namespaces[:3]
    for r in COLLECTOR_RESOURCES:
        if r.namespaced:
            kube_sim.namespace_rbac[(r.group, r.plural)] = set(mine)
    collector = await started_collector(kube_sim_kubeconfig, "--namespaces", ",".join(mine[:2]), "--namespaces", mine[2])
    try:
        series = await scrape(collector.port)
        assert namespaces_of(cluster_series(series)) == set(mine)
        up = {dict(k[1])["source"]: v for k, v in series.items() if k[0] == "gangscope_source_up"}
        assert up["workloads"] == up["localqueues"] == up["podgroups_coscheduling"] == 1
        wl_requests = [p for _, p, q in kube_sim.request_log if p.endswith("/workloads")]
        assert wl_requests and all("/namespaces/" in p for p in wl_requests)
        assert {p.split("/namespaces/")[1].split("/")[0] for p in wl_requests} == set(mine)
        # Each namespace's watch follows its own changes.
        wl = next(o for o in kube_sim.objects(COLLECTOR_RESOURCES[0]) if o["metadata"]["namespace"] == mine[1])
        kube_sim.delete(wl)
        await eventually(lambda: collector.store.workload(mine[1], wl["metadata"]["name"]) is None)
    finally:
        await collector.stop()


async def test_namespace_denylist(kube_sim: SimApiServer, kube_sim_kubeconfig: str) -> None:
    namespaces = sorted(serve_cluster(kube_sim, workloads=120))
    denied = namespaces[:2]
    collector = await started_collector(kube_sim_kubeconfig, "--namespaces-denylist", ",".join(denied))
    try:
        assert namespaces_of(cluster_series(await scrape(collector.port))) == set(namespaces) - set(denied)
        selectors = {q.get("fieldSelector") for _, p, q in kube_sim.request_log if p.endswith("/workloads")}
        assert selectors == {f"metadata.namespace!={denied[0]},metadata.namespace!={denied[1]}"}
    finally:
        await collector.stop()


async def test_resources_selects_the_sources(kube_sim: SimApiServer, kube_sim_kubeconfig: str) -> None:
    serve_cluster(kube_sim, workloads=30)
    collector = await started_collector(kube_sim_kubeconfig, "--resources", "workloads,nodes,topologies")
    try:
        series = await scrape(collector.port)
        assert {dict(k[1])["source"] for k in series if k[0] == "gangscope_source_up"} == {"workloads", "nodes", "topologies"}
        assert not any(k[0].startswith("gangscope_podgroup_") for k in series)
        assert not any(p.endswith("/podgroups") or p.endswith("/localqueues") for _, p, _ in kube_sim.request_log)
    finally:
        await collector.stop()


def _labels(series: Series) -> list[dict[str, Any]]:
    return [dict(k[1]) for k in series]


async def test_cluster_name_and_metric_lists(kube_sim: SimApiServer, kube_sim_kubeconfig: str) -> None:
    serve_cluster(kube_sim, workloads=30)
    named = await started_collector(kube_sim_kubeconfig, "--cluster-name", 'eu-"west"-1',
                                    "--metric-denylist", "gangscope_workload_condition,gangscope_gang_.*")
    allowed = await started_collector(kube_sim_kubeconfig, "--metric-allowlist", "gangscope_workload_(info|stage)")
    try:
        series = await scrape(named.port)
        assert all(labels.get("cluster") == 'eu-"west"-1' for labels in _labels(series))
        names = {k[0] for k in series}
        assert "process_resident_memory_bytes" in names and "gangscope_workload_info" in names
        assert not any(n == "gangscope_workload_condition" or n.startswith("gangscope_gang_") for n in names)
        only = {k[0] for k in await scrape(allowed.port) if k[0].startswith("gangscope_")}
        assert only == {"gangscope_workload_info", "gangscope_workload_stage"}
    finally:
        await named.stop()
        await allowed.stop()


async def test_series_cap_per_owner_flag(kube_sim: SimApiServer, kube_sim_kubeconfig: str) -> None:
    """--max-series-per-owner: a job on more hosts than the cap leaves only gangscope_workload_topology_pods."""
    serve_cluster(kube_sim, workloads=120)
    collector = await started_collector(kube_sim_kubeconfig, "--max-series-per-owner", "8")
    try:
        series = await scrape(collector.port)
        pods: dict[str, int] = {}
        for name, labels in series:
            if name == "gangscope_workload_topology_pods":
                workload = dict(labels)["workload"]
                pods[workload] = pods.get(workload, 0) + 1
        big = [w for w in collector.store.workloads.values() if sum(len(a.placed) for a in w.last_assignments) > 8]
        assert big and all(w.name not in pods for w in big)
        assert pods and max(pods.values()) <= 8
        infos = {dict(labels)["workload"] for name, labels in series if name == "gangscope_workload_info"}
        assert {w.name for w in big} <= infos, "their other families stay"
        dropped = {dict(labels)["family"]: v for (name, labels), v in series.items()
                   if name == "gangscope_exposition_dropped_series_total"}
        assert dropped["gangscope_workload_topology_pods"] > 0
    finally:
        await collector.stop()

"""Shards cut by Workloads against kube-apiserver 1.20: shard 0 counts the Workloads with a
metadata-only LIST, publishes the cuts in its ConfigMap, and a second shard follows, both as the
collector's own ServiceAccount with the Role the sharded component ships (the ConfigMap granted
by name: watched with ``fieldSelector=metadata.name=``, created, then updated). Namespaces named
alike and of very different sizes; every Workload the server holds is on exactly one shard after
the first cuts and after the cuts move (kube-apiserver 1.20 ignores ``shardSelector``: each shard
filters itself, with the same ranges)."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from collectors import started_collector
from exporter.cluster.main import Collector
from exporter.kube.resources import SHARD_CUTS_CONFIGMAP
from exporter.kube.weighted_cuts import namespace_weights, parse_configmap, reason_to_move, weighted_bounds
from realapi import ApiStatusError, RealCluster, Writer
from test_sharding import scrape
from waiting import eventually

ROOT = Path(__file__).resolve().parents[1]
HOME = "gangscope"
CONFIGMAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": SHARD_CUTS_CONFIGMAP, "namespace": HOME}}


def workload(ns: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": name, "namespace": ns},
            "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [
                {"name": "c", "image": "busybox"}]}}}]}}


def server_workloads(real_api: RealCluster) -> set[tuple[str, str]]:
    items = real_api.admin.list("kueue.x-k8s.io/v1beta2", "Workload")["items"]
    return {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in items}


def published(real_api: RealCluster) -> dict[str, Any] | None:
    try:
        return real_api.admin.get(CONFIGMAP)
    except ApiStatusError as e:
        if e.status == 404:
            return None
        raise


def follow(shards: list[Collector], cm: dict[str, Any] | None) -> bool:
    return cm is not None and all(c.shard_cuts is not None and c.shard_cuts.basis == "workloads"
                                  and c.scope.bounds == parse_configmap(cm).bounds and c.sources.ready()[0]
                                  for c in shards)


async def test_shard_0_publishes_and_a_second_shard_follows(real_api: RealCluster, tmp_path: Path) -> None:
    real_api.service_account(HOME, "gangscope-collector")  # bound by deploy/base's ClusterRole
    real_api.apply_manifests(ROOT / "deploy" / "components" / "sharded" / "rbac.yaml")
    real_api.admin.delete(CONFIGMAP)  # none from an earlier run in this session
    prefix = f"sc{uuid.uuid4().hex[:5]}"
    writer = Writer(real_api)
    teams = [real_api.namespace(f"{prefix}-team-{i:02d}") for i in range(12)]
    for ns, size in zip(teams, (30, 16, 10, 8, 6, 5, 4, 3, 2, 2, 1, 1)):
        for j in range(size):
            writer.create(workload(ns, f"job-{j}"))
    kubeconfig = real_api.kubeconfig(tmp_path / "kc", real_api.token(HOME, "gangscope-collector"))
    shards: list[Collector] = []
    try:
        for i in range(2):
            shards.append(await started_collector(kubeconfig, "--shard", str(i), "--total-shards", "2",
                                                  "--shard-cuts-configmap", f"{HOME}/{SHARD_CUTS_CONFIGMAP}"))

        def partitioned() -> bool:
            parts = [set(c.store.workloads) for c in shards]
            every = server_workloads(real_api)
            return sum(len(p) for p in parts) == len(every) and set().union(*parts) == every

        await eventually(lambda: follow(shards, published(real_api)), timeout=30, interval=0.2)
        await eventually(partitioned, timeout=30, interval=0.2)

        # The cuts are those of the server's own counts, every listed namespace weighing at least one.
        def weights() -> dict[str, int]:
            every = server_workloads(real_api)
            names = [n["metadata"]["name"] for n in real_api.admin.list("v1", "Namespace")["items"]]
            return namespace_weights(Counter(ns for ns, _ in every), names)

        cm = published(real_api)
        assert cm is not None
        cuts = parse_configmap(cm)
        assert (cuts.total, cuts.workloads) == (2, len(server_workloads(real_api)))
        assert cuts.bounds == weighted_bounds(weights(), 2)
        assert shards[0].publisher is not None and shards[1].publisher is None
        for i, c in enumerate(shards):
            series = await scrape(c.port)
            assert series[("gangscope_shard_cuts_info", frozenset({("basis", "workloads")}))] == 1
            assert series[("gangscope_source_up", frozenset({("source", "shard_cuts")}))] == 1
            assert series.get(("gangscope_source_up", frozenset({("source", "shard_weights")}))) == (1 if i == 0 else None)

        # A burst of jobs in one small namespace of the lighter shard: the cuts move (an update of the
        # ConfigMap granted by name), both shards hand over whole namespaces.
        lighter = min(shards, key=lambda c: len(c.store.workloads))

        def moves(ns: str) -> bool:
            """Whether 60 more Workloads in ``ns`` move the cuts: where the cut falls depends on the
            namespaces' hashes (random names, and the session's other namespaces), so the burst goes
            to the smallest namespace of the lighter shard for which it does."""
            w = weights()
            w[ns] = w.get(ns, 0) + 60
            return reason_to_move(cuts, weighted_bounds(w, 2), w, 2) is not None

        small = next(ns for ns in reversed(teams) if lighter.scope.keeps(ns) and moves(ns))
        for j in range(60):
            writer.create(workload(small, f"burst-{j}"))
        assert reason_to_move(cuts, weighted_bounds(weights(), 2), weights(), 2) is not None  # the premise
        shards[0].publisher.wake()
        await eventually(lambda: published(real_api)["metadata"]["resourceVersion"] != cm["metadata"]["resourceVersion"],  # type: ignore[index]
                         timeout=30, interval=0.2)
        await eventually(lambda: follow(shards, published(real_api)), timeout=30, interval=0.2)
        await eventually(partitioned, timeout=30, interval=0.2)
        moved = parse_configmap(published(real_api))
        assert moved.bounds == weighted_bounds(weights(), 2) != cuts.bounds
    finally:
        for c in shards:
            await c.stop()
        writer.cleanup()
        real_api.admin.delete(CONFIGMAP)

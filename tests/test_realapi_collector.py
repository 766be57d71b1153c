"""``gangscope collector`` against a real kube-apiserver (v1.20.2, etcd): every source it reads
served by the real CRDs (Kueue, Coscheduling in both API groups, Volcano, KAI Scheduler, JobSet,
TrainJob, LeaderWorkerSet; the native ``scheduling.k8s.io`` types as stand-ins) and Nodes,
with status written as Kueue and the
schedulers write it (through ``/status``), and the collector authenticated as the project's own
ServiceAccount with the project's own ClusterRole (``deploy/base/rbac.yaml``).

What it serves must equal ``gangscope snapshot`` of the objects the server holds, after the
first sync, after ADDED/MODIFIED/DELETED, after a cut stream (resumed, no relist) and after a watch
that expired in a compaction (relisted, no ghosts). The reference for ``test_collector_live.py``.
"""

from __future__ import annotations

import asyncio
import copy
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from exporter import loader
from exporter.cluster.collector import build_collector
from exporter.cluster.main import Collector
from exporter.exposition import Exposition
from exporter.kube.resources import COLLECTOR_RESOURCES, POD_RESOURCES, QUEUE_POSITIONS
from collectors import started_collector
from kueue_objects import BLOCK, HOST, RACK, admitted_conditions, cond, fixture, sample, series, workload
import realapi
from realapi import RealCluster, Relay, Writer, load_yaml

FIXTURES = Path(__file__).resolve().parent / "fixtures"
# Kueue's visibility API (queue positions) is an aggregated API that Kueue's own server provides;
# the test server has none, so that source is not served here (its tests use the simulator).
SERVED = [r for r in COLLECTOR_RESOURCES if r.source != QUEUE_POSITIONS.source]
# Per-object families that a snapshot of the same objects must reproduce exactly. Left out: source
# health, and what depends on when the collector saw something (eviction counters, phase times).
COMPARED = ("gangscope_workload", "gangscope_podgroup_pods", "gangscope_podgroup_min_member", "gangscope_gang_info",
            "gangscope_gang_stage")


def server_objects(real_api: RealCluster) -> list[tuple[str, dict[str, Any]]]:
    """Every object of every resource the collector reads, as the server holds it now (items of
    a list carry no kind for built-in types: added back, as kubectl does)."""
    out = []
    for r in SERVED:
        version = realapi.served_version(real_api, r)
        assert version is not None, f"{r.source} is not served by the test server"
        gv = f"{r.group}/{version}" if r.group else "v1"
        for item in real_api.admin.list(gv, r.kind)["items"]:
            out.append((r.source, {**item, "kind": r.kind, "apiVersion": gv}))
    return out


def compared(text: str) -> dict:
    return {k: v for k, v in series(text).items() if k[0].startswith(COMPARED) or k[0] == "gangscope_podgroup_phase"}


def snapshot_of(real_api: RealCluster) -> dict:
    expo = Exposition()
    _, handlers, _ = build_collector(expo)
    objects = server_objects(real_api)
    loader.feed(expo, handlers, objects, "snapshot")
    if not any(obj["kind"] == "Pod" for _, obj in objects):
        # A dump without pods says nothing about them, but the server was asked: it has none, as
        # each of the live collector's pod watches knows for the gangs it covers.
        for r in POD_RESOURCES:
            handlers[r.source].replace([])
    return compared(expo.render(False).decode())


async def scrape(port: int) -> str:
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/metrics") as resp:
        assert resp.status == 200
        return await resp.text()


async def converges(collector: Collector, real_api: RealCluster, timeout: float = 15) -> None:
    """The served series reach the snapshot of what the server holds."""
    deadline = time.monotonic() + timeout
    while True:
        want, got = snapshot_of(real_api), compared(await scrape(collector.port))
        if got == want:
            return
        if time.monotonic() > deadline:
            missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
            changed = sorted(k for k in set(want) & set(got) if want[k] != got[k])
            raise AssertionError(f"not converged: missing {missing[:4]} extra {extra[:4]} changed {changed[:4]}")
        await asyncio.sleep(0.1)


def renamespaced(objects: list[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
    out = []
    for obj in objects:
        obj = copy.deepcopy(obj)
        if obj["metadata"].get("namespace"):
            obj["metadata"]["namespace"] = f"{prefix}-{obj['metadata']['namespace']}"
        out.append(obj)
    return out


def gang_objects(prefix: str) -> list[dict[str, Any]]:
    """The PodGroups of every API from tests/fixtures/podgroups (not the malformed ones)."""
    objs = []
    for name in ("coscheduling.yaml", "volcano.yaml", "native.yaml"):
        for doc in load_yaml(FIXTURES / "podgroups" / name):
            objs += doc.get("items", [doc])
    # 1.20 serves the native types only in the versions the stand-in CRD has (v1beta1, v1alpha1).
    objs = [o for o in objs if o["apiVersion"] not in ("scheduling.k8s.io/v1alpha2", "scheduling.k8s.io/v1alpha3")]
    return renamespaced(objs, prefix)


def node(name: str, block: str, rack: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {BLOCK: block, RACK: rack, HOST: name}},
            "status": {"capacity": {"nvidia.com/gpu": "8"}}}


class Scene:
    """One test's objects: a Topology, four Nodes, a LocalQueue, Workloads, PodGroups of every API."""

    def __init__(self, real_api: RealCluster):
        self.real_api = real_api
        self.prefix = f"c{uuid.uuid4().hex[:6]}"
        self.ns = real_api.namespace(f"{self.prefix}-team")
        self.writer = Writer(real_api)
        self.hosts = [f"{self.prefix}-h{i}" for i in range(4)]

    def seed(self) -> None:
        w, ns = self.writer, self.ns
        w.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": f"{self.prefix}-topo"},
                  "spec": {"levels": [{"nodeLabel": BLOCK}, {"nodeLabel": RACK}, {"nodeLabel": HOST}]}})
        for host, (b, r) in zip(self.hosts, [("b1", "r1"), ("b1", "r1"), ("b1", "r2"), ("b2", "r3")]):
            w.create(node(host, b, r))
        w.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "q", "namespace": ns},
                  "spec": {"clusterQueue": "gpu-cq"}})
        w.create(workload("running", ns, hosts=self.hosts[:2], conditions=admitted_conditions()))
        w.create(workload("pending", ns, admitted_cq=None, conditions=[cond("QuotaReserved", "False", "Pending")]))
        tas = fixture("workload-v1beta2-admitted-tas.yaml")[0]
        w.create({**tas, "metadata": {**tas["metadata"], "namespace": ns}})
        for ns_name in {o["metadata"]["namespace"] for o in gang_objects(self.prefix)}:
            self.real_api.namespace(ns_name)
        for obj in gang_objects(self.prefix):
            w.create(obj)


@pytest.fixture
async def scene(real_api: RealCluster) -> AsyncIterator[Scene]:
    s = Scene(real_api)
    s.seed()
    yield s
    s.writer.cleanup()


def collector_kubeconfig(real_api: RealCluster, path: Path, port: int) -> str:
    """The collector's own ServiceAccount (deploy/base/rbac.yaml binds gangscope-collector)."""
    real_api.service_account("gangscope", "gangscope-collector")
    return real_api.kubeconfig(path, real_api.token("gangscope", "gangscope-collector"), port=port)


@pytest.fixture
async def live(real_api: RealCluster, scene: Scene, tmp_path: Path) -> AsyncIterator[tuple[Collector, Relay]]:
    relay = await Relay(real_api.port).start()
    collector = await started_collector(collector_kubeconfig(real_api, tmp_path / "kc", relay.port))
    yield collector, relay
    await collector.stop()
    await relay.stop()


async def test_collector_follows_a_real_api_server(live: tuple[Collector, Relay], scene: Scene, real_api: RealCluster) -> None:
    collector, relay = live
    w, ns = scene.writer, scene.ns
    await converges(collector, real_api)
    s = series(await scrape(collector.port))
    # Every source the collector reads is served and readable with the project's RBAC, Nodes
    # included (read whole); only Kueue's visibility API (an aggregated API of Kueue's own) is down.
    assert {k[1] for k in s if k[0] == "gangscope_source_up" and s[k] == 1} == {frozenset({("source", r.source)}) for r in SERVED}
    assert s[sample("gangscope_source_up", source=QUEUE_POSITIONS.source)] == 0
    assert s[sample("gangscope_workload_topology_pods", namespace=ns, workload="running", podset="main",
                    block="b1", rack="r1", host=scene.hosts[0])] == 1
    # PodGroups of every API, each in its own namespace: legacy Coscheduling in hpc, native in rl.
    apis = {(dict(k[1])["namespace"].removeprefix(f"{scene.prefix}-"), dict(k[1])["api"]) for k in s
            if k[0] == "gangscope_podgroup_phase" and dict(k[1])["namespace"].startswith(scene.prefix)}
    assert apis >= {("ml-team", "coscheduling"), ("hpc", "coscheduling_legacy"), ("vision", "volcano"), ("rl", "native")}

    # ADDED, MODIFIED (Kueue evicts for a node failure: status through /status), DELETED
    w.create(workload("new", ns, hosts=[scene.hosts[3]], conditions=admitted_conditions(ready=False)))
    w.apply_status(workload("running", ns, hosts=scene.hosts[:2], conditions=[
        *admitted_conditions(), cond("Evicted", "True", "NodeFailures", "2026-08-20T12:00:00Z")],
        evictions=[{"reason": "NodeFailures", "underlyingCause": "", "count": 1}]))
    w.delete(workload("pending", ns))
    await converges(collector, real_api)
    s = series(await scrape(collector.port))
    assert s[sample("gangscope_topology_evictions_total", reason="NodeFailures", underlying_cause="", block="b1",
                    rack="r1")] == 1
    assert s[sample("gangscope_workload_stage", namespace=ns, workload="running", stage="evicting")] == 1

    # A Node relabelled: the Workloads on it move rack.
    w.update(node(scene.hosts[3], "b2", "r9"))
    await converges(collector, real_api)
    assert series(await scrape(collector.port))[sample(
        "gangscope_workload_topology_pods", namespace=ns, workload="new", podset="main", block="b2", rack="r9",
        host=scene.hosts[3])] == 1

    # Streams cut by the network: resumed from the last version (the watch cache has it), no relist.
    lists = {n: s.informer.lists for n, s in collector.sources.sources.items() if s.informer is not None}
    assert relay.cut() >= len(SERVED)
    w.create(workload("after-cut", ns, hosts=[scene.hosts[2]], conditions=admitted_conditions()))
    await converges(collector, real_api)
    assert {n: s.informer.lists for n, s in collector.sources.sources.items() if s.informer is not None} == lists


async def test_collector_relists_after_compaction(real_api: RealCluster, scene: Scene, tmp_path: Path) -> None:
    """Through an API server without a watch cache: the network goes away, objects change, etcd
    compacts; every resumed watch gets 410 and the collector lists again: nothing deleted in the
    gap lingers, the eviction counter keeps what it observed."""
    uncached = real_api.uncached()
    relay = await Relay(uncached.port).start()
    collector = await started_collector(collector_kubeconfig(real_api, tmp_path / "kc", relay.port))
    w, ns = scene.writer, scene.ns
    try:
        await converges(collector, real_api)
        w.apply_status(workload("running", ns, hosts=scene.hosts[:2], conditions=[
            *admitted_conditions(), cond("Evicted", "True", "NodeFailures", "2026-08-20T12:00:00Z")],
            evictions=[{"reason": "NodeFailures", "underlyingCause": "", "count": 1}]))
        await converges(collector, real_api)
        last = collector.sources.sources["workloads"].informer.resource_version
        relay.hold()
        relay.cut()
        w.delete(workload("pending", ns))
        w.create(workload("during-gap", ns, admitted_cq=None))
        w.update(node(scene.hosts[0], "b1", "r7"))
        real_api.wait_compacted("kueue.x-k8s.io/v1beta2", "Workload", last)
        relay.release()
        await converges(collector, real_api, timeout=20)
        assert collector.store.workload(ns, "pending") is None
        assert collector.sources.sources["workloads"].informer.lists == 2
        assert series(await scrape(collector.port))[sample(
            "gangscope_topology_evictions_total", reason="NodeFailures", underlying_cause="", block="b1", rack="r1")] == 1
    finally:
        await collector.stop()
        await relay.stop()

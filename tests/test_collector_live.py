"""The collector against the simulated API server, through a kubeconfig, over real HTTP.

It must serve the same Workload series as ``gangscope snapshot`` on the same objects, then
follow ADDED/MODIFIED/DELETED, a dropped stream and a 410 relist without losing or inventing
objects. Scrapes go through the real /metrics endpoint and both parsers; promtool lints it.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics

from exporter import loader
from exporter.cluster.main import Collector
from exporter.exposition import Exposition
from exporter.kube.resources import LOCAL_QUEUES, NODES, RESOURCE_FLAVORS, TOPOLOGIES, WORKLOADS
from exporter.sim.apiserver import SimApiServer
from exporter.cluster.collector import build_collector
from kueue_objects import admitted_conditions, cond, fixture, local_queue, modified, node, sample, series, topology, workload
from collectors import started_collector

SERVED = (WORKLOADS, LOCAL_QUEUES, TOPOLOGIES, NODES)  # ResourceFlavors stay unserved: a CRD missing


def workload_series(text: str) -> dict:
    """Per-object series; gangscope_topology_evictions_total counts what was observed since
    start, which a snapshot of the current objects cannot know, so it is checked separately."""
    return {k: v for k, v in series(text).items() if k[0].startswith("gangscope_workload")}


def snapshot_of(sim: SimApiServer) -> dict:
    """What ``gangscope snapshot`` prints for the server's current objects."""
    expo = Exposition()
    _, handlers, _ = build_collector(expo)
    loader.feed(expo, handlers, [("sim", o) for r in SERVED for o in sim.objects(r)], "snapshot")
    return workload_series(expo.render(False).decode())


@pytest.fixture
async def live(kube_sim: SimApiServer, kube_sim_kubeconfig: str) -> AsyncIterator[tuple[Collector, SimApiServer]]:
    for r in SERVED:
        kube_sim.serve(r)
    kube_sim.create(topology())
    for i, (b, r) in enumerate([("b1", "r1"), ("b1", "r1"), ("b1", "r2"), ("b2", "r3")]):
        kube_sim.create(node(f"h{i}", b, r))
    kube_sim.create(local_queue("q", "team", "gpu-cq"))
    kube_sim.create(workload("running", hosts=["h0", "h1"], conditions=admitted_conditions()))
    kube_sim.create(workload("pending", admitted_cq=None, conditions=[cond("QuotaReserved", "False", "Pending")]))
    kube_sim.create(fixture("workload-v1beta2-admitted-tas.yaml")[0])
    collector = await started_collector(kube_sim_kubeconfig)
    yield collector, kube_sim
    await collector.stop()


async def scrape(port: int, openmetrics: bool = False) -> str:
    headers = {"Accept": "application/openmetrics-text; version=1.0.0"} if openmetrics else {}
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/metrics", headers=headers) as resp:
        assert resp.status == 200
        return await resp.text()


async def converges(collector: Collector, sim: SimApiServer) -> None:
    """The served series reach the snapshot of the server's objects (and the store its keys)."""
    want = snapshot_of(sim)
    truth = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in sim.objects(WORKLOADS)}
    got: dict = {}

    async def poll() -> bool:
        nonlocal got
        got = workload_series(await scrape(collector.port))
        return got == want and set(collector.store.workloads) == truth

    deadline = time.monotonic() + 5
    while not await poll():
        if time.monotonic() > deadline:
            missing = set(want) - set(got)
            extra = set(got) - set(want)
            raise AssertionError(f"not converged: missing {sorted(missing)[:5]} extra {sorted(extra)[:5]}")
        await asyncio.sleep(0.05)


async def test_live_matches_snapshot_and_follows_changes(live: tuple[Collector, SimApiServer], tmp_path: Path) -> None:
    collector, sim = live
    await converges(collector, sim)
    text = await scrape(collector.port)
    s = series(text)
    assert s[sample("gangscope_workload_topology_pods", namespace="team", workload="running", podset="main",
                    block="b1", rack="r1", host="h0")] == 1
    assert [dict(k[1])["cluster_queue"] for k in s if k[0] == "gangscope_workload_info"
            and dict(k[1])["workload"] == "pending"] == ["gpu-cq"]
    assert s[sample("gangscope_source_up", source="workloads")] == 1
    assert s[sample("gangscope_source_up", source=RESOURCE_FLAVORS.source)] == 0  # not served: down, not fatal
    lint = subprocess.run(["promtool", "check", "metrics"], input=text.encode(), capture_output=True)
    assert lint.returncode == 0, lint.stdout.decode() + lint.stderr.decode()
    assert {f.name for f in parse_openmetrics(await scrape(collector.port, openmetrics=True))} >= {
        "gangscope_workload", "gangscope_workload_stage", "gangscope_topology_evictions"}

    # ADDED, MODIFIED, DELETED
    sim.create(workload("new", hosts=["h3"], conditions=admitted_conditions(ready=False)))
    running = sim.objects(WORKLOADS)[[o["metadata"]["name"] for o in sim.objects(WORKLOADS)].index("running")]
    sim.update(modified(running, conditions=[*admitted_conditions(), cond("Evicted", "True", "NodeFailures", "2026-08-20T12:00:00Z")],
                        schedulingStats={"evictions": [{"reason": "NodeFailures", "underlyingCause": "", "count": 1}]}))
    sim.delete(workload("pending"))
    await converges(collector, sim)
    s = series(await scrape(collector.port))
    assert s[sample("gangscope_topology_evictions_total", reason="NodeFailures", underlying_cause="", block="b1",
                    rack="r1")] == 1
    assert s[sample("gangscope_workload_stage", namespace="team", workload="running", stage="evicting")] == 1

    # a Node relabelled: the Workloads on it move rack
    sim.update(node("h3", "b2", "r9"))
    await converges(collector, sim)
    assert series(await scrape(collector.port))[sample(
        "gangscope_workload_topology_pods", namespace="team", workload="new", podset="main", block="b2", rack="r9", host="h3")] == 1

    # a dropped stream: resumed from the last version, nothing lost
    lists = sim.count("/workloads", watch=False)
    sim.drop_watches()
    sim.create(workload("after-drop", hosts=["h2"], conditions=admitted_conditions()))
    await converges(collector, sim)
    assert sim.count("/workloads", watch=False) == lists  # no relist was needed

    # a 410: the server stops answering, objects change, history is compacted -> relist, no ghosts
    sim.hang()
    sim.drop_watches()
    sim.delete(workload("new"))
    sim.create(workload("during-gap", admitted_cq=None))
    sim.compact()
    sim.hang(False)
    await converges(collector, sim)
    assert collector.store.workload("team", "new") is None
    assert sim.count("/workloads", watch=False) > lists
    # the eviction counter survives the relist (it counts what was observed, not what is listed)
    assert series(await scrape(collector.port))[sample(
        "gangscope_topology_evictions_total", reason="NodeFailures", underlying_cause="", block="b1", rack="r1")] == 1

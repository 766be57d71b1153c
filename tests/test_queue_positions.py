"""Queue positions from Kueue's visibility API: the running collector polls the simulated API
server's ``clusterqueues/<cq>/pendingworkloads`` (Kueue's wire format, apis/visibility/v1beta2),
exports the positions, drops them when a Workload is admitted, and keeps working when the API is
not served or forbidden."""

from __future__ import annotations

from typing import Any

import aiohttp

from collectors import started_collector
from exporter.kube.resources import LOCAL_QUEUES, QUEUE_POSITIONS, QUEUE_POSITIONS_LOCAL, WORKLOADS
from exporter.sim.apiserver import SimApiServer
from kueue_objects import admitted_conditions, cond, local_queue, sample, series, workload
from waiting import eventually


def pending(name: str, priority: int, created: str, queue: str = "q") -> dict[str, Any]:
    obj = workload(name, admitted_cq=None, queue=queue, conditions=[cond("QuotaReserved", "False", "WaitingForQuota")])
    obj["spec"]["priority"] = priority
    obj["metadata"]["creationTimestamp"] = created
    return obj


async def scrape(port: int) -> dict:
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/metrics") as resp:
        return series(await resp.text())


def positions(s: dict) -> dict[str, tuple[str, float]]:
    return {dict(k[1])["workload"]: (dict(k[1])["cluster_queue"], v) for k, v in s.items()
            if k[0] == "gangscope_workload_queue_position"}


def serve_cluster(sim: SimApiServer, *, visibility: bool = True) -> None:
    for r in (WORKLOADS, LOCAL_QUEUES, *((QUEUE_POSITIONS,) if visibility else ())):
        sim.serve(r)
    sim.create(local_queue("q", "team", "gpu-cq"))
    sim.create(local_queue("other", "team", "gpu-cq"))
    sim.create(pending("older", 100, "2026-08-20T09:00:00Z"))
    sim.create(pending("newer", 100, "2026-08-20T09:30:00Z"))
    sim.create(pending("urgent", 1000, "2026-08-20T09:45:00Z", queue="other"))
    sim.create(workload("running", conditions=admitted_conditions()))


async def test_positions_are_polled_exported_and_dropped_on_admission(kube_sim: SimApiServer, kube_sim_kubeconfig: str) -> None:
    serve_cluster(kube_sim)
    collector = await started_collector(kube_sim_kubeconfig, "--queue-position-interval", "0.1")
    try:
        await eventually(lambda: collector.positions.health.synced)
        s = await scrape(collector.port)
        # Kueue's order: priority first, then age; positions from 0, also per LocalQueue
        assert positions(s) == {"urgent": ("gpu-cq", 0), "older": ("gpu-cq", 1), "newer": ("gpu-cq", 2)}
        local = {dict(k[1])["workload"]: (dict(k[1])["local_queue"], v) for k, v in s.items()
                 if k[0] == "gangscope_workload_local_queue_position"}
        assert local == {"urgent": ("other", 0), "older": ("q", 0), "newer": ("q", 1)}
        assert s[sample("gangscope_source_up", source="queue_positions")] == 1
        assert s[sample("gangscope_source_objects", source="queue_positions")] == 3
        async with aiohttp.ClientSession() as http, http.get(
                f"http://127.0.0.1:{collector.port}/debug/explain", params={"namespace": "team", "name": "newer"}) as resp:
            doc = await resp.json()
        assert "position 3 of 3 in gpu-cq (2 in queue q)" in doc["layers"][0]["summary"]
        assert doc["layers"][0]["evidence"]["queue_position"]["position_in_cluster_queue"] == 2
        # admitted: its position goes with its next event, not with the next poll
        collector.positions.interval = 3600
        kube_sim.update(workload("urgent", queue="other", conditions=admitted_conditions()))
        await eventually(lambda: collector.store.workload("team", "urgent").stage == "running")
        assert "urgent" not in positions(await scrape(collector.port))
    finally:
        await collector.stop()


async def test_limit_and_only_queues_with_pending_workloads(kube_sim: SimApiServer, kube_sim_kubeconfig: str) -> None:
    serve_cluster(kube_sim)
    kube_sim.create(local_queue("idle", "team", "idle-cq"))  # no pending Workload: never asked
    collector = await started_collector(kube_sim_kubeconfig, "--queue-position-interval", "0.1",
                                        "--queue-position-limit", "2")
    try:
        await eventually(lambda: collector.positions.health.synced)
        assert positions(await scrape(collector.port)) == {"urgent": ("gpu-cq", 0), "older": ("gpu-cq", 1)}
        assert collector.store.queue_positions[("team", "older")].complete is False
        asked = {p for m, p, _ in kube_sim.request_log if p.endswith("/pendingworkloads")}
        assert asked == {"/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/gpu-cq/pendingworkloads"}
        assert all(q.get("limit") == "2" for m, p, q in kube_sim.request_log if p.endswith("/pendingworkloads"))
    finally:
        await collector.stop()


async def test_not_served_then_forbidden_leaves_the_rest_working(kube_sim: SimApiServer, kube_sim_kubeconfig: str) -> None:
    serve_cluster(kube_sim, visibility=False)
    collector = await started_collector(kube_sim_kubeconfig, "--queue-position-interval", "0.1", discovery_interval=0.1)
    try:
        await eventually(lambda: collector.positions.health.detail.startswith("not served"))
        s = await scrape(collector.port)
        assert s[sample("gangscope_source_up", source="queue_positions")] == 0
        assert s[sample("gangscope_source_errors_total", source="queue_positions")] == 0  # absent is a fact, not a fault
        assert s[sample("gangscope_workload_stage", namespace="team", workload="older", stage="inadmissible")] == 1
        assert positions(s) == {}
        # Kueue's visibility API is installed, and then RBAC takes it away
        kube_sim.serve(QUEUE_POSITIONS, versions=["v1beta1"])
        await eventually(lambda: collector.positions.health.synced)
        assert positions(await scrape(collector.port))["older"] == ("gpu-cq", 1)
        assert collector.positions.version == "v1beta1"
        kube_sim.forbid(QUEUE_POSITIONS)
        await eventually(lambda: collector.positions.health.detail.startswith("forbidden"))
        s = await scrape(collector.port)
        assert s[sample("gangscope_source_up", source="queue_positions")] == 0
        assert s[sample("gangscope_source_errors_total", source="queue_positions")] >= 1
        assert positions(s) == {}, "positions of a source that is down are not kept"
        assert s[sample("gangscope_source_up", source="workloads")] == 1
    finally:
        await collector.stop()


async def test_positions_page_past_the_first_page(kube_sim: SimApiServer, kube_sim_kubeconfig: str) -> None:
    """Kueue answers at most ``limit`` Workloads per request (pending_workloads_cq.go:69-90): the
    poller pages with ``offset`` until a short page, so no Workload past the first page is lost."""
    serve_cluster(kube_sim)
    for i in range(4):
        kube_sim.create(pending(f"late-{i}", 1, f"2026-08-20T10:0{i}:00Z"))
    collector = await started_collector(kube_sim_kubeconfig, "--queue-position-interval", "0.1")
    collector.positions.page_size = 2
    try:
        # a poll may have begun with the default page size before it was cut to 2: wait for a
        # whole poll at 2 (four pages, the last one short)
        pages = [("2", "0"), ("2", "2"), ("2", "4"), ("2", "6")]
        await eventually(lambda: [(q.get("limit"), q.get("offset")) for m, p, q in kube_sim.request_log
                                  if p.endswith("/pendingworkloads")][-4:] == pages)
        await eventually(lambda: len(collector.store.queue_positions) == 7)
        got = positions(await scrape(collector.port))
        assert got["late-3"] == ("gpu-cq", 6) and got["urgent"] == ("gpu-cq", 0)
        assert collector.store.queue_positions[("team", "late-3")].complete is True
    finally:
        await collector.stop()


async def test_a_namespaced_collector_asks_its_local_queues(kube_sim: SimApiServer, kube_sim_kubeconfig: str) -> None:
    """With --namespaces the collector has Roles, not the ClusterRole the ClusterQueue endpoint
    needs: it asks namespaces/<ns>/localqueues/<lq>/pendingworkloads (pending_workloads_lq.go),
    whose items carry the same positions."""
    serve_cluster(kube_sim)
    kube_sim.serve(QUEUE_POSITIONS_LOCAL)
    kube_sim.forbid(QUEUE_POSITIONS)  # the namespaced install grants no cluster-wide visibility
    collector = await started_collector(kube_sim_kubeconfig, "--queue-position-interval", "0.1", "--namespaces", "team")
    try:
        await eventually(lambda: collector.positions.health.synced)
        assert positions(await scrape(collector.port)) == {"urgent": ("gpu-cq", 0), "older": ("gpu-cq", 1),
                                                            "newer": ("gpu-cq", 2)}
        asked = {p for m, p, _ in kube_sim.request_log if p.endswith("/pendingworkloads")}
        assert asked == {"/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/team/localqueues/q/pendingworkloads",
                         "/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/team/localqueues/other/pendingworkloads"}
        p = collector.store.queue_positions[("team", "newer")]
        assert (p.local_queue, p.local_position, p.listed, p.complete) == ("q", 1, 3, False)
    finally:
        await collector.stop()

"""The collector under real RBAC (kube-apiserver's RBAC authorizer): a ServiceAccount allowed
some resources gets those served and the others down as forbidden, never a crash and never a
readiness held back; granted later, a forbidden source comes up at the next discovery."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import aiohttp

from exporter.kube.resources import COLLECTOR_RESOURCES
from collectors import started_collector
from kueue_objects import admitted_conditions, sample, series, workload
from realapi import RealCluster, Writer
from waiting import eventually

READ = ["get", "list", "watch"]
ALLOWED = {"workloads", "localqueues", "topologies", "nodes"}


async def scrape(port: int, path: str = "/metrics") -> tuple[int, str]:
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}{path}") as resp:
        return resp.status, await resp.text()


async def test_forbidden_sources_are_down_the_rest_served(real_api: RealCluster, tmp_path: Path) -> None:
    ns = real_api.namespace(f"rbac-{uuid.uuid4().hex[:6]}")
    w = Writer(real_api)
    w.create(workload("visible", ns, hosts=[], conditions=admitted_conditions()))
    real_api.service_account(ns, "partial", rules=[
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads", "localqueues", "topologies"], "verbs": READ},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": READ},
    ])
    collector = await started_collector(real_api.kubeconfig(tmp_path / "kc", real_api.token(ns, "partial")))
    try:
        # Ready once every source has synced or is known forbidden: forbidden ones never hold it back.
        await eventually(lambda: collector.sources.ready()[0], timeout=15)
        assert collector.store.workload(ns, "visible") is not None
        status, text = await scrape(collector.port)
        s = series(text)
        up = {r.source: s[sample("gangscope_source_up", source=r.source)] for r in COLLECTOR_RESOURCES}
        assert up == {r.source: 1.0 if r.source in ALLOWED else 0.0 for r in COLLECTOR_RESOURCES}
        states = {n: st.state for n, st in collector.sources.sources.items()}
        assert {n for n, st in states.items() if st == "forbidden"} == set(states) - ALLOWED, states
        # Every CRD the collector reads is installed: each source is synced or forbidden, none
        # not served (Kueue's visibility API, the one source the test server lacks, is polled
        # apart from these and reports down through gangscope_source_up above).
        assert {states[n] for n in ALLOWED} == {"synced"}, states
        assert s[sample("gangscope_source_errors_total", source="resourceflavors")] >= 1
        assert [dict(k[1])["workload"] for k in s if k[0] == "gangscope_workload_info" and ("namespace", ns) in k[1]] == ["visible"]
        ready, body = await scrape(collector.port, "/readyz")
        assert ready == 200 and "resourceflavors (forbidden)" in body
        # Forbidden sources are asked again every discovery interval (0.2 s here); neither their
        # state nor readiness may flap meanwhile.
        for _ in range(100):
            assert collector.sources.ready()[0]
            assert {n for n, st in collector.sources.sources.items() if st.state == "forbidden"} == set(states) - ALLOWED
            await asyncio.sleep(0.02)

        # RBAC granted later: the source comes up at the next discovery, nothing restarted.
        real_api.service_account(ns, "partial", cluster_roles=["gangscope-collector"])
        await eventually(lambda: collector.sources.sources["resourceflavors"].state == "synced", timeout=10)
        await eventually(lambda: collector.sources.sources["podgroups_volcano"].state == "synced", timeout=10)
    finally:
        await collector.stop()
        w.cleanup()

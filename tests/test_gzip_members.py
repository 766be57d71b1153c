"""The gzip body is built from separately compressed segments, and every reader reads it whole.

exporter/server.py compresses each block of owners on its own and keeps it until the block
changes; the segments make one gzip member (one header, one trailer with the combined CRC-32),
so not only Go's compress/gzip (which would also read several members) but readers that stop
after the first member (aiohttp's client does) get the whole page. Checked on the real readers:
aiohttp's decoder, Python's zlib, and Debian's Prometheus (2.42) scraping a collector whose
page changes between scrapes, which must ingest every series of it.
"""

from __future__ import annotations

import gzip
import shutil
import socket
import subprocess
import sys
import zlib
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families as parse_text

from collectors import started_collector
from exporter.kube.resources import COLLECTOR_RESOURCES, WORKLOADS
from exporter.sim.apiserver import SimApiServer
from waiting import eventually

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from cluster import Churn, build_cluster  # noqa: E402

PROMETHEUS = shutil.which("prometheus")


def members(body: bytes) -> int:
    """How many gzip members ``body`` holds (each one decompressed on its own)."""
    count = 0
    while body:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        d.decompress(body)
        assert d.eof, "a truncated member"
        body = d.unused_data
        count += 1
    return count


async def scrape(port: int, decode: bool = False) -> bytes:
    async with aiohttp.ClientSession(auto_decompress=decode) as s:
        async with s.get(f"http://127.0.0.1:{port}/metrics", headers={"Accept-Encoding": "gzip"}) as r:
            assert r.headers["Content-Encoding"] == "gzip"
            return await r.read()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(PROMETHEUS is None, reason="needs Debian's prometheus (scripts/setup-env installs it)")
async def test_readers_and_prometheus_take_a_page_built_from_segments(kube_sim: SimApiServer, kube_sim_kubeconfig: str,
                                                      tmp_path: Path) -> None:
    for r in COLLECTOR_RESOURCES:
        kube_sim.serve(r)
    cluster = build_cluster(300, nodes=1024, seed=7, namespaces=30)
    kube_sim.bulk_load(cluster.objects())
    collector = await started_collector(kube_sim_kubeconfig)
    port = free_port()
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 1s}\n"
        f"scrape_configs: [{{job_name: gangscope-collector, static_configs: [{{targets: ['127.0.0.1:{collector.port}']}}]}}]\n")
    prometheus = subprocess.Popen([PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
                                   f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                                  stdout=subprocess.DEVNULL, stderr=(tmp_path / "prometheus.log").open("wb"))
    try:
        churn = Churn(cluster, seed=3)
        verbs = {"create": kube_sim.create, "update": kube_sim.update, "delete": kube_sim.delete}
        for _ in range(150):  # the page changes: some members are recompressed, the others kept
            for change in churn.next():
                verbs[change.verb](change.obj)
        # the collector has applied every change (polled: a loaded machine only takes longer)
        wanted = {(w["metadata"]["namespace"], w["metadata"]["name"]) for w in kube_sim.objects(WORKLOADS)}

        async def applied() -> bool:
            return set(collector.store.workloads) == wanted

        await eventually(applied, timeout=60, interval=0.2)
        body = await scrape(collector.port)
        assert members(body) == 1, "one gzip member, whatever reads it"
        blocks = [b for b in collector.exposition.render_blocks(False) if not isinstance(b, bytes)]
        assert len(blocks) > 20, "built from many separately compressed blocks"
        page = gzip.decompress(body).decode()
        assert (await scrape(collector.port, decode=True)).decode().count("\n") >= page.count("\n") - 200
        series = {(s.name, tuple(sorted(s.labels.items()))) for f in parse_text(page) for s in f.samples
                  if s.name.startswith("gangscope_workload_")}
        workloads = sum(1 for name, _ in series if name == "gangscope_workload_info")
        assert workloads == len(collector.store.workloads) > 250

        async def ingested() -> bool:
            async with aiohttp.ClientSession() as s:
                async with s.get(f"http://127.0.0.1:{port}/api/v1/query", params={
                        "query": 'count({__name__=~"gangscope_workload_.+", job="gangscope-collector"})'}) as r:
                    result = (await r.json())["data"]["result"] if r.status == 200 else []
            return bool(result) and int(result[0]["value"][1]) == len(series)

        await eventually(ingested, timeout=90, interval=0.5)  # a loaded 2-core machine scrapes late
        async with aiohttp.ClientSession() as s:
            async with s.get(f"http://127.0.0.1:{port}/api/v1/query", params={"query": "up"}) as r:
                assert (await r.json())["data"]["result"][0]["value"][1] == "1"
    finally:
        prometheus.terminate()
        prometheus.wait(timeout=10)
        await collector.stop()

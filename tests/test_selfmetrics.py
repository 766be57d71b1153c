"""Both processes describe themselves: ``gangscope_build_info``, prometheus_client's process and
platform families in the same page (both formats, plain and gzip), and the ``/`` landing page.

The collector runs against the simulated API server and the agent with the simulated NVML, each
as the real classes ``gangscope collector`` and ``gangscope agent`` start; the values are checked
against what psutil reads for this process (both servers run in it).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import html.parser
import platform
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from exporter import __version__
from exporter.cluster.main import Collector
from exporter.config import topology_from_args
from exporter.exposition import Exposition, Family
from exporter.kube.resources import LOCAL_QUEUES, NODES, TOPOLOGIES, WORKLOADS
from exporter.node import main as agent_main
from exporter.node.agent import Agent
from exporter.selfmetrics import SelfMetrics
from exporter.server import GZIP_PAGES, ServerConfig, bound_port, build_app, start_server
from exporter.sim.apiserver import SimApiServer
from exporter.sim.nvml import SimNvml
from collectors import started_collector
from kueue_objects import admitted_conditions, workload

PROCESS = {"process_virtual_memory_bytes", "process_resident_memory_bytes", "process_start_time_seconds",
           "process_cpu_seconds_total", "process_open_fds", "process_max_fds"}


@pytest.fixture
async def collector(kube_sim: SimApiServer, kube_sim_kubeconfig: str) -> AsyncIterator[Collector]:
    for r in (WORKLOADS, LOCAL_QUEUES, TOPOLOGIES, NODES):
        kube_sim.serve(r)
    kube_sim.create(workload("llama", ns="ml", conditions=admitted_conditions()))
    c = await started_collector(kube_sim_kubeconfig)
    yield c
    await c.stop()


@pytest.fixture
async def agent(tmp_path: Path) -> AsyncIterator[Agent]:
    p = argparse.ArgumentParser()
    agent_main.add_arguments(p)
    args = p.parse_args(["--listen", "127.0.0.1:0", "--node-name", "gpu-a1", "--sample-interval", "0.1",
                         "--pod-resources-socket", str(tmp_path / "missing.sock"), "--kubeconfig", str(tmp_path / "none"),
                         "--sysfs", str(Path(__file__).parent / "fixtures" / "sysfs")])
    a = Agent(args, topology_from_args(args)[0], nvml=lambda: SimNvml())
    await a.start()
    yield a
    await a.stop()


async def fetch(port: int, path: str = "/metrics", openmetrics: bool = False, gzipped: bool = False) -> tuple[int, str]:
    headers = {"Accept-Encoding": "gzip" if gzipped else "identity"}
    if openmetrics:
        headers["Accept"] = "application/openmetrics-text; version=1.0.0"
    async with aiohttp.ClientSession(auto_decompress=False) as s, s.get(f"http://127.0.0.1:{port}{path}", headers=headers) as r:
        body = await r.read()
        if gzipped:
            assert r.headers["Content-Encoding"] == "gzip"
            body = gzip.decompress(body)
        return r.status, body.decode()


def samples(text: str, openmetrics: bool) -> dict[str, list[Any]]:
    parse = parse_openmetrics if openmetrics else parse_text
    out: dict[str, list[Any]] = {}
    for family in parse(text):
        for s in family.samples:
            out.setdefault(s.name, []).append(s)
    return out


async def test_collector_exports_build_and_process_metrics(collector: Collector) -> None:
    await check_build_and_process_metrics(collector.port)


async def test_agent_exports_build_and_process_metrics(agent: Agent) -> None:
    await check_build_and_process_metrics(agent.port)


async def check_build_and_process_metrics(port: int) -> None:
    me = psutil.Process()
    for openmetrics in (False, True):
        for gzipped in (False, True):
            status, text = await fetch(port, openmetrics=openmetrics, gzipped=gzipped)
            assert status == 200
            assert text.endswith("# EOF\n") == openmetrics and text.count("# EOF") == int(openmetrics)
            got = samples(text, openmetrics)
            assert PROCESS <= set(got), sorted(PROCESS - set(got))
            [build] = got["gangscope_build_info"]
            assert build.labels == {"version": __version__, "python_version": platform.python_version()} and build.value == 1
            [info] = got["python_info"]
            assert info.labels["version"] == platform.python_version()
            rss = got["process_resident_memory_bytes"][0].value
            assert 0.5 * me.memory_info().rss < rss < 2 * me.memory_info().rss
            assert got["process_start_time_seconds"][0].value == pytest.approx(me.create_time(), abs=1.0)
            assert 0 < got["process_cpu_seconds_total"][0].value <= sum(me.cpu_times()[:2]) + 0.1
            assert got["process_open_fds"][0].value > 3
            assert "gangscope_source_up" in got  # the pre-rendered page is all there too
    lint = subprocess.run(["promtool", "check", "metrics"], input=(await fetch(port))[1].encode(), capture_output=True)
    assert lint.returncode == 0, lint.stderr


async def test_gzip_page_stays_cached_while_process_lines_change() -> None:
    """The page is compressed once per change; each scrape adds a gzip member of fresh process
    lines, so two scrapes of an unchanged page differ only in those lines."""
    expo = Exposition()
    family = Family("gangscope_test_gauge", "gauge", "A gauge.", ("a",))
    expo.register(family)
    for i in range(3000):
        expo.set(("o", i), {family: [family.sample([("a", str(i))], i)]})
    ticks = iter(range(1, 100))
    own = SelfMetrics(expo)
    live = lambda om: own.render(om) + f"gangscope_test_tick {next(ticks)}\n".encode()  # noqa: E731
    app = build_app(ServerConfig(expo, lambda: (True, "ok"), live=live))
    runner = await start_server(app, "127.0.0.1:0")
    try:
        port = bound_port(runner)
        first = (await fetch(port, gzipped=True))[1]
        compressed = app[GZIP_PAGES].compressions
        second = (await fetch(port, gzipped=True))[1]
        assert app[GZIP_PAGES].compressions == compressed > 0, "nothing compressed again but the process lines"
        assert first.endswith("gangscope_test_tick 1\n") and second.endswith("gangscope_test_tick 2\n")
        page = expo.render(False).decode()
        assert first.startswith(page) and second.startswith(page)
        om = (await fetch(port, openmetrics=True, gzipped=True))[1]
        assert om.endswith("gangscope_test_tick 3\n# EOF\n")
        assert "gangscope_build_info" in samples(om.replace("gangscope_test_tick 3\n", ""), True)
    finally:
        await runner.cleanup()


class Page(html.parser.HTMLParser):
    """Links, headings and table rows of the landing page (a real HTML parser, so it must be valid enough)."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.rows: list[list[str]] = []
        self.title = ""
        self._tag = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._tag = tag
        if tag == "a":
            self.links.append(dict(attrs)["href"] or "")
        if tag == "tr":
            self.rows.append([])

    def handle_data(self, data: str) -> None:
        if self._tag == "title":
            self.title += data
        if self._tag in ("td", "th") and self.rows:
            self.rows[-1].append(data)

    def handle_endtag(self, tag: str) -> None:
        self._tag = ""


async def landing(port: int) -> Page:
    status, text = await fetch(port, "/")
    assert status == 200
    page = Page()
    page.feed(text)
    return page


async def test_collector_landing_page(collector: Collector, kube_sim: SimApiServer) -> None:
    kube_sim.create(workload("gpt", ns="ml"))  # not admitted: a job worth a look
    explain = "/debug/explain?namespace=ml&name=job-gpt&pretty="  # its owner Job, as a user names it
    deadline = time.monotonic() + 10
    page = await landing(collector.port)
    while explain not in page.links and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        page = await landing(collector.port)
    assert page.title == f"gangscope collector {__version__}"
    # the jobs worth a look, each a working link (no placeholder), then the endpoints
    assert page.links == [explain, "/metrics", "/healthz", "/readyz", "https://github.com/gangscope/gangscope"]
    rows = {r[0]: r for r in page.rows[1:]}
    assert page.rows[0][:3] == ["source", "state", "last sync"]
    assert rows["workloads"][1:2] == ["up"] and rows["workloads"][3] == "2"
    assert rows["podgroups_volcano"][1:3] == ["down", "never"]  # not served by this API server
    assert set(rows) == set(collector.sources.sources)
    for link in page.links[:4]:
        assert (await fetch(collector.port, link))[0] == 200
    status, text = await fetch(collector.port, explain)
    assert text.startswith('{\n  "schema": "gangscope.explain/v1"')
    _, html_text = await fetch(collector.port, "/")
    assert "<code>/debug/explain?namespace=NAMESPACE&amp;name=NAME</code>" in html_text  # the route's shape, not a link


async def test_agent_landing_page(agent: Agent) -> None:
    # NVML is up once initialised; its GPUs are counted after the first sample, which a loaded
    # machine may take a moment to finish: wait for the page to show them (or fail below).
    deadline = time.monotonic() + 10
    page = await landing(agent.port)
    while time.monotonic() < deadline and {r[0]: r for r in page.rows[1:]}.get("nvml", [None] * 4)[3] != "8":
        await asyncio.sleep(0.05)
        page = await landing(agent.port)
    assert page.title == f"gangscope agent on gpu-a1 {__version__}"
    assert "/debug/explain" not in " ".join(page.links)
    rows = {r[0]: r for r in page.rows[1:]}
    assert rows["nvml"][1] == "up" and rows["nvml"][3] == "8"
    assert rows["podresources"][1] == "down"
    assert set(rows) == {h.name for h in agent.healths()} and {"nvml", "podresources", "fabric"} <= set(rows)

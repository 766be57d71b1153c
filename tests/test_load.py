"""100 concurrent scrapes of the collector and of the agent while watch events keep arriving.

The simulated API server runs on its own thread and event loop, and a mutator thread changes
objects in it at a steady rate (Workload create/modify/delete; Pod annotations for the agent)
for the whole run, so watch events reach the process under test while it answers bursts of
scrapes. Every response must be whole (OpenMetrics ends with ``# EOF``) and parse with
prometheus_client's parsers, the pages must show the events being applied, and afterwards the
served state must equal the server's objects: concurrency neither tears a page nor loses an
event. The timed version, with each part in its own process, is ``bench/load.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import hashlib
import os
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from exporter.cluster.main import Collector
from exporter.config import topology_from_args
from exporter.kube.resources import AGENT_NODE, AGENT_PODS, LOCAL_QUEUES, NODES, TOPOLOGIES, WORKLOADS
from exporter.node import main as agent_main
from exporter.node.agent import Agent
from exporter.sim.apiserver import SimApiServer, make_object
from exporter.sim.kubelet import SimContainer, SimKubelet, SimPod
from exporter.sim.nvml import SimNvml
from kueue_objects import admitted_conditions, workload
from waiting import eventually
from collectors import started_collector

SCRAPES = 100
RATE = 200  # watch events (object changes) per second during the scrapes
NODE = "gpu-load-1"


_parsed: dict[tuple[bytes, bool], list] = {}


def check_page(body: bytes, openmetrics: bool, gzipped: bool) -> list:
    """Decode and fully parse one page; returns its families (raises on a torn or bad page).
    Pages byte-identical up to the process families every scrape renders afresh (scrapes between
    two events) are parsed whole once; after that only those last families are."""
    if gzipped:
        body = gzip.decompress(body)
    page, marker, process = body.partition(b"# HELP process_")
    assert marker, "no process families at the end of the page"
    key = (hashlib.sha256(page).digest(), openmetrics)
    if key not in _parsed:
        _parsed[key] = _parse(body, openmetrics)
    else:
        _parse(marker + process, openmetrics)
    return _parsed[key]


def _parse(body: bytes, openmetrics: bool) -> list:
    text = body.decode()
    if openmetrics:
        assert text.endswith("# EOF\n"), f"incomplete OpenMetrics page ({len(text)} bytes): {text[-80:]!r}"
        return list(parse_openmetrics(text))
    assert text.endswith("\n")
    return list(parse_text(text))


async def burst(port: int, n: int = SCRAPES) -> list[list]:
    """``n`` scrapes at once, cycling through text, OpenMetrics, and both gzipped; each page is
    parsed once all have arrived, so parsing does not pace the requests."""
    variants = [(False, False), (True, False), (False, True), (True, True)]

    async def one(session: aiohttp.ClientSession, i: int) -> tuple[bytes, bool, bool]:
        om, gz = variants[i % len(variants)]
        headers = {"Accept": "application/openmetrics-text; version=1.0.0" if om else "text/plain",
                   "Accept-Encoding": "gzip" if gz else "identity"}
        async with session.get(f"http://127.0.0.1:{port}/metrics", headers=headers) as r:
            assert r.status == 200
            assert (r.headers.get("Content-Encoding") == "gzip") == gz
            return await r.read(), om, gz

    connector = aiohttp.TCPConnector(limit=n)
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as s:
        raw = await asyncio.gather(*(one(s, i) for i in range(n)))
    return [check_page(*page) for page in raw]


async def bursts(port: int, seconds: float = 1.0, rounds: int = 3) -> list[list]:
    """Bursts of :data:`SCRAPES` concurrent scrapes, back to back, for at least ``seconds``."""
    pages: list[list] = []
    deadline = time.monotonic() + seconds
    while rounds > 0 or time.monotonic() < deadline:
        pages += await burst(port)
        rounds -= 1
    return pages


class Mutator:
    """Calls ``mutate(i)`` ``rate`` times a second from its own thread until stopped, so events
    reach the process under test while it is busy answering scrapes, not only between them."""

    def __init__(self, mutate: Callable[[int], None], rate: float) -> None:
        self.mutate, self.rate, self.steps = mutate, rate, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mutator", daemon=True)

    def _run(self) -> None:
        start = time.monotonic()
        while not self._stop.is_set():
            self.mutate(self.steps)
            self.steps += 1
            self._stop.wait(max(0.0, start + self.steps / self.rate - time.monotonic()))

    def __enter__(self) -> Mutator:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[tuple[SimApiServer, str]]:
    """The simulated API server on its own thread and loop (mutations go through ``sim.call``)."""
    server = SimApiServer(bookmark_interval=0.2).start_in_thread()
    yield server, server.write_kubeconfig(str(tmp_path / "kubeconfig"))
    server.stop_thread()


@pytest.fixture
async def collector(sim: tuple[SimApiServer, str]) -> AsyncIterator[Collector]:
    server, kubeconfig = sim

    def seed() -> None:
        for r in (WORKLOADS, LOCAL_QUEUES, TOPOLOGIES, NODES):
            server.serve(r)
        for i in range(200):
            server.create(workload(f"w{i}", ns=f"team-{i % 5}", conditions=admitted_conditions(), hosts=[f"h{i % 40}"]))

    server.call(seed)
    c = await started_collector(kubeconfig)
    yield c
    await c.stop()


def served_workloads(families: list) -> set[tuple[str, str]]:
    return {(s.labels["namespace"], s.labels["workload"]) for f in families for s in f.samples
            if s.name == "gangscope_workload_info"}


async def test_collector_100_concurrent_scrapes_during_watch_events(collector: Collector,
                                                                    sim: tuple[SimApiServer, str]) -> None:
    server = sim[0]

    def mutate(i: int) -> None:  # create one, modify one, delete one: a steady churn of all three events
        server.create(workload(f"churn-{i}", ns="churn", conditions=admitted_conditions(), hosts=[f"h{i % 40}"]))
        server.update(workload(f"w{i % 200}", ns=f"team-{i % 5}", conditions=admitted_conditions(ready=i % 2 == 0),
                               hosts=[f"h{(i + 1) % 40}"]))
        if i >= 5:
            server.delete(workload(f"churn-{i - 5}", ns="churn"))

    with Mutator(lambda i: server.call(mutate, i), RATE) as m:
        pages = await bursts(collector.port)
    assert m.steps >= 10
    assert len(pages) >= 3 * SCRAPES
    # Events arrived during the bursts: pages saw different sets of churn Workloads.
    assert len({frozenset(w for w in served_workloads(p) if w[0] == "churn") for p in pages}) > 1
    # And afterwards the served Workloads are exactly the server's.
    truth = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in server.call(server.objects, WORKLOADS)}

    async def converged() -> bool:
        return served_workloads((await burst(collector.port, 1))[0]) == truth

    await eventually(converged)


@pytest.fixture
def sock() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="gsl-", dir="/tmp")  # unix socket paths must stay short
    yield os.path.join(d, "kubelet.sock")
    for f in os.listdir(d):
        os.unlink(os.path.join(d, f))
    os.rmdir(d)


async def test_agent_100_concurrent_scrapes_during_watch_events(sim: tuple[SimApiServer, str], sock: str) -> None:
    server, kubeconfig = sim
    nvml = SimNvml(gpus=8, links=18)

    def pod(i: int, generation: int) -> dict:
        obj = make_object(AGENT_PODS, f"train-{i}", "team-a", labels={"kueue.x-k8s.io/podset": "workers"},
                          spec={"nodeName": NODE})
        obj["metadata"]["annotations"] = {"kueue.x-k8s.io/workload": f"job-{generation}"}
        return obj

    def seed() -> None:
        server.serve(AGENT_NODE)
        server.serve(AGENT_PODS)
        server.create(make_object(AGENT_NODE, NODE, None, labels={"kubernetes.io/hostname": NODE}))
        for i in range(8):
            server.create(pod(i, 0))

    server.call(seed)
    kubelet = SimKubelet(sock, [SimPod("team-a", f"train-{i}", [SimContainer("c", [("nvidia.com/gpu", [g.uuid])])])
                                for i, g in enumerate(nvml.gpus)])
    await kubelet.start()
    p = argparse.ArgumentParser()
    agent_main.add_arguments(p)
    args = p.parse_args(["--listen", "127.0.0.1:0", "--node-name", NODE, "--kubeconfig", kubeconfig,
                         "--sysfs", str(Path(__file__).parent / "fixtures" / "sysfs"), "--sample-interval", "0.05",
                         "--pod-resources-interval", "0.1", "--pod-resources-socket", sock])
    agent = Agent(args, topology_from_args(args)[0], nvml=lambda: nvml)
    await agent.start()

    def pod_workloads(families: list) -> set[str]:
        return {s.labels["workload"] for f in families for s in f.samples if s.name == "gangscope_gpu_pod_info"}

    try:
        async def joined() -> bool:
            return pod_workloads((await burst(agent.port, 1))[0]) == {"job-0"}

        await eventually(joined)
        with Mutator(lambda i: server.call(server.update, pod(i % 8, i + 1)), RATE) as m:
            pages = await bursts(agent.port)
        assert m.steps >= 10 and len(pages) >= 3 * SCRAPES
        links = {(s.labels["gpu"], s.labels["link"]) for f in pages[0] for s in f.samples
                 if s.name.startswith("gangscope_nvlink_transmit_bytes")}
        assert len(links) == 8 * 18
        assert len({frozenset(pod_workloads(page)) for page in pages}) > 1  # pod events applied between scrapes
        want = {f"job-{n}" for n in range(m.steps - 7, m.steps + 1)}  # each pod's last generation

        async def followed() -> bool:
            return pod_workloads((await burst(agent.port, 1))[0]) == want

        await eventually(followed)
    finally:
        await agent.stop()
        await kubelet.stop()

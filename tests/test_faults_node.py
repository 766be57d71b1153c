"""Kubelet and NVML faults against the whole agent (``exporter.node.agent.Agent``), over real
sockets: the gRPC kubelet on a unix socket and a real HTTP /metrics, NVML simulated.

What the unit tests already prove, and is not repeated here:
- tests/test_podresources.py: the poller alone with the socket missing at start, a kubelet
  restart, a slow List (deadline) and a failing List (UNAVAILABLE), allocations kept meanwhile;
- tests/test_nvml.py: the sampler alone with NVML absent (``nodriver``, and the real pynvml
  without a driver), a GPU lost (others keep reporting, no stale counters), calls that hang
  (the round is bounded by --nvml-timeout and a stuck GPU is not sampled again), fields
  unsupported on some GPUs only (GPUs 0-3 without PCIe byte counters, GPU 1 without raw NVLink
  fields, GPU 2 without error counters), 32-bit PCIe wraps and a GPU reset in one sampler;
- tests/test_agent.py: the agent without Kubernetes, NVML or kubelet; a kubelet restart
  releasing a pod; SIGTERM with an NVML call stuck in the driver.

Here: the same faults seen from the agent's /metrics, where they meet (the pod mapping needs
both NVML and the kubelet), NVML that comes up after the agent started, and every ``*_total``
series over successive scrapes through wraps, a lost GPU and device resets.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from exporter.config import topology_from_args
from exporter.node import main as agent_main
from exporter.node import nvml as nvml_module
from exporter.node.agent import Agent
from exporter.sim.kubelet import SimContainer, SimKubelet, SimPod
from exporter.sim.nvml import SimNvml

NODE = "gpu-b7"
FIXTURE = str(Path(__file__).parent / "fixtures" / "sysfs")
UUIDS = [g.uuid for g in SimNvml().gpus]

Series = dict[tuple[str, frozenset], float]


@pytest.fixture
def sock() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="gs-", dir="/tmp")  # short: unix socket paths are limited to 108 bytes
    yield os.path.join(d, "kubelet.sock")
    for f in os.listdir(d):
        os.unlink(os.path.join(d, f))
    os.rmdir(d)


def make_agent(tmp_path: Path, sock: str, nvml: Callable[[], object] | None = None, *flags: str) -> Agent:
    p = argparse.ArgumentParser()
    agent_main.add_arguments(p)
    args = p.parse_args(["--listen", "127.0.0.1:0", "--node-name", NODE, "--sysfs", FIXTURE, "--nvml", "sim",
                         "--kubeconfig", str(tmp_path / "no-kubeconfig"), "--pod-resources-socket", sock,
                         "--sample-interval", "0.05", "--pod-resources-interval", "0.05", *flags])
    levels, _ = topology_from_args(args)
    agent = Agent(args, levels, nvml=nvml)
    agent.podres.timeout = 0.3  # a List slower than this is a failed poll (default 5 s)
    return agent


async def scrape(agent: Agent, openmetrics: bool = False) -> str:
    headers = {"Accept": "application/openmetrics-text; version=1.0.0"} if openmetrics else {}
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{agent.port}/metrics", headers=headers) as r:
        assert r.status == 200
        return await r.text()


async def state(agent: Agent, openmetrics: bool = True) -> Series:
    """One scrape, answered promptly (well under the 5 s a slow kubelet takes below) and parsed
    (with both parsers unless told)."""
    t0 = time.monotonic()
    text = await scrape(agent)
    if openmetrics:
        assert list(parse_openmetrics(await scrape(agent, openmetrics=True)))
    assert time.monotonic() - t0 < 2.5
    return {(s.name, frozenset(s.labels.items())): s.value for fam in parse_text(text) for s in fam.samples}


def pods_on_gpus(s: Series) -> set[tuple[str, str]]:
    return {(dict(k)["gpu"], dict(k)["pod"]) for n, k in s if n == "gangscope_gpu_pod_info"}


def up(s: Series, source: str) -> float:
    return next(v for (n, k), v in s.items() if n == "gangscope_source_up" and dict(k)["source"] == source)


def gpu_series(s: Series) -> int:
    return sum(1 for n, _ in s if n.startswith("gangscope_nvlink_transmit_bytes_total"))


async def until(agent: Agent, check: Callable[[Series], bool], timeout: float = 20.0) -> Series:
    deadline = time.monotonic() + timeout
    while True:
        s = await state(agent)
        if check(s):
            return s
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


def pod(name: str, gpu: int) -> SimPod:
    return SimPod("team", name, [SimContainer("main", [("nvidia.com/gpu", [UUIDS[gpu]])])])


async def test_kubelet_missing_restarted_failing_and_slow(tmp_path: Path, sock: str) -> None:
    """GPU series are served throughout; the pod mapping appears when the kubelet does, follows
    its restart, is kept (not dropped, not invented) while List fails or is slow, and recovers."""
    agent = make_agent(tmp_path, sock)
    kubelet = SimKubelet(sock, [pod("a", 0)])
    await agent.start()
    try:
        s = await until(agent, lambda s: gpu_series(s) == 8 * 18)
        assert up(s, "podresources") == 0 and not pods_on_gpus(s)  # socket missing: down, nothing mapped
        await kubelet.start()
        await until(agent, lambda s: pods_on_gpus(s) == {("0", "a")} and up(s, "podresources") == 1)
        # kubelet restart: the socket file is replaced, the pods changed meanwhile
        kubelet.set_pods([pod("b", 1), pod("c", 2)])
        await kubelet.restart()
        await until(agent, lambda s: pods_on_gpus(s) == {("1", "b"), ("2", "c")})
        # List fails: source down, last mapping kept, GPU series still served
        errors_before = kubelet.calls
        kubelet.fail = True
        s = await until(agent, lambda s: up(s, "podresources") == 0)
        assert pods_on_gpus(s) == {("1", "b"), ("2", "c")} and gpu_series(s) == 8 * 18 and up(s, "nvml") == 1
        kubelet.set_pods([pod("d", 3)])  # not visible while List fails
        await asyncio.sleep(0.2)
        assert kubelet.calls > errors_before and pods_on_gpus(await state(agent)) == {("1", "b"), ("2", "c")}
        # List slower than the timeout: the same, and scrapes do not wait for it
        kubelet.fail, kubelet.delay = False, 5.0
        s = await until(agent, lambda s: "DEADLINE_EXCEEDED" in agent.podres.health.detail)
        assert up(s, "podresources") == 0 and pods_on_gpus(s) == {("1", "b"), ("2", "c")}
        kubelet.delay = 0.0
        s = await until(agent, lambda s: pods_on_gpus(s) == {("3", "d")} and up(s, "podresources") == 1)
        assert gpu_series(s) == 8 * 18
    finally:
        await agent.stop()
        await kubelet.stop()


async def test_nvml_init_failure_then_the_driver_appears(tmp_path: Path, sock: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML absent at start (driver not loaded yet): the agent serves the kubelet and fabric
    sources; once nvmlInit succeeds the GPU series appear and the pods already known are mapped."""
    monkeypatch.setattr(nvml_module, "INIT_RETRY_SECONDS", 0.1)
    libs = iter([SimNvml(["nodriver"]), SimNvml(["nodriver"])])
    agent = make_agent(tmp_path, sock, lambda: next(libs, None) or SimNvml())
    kubelet = SimKubelet(sock, [pod("early", 4)])
    await kubelet.start()
    await agent.start()
    try:
        s = await until(agent, lambda s: up(s, "podresources") == 1 and up(s, "nvml") == 0)
        assert not pods_on_gpus(s) and gpu_series(s) == 0
        # The mapping is rendered when NVML's inventory arrives, the link series by the first
        # sample right after it: wait for both (a scrape may fall between them).
        s = await until(agent, lambda s: pods_on_gpus(s) == {("4", "early")} and gpu_series(s) == 8 * 18)
        assert up(s, "nvml") == 1
        assert s[("gangscope_source_errors_total", frozenset({("source", "nvml"), ("node", NODE), ("host", NODE)}))] >= 2
        # the kubelet's devices were unknown to NVML only while NVML was down: not counted as bad input
        assert s[("gangscope_parse_errors_total", frozenset({("source", "podresources"), ("node", NODE), ("host", NODE)}))] == 0
    finally:
        await agent.stop()
        await kubelet.stop()


async def test_gpu_lost_mid_run_keeps_the_others_and_the_mapping(tmp_path: Path, sock: str) -> None:
    sim = SimNvml()
    agent = make_agent(tmp_path, sock, lambda: sim)
    kubelet = SimKubelet(sock, [pod("p2", 2), pod("p3", 3)])
    await kubelet.start()
    await agent.start()
    try:
        await until(agent, lambda s: pods_on_gpus(s) == {("2", "p2"), ("3", "p3")} and gpu_series(s) == 8 * 18)
        sim.lose(2)
        s = await until(agent, lambda s: s.get(("gangscope_gpu_up", frozenset(
            {("gpu", "2"), ("uuid", UUIDS[2]), ("node", NODE), ("host", NODE)}))) == 0)
        assert gpu_series(s) == 7 * 18  # no stale counters for the lost GPU
        assert not [k for n, k in s if n.startswith("gangscope_nvlink") and dict(k)["gpu"] == "2"]
        # the pod still holds the GPU (the kubelet says so): the mapping stays, with gpu_up 0 to join on
        assert pods_on_gpus(s) == {("2", "p2"), ("3", "p3")} and up(s, "nvml") == 1
    finally:
        await agent.stop()
        await kubelet.stop()


async def test_every_counter_is_monotonic_across_scrapes(tmp_path: Path, sock: str) -> None:
    """Successive scrapes through 32-bit PCIe wraps, a GPU lost and reset (its device counters
    restart at zero), and a GPU reset while up: no ``*_total`` series ever goes below a value it
    showed before (Prometheus would read that as a reset, i.e. a spike), none is negative."""
    base = time.monotonic()
    sim = SimNvml(["wrap", "degraded"], clock=lambda: base + 10 * (time.monotonic() - base))  # 10x time
    agent = make_agent(tmp_path, sock, lambda: sim)
    await agent.start()
    highest: dict[tuple[str, frozenset], float] = {}
    checked = 0
    try:
        await until(agent, lambda s: gpu_series(s) == 8 * 18)
        for i in range(24):  # ~1 s of device time per scrape: several wraps of every 32-bit counter
            if i == 6:
                sim.lose(2)
            if i == 12:
                sim.recover(2)  # back after a reset: counters from zero
            if i == 15:
                sim.recover(5)  # reset under a running sampler: its raw counters drop to zero
            s = await state(agent, openmetrics=i % 6 == 0)
            for key, value in s.items():
                if not key[0].endswith("_total"):
                    continue
                assert value >= 0, key
                assert value >= highest.get(key, 0), f"{key} went from {highest[key]} to {value}"
                highest[key] = value
                checked += 1
            await asyncio.sleep(0.08)
        s = await state(agent)
    finally:
        await agent.stop()
    gpu2 = [v for (n, k), v in s.items() if n == "gangscope_pcie_transmit_bytes_total" and dict(k)["gpu"] == "2"]
    assert gpu2, "the recovered GPU reports again"
    # the counters kept counting through the wraps: ~1 GB/s of device time for every GPU
    pcie = [v for (n, k), v in s.items() if n == "gangscope_pcie_transmit_bytes_total" and dict(k)["gpu"] == "0"]
    assert pcie[0] > 2**32 + 10**9, "GPU 0's 32-bit counter wrapped at least once and was accumulated"
    assert checked > 20 * 1000

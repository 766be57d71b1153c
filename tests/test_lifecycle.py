"""The node's life cycle: NVML let go during a driver upgrade or a MIG reconfiguration (as the GPU
operator labels the Node), taken again afterwards, and a restart on a driver NVML refuses.

The label values are the upstream components' own (cited beside each case); the agent runs whole,
over a simulated API server whose Node labels change, with the simulated NVML, whose
``initialized`` flag says whether ``nvmlShutdown`` was really called (it refuses every device
call until ``nvmlInit`` again).
"""

from __future__ import annotations

import argparse
import asyncio
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pynvml
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.config import topology_from_args
from exporter.kube.resources import AGENT_NODE, AGENT_PODS
from exporter.node import agent as agent_module
from exporter.node import main as agent_main
from exporter.node.agent import Agent
from exporter.node.lifecycle import (
    DRIVER_UPGRADE,
    EXIT_DRIVER_CHANGED,
    MIG_RECONFIGURATION,
    FatalWatch,
    NvmlLifecycle,
    release_reason,
)
from exporter.sim.apiserver import SimApiServer, make_object
from exporter.sim.nvml import SimNvml
from waiting import cancels_are_kept, gate

NODE = "gpu-a1"
FIXTURE = str(Path(__file__).parent / "fixtures" / "sysfs")
MIG_STATE, UPGRADE_STATE = "nvidia.com/mig.config.state", "nvidia.com/gpu-driver-upgrade-state"

# (labels, expected reason, where upstream sets these labels)
CASES = [
    ({}, "", "a node the operator has not touched"),
    ({"nvidia.com/gpu.deploy.dcgm-exporter": "true", "nvidia.com/gpu.deploy.device-plugin": "true"}, "",
     "gpu-operator controllers/state_manager.go 102-108 @a22dbf6: operands deployed"),
    ({"nvidia.com/gpu.deploy.driver": "paused-for-driver-upgrade"}, DRIVER_UPGRADE,
     "gpu-operator controllers/nodelabeling_controller_test.go 371 @a22dbf6"),
    ({"nvidia.com/gpu.deploy.device-plugin": "custom_paused-for-driver-upgrade"}, DRIVER_UPGRADE,
     "k8s-driver-manager cmd/driver-manager/main.go 737-738 @bd62ca7: a custom value keeps its prefix"),
    ({"nvidia.com/gpu.deploy.device-plugin": "false"}, "",
     "k8s-driver-manager main.go 732-733: a disabled operand stays false, not paused"),
    ({UPGRADE_STATE: "pod-restart-required"}, DRIVER_UPGRADE,
     "k8s-operator-libs pkg/upgrade/consts.go 73: the driver pod is restarted"),
    ({UPGRADE_STATE: "upgrade-required"}, "", "consts.go 52: queued, old driver still loaded"),
    ({UPGRADE_STATE: "cordon-required"}, "", "consts.go 54"),
    ({UPGRADE_STATE: "wait-for-jobs-required"}, "", "consts.go 56"),
    ({UPGRADE_STATE: "drain-required"}, "", "consts.go 61: jobs drain, the old driver runs them"),
    ({UPGRADE_STATE: "validation-required"}, "", "consts.go 76: the new driver is loaded"),
    ({UPGRADE_STATE: "upgrade-done"}, "", "consts.go 80"),
    ({UPGRADE_STATE: "upgrade-failed"}, "", "consts.go 82: whatever driver is there is watched"),
    ({MIG_STATE: "pending"}, MIG_RECONFIGURATION, "mig-parted pkg/mig/reconfigure/reconfigure.go 158 @bd7160f"),
    ({MIG_STATE: "rebooting"}, MIG_RECONFIGURATION, "reconfigure.go 188"),
    ({MIG_STATE: "success"}, "", "reconfigure.go 49"),
    ({MIG_STATE: "failed"}, "", "reconfigure.go 50"),
    ({"nvidia.com/gpu.deploy.dcgm": "paused-for-mig-change"}, MIG_RECONFIGURATION, "reconfigure.go 581-586"),
    ({MIG_STATE: "pending", "nvidia.com/gpu.deploy.driver": "paused-for-driver-upgrade"}, DRIVER_UPGRADE,
     "both at once: the driver upgrade is named"),
]


@pytest.mark.parametrize(("labels", "reason", "source"), CASES, ids=[c[2][:50] for c in CASES])
def test_release_reason_follows_the_operators_labels(labels: dict[str, str], reason: str, source: str) -> None:
    assert release_reason(labels) == reason


class SwappableDriver(SimNvml):
    """The simulated NVML whose ``nvmlInit`` answers ``refuse`` (an NVML return code) when set:
    the driver replaced under a running process."""

    refuse: int | None = None

    def nvmlInit(self) -> None:
        if self.refuse is not None:
            raise pynvml.NVMLError(self.refuse)
        super().nvmlInit()


def test_fatal_watch_reports_only_a_driver_that_changed() -> None:
    seen: list[int] = []
    sim = SwappableDriver()
    watched = FatalWatch(sim, lambda exc: seen.append(exc.value))
    for code in (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
                 pynvml.NVML_ERROR_UNKNOWN, pynvml.NVML_ERROR_DRIVER_NOT_LOADED):
        sim.refuse = code
        with pytest.raises(pynvml.NVMLError) as info:
            watched.nvmlInit()
        assert info.value.value == code
    assert seen == [pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, pynvml.NVML_ERROR_DRIVER_NOT_LOADED]
    sim.refuse = None
    watched.nvmlInit()
    assert sim.initialized and watched.nvmlDeviceGetCount() == len(sim.gpus)


def parse_args(*extra: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    agent_main.add_arguments(p)
    return p.parse_args(["--listen", "127.0.0.1:0", "--node-name", NODE, "--sysfs", FIXTURE,
                         "--topology-levels", "kubernetes.io/hostname", "--sample-interval", "0.1",
                         "--pod-resources-interval", "0.1", "--discovery-interval", "0.5", *extra])


def node(**labels: str) -> dict:
    return make_object(AGENT_NODE, NODE, None, labels={"kubernetes.io/hostname": NODE, **labels})


async def scrape(port: int) -> list[tuple[str, dict, float]]:
    async with aiohttp.ClientSession() as s:
        async with s.get(f"http://127.0.0.1:{port}/metrics") as r:
            assert r.status == 200
            text = await r.text()
    return [(x.name, x.labels, x.value) for fam in text_string_to_metric_families(text) for x in fam.samples]


def only(rows: list[tuple[str, dict, float]], name: str) -> list[tuple[dict, float]]:
    return [(labels, value) for n, labels, value in rows if n == name]


class Scraper:
    """Scrapes one agent until a check of the parsed series holds."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    async def when(self, check, timeout: float = 10.0) -> list[tuple[str, dict, float]]:
        async with asyncio.timeout(timeout):
            while not check(rows := await scrape(self.agent.port)):
                await asyncio.sleep(0.05)
        return rows


def released(rows) -> list[tuple[dict, float]]:
    return [({"reason": labels["reason"]}, value) for labels, value in only(rows, "gangscope_nvml_released")]


async def start(tmp_path: Path, sim: SimNvml, *labels: dict[str, str]) -> tuple[SimApiServer, Agent, Scraper]:
    api = await SimApiServer().start()
    api.serve(AGENT_NODE)
    api.serve(AGENT_PODS)
    api.create(node(**(labels[0] if labels else {})))
    args = parse_args("--kubeconfig", api.write_kubeconfig(str(tmp_path / "kc")),
                      "--pod-resources-socket", str(tmp_path / "none.sock"))
    levels, _ = topology_from_args(args)
    agent = Agent(args, levels, nvml=lambda: sim)
    await agent.start()
    return api, agent, Scraper(agent)


async def test_mig_reconfiguration_releases_nvml_and_enumerates_mig_devices_again(tmp_path: Path) -> None:
    sim = SimNvml(["mig"])
    api, agent, scraper = await start(tmp_path, sim)
    try:
        rows = await scraper.when(lambda r: len(only(r, "gangscope_gpu_up")) == 8 and only(r, "gangscope_gpu_mig_device_info"))
        assert released(rows) == [({"reason": ""}, 0)]
        assert sorted(labels["mig_uuid"] for labels, _ in only(rows, "gangscope_gpu_mig_device_info")) == sim.gpus[0].mig

        # mig-parted: state pending, then the GPU clients' deploy labels paused (reconfigure.go 158, 164)
        api.update(node(**{MIG_STATE: "pending", "nvidia.com/gpu.deploy.dcgm-exporter": "paused-for-mig-change"}))
        rows = await scraper.when(lambda r: released(r) == [({"reason": MIG_RECONFIGURATION}, 1)])
        assert not sim.initialized  # nvmlShutdown was called: the library refuses device calls now
        gpu_series = sorted({n for n, _, _ in rows if n.startswith(("gangscope_gpu", "gangscope_nvlink", "gangscope_pcie"))})
        assert gpu_series == []
        assert only(rows, "gangscope_fabric_port_up")  # the other sources keep serving
        ups = {labels["source"]: value for labels, value in only(rows, "gangscope_source_up")}
        assert ups["nvml"] == 0 and ups["fabric"] == 1 and ups["node"] == 1
        assert agent.lifecycle.releases == 1

        # the new layout: three MIG devices on GPU 0; then the clients back and state success (reconfigure.go 520-523)
        sim.gpus[0].mig = [f"MIG-{k}f00d000-0000-4000-8000-00000000000{k}" for k in range(3)]
        api.update(node(**{MIG_STATE: "success", "nvidia.com/gpu.deploy.dcgm-exporter": "true"}))
        rows = await scraper.when(lambda r: len(only(r, "gangscope_gpu_mig_device_info")) == 3
                                  and len(only(r, "gangscope_gpu_up")) == 8)
        assert sim.initialized
        assert released(rows) == [({"reason": ""}, 0)]
        assert sorted(labels["mig_uuid"] for labels, _ in only(rows, "gangscope_gpu_mig_device_info")) == sim.gpus[0].mig
        assert {value for _, value in only(rows, "gangscope_gpu_up")} == {1}
        assert agent.lifecycle.releases == 1
    finally:
        await agent.stop()
        await api.stop()


async def test_a_node_mid_upgrade_at_start_never_takes_nvml(tmp_path: Path) -> None:
    """The agent restarted while the driver pod is being replaced: it waits for the Node and does
    not call nvmlInit until the upgrade has moved on."""
    sim = SimNvml()
    api, agent, scraper = await start(tmp_path, sim, {UPGRADE_STATE: "pod-restart-required"})
    try:
        rows = await scraper.when(lambda r: released(r) == [({"reason": DRIVER_UPGRADE}, 1)])
        assert sim.calls == 0 and not sim.initialized
        assert only(rows, "gangscope_gpu_up") == []
        api.update(node(**{UPGRADE_STATE: "validation-required"}))
        rows = await scraper.when(lambda r: len(only(r, "gangscope_gpu_up")) == 8)
        assert released(rows) == [({"reason": ""}, 0)]
    finally:
        await agent.stop()
        await api.stop()


async def test_a_driver_nvml_refuses_after_the_upgrade_exits_for_a_restart(tmp_path: Path, monkeypatch) -> None:
    """Released for the upgrade, then the labels clear and nvmlInit answers LIB_RM_VERSION_MISMATCH
    (the old library still mounted): the agent stops and serve() gives exit status 3."""
    sim = SwappableDriver()
    api = await SimApiServer().start()
    api.serve(AGENT_NODE)
    api.serve(AGENT_PODS)
    api.create(node())
    monkeypatch.setattr(agent_module, "nvml_factory", lambda spec, profile=None: lambda: sim)
    args = parse_args("--kubeconfig", api.write_kubeconfig(str(tmp_path / "kc")),
                      "--pod-resources-socket", str(tmp_path / "none.sock"))
    levels, _ = topology_from_args(args)
    stop = asyncio.Event()
    serving = asyncio.create_task(agent_main.serve(args, levels, stop))
    try:
        async with asyncio.timeout(10):
            while not sim.initialized:
                await asyncio.sleep(0.05)
        api.update(node(**{"nvidia.com/gpu.deploy.driver": "paused-for-driver-upgrade"}))
        async with asyncio.timeout(10):
            while sim.initialized:
                await asyncio.sleep(0.05)
        sim.refuse = pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH
        api.update(node(**{"nvidia.com/gpu.deploy.driver": "true"}))
        async with asyncio.timeout(10):
            stuck, status = await serving
        assert (stuck, status) == (False, EXIT_DRIVER_CHANGED) and not stop.is_set()
    finally:
        stop.set()
        await asyncio.gather(serving, return_exceptions=True)
        await api.stop()


async def test_release_with_a_call_stuck_in_the_driver_skips_nvml_shutdown(tmp_path: Path) -> None:
    """A GPU hung in the driver when the upgrade starts: the release waits one NVML deadline for the
    call, then lets go without nvmlShutdown under it (it could block too); the series still go."""
    sim = SimNvml()
    api, agent, scraper = await start(tmp_path, sim)
    try:
        await scraper.when(lambda r: len(only(r, "gangscope_gpu_up")) == 8)
        sim.hang(4)
        await scraper.when(lambda r: ({"gpu": "4"}, 0) in [({"gpu": l["gpu"]}, v) for l, v in only(r, "gangscope_gpu_up")])
        api.update(node(**{UPGRADE_STATE: "pod-restart-required"}))
        rows = await scraper.when(lambda r: released(r) == [({"reason": DRIVER_UPGRADE}, 1)])
        assert only(rows, "gangscope_gpu_up") == []
        assert sim.initialized, "nvmlShutdown is not called while a call is stuck"
        assert agent.lifecycle.stuck()
    finally:
        sim.release()
        await agent.stop()
        await api.stop()


class SlowInit(SimNvml):
    """nvmlInit blocks until ``proceed`` is set: a driver slow to answer at start."""

    def __init__(self) -> None:
        super().__init__()
        self.started, self.proceed = threading.Event(), threading.Event()

    def nvmlInit(self) -> None:
        self.started.set()
        self.proceed.wait(10)
        super().nvmlInit()


async def test_a_release_during_nvml_init_waits_for_it_and_shuts_it_down(tmp_path: Path) -> None:
    """The labels ask for a release while nvmlInit is still running on its thread: the release
    waits for it, then calls nvmlShutdown, so the late init does not keep the driver held."""
    sim = SlowInit()
    api, agent, scraper = await start(tmp_path, sim)
    try:
        async with asyncio.timeout(10):
            while not sim.started.is_set():
                await asyncio.sleep(0.02)
        api.update(node(**{MIG_STATE: "pending"}))
        async with asyncio.timeout(10):
            while agent.lifecycle.wanted != MIG_RECONFIGURATION:
                await asyncio.sleep(0.02)
        sim.proceed.set()
        rows = await scraper.when(lambda r: released(r) == [({"reason": MIG_RECONFIGURATION}, 1)])
        assert not sim.initialized, "the init that finished during the release was shut down"
        assert only(rows, "gangscope_gpu_up") == []
        assert not agent.lifecycle.stuck()
    finally:
        sim.proceed.set()
        await agent.stop()
        await api.stop()



async def test_a_stop_as_nvml_shutdown_returns_is_not_dropped() -> None:
    """A release cancelled just as ``nvmlShutdown`` returned (the agent stopped during a
    driver-upgrade release): the cancellation reaches the lifecycle, where Python 3.11's
    ``asyncio.wait_for`` would drop it and leave the agent's stop waiting."""

    def start() -> tuple[Awaitable[bool], Callable[[], None], Callable[[], None]]:
        lib = SimNvml()
        opened = gate(lib, "nvmlShutdown")
        watched = FatalWatch(lib, lambda exc: None)
        watched.nvmlInit()
        return NvmlLifecycle._shutdown(watched), opened.set, lambda: None

    await cancels_are_kept(start)

"""The whole agent over real sockets: simulated API server (HTTP), kubelet (gRPC), NVML, sysfs."""

from __future__ import annotations

import argparse
import asyncio
import subprocess
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
from prometheus_client.parser import text_string_to_metric_families

from exporter.config import topology_from_args
from exporter.kube.resources import AGENT_NODE, AGENT_PODS, TOPOLOGIES
from exporter.node import main as agent_main
from exporter.node.agent import Agent
from exporter.sim.apiserver import SimApiServer, make_object
from exporter.sim.kubelet import SimContainer, SimKubelet, SimPod
from exporter.sim.nvml import SimNvml

NODE = "gpu-a1"
BLOCK, RACK = "cloud.provider.com/topology-block", "cloud.provider.com/topology-rack"
FIXTURE = str(Path(__file__).parent / "fixtures" / "sysfs")


def parse_args(*extra: str, levels: str | None = f"{BLOCK},{RACK}") -> argparse.Namespace:
    """The agent's flags for tests; ``levels=None`` leaves out ``--topology-levels`` (Topologies decide)."""
    p = argparse.ArgumentParser()
    agent_main.add_arguments(p)
    flags = [] if levels is None else ["--topology-levels", levels]
    return p.parse_args(["--listen", "127.0.0.1:0", "--node-name", NODE, "--sysfs", FIXTURE, *flags,
                         "--sample-interval", "0.1", "--pod-resources-interval", "0.1", "--discovery-interval", "0.5",
                         *extra])


def node(block: str, rack: str, **more: str) -> dict:
    return make_object(AGENT_NODE, NODE, None, labels={BLOCK: block, RACK: rack, "kubernetes.io/hostname": NODE, **more})


def topology(name: str, *keys: str) -> dict:
    return make_object(TOPOLOGIES, name, None, spec={"levels": [{"nodeLabel": k} for k in keys]})


def pod(name: str, labels: dict, annotations: dict, node_name: str = NODE, spec: dict | None = None) -> dict:
    obj = make_object(AGENT_PODS, name, "team-a", labels=labels, spec={"nodeName": node_name, **(spec or {})})
    obj["metadata"]["annotations"] = annotations
    return obj




async def scrape(port: int, openmetrics: bool = False) -> str:
    headers = {"Accept": "application/openmetrics-text; version=1.0.0"} if openmetrics else {}
    async with aiohttp.ClientSession() as s:
        async with s.get(f"http://127.0.0.1:{port}/metrics", headers=headers) as r:
            assert r.status == 200
            return await r.text()


def series(text: str) -> list[tuple[str, dict, float]]:
    return [(s.name, s.labels, s.value) for fam in text_string_to_metric_families(text) for s in fam.samples]


async def until(predicate, timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not await predicate():
            await asyncio.sleep(0.05)


async def test_agent_joins_gpus_pods_workloads_and_topology(tmp_path: Path, kubelet_socket: str) -> None:
    api = await SimApiServer().start()
    api.serve(AGENT_NODE)
    api.serve(AGENT_PODS)
    api.create(node("b1", "r2"))
    api.create(pod("train-0", {"kueue.x-k8s.io/podset": "workers", "scheduling.x-k8s.io/pod-group": "pg-train"},
                   {"kueue.x-k8s.io/workload": "job-train-5f1c"}))
    api.create(pod("vc-0", {}, {"scheduling.k8s.io/group-name": "vc-group"}))
    api.create(pod("native-0", {}, {}, spec={"schedulingGroup": {"podGroupName": "native-pg"}}))
    api.create(pod("elsewhere", {"kueue.x-k8s.io/podset": "x"}, {}, node_name="other-node"))
    sim = SimNvml(["mig"])
    g = [gpu.uuid for gpu in sim.gpus]
    kubelet = SimKubelet(kubelet_socket, [
        SimPod("team-a", "train-0", [SimContainer("trainer", [("nvidia.com/gpu", g[1:5])])]),
        SimPod("team-a", "vc-0", [SimContainer("main", [("nvidia.com/gpu", [g[5] + "::1"])])]),
        SimPod("team-a", "native-0", [SimContainer("main", [("nvidia.com/mig-1g.10gb", [sim.gpus[0].mig[1]])])]),
        SimPod("team-a", "unknown-dev", [SimContainer("main", [("nvidia.com/gpu", ["GPU-not-on-this-node"])])]),
    ])
    await kubelet.start()
    args = parse_args("--kubeconfig", api.write_kubeconfig(str(tmp_path / "kc")), "--pod-resources-socket", kubelet_socket)
    levels, _ = topology_from_args(args)
    agent = Agent(args, levels, nvml=lambda: sim)
    await agent.start()
    try:
        topo = {"node": NODE, "block": "b1", "rack": "r2", "host": NODE}

        async def joined() -> bool:
            text = await scrape(agent.port)
            return 'workload="job-train-5f1c"' in text and 'podgroup="native-pg"' in text and 'rack="r2"' in text

        await until(joined)
        text = await scrape(agent.port)
        pod_info = sorted((s[1]["gpu"], s[1]["pod"], s[1]["uuid"], s[1]["workload"], s[1]["podset"], s[1]["podgroup"])
                          for s in series(text) if s[0] == "gangscope_gpu_pod_info")
        assert pod_info == [
            ("0", "native-0", sim.gpus[0].mig[1], "", "", "native-pg"),
            ("1", "train-0", g[1], "job-train-5f1c", "workers", "pg-train"),
            ("2", "train-0", g[2], "job-train-5f1c", "workers", "pg-train"),
            ("3", "train-0", g[3], "job-train-5f1c", "workers", "pg-train"),
            ("4", "train-0", g[4], "job-train-5f1c", "workers", "pg-train"),
            ("5", "vc-0", g[5], "", "", "vc-group"),
        ]
        info = next(s for s in series(text) if s[0] == "gangscope_gpu_pod_info" and s[1]["gpu"] == "1")
        assert info[1] == {"gpu": "1", "uuid": g[1], "namespace": "team-a", "pod": "train-0", "container": "trainer",
                           "workload": "job-train-5f1c", "podset": "workers", "podgroup": "pg-train", **topo}
        # every agent series carries node + topology; per-link series carry no pod labels
        for name, labels, _ in series(text):
            if name.startswith(("gangscope_gpu", "gangscope_nvlink", "gangscope_pcie", "gangscope_fabric", "gangscope_nic",
                                "gangscope_source", "gangscope_parse_errors")):
                assert {k: labels.get(k) for k in topo} == topo, (name, labels)
            if name.startswith("gangscope_nvlink"):
                assert "pod" not in labels and "workload" not in labels
        ups = {s[1]["source"]: s[2] for s in series(text) if s[0] == "gangscope_source_up"}
        assert ups == {"nvml": 1, "podresources": 1, "fabric": 1, "node": 1, "pods": 1}
        parse_errors = {s[1]["source"]: s[2] for s in series(text) if s[0] == "gangscope_parse_errors_total"}
        assert parse_errors["podresources"] == 1  # the device NVML does not know

        # a node label change is followed (the Node watch), and old label values vanish
        api.update(node("b1", "r9"))

        async def moved() -> bool:
            t = await scrape(agent.port)
            return 'rack="r9"' in t and 'rack="r2"' not in t

        await until(moved)
        # a pod's workload annotation appears later: the join follows the pods watch
        api.update(pod("vc-0", {"kueue.x-k8s.io/podset": "main"}, {"scheduling.k8s.io/group-name": "vc-group",
                                                                   "kueue.x-k8s.io/workload": "vc-wl"}))

        async def annotated() -> bool:
            return 'workload="vc-wl"' in await scrape(agent.port)

        await until(annotated)
        # the kubelet restarts with train-0 gone: its join lines go
        kubelet.set_pods([SimPod("team-a", "vc-0", [SimContainer("main", [("nvidia.com/gpu", [g[5]])])])])
        await kubelet.restart()

        async def released() -> bool:
            return 'pod="train-0"' not in await scrape(agent.port)

        await until(released)

        om = await scrape(agent.port, openmetrics=True)
        assert len(list(om_parse(om))) > 20
        final = await scrape(agent.port)
        proc = subprocess.run(["promtool", "check", "metrics"], input=final.encode(), capture_output=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    finally:
        await agent.stop()
        await kubelet.stop()
        await api.stop()


@pytest.mark.parametrize("nvml", ["sim", "sim:nodriver"])
async def test_agent_without_kubernetes_kubelet_or_nvml_keeps_serving(tmp_path: Path, nvml: str) -> None:
    """No kubeconfig and not in a cluster, no kubelet socket, and (sim:nodriver) no NVML library:
    each missing source is down in its health series; whatever is left is served."""
    args = parse_args("--kubeconfig", str(tmp_path / "missing"), "--pod-resources-socket", str(tmp_path / "none.sock"),
                      "--nvml", nvml)
    levels, _ = topology_from_args(args)
    agent = Agent(args, levels)
    await agent.start()
    has_nvml = nvml == "sim"
    marker = "gangscope_nvlink_transmit_bytes_total{" if has_nvml else 'gangscope_source_up{source="nvml",node="gpu-a1",block="",rack="",host="gpu-a1"} 0'
    try:
        async def sampled() -> bool:
            text = await scrape(agent.port)
            gpus = sum(1 for s in series(text) if s[0] == "gangscope_gpu_info")
            # Each GPU is sampled on its own task: on a loaded machine the first scrape can
            # hold one GPU's series before the other seven have answered.
            return marker in text and "gangscope_fabric_port_up{" in text and gpus == (8 if has_nvml else 0)

        await until(sampled)
        text = await scrape(agent.port)
        ups = {s[1]["source"]: s[2] for s in series(text) if s[0] == "gangscope_source_up"}
        assert ups == {"nvml": int(has_nvml), "podresources": 0, "fabric": 1, "node": 0, "pods": 0}
        gpu_info = [s[1] for s in series(text) if s[0] == "gangscope_gpu_info"]
        assert len(gpu_info) == (8 if has_nvml else 0)
        if has_nvml:
            assert gpu_info[0]["node"] == NODE and gpu_info[0]["host"] == NODE
            assert gpu_info[0]["block"] == "" and gpu_info[0]["rack"] == ""
        assert not [s for s in series(text) if s[0] == "gangscope_gpu_pod_info"]
        async with aiohttp.ClientSession() as s:
            async with s.get(f"http://127.0.0.1:{agent.port}/readyz") as r:
                assert r.status == 200 and "podresources" in await r.text()
    finally:
        await agent.stop()


def test_cli_rejects_a_bad_nvml_flag_and_unknown_scenario() -> None:
    p = argparse.ArgumentParser()
    agent_main.add_arguments(p)
    assert agent_main.run(p.parse_args(["--nvml", "fake"])) == 2
    with pytest.raises(ValueError, match="unknown NVML scenario"):
        SimNvml(["nope"])


@pytest.mark.parametrize(("nvml", "ready_marker"), [
    ("sim", "gangscope_nvlink_transmit_bytes_total{"),
    ("sim:hang", 'gangscope_gpu_up{gpu="4",uuid="GPU-00000004-5e1a-4c0d-9a3b-000000000004",node="gpu-a1",host="gpu-a1"} 0'),
])
def test_sigterm_stops_the_agent_process(tmp_path: Path, nvml: str, ready_marker: str) -> None:
    """The real process: starts, serves, and exits 0 within seconds of SIGTERM, even with an
    NVML call stuck in the driver (sim:hang wedges GPU 4 five seconds after start)."""
    import signal
    import sys
    import time
    import urllib.request

    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "exporter.node.main", "--nvml", nvml, "--nvml-timeout", "0.5", "--listen", f"127.0.0.1:{port}",
                             "--kubeconfig", str(tmp_path / "missing"), "--pod-resources-socket", str(tmp_path / "x.sock"),
                             "--sysfs", FIXTURE, "--node-name", NODE], cwd=Path(__file__).parent.parent,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1).read().decode()
                if ready_marker in body:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, proc.stderr.read().decode() if proc.poll() is not None else "no metrics"
            time.sleep(0.1)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert time.monotonic() - t0 < 5
    finally:
        if proc.poll() is None:
            proc.kill()


ZONE = "example.com/topology-zone"
AGENT_SERIES = ("gangscope_gpu", "gangscope_nvlink", "gangscope_pcie", "gangscope_fabric", "gangscope_nic",
                "gangscope_source", "gangscope_parse_errors")


def topology_labels(text: str) -> set[tuple[tuple[str, str], ...]]:
    """The distinct (node + topology) label sets over every agent series of a scrape."""
    out = set()
    for name, labels, _ in series(text):
        if name.startswith(AGENT_SERIES):
            keys = ["node", *(k for k in labels if k in ("zone", "block", "rack", "host"))]
            out.add(tuple((k, labels[k]) for k in keys))
    return out


async def test_agent_levels_follow_kueue_topologies(tmp_path: Path) -> None:
    """No --topology-levels: the levels are the collector's merge of the Kueue Topologies, and a
    change of Topologies re-labels every series (old label sets vanish, not left beside)."""
    api = await SimApiServer().start()
    for resource in (AGENT_NODE, AGENT_PODS, TOPOLOGIES):
        api.serve(resource)
    api.create(node("b1", "r2", **{ZONE: "z1"}))
    api.create(topology("racks", BLOCK, RACK, "kubernetes.io/hostname"))
    args = parse_args("--kubeconfig", api.write_kubeconfig(str(tmp_path / "kc")), "--pod-resources-socket",
                      str(tmp_path / "none.sock"), levels=None)
    levels, _ = topology_from_args(args)
    agent = Agent(args, levels, nvml=lambda: SimNvml())
    await agent.start()
    try:
        async def labelled(want: tuple[tuple[str, str], ...]) -> bool:
            text = await scrape(agent.port)
            return "gangscope_nvlink_transmit_bytes_total{" in text and topology_labels(text) == {want}

        await until(lambda: labelled((("node", NODE), ("block", "b1"), ("rack", "r2"), ("host", NODE))))
        text = await scrape(agent.port)
        ups = {s[1]["source"]: s[2] for s in series(text) if s[0] == "gangscope_source_up"}
        assert ups["topologies"] == 1 and ups["node"] == 1
        # A second Topology with a level above block: merged in above it, on every series.
        api.create(topology("zones", ZONE, BLOCK, "kubernetes.io/hostname"))
        await until(lambda: labelled((("node", NODE), ("zone", "z1"), ("block", "b1"), ("rack", "r2"), ("host", NODE))))
        assert agent.node.levels.keys == (ZONE, BLOCK, RACK, "kubernetes.io/hostname")
        # A second key whose short name is rack: the key first in sort order keeps rack, the other
        # takes its segment name (exporter.topology.assign_aliases); nothing is rejected.
        api.create(topology("clash", "other.io/topology-rack"))
        async def merged() -> bool:
            return "other.io/topology-rack" in agent.node.levels.keys

        await until(merged)
        assert dict(zip(agent.node.levels.keys, agent.node.levels.aliases)) == {
            "other.io/topology-rack": "topology_rack", ZONE: "zone", BLOCK: "block", RACK: "rack", "kubernetes.io/hostname": "host"}
        await until(lambda: labelled((("node", NODE), ("zone", "z1"), ("block", "b1"), ("rack", "r2"), ("host", NODE))))
        errors = {s[1]["source"]: s[2] for s in series(await scrape(agent.port)) if s[0] == "gangscope_parse_errors_total"}
        assert errors.get("topologies", 0) == 0
        # Every Topology gone: host only.
        for name in ("racks", "zones", "clash"):
            api.delete(topology(name))
        await until(lambda: labelled((("node", NODE), ("host", NODE))))
        proc = subprocess.run(["promtool", "check", "metrics"], input=(await scrape(agent.port)).encode(), capture_output=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    finally:
        await agent.stop()
        await api.stop()


async def test_topology_levels_flag_overrides_kueue_topologies(tmp_path: Path) -> None:
    """--topology-levels given: the Topologies are not watched (no source, no labels from them)."""
    api = await SimApiServer().start()
    for resource in (AGENT_NODE, AGENT_PODS, TOPOLOGIES):
        api.serve(resource)
    api.create(node("b1", "r2"))
    api.create(topology("racks", BLOCK, RACK, "kubernetes.io/hostname"))
    args = parse_args("--kubeconfig", api.write_kubeconfig(str(tmp_path / "kc")), "--pod-resources-socket",
                      str(tmp_path / "none.sock"), "--topology-alias", f"{RACK}=rack_id", levels=RACK)
    levels, _ = topology_from_args(args)
    agent = Agent(args, levels, nvml=lambda: SimNvml())
    await agent.start()
    try:
        want = {(("node", NODE), ("host", NODE))}

        async def labelled() -> bool:
            text = await scrape(agent.port)
            return "gangscope_nvlink_transmit_bytes_total{" in text and 'rack_id="r2"' in text

        await until(labelled)
        text = await scrape(agent.port)
        assert topology_labels(text) == want and "block=" not in text and 'rack="' not in text
        assert all(s[1]["rack_id"] == "r2" for s in series(text) if s[0].startswith(AGENT_SERIES))
        ups = {s[1]["source"]: s[2] for s in series(text) if s[0] == "gangscope_source_up"}
        assert "topologies" not in ups and ups["node"] == 1
        assert not [r for r in api.requests if "topologies" in r]
    finally:
        await agent.stop()
        await api.stop()


async def test_without_kueue_the_labels_are_host_only(tmp_path: Path) -> None:
    """Topology not served (Kueue absent): that source is down but not in error; host-only labels."""
    api = await SimApiServer().start()
    api.serve(AGENT_NODE)
    api.serve(AGENT_PODS)
    api.create(node("b1", "r2"))
    args = parse_args("--kubeconfig", api.write_kubeconfig(str(tmp_path / "kc")), "--pod-resources-socket",
                      str(tmp_path / "none.sock"), levels=None)
    levels, _ = topology_from_args(args)
    agent = Agent(args, levels, nvml=lambda: SimNvml())
    await agent.start()
    try:
        async def settled() -> bool:
            text = await scrape(agent.port)
            ups = {s[1]["source"]: s[2] for s in series(text) if s[0] == "gangscope_source_up"}
            return "gangscope_nvlink_transmit_bytes_total{" in text and ups.get("topologies") == 0 and ups.get("node") == 1

        await until(settled)
        text = await scrape(agent.port)
        assert topology_labels(text) == {(("node", NODE), ("host", NODE))}
        errors = {s[1]["source"]: s[2] for s in series(text) if s[0] == "gangscope_source_errors_total"}
        assert errors["topologies"] == 0
    finally:
        await agent.stop()
        await api.stop()


async def test_dra_devices_join_by_minor_number_and_shared_gpus_count_their_replicas(tmp_path: Path, kubelet_socket: str) -> None:
    """The driver numbered the GPUs in reverse (minor 7 is NVML index 0): DRA's gpu-<minor> and a MIG
    device of it join to the right GPU; a time-sliced GPU (nvidia.com/gpu.shared) joins through its
    replica id, and gangscope_gpu_kubelet_devices says how many replicas the kubelet offers."""
    sim = SimNvml()
    for gpu in sim.gpus:
        gpu.minor = 7 - gpu.index
    g = [gpu.uuid for gpu in sim.gpus]
    kubelet = SimKubelet(kubelet_socket, [
        SimPod("team-a", "dra-0", [SimContainer("main", dra=[("c0", "team-a", "gpu.nvidia.com", "n", "gpu-7"),
                                                              ("c1", "team-a", "gpu.nvidia.com", "n", "gpu-2-mig-1g10gb-19-0")])]),
        SimPod("team-a", "shared-0", [SimContainer("main", [("nvidia.com/gpu.shared", [g[3] + "::1"])])]),
    ])
    kubelet.allocatable = [("nvidia.com/gpu.shared", [f"{g[3]}::{k}" for k in range(4)]), ("nvidia.com/gpu", [g[4]])]
    await kubelet.start()
    args = parse_args("--kubeconfig", str(tmp_path / "missing"), "--pod-resources-socket", kubelet_socket)
    levels, _ = topology_from_args(args)
    agent = Agent(args, levels, nvml=lambda: sim)
    await agent.start()
    try:
        async def joined() -> bool:
            text = await scrape(agent.port)
            return 'pod="shared-0"' in text and 'pod="dra-0"' in text and "gangscope_gpu_kubelet_devices{" in text

        await until(joined)
        rows = series(await scrape(agent.port))
        assert sorted((s[1]["gpu"], s[1]["pod"], s[1]["uuid"]) for s in rows if s[0] == "gangscope_gpu_pod_info") == [
            ("0", "dra-0", g[0]), ("3", "shared-0", g[3]), ("5", "dra-0", g[5])]
        assert sorted((s[1]["gpu"], s[1]["resource"], s[2]) for s in rows if s[0] == "gangscope_gpu_kubelet_devices") == [
            ("3", "nvidia.com/gpu.shared", 4), ("4", "nvidia.com/gpu", 1)]
        parse_errors = {s[1]["source"]: s[2] for s in rows if s[0] == "gangscope_parse_errors_total"}
        assert parse_errors["podresources"] == 0
    finally:
        await agent.stop()
        await kubelet.stop()

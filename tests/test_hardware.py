"""NVL72 domains: the hardware's clique as GPU feature discovery labels it, and as a topology level.

``nvidia.com/gpu.clique`` is set by GPU feature discovery to ``<fabric cluster UUID>.<clique id>``
(NVIDIA/k8s-device-plugin internal/lm/imex.go line 39, from internal/resource/nvml-device.go
lines 105-118); the documented example is read from tests/fixtures/nodes. The agent's
``gangscope_gpu_fabric_info`` must join back to that exact value, and the label must work as a
Kueue Topology level in the agent and the collector like any other node label (its Prometheus
label is whatever the alias rule of exporter/topology.py gives; today ``gpu_clique``).
"""

from __future__ import annotations

import argparse
import asyncio
import re
from pathlib import Path

import yaml

from exporter import snapshot
from exporter.config import topology_from_args
from exporter.exposition import Exposition
from exporter.health import SourceHealth
from exporter.kube.resources import AGENT_NODE, TOPOLOGIES
from exporter.node import main as agent_main
from exporter.node.agent import Agent
from exporter.node.nvml import NvmlSampler
from exporter.sim.apiserver import SimApiServer, make_object
from exporter.sim.nvml import Chassis, SimNvml
from exporter.topology import TopologyLevels
from kueue_objects import admitted_conditions, series, workload

CLIQUE = "nvidia.com/gpu.clique"
HOST = "kubernetes.io/hostname"
GFD_README = Path(__file__).parent / "fixtures" / "nodes" / "node-01-gfd-readme-partial-node-labels.txt"
ALIAS = TopologyLevels.build((CLIQUE, HOST), {}).labels_from_node({CLIQUE: "x", HOST: "n"}, "n")[0][0]


def gfd_clique_example() -> str:
    row = next(line for line in GFD_README.read_text().splitlines() if line.startswith(f"| {CLIQUE} "))
    return [cell.strip() for cell in row.strip("|").split("|")][3]


def test_the_fixture_documents_the_label_value() -> None:
    assert re.fullmatch(r"[0-9a-f-]{36}\.\d+", gfd_clique_example())
    assert ALIAS == "gpu_clique"


async def test_fabric_info_joins_back_to_the_gfd_clique_label() -> None:
    cluster, clique = gfd_clique_example().rsplit(".", 1)  # split on the last dot, as the fixture says
    sim = SimNvml(profile="gb200", chassis=Chassis(cluster_uuid=cluster, clique_id=int(clique)))
    expo = Exposition()
    sampler = NvmlSampler(lambda: sim, expo, SourceHealth("nvml", expo), lambda: (("node", "n1"),), background_pcie=False)
    assert await sampler.start()
    await sampler.sample_once()
    info = [k for k in series(expo.render(False).decode()) if k[0] == "gangscope_gpu_fabric_info"]
    assert len(info) == 4
    for _, labels in info:
        d = dict(labels)
        assert f'{d["cluster_uuid"]}.{d["clique_id"]}' == gfd_clique_example()
    sampler.close()


async def test_the_clique_is_a_topology_level_on_the_agent(tmp_path: Path, kubelet_socket: str) -> None:
    """Levels from a Kueue Topology whose top level is the clique: every agent series carries it."""
    value = gfd_clique_example()
    api = await SimApiServer().start()
    for resource in (AGENT_NODE, TOPOLOGIES):
        api.serve(resource)
    api.create(make_object(AGENT_NODE, "gb-1", None, labels={CLIQUE: value, HOST: "gb-1"}))
    api.create(make_object(TOPOLOGIES, "nvl72", None, spec={"levels": [{"nodeLabel": CLIQUE}, {"nodeLabel": HOST}]}))
    p = argparse.ArgumentParser()
    agent_main.add_arguments(p)
    args = p.parse_args(["--listen", "127.0.0.1:0", "--node-name", "gb-1", "--nvml", "sim", "--sim-profile", "gb200",
                         "--kubeconfig", api.write_kubeconfig(str(tmp_path / "kc")), "--pod-resources-socket", kubelet_socket,
                         "--sysfs", str(tmp_path), "--sample-interval", "0.1", "--discovery-interval", "0.5"])
    levels, _ = topology_from_args(args)
    agent = Agent(args, levels)
    await agent.start()
    try:
        deadline = asyncio.get_running_loop().time() + 60  # polled: a loaded machine only takes longer
        while True:
            text = agent.exposition.render(False).decode()
            if (f'{ALIAS}="{value}"' in text and "gangscope_gpu_fabric_info{" in text
                    and text.count("gangscope_nvlink_transmit_bytes_total{") == 4 * 18 or asyncio.get_running_loop().time() > deadline):
                break
            await asyncio.sleep(0.05)
        got = series(text)
        fabric = [dict(k) for n, k in got if n == "gangscope_gpu_fabric_info"]
        assert fabric and all(f[ALIAS] == value and f["host"] == "gb-1" for f in fabric)
        links = [dict(k) for n, k in got if n == "gangscope_nvlink_transmit_bytes_total"]
        assert len(links) == 4 * 18 and {f[ALIAS] for f in links} == {value}
    finally:
        await agent.stop()
        await api.stop()


def test_the_clique_is_a_topology_level_in_the_collector(tmp_path: Path, capfdbinary) -> None:
    """A Workload placed by a clique-level Topology: its per-domain series carry the clique."""
    value = gfd_clique_example()
    nodes = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": h, "labels": {CLIQUE: value, HOST: h}}}
             for h in ("gb-1", "gb-2")]
    topo = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": "nvl72"},
            "spec": {"levels": [{"nodeLabel": CLIQUE}, {"nodeLabel": HOST}]}}
    wl = workload("train", hosts=["gb-1", "gb-2"], conditions=admitted_conditions())
    (tmp_path / "dump.yaml").write_text(yaml.safe_dump_all([topo, *nodes, wl]))
    parser = argparse.ArgumentParser()
    snapshot.add_arguments(parser)
    assert snapshot.run(parser.parse_args(["--from-file", str(tmp_path / "dump.yaml")])) == 0
    out = capfdbinary.readouterr()[0].decode()
    domains = [dict(k) for (n, k) in series(out) if n == "gangscope_workload_topology_pods"]
    assert sorted(d["host"] for d in domains) == ["gb-1", "gb-2"]
    assert {d[ALIAS] for d in domains} == {value}

"""Families declared as data, for real: every sample carries exactly its family's declared labels.

A family renders its lines from its declaration (exporter.exposition.Family), so the label names
of what a process serves, the declaration and the README catalogue must agree. Checked on what
users scrape: the demo's collector and agent, and a collector on a benchmark cluster
(bench/cluster.py) plus an agent, both with --cluster-name; each page parsed with
prometheus_client's text and OpenMetrics parsers.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from pathlib import Path

import aiohttp
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from collectors import started_collector
from exporter.demo import Demo
from exporter.exposition import Family
from exporter.kube.resources import COLLECTOR_RESOURCES
from exporter.node import main as agent_main
from exporter.node.agent import Agent
from exporter.node.main import topology_from_args
from exporter.sim.apiserver import SimApiServer
from exporter.sim.nvml import SimNvml
from test_catalogue import _section, code_families

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from cluster import build_cluster  # noqa: E402

FAMILIES = code_families()
LEVELS = ("block", "rack", "host")  # the demo's and the benchmark cluster's topology labels


async def fetch(port: int, openmetrics: bool) -> str:
    headers = {"Accept": "application/openmetrics-text; version=1.0.0"} if openmetrics else {}
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/metrics", headers=headers) as r:
        assert r.status == 200
        return await r.text()


def family_of(sample_name: str) -> Family | None:
    """The declared family of a parsed sample (OpenMetrics names counters and info series
    without their suffix, and its parser gives samples back with it)."""
    return FAMILIES.get(sample_name)


def check_page(text: str, openmetrics: bool, topology: tuple[str, ...], const: tuple[str, ...] = ()) -> set[str]:
    """Every gangscope sample's label names are ``const``, the declared labels in order, then
    (for a ``topology=True`` family) topology labels among ``topology`` in their order (an
    unresolved Workload's series carry only the levels Kueue stored). Returns the families seen."""
    seen: set[str] = set()
    wrong: list[tuple[str, list[str], list[str]]] = []
    parse = parse_openmetrics if openmetrics else parse_text
    for fam in parse(text):
        for s in fam.samples:
            if not s.name.startswith("gangscope_"):
                continue
            declared = family_of(s.name)
            assert declared is not None, f"{s.name} is served but declared nowhere"
            seen.add(declared.name)
            names = list(s.labels)
            head = [*const, *declared.labels]
            rest = names[len(head):]
            extra = [t for t in topology if t not in declared.labels] if declared.topology else []
            if declared.label_prefix:  # run-time labels (--metric-labels-allowlist), each with the prefix
                rest = [n for n in rest if not n.startswith(declared.label_prefix)]
            if names[:len(head)] != head or rest != [t for t in extra if t in rest]:
                wrong.append((s.name, names, head + extra))
    assert wrong == [], wrong[:5]
    return seen


def catalogue_labels() -> dict[str, tuple[tuple[str, ...], bool, str]]:
    """The README catalogue's label column of each family: the backticked names, whether it
    lists ``topology``, and the prefix of run-time labels (```label_<key>```)."""
    rows = re.findall(r"^\| `(gangscope_[a-z0-9_]+)` \| (?:gauge|counter|info) \|([^|]*)\|", _section("Metric catalogue"), re.M)
    return {name: (tuple(re.findall(r"`([a-z0-9_]+)`", col)), "topology" in re.sub(r"`[^`]*`", "", col),
                   "".join(re.findall(r"`([a-z0-9_]+)<key>`", col)))
            for name, col in rows}


def test_every_family_is_catalogued_with_its_declared_labels() -> None:
    doc = catalogue_labels()
    differ = {name: (doc.get(name), (fam.labels, fam.topology, fam.label_prefix)) for name, fam in FAMILIES.items()
              if doc.get(name) != (fam.labels, fam.topology, fam.label_prefix)}
    assert differ == {}


async def test_the_demo_serves_only_declared_labels() -> None:
    demo = Demo(scenario_name="static")
    try:
        await demo.start()
        assert await demo.wait_synced(), "the collector or an agent did not sync"
        seen: set[str] = set()
        for openmetrics in (False, True):
            seen |= check_page(await fetch(demo.collector.port, openmetrics), openmetrics, LEVELS)
            for agent in list(demo.agents.values())[:3]:
                seen |= check_page(await fetch(agent.port, openmetrics), openmetrics, ("node", *LEVELS))
    finally:
        await demo.stop()
    # The demo shows most families; the ones it lacks need a state it does not stage.
    assert len(seen) >= 0.75 * len(FAMILIES), sorted(set(FAMILIES) - seen)
    assert {"gangscope_workload_topology_pods", "gangscope_gpu_pod_info", "gangscope_gang_stage",
            "gangscope_podgroup_phase", "gangscope_source_up", "gangscope_job_info"} <= seen


async def test_a_benchmark_cluster_and_an_agent_serve_only_declared_labels(
        kube_sim: SimApiServer, kube_sim_kubeconfig: str, tmp_path: Path) -> None:
    for r in COLLECTOR_RESOURCES:
        kube_sim.serve(r)
    kube_sim.bulk_load(build_cluster(300, nodes=512, seed=5, namespaces=20).objects())
    collector = await started_collector(kube_sim_kubeconfig, "--cluster-name", "eu-west",
                                        "--metric-labels-allowlist", "*=[*]")
    try:
        seen = set()
        for openmetrics in (False, True):
            seen |= check_page(await fetch(collector.port, openmetrics), openmetrics, LEVELS, ("cluster",))
    finally:
        await collector.stop()
    assert {"gangscope_workload_topology_pods", "gangscope_workload_condition", "gangscope_gang_pods",
            "gangscope_workload_labels", "gangscope_podgroup_labels"} <= seen

    p = argparse.ArgumentParser()
    agent_main.add_arguments(p)
    args = p.parse_args(["--listen", "127.0.0.1:0", "--node-name", "gpu-a1", "--sample-interval", "0.1",
                         "--cluster-name", "eu-west", "--pod-resources-socket", str(tmp_path / "missing.sock"),
                         "--kubeconfig", str(tmp_path / "none"),
                         "--sysfs", str(Path(__file__).parent / "fixtures" / "sysfs")])
    agent = Agent(args, topology_from_args(args)[0], nvml=lambda: SimNvml(profile="b200"))
    await agent.start()
    try:
        deadline = time.monotonic() + 10  # NVML's first sample (objects are the GPUs that answered)
        while not agent.nvml_health.objects and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for openmetrics in (False, True):
            seen = check_page(await fetch(agent.port, openmetrics), openmetrics, ("node", "host"), ("cluster",))
    finally:
        await agent.stop()
    assert {"gangscope_gpu_info", "gangscope_nvlink_transmit_bytes_total", "gangscope_fabric_port_up",
            "gangscope_source_up"} <= seen

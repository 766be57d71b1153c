"""The agent's in-cluster path against a real kube-apiserver: the pod's ServiceAccount files
(a TokenRequest token, the cluster CA) and ``KUBERNETES_SERVICE_HOST``/``PORT``, the project's
agent RBAC (``deploy/base/rbac.yaml``), its own Node watched by ``metadata.name`` and the pods of
its node by ``spec.nodeName`` (field selectors the real server evaluates), joined with a real gRPC
kubelet pod-resources socket and a simulated NVML."""

from __future__ import annotations

import argparse
import os
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from exporter.config import topology_from_args
from exporter.kube import credentials
from exporter.node import main as agent_main
from exporter.node.agent import Agent
from exporter.sim.kubelet import SimContainer, SimKubelet, SimPod
from exporter.sim.nvml import SimNvml
from kueue_objects import BLOCK, HOST, RACK
from realapi import RealCluster, Writer
from test_agent import scrape, series, until

FIXTURE_SYSFS = str(Path(__file__).parent / "fixtures" / "sysfs")


def node(name: str, rack: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {BLOCK: "b1", RACK: rack, HOST: name}}}


def pod(name: str, ns: str, node_name: str, labels: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": labels, "annotations": annotations},
            "spec": {"nodeName": node_name, "containers": [{"name": "trainer", "image": "registry.example.com/train:1"}]}}


def rotate(token_file: Path, value: str) -> None:
    token_file.write_text(value)
    later = time.time_ns() + 10**9
    os.utime(token_file, ns=(later, later))


async def test_agent_in_cluster_against_a_real_api_server(real_api: RealCluster, tmp_path: Path, kubelet_socket: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    suffix = uuid.uuid4().hex[:6]
    here, elsewhere = f"gpu-{suffix}", f"gpu-{suffix}-other"
    ns = real_api.namespace(f"agent-{suffix}")
    w = Writer(real_api)
    w.create(node(here, "r2"))
    w.create(node(elsewhere, "r3"))
    w.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": f"agent-{suffix}"},
              "spec": {"levels": [{"nodeLabel": BLOCK}, {"nodeLabel": RACK}, {"nodeLabel": HOST}]}})
    w.create(pod("train-0", ns, here, {"kueue.x-k8s.io/podset": "workers", "scheduling.x-k8s.io/pod-group": "pg-train"},
                 {"kueue.x-k8s.io/workload": "job-train-5f1c"}))
    w.create(pod("vc-0", ns, here, {}, {"scheduling.k8s.io/group-name": "vc-group"}))
    w.create(pod("train-1", ns, elsewhere, {"kueue.x-k8s.io/podset": "workers"}, {"kueue.x-k8s.io/workload": "job-train-5f1c"}))

    # The pod's service-account files, as kubelet projects them.
    real_api.service_account("gangscope", "gangscope-agent")
    token = tmp_path / "token"
    token.write_text(real_api.token("gangscope", "gangscope-agent") + "\n")
    monkeypatch.setattr(credentials, "SA_TOKEN", str(token))
    monkeypatch.setattr(credentials, "SA_CA", real_api.pki.ca_cert)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(real_api.port))
    monkeypatch.delenv("KUBECONFIG", raising=False)

    nvml = SimNvml()
    g = [gpu.uuid for gpu in nvml.gpus]
    kubelet = SimKubelet(kubelet_socket, [
        SimPod(ns, "train-0", [SimContainer("trainer", [("nvidia.com/gpu", g[0:2])])]),
        SimPod(ns, "vc-0", [SimContainer("trainer", [("nvidia.com/gpu", g[2:3])])]),
    ])
    await kubelet.start()
    p = argparse.ArgumentParser()
    agent_main.add_arguments(p)
    args = p.parse_args(["--listen", "127.0.0.1:0", "--node-name", here, "--sysfs", FIXTURE_SYSFS,
                         "--sample-interval", "0.1", "--pod-resources-interval", "0.1", "--discovery-interval", "0.5",
                         "--pod-resources-socket", kubelet_socket])
    agent = Agent(args, topology_from_args(args)[0], nvml=lambda: nvml)
    await agent.start()
    try:
        assert agent._client.credentials.description == "in-cluster"

        def pod_info(text: str) -> list[tuple[str, ...]]:
            return sorted((s[1]["pod"], s[1]["uuid"], s[1]["workload"], s[1]["podset"], s[1]["podgroup"], s[1].get("rack", ""))
                          for s in series(text) if s[0] == "gangscope_gpu_pod_info")

        want = [("train-0", g[0], "job-train-5f1c", "workers", "pg-train", "r2"),
                ("train-0", g[1], "job-train-5f1c", "workers", "pg-train", "r2"),
                ("vc-0", g[2], "", "", "vc-group", "r2")]

        async def joined() -> bool:
            return pod_info(await scrape(agent.port)) == want

        await settles(joined, lambda: pod_info_now(agent, pod_info))
        text = await scrape(agent.port)
        ups = {s[1]["source"]: s[2] for s in series(text) if s[0] == "gangscope_source_up"}
        assert ups["node"] == ups["pods"] == ups["topologies"] == 1
        assert agent.pods.pods.keys() == {(ns, "train-0"), (ns, "vc-0")}  # never the other node's pod

        # kubelet rotates the projected token; the Node is moved to another rack; a pod gets its
        # workload annotation late: each change reaches the series through the watches.
        rotate(token, real_api.token("gangscope", "gangscope-agent") + "\n")
        w.update(node(here, "r7"))
        w.update(pod("vc-0", ns, here, {"kueue.x-k8s.io/podset": "main"},
                     {"scheduling.k8s.io/group-name": "vc-group", "kueue.x-k8s.io/workload": "vc-wl"}))
        want = [(*row[:-1], "r7") for row in want[:2]] + [("vc-0", g[2], "vc-wl", "main", "vc-group", "r7")]
        await settles(joined, lambda: pod_info_now(agent, pod_info))
        # A pod deleted: it terminates first (a deletionTimestamp, MODIFIED; the real server waits
        # for the node's kubelet), its GPUs still joined; kubelet's final delete removes it.
        w.delete(pod("train-0", ns, here, {}, {}))
        await until(lambda: _terminating(real_api, ns, "train-0"), timeout=5)
        assert (ns, "train-0") in agent.pods.pods
        w.delete(pod("train-0", ns, here, {}, {}), grace_period=0)
        await until(lambda: _gone(agent, ns), timeout=15)
    finally:
        await agent.stop()
        await kubelet.stop()
        w.cleanup()


async def settles(check: Any, show: Any, timeout: float = 15) -> None:
    try:
        await until(check, timeout=timeout)
    except TimeoutError:
        raise AssertionError(f"not reached; now: {await show()}") from None


async def pod_info_now(agent: Agent, pod_info: Any) -> Any:
    text = await scrape(agent.port)
    return pod_info(text), [(s[1]["source"], s[2]) for s in series(text) if s[0] == "gangscope_source_up"]


async def _terminating(real_api: RealCluster, ns: str, name: str) -> bool:
    return bool(real_api.admin.get(pod(name, ns, "", {}, {}))["metadata"].get("deletionTimestamp"))


async def _gone(agent: Agent, ns: str) -> bool:
    return (ns, "train-0") not in agent.pods.pods


async def test_agent_releases_nvml_while_the_real_node_is_labelled_for_a_driver_upgrade(
        real_api: RealCluster, tmp_path: Path, kubelet_socket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU operator's labels set on a real Node (as k8s-driver-manager and the upgrade
    controller write them) reach the agent through its in-cluster watch under the project's RBAC:
    NVML released (nvmlShutdown called, no GPU series), then initialised again."""
    here = f"gpu-{uuid.uuid4().hex[:6]}"
    w = Writer(real_api)
    w.create(node(here, "r2"))
    real_api.service_account("gangscope", "gangscope-agent")
    token = tmp_path / "token"
    token.write_text(real_api.token("gangscope", "gangscope-agent") + "\n")
    monkeypatch.setattr(credentials, "SA_TOKEN", str(token))
    monkeypatch.setattr(credentials, "SA_CA", real_api.pki.ca_cert)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(real_api.port))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    nvml = SimNvml()
    p = argparse.ArgumentParser()
    agent_main.add_arguments(p)
    args = p.parse_args(["--listen", "127.0.0.1:0", "--node-name", here, "--sysfs", FIXTURE_SYSFS,
                         "--topology-levels", f"{BLOCK},{RACK}", "--sample-interval", "0.1",
                         "--discovery-interval", "0.5", "--pod-resources-socket", kubelet_socket])
    agent = Agent(args, topology_from_args(args)[0], nvml=lambda: nvml)
    await agent.start()

    def state(text: str) -> tuple[int, list[tuple[str, float]]]:
        rows = series(text)
        return (sum(1 for s in rows if s[0] == "gangscope_gpu_up"),
                [(s[1]["reason"], s[2]) for s in rows if s[0] == "gangscope_nvml_released"])

    async def reaches(want: tuple[int, list[tuple[str, float]]]) -> bool:
        return state(await scrape(agent.port)) == want

    try:
        await until(lambda: reaches((8, [("", 0)])), timeout=15)
        upgrading = node(here, "r2")
        upgrading["metadata"]["labels"].update({"nvidia.com/gpu-driver-upgrade-state": "pod-restart-required",
                                                "nvidia.com/gpu.deploy.device-plugin": "paused-for-driver-upgrade"})
        w.update(upgrading)
        await until(lambda: reaches((0, [("driver_upgrade", 1)])), timeout=15)
        assert not nvml.initialized
        done = node(here, "r2")
        done["metadata"]["labels"].update({"nvidia.com/gpu-driver-upgrade-state": "upgrade-done",
                                           "nvidia.com/gpu.deploy.device-plugin": "true"})
        w.update(done)
        await until(lambda: reaches((8, [("", 0)])), timeout=15)
        assert nvml.initialized and agent.lifecycle.releases == 1
    finally:
        await agent.stop()
        w.cleanup()

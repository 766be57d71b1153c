"""``gangscope demo``: a whole simulated GPU cluster, watched by the real collector and agents.

Everything runs in one process on loopback and uses the real code paths: the simulated API
server speaks real HTTPS (list, watch, bookmarks; a throwaway CA in the kubeconfig it writes, so
kubectl can read it too), each simulated node has a real gRPC kubelet
pod-resources socket and a simulated NVML at the ``pynvml`` boundary, and the collector and one
agent per node are the same classes ``gangscope collector`` and ``gangscope agent`` run. The
scenario (:mod:`exporter.sim.scenario`) evolves: a node of ``vit-large`` fails at +20 s and Kueue
evicts the Workload with ``NodeFailures`` at +40 s, so rates, transitions and alerts are visible.

With ``--prometheus`` it also runs Debian's Prometheus on the demo's processes with the
project's own rules, shortened for the demo (``alerts/generate.py`` writes them from
``alerts/config.yaml`` into the simulators' package, ``exporter/sim/rules/``), and prints each
alert when it fires and when it resolves: within two minutes, the inadmissible Workload, the stuck gang, the
partial gang's idle GPUs, the stalled TrainJob, the NVLink link down and the NodeFailures eviction.

The simulators are a separate distribution (``gangscope-sim``, exporter/sim/pyproject.toml), not
part of the runtime wheel or image: without them the demo says how to install them
(``exporter.SIMULATORS_INSTALL``) and exits 2.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.resources
import importlib.util
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
import yaml

from . import SIMULATORS_INSTALL
from .config import add_logging
from .logs import start_logging
from .node.main import SIM_PROFILES

log = structlog.get_logger(__name__)

SCENARIOS = ("default", "static")
SIM_MISSING = f"gangscope demo needs the simulators, which the runtime image does not ship: {SIMULATORS_INSTALL}"
# Labels that identify what an alert is about, in the order the demo prints them.
ALERT_SUBJECT = ("namespace", "workload", "kind", "name", "podgroup", "cluster_queue", "block", "rack", "node", "gpu", "link")
PCIE_UPTIME_BYTES = 40 * 10**9 * 3600 * 6  # where the demo's PCIe byte counters start: 6 h at 40 GB/s
AGENT_SCRAPE_MIN = 2  # seconds: the shortest interval (and timeout) the demo scrapes its agents at
LINK_DROP_AFTER = 3.0  # seconds of the demo before its down links can fail (they are seen up first)


def simulators_installed() -> bool:
    return importlib.util.find_spec("exporter.sim") is not None


AT = re.compile(r"@ (\d+)(?![.\d])")  # a constant time in the shipped demo rules: seconds after the demo's start


def rebased(text: str, start: float) -> str:
    """Rule text whose ``@ <seconds after the demo's start>`` count from ``start`` (Unix seconds)."""
    return AT.sub(lambda m: f"@ {start + int(m.group(1)):.3f}", text)


def demo_rules(folder: Path, start: float = 0.0) -> tuple[list[Path], str]:
    """The demo's shortened rule files (shipped in the simulators' package), copied into
    ``folder`` for Prometheus, and their evaluation interval (the demo scrapes at it too, its agents at 2 s at most).

    Their ``@ <seconds>`` (the training baselines, alerts/config.yaml ``demo.baseline_at``) count
    from the demo's start; they are rebased onto ``start`` (Unix seconds), which only the running
    demo knows, so its slowed jobs stay compared with their healthy minutes."""
    source = importlib.resources.files("exporter.sim").joinpath("rules")
    folder.mkdir(parents=True, exist_ok=True)
    paths, interval = [], ""
    for item in sorted(source.iterdir(), key=lambda t: t.name):
        if item.name.endswith(".yaml"):
            text = rebased(item.read_text(), start)
            interval = interval or yaml.safe_load(text)["groups"][0]["interval"]
            (folder / item.name).write_text(text)
            paths.append(folder / item.name)
    return paths, interval


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--duration", type=float, default=0.0, help="stop after this many seconds (default 0: until Ctrl-C)")
    p.add_argument("--scenario", choices=SCENARIOS, default="default",
                   help="default: 2 blocks x 2 racks x 4 nodes x 8 H100 GPUs, an NVL72 rack of GB200 nodes and a "
                        "block of 2 racks with fragmented free GPUs, a node fails at +20 s and its Workload is evicted at "
                        "+40 s; static: the same cluster without the timeline (default default)")
    p.add_argument("--host", default="127.0.0.1", help="loopback address the demo's servers listen on (default 127.0.0.1)")
    p.add_argument("--sim-profile", default="h100", choices=SIM_PROFILES,
                   help="GPU generation of the 16 nodes of blocks 1 and 2 (the NVL72 rack is always gb200) (default h100)")
    p.add_argument("--prometheus", action="store_true",
                   help="also start Debian's prometheus scraping the demo with the project's rules, shortened so that they "
                        "fire within two minutes, and print each alert as it fires and resolves (needs /usr/bin/prometheus)")
    add_logging(p, "warning")


@dataclass
class Demo:
    """The running demo; ``await start()``, then ``await stop()``."""

    scenario_name: str = "default"
    host: str = "127.0.0.1"
    with_prometheus: bool = False
    # Prometheus's rule files and its scrape and evaluation interval (None: the demo's shortened
    # rules shipped with the simulators, and the interval they are evaluated at).
    prometheus_interval: str | None = None
    prometheus_rules: list[Path] | None = None
    # Called with (seconds since start, alert name, its identifying labels) when an alert starts firing.
    on_alert: Any = None
    # Called with the same when an alert the demo reported firing stops firing.
    on_resolved: Any = None
    fired: dict[str, float] = field(default_factory=dict)  # alert name -> seconds since start when it first fired
    # (seconds since start, "firing" or "resolved", alert name, its identifying labels), in order
    history: list[tuple[float, str, str, tuple[tuple[str, str], ...]]] = field(default_factory=list)
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gangscope-demo-")))
    collector: Any = None
    agents: dict[str, Any] = field(default_factory=dict)
    kubelets: dict[str, Any] = field(default_factory=dict)
    nvml: dict[str, Any] = field(default_factory=dict)
    prometheus: subprocess.Popen | None = None
    training: dict[tuple[str, str], Any] = field(default_factory=dict)  # (namespace, workload) -> its training process
    ray_heads: list[Any] = field(default_factory=list)
    prometheus_port: int = 0
    started_at: float = 0.0
    _dropped: list[tuple[str, int, set[int]]] = field(default_factory=list)  # (node, gpu, links) to take down
    sim_profile: str = "h100"  # the GPU generation of the nodes the scenario does not give one

    async def start(self) -> None:
        from .cluster.main import Collector, add_arguments as collector_args
        from .kube.resources import AGENT_PODS, COLLECTOR_RESOURCES
        from .sim.apiserver import SimApiServer
        from .sim.scenario import build_default

        self.scenario = build_default()
        # The scenario's changes, kept even for "static" (which does not play them) so a caller such
        # as the end-to-end test can apply them with apply() at the moments it chooses.
        self.steps = sorted(self.scenario.timeline, key=lambda t: t[0])
        if self.scenario_name == "static":
            self.scenario.timeline.clear()
            self.scenario.training_timeline.clear()
        from .sim import pki

        # HTTPS, so that kubectl sends the kubeconfig's token too (exporter.sim.pki says why).
        self.pki = pki.create(self.workdir / "pki", self.host)
        self.sim = SimApiServer(token="gangscope-demo")
        await self.sim.start(self.host, ssl_context=self.pki.server_context())
        for resource in (*COLLECTOR_RESOURCES, AGENT_PODS):  # a 1.37 cluster with Kueue, the gang schedulers and job controllers
            self.sim.serve(resource)
        for obj in self.scenario.all_objects():
            self.sim.create(obj)
        kubeconfig = self.workdir / "kubeconfig"  # the token, and the CA that signed the server's certificate
        kubeconfig.write_text(yaml.safe_dump(self.sim.kubeconfig(**{"certificate-authority": str(self.pki.ca_cert)})))
        self.kubeconfig = str(kubeconfig)

        parser = argparse.ArgumentParser()
        collector_args(parser)
        args = parser.parse_args(["--listen", f"{self.host}:0", "--kubeconfig", self.kubeconfig, "--discovery-interval", "30"])
        self.collector = Collector(args)
        await self.collector.start()
        for node in self.scenario.node_names():
            await self._start_node(node)
        await self._start_training()
        self.started_at = time.monotonic()
        self._timeline = asyncio.create_task(self._run_timeline())
        self._training_timeline = asyncio.create_task(self._run_training_timeline())
        self._drops = asyncio.create_task(self._drop_links())
        if self.with_prometheus:
            self._start_prometheus()
            if self.prometheus is not None:
                self._alerts = asyncio.create_task(self._watch_alerts())

    async def _start_node(self, node: str) -> None:
        from .config import topology_from_args
        from .node.agent import Agent
        from .node.main import add_arguments as agent_args
        from .sim.gpus import UINT, ULL
        from .sim.kubelet import SimKubelet
        from .sim.nvml import Chassis, SimNvml
        from .sim.scenario import BLOCK_LABEL, RACK_LABEL, NodeHardware, gpu_uuid

        hw = self.scenario.hardware.get(node, NodeHardware())
        chassis = Chassis(hw.cluster_uuid, hw.clique_id, hw.chassis_serial, hw.slot, hw.tray) if hw.cluster_uuid else None
        sim = SimNvml(hw.scenarios, profile=hw.profile or self.sim_profile, chassis=chassis)
        for gpu in sim.gpus:
            gpu.uuid = gpu_uuid(node, gpu.index)
            if gpu.pcie_value_type == UINT:
                # The demo's agents share one process (and this machine's cores): a 32-bit counter,
                # which wraps in 67 ms at the link's rate and must be read every 50 ms, was read late
                # there every few seconds, each late read a true gap (GangscopeGPUCounterReadGaps on
                # every GPU). The demo's GPUs report 64-bit counters, read with each sample, past 2**32
                # as after hours of traffic; the 32-bit path is tested on its own (tests/test_nvml.py).
                gpu.pcie_value_type, gpu.pcie_offset = ULL, PCIE_UPTIME_BYTES
            # A link that never trained does not page (GangscopeNVLinkDown): the scenario's down
            # links train first and fail once Prometheus has seen them up (_drop_links).
            if gpu.link_down:
                self._dropped.append((node, gpu.index, set(gpu.link_down)))
                gpu.link_down.clear()
        self.nvml[node] = sim
        kubelet = SimKubelet(str(self.workdir / f"kubelet-{node}.sock"), self._kubelet_pods(node))
        await kubelet.start()
        self.kubelets[node] = kubelet
        (self.workdir / "sys" / node).mkdir(parents=True, exist_ok=True)
        parser = argparse.ArgumentParser()
        agent_args(parser)
        args = parser.parse_args([
            "--listen", f"{self.host}:0", "--kubeconfig", self.kubeconfig, "--node-name", node, "--nvml", "sim",
            "--pod-resources-socket", kubelet.socket_path, "--pod-resources-interval", "2",
            "--sysfs", str(self.workdir / "sys" / node),
            # The agent does not read Kueue Topology objects: without the levels its series carry only
            # node/host, and the block/rack recording rules and dashboards would have nothing to group by.
            "--topology-levels", f"{BLOCK_LABEL},{RACK_LABEL}",
        ])
        levels, _ = topology_from_args(args)
        agent = Agent(args, levels, nvml=lambda: sim)
        await agent.start()
        self.agents[node] = agent

    async def _start_training(self) -> None:
        """A training process per job that reports its throughput, and the Ray heads (exporter.sim.training)."""
        from .sim.training import RayHead, TrainingProcess

        for ns, workload, tokens in self.scenario.training:
            pods = tuple(p["metadata"]["name"] for p in self.scenario.pods if p["metadata"]["namespace"] == ns
                         and p["metadata"]["annotations"].get("kueue.x-k8s.io/workload", "").startswith(f"job-{workload}-"))
            process = TrainingProcess(namespace=ns, pods=pods, tokens_per_second=tokens)
            await process.start(self.host)
            self.training[(ns, workload)] = process
        for ns, cluster, pod, groups in self.scenario.ray_heads:
            head = RayHead(namespace=ns, cluster=cluster, pod=pod, placement_groups=dict(groups), tasks={"RUNNING": 4})
            await head.start(self.host)
            self.ray_heads.append(head)

    async def _run_training_timeline(self) -> None:
        """Slow the training jobs down at their moments; a lagging GPU's NVLink with its job."""
        for at, ns, workload, factor, gpu in sorted(self.scenario.training_timeline, key=lambda t: t[0]):
            await asyncio.sleep(max(0.0, self.started_at + at - time.monotonic()))
            self.training[(ns, workload)].factor = factor
            if gpu is not None:
                node, index, share = gpu
                self.nvml[node].set_traffic(index, share)
            log.info("demo_event", at=at, kind="training", name=f"{ns}/{workload}", change=f"speed {factor:.0%}")

    def _kubelet_pods(self, node: str) -> list[Any]:
        from .sim.kubelet import SimContainer, SimPod

        return [
            SimPod(ns, pod, [SimContainer(container, [("nvidia.com/gpu", uuids)])])
            for ns, pod, container, uuids in self.scenario.gpu_pods(node)
        ]

    async def _drop_links(self) -> None:
        """Take the scenario's down links down: once Prometheus has recorded them trained
        (link:gangscope_nvlink_link_up:trained), or after a few samples without Prometheus."""
        import aiohttp

        await asyncio.sleep(LINK_DROP_AFTER)
        if self.prometheus is not None:
            url = f"http://{self.host}:{self.prometheus_port}/api/v1/query"
            want = {(node, str(gpu), str(link)) for node, gpu, links in self._dropped for link in links}
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
                for _ in range(60):
                    try:
                        async with session.get(url, params={"query": "link:gangscope_nvlink_link_up:trained"}) as resp:
                            got = {(m["metric"].get("node"), m["metric"].get("gpu"), m["metric"].get("link"))
                                   for m in (await resp.json())["data"]["result"]}
                        if want <= got:
                            break
                    except (aiohttp.ClientError, TimeoutError, KeyError, ValueError):
                        pass  # not up yet
                    await asyncio.sleep(1.0)
        for node, index, links in self._dropped:
            self.nvml[node].fail_links(index, links)
            log.info("demo_event", node=node, gpu=index, links=sorted(links), change="nvlink down")

    async def _run_timeline(self) -> None:
        """Apply the scenario's changes at their times; an evicted Workload's pods go away with it."""
        for at, event, obj in sorted(self.scenario.timeline, key=lambda t: t[0]):
            await asyncio.sleep(max(0.0, self.started_at + at - time.monotonic()))
            self.apply(obj)
            log.info("demo_event", at=at, kind=obj["kind"], name=obj["metadata"]["name"], change=event)

    def apply(self, obj: dict[str, Any]) -> None:
        """One timeline change: update the object; a Workload's unhealthy nodes lose their GPUs,
        and an evicted Workload (no admission) loses its pods."""
        self.sim.update(obj)
        if obj.get("kind") != "Workload" or not obj.get("apiVersion", "").startswith("kueue.x-k8s.io/"):
            return
        unhealthy = [n["name"] for n in obj.get("status", {}).get("unhealthyNodes", [])]
        for node in unhealthy:
            for gpu in self.nvml[node].gpus:
                self.nvml[node].lose(gpu.index)
        if "admission" not in obj.get("status", {}):
            self._delete_pods_of(obj["metadata"]["namespace"], obj["metadata"]["name"])

    def _delete_pods_of(self, namespace: str, workload: str) -> None:
        gone = [p for p in self.scenario.pods
                if p["metadata"]["namespace"] == namespace and p["metadata"]["annotations"].get("kueue.x-k8s.io/workload") == workload]
        for pod in gone:
            self.scenario.pods.remove(pod)
            self.sim.delete(pod)
        for node, kubelet in self.kubelets.items():
            kubelet.set_pods(self._kubelet_pods(node))

    def _start_prometheus(self) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            print("demo: --prometheus needs Debian's prometheus package (apt-get install prometheus)", file=sys.stderr)
            return
        import socket

        with socket.socket() as s:
            s.bind((self.host, 0))
            self.prometheus_port = s.getsockname()[1]
        if self.prometheus_rules is None:
            start = time.time() - (time.monotonic() - self.started_at)  # the demo's start, in Unix seconds
            self.prometheus_rules, shipped_interval = demo_rules(self.workdir / "rules", start)
            self.prometheus_interval = self.prometheus_interval or shipped_interval
        rules = sorted(str(p) for p in self.prometheus_rules)
        interval = self.prometheus_interval or "5s"
        agent_interval = interval if _seconds(interval) >= AGENT_SCRAPE_MIN else f"{AGENT_SCRAPE_MIN}s"
        agents = [f"{self.host}:{a.port}" for a in self.agents.values()]
        training = [f"{self.host}:{p.port}" for p in self.training.values()]
        ray = [f"{self.host}:{h.port}" for h in self.ray_heads]
        config = (
            f"global: {{scrape_interval: {interval}, evaluation_interval: {interval}}}\n"
            f"rule_files: {rules!r}\n"
            "scrape_configs:\n"
            f"  - job_name: gangscope-collector\n    static_configs: [{{targets: ['{self.host}:{self.collector.port}']}}]\n"
            # The agents' pages every 2 s at most: 27 agents in this one process answered a 1 s
            # scrape late on a loaded machine (context deadline exceeded), and each missed scrape
            # marked their series stale, so every alert on them resolved and fired again.
            f"  - job_name: gangscope-agent\n    scrape_interval: {agent_interval}\n    scrape_timeout: {agent_interval}\n"
            f"    static_configs: [{{targets: {agents!r}}}]\n"
            # the jobs' own exporters and Ray's heads label their series with namespace and pod
            # (ray_io_cluster) as a PodMonitor's relabelling would: keep them
            f"  - job_name: training\n    honor_labels: true\n    static_configs: [{{targets: {training!r}}}]\n"
            f"  - job_name: ray-head\n    honor_labels: true\n    static_configs: [{{targets: {ray!r}}}]\n"
        )
        (self.workdir / "prometheus.yml").write_text(config)
        with (self.workdir / "prometheus.log").open("wb") as log_file:  # read it when Prometheus misbehaves
            self.prometheus = subprocess.Popen(
                [binary, f"--config.file={self.workdir / 'prometheus.yml'}", f"--storage.tsdb.path={self.workdir / 'tsdb'}",
                 f"--web.listen-address={self.host}:{self.prometheus_port}"],
                stdout=subprocess.DEVNULL, stderr=log_file,
            )

    @property
    def prometheus_url(self) -> str:
        return f"http://{self.host}:{self.prometheus_port}"

    async def prometheus_alerts_page(self, timeout: float = 15.0) -> str | None:
        """The alerts page of the Prometheus the demo started, once it is ready: ``/alerts``
        where its web UI is served, ``/classic/alerts`` on Debian's 2.x package, which ships
        without the React UI's assets (its ``/alerts`` answers 404); None if neither answers."""
        import aiohttp

        deadline = time.monotonic() + timeout
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
            while time.monotonic() < deadline:
                try:
                    async with session.get(f"{self.prometheus_url}/-/ready") as resp:
                        if resp.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.2)
            for path in ("/alerts", "/classic/alerts"):
                try:
                    async with session.get(self.prometheus_url + path, allow_redirects=False) as resp:
                        if resp.status == 200:
                            return self.prometheus_url + path
                except aiohttp.ClientError:
                    continue
        return None

    async def _watch_alerts(self) -> None:
        """Poll Prometheus's alerts; record (and report) each alert when it starts firing and when
        it stops (resolved: firing at the last poll, not now), so what the demo printed as firing
        is never left standing once Prometheus resolved it."""
        import aiohttp

        url = f"{self.prometheus_url}/api/v1/alerts"
        firing: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
            while True:
                await asyncio.sleep(1.0)
                try:
                    async with session.get(url) as resp:
                        alerts = (await resp.json())["data"]["alerts"]
                except (aiohttp.ClientError, TimeoutError, KeyError, ValueError):
                    continue  # not up yet, or restarting: ask again
                now: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
                for alert in alerts:
                    if alert.get("state") != "firing":
                        continue
                    labels = alert.get("labels", {})
                    name = labels.get("alertname", "")
                    now.add((name, tuple((k, labels[k]) for k in ALERT_SUBJECT if labels.get(k))))
                at = time.monotonic() - self.started_at
                for name, subject in sorted(now - firing):
                    self.fired.setdefault(name, at)
                    self.history.append((at, "firing", name, subject))
                    if self.on_alert is not None:
                        self.on_alert(at, name, subject)
                for name, subject in sorted(firing - now):
                    self.history.append((at, "resolved", name, subject))
                    if self.on_resolved is not None:
                        self.on_resolved(at, name, subject)
                firing = now

    async def wait_synced(self, timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            positions = self.collector.positions.health  # the first poll of Kueue's visibility API
            if self.collector.sources.ready()[0] and positions.synced and all(a.ready()[0] for a in self.agents.values()):
                return True
            await asyncio.sleep(0.2)
        return False

    def stages(self) -> Counter[str]:
        return Counter(wl.stage for wl in self.collector.store.workloads.values())

    async def report(self) -> str:
        """What a newcomer should look at: URLs, workloads by stage, and an explain of the stuck jobs."""
        from .explain import diagnose, render_text

        lines = ["", "gangscope demo is running", ""]
        lines.append(f"  collector   http://{self.host}:{self.collector.port}/metrics")
        first = next(iter(self.agents))
        lines.append(f"  agents      {len(self.agents)} nodes, e.g. {first}: http://{self.host}:{self.agents[first].port}/metrics")
        lines.append(f"  explain     http://{self.host}:{self.collector.port}/debug/explain?namespace=ml-team&name=mixtral-sft&pretty"
                     "   (the collector's page / lists the jobs worth a look)")
        if self.prometheus is not None:
            page = await self.prometheus_alerts_page()
            lines.append(f"  prometheus  {page or self.prometheus_url}   (alerts are printed below as they fire)")
        me = own_command()
        lines.append(f"  kubeconfig  {self.kubeconfig}")
        lines.append(f"              {me} explain NS/NAME --kubeconfig {self.kubeconfig}")
        if self.prometheus is not None:
            # --rules: the demo's shortened rules, so the training and interconnect layers ask what they decide
            rules = "".join(f" --rules {p}" for p in sorted(self.prometheus_rules or []))
            lines.append(f"              {me} explain ml-team/llama-train --kubeconfig {self.kubeconfig} "
                         f"--prometheus {self.prometheus_url}{rules}   (its interconnect, after a minute of samples)")
        lines += ["", "  workloads by stage:"]
        for stage, count in sorted(self.stages().items()):
            lines.append(f"    {stage:<18} {count}")
        gangs = self.collector.gangs
        for ns, name in (("ml-team", "mixtral-sft"), ("research", "t5-pretrain"), ("ml-team", "gpt-pretrain"),
                         ("ml-team", "qwen-pretrain"), ("research", "sd-xl"), ("research", "gemma-eval"),
                         ("ml-team", "moe-pipeline"), ("vision", "sam-finetune"), ("ml-team", "gemma-sft"),
                         ("ml-team", "llama-gb200"), ("ml-team", "llama-70b-sft")):
            try:
                doc = await diagnose(self.collector.store, gangs, ns, name)
            except LookupError:
                continue
            lines += ["", f"  $ gangscope explain {ns}/{name}", render_text(doc, colour=sys.stdout.isatty())]
        odd = [n for n, hw in self.scenario.hardware.items() if hw.profile == "gb200" and hw.clique_id != 1]
        if odd:
            lines += ["", f"  An NVL72 rack (block-3/rack-3-1): 4 GB200 nodes share one chassis and NVLink clique; {odd[0]} is",
                      "  labelled into the rack but its GPUs report another chassis and clique (gangscope_gpu_fabric_info,",
                      "  gangscope_gpu_platform_info and the GangscopeTopologyDomainSpansHardware alert)."]
        lines += ["", "  block-4: 38 GPUs free, room for three 8-GPU pods but two at most in one rack: ml-team/llama-70b-sft",
                  "  (pinned to block-4) needs three in one rack (gangscope_workload_fit, gangscope_fragmentation_blocked_workloads), and",
                  "  research/ray-tune runs spread over both racks where one would hold it (gangscope_workload_domains_spanned)."]
        if self.scenario.timeline:  # "static" plays none
            lines += ["", "  At +20 s a node of research/vit-large fails; at +40 s Kueue evicts it with NodeFailures.",
                      "  At +25 s the JobSet ml-team/llama-gb200 restarts (its 5th restart); at +45 s its Jobs are ready again."]
        lines.append("")
        return "\n".join(lines)

    async def stop(self) -> None:
        for task in (getattr(self, "_timeline", None), getattr(self, "_training_timeline", None), getattr(self, "_alerts", None),
                     getattr(self, "_drops", None)):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if self.prometheus is not None:
            self.prometheus.terminate()
            try:
                self.prometheus.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.prometheus.kill()
                self.prometheus.wait()
        for server in (*self.training.values(), *self.ray_heads):
            await server.stop()
        for agent in self.agents.values():
            await agent.stop()
        for kubelet in self.kubelets.values():
            await kubelet.stop()
        if self.collector is not None:
            await self.collector.stop()
        if getattr(self, "sim", None) is not None:  # stop() also cleans up after a start() that failed early
            await self.sim.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _seconds(duration: str) -> float:
    """Seconds of a Prometheus duration of one unit ("1s", "500ms", "2m")."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)", duration)
    if m is None:
        raise ValueError(f"unsupported duration {duration!r}")
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def own_command() -> str:
    """How to run gangscope again as this process was run, so that a printed command works in
    the user's shell: ``gangscope`` when that is the one on PATH, else the script's own path
    (``.venv/bin/gangscope`` from scripts/demo), else ``python -m exporter``."""
    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if script is not None and script.name == "gangscope":
        on_path = shutil.which("gangscope")
        return "gangscope" if on_path and Path(on_path).resolve() == script.resolve() else str(script)
    return f"{sys.executable} -m exporter"


def print_alert(at: float, name: str, subject: tuple[tuple[str, str], ...]) -> None:
    print(f"  +{at:3.0f} s  FIRING  {name}  " + " ".join(f"{k}={v}" for k, v in subject), flush=True)


def print_resolved(at: float, name: str, subject: tuple[tuple[str, str], ...]) -> None:
    print(f"  +{at:3.0f} s  resolved  {name}  " + " ".join(f"{k}={v}" for k, v in subject), flush=True)


async def _main(args: argparse.Namespace) -> int:
    demo = Demo(args.scenario, args.host, args.prometheus, on_alert=print_alert, on_resolved=print_resolved, sim_profile=args.sim_profile)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await demo.start()
    try:
        if not await demo.wait_synced():
            print("demo: the collector or an agent did not sync within 30 s", file=sys.stderr)
        print(await demo.report(), flush=True)
        try:
            async with asyncio.timeout(args.duration or None):  # not wait_for (exporter.node.nvml.NvmlSampler.start)
                await stop.wait()
        except TimeoutError:
            pass
        print("  workloads by stage at the end: " + ", ".join(f"{k}={v}" for k, v in sorted(demo.stages().items())), flush=True)
        if demo.prometheus is not None:
            fired = sorted(demo.fired.items(), key=lambda item: item[1])
            print("  alerts that fired: " + (", ".join(f"{name} (+{at:.0f} s)" for name, at in fired) or "none yet"), flush=True)
    finally:
        await demo.stop()
    return 0


def run(args: argparse.Namespace) -> int:
    start_logging("demo", args, args.log_level)
    if not simulators_installed():
        print(SIM_MISSING, file=sys.stderr)
        return 2
    return asyncio.run(_main(args))

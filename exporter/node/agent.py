"""The node agent, wired: NVML sampler, kubelet pod-resources, pods and Node watch, fabric, HTTP.

Every source runs in the background and renders its own lines into one :class:`Exposition`;
a scrape concatenates them. Sources fail independently: without NVML the fabric and pod
series are still served; without Kubernetes access (no kubeconfig, not in a cluster) the GPU
series are served with empty pod keys and only ``node``/``host`` as topology labels.

The topology levels are the collector's: ``--topology-levels`` when given, else the Kueue
``Topology`` objects, watched (a cluster without Kueue leaves that source down, not in error,
and the labels host-only); when they change, every series is re-labelled, as on a Node label
change.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from typing import Any

import structlog

from ..config import exposition_from_args
from ..health import SourceHealth
from ..kube.resources import AGENT_NODE, AGENT_PODS, TOPOLOGIES
from ..topology import TopologyLevels, parse_alias_overrides
from . import families as F
from .fabric import FabricSampler
from .lifecycle import NvmlLifecycle
from .nodeinfo import NodeTopology, TopologyLevelsWatch
from .nvml import NvmlSampler
from .podresources import DEFAULT_RESOURCES, Allocation, PodResourcesPoller, resolve_device
from .pods import PodIndex

log = structlog.get_logger(__name__)


def nvml_factory(spec: str, profile: str | None = None) -> Callable[[], Any]:
    """``real`` -> the ``pynvml`` module; ``sim[:SCENARIO,...]`` -> a :class:`SimNvml` of ``profile``."""
    if spec == "real":
        import pynvml

        return lambda: pynvml
    if spec == "sim" or spec.startswith("sim:"):
        import importlib.util

        if importlib.util.find_spec("exporter.sim") is None:
            from .. import SIMULATORS_INSTALL

            raise ValueError(f"--nvml sim needs the simulators, which the runtime image does not ship: {SIMULATORS_INSTALL}")
        from ..sim.nvml import SimNvml, parse_spec

        scenarios = parse_spec(spec)
        SimNvml(scenarios, profile=profile)  # fail at start-up on an unknown scenario name
        return lambda: SimNvml(scenarios, profile=profile)
    raise ValueError(f"--nvml wants real or sim[:SCENARIO,...], got {spec!r}")


class Agent:
    """One node's agent. ``await start()``; ``await stop()``. ``port`` is the bound HTTP port."""

    def __init__(self, args: argparse.Namespace, levels: TopologyLevels, nvml: Callable[[], Any] | None = None) -> None:
        self.args = args
        self.exposition = exposition_from_args(args)
        self.exposition.register(*F.GPU_FAMILIES, *F.POD_RESOURCES_FAMILIES)
        self.node = NodeTopology(args.node_name, levels, self._relabel, on_labels=self._node_labels)
        # No levels given: follow the Kueue Topologies, as the collector does.
        self.topologies = None if any(k.strip() for k in args.topology_levels.split(",")) \
            else TopologyLevelsWatch(self.node, parse_alias_overrides(args.topology_alias))
        self.pods = PodIndex(self.render_pods)
        self.nvml_health = SourceHealth("nvml", self.exposition)
        library = nvml or nvml_factory(args.nvml, args.sim_profile)

        def make_sampler() -> NvmlSampler:  # one per NVML initialisation (see lifecycle.py)
            return NvmlSampler(
                lambda: self.lifecycle.watched(library()), self.exposition, self.nvml_health,
                self.node.base_labels, interval=args.sample_interval, timeout=args.nvml_timeout,
                pcie_interval=args.pcie_interval, on_inventory=self.render_pods, node=args.node_name,
            )

        self.lifecycle = NvmlLifecycle(make_sampler, self.exposition, self.nvml_health, self.node.base_labels,
                                       self.render_pods, node_settled=self._node_settled)
        self.podres = PodResourcesPoller(
            args.pod_resources_socket, SourceHealth("podresources", self.exposition), self.render_pods,
            interval=args.pod_resources_interval, resources=args.gpu_resource or DEFAULT_RESOURCES,
        )
        self.fabric = FabricSampler(args.sysfs, self.exposition, SourceHealth("fabric", self.exposition),
                                    self.node.base_labels, interval=args.sample_interval)
        self._kube_healths: list[SourceHealth] = []
        self._counted: object = None
        self._tasks: list[asyncio.Task] = []
        self._client: Any = None
        self._sources: Any = None
        self._endpoint: Any = None
        self.port = 0

    @property
    def sampler(self) -> NvmlSampler:
        """The current NVML sampler (a new one after each release, see :class:`NvmlLifecycle`)."""
        return self.lifecycle.sampler

    def _node_labels(self, labels: Any) -> None:
        self.lifecycle.set_labels(labels)

    def _node_settled(self) -> bool:
        """Whether the Node's labels are known, or will not be (no access, not served, forbidden, failing)."""
        if self._sources is None:
            return True
        state = self._sources.sources.get(AGENT_NODE.source)
        return state is None or state.synced_once or state.phase in ("not_served", "forbidden", "error")

    # ----- the join series -------------------------------------------------------------------

    def render_pods(self) -> None:
        """``gangscope_gpu_pod_info`` (kubelet allocations x NVML inventory x pod metadata) and
        ``gangscope_gpu_kubelet_devices`` (what the kubelet can allocate of each GPU)."""
        inventory = self.sampler.inventory()
        by_minor = {st.dev.minor: (i, st.dev.uuid) for i, st in self.sampler.gpus.items()
                    if st.dev.uuid and st.dev.minor is not None}
        base = self.node.base_labels()
        lines: dict[str, None] = {}
        unresolved = 0
        for alloc in self.podres.allocations:
            hit = resolve_device(alloc, inventory, by_minor)
            if hit is None:
                unresolved += 1
                continue
            meta = self.pods.get(alloc.namespace, alloc.pod)
            lines[F.sample(
                F.GPU_POD_INFO, [("gpu", str(hit[0])), ("uuid", hit[1]), ("namespace", alloc.namespace), ("pod", alloc.pod),
                                 ("container", alloc.container), ("workload", meta.workload), ("podset", meta.podset),
                                 ("podgroup", meta.podgroup)], base, 1)] = None
        self.exposition.set(("gpu_pods",), {F.GPU_POD_INFO: list(lines)})
        offered: dict[tuple[int, str], int] = {}
        for resource, device in self.podres.allocatable or ():
            hit = resolve_device(Allocation("", "", "", device), inventory, by_minor)
            if hit is not None:
                offered[(hit[0], resource)] = offered.get((hit[0], resource), 0) + 1
        self.exposition.set(("gpu_allocatable",), {F.GPU_KUBELET_DEVICES: [
            F.sample(F.GPU_KUBELET_DEVICES, [("gpu", str(gpu)), ("resource", resource)], base, count)
            for (gpu, resource), count in sorted(offered.items())]})
        # Devices NVML does not know are worth one count per kubelet answer, once NVML is up.
        if unresolved and inventory and self._counted is not self.podres.allocations:
            self._counted = self.podres.allocations
            self.podres.health.parse_error(unresolved)
            log.warning("podresources_unknown_devices", count=unresolved,
                        devices=[a.device for a in self.podres.allocations][:8])

    def healths(self) -> list[SourceHealth]:
        return [self.nvml_health, self.podres.health, self.fabric.health, *self._kube_healths]

    def _relabel(self) -> None:
        log.info("node_topology_changed", levels=list(self.node.levels.keys), labels=dict(self.node.labels))
        for health in self.healths():
            health.set_labels(self.node.base_labels())
        self.sampler.relabel()
        self.lifecycle.render()
        self.fabric.render()
        self.render_pods()

    # ----- lifecycle -------------------------------------------------------------------------

    def ready(self) -> tuple[bool, str]:
        """Ready once serving: every source reports its own health; none holds readiness back."""
        down = [name for name, h in (("nvml", self.nvml_health), ("podresources", self.podres.health)) if not h.up]
        return True, "serving" + (f"; down: {', '.join(down)}" if down else "")

    async def start(self) -> None:
        from .. import serving

        post_json = await self._start_kube()
        for health in self.healths():
            health.set_labels(self.node.base_labels())
        self._endpoint = await serving.start(self.args, self.exposition, self.ready, post_json=post_json,
                                             title=f"gangscope agent on {self.args.node_name}", sources=self.healths)
        self.port = self._endpoint.port
        self._tasks = [
            asyncio.create_task(self.lifecycle.run(), name="nvml-lifecycle"),
            asyncio.create_task(self.podres.run(), name="podresources"),
            asyncio.create_task(self.fabric.run(), name="fabric"),
        ]
        if self._sources is not None:
            await self._sources.start()
        log.info("agent_started", node=self.args.node_name, port=self.port, nvml=self.args.nvml,
                 kubernetes=self._client is not None)

    async def _start_kube(self) -> Any:
        """The Node, pods (and Topology) watches, or those sources down when there is no Kubernetes access."""
        from ..kube.client import KubeClient
        from ..kube.credentials import CredentialsError
        from ..kube.sources import SourceSet, SourceSpec

        try:
            self._client = await KubeClient.create(self.args.kubeconfig, self.args.context, self.args.insecure_skip_tls_verify)
        except (CredentialsError, OSError, ValueError) as exc:
            log.warning("kubernetes_unavailable", error=str(exc))
            for resource in (AGENT_NODE, AGENT_PODS, *((TOPOLOGIES,) if self.topologies is not None else ())):
                health = SourceHealth(resource.source, self.exposition)
                health.down(f"no Kubernetes access: {exc}", error=False)
                self._kube_healths.append(health)
            return None
        node = self.args.node_name
        specs = [
            SourceSpec(AGENT_NODE, self.node, field_selector=f"metadata.name={node}"),
            SourceSpec(AGENT_PODS, self.pods, field_selector=f"spec.nodeName={node}"),
        ]
        if self.topologies is not None:  # a few cluster-scoped objects: every agent may watch them all
            specs.append(SourceSpec(TOPOLOGIES, self.topologies))
        self._sources = SourceSet(self._client, specs, self.exposition, discovery_interval=self.args.discovery_interval)
        self._kube_healths = [state.health for state in self._sources.sources.values()]
        return self._client.post_json

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._sources is not None:
            await self._sources.stop()
        await self.podres.close()
        self.lifecycle.close()
        if self._endpoint is not None:
            await self._endpoint.close()
        if self._client is not None:
            await self._client.close()

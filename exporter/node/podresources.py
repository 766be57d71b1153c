"""GPU -> pod/container from the kubelet pod-resources API (v1, gRPC over a unix socket).

Polled in the background every ``--pod-resources-interval`` (dcgm-exporter asks on every scrape,
which is what made its scrapes slow and its MIG nodes burn cores: issues #599, #625). A failed
poll marks the ``podresources`` source down, drops the channel (a restarted kubelet replaces
the socket file, so the next poll dials afresh) and keeps the last known allocations: a GPU
does not change hands while the kubelet restarts, and the pods keep running.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import structlog

from ..health import SourceHealth

log = structlog.get_logger(__name__)

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
DEFAULT_RESOURCES = ("nvidia.com/gpu", "nvidia.com/mig-*")
DRA_DRIVER = "gpu.nvidia.com"
_GKE_DEVICE = re.compile(r"^nvidia(\d+)(?:/.*)?$")  # GKE device-name ids: nvidia0, nvidia0/gi7
_DRA_DEVICE = re.compile(r"^gpu-(\d+)(?:-.*)?$")  # NVIDIA DRA driver device names: gpu-0, gpu-0-mig-...


@dataclass(frozen=True, slots=True)
class Allocation:
    """One device allocated to one container. ``device`` is the device id the kubelet reports
    (a GPU or MIG UUID, possibly with a time-slicing ``::N`` suffix, or GKE's ``nvidiaN``), or the
    DRA device name; ``dra`` says which."""

    namespace: str
    pod: str
    container: str
    device: str
    dra: bool = False


def resource_matches(name: str, patterns: Sequence[str]) -> bool:
    """Exact names, or prefixes written ``prefix*`` (``nvidia.com/mig-*`` covers every MIG profile)."""
    return any(name == p or (p.endswith("*") and name.startswith(p[:-1])) for p in patterns)


def allocations_from_response(response, resources: Sequence[str], dra_driver: str = DRA_DRIVER) -> list[Allocation]:
    """The GPU allocations in a ``ListPodResourcesResponse``, in the kubelet's order."""
    out: list[Allocation] = []
    for pod in response.pod_resources:
        for ctr in pod.containers:
            for devs in ctr.devices:
                if resource_matches(devs.resource_name, resources):
                    out.extend(Allocation(pod.namespace, pod.name, ctr.name, d) for d in devs.device_ids)
            for dyn in ctr.dynamic_resources:
                for claim in dyn.claim_resources:
                    if claim.driver_name == dra_driver:
                        out.append(Allocation(pod.namespace, pod.name, ctr.name, claim.device_name, dra=True))
    return out


def resolve_device(alloc: Allocation, inventory: Mapping[str, tuple[int, str]], uuid_by_index: Mapping[int, str]) -> tuple[int, str] | None:
    """(GPU index, device UUID) for an allocation, or None when this node's NVML does not know it.

    ``inventory`` maps GPU and MIG UUIDs to (parent index, parent UUID). The UUID returned is the
    allocated device's own (``MIG-...`` for a MIG slice) so users see exactly what was given.
    """
    if alloc.dra:
        m = _DRA_DEVICE.match(alloc.device)
        if m and int(m.group(1)) in uuid_by_index:
            return int(m.group(1)), uuid_by_index[int(m.group(1))]
        return None
    device = alloc.device.split("::", 1)[0]
    hit = inventory.get(device)
    if hit is not None:
        return hit[0], device
    m = _GKE_DEVICE.match(device)
    if m and int(m.group(1)) in uuid_by_index:
        return int(m.group(1)), uuid_by_index[int(m.group(1))]
    return None


class PodResourcesPoller:
    """Polls ``List`` in the background and calls ``on_change`` when the allocations change."""

    def __init__(
        self,
        socket_path: str,
        health: SourceHealth,
        on_change: Callable[[], None],
        interval: float = 10.0,
        resources: Iterable[str] = DEFAULT_RESOURCES,
        timeout: float = 5.0,
    ) -> None:
        self.socket_path = socket_path
        self.health = health
        self.on_change = on_change
        self.interval = interval
        self.resources = tuple(resources)
        self.timeout = timeout
        self.allocations: list[Allocation] = []
        self._channel = None
        self._stub = None

    async def run(self) -> None:
        while True:
            await self.health.guarded(self.poll_once())
            await asyncio.sleep(self.interval)

    async def poll_once(self) -> bool:
        import grpc

        from . import podresources_pb2 as pb
        from . import podresources_pb2_grpc as pb_grpc

        if self._stub is None:
            self._channel = grpc.aio.insecure_channel(f"unix://{self.socket_path}")
            self._stub = pb_grpc.PodResourcesListerStub(self._channel)
        try:
            response = await self._stub.List(pb.ListPodResourcesRequest(), timeout=self.timeout)
        except grpc.aio.AioRpcError as exc:
            detail = f"{exc.code().name}: {exc.details()}"
            if self.health.up or self.health.detail != detail:
                log.warning("podresources_list_failed", socket=self.socket_path, error=detail)
            self.health.down(detail)
            await self.close()
            return False
        allocations = allocations_from_response(response, self.resources)
        self.health.sync_ok(objects=len(response.pod_resources))
        if allocations != self.allocations:
            self.allocations = allocations
            self.on_change()
        return True

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
        self._channel = self._stub = None

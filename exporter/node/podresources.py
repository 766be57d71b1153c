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
from typing import TYPE_CHECKING, Any

import structlog

from ..health import SourceHealth

if TYPE_CHECKING:  # grpc and the messages are imported when the first poll runs
    import grpc

    from . import podresources_pb2 as pb
    from .podresources_pb2_grpc import PodResourcesListerStub

log = structlog.get_logger(__name__)

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
# nvidia.com/gpu.shared: time-slicing or MPS with renameByDefault renames the resource with the
# suffix ".shared" (NVIDIA/k8s-device-plugin api/config/v1/consts.go 26, replicas.go 40-48
# @1b826ac), each replica's id being "<uuid>::<n>" (internal/rm/devices.go 244); MIG profiles'
# shared names (nvidia.com/mig-1g.10gb.shared) fall under nvidia.com/mig-*.
DEFAULT_RESOURCES = ("nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-*")
DRA_DRIVER = "gpu.nvidia.com"
# GKE's device plugin names devices after their /dev/nvidiaN node (nvidia0, nvidia0/gi7 for MIG):
# N is the driver's minor number.
_GKE_DEVICE = re.compile(r"^nvidia(\d+)(?:/.*)?$")
# NVIDIA's DRA driver announces a GPU as gpu-<minor> and a MIG device as
# gpu-<parent minor>-mig-<profile>-<profile id>-<placement start> (NVIDIA/k8s-dra-driver-gpu
# cmd/gpu-kubelet-plugin/deviceinfo.go 106-108, mig.go 111-114 @2240711; the minor from
# nvmlDeviceGetMinorNumber, nvlib.go 458). Not the NVML index: the two differ where the driver
# probed the GPUs in another order than their PCI addresses. A MIG device maps to its parent GPU
# (the agent does not read MIG placements).
_DRA_DEVICE = re.compile(r"^gpu-(\d+)(?:-mig-.*)?$")


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


def allocations_from_response(response: pb.ListPodResourcesResponse, resources: Sequence[str],
                              dra_driver: str = DRA_DRIVER) -> list[Allocation]:
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


def resolve_device(alloc: Allocation, inventory: Mapping[str, tuple[int, str]],
                   by_minor: Mapping[int, tuple[int, str]]) -> tuple[int, str] | None:
    """(GPU index, device UUID) for an allocation, or None when this node's NVML does not know it.

    ``inventory`` maps GPU and MIG UUIDs to (parent index, parent UUID); ``by_minor`` maps each
    GPU's minor number to (index, UUID). The UUID returned is the allocated device's own
    (``MIG-...`` for a MIG slice) where the kubelet names it, the GPU's for a name by minor.
    """
    if alloc.dra:
        m = _DRA_DEVICE.match(alloc.device)
        return by_minor.get(int(m.group(1))) if m else None
    device = alloc.device.split("::", 1)[0]
    hit = inventory.get(device)
    if hit is not None:
        return hit[0], device
    m = _GKE_DEVICE.match(device)
    return by_minor.get(int(m.group(1))) if m else None


def allocatable_from_response(response: pb.AllocatableResourcesResponse,
                              resources: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """The GPU devices in an ``AllocatableResourcesResponse``: (resource name, device id), in order."""
    return tuple((devs.resource_name, d) for devs in response.devices if resource_matches(devs.resource_name, resources)
                 for d in devs.device_ids)


def allocatable_not_served(code_name: str, details: str | None) -> bool:
    """Whether a ``GetAllocatableResources`` failure means the kubelet does not serve it: UNIMPLEMENTED
    before 1.21, or the plain error of a kubelet whose KubeletPodResourcesGetAllocatable gate is off
    (alpha, off by default, in 1.21-1.22): kubernetes pkg/kubelet/apis/podresources/server_v1.go
    returns ``fmt.Errorf("Pod Resources API GetAllocatableResources disabled")``, which gRPC
    sends as UNKNOWN with that message."""
    return code_name == "UNIMPLEMENTED" or (code_name == "UNKNOWN" and "GetAllocatableResources disabled" in (details or ""))


class PodResourcesPoller:
    """Polls ``List`` (and ``GetAllocatableResources`` where the kubelet serves it) in the
    background and calls ``on_change`` when either answer changes."""

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
        # (resource, device id) the kubelet can hand out; None until answered, or where not served
        self.allocatable: tuple[tuple[str, str], ...] | None = None
        self.allocatable_served = True  # False once the kubelet said it does not serve the call
        self._channel: grpc.aio.Channel | None = None
        self._stub: PodResourcesListerStub | None = None

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
        allocatable = await self._allocatable(grpc, pb) if self.allocatable_served else None
        self.health.sync_ok(objects=len(response.pod_resources))
        changed = allocations != self.allocations or (allocatable or ()) != (self.allocatable or ())
        self.allocations, self.allocatable = allocations, allocatable
        if changed:  # an empty answer and no answer render the same
            self.on_change()
        return True

    async def _allocatable(self, grpc: Any, pb: Any) -> tuple[tuple[str, str], ...] | None:
        """The devices the kubelet can allocate; the last answer kept when the call fails, None
        (and never asked again) when the kubelet does not serve it."""
        assert self._stub is not None
        try:
            response = await self._stub.GetAllocatableResources(pb.AllocatableResourcesRequest(), timeout=self.timeout)
        except grpc.aio.AioRpcError as exc:
            if allocatable_not_served(exc.code().name, exc.details()):
                self.allocatable_served = False
                log.info("podresources_allocatable_not_served", code=exc.code().name, detail=exc.details())
                return None
            log.debug("podresources_allocatable_failed", error=f"{exc.code().name}: {exc.details()}")
            return self.allocatable
        return allocatable_from_response(response, self.resources)

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
        self._channel = self._stub = None

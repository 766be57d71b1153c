"""A real gRPC kubelet pod-resources server on a unix socket, for tests and the demo.

It serves the same ``v1.PodResourcesLister`` service the kubelet does, from the same proto,
so the agent's client code is exercised over a real socket: connection set-up, a socket that is
missing, replaced (kubelet restart), slow or failing.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import grpc

from ..node import podresources_pb2 as pb
from ..node import podresources_pb2_grpc as pb_grpc


@dataclass
class SimContainer:
    name: str
    devices: Sequence[tuple[str, Sequence[str]]] = ()  # (resource name, device ids)
    dra: Sequence[tuple[str, str, str, str, str]] = ()  # (claim, claim namespace, driver, pool, device)


@dataclass
class SimPod:
    namespace: str
    name: str
    containers: Sequence[SimContainer] = field(default_factory=list)


def to_message(pods: Iterable[SimPod]) -> pb.ListPodResourcesResponse:
    return pb.ListPodResourcesResponse(
        pod_resources=[
            pb.PodResources(
                name=p.name,
                namespace=p.namespace,
                containers=[
                    pb.ContainerResources(
                        name=c.name,
                        devices=[pb.ContainerDevices(resource_name=r, device_ids=list(ids)) for r, ids in c.devices],
                        dynamic_resources=[
                            pb.DynamicResource(
                                claim_name=claim, claim_namespace=ns,
                                claim_resources=[pb.ClaimResource(driver_name=drv, pool_name=pool, device_name=dev)],
                            )
                            for claim, ns, drv, pool, dev in c.dra
                        ],
                    )
                    for c in p.containers
                ],
            )
            for p in pods
        ]
    )


class SimKubelet(pb_grpc.PodResourcesListerServicer):
    """``await start()``, ``set_pods(...)``, ``await restart()``, ``await stop()``.

    ``delay`` makes every ``List`` slow; ``fail`` makes it answer UNAVAILABLE; ``calls`` counts them.
    ``GetAllocatableResources`` answers ``allocatable`` ((resource, device ids) pairs; by default
    every allocated device), or as a kubelet that does not serve it: ``allocatable_answer``
    ``"unimplemented"`` (before 1.21: the method does not exist) or ``"disabled"`` (1.21-1.22 with
    the KubeletPodResourcesGetAllocatable gate off: UNKNOWN, "Pod Resources API
    GetAllocatableResources disabled", kubernetes pkg/kubelet/apis/podresources/server_v1.go).
    """

    def __init__(self, socket_path: str, pods: Iterable[SimPod] = ()) -> None:
        self.socket_path = socket_path
        self.response = to_message(pods)
        self.delay = 0.0
        self.fail = False
        self.calls = 0
        self.allocatable: Sequence[tuple[str, Sequence[str]]] | None = None
        self.allocatable_answer = "served"
        self.allocatable_calls = 0
        self._server: grpc.aio.Server | None = None

    def set_pods(self, pods: Iterable[SimPod]) -> None:
        self.response = to_message(pods)

    async def List(self, request: pb.ListPodResourcesRequest,  # noqa: N802 (the gRPC method name)
                   context: grpc.aio.ServicerContext) -> pb.ListPodResourcesResponse:
        self.calls += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "simulated kubelet failure")
        return self.response

    async def GetAllocatableResources(self, request: pb.AllocatableResourcesRequest,  # noqa: N802
                                      context: grpc.aio.ServicerContext) -> pb.AllocatableResourcesResponse:
        self.allocatable_calls += 1
        if self.allocatable_answer == "unimplemented":
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "unknown method GetAllocatableResources")
        if self.allocatable_answer == "disabled":
            await context.abort(grpc.StatusCode.UNKNOWN, "Pod Resources API GetAllocatableResources disabled")
        devices: dict[str, list[str]] = {}
        if self.allocatable is not None:
            for resource, ids in self.allocatable:
                devices.setdefault(resource, []).extend(ids)
        else:
            for pod in self.response.pod_resources:
                for ctr in pod.containers:
                    for dev in ctr.devices:
                        devices.setdefault(dev.resource_name, []).extend(dev.device_ids)
        return pb.AllocatableResourcesResponse(
            devices=[pb.ContainerDevices(resource_name=r, device_ids=ids) for r, ids in devices.items()]
        )

    async def start(self) -> None:
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)
        server = grpc.aio.server()
        pb_grpc.add_PodResourcesListerServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        await server.start()
        self._server = server

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=None)
            self._server = None
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)

    async def restart(self) -> None:
        """Like a kubelet restart: the socket file disappears and a new one is created."""
        await self.stop()
        await self.start()

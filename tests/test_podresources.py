"""The pod-resources client against a real gRPC server on a unix socket."""

from __future__ import annotations

import asyncio

import pytest

from exporter.exposition import Exposition
from exporter.health import SourceHealth
from exporter.node.podresources import DEFAULT_RESOURCES, Allocation, PodResourcesPoller, resolve_device
from exporter.sim.kubelet import SimContainer, SimKubelet, SimPod

G0, G1 = "GPU-aaaa0000-0000-0000-0000-000000000000", "GPU-aaaa0001-0000-0000-0000-000000000001"
MIG = "MIG-bbbb0000-0000-0000-0000-000000000000"
INVENTORY = {G0: (0, G0), G1: (1, G1), MIG: (1, G1)}
# The driver numbered the GPUs in another order than NVML's PCI order: NVML index 0 is /dev/nvidia1.
BY_MINOR = {1: (0, G0), 0: (1, G1)}




async def polled_until_up(p: PodResourcesPoller, deadline_s: float = 30.0) -> bool:
    """Poll until a poll gets through: gRPC may still be backing off from a failed connect (its
    backoff grows with jitter, so a loaded machine can need more than two polls)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + deadline_s
    while not await p.poll_once():
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.1)
    return True


def poller(path: str, changes: list, **kw) -> PodResourcesPoller:
    health = SourceHealth("podresources", Exposition())
    return PodResourcesPoller(path, health, lambda: changes.append(1), timeout=kw.pop("timeout", 2.0), **kw)


async def test_plain_gpus_mig_dra_and_other_resources(kubelet_socket: str) -> None:
    kubelet = SimKubelet(kubelet_socket, [
        SimPod("team-a", "train-0", [
            SimContainer("trainer", [("nvidia.com/gpu", [G0, G1]), ("example.com/fpga", ["fpga0"])]),
            SimContainer("sidecar"),
        ]),
        SimPod("team-b", "infer-0", [SimContainer("server", [("nvidia.com/mig-1g.10gb", [MIG])])]),
        SimPod("team-c", "dra-0", [SimContainer("c", dra=[("gpu-claim", "team-c", "gpu.nvidia.com", "node-1", "gpu-1"),
                                                           ("nic", "team-c", "rdma.example.com", "node-1", "nic-0")])]),
        SimPod("team-d", "shared-0", [SimContainer("c", [("nvidia.com/gpu", [G0 + "::3"])])]),
    ])
    await kubelet.start()
    changes: list = []
    p = poller(kubelet_socket, changes)
    try:
        assert await p.poll_once()
        assert p.allocations == [
            Allocation("team-a", "train-0", "trainer", G0), Allocation("team-a", "train-0", "trainer", G1),
            Allocation("team-b", "infer-0", "server", MIG),
            Allocation("team-c", "dra-0", "c", "gpu-1", dra=True),
            Allocation("team-d", "shared-0", "c", G0 + "::3"),
        ]
        # gpu-1 is the DRA driver's name for minor 1: NVML index 0
        assert [resolve_device(a, INVENTORY, BY_MINOR) for a in p.allocations] == [(0, G0), (1, G1), (1, MIG), (0, G0), (0, G0)]
        assert p.health.up and p.health.objects == 4 and changes == [1]
        assert await p.poll_once()
        assert changes == [1], "an unchanged answer does not re-render"
    finally:
        await p.close()
        await kubelet.stop()


def test_gke_device_names_and_unknown_devices() -> None:
    """GKE names devices after /dev/nvidiaN: N is the minor number, not the NVML index."""
    assert resolve_device(Allocation("n", "p", "c", "nvidia1"), INVENTORY, BY_MINOR) == (0, G0)
    assert resolve_device(Allocation("n", "p", "c", "nvidia0/gi7"), INVENTORY, BY_MINOR) == (1, G1)
    assert resolve_device(Allocation("n", "p", "c", "GPU-unknown"), INVENTORY, BY_MINOR) is None
    assert resolve_device(Allocation("n", "p", "c", "gpu-9", dra=True), INVENTORY, BY_MINOR) is None


async def test_empty_node(kubelet_socket: str) -> None:
    kubelet = SimKubelet(kubelet_socket)
    await kubelet.start()
    changes: list = []
    p = poller(kubelet_socket, changes)
    try:
        assert await p.poll_once()
        assert p.allocations == [] and p.health.up and changes == []
    finally:
        await p.close()
        await kubelet.stop()


async def test_socket_missing_at_start_then_kubelet_restarts(kubelet_socket: str) -> None:
    changes: list = []
    p = poller(kubelet_socket, changes)
    assert not await p.poll_once()
    assert not p.health.up and p.health.errors == 1
    kubelet = SimKubelet(kubelet_socket, [SimPod("ns", "a", [SimContainer("c", [("nvidia.com/gpu", [G0])])])])
    await kubelet.start()
    try:
        # gRPC may still be backing off from the failed connect: the next poll gets through
        assert await polled_until_up(p)
        assert p.health.up and [a.pod for a in p.allocations] == ["a"]
        # kubelet restart: the socket file is replaced; the pod set changed meanwhile
        kubelet.set_pods([SimPod("ns", "b", [SimContainer("c", [("nvidia.com/gpu", [G1])])])])
        await kubelet.restart()
        ok = await polled_until_up(p)
        assert ok and [a.pod for a in p.allocations] == ["b"] and p.health.up
        # kubelet down: allocations are kept (pods keep their GPUs), the source is down
        await kubelet.stop()
        assert not await p.poll_once()
        assert [a.pod for a in p.allocations] == ["b"] and not p.health.up
    finally:
        await p.close()
        await kubelet.stop()


async def test_slow_and_failing_list(kubelet_socket: str) -> None:
    kubelet = SimKubelet(kubelet_socket, [SimPod("ns", "a", [SimContainer("c", [("nvidia.com/gpu", [G0])])])])
    await kubelet.start()
    changes: list = []
    p = poller(kubelet_socket, changes, timeout=0.2)
    try:
        kubelet.delay = 1.0
        assert not await p.poll_once()
        assert "DEADLINE_EXCEEDED" in p.health.detail
        kubelet.delay = 0
        kubelet.fail = True
        assert not await p.poll_once()
        assert "UNAVAILABLE" in p.health.detail and p.health.errors == 2
        kubelet.fail = False
        assert await p.poll_once() and p.health.up and len(p.allocations) == 1
    finally:
        await p.close()
        await kubelet.stop()


async def test_resource_name_patterns(kubelet_socket: str) -> None:
    kubelet = SimKubelet(kubelet_socket, [SimPod("ns", "a", [SimContainer("c", [("nvidia.com/gpu", [G0]), ("nvidia.com/mig-3g.40gb", [MIG]),
                                                                       ("gpu.example.com/x", ["x0"])])])])
    await kubelet.start()
    p = poller(kubelet_socket, [], resources=["gpu.example.com/*"])
    try:
        assert await p.poll_once()
        assert [a.device for a in p.allocations] == ["x0"]
    finally:
        await p.close()
        await kubelet.stop()


# Device names exactly as NVIDIA's DRA driver builds them: gpu-<minor> (cmd/gpu-kubelet-plugin/deviceinfo.go
# 106-108) and gpu-<parent minor>-mig-<profile, RFC 1123, dots removed>-<profile id>-<placement start>
# (mig.go 111-114) @2240711; the vfio devices (gpu-vfio-<index>, deviceinfo.go 141-143) are not GPUs NVML reads.
@pytest.mark.parametrize(("device", "want"), [
    ("gpu-0", (1, G1)),
    ("gpu-1", (0, G0)),
    ("gpu-1-mig-1g10gb-19-0", (0, G0)),
    ("gpu-0-mig-3g40gb-9-4", (1, G1)),
    ("gpu-7", None),
    ("gpu-vfio-0", None),
    ("gpu-1-foo", None),
])
def test_dra_device_names_resolve_by_minor_number(device: str, want: tuple[int, str] | None) -> None:
    assert resolve_device(Allocation("n", "p", "c", device, dra=True), INVENTORY, BY_MINOR) == want


async def test_shared_gpus_and_allocatable_resources(kubelet_socket: str) -> None:
    """Time-slicing with renameByDefault: nvidia.com/gpu.shared, replica ids <uuid>::<n>, matched by
    default; GetAllocatableResources gives what the kubelet can hand out."""
    kubelet = SimKubelet(kubelet_socket, [SimPod("ns", "a", [SimContainer("c", [("nvidia.com/gpu.shared", [G0 + "::2"])])])])
    kubelet.allocatable = [("nvidia.com/gpu.shared", [f"{G0}::{k}" for k in range(4)]),
                           ("nvidia.com/mig-1g.10gb.shared", [MIG + "::0", MIG + "::1"]), ("example.com/fpga", ["f0"])]
    await kubelet.start()
    changes: list = []
    p = poller(kubelet_socket, changes, resources=DEFAULT_RESOURCES)
    try:
        assert await p.poll_once()
        assert p.allocations == [Allocation("ns", "a", "c", G0 + "::2")]
        assert resolve_device(p.allocations[0], INVENTORY, BY_MINOR) == (0, G0)
        assert p.allocatable == (*(("nvidia.com/gpu.shared", f"{G0}::{k}") for k in range(4)),
                                 ("nvidia.com/mig-1g.10gb.shared", MIG + "::0"), ("nvidia.com/mig-1g.10gb.shared", MIG + "::1"))
        assert changes == [1]
        kubelet.allocatable = [("nvidia.com/gpu.shared", [f"{G0}::{k}" for k in range(2)])]
        assert await p.poll_once()
        assert p.allocatable == (("nvidia.com/gpu.shared", f"{G0}::0"), ("nvidia.com/gpu.shared", f"{G0}::1"))
        assert changes == [1, 1], "a changed allocatable answer re-renders"
        assert kubelet.allocatable_calls == 2
    finally:
        await p.close()
        await kubelet.stop()


@pytest.mark.parametrize("answer", ["unimplemented", "disabled"])
async def test_allocatable_not_served_is_asked_once(kubelet_socket: str, answer: str) -> None:
    """A kubelet before 1.21 (no such method) or 1.21-1.22 with its gate off: List still serves the
    mapping, the source is up, and the call is not repeated."""
    kubelet = SimKubelet(kubelet_socket, [SimPod("ns", "a", [SimContainer("c", [("nvidia.com/gpu", [G0])])])])
    kubelet.allocatable_answer = answer
    await kubelet.start()
    p = poller(kubelet_socket, [])
    try:
        assert await p.poll_once() and await p.poll_once()
        assert p.health.up and p.health.errors == 0 and len(p.allocations) == 1
        assert p.allocatable is None and not p.allocatable_served
        assert kubelet.allocatable_calls == 1 and kubelet.calls == 2
    finally:
        await p.close()
        await kubelet.stop()

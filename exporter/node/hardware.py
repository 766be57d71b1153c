"""What the GPU says about where it is: NVLink fabric membership and rack position.

Kueue's topology-aware scheduling trusts node labels. NVML reports the hardware's own view:
``nvmlDeviceGetGpuFabricInfoV`` gives the NVLink domain a GPU is in (the fabric's cluster UUID and
the clique id, an NVL72 rack or partition of one) and its health; ``nvmlDeviceGetPlatformInfo``
gives the chassis serial, slot, tray and host on Blackwell. The agent exports both, and the
rules compare them with the labels placement relied on.

Sources: ``gen/nvml/nvml.h`` in NVIDIA/go-nvml @2f9e261 (fabric states 3800-3803, health mask
fields 3824-3885, ``nvmlGpuFabricInfo_v2_t``/``_v3_t`` 3912-3960, ``nvmlPlatformInfo_v2_t``
1459-1475); how GPU feature discovery turns the same struct into the ``nvidia.com/gpu.clique``
label: NVIDIA/k8s-device-plugin @1b826ac ``internal/resource/nvml-device.go`` lines 105-118
(``uuid.FromBytes(clusterUuid).String()`` + ``.`` + the decimal clique id) and go-nvlib
``pkg/nvlib/device/device.go`` lines 272-291 (a GPU is in a fabric only when the state is
COMPLETED, the status SUCCESS and the cluster UUID not all zeros).
"""

from __future__ import annotations

import ctypes
import uuid
from dataclasses import dataclass
from typing import Any

import pynvml

FABRIC_STATES = {
    pynvml.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED: "not_supported",
    pynvml.NVML_GPU_FABRIC_STATE_NOT_STARTED: "not_started",
    pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS: "in_progress",
    pynvml.NVML_GPU_FABRIC_STATE_COMPLETED: "completed",
}

# check label -> (shift, width) of its bits in healthMask. Two-bit checks read 0 not supported,
# 1 true (the problem is present), 2 false (nvml.h 3824-3859).
HEALTH_CHECKS = {
    "degraded_bandwidth": (pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW, pynvml.NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_DEGRADED_BW),
    "route_recovery": (pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_RECOVERY, pynvml.NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_ROUTE_RECOVERY),
    "route_unhealthy": (pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY, pynvml.NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_ROUTE_UNHEALTHY),
    "access_timeout": (pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ACCESS_TIMEOUT_RECOVERY,
                       pynvml.NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_ACCESS_TIMEOUT_RECOVERY),
}
# Four bits: 0 not supported, 1 correct, 2-8 a named misconfiguration such as a wrong chassis
# serial number (nvml.h 3864-3875).
CONFIG_CHECK = ("incorrect_configuration", pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_INCORRECT_CONFIGURATION,
                pynvml.NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_INCORRECT_CONFIGURATION)


@dataclass(frozen=True)
class FabricInfo:
    """One GPU's fabric membership: ``cluster_uuid``/``clique_id`` are empty unless it is in a fabric."""

    state: str
    cluster_uuid: str = ""
    clique_id: str = ""
    health: tuple[tuple[str, int], ...] = ()  # (check, 1 problem / 0 fine), supported checks only


def read_fabric(fabric: Any, v3: bool) -> FabricInfo:
    """Decode a filled ``c_nvmlGpuFabricInfo_v2_t``/``_v3_t``.

    ``state`` is one byte in C (``typedef unsigned char nvmlGpuFabricState_t``, nvml.h 3808)
    followed by three bytes of padding before ``healthMask``; nvidia-ml-py declares it ``c_uint``
    (``_nvmlGpuFabricState_t``), so the padding, which NVML never writes, is read with it."""
    state = FABRIC_STATES.get(int(fabric.state) & 0xFF, "unknown")
    raw = bytes(fabric.clusterUuid)
    member = state == "completed" and int(fabric.status) == pynvml.NVML_SUCCESS and any(raw)
    if state == "completed" and int(fabric.status) != pynvml.NVML_SUCCESS:
        state = "error"  # the probe finished but failed: "status ... must be checked only if state returns complete"
    mask = int(fabric.healthMask)
    health: list[tuple[str, int]] = []
    for check, (shift, width) in HEALTH_CHECKS.items():
        value = (mask >> shift) & width
        if value in (1, 2):
            health.append((check, 1 if value == 1 else 0))
    name, shift, width = CONFIG_CHECK
    value = (mask >> shift) & width
    if value:
        health.append((name, 0 if value == 1 else 1))
    if v3 and int(fabric.healthSummary) in (pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY,
                                            pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY,
                                            pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY):
        health.append(("unhealthy", 0 if int(fabric.healthSummary) == pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY else 1))
    return FabricInfo(state, str(uuid.UUID(bytes=raw)) if member else "", str(int(fabric.cliqueId)) if member else "",
                      tuple(health))


@dataclass(frozen=True)
class PlatformInfo:
    """Where the GPU sits in its rack (``nvmlPlatformInfo_v2_t``)."""

    chassis_serial: str
    slot: int
    tray: int
    host_id: int


def _raw(info: Any, name: str) -> bytes:
    """A ``c_char`` field's bytes. nvidia-ml-py's structures decode bytes as UTF-8 on access, which
    fails on a byte above 127, so the field is read below that override."""
    value = ctypes.Structure.__getattribute__(info, name) if isinstance(info, ctypes.Structure) else getattr(info, name)
    return value.encode("latin-1") if isinstance(value, str) else bytes(value)


def read_platform(info: Any) -> PlatformInfo:
    """Decode a filled ``c_nvmlPlatformInfo_v2_t``; a serial that is not printable ASCII is shown in hex."""
    raw = _raw(info, "chassisSerialNumber").split(b"\0", 1)[0]
    text = raw.decode("ascii") if raw.isascii() and raw.decode("ascii").isprintable() else raw.hex()

    def byte(name: str) -> int:
        value = _raw(info, name)
        return value[0] if value else 0

    return PlatformInfo(text, byte("slotNumber"), byte("trayIndex"), byte("hostId"))

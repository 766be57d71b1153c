"""Every metric family the node agent exports, as data.

All of them carry ``node`` and the topology alias labels of the agent's own Node (block, rack,
host...), appended after the fixed labels listed here, so a per-link NVLink series lines up with
the collector's per-domain series in one query. Per-link series never repeat pod labels: the
join to pods, workloads and gangs goes through ``gangscope_gpu_pod_info`` on ``(node, gpu)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..exposition import Family

GPU_INFO = Family(
    "gangscope_gpu_info", "info",
    "GPU identity from NVML (value 1).",
    ("gpu", "uuid", "name", "pci_bus_id", "driver_version", "node"), topology=True,
)
GPU_UP = Family(
    "gangscope_gpu_up", "gauge",
    "Whether the GPU answered its last NVML sample (0: lost, failing or timed out).",
    ("gpu", "uuid", "node"), topology=True,
)
GPU_ERRORS = Family(
    "gangscope_gpu_errors_total", "counter",
    "NVML calls on this GPU that failed or timed out (not counting fields it does not support).",
    ("gpu", "uuid", "node"), topology=True,
)
MIG_INFO = Family(
    "gangscope_gpu_mig_device_info", "info",
    "A MIG device and the parent GPU it is carved from (value 1).",
    ("gpu", "uuid", "mig_uuid", "gpu_instance", "node"), topology=True,
)
GPU_POD_INFO = Family(
    "gangscope_gpu_pod_info", "info",
    "The container a GPU (or MIG device, uuid MIG-...) is allocated to, with its Kueue workload, "
    "podset and PodGroup; join other GPU series to it on (node, gpu).",
    ("gpu", "uuid", "namespace", "pod", "container", "workload", "podset", "podgroup", "node"), topology=True,
)

NVLINK_TX = Family(
    "gangscope_nvlink_transmit_bytes_total", "counter",
    "NVLink data bytes transmitted on the link: NVML field 202 (bytes) on NVLink5 GPUs, else field 138 (KiB "
    "converted to bytes).",
    ("gpu", "link", "node"), topology=True,
)
NVLINK_RX = Family(
    "gangscope_nvlink_receive_bytes_total", "counter",
    "NVLink data bytes received on the link: NVML field 204 (bytes) on NVLink5 GPUs, else field 139 (KiB "
    "converted to bytes).",
    ("gpu", "link", "node"), topology=True,
)
NVLINK_RAW_TX = Family(
    "gangscope_nvlink_raw_transmit_bytes_total", "counter",
    "NVLink bytes transmitted including protocol overhead (NVML field 140).",
    ("gpu", "link", "node"), topology=True,
)
NVLINK_RAW_RX = Family(
    "gangscope_nvlink_raw_receive_bytes_total", "counter",
    "NVLink bytes received including protocol overhead (NVML field 141).",
    ("gpu", "link", "node"), topology=True,
)
NVLINK_UP = Family(
    "gangscope_nvlink_link_up", "gauge",
    "Whether the NVLink link is trained: 1 for active or sleep (an idle link in its low-power state, NVML field "
    "165 state 2), 0 for inactive or disabled.",
    ("gpu", "link", "node"), topology=True,
)
NVLINK_VERSION = Family(
    "gangscope_nvlink_version", "gauge",
    "NVLink version of the link as NVML's enum (1=1.0, 2=2.0, 3=2.2, 4=3.0, 5=3.1, 6=4.0, 7=5.0, 8=6.0).",
    ("gpu", "link", "node"), topology=True,
)
NVLINK_ERRORS = Family(
    "gangscope_nvlink_errors_total", "counter",
    "NVLink error counts per link. From NVML fields 161-163 (type replay, recovery, crc) where supported, on "
    "NVLink5 from fields 213-215, 219, 221 (link_recovery_successful, link_recovery_failed, link_recovery, "
    "effective, symbol), else nvmlDeviceGetNvLinkErrorCounter (replay, recovery, crc_flit, crc_data, ecc).",
    ("gpu", "link", "type", "node"), topology=True,
)

PCIE_TX = Family(
    "gangscope_pcie_transmit_bytes_total", "counter",
    "PCIe bytes transmitted by the GPU: NVML field 197, read every gangscope_pcie_read_interval_seconds where "
    "the driver reports it 32-bit (so that no wrap is missed) and with each sample where 64-bit; on GPUs "
    "without the field (gangscope_gpu_field_supported with family pcie_bytes at 0) the 20 ms "
    "nvmlDeviceGetPcieThroughput rate integrated over time, an estimate.",
    ("gpu", "node"), topology=True,
)
PCIE_RX = Family(
    "gangscope_pcie_receive_bytes_total", "counter",
    "PCIe bytes received by the GPU: NVML field 198, read as field 197 is (see "
    "gangscope_pcie_transmit_bytes_total), or the integrated nvmlDeviceGetPcieThroughput rate.",
    ("gpu", "node"), topology=True,
)
PCIE_READ_INTERVAL = Family(
    "gangscope_pcie_read_interval_seconds", "gauge",
    "How often the GPU's 32-bit PCIe byte counters are read between samples: 3/4 of the time the link's "
    "maximum rate (generation x width) takes to wrap them. Absent for 64-bit counters, read with each sample.",
    ("gpu", "node"), topology=True,
)
PCIE_GAPS = Family(
    "gangscope_pcie_read_gaps_total", "counter",
    "PCIe counter reads too far apart to count every wrap (further apart than one wrap at the link's maximum "
    "rate, a step beyond 3/4 of the range, or the first read after the GPU was lost): the wraps across each are "
    "estimated from NVML's 20 ms throughput, so the byte totals hold an estimate there.",
    ("gpu", "node"), topology=True,
)
NVLINK_GAPS = Family(
    "gangscope_nvlink_read_gaps_total", "counter",
    "Reads of the GPU's NVLink byte counters, over all links, too far apart to count every wrap, on a GPU whose "
    "driver reports them 32-bit or whose 64-bit-typed values have not passed 2**32 yet (absent once they are known "
    "to be 64-bit): no wrap is added across them, so the NVLink byte totals are a lower bound. Byte counters that "
    "can wrap within a sample (202/204) are read every 50 ms between samples. One series per GPU.",
    ("gpu", "node"), topology=True,
)
PCIE_THROUGHPUT = Family(
    "gangscope_pcie_throughput_bytes_per_second", "gauge",
    "PCIe throughput over NVML's 20 ms window at the last sample (direction transmit or receive); "
    "exported only for GPUs without the PCIe byte counters. A spot sample, not an average.",
    ("gpu", "direction", "node"), topology=True,
)
PCIE_GENERATION = Family(
    "gangscope_pcie_link_generation", "gauge",
    "PCIe link generation (kind current or max); current below max means a down-trained link.",
    ("gpu", "kind", "node"), topology=True,
)
PCIE_WIDTH = Family(
    "gangscope_pcie_link_width", "gauge",
    "PCIe link width in lanes (kind current or max).",
    ("gpu", "kind", "node"), topology=True,
)

FIELD_SUPPORTED = Family(
    "gangscope_gpu_field_supported", "gauge",
    "Whether the GPU answers an NVML field family (1) or reports it unsupported (0), decided per device from "
    "each field's return code. Families: nvlink_throughput (138/139), nvlink_raw_throughput (140/141), "
    "nvlink5_bytes (202/204), nvlink_state (165), nvlink_version (166), nvlink_errors (161-163), "
    "nvlink5_errors (213-221), pcie_bytes (197/198), and the calls nvlink_error_counter_api, pcie_throughput, "
    "pcie_link, fabric (nvmlDeviceGetGpuFabricInfoV), platform (nvmlDeviceGetPlatformInfo).",
    ("gpu", "family", "node"), topology=True,
)
FABRIC_INFO = Family(
    "gangscope_gpu_fabric_info", "info",
    "The GPU's NVLink fabric membership from nvmlDeviceGetGpuFabricInfoV (value 1): cluster_uuid and clique_id "
    "name its multi-node NVLink domain (an NVL72 rack or partition; GPU feature discovery labels the node "
    "nvidia.com/gpu.clique=<cluster_uuid>.<clique_id>), empty unless state is completed and the GPU is in a "
    "fabric; state not_started, in_progress, completed or error.",
    ("gpu", "uuid", "cluster_uuid", "clique_id", "state", "node"), topology=True,
)
FABRIC_HEALTH = Family(
    "gangscope_gpu_fabric_health", "gauge",
    "NVLink fabric health checks of the GPU from the fabric info's health mask: 1 when the problem is present. "
    "Checks degraded_bandwidth, route_recovery, route_unhealthy, access_timeout, incorrect_configuration, and "
    "unhealthy (the driver's summary); only those the GPU supports.",
    ("gpu", "check", "node"), topology=True,
)
PLATFORM_INFO = Family(
    "gangscope_gpu_platform_info", "info",
    "Where the GPU sits, from nvmlDeviceGetPlatformInfo (Blackwell and newer; value 1): the chassis (rack) "
    "serial number, the slot in the chassis, the compute tray index and the host within the slot.",
    ("gpu", "chassis_serial", "slot", "tray", "host_id", "node"), topology=True,
)

GPU_KUBELET_DEVICES = Family(
    "gangscope_gpu_kubelet_devices", "gauge",
    "Devices of the GPU the kubelet can allocate under an extended resource (pod-resources "
    "GetAllocatableResources): 1 for a whole GPU, the replica count of a shared GPU (nvidia.com/gpu.shared, "
    "time-slicing), the MIG devices of each nvidia.com/mig-* profile. Absent where the kubelet does not serve "
    "the call or offers no device of the GPU (DRA allocates it). About one series per GPU.",
    ("gpu", "resource", "node"), topology=True,
)
NVML_RELEASED = Family(
    "gangscope_nvml_released", "gauge",
    "1 while the agent has let go of NVML (workers stopped, nvmlShutdown called, no GPU series) because the "
    "node's labels say the GPU operator is replacing the driver (reason driver_upgrade) or reconfiguring MIG "
    "(reason mig_reconfiguration); 0 with reason empty while it holds NVML. One series per node.",
    ("reason", "node"), topology=True,
)

FABRIC_TX = Family(
    "gangscope_fabric_port_transmit_bytes_total", "counter",
    "InfiniBand/RoCE port bytes transmitted (sysfs port_xmit_data, 4-byte words converted to bytes).",
    ("device", "port", "node"), topology=True,
)
FABRIC_RX = Family(
    "gangscope_fabric_port_receive_bytes_total", "counter",
    "InfiniBand/RoCE port bytes received (sysfs port_rcv_data, 4-byte words converted to bytes).",
    ("device", "port", "node"), topology=True,
)
FABRIC_RATE = Family(
    "gangscope_fabric_port_rate_bytes_per_second", "gauge",
    "Signalling rate of the InfiniBand/RoCE port (sysfs rate) in bytes per second.",
    ("device", "port", "node"), topology=True,
)
FABRIC_UP = Family(
    "gangscope_fabric_port_up", "gauge",
    "Whether the InfiniBand/RoCE port state is ACTIVE (1) or not (0).",
    ("device", "port", "node"), topology=True,
)
NIC_TX = Family(
    "gangscope_nic_transmit_bytes_total", "counter",
    "Bytes transmitted by a physical network interface (sysfs statistics/tx_bytes).",
    ("interface", "node"), topology=True,
)
NIC_RX = Family(
    "gangscope_nic_receive_bytes_total", "counter",
    "Bytes received by a physical network interface (sysfs statistics/rx_bytes).",
    ("interface", "node"), topology=True,
)

GPU_FAMILIES = (
    GPU_INFO, GPU_UP, GPU_ERRORS, MIG_INFO, GPU_POD_INFO, FIELD_SUPPORTED, FABRIC_INFO, FABRIC_HEALTH, PLATFORM_INFO,
    NVLINK_TX, NVLINK_RX, NVLINK_RAW_TX, NVLINK_RAW_RX, NVLINK_UP, NVLINK_VERSION, NVLINK_ERRORS,
    PCIE_TX, PCIE_RX, PCIE_READ_INTERVAL, PCIE_GAPS, NVLINK_GAPS, PCIE_THROUGHPUT, PCIE_GENERATION, PCIE_WIDTH,
)
# NVML field id -> the byte counter family its link series belong to
NVLINK_BYTE_FAMILIES = {
    138: NVLINK_TX, 139: NVLINK_RX, 202: NVLINK_TX, 204: NVLINK_RX, 140: NVLINK_RAW_TX, 141: NVLINK_RAW_RX,
}
FABRIC_FAMILIES = (FABRIC_TX, FABRIC_RX, FABRIC_RATE, FABRIC_UP, NIC_TX, NIC_RX)
LIFECYCLE_FAMILIES = (NVML_RELEASED,)
POD_RESOURCES_FAMILIES = (GPU_KUBELET_DEVICES,)
FAMILIES = GPU_FAMILIES + FABRIC_FAMILIES + LIFECYCLE_FAMILIES + POD_RESOURCES_FAMILIES


def series_prefix(family: Family, labels: Iterable[tuple[str, str]], base: Sequence[tuple[str, str]]) -> str:
    """``name{labels} `` ready for a value: the agent renders thousands of samples a second with
    unchanged labels, so it builds each prefix once and only formats values per sample. ``labels``
    are the family's own by name, ``base`` the node's (``node``, then the topology labels)."""
    node, *levels = base
    return family.prefix(dict([*labels, node]), levels)


def sample(family: Family, labels: Iterable[tuple[str, str]], base: Sequence[tuple[str, str]], value: float) -> str:
    """One line of an agent family: its own labels by name, then the node's (see :func:`series_prefix`)."""
    node, *levels = base
    return family.sample(dict([*labels, node]), value, levels)

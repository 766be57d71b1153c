"""GPU generations for the simulated NVML: what each one answers, per field, and how busy it is.

A profile is data: the product, its NVLink and PCIe links, the return code and ``valueType`` of
every field the agent asks for, which auxiliary calls exist, and the traffic a busy training job
puts on the links. :class:`exporter.sim.nvml.SimNvml` answers from it; nothing in the agent
branches on a profile name, so a test that passes on every profile shows that the agent decides
from what the library says, as it must on real hardware.

Sources (what each value rests on; "assumption" marks what no source settles, and
``scripts/gpu-smoke`` prints the real answer on a lent machine):

- Field ids, units, the per-link ``scopeId`` and ``valueType`` enum: ``gen/nvml/nvml.h`` in
  NVIDIA/go-nvml @2f9e261 (lines 2596-2605: 138-141 are KiB "throughput" counters per link;
  2645-2668: 161-163 "unsupported for Blackwell+"; 2735-2736: 197/198 "Value can be wrapped";
  2741-2786: 201-222 the NVLink5 counters; 9388-9392: link state 2 = SLEEP; 9396-9406: NVLink
  version enum, 4 = 3.0, 6 = 4.0, 7 = 5.0). NVML's change log (r570) removes 161-163 and
  ``nvmlDeviceGetNvLinkErrorCounter`` on Blackwell.
- ``valueType`` per field: NVIDIA's own mock library, NVIDIA/k8s-test-infra @3b2b865
  ``pkg/gpu/mocknvml/engine/nvlink_fields.go`` (138-141, 161-163, 202/204, 213-221: unsigned
  long long; 91, 165, 166: unsigned int).
- Link counts, NVLink per-link rates, PCIe generation and width: the same repository's
  ``pkg/gpu/mocknvml/configs/mock-nvml-config-{a100,h100,b200,gb200}.yaml`` (A100: 12 links at
  25.8 GB/s per direction, PCIe Gen4 x16; H100: 18 at 26.6 GB/s, Gen5 x16; B200/GB200: 18 at
  53.1 GB/s). GB200 nodes have 4 GPUs: real dcgm-exporter output of an EKS p6e-gb200 node
  (``tests/fixtures/dcgm/dcgm-03-gb200-eks-sampled-idle.prom``); drivers 580.105.08 (H100) and
  580.126.20 (GB200) from the same real files.
- Fabric and platform info: nvml.h ``nvmlGpuFabricInfo_v2_t``/``_v3_t`` (lines 3912-3960,
  versions v2 = 0x02000024 and v3 = 0x03000028 as nvidia-ml-py computes them) and
  ``nvmlPlatformInfo_v2_t`` (1459-1475, "For Blackwell or newer"); the mock library's
  ``bridge/fabric.go`` answers ``ARGUMENT_VERSION_MISMATCH`` to any other version and
  ``engine/platform.go`` declares platform info only for NVL72 profiles.
- Assumptions: 197/198 are 32-bit (``valueType`` unsigned int) on A100-H200-B200 as the issue
  measured, and 64-bit on GB200 (so one profile takes each path); A100 answers NOT_SUPPORTED to
  197/198 (exercising the 20 ms ``nvmlDeviceGetPcieThroughput`` fallback) and INVALID_ARGUMENT to
  the NVLink5 fields, the quirk Datadog's GPU check records for older architectures
  (DataDog/datadog-agent ``pkg/collector/corechecks/gpu/nvidia/nvlink_fields.go``,
  ``markUnsupportedOnInvalidArgument``); GB200 answers NOT_SUPPORTED to 138-141 so that the
  NVLink5 byte counters 202/204 are read instead, while B200 answers both; a B200's PCIe link is
  limited to Gen5 by its HGX host. Busy traffic is half the links' rate for NVLink and, for PCIe,
  the 40 GB/s per direction of GPUDirect traffic the issue names.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pynvml

GB = 1_000_000_000

# Field ids by the family the agent asks for (nvml.h lines cited in the module docstring).
NVLINK_DATA = (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX)
NVLINK_RAW = (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX, pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX)
NVLINK5_BYTES = (pynvml.NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES, pynvml.NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES)
NVLINK_DL_ERRORS = (pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY, pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY,
                    pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_CRC)
NVLINK5_ERRORS = (
    pynvml.NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_SUCCESSFUL_EVENTS,
    pynvml.NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS,
    pynvml.NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS,
    pynvml.NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS,
    pynvml.NVML_FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS,
)
PCIE_BYTES = (pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES)
LINK_STATE, LINK_VERSION = pynvml.NVML_FI_DEV_NVLINK_GET_STATE, pynvml.NVML_FI_DEV_NVLINK_GET_VERSION

ULL, UINT = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
NOT_SUPPORTED, INVALID_ARGUMENT = pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_INVALID_ARGUMENT
FUNCTION_NOT_FOUND = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND


@dataclass(frozen=True)
class GpuProfile:
    """One GPU generation as NVML presents it; see the module docstring for the sources."""

    name: str
    product: str
    gpus: int  # per node
    links: int
    nvlink_version: int  # NVML's enum (nvmlNvlinkVersion_t)
    link_rate: float  # bytes/s per link and direction at full speed
    pcie_gen: int  # the link's maximum as nvmlDeviceGetMaxPcieLinkGeneration reports it (device and host)
    pcie_width: int
    pcie_rate: float  # busy bytes/s per direction
    pcie_value_type: int | None  # valueType of 197/198; None: the fields answer NOT_SUPPORTED
    driver: str
    pci_device_id: int
    # field id -> NVML return code for fields this generation does not answer
    unsupported: dict[int, int] = field(default_factory=dict)
    error_counter_api: bool = True  # nvmlDeviceGetNvLinkErrorCounter (removed on Blackwell)
    fabric: str = "none"  # none: NOT_SUPPORTED; local: completed, zero cluster UUID (HGX); nvl72: a multi-node clique
    fabric_v3: bool = True  # the driver knows nvmlGpuFabricInfo_v3_t
    platform: int | None = NOT_SUPPORTED  # None: answers; else the return code (FUNCTION_NOT_FOUND: no symbol)
    sleeping_links: tuple[int, ...] = ()  # links in state 2 (SLEEP): up, idle

    def field_error(self, fid: int) -> int | None:
        """The return code of a field this generation does not answer, else None."""
        if fid in PCIE_BYTES and self.pcie_value_type is None:
            return NOT_SUPPORTED
        return self.unsupported.get(fid)


def _codes(code: int, *groups: tuple[int, ...]) -> dict[int, int]:
    return {fid: code for group in groups for fid in group}


PROFILES: dict[str, GpuProfile] = {
    "a100": GpuProfile(
        "a100", "NVIDIA A100-SXM4-80GB", gpus=8, links=12, nvlink_version=4, link_rate=25.781 * GB,
        pcie_gen=4, pcie_width=16, pcie_rate=9 * GB, pcie_value_type=None, driver="535.230.02", pci_device_id=0x20B210DE,
        unsupported={**_codes(INVALID_ARGUMENT, NVLINK5_ERRORS, NVLINK5_BYTES)},
        fabric="none", fabric_v3=False, platform=FUNCTION_NOT_FOUND,
    ),
    "h100": GpuProfile(
        "h100", "NVIDIA H100 80GB HBM3", gpus=8, links=18, nvlink_version=6, link_rate=26.562 * GB,
        pcie_gen=5, pcie_width=16, pcie_rate=40 * GB, pcie_value_type=UINT, driver="570.124.06", pci_device_id=0x233010DE,
        unsupported=_codes(NOT_SUPPORTED, NVLINK5_ERRORS, NVLINK5_BYTES), fabric="local",
    ),
    "h200": GpuProfile(
        "h200", "NVIDIA H200", gpus=8, links=18, nvlink_version=6, link_rate=26.562 * GB,
        pcie_gen=5, pcie_width=16, pcie_rate=40 * GB, pcie_value_type=UINT, driver="580.105.08", pci_device_id=0x233510DE,
        unsupported=_codes(NOT_SUPPORTED, NVLINK5_ERRORS, NVLINK5_BYTES), fabric="local",
    ),
    "b200": GpuProfile(
        "b200", "NVIDIA B200", gpus=8, links=18, nvlink_version=7, link_rate=53.125 * GB,
        pcie_gen=5, pcie_width=16, pcie_rate=40 * GB, pcie_value_type=UINT, driver="580.126.20", pci_device_id=0x290110DE,
        unsupported=_codes(NOT_SUPPORTED, NVLINK_DL_ERRORS), error_counter_api=False, fabric="local",
        sleeping_links=(17,),
    ),
    "gb200": GpuProfile(
        "gb200", "NVIDIA GB200", gpus=4, links=18, nvlink_version=7, link_rate=53.125 * GB,
        pcie_gen=6, pcie_width=16, pcie_rate=20 * GB, pcie_value_type=ULL, driver="580.126.20", pci_device_id=0x294110DE,
        unsupported=_codes(NOT_SUPPORTED, NVLINK_DL_ERRORS, NVLINK_DATA, NVLINK_RAW), error_counter_api=False,
        fabric="nvl72", platform=None, sleeping_links=(17,),
    ),
}
DEFAULT_PROFILE = "h100"

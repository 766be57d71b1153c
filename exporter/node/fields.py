"""The NVML field families the agent reads, and the rules for what each answer means.

Every rule cites its source: ``nvml.h`` is ``gen/nvml/nvml.h`` in NVIDIA/go-nvml @2f9e261 (the
header nvidia-ml-py 13.615 mirrors), "Datadog" is DataDog/datadog-agent @022d2dc
``pkg/collector/corechecks/gpu/nvidia/nvlink_fields.go`` (the Agent's NVML GPU check).

A family is the unit of support: ``gangscope_gpu_field_supported{gpu,family}`` is 1 when any of
its fields answered on any link of that GPU, 0 when every one answered "unsupported". Support is
decided per device, never per generation, from the return codes (nvml.h line 3017: "This must
be checked before looking at value"), and remembered: a field that answered unsupported is not
asked for again on that GPU (Datadog, nvlink_fields.go getPortMetrics: "unsupported fields are
returned from the start, and their status does not change").
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import pynvml


@dataclass(frozen=True)
class FieldFamily:
    """A group of field ids read together and supported together."""

    name: str  # the ``family`` label value
    ids: tuple[int, ...]
    per_link: bool = True  # scopeId = link id (nvml.h lines 2598, 2647, 2673, 2745)
    # INVALID_ARGUMENT means "unsupported" for these: Datadog marks fields on which "older
    # architectures return INVALID_ARGUMENT immediately instead of cleanly reporting
    # ERROR_NOT_SUPPORTED" (nvlink_fields.go lines 26-29, markUnsupportedOnInvalidArgument, set for
    # NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS on line 79). The NVLink5 counters 201-222 are the fields
    # those architectures predate, so the whole NVLink5 group is treated so.
    invalid_argument_is_unsupported: bool = False


# 138-141: cumulative KiB per link (nvml.h 2596-2605; Datadog: "they report cumulative bytes
# transferred", nvlink_fields.go lines 46-47), valueType unsigned long long.
NVLINK_DATA = FieldFamily("nvlink_throughput", (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
                                                pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX))
NVLINK_RAW = FieldFamily("nvlink_raw_throughput", (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX,
                                                   pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX))
# 202/204: "Total Tx/Rx bytes on the link in NVLink5" (nvml.h 2748-2750), in bytes; read only
# where 138/139 are unsupported (Datadog lists them as the "alternative throughput fields", lines 53-55).
NVLINK5_BYTES = FieldFamily("nvlink5_bytes", (pynvml.NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES,
                                              pynvml.NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES),
                            invalid_argument_is_unsupported=True)
# 165: 0 inactive, 1 active, 2 sleep (nvml.h 9388-9392); 166: nvmlNvlinkVersion_t (9396-9406).
NVLINK_STATE = FieldFamily("nvlink_state", (pynvml.NVML_FI_DEV_NVLINK_GET_STATE,))
NVLINK_VERSION = FieldFamily("nvlink_version", (pynvml.NVML_FI_DEV_NVLINK_GET_VERSION,))
# 161-163: data-link-layer errors per link, "unsupported for Blackwell+. Please use
# NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_*" (nvml.h 2645-2668).
NVLINK_ERRORS = FieldFamily("nvlink_errors", (pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY,
                                              pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY,
                                              pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_CRC))
# 213-215 link recovery events, 219 effective errors, 221 symbol errors (nvml.h 2760-2777); the
# BER fields 220/222 are packed mantissa/exponent, not counters, and 216-218 are deprecated.
NVLINK5_ERRORS = FieldFamily("nvlink5_errors", (
    pynvml.NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_SUCCESSFUL_EVENTS,
    pynvml.NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS,
    pynvml.NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS,
    pynvml.NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS,
    pynvml.NVML_FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS,
), invalid_argument_is_unsupported=True)
# 197/198: "PCIe transmit/receive bytes. Value can be wrapped." (nvml.h 2735-2736): the width is
# whatever valueType says, so the reader decides per device how often to read them.
PCIE_BYTES = FieldFamily("pcie_bytes", (pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES,
                                        pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES), per_link=False)
FIELD_FAMILIES = (NVLINK_DATA, NVLINK_RAW, NVLINK5_BYTES, NVLINK_STATE, NVLINK_VERSION, NVLINK_ERRORS, NVLINK5_ERRORS,
                  PCIE_BYTES)
FAMILY_OF = {fid: fam for fam in FIELD_FAMILIES for fid in fam.ids}

# Families served by their own calls rather than field values.
ERROR_COUNTER_API = "nvlink_error_counter_api"  # nvmlDeviceGetNvLinkErrorCounter: only where 161-163 are unsupported
PCIE_THROUGHPUT = "pcie_throughput"  # nvmlDeviceGetPcieThroughput: only where 197/198 are unsupported
PCIE_LINK = "pcie_link"  # nvmlDeviceGetCurr/MaxPcieLinkGeneration/Width
FABRIC = "fabric"  # nvmlDeviceGetGpuFabricInfoV ("For Hopper or newer", nvml.h 7831-7853)
PLATFORM = "platform"  # nvmlDeviceGetPlatformInfo ("For Blackwell or newer", nvml.h 8580-8595)

# The ``type`` label of gangscope_nvlink_errors_total, by source.
ERROR_TYPES = {
    pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY: "replay",
    pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY: "recovery",
    pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_CRC: "crc",
    pynvml.NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_SUCCESSFUL_EVENTS: "link_recovery_successful",
    pynvml.NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS: "link_recovery_failed",
    pynvml.NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS: "link_recovery",
    pynvml.NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS: "effective",
    pynvml.NVML_FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS: "symbol",
}
LEGACY_ERROR_TYPES = (  # nvmlNvLinkErrorCounter_t (nvml.h), read per link and counter
    ("replay", pynvml.NVML_NVLINK_ERROR_DL_REPLAY),
    ("recovery", pynvml.NVML_NVLINK_ERROR_DL_RECOVERY),
    ("crc_flit", pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT),
    ("crc_data", pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA),
    ("ecc", pynvml.NVML_NVLINK_ERROR_DL_ECC_DATA),
)

# Link states that mean "trained and usable": ACTIVE, and SLEEP, the low-power state of an idle
# good link (nvml.h 9390-9392), which wakes on traffic.
LINK_UP_STATES = frozenset({pynvml.NVML_NVLINK_STATE_ACTIVE, pynvml.NVML_NVLINK_STATE_SLEEP})

# valueType -> (union member, counter range); nvml.h lines 648-660 and the nvmlValue_t union.
VALUE_TYPES = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: ("dVal", 0),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: ("uiVal", 2**32),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: ("ulVal", 2**64),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: ("ullVal", 2**64),
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: ("sllVal", 0),
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: ("siVal", 0),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: ("usVal", 2**16),
}


# The layout of nvmlFieldValue_t (nvml.h lines 3010-3019): fieldId, scopeId, timestamp (us),
# latencyUsec, valueType, nvmlReturn, then the 8-byte value union. Answers are unpacked from the
# returned array's bytes in one call instead of through ctypes attributes (five per entry, 90
# entries per GPU each second, and the fast PCIe reads 20 times a second per GPU).
FIELD_VALUE = struct.Struct("<IIqqIIQ")
UNION_MASK = {pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: 2**32 - 1, pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: 2**16 - 1}
SIGNED_BITS = {pynvml.NVML_VALUE_TYPE_SIGNED_INT: 32, pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: 64}
DOUBLE = struct.Struct("<d")


def unpack_fields(values: object) -> list[tuple[int, int, int, int]]:
    """(timestamp us, nvmlReturn, value, counter range) of each entry of a field-value array, the
    value read as its ``valueType``'s union member: a member narrower than 64 bits masked to its
    width (NVML writes only those bytes), signed ones sign-extended, a double truncated to an int."""
    out = []
    for _, _, ts, _, vtype, ret, raw in FIELD_VALUE.iter_unpack(values):  # type: ignore[arg-type]  # a ctypes array is a buffer
        mask = UNION_MASK.get(vtype)
        if mask is not None:
            raw &= mask
        elif vtype in SIGNED_BITS:
            bits = SIGNED_BITS[vtype]
            raw &= (1 << bits) - 1
            raw -= (raw >> (bits - 1)) << bits
        elif vtype == pynvml.NVML_VALUE_TYPE_DOUBLE:
            raw = int(DOUBLE.unpack(raw.to_bytes(8, "little"))[0])
        out.append((ts, ret, raw, VALUE_TYPES.get(vtype, ("", 2**64))[1]))
    return out


def field_value(fv: object) -> tuple[float, int]:
    """A successful ``c_nvmlFieldValue_t``'s value and its counter range (0: not a counter type)."""
    member, modulus = VALUE_TYPES.get(fv.valueType, ("ullVal", 2**64))  # type: ignore[attr-defined]
    return getattr(fv.value, member), modulus  # type: ignore[attr-defined]


def unsupported(family: FieldFamily, code: int) -> bool:
    """Whether a field's return code says "this GPU does not have it" (as opposed to a failure)."""
    return code == pynvml.NVML_ERROR_NOT_SUPPORTED or (
        code == pynvml.NVML_ERROR_INVALID_ARGUMENT and family.invalid_argument_is_unsupported)


# PCIe signalling rate per lane and generation, in GT/s (PCI-SIG; Gen6 is 64 GT/s PAM4). One
# transfer carries at most one bit per lane, so rate / 8 x width is an upper bound on bytes/s in
# each direction, whatever the encoding overhead.
PCIE_GT_PER_LANE = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0, 7: 128.0}
PCIE_FALLBACK_RATE = 64.0e9 / 8 * 16  # Gen6 x16, when NVML does not tell the link's maximum


def pcie_max_rate(gen: int | None, width: int | None) -> float:
    """Upper bound on one direction's PCIe bytes/s for a link of this maximum generation and width."""
    if not gen or not width or gen not in PCIE_GT_PER_LANE:
        return PCIE_FALLBACK_RATE
    return PCIE_GT_PER_LANE[gen] * 1e9 / 8 * width


# Upper bound on one NVLink link's bytes/s in one direction, for a byte counter a driver reports
# 32-bit: NVLink5 moves 50 GB/s per link and direction (1.8 TB/s per GPU over 18 links, both
# directions); this leaves room for a faster generation. An assumption: no header states it.
NVLINK_MAX_RATE = 64.0e9


# Read a wrapping counter before 3/4 of its range can pass at the link's maximum rate: a Gen5
# x16 link (64 GB/s) fills 2**32 bytes in 67 ms, so its 32-bit counters are read every 50 ms.
WRAP_MARGIN = 0.75
MIN_FAST_PERIOD = 0.005


def fast_period(modulus: int, max_rate: float) -> float:
    """Seconds between reads of a counter of range ``modulus`` so that no wrap goes unseen."""
    return max(MIN_FAST_PERIOD, WRAP_MARGIN * modulus / max_rate)

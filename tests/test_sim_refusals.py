"""The simulated NVML refuses what NVML refuses, one test per refusal.

The simulator once took a fabric struct passed by value and filled it, so the agent's tests
passed while every real Hopper and Blackwell node crashed (tests/test_nvml_abi.py shows the
crash at the C ABI). These tests pin each refusal: a struct by value, a struct version that is
not the one of the struct passed, an unknown field id, a link id beyond the device's links.
"""

from __future__ import annotations

import ctypes

import pynvml
import pytest

from exporter.node.hardware import read_fabric
from exporter.sim.nvml import FI_MAX, PADDING, SimNvml


def handle(profile: str):
    sim = SimNvml(profile=profile, gpus=1)
    sim.nvmlInit()
    return sim, sim.nvmlDeviceGetHandleByIndex(0)


def code(fn) -> int:
    try:
        fn()
    except pynvml.NVMLError as exc:
        return exc.value
    return pynvml.NVML_SUCCESS


@pytest.mark.parametrize("call, struct", [
    ("nvmlDeviceGetGpuFabricInfoV", pynvml.c_nvmlGpuFabricInfo_v3_t),
    ("nvmlDeviceGetPlatformInfo", pynvml.c_nvmlPlatformInfo_v2_t),
])
def test_a_struct_passed_by_value_is_an_invalid_argument(call: str, struct: type) -> None:
    sim, h = handle("gb200")
    info = struct()
    assert code(lambda: getattr(sim, call)(h, info)) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    assert code(lambda: getattr(sim, call)(h, None)) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    assert code(lambda: getattr(sim, call)(h, ctypes.byref(ctypes.c_uint()))) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    assert code(lambda: getattr(sim, call)(h, ctypes.byref(info))) == pynvml.NVML_SUCCESS
    assert code(lambda: getattr(sim, call)(h, ctypes.pointer(info))) == pynvml.NVML_SUCCESS


@pytest.mark.parametrize("call, struct, bad", [
    ("nvmlDeviceGetGpuFabricInfoV", pynvml.c_nvmlGpuFabricInfo_v3_t, 0x02000028),  # v2's number, v3's size
    ("nvmlDeviceGetGpuFabricInfoV", pynvml.c_nvmlGpuFabricInfo_v2_t, 0),
    ("nvmlDeviceGetPlatformInfo", pynvml.c_nvmlPlatformInfo_v2_t, 0x0300002C),
])
def test_a_wrong_version_field_is_a_version_mismatch(call: str, struct: type, bad: int) -> None:
    sim, h = handle("gb200")
    info = struct()
    info.version = bad
    assert code(lambda: getattr(sim, call)(h, ctypes.byref(info))) == pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH


def test_the_v3_struct_on_a_driver_that_predates_it() -> None:
    sim, h = handle("a100")  # fabric_v3=False in its profile
    info = pynvml.c_nvmlGpuFabricInfo_v3_t()
    assert code(lambda: sim.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(info))) == pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH


def test_the_fabric_state_is_one_byte_with_padding_after_it() -> None:
    """nvmlGpuFabricState_t is unsigned char (nvml.h 3808); nvidia-ml-py reads four bytes."""
    sim, h = handle("h200")
    info = pynvml.c_nvmlGpuFabricInfo_v3_t()
    sim.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(info))
    assert info.state == PADDING | pynvml.NVML_GPU_FABRIC_STATE_COMPLETED
    assert read_fabric(info, True).state == "completed"


def test_field_ids_out_of_range_and_links_beyond_the_device() -> None:
    sim, h = handle("h200")  # 18 links
    values = sim.nvmlDeviceGetFieldValues(h, [(FI_MAX, 0), (0, 0), (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 18),
                                              (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 17),
                                              (pynvml.NVML_FI_DEV_NVLINK_GET_STATE, 40)])
    assert [v.nvmlReturn for v in values] == [pynvml.NVML_ERROR_INVALID_ARGUMENT, pynvml.NVML_ERROR_INVALID_ARGUMENT,
                                              pynvml.NVML_ERROR_INVALID_ARGUMENT, pynvml.NVML_SUCCESS,
                                              pynvml.NVML_ERROR_INVALID_ARGUMENT]

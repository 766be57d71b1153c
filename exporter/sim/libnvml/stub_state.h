/*
 * The state shared by the stand-in libnvidia-ml.so.1 (nvml_stub.c), the fake libcuda.so.1
 * (cuda_stub.c) and the tests, through a file both libraries mmap (GANGSCOPE_STUB_STATE).
 * Python mirrors this layout in exporter/sim/libnvml/__init__.py (STATE); keep them equal.
 * Counters are the device's own, in bytes since it started; a field's width (valueType) is
 * applied when NVML reports it.
 */
#ifndef GANGSCOPE_STUB_STATE_H
#define GANGSCOPE_STUB_STATE_H
#include <stdint.h>

#define STUB_MAX_GPUS 8
#define STUB_MAX_LINKS 18

struct stub_gpu {
    uint64_t pcie_tx, pcie_rx;                 /* bytes */
    uint64_t nvlink_tx[STUB_MAX_LINKS];        /* bytes */
    uint64_t nvlink_rx[STUB_MAX_LINKS];
    uint64_t replay[STUB_MAX_LINKS];           /* replay errors */
    uint64_t pcie_rate[2];                     /* bytes/s: what nvmlDeviceGetPcieThroughput reports */
    uint32_t lost;                             /* 1: every call answers GPU_IS_LOST */
    uint32_t link_down;                        /* bit per link: state INACTIVE */
    uint32_t fabric_health;                    /* healthMask on NVL72 profiles */
    uint32_t pad;
};

struct stub_state {
    uint32_t magic;                            /* STUB_MAGIC once the test initialised the file */
    uint32_t version;
    uint64_t calls;                            /* device calls made */
    uint64_t refusals;                         /* arguments refused: bad pointers, struct versions */
    int64_t wall_offset_us;                    /* added to field timestamps: an NTP step */
    uint64_t cuda_bytes;                       /* bytes the fake libcuda.so.1 copied */
    uint64_t field_calls;                      /* nvmlDeviceGetFieldValues calls answered */
    uint64_t fabric_calls;                     /* nvmlDeviceGetGpuFabricInfoV calls answered */
    struct stub_gpu gpu[STUB_MAX_GPUS];
};

#define STUB_MAGIC 0x4e564d4cu                 /* "NVML" */
#endif

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
#define STUB_SEEN 64

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
    /* A steady flow for tests that run in real time: both PCIe counters also count pcie_flow
     * bytes/s since flow_from_ns (CLOCK_MONOTONIC), so what a read returns needs no writer. */
    uint64_t pcie_flow;
    int64_t flow_from_ns;
    /* What the reads returned, 64-bit (before the field's width): the first value of each
     * counter (tx, rx), the last STUB_SEEN with the count of late reads up to each, their count,
     * and the reads that came more than late_ns after the previous read of the same counter (0:
     * none counted). */
    int64_t late_ns;
    uint64_t pcie_first[2];
    uint64_t pcie_seen[2][STUB_SEEN];
    uint64_t pcie_seen_late[2][STUB_SEEN];
    uint64_t pcie_seen_n[2];
    int64_t pcie_last_ns[2];
    uint64_t pcie_late[2];
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

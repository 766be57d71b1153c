/*
 * A stand-in libnvidia-ml.so.1 with NVML's real C ABI, for tests and the benchmark.
 *
 * Every signature and struct below is copied from gen/nvml/nvml.h of NVIDIA/go-nvml @2f9e261
 * (the header nvidia-ml-py 13.615 mirrors); the line numbers are that file's. The point is the
 * ABI: the agent reaches this library through the real nvidia-ml-py wrappers, which pass their
 * arguments to C without argtypes, so a struct handed over by value (instead of a pointer) lands
 * here as a garbage pointer. Real NVML then writes through it (SIGSEGV, or silent corruption);
 * this library checks every pointer it is given (NULL, misaligned, a small integer, or not mapped
 * at all -> NVML_ERROR_INVALID_ARGUMENT) and every version field (-> ARGUMENT_VERSION_MISMATCH),
 * counts the refusal in the shared state and logs it, so a test sees the mistake instead of a
 * crash some seconds later.
 *
 * Configuration (environment, read at nvmlInit):
 *   GANGSCOPE_STUB_PROFILE  a100 | h100 | h200 | b200 | gb200 (default h200): what each GPU
 *                           generation answers, the same data as exporter/sim/gpus.py
 *   GANGSCOPE_STUB_GPUS     number of GPUs (default: the profile's)
 *   GANGSCOPE_STUB_STATE    a file shared with the test and the fake libcuda.so.1 (layout: struct
 *                           stub_state below, mirrored in exporter/sim/libnvml/__init__.py): the
 *                           counters' values, lost GPUs, refusals. Without it, a private state
 *                           whose counters stay where they start.
 *   GANGSCOPE_STUB_CALL_US  microseconds each call spends on the CPU (the benchmark's driver cost)
 *   GANGSCOPE_STUB_MIG      1: GPU 0 is in MIG mode with two MIG devices
 *   GANGSCOPE_STUB_PCIE_GEN, GANGSCOPE_STUB_PCIE_WIDTH  the PCIe link reported (default: the
 *                           profile's); a slower link gives a reader on a busy test machine more
 *                           time between reads
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "stub_state.h"

/* ---- nvml.h types ------------------------------------------------------------------------- */

typedef enum { /* nvml.h 1296-1330 (excerpt) */
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

typedef struct nvmlDevice_st *nvmlDevice_t; /* nvml.h 158 */

#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32    /* nvml.h 165 */
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16 /* nvml.h 170 */

typedef struct nvmlPciInfo_st { /* nvml.h 196-208 */
    char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

typedef enum { /* nvml.h 648-660 */
    NVML_VALUE_TYPE_DOUBLE = 0,
    NVML_VALUE_TYPE_UNSIGNED_INT = 1,
    NVML_VALUE_TYPE_UNSIGNED_LONG = 2,
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3,
    NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4,
    NVML_VALUE_TYPE_SIGNED_INT = 5,
    NVML_VALUE_TYPE_UNSIGNED_SHORT = 6
} nvmlValueType_t;

typedef union nvmlValue_st { /* nvml.h 665-674 */
    double dVal;
    int siVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    signed long long sllVal;
    unsigned short usVal;
} nvmlValue_t;

typedef struct nvmlFieldValue_st { /* nvml.h 3010-3019 */
    unsigned int fieldId;
    unsigned int scopeId;
    long long timestamp;
    long long latencyUsec;
    nvmlValueType_t valueType;
    nvmlReturn_t nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

#define NVML_GPU_FABRIC_UUID_LEN 16 /* nvml.h 3795 */
typedef unsigned char nvmlGpuFabricState_t; /* nvml.h 3808: ONE byte, padded to 4 before healthMask */
#define NVML_GPU_FABRIC_STATE_COMPLETED 3 /* nvml.h 3803 */

typedef struct { /* nvml.h 3813-3819, the unversioned v1 of nvmlDeviceGetGpuFabricInfo */
    unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int cliqueId;
    nvmlGpuFabricState_t state;
} nvmlGpuFabricInfo_t;

typedef struct { /* nvml.h 3924-3932 */
    unsigned int version;
    unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int cliqueId;
    nvmlGpuFabricState_t state;
    unsigned int healthMask;
} nvmlGpuFabricInfo_v2_t;

typedef struct { /* nvml.h 3942-3951 */
    unsigned int version;
    unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int cliqueId;
    nvmlGpuFabricState_t state;
    unsigned int healthMask;
    unsigned char healthSummary;
} nvmlGpuFabricInfo_v3_t;
typedef nvmlGpuFabricInfo_v3_t nvmlGpuFabricInfoV_t; /* nvml.h 3953 */

typedef struct { /* nvml.h 1448-1456 */
    unsigned int version;
    unsigned char ibGuid[16];
    unsigned char rackGuid[16];
    unsigned char chassisPhysicalSlotNumber;
    unsigned char computeSlotIndex;
    unsigned char nodeIndex;
    unsigned char peerType;
    unsigned char moduleId;
} nvmlPlatformInfo_v1_t;

typedef struct { /* nvml.h 1462-1472 */
    unsigned int version;
    unsigned char ibGuid[16];
    unsigned char chassisSerialNumber[16];
    unsigned char slotNumber;
    unsigned char trayIndex;
    unsigned char hostId;
    unsigned char peerType;
    unsigned char moduleId;
} nvmlPlatformInfo_v2_t;
typedef nvmlPlatformInfo_v2_t nvmlPlatformInfo_t; /* nvml.h 1474 */

/* nvml.h 141-142 */
#define NVML_STRUCT_VERSION(data, ver) (unsigned int)(sizeof(nvml##data##_v##ver##_t) | (ver << 24U))
#define nvmlGpuFabricInfo_v2 NVML_STRUCT_VERSION(GpuFabricInfo, 2) /* nvml.h 3937 */
#define nvmlGpuFabricInfo_v3 NVML_STRUCT_VERSION(GpuFabricInfo, 3) /* nvml.h 3958 */
#define nvmlPlatformInfo_v1 NVML_STRUCT_VERSION(PlatformInfo, 1)   /* nvml.h 1457 */
#define nvmlPlatformInfo_v2 NVML_STRUCT_VERSION(PlatformInfo, 2)   /* nvml.h 1475 */

/* field ids (nvml.h 2503, 2602-2605, 2649-2666, 2676-2677, 2735-2736, 2748-2777, 2957) */
#define FI_LINK_COUNT 91
#define FI_DATA_TX 138
#define FI_DATA_RX 139
#define FI_RAW_TX 140
#define FI_RAW_RX 141
#define FI_DL_REPLAY 161
#define FI_DL_RECOVERY 162
#define FI_DL_CRC 163
#define FI_LINK_STATE 165
#define FI_LINK_VERSION 166
#define FI_PCIE_TX 197
#define FI_PCIE_RX 198
#define FI_NV5_FIRST 201
#define FI_XMIT_BYTES 202
#define FI_RCV_BYTES 204
#define FI_NV5_LAST 225 /* "NVLink counter field id 201-225", nvml.h 2743 */
#define NVML_FI_MAX 303
#define SCOPE_ALL_LINKS 0xFFFFFFFFu /* "A scopeId of UINT_MAX returns aggregate value", nvml.h 2598-2599 */

#define NVML_NVLINK_STATE_INACTIVE 0 /* nvml.h 9390-9392 */
#define NVML_NVLINK_STATE_ACTIVE 1
#define NVML_NVLINK_STATE_SLEEP 2
#define NVML_NVLINK_CAP_COUNT 6     /* nvml.h 502-512 */
#define NVML_NVLINK_ERROR_COUNT 5   /* nvml.h 517-526 */
#define NVML_PCIE_UTIL_COUNT 2      /* nvml.h 636-643 */
#define NVML_DEVICE_MIG_ENABLE 1    /* nvml.h 12488 */

/* ---- profiles (exporter/sim/gpus.py holds the same data and its sources) ------------------- */

enum { FABRIC_NONE, FABRIC_LOCAL, FABRIC_NVL72 };

typedef struct {
    const char *name, *product, *driver;
    int gpus, links, nvlink_version, pcie_gen, pcie_width;
    unsigned int pci_device_id;
    int pcie_value_type;          /* -1: 197/198 answer NOT_SUPPORTED */
    nvmlReturn_t nvlink5;          /* 201-222: SUCCESS, NOT_SUPPORTED or INVALID_ARGUMENT */
    int nvlink_data;               /* 138-141 answer */
    int dl_errors;                 /* 161-163 and nvmlDeviceGetNvLinkErrorCounter answer */
    int fabric, fabric_v3;
    nvmlReturn_t platform;         /* SUCCESS: answers */
    int sleeping_link;             /* a link in state SLEEP, or -1 */
} profile_t;

static const profile_t PROFILES[] = {
    {"a100", "NVIDIA A100-SXM4-80GB", "535.230.02", 8, 12, 4, 4, 16, 0x20B210DE, -1,
     NVML_ERROR_INVALID_ARGUMENT, 1, 1, FABRIC_NONE, 0, NVML_ERROR_FUNCTION_NOT_FOUND, -1},
    {"h100", "NVIDIA H100 80GB HBM3", "570.124.06", 8, 18, 6, 5, 16, 0x233010DE, NVML_VALUE_TYPE_UNSIGNED_INT,
     NVML_ERROR_NOT_SUPPORTED, 1, 1, FABRIC_LOCAL, 1, NVML_ERROR_NOT_SUPPORTED, -1},
    {"h200", "NVIDIA H200", "580.105.08", 8, 18, 6, 5, 16, 0x233510DE, NVML_VALUE_TYPE_UNSIGNED_INT,
     NVML_ERROR_NOT_SUPPORTED, 1, 1, FABRIC_LOCAL, 1, NVML_ERROR_NOT_SUPPORTED, -1},
    {"b200", "NVIDIA B200", "580.126.20", 8, 18, 7, 5, 16, 0x290110DE, NVML_VALUE_TYPE_UNSIGNED_INT,
     NVML_SUCCESS, 1, 0, FABRIC_LOCAL, 1, NVML_ERROR_NOT_SUPPORTED, 17},
    {"gb200", "NVIDIA GB200", "580.126.20", 4, 18, 7, 6, 16, 0x294110DE, NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
     NVML_SUCCESS, 0, 0, FABRIC_NVL72, 1, NVML_SUCCESS, 17},
};

/* ---- the library's state ------------------------------------------------------------------- */

struct nvmlDevice_st {
    int index;
    int mig_parent; /* -1: a physical GPU; else the parent's index */
    int mig_slot;
};

static const profile_t *P = &PROFILES[2];
static struct nvmlDevice_st devices[STUB_MAX_GPUS];
static struct nvmlDevice_st migs[STUB_MAX_GPUS][2];
static int ngpus, refcount, mig_on, pcie_gen, pcie_width;
static long call_us;
static struct stub_state private_state;
static struct stub_state *S = &private_state;
static const unsigned char CLUSTER_UUID[16] = {0x7b, 0x96, 0x8a, 0x6d, 0xc8, 0xaa, 0x45, 0xe1,
                                               0x9e, 0x07, 0xe1, 0xe5, 0x1b, 0xe9, 0x9c, 0x31};

static void spend(void) {
    if (call_us <= 0) return;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000000L + (t.tv_nsec - t0.tv_nsec) / 1000 < call_us);
}

static long long wall_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (long long)t.tv_sec * 1000000LL + t.tv_nsec / 1000;
}

static void refuse(const char *fn, const char *why, const void *p) {
    __atomic_add_fetch(&S->refusals, 1, __ATOMIC_SEQ_CST);
    fprintf(stderr, "nvml-stub: refused %s: %s (argument %p)\n", fn, why, p);
}

/* Whether p can be the address of n bytes the caller owns: not NULL, not a small integer or a
 * non-canonical address, aligned for the struct, and every page mapped (mincore fails with
 * ENOMEM on an unmapped page). A struct passed by value leaves whatever the register held. */
static int bad_pointer(const char *fn, const void *p, size_t n, size_t align) {
    uintptr_t a = (uintptr_t)p;
    if (p == NULL) { refuse(fn, "NULL pointer", p); return 1; }
    if (a < 65536 || a >= 0x0000800000000000ULL) { refuse(fn, "not a user-space address", p); return 1; }
    if (a % align) { refuse(fn, "misaligned pointer", p); return 1; }
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t start = a & ~(uintptr_t)(page - 1);
    size_t len = (a + n) - start;
    unsigned char vec[64];
    if ((len + page - 1) / page > sizeof vec) return 0;
    if (mincore((void *)start, len, vec) != 0 && errno == ENOMEM) { refuse(fn, "unmapped memory", p); return 1; }
    return 0;
}

static void load_config(void) {
    const char *name = getenv("GANGSCOPE_STUB_PROFILE");
    if (name) {
        for (size_t i = 0; i < sizeof PROFILES / sizeof PROFILES[0]; i++)
            if (strcmp(PROFILES[i].name, name) == 0) P = &PROFILES[i];
    }
    ngpus = P->gpus;
    const char *n = getenv("GANGSCOPE_STUB_GPUS");
    if (n && atoi(n) > 0) ngpus = atoi(n) > STUB_MAX_GPUS ? STUB_MAX_GPUS : atoi(n);
    const char *us = getenv("GANGSCOPE_STUB_CALL_US");
    call_us = us ? atol(us) : 0;
    const char *gen = getenv("GANGSCOPE_STUB_PCIE_GEN");
    pcie_gen = gen && atoi(gen) > 0 ? atoi(gen) : P->pcie_gen;
    const char *width = getenv("GANGSCOPE_STUB_PCIE_WIDTH");
    pcie_width = width && atoi(width) > 0 ? atoi(width) : P->pcie_width;
    const char *mig = getenv("GANGSCOPE_STUB_MIG");
    mig_on = mig && strcmp(mig, "1") == 0;
    const char *path = getenv("GANGSCOPE_STUB_STATE");
    if (path && *path) {
        int fd = open(path, O_RDWR);
        if (fd >= 0) {
            void *m = mmap(NULL, sizeof(struct stub_state), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            close(fd);
            if (m != MAP_FAILED) S = m;
        }
    }
    for (int i = 0; i < STUB_MAX_GPUS; i++) {
        devices[i] = (struct nvmlDevice_st){i, -1, 0};
        migs[i][0] = (struct nvmlDevice_st){i, i, 0};
        migs[i][1] = (struct nvmlDevice_st){i, i, 1};
    }
}

/* The device a handle names, or an error: UNINITIALIZED before nvmlInit, INVALID_ARGUMENT for a
 * handle this library did not hand out, GPU_IS_LOST for a GPU the state marks lost. */
static nvmlReturn_t check(nvmlDevice_t d, int *index) {
    spend();
    __atomic_add_fetch(&S->calls, 1, __ATOMIC_RELAXED);
    if (refcount <= 0) return NVML_ERROR_UNINITIALIZED;
    int phys = d >= devices && d < devices + ngpus;
    int mig = (struct nvmlDevice_st *)d >= &migs[0][0] && (struct nvmlDevice_st *)d < &migs[ngpus][0];
    if (!phys && !mig) return NVML_ERROR_INVALID_ARGUMENT;
    if (S->gpu[d->index].lost) return NVML_ERROR_GPU_IS_LOST;
    *index = d->index;
    return NVML_SUCCESS;
}

#define CHECK(d, i)                                       \
    int i = 0;                                            \
    do {                                                  \
        nvmlReturn_t _r = check(d, &i);                   \
        if (_r != NVML_SUCCESS) return _r;                \
    } while (0)

/* ---- initialisation (nvml.h 4002, 4019, 4036, 14491) ---------------------------------------- */

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    if (refcount++ == 0) load_config();
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlShutdown(void) {
    if (refcount <= 0) return NVML_ERROR_UNINITIALIZED;
    refcount--;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result) { /* nvml.h 4057 */
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

static nvmlReturn_t copy_string(const char *fn, char *buf, unsigned int length, const char *value) {
    if (bad_pointer(fn, buf, length ? length : 1, 1)) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, value, strlen(value) + 1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) { /* nvml.h 4194 */
    if (refcount <= 0) return NVML_ERROR_UNINITIALIZED;
    return copy_string(__func__, version, length, P->driver);
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) { /* nvml.h 4573 */
    if (refcount <= 0) return NVML_ERROR_UNINITIALIZED;
    if (bad_pointer(__func__, deviceCount, 4, 4)) return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = ngpus;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) { /* nvml.h 4641 */
    if (refcount <= 0) return NVML_ERROR_UNINITIALIZED;
    if (index >= (unsigned)ngpus) return NVML_ERROR_INVALID_ARGUMENT;
    if (bad_pointer(__func__, device, sizeof *device, sizeof(void *))) return NVML_ERROR_INVALID_ARGUMENT;
    if (S->gpu[index].lost) return NVML_ERROR_GPU_IS_LOST;
    *device = &devices[index];
    return NVML_SUCCESS;
}

static void bus_id(int index, char *out, size_t n) { snprintf(out, n, "00000000:%02X:00.0", 0x18 + 0x10 * index); }

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device) { /* nvml.h 4758 */
    if (refcount <= 0) return NVML_ERROR_UNINITIALIZED;
    if (bad_pointer(__func__, pciBusId, 1, 1) || bad_pointer(__func__, device, sizeof *device, sizeof(void *)))
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < ngpus; i++) {
        char id[32];
        bus_id(i, id, sizeof id);
        if (strcasecmp(id, pciBusId) == 0 || strcasecmp(id + 4, pciBusId) == 0) {
            *device = &devices[i];
            return S->gpu[i].lost ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) { /* nvml.h 4784 */
    CHECK(device, i);
    return copy_string(__func__, name, length, P->product);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) { /* nvml.h 5186 */
    CHECK(device, i);
    char text[96];
    if (device->mig_parent >= 0)
        snprintf(text, sizeof text, "MIG-%08x-0000-4000-8000-%012x", 0x5a1b2c3d + i, device->mig_slot);
    else
        snprintf(text, sizeof text, "GPU-%08x-%04x-4c0d-9a3b-%012x", 0x51ab0000u + i, (unsigned)P->pci_device_id >> 16, i);
    return copy_string(__func__, uuid, length, text);
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber) { /* nvml.h 5205 */
    CHECK(device, i);
    if (bad_pointer(__func__, minorNumber, 4, 4)) return NVML_ERROR_INVALID_ARGUMENT;
    *minorNumber = i;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) { /* nvml.h 4837 */
    CHECK(device, i);
    if (bad_pointer(__func__, index, 4, 4)) return NVML_ERROR_INVALID_ARGUMENT;
    *index = i;
    return NVML_SUCCESS;
}

static void fill_pci(nvmlPciInfo_t *pci, int index, unsigned int device_id) {
    memset(pci, 0, sizeof *pci);
    bus_id(index, pci->busId, sizeof pci->busId);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%s", pci->busId + 4);
    pci->bus = 0x18 + 0x10 * index;
    pci->pciDeviceId = device_id;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) { /* nvml.h 5471 */
    CHECK(device, i);
    if (bad_pointer(__func__, pci, sizeof *pci, 4)) return NVML_ERROR_INVALID_ARGUMENT;
    fill_pci(pci, i, P->pci_device_id);
    return NVML_SUCCESS;
}

static nvmlReturn_t out_uint(const char *fn, unsigned int *p, unsigned int v) {
    if (bad_pointer(fn, p, 4, 4)) return NVML_ERROR_INVALID_ARGUMENT;
    *p = v;
    return NVML_SUCCESS;
}

/* nvml.h 5492, 5531, 5549, 5567 */
nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *maxLinkGen) {
    CHECK(device, i);
    return out_uint(__func__, maxLinkGen, pcie_gen);
}
nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned int *maxLinkWidth) {
    CHECK(device, i);
    return out_uint(__func__, maxLinkWidth, pcie_width);
}
nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int *currLinkGen) {
    CHECK(device, i);
    return out_uint(__func__, currLinkGen, pcie_gen);
}
nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int *currLinkWidth) {
    CHECK(device, i);
    return out_uint(__func__, currLinkWidth, pcie_width);
}

/* nvml.h 5590: KB/s over the driver's 20 ms window; the state's rate in bytes/s. */
nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, int counter, unsigned int *value) {
    CHECK(device, i);
    if (counter < 0 || counter >= NVML_PCIE_UTIL_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    return out_uint(__func__, value, (unsigned int)(S->gpu[i].pcie_rate[counter] / 1024));
}

/* ---- NVLink (nvml.h 9506, 9524, 9545, 9565, 9585) ------------------------------------------- */

static int link_state(int gpu, unsigned int link) {
    if (S->gpu[gpu].link_down >> link & 1) return NVML_NVLINK_STATE_INACTIVE;
    if ((int)link == P->sleeping_link) return NVML_NVLINK_STATE_SLEEP;
    return NVML_NVLINK_STATE_ACTIVE;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, int *isActive) {
    CHECK(device, i);
    if (link >= (unsigned)P->links) return NVML_ERROR_INVALID_ARGUMENT;
    if (bad_pointer(__func__, isActive, 4, 4)) return NVML_ERROR_INVALID_ARGUMENT;
    *isActive = link_state(i, link) != NVML_NVLINK_STATE_INACTIVE;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t device, unsigned int link, unsigned int *version) {
    CHECK(device, i);
    if (link >= (unsigned)P->links) return NVML_ERROR_INVALID_ARGUMENT;
    return out_uint(__func__, version, P->nvlink_version);
}

nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t device, unsigned int link, int capability,
                                           unsigned int *capResult) {
    CHECK(device, i);
    if (link >= (unsigned)P->links || capability < 0 || capability >= NVML_NVLINK_CAP_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    return out_uint(__func__, capResult, 1);
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci) {
    CHECK(device, i);
    if (link >= (unsigned)P->links) return NVML_ERROR_INVALID_ARGUMENT;
    if (bad_pointer(__func__, pci, sizeof *pci, 4)) return NVML_ERROR_INVALID_ARGUMENT;
    fill_pci(pci, 0, 0x22a310DE); /* an NVSwitch: every link ends on one */
    snprintf(pci->busId, sizeof pci->busId, "00000000:%02X:00.0", 0xC0 + link % 4);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%s", pci->busId + 4);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, unsigned int link, int counter,
                                             unsigned long long *counterValue) {
    CHECK(device, i);
    if (!P->dl_errors) return NVML_ERROR_NOT_SUPPORTED; /* removed on Blackwell (NVML r570 change log) */
    if (link >= (unsigned)P->links || counter < 0 || counter >= NVML_NVLINK_ERROR_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (bad_pointer(__func__, counterValue, 8, 8)) return NVML_ERROR_INVALID_ARGUMENT;
    *counterValue = counter == 0 ? S->gpu[i].replay[link] : 0;
    return NVML_SUCCESS;
}

/* ---- field values (nvml.h 10230) ------------------------------------------------------------ */

static int per_link(unsigned int fid) {
    return (fid >= FI_DATA_TX && fid <= FI_RAW_RX) || (fid >= FI_DL_REPLAY && fid <= FI_DL_CRC) ||
           fid == FI_LINK_STATE || fid == FI_LINK_VERSION || (fid >= FI_NV5_FIRST && fid <= FI_NV5_LAST);
}

static unsigned long long link_value(int gpu, unsigned int fid, unsigned int link) {
    const struct stub_gpu *g = &S->gpu[gpu];
    switch (fid) {
    case FI_DATA_TX: return g->nvlink_tx[link] / 1024; /* KiB, nvml.h 2602 */
    case FI_DATA_RX: return g->nvlink_rx[link] / 1024;
    case FI_RAW_TX: return (g->nvlink_tx[link] + g->nvlink_tx[link] / 16) / 1024; /* + protocol overhead */
    case FI_RAW_RX: return (g->nvlink_rx[link] + g->nvlink_rx[link] / 16) / 1024;
    case FI_XMIT_BYTES: return g->nvlink_tx[link];
    case FI_RCV_BYTES: return g->nvlink_rx[link];
    case FI_DL_REPLAY: return g->replay[link];
    default: return 0;
    }
}

static long long monotonic_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* A PCIe counter's value now (dir 0: tx, 1: rx): its bytes plus the flow since it started,
 * recorded in the read history the tests compare the agent's totals with. */
static unsigned long long pcie_read(struct stub_gpu *g, int dir) {
    long long now = monotonic_ns();
    unsigned long long bytes = dir == 0 ? g->pcie_tx : g->pcie_rx;
    if (g->pcie_flow && now > g->flow_from_ns)
        bytes += (unsigned long long)((unsigned __int128)g->pcie_flow * (unsigned long long)(now - g->flow_from_ns)
                                      / 1000000000u);
    uint64_t n = g->pcie_seen_n[dir];
    if (n == 0) g->pcie_first[dir] = bytes;
    else if (g->late_ns > 0 && now - g->pcie_last_ns[dir] > g->late_ns) g->pcie_late[dir]++;
    g->pcie_seen[dir][n % STUB_SEEN] = bytes;
    g->pcie_seen_late[dir][n % STUB_SEEN] = g->pcie_late[dir];
    g->pcie_last_ns[dir] = now;
    __atomic_store_n(&g->pcie_seen_n[dir], n + 1, __ATOMIC_RELEASE);
    return bytes;
}

static void field(int gpu, nvmlFieldValue_t *v) {
    unsigned int fid = v->fieldId, scope = v->scopeId;
    v->timestamp = wall_us() + S->wall_offset_us;
    v->latencyUsec = call_us;
    v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
    v->nvmlReturn = NVML_SUCCESS;
    if (fid >= NVML_FI_MAX) { v->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT; return; }
    if (fid == FI_PCIE_TX || fid == FI_PCIE_RX) {
        if (P->pcie_value_type < 0) { v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED; return; }
        unsigned long long bytes = pcie_read(&S->gpu[gpu], fid == FI_PCIE_TX ? 0 : 1);
        v->valueType = P->pcie_value_type;
        if (v->valueType == NVML_VALUE_TYPE_UNSIGNED_INT) {
            /* NVML writes the 4-byte member only; the union's high half keeps what was there. */
            v->value.ullVal = 0xDEADBEEF00000000ULL | (uint32_t)bytes;
        } else {
            v->value.ullVal = bytes;
        }
        return;
    }
    if (fid == FI_LINK_COUNT) { v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT; v->value.uiVal = P->links; return; }
    if (!per_link(fid)) { v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED; return; }
    if (scope != SCOPE_ALL_LINKS && scope >= (unsigned)P->links) { v->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT; return; }
    if (fid >= FI_NV5_FIRST && fid <= FI_NV5_LAST && P->nvlink5 != NVML_SUCCESS) { v->nvmlReturn = P->nvlink5; return; }
    if (fid >= FI_DATA_TX && fid <= FI_RAW_RX && !P->nvlink_data) { v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED; return; }
    if (fid >= FI_DL_REPLAY && fid <= FI_DL_CRC && !P->dl_errors) { v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED; return; }
    if (fid == FI_LINK_STATE || fid == FI_LINK_VERSION) {
        if (scope == SCOPE_ALL_LINKS) { v->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT; return; }
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
        v->value.uiVal = fid == FI_LINK_STATE ? link_state(gpu, scope) : P->nvlink_version;
        return;
    }
    if (fid != FI_DATA_TX && fid != FI_DATA_RX && fid != FI_RAW_TX && fid != FI_RAW_RX && fid != FI_XMIT_BYTES &&
        fid != FI_RCV_BYTES && !(fid >= 161 && fid <= 163) && !(fid >= 213 && fid <= 221)) {
        v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        return;
    }
    unsigned long long total = 0;
    if (scope == SCOPE_ALL_LINKS)
        for (int l = 0; l < P->links; l++) total += link_value(gpu, fid, l);
    else
        total = link_value(gpu, fid, scope);
    v->value.ullVal = total;
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values) {
    CHECK(device, i);
    if (valuesCount <= 0) return NVML_ERROR_INVALID_ARGUMENT;
    if (bad_pointer(__func__, values, sizeof *values * (size_t)valuesCount, 8)) return NVML_ERROR_INVALID_ARGUMENT;
    if (device->mig_parent >= 0) return NVML_ERROR_NOT_SUPPORTED;
    for (int k = 0; k < valuesCount; k++) field(i, &values[k]);
    __atomic_add_fetch(&S->field_calls, 1, __ATOMIC_SEQ_CST);
    return NVML_SUCCESS;
}

/* ---- fabric and platform (nvml.h 7829, 7852, 8595) ------------------------------------------ */

static void fill_fabric(int gpu, unsigned char *uuid, nvmlReturn_t *status, unsigned int *clique,
                        nvmlGpuFabricState_t *state, unsigned char *after_state) {
    *status = NVML_SUCCESS;
    *state = NVML_GPU_FABRIC_STATE_COMPLETED;
    /* The three padding bytes after the 1-byte state: garbage, as the driver's own stack or heap
     * would leave them, so a reader that takes the state as a 4-byte int sees 0xa5a5a503. */
    memset(after_state, 0xA5, 3);
    memset(uuid, 0, NVML_GPU_FABRIC_UUID_LEN);
    *clique = 0;
    if (P->fabric == FABRIC_NVL72) {
        memcpy(uuid, CLUSTER_UUID, sizeof CLUSTER_UUID);
        *clique = 1;
    }
    (void)gpu;
}

/* healthy: every check FALSE and the configuration correct (nvml.h 3824-3875) */
#define HEALTHY_MASK (2 | 2 << 2 | 2 << 4 | 2 << 6 | 1 << 8)

nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfoV_t *info) {
    CHECK(device, i);
    if (bad_pointer(__func__, info, sizeof(nvmlGpuFabricInfo_v2_t), 4)) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int version = info->version;
    /* The version is checked before support, as NVIDIA's mock (k8s-test-infra bridge/fabric.go) does. */
    if (version != nvmlGpuFabricInfo_v2 && version != nvmlGpuFabricInfo_v3) {
        refuse(__func__, "not a version of nvmlGpuFabricInfo", info);
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    if (version == nvmlGpuFabricInfo_v3 && !P->fabric_v3) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH; /* an older driver */
    if (version == nvmlGpuFabricInfo_v3 && bad_pointer(__func__, info, sizeof(nvmlGpuFabricInfo_v3_t), 4))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (P->fabric == FABRIC_NONE) return NVML_ERROR_NOT_SUPPORTED;
    nvmlGpuFabricInfo_v2_t *v2 = (nvmlGpuFabricInfo_v2_t *)info;
    fill_fabric(i, v2->clusterUuid, &v2->status, &v2->cliqueId, &v2->state, (unsigned char *)&v2->state + 1);
    v2->healthMask = P->fabric == FABRIC_NVL72 ? S->gpu[i].fabric_health : 0;
    if (version == nvmlGpuFabricInfo_v3) {
        info->healthSummary = P->fabric == FABRIC_NVL72 ? (v2->healthMask == HEALTHY_MASK ? 1 : 3) : 0;
        memset((unsigned char *)&info->healthSummary + 1, 0xA5, sizeof *info - offsetof(nvmlGpuFabricInfo_v3_t, healthSummary) - 1);
    }
    __atomic_add_fetch(&S->fabric_calls, 1, __ATOMIC_SEQ_CST);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *info) {
    CHECK(device, i);
    if (bad_pointer(__func__, info, sizeof *info, 4)) return NVML_ERROR_INVALID_ARGUMENT;
    if (P->fabric == FABRIC_NONE) return NVML_ERROR_NOT_SUPPORTED;
    fill_fabric(i, info->clusterUuid, &info->status, &info->cliqueId, &info->state, (unsigned char *)&info->state + 1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPlatformInfo(nvmlDevice_t device, nvmlPlatformInfo_t *info) {
    CHECK(device, i);
    /* nvml.h 8590-8593: INVALID_ARGUMENT for a NULL struct, ARGUMENT_VERSION_MISMATCH for a bad version */
    if (bad_pointer(__func__, info, sizeof(nvmlPlatformInfo_v1_t), 4)) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int version = info->version;
    if (version != nvmlPlatformInfo_v1 && version != nvmlPlatformInfo_v2) {
        refuse(__func__, "not a version of nvmlPlatformInfo", info);
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    if (P->platform != NVML_SUCCESS) return P->platform;
    nvmlPlatformInfo_v2_t *v2 = info;
    memset(v2->ibGuid, 0, sizeof v2->ibGuid);
    memset(v2->chassisSerialNumber, 0, sizeof v2->chassisSerialNumber);
    memcpy(v2->chassisSerialNumber, "1821224012345", 13); /* 13 bytes on Blackwell, nvml.h 1465 */
    v2->slotNumber = 1;
    v2->trayIndex = 0;
    v2->hostId = 1;
    v2->peerType = 1;
    v2->moduleId = (unsigned char)(i + 1);
    return NVML_SUCCESS;
}

/* ---- MIG (nvml.h 12803, 13374, 13414, 13440) ------------------------------------------------ */

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode) {
    CHECK(device, i);
    if (bad_pointer(__func__, currentMode, 4, 4) || bad_pointer(__func__, pendingMode, 4, 4))
        return NVML_ERROR_INVALID_ARGUMENT;
    *currentMode = *pendingMode = (mig_on && i == 0) ? NVML_DEVICE_MIG_ENABLE : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    CHECK(device, i);
    return out_uint(__func__, count, 7);
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *migDevice) {
    CHECK(device, i);
    if (bad_pointer(__func__, migDevice, sizeof *migDevice, sizeof(void *))) return NVML_ERROR_INVALID_ARGUMENT;
    if (index >= 7) return NVML_ERROR_INVALID_ARGUMENT;
    if (!(mig_on && i == 0) || index >= 2) return NVML_ERROR_NOT_FOUND;
    *migDevice = &migs[i][index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
    CHECK(device, i);
    if (device->mig_parent < 0) return NVML_ERROR_NOT_SUPPORTED;
    return out_uint(__func__, id, 1 + device->mig_slot);
}

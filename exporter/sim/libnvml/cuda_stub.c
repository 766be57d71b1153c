/*
 * A fake libcuda.so.1 (the CUDA driver API) whose copies move the stand-in NVML's counters.
 *
 * scripts/gpu-smoke drives known traffic through the driver API with ctypes; in the test suite
 * this library answers instead, and each copy advances the PCIe or NVLink byte counters in the
 * state file the stand-in libnvidia-ml.so.1 reads (GANGSCOPE_STUB_STATE, stub_state.h), at a
 * link-like pace, so the smoke script's byte comparison runs for real. Signatures are the CUDA
 * driver API's, from NVIDIA's cuda.h (CUDA 11.4 as vendored in triton-lang/triton @2bed6fc,
 * include/triton/external/CUDA/cuda.h: the _v2 names are what its #defines map cuMemAlloc,
 * cuCtxCreate, cuMemcpyHtoD... to, and what ctypes must call).
 *
 * Strict where a real driver is: no call before cuInit (CUDA_ERROR_NOT_INITIALIZED), no
 * allocation or copy without a current context (CUDA_ERROR_INVALID_CONTEXT), a device pointer
 * must lie inside an allocation of that device and a copy inside its bounds
 * (CUDA_ERROR_INVALID_VALUE), a NULL out-pointer is CUDA_ERROR_INVALID_VALUE.
 *
 * The CUDA order of devices is the reverse of NVML's (a real driver orders by speed unless
 * CUDA_DEVICE_ORDER=PCI_BUS_ID), so a script that maps ordinal to index without the bus id is caught.
 *
 * Overheads, so the comparison's stated tolerance is exercised: a host-to-device copy adds
 * 1/32 of its bytes to the GPU's PCIe receive counter on top of the payload (headers) and 1/64
 * to transmit (read requests); device-to-host, 1/32 more on transmit. Peer copies are spread
 * evenly over every NVLink link (the remainder on link 0), payload only.
 *
 * Environment: GANGSCOPE_STUB_PROFILE / GANGSCOPE_STUB_GPUS (as the NVML stand-in),
 * GANGSCOPE_STUB_COPY_GBPS (PCIe copy rate, default 20), GANGSCOPE_STUB_STATE.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "stub_state.h"

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_NO_DEVICE 100
#define CUDA_ERROR_INVALID_DEVICE 101
#define CUDA_ERROR_INVALID_CONTEXT 201

struct CUctx_st { int device; int alive; };

#define MAX_ALLOCS 256
struct alloc { CUdeviceptr base; size_t size; int device; int used; };

static int initialized, ngpus, nlinks = 18;
static double copy_rate = 20e9;
static struct stub_state private_state;
static struct stub_state *S = &private_state;
static struct CUctx_st contexts[64];
static int ncontexts;
static struct alloc allocs[MAX_ALLOCS];
static void *host_allocs[MAX_ALLOCS];
static size_t host_sizes[MAX_ALLOCS];
static __thread CUcontext current;
static CUdeviceptr next_base = 0x7f0000000000ULL;

static const struct { const char *name; int gpus, links; } PROFILE_SIZES[] = {
    {"a100", 8, 12}, {"h100", 8, 18}, {"h200", 8, 18}, {"b200", 8, 18}, {"gb200", 4, 18}};

static int nvml_index(CUdevice ordinal) { return ngpus - 1 - ordinal; }

CUresult cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext,
                      size_t ByteCount);

CUresult cuInit(unsigned int Flags) {
    if (Flags != 0) return CUDA_ERROR_INVALID_VALUE; /* "Flags: Initialization flag for CUDA; must be 0" */
    if (initialized) return CUDA_SUCCESS;
    const char *name = getenv("GANGSCOPE_STUB_PROFILE");
    ngpus = 8;
    for (size_t i = 0; i < sizeof PROFILE_SIZES / sizeof PROFILE_SIZES[0]; i++)
        if (name ? strcmp(name, PROFILE_SIZES[i].name) == 0 : strcmp("h200", PROFILE_SIZES[i].name) == 0) {
            ngpus = PROFILE_SIZES[i].gpus;
            nlinks = PROFILE_SIZES[i].links;
        }
    const char *n = getenv("GANGSCOPE_STUB_GPUS");
    if (n && atoi(n) > 0) ngpus = atoi(n) > STUB_MAX_GPUS ? STUB_MAX_GPUS : atoi(n);
    const char *rate = getenv("GANGSCOPE_STUB_COPY_GBPS");
    if (rate && atof(rate) > 0) copy_rate = atof(rate) * 1e9;
    const char *path = getenv("GANGSCOPE_STUB_STATE");
    if (path && *path) {
        int fd = open(path, O_RDWR);
        if (fd >= 0) {
            void *m = mmap(NULL, sizeof(struct stub_state), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            close(fd);
            if (m != MAP_FAILED) S = m;
        }
    }
    initialized = 1;
    return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *driverVersion) {
    if (!driverVersion) return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = 12080;
    return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char **pStr) {
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    switch (error) {
    case CUDA_SUCCESS: *pStr = "no error"; break;
    case CUDA_ERROR_INVALID_VALUE: *pStr = "invalid argument"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *pStr = "out of memory"; break;
    case CUDA_ERROR_NOT_INITIALIZED: *pStr = "initialization error"; break;
    case CUDA_ERROR_INVALID_DEVICE: *pStr = "invalid device ordinal"; break;
    case CUDA_ERROR_INVALID_CONTEXT: *pStr = "invalid device context"; break;
    default: *pStr = "unknown error"; return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = ngpus;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= ngpus) return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

/* The same bus ids as the NVML stand-in's nvmlDeviceGetPciInfo_v3 (its index i: bus 0x18 + 0x10 i). */
CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!pciBusId || len < 13) return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= ngpus) return CUDA_ERROR_INVALID_DEVICE;
    snprintf(pciBusId, len, "0000:%02X:00.0", 0x18 + 0x10 * nvml_index(dev));
    return CUDA_SUCCESS;
}

CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!canAccessPeer) return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= ngpus || peerDev < 0 || peerDev >= ngpus) return CUDA_ERROR_INVALID_DEVICE;
    *canAccessPeer = dev != peerDev;
    return CUDA_SUCCESS;
}

CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) {
    (void)flags;
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= ngpus) return CUDA_ERROR_INVALID_DEVICE;
    if (ncontexts >= 64) return CUDA_ERROR_OUT_OF_MEMORY;
    CUcontext c = &contexts[ncontexts++];
    c->device = dev;
    c->alive = 1;
    current = c;
    *pctx = c;
    return CUDA_SUCCESS;
}

static int valid_ctx(CUcontext c) { return c >= contexts && c < contexts + ncontexts && c->alive; }

CUresult cuCtxDestroy_v2(CUcontext ctx) {
    if (!valid_ctx(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    ctx->alive = 0;
    if (current == ctx) current = NULL;
    return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (ctx && !valid_ctx(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    current = ctx;
    return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    return valid_ctx(current) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags) {
    if (!valid_ctx(current) || !valid_ctx(peerContext)) return CUDA_ERROR_INVALID_CONTEXT;
    return Flags ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!valid_ctx(current)) return CUDA_ERROR_INVALID_CONTEXT;
    if (!dptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (allocs[i].used) continue;
        allocs[i] = (struct alloc){next_base, bytesize, current->device, 1};
        next_base += (bytesize + 0xFFFFF) & ~0xFFFFFULL; /* never dereferenced: no memory behind it */
        *dptr = allocs[i].base;
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (allocs[i].used && allocs[i].base == dptr) {
            allocs[i].used = 0;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags) {
    (void)Flags;
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!valid_ctx(current)) return CUDA_ERROR_INVALID_CONTEXT;
    if (!pp || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (host_allocs[i]) continue;
        void *p = mmap(NULL, bytesize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
        host_allocs[i] = p;
        host_sizes[i] = bytesize;
        *pp = p;
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuMemAllocHost_v2(void **pp, size_t bytesize) { return cuMemHostAlloc(pp, bytesize, 0); }

CUresult cuMemFreeHost(void *p) {
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (host_allocs[i] && host_allocs[i] == p) {
            munmap(p, host_sizes[i]);
            host_allocs[i] = NULL;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_VALUE;
}

/* The device of an allocation holding [p, p + n), or -1. */
static int device_of(CUdeviceptr p, size_t n) {
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (allocs[i].used && p >= allocs[i].base && p + n <= allocs[i].base + allocs[i].size) return allocs[i].device;
    return -1;
}

static int host_ok(const void *p, size_t n) {
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (host_allocs[i] && (const char *)p >= (const char *)host_allocs[i] &&
            (const char *)p + n <= (const char *)host_allocs[i] + host_sizes[i])
            return 1;
    return 0; /* only pinned buffers: the smoke test's copies must be DMA, not staged */
}

static void pause_for(double seconds) {
    struct timespec t = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
    nanosleep(&t, NULL);
}

/* Move n bytes at the link's pace, in 64 MiB steps, so a reader sees the counters climb. */
static void move(volatile uint64_t *payload, volatile uint64_t *other, size_t n, uint64_t payload_extra_div,
                 uint64_t other_div) {
    const size_t step = 64u << 20;
    for (size_t done = 0; done < n;) {
        size_t k = n - done < step ? n - done : step;
        pause_for((double)k / copy_rate);
        __atomic_add_fetch(payload, k + k / payload_extra_div, __ATOMIC_SEQ_CST);
        if (other) __atomic_add_fetch(other, k / other_div, __ATOMIC_SEQ_CST);
        done += k;
    }
    __atomic_add_fetch(&S->cuda_bytes, n, __ATOMIC_SEQ_CST);
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!valid_ctx(current)) return CUDA_ERROR_INVALID_CONTEXT;
    int dev = device_of(dstDevice, ByteCount);
    if (dev < 0 || !srcHost || !host_ok(srcHost, ByteCount)) return CUDA_ERROR_INVALID_VALUE;
    struct stub_gpu *g = &S->gpu[nvml_index(dev)];
    move(&g->pcie_rx, &g->pcie_tx, ByteCount, 32, 64);
    return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!valid_ctx(current)) return CUDA_ERROR_INVALID_CONTEXT;
    int dev = device_of(srcDevice, ByteCount);
    if (dev < 0 || !dstHost || !host_ok(dstHost, ByteCount)) return CUDA_ERROR_INVALID_VALUE;
    struct stub_gpu *g = &S->gpu[nvml_index(dev)];
    move(&g->pcie_tx, NULL, ByteCount, 32, 1);
    return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!valid_ctx(current)) return CUDA_ERROR_INVALID_CONTEXT;
    int a = device_of(dstDevice, ByteCount), b = device_of(srcDevice, ByteCount);
    if (a < 0 || b < 0) return CUDA_ERROR_INVALID_VALUE;
    if (a != b) return cuMemcpyPeer(dstDevice, current, srcDevice, current, ByteCount);
    return CUDA_SUCCESS; /* inside one GPU's memory: no link moves */
}

CUresult cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext,
                      size_t ByteCount) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!valid_ctx(dstContext) || !valid_ctx(srcContext)) return CUDA_ERROR_INVALID_CONTEXT;
    int dst = device_of(dstDevice, ByteCount), src = device_of(srcDevice, ByteCount);
    if (dst < 0 || src < 0 || dst == src) return CUDA_ERROR_INVALID_VALUE;
    struct stub_gpu *s = &S->gpu[nvml_index(src)], *d = &S->gpu[nvml_index(dst)];
    size_t share = ByteCount / nlinks, rest = ByteCount - share * nlinks;
    pause_for((double)ByteCount / (copy_rate * 5));
    for (int l = 0; l < nlinks; l++) {
        size_t k = share + (l == 0 ? rest : 0);
        __atomic_add_fetch(&s->nvlink_tx[l], k, __ATOMIC_SEQ_CST);
        __atomic_add_fetch(&d->nvlink_rx[l], k, __ATOMIC_SEQ_CST);
    }
    __atomic_add_fetch(&S->cuda_bytes, ByteCount, __ATOMIC_SEQ_CST);
    return CUDA_SUCCESS;
}

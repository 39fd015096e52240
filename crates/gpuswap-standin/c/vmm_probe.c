/*
 * vmm_probe.c: exercises the virtual-memory-management path that gpuswap relies on to
 * move a chunk between device and host at an unchanged address:
 *
 *   reserve 2 granules; map a DEVICE handle at the first; fill it; create a HOST handle
 *   and map it at a scratch reservation; copy device to host; unmap the device handle;
 *   map the host handle at the original address; release the device handle.
 *
 * and checks that the bytes at the original address are intact, that both mappings of
 * the host handle show the same bytes, and what cuMemGetInfo_v2 says at each step.
 * Then it moves IN_FLIGHT device chunks into one host handle mapped granule by granule
 * at offsets, with all the async copies in flight on one stream and one synchronize, as
 * gpuswap's bulk moves do, and prints how long the copies took.
 * Runs against the stand-in or a real driver; checks of stand-in-only behaviour (exact
 * free-memory figures, errors instead of faults) run only on the stand-in.
 * Exit status 0 when every check passes, 1 otherwise.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_subset.h"
#include "gpuswap_common.h"

static int failures;

#define CK(call)                                                                              \
    do {                                                                                      \
        CUresult r_ = (call);                                                                 \
        if (r_ != CUDA_SUCCESS) {                                                             \
            const char *n_ = NULL;                                                            \
            cuGetErrorName(r_, &n_);                                                          \
            fprintf(stderr, "vmm-probe: FAIL: %s: error %d %s\n", #call, (int)r_,            \
                    n_ ? n_ : "?");                                                           \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

#define CHECK(cond, ...)                                                                      \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "vmm-probe: FAIL: " __VA_ARGS__);                                 \
            fprintf(stderr, " [%s]\n", #cond);                                                \
            failures++;                                                                       \
        }                                                                                     \
    } while (0)

#define IN_FLIGHT 4 /* device chunks moved together */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static size_t mem_free(void);

/* IN_FLIGHT device chunks, each filled with its own pattern, copied into one host handle
 * mapped granule by granule at offsets (the whole handle at once where a driver refuses
 * offsets), the copies queued on one stream and waited for once; checks every byte. */
static void in_flight_together(size_t g, const CUmemAllocationProp *dprop,
                               const CUmemAllocationProp *hprop, uint32_t *back)
{
    CUmemAccessDesc rw = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CUmemGenericAllocationHandle dev[IN_FLIGHT], host;
    CUdeviceptr src, dst;
    CUstream stream;
    size_t f0 = mem_free();
    int offsets = 1;
    CK(cuMemAddressReserve(&src, IN_FLIGHT * g, 0, 0, 0));
    CK(cuMemAddressReserve(&dst, IN_FLIGHT * g, 0, 0, 0));
    CK(cuMemCreate(&host, IN_FLIGHT * g, hprop, 0));
    for (size_t i = 0; i < IN_FLIGHT; i++) {
        CUresult r = offsets ? cuMemMap(dst + i * g, g, i * g, host, 0) : CUDA_SUCCESS;
        if (r != CUDA_SUCCESS && i == 0) {
            fprintf(stderr, "vmm-probe: cuMemMap at an offset gave %d; mapping whole\n", (int)r);
            offsets = 0;
            CK(cuMemMap(dst, IN_FLIGHT * g, 0, host, 0));
            CK(cuMemSetAccess(dst, IN_FLIGHT * g, &rw, 1));
        } else if (offsets) {
            CK(r);
            CK(cuMemSetAccess(dst + i * g, g, &rw, 1));
        }
        CK(cuMemCreate(&dev[i], g, dprop, 0));
        CK(cuMemMap(src + i * g, g, 0, dev[i], 0));
        CK(cuMemSetAccess(src + i * g, g, &rw, 1));
        for (size_t w = 0; w < g / 4; w++)
            back[w] = gpuswap_pattern((uint32_t)(100 + i), w);
        CK(cuMemcpyHtoD_v2(src + i * g, back, g));
    }
    CK(cuStreamCreate(&stream, 1 /* CU_STREAM_NON_BLOCKING */));
    double t0 = now_ms();
    for (size_t i = 0; i < IN_FLIGHT; i++)
        CK(cuMemcpyDtoDAsync_v2(dst + i * g, src + i * g, g, stream));
    CK(cuStreamSynchronize(stream));
    fprintf(stderr, "vmm-probe: %d async copies in flight took %.0f ms\n", IN_FLIGHT,
            now_ms() - t0);
    for (size_t i = 0; i < IN_FLIGHT; i++) {
        CK(cuMemcpyDtoH_v2(back, dst + i * g, g));
        size_t w = 0;
        while (w < g / 4 && back[w] == gpuswap_pattern((uint32_t)(100 + i), w))
            w++;
        CHECK(w == g / 4, "chunk %zu copied in flight differs at word %zu", i, w);
    }
    CK(cuStreamDestroy_v2(stream));
    for (size_t i = 0; i < IN_FLIGHT; i++) {
        CK(cuMemUnmap(src + i * g, g));
        CK(cuMemRelease(dev[i]));
        if (offsets)
            CK(cuMemUnmap(dst + i * g, g));
    }
    if (!offsets)
        CK(cuMemUnmap(dst, IN_FLIGHT * g));
    CK(cuMemRelease(host));
    CK(cuMemAddressFree(src, IN_FLIGHT * g));
    CK(cuMemAddressFree(dst, IN_FLIGHT * g));
    CHECK(mem_free() == f0, "free memory changed across the copies in flight");
}

static size_t mem_free(void)
{
    size_t f = 0, t = 0;
    CK(cuMemGetInfo_v2(&f, &t));
    return f;
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fill;
    char name[64] = "";
    size_t g = 0;
    CUdeviceptr va, scratch, scratch2;
    CUmemGenericAllocationHandle dh, hh, d2;
    CUmemAllocationProp dprop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                 .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
    CUmemAllocationProp hprop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                 .location = {CU_MEM_LOCATION_TYPE_HOST, 0}};
    CUmemAccessDesc rw = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};

    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuDeviceGetName(name, sizeof name, dev));
    int standin = strcmp(name, "gpuswap CPU stand-in") == 0;
    CK(cuMemGetAllocationGranularity(&g, &dprop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    fprintf(stderr, "vmm-probe: device \"%s\", granularity %zu\n", name, g);
    if (standin)
        CHECK(g == 2u << 20, "granularity %zu, expected 2 MiB", g);

    uint32_t *pat = malloc(g), *back = malloc(g);
    if (pat == NULL || back == NULL)
        return 1;
    for (size_t i = 0; i < g / 4; i++)
        pat[i] = gpuswap_pattern(42, i);

    /* A device chunk at va, filled. */
    CK(cuMemAddressReserve(&va, 2 * g, 0, 0, 0));
    size_t f0 = mem_free();
    CK(cuMemCreate(&dh, g, &dprop, 0));
    size_t f1 = mem_free();
    CK(cuMemMap(va, g, 0, dh, 0));
    CK(cuMemSetAccess(va, g, &rw, 1));
    CK(cuMemcpyHtoD_v2(va, pat, g));

    /* A host handle at a scratch reservation receives a copy. */
    CUresult hr = cuMemCreate(&hh, g, &hprop, 0);
    if (hr != CUDA_SUCCESS) { /* older drivers take only HOST_NUMA for cuMemCreate */
        fprintf(stderr, "vmm-probe: cuMemCreate(HOST) gave %d; trying HOST_NUMA 0\n", (int)hr);
        hprop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
        CK(cuMemCreate(&hh, g, &hprop, 0));
    }
    size_t f2 = mem_free();
    CK(cuMemAddressReserve(&scratch, g, 0, 0, 0));
    CK(cuMemMap(scratch, g, 0, hh, 0));
    CK(cuMemSetAccess(scratch, g, &rw, 1));
    CK(cuMemcpyDtoD_v2(scratch, va, g));

    /* Swap the host handle in under the unchanged address; drop the device handle. */
    CK(cuMemUnmap(va, g));
    CK(cuMemMap(va, g, 0, hh, 0));
    CK(cuMemSetAccess(va, g, &rw, 1));
    CK(cuMemRelease(dh));
    size_t f3 = mem_free();
    CK(cuMemcpyDtoH_v2(back, va, g));
    CHECK(memcmp(back, pat, g) == 0, "bytes at the original address changed");

    /* Both mappings of the host handle show the same bytes. */
    uint32_t word = 0xC0FFEE11u, seen = 0;
    CK(cuMemcpyHtoD_v2(va + 400, &word, 4));
    CK(cuMemcpyDtoH_v2(&seen, scratch + 400, 4));
    CHECK(seen == word, "write through one mapping not seen through the other");

    /* A released handle lives until its last mapping goes. */
    CK(cuMemAddressReserve(&scratch2, g, 0, 0, 0));
    CK(cuMemCreate(&d2, g, &dprop, 0));
    CK(cuMemMap(scratch2, g, 0, d2, 0));
    size_t f4 = mem_free();
    CK(cuMemRelease(d2));
    size_t f5 = mem_free();
    CK(cuMemUnmap(scratch2, g));
    size_t f6 = mem_free();

    fprintf(stderr,
            "vmm-probe: free: start %zu, +device %zu, +host %zu, device released %zu; "
            "second device mapped %zu, released %zu, unmapped %zu\n",
            f0, f1, f2, f3, f4, f5, f6);
    if (standin) {
        CHECK(f0 - f1 == g, "cuMemCreate(DEVICE) charged %zd", (ssize_t)(f0 - f1));
        CHECK(f2 == f1, "cuMemCreate(HOST) charged VRAM");
        CHECK(f3 - f2 == g, "releasing the device handle freed %zd", (ssize_t)(f3 - f2));
        CHECK(f5 == f4, "a released but mapped handle was freed");
        CHECK(f6 - f5 == g, "unmapping the released handle freed %zd", (ssize_t)(f6 - f5));
    } else {
        CHECK(f3 > f2 && f6 > f5, "releasing device memory did not raise free memory");
    }

    /* Entry points: base names resolve to the newest version; versioned and unknown
     * names are not found (NVIDIA's driver 580 behaves exactly so). */
    void *pfn = NULL;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
    CUresult pr = cuGetProcAddress_v2("cuNoSuchEntryPoint", &pfn, 12000, 0, &status);
    CHECK(pr == CUDA_SUCCESS && pfn == NULL && status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND,
          "cuGetProcAddress_v2 of an unknown symbol gave %d, status %d", (int)pr, (int)status);
    pr = cuGetProcAddress_v2("cuMemAlloc_v2", &pfn, 12000, 0, &status);
    CHECK(pr == CUDA_SUCCESS && pfn == NULL && status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND,
          "cuGetProcAddress_v2 of a versioned name gave %d, status %d", (int)pr, (int)status);
    CHECK(cuGetProcAddress("cuNoSuchEntryPoint", &pfn, 12000, 0) == CUDA_ERROR_NOT_FOUND,
          "legacy cuGetProcAddress of an unknown symbol");
    CHECK(cuGetProcAddress_v2("cuMemAlloc", &pfn, 12000, 0, &status) == CUDA_SUCCESS &&
              status == CU_GET_PROC_ADDRESS_SUCCESS && pfn == (void *)&cuMemAlloc_v2,
          "cuGetProcAddress_v2(\"cuMemAlloc\") is not cuMemAlloc_v2");
    CHECK(cuGetProcAddress("cuMemcpy", &pfn, 12000, 0) == CUDA_SUCCESS && pfn == (void *)&cuMemcpy,
          "cuGetProcAddress(\"cuMemcpy\") is not cuMemcpy");
    CHECK(cuGetProcAddress_v2("cuGetProcAddress", &pfn, 11080, 0, NULL) == CUDA_SUCCESS &&
              pfn == (void *)&cuGetProcAddress,
          "a CUDA 11.8 caller did not get the legacy cuGetProcAddress");

    in_flight_together(g, &dprop, &hprop, back);

    /* Stand-in only: bad addresses are errors, not faults. */
    if (standin) {
        unsigned long long n = g / 4;
        unsigned int seed = 1;
        CUdeviceptr hole = va + g; /* reserved, never mapped */
        void *params[] = {&hole, &n, &seed};
        CHECK(cuMemcpyHtoD_v2(hole, pat, 16) == CUDA_ERROR_INVALID_VALUE, "copy to a hole");
        CHECK(cuMemcpyDtoD_v2(va + g - 8, va, 16) == CUDA_ERROR_INVALID_VALUE,
              "copy straddling the end of a mapping");
        CHECK(cuMemsetD32_v2(hole, 0, 4) == CUDA_ERROR_INVALID_VALUE, "memset of a hole");
        CK(cuModuleLoadData(&mod, "gpuswap-standin-builtin"));
        CK(cuModuleGetFunction(&fill, mod, "gpuswap_fill"));
        CHECK(cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL) ==
                  CUDA_ERROR_ILLEGAL_ADDRESS,
              "kernel on a hole");
        CHECK(cuMemAddressFree(va, 2 * g) == CUDA_ERROR_INVALID_VALUE,
              "freeing a reservation that still has mappings");
        CHECK(cuMemFree_v2(va) == CUDA_ERROR_INVALID_VALUE, "cuMemFree_v2 of a VMM address");
    }

    CK(cuMemUnmap(va, g));
    CK(cuMemUnmap(scratch, g));
    CK(cuMemRelease(hh));
    CK(cuMemAddressFree(va, 2 * g));
    CK(cuMemAddressFree(scratch, g));
    CK(cuMemAddressFree(scratch2, g));
    if (standin)
        CHECK(mem_free() == f0, "free memory did not return to its start");
    CK(cuDevicePrimaryCtxRelease_v2(dev));
    if (failures == 0)
        printf("vmm-probe: ok\n");
    return failures == 0 ? 0 : 1;
}

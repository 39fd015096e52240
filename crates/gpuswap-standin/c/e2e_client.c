/*
 * e2e_client.c: gpuswap's end-to-end test client, a plain CUDA driver-API program.
 *
 * It allocates N buffers, fills each on the device (gpuswap_fill), then for each round
 * verifies every buffer in two ways (gpuswap_checksum against the host's checksum, and a
 * full copy back compared word by word) and refills it with the next round's seed.
 * Linked by soname against libcuda.so.1: the gpuswap stand-in in CI, NVIDIA's driver on
 * a GPU machine (there run it with --ptx e2e_kernels.ptx). Before the rounds it checks
 * gpuswap_axpy once on a small scratch buffer.
 *
 * With --fork-child-ms MS it forks once its buffers are allocated, as PyTorch's DataLoader
 * does: the child makes no CUDA call, sleeps MS ms and exits; its pid is printed
 * ("e2e-client: forked child PID"). A parent that ends must be seen gone by the daemon.
 *
 * With --try-alloc BYTES it only calls cuMemAlloc once with BYTES once its context is
 * current, frees what it got and exits (0, or 2 with the error printed), to see how an
 * allocation of any size is answered.
 *
 * With --launches K it launches K checksum kernels over the first word of buffer 0 once
 * the axpy check passed (the launch path's cost, printed per launch as
 * "launch_ns_each"), then queues one device-to-device copy in the scratch buffer and
 * waits for it with cuStreamSynchronize (a synchronize that waits for a copy in
 * flight), before the rounds.
 *
 * With --hot-buffers H the rounds verify and refill only the first H buffers; the others
 * stay cold (filled at the start, verified at the end only), as a program's data it
 * rarely touches, which a memory manager may leave in host memory.
 *
 * With --devices D it spreads the buffers over devices 0 to D-1 (buffer b on device
 * b mod D), each device with its own context, module and scratch buffer, and makes the
 * buffer's device's context current before each call on it, as a program that uses
 * several GPUs from one thread does.
 *
 * With --resolve runtime it finds the calls that allocate, free, copy and launch as the
 * CUDA runtime (libcudart) does: dlopen("libcuda.so.1"), dlsym "cuGetProcAddress_v2",
 * then each function by its base name; an interposer must answer both look-ups.
 *
 * Exit status: 0 ok, 1 data mismatch, 2 CUDA error, 64 bad flags. On success prints
 * one JSON line to stdout; progress goes to stderr, prefixed "e2e-client:".
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_subset.h"
#include "gpuswap_common.h"

/* The calls that --resolve redirects; by default the ones the program links. */
static CUresult (*p_alloc)(CUdeviceptr *, size_t) = cuMemAlloc_v2;
static CUresult (*p_free)(CUdeviceptr) = cuMemFree_v2;
static CUresult (*p_htod)(CUdeviceptr, const void *, size_t) = cuMemcpyHtoD_v2;
static CUresult (*p_dtoh)(void *, CUdeviceptr, size_t) = cuMemcpyDtoH_v2;
static CUresult (*p_launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, unsigned, CUstream, void **, void **) = cuLaunchKernel;

/* Looks the calls up as libcudart does. */
static void resolve_as_runtime(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    CUresult (*gpa)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) =
        lib ? (CUresult(*)(const char *, void **, int, cuuint64_t,
                           CUdriverProcAddressQueryResult *))dlsym(lib, "cuGetProcAddress_v2")
            : NULL;
    if (gpa == NULL) {
        fprintf(stderr, "e2e-client: cannot find cuGetProcAddress_v2: %s\n", dlerror());
        exit(2);
    }
    struct { const char *name; void **slot; } calls[] = {
        {"cuMemAlloc", (void **)&p_alloc},       {"cuMemFree", (void **)&p_free},
        {"cuMemcpyHtoD", (void **)&p_htod},      {"cuMemcpyDtoH", (void **)&p_dtoh},
        {"cuLaunchKernel", (void **)&p_launch},
    };
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        CUdriverProcAddressQueryResult status;
        void *fn = NULL;
        if (gpa(calls[i].name, &fn, 12000, 0, &status) != CUDA_SUCCESS || fn == NULL) {
            fprintf(stderr, "e2e-client: cuGetProcAddress_v2(%s) found nothing\n", calls[i].name);
            exit(2);
        }
        *calls[i].slot = fn;
    }
}

#define cuMemAlloc_v2 p_alloc
#define cuMemFree_v2 p_free
#define cuMemcpyHtoD_v2 p_htod
#define cuMemcpyDtoH_v2 p_dtoh
#define cuLaunchKernel p_launch

#define AXPY_N 4096 /* floats in each of the axpy check's vectors */

static const char *err_name(CUresult r)
{
    const char *s = NULL;
    return cuGetErrorName(r, &s) == CUDA_SUCCESS && s ? s : "unknown CUresult";
}

static void cuda_failed(const char *call, long buffer, long round, CUresult r)
{
    char where[64] = "";
    if (buffer >= 0)
        snprintf(where, sizeof where, " (buffer %ld, round %ld)", buffer, round);
    fprintf(stderr, "e2e-client: %s failed%s: error %d %s\n", call, where, (int)r, err_name(r));
    exit(2);
}

/* Every CUDA call goes through CK: on error, report the call, where, the code; exit 2. */
#define CK(call, buffer, round)                                                               \
    do {                                                                                      \
        CUresult r_ = (call);                                                                 \
        if (r_ != CUDA_SUCCESS)                                                               \
            cuda_failed(#call, (long)(buffer), (long)(round), r_);                            \
    } while (0)

static void usage(const char *what, const char *arg)
{
    fprintf(stderr,
            "e2e-client: %s%s\n"
            "usage: gpuswap-e2e-client [--buffers N] [--size BYTES] [--rounds R] [--seed S]\n"
            "                          [--hold-ms MS] [--ptx FILE] [--own-context]\n"
            "                          [--resolve link|runtime] [--fork-child-ms MS]\n"
            "                          [--try-alloc BYTES] [--launches K] [--pitched]\n"
            "                          [--hot-buffers H] [--devices D]\n"
            "  --buffers N    buffers to allocate, 1 to 100000 (default 4)\n"
            "  --size BYTES   bytes per buffer, a positive multiple of 4, with an optional\n"
            "                 K/M/G or KiB/MiB/GiB suffix (default 16MiB)\n"
            "  --rounds R     verify-and-refill rounds (default 3)\n"
            "  --seed S       base seed, below 2^32 (default 1)\n"
            "  --hold-ms MS   sleep before each round (default 0)\n"
            "  --ptx FILE     load this PTX as the module (default: the stand-in's built-in)\n"
            "  --own-context  use cuCtxCreate_v2 instead of the primary context\n"
            "  --resolve runtime  find the calls through dlsym and cuGetProcAddress_v2, as\n"
            "                 libcudart does (default link: the symbols the program links)\n"
            "  --fork-child-ms MS  once allocated, fork a child that makes no CUDA call and\n"
            "                 exits after MS ms\n"
            "  --try-alloc BYTES  only allocate BYTES once (any number below 2^64) and exit\n"
            "  --launches K   launch K small kernels on buffer 0, then copy and synchronize\n"
            "  --pitched      allocate each buffer as 2 rows of size/2 bytes with\n"
            "                 cuMemAllocPitch_v2 (found at run time: the interposer's), and\n"
            "                 check the pitch (a multiple of 512, at least a row)\n"
            "  --hot-buffers H  the rounds touch only the first H buffers (default all)\n"
            "  --devices D    spread the buffers over devices 0 to D-1, 1 to 8 (default 1)\n",
            what, arg ? arg : "");
    exit(64);
}

static uint64_t number(const char *flag, const char *s, uint64_t max)
{
    char *end = NULL;
    uint64_t v = 0;
    if (s != NULL && *s >= '0' && *s <= '9')
        v = strtoull(s, &end, 10);
    if (end == NULL || *end != '\0' || v > max)
        usage("bad or missing number after ", flag);
    return v;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void sleep_ms(uint64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long len;
    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET) != 0 || (buf = calloc(1, (size_t)len + 1)) == NULL ||
        fread(buf, 1, (size_t)len, f) != (size_t)len) {
        fprintf(stderr, "e2e-client: cannot read %s\n", path);
        exit(2);
    }
    fclose(f);
    return buf; /* NUL-terminated, as cuModuleLoadData wants PTX */
}

static CUfunction f_fill, f_checksum, f_axpy;

#define DEVICES_MAX 8

/* What the program keeps per device (--devices). */
struct device {
    CUcontext ctx;
    CUfunction fill, checksum, axpy;
    CUdeviceptr scratch;
};
static struct device g_dev[DEVICES_MAX];

/* Makes device d's context current and its kernels the ones launched. */
static void use_device(uint64_t d)
{
    CK(cuCtxSetCurrent(g_dev[d].ctx), -1, 0);
    f_fill = g_dev[d].fill, f_checksum = g_dev[d].checksum, f_axpy = g_dev[d].axpy;
}

/* Grid-stride launch: 256 blocks of 256 threads whatever the size. */
static CUresult launch(CUfunction f, void **params)
{
    return cuLaunchKernel(f, 256, 1, 1, 256, 1, 1, 0, NULL, params, NULL);
}

static uint64_t host_checksum(uint32_t seed, uint64_t words)
{
    uint64_t sum = 0;
    for (uint64_t i = 0; i < words; i++)
        sum += (uint64_t)gpuswap_pattern(seed, i) * gpuswap_checksum_weight(i);
    return sum;
}

/* Checks buffer b against the pattern of seed, by checksum kernel then by a full copy. */
static void verify(CUdeviceptr buf, uint64_t words, uint32_t seed, uint32_t *host,
                   CUdeviceptr out, long b, long round)
{
    uint64_t zero = 0, sum = 0, expect = host_checksum(seed, words);
    void *params[] = {&buf, &words, &out};
    CK(cuMemcpyHtoD_v2(out, &zero, sizeof zero), b, round);
    CK(launch(f_checksum, params), b, round);
    CK(cuCtxSynchronize(), b, round);
    CK(cuMemcpyDtoH_v2(&sum, out, sizeof sum), b, round);
    if (sum != expect) {
        fprintf(stderr, "e2e-client: checksum mismatch: buffer %ld round %ld expected %" PRIu64
                        " found %" PRIu64 "\n", b, round, expect, sum);
        exit(1);
    }
    CK(cuMemcpyDtoH_v2(host, buf, words * 4), b, round);
    for (uint64_t i = 0; i < words; i++) {
        if (host[i] != gpuswap_pattern(seed, i)) {
            fprintf(stderr, "e2e-client: data mismatch: buffer %ld round %ld word %" PRIu64
                            " expected 0x%08x found 0x%08x\n",
                    b, round, i, gpuswap_pattern(seed, i), host[i]);
            exit(1);
        }
    }
}

static void fill(CUdeviceptr buf, uint64_t words, uint32_t seed, long b, long round)
{
    void *params[] = {&buf, &words, &seed};
    CK(launch(f_fill, params), b, round);
}

/* y = a * x + y on AXPY_N floats in scratch, compared bit for bit with the host. */
static void check_axpy(CUdeviceptr scratch)
{
    static float x[AXPY_N], y[AXPY_N], got[AXPY_N];
    CUdeviceptr dy = scratch + 4096, dx = dy + sizeof y;
    unsigned long long n = AXPY_N;
    float a = 1.5f;
    void *params[] = {&dy, &dx, &n, &a};
    for (int i = 0; i < AXPY_N; i++) {
        x[i] = (float)(int32_t)gpuswap_pattern(7, (uint64_t)i) / 65536.0f;
        y[i] = (float)(int32_t)gpuswap_pattern(8, (uint64_t)i) / 4096.0f;
    }
    CK(cuMemcpyHtoD_v2(dx, x, sizeof x), -1, 0);
    CK(cuMemcpyHtoD_v2(dy, y, sizeof y), -1, 0);
    CK(launch(f_axpy, params), -1, 0);
    CK(cuCtxSynchronize(), -1, 0);
    CK(cuMemcpyDtoH_v2(got, dy, sizeof got), -1, 0);
    for (int i = 0; i < AXPY_N; i++) {
        float want = a * x[i] + y[i]; /* built with -ffp-contract=off: no fused multiply-add */
        if (memcmp(&want, &got[i], sizeof want) != 0) {
            fprintf(stderr, "e2e-client: axpy mismatch at %d: expected %a found %a\n", i,
                    (double)want, (double)got[i]);
            exit(1);
        }
    }
}

/* K checksum kernels over buffer 0's first word, then a device-to-device copy in scratch
 * waited for by cuStreamSynchronize; returns the launches' nanoseconds each. */
static double launch_many(uint64_t k, CUdeviceptr buf, CUdeviceptr scratch)
{
    unsigned long long one = 1;
    void *params[] = {&buf, &one, &scratch};
    double t = now_ms();
    for (uint64_t i = 0; i < k; i++)
        CK(launch(f_checksum, params), 0, 0);
    double each_ns = k ? (now_ms() - t) * 1e6 / (double)k : 0;
    CK(cuMemcpyDtoDAsync_v2(scratch + 2048, scratch + 1024, 8, NULL), -1, 0);
    CK(cuStreamSynchronize(NULL), -1, 0);
    fprintf(stderr, "e2e-client: launched %" PRIu64 " kernels, %.1f ns each\n", k, each_ns);
    return each_ns;
}

/* A child that holds nothing of its own, as a DataLoader worker: it sleeps and exits. */
static void fork_child(uint64_t ms)
{
    fflush(stderr);
    pid_t child = fork();
    if (child < 0) {
        fprintf(stderr, "e2e-client: fork failed\n");
        exit(2);
    }
    if (child == 0) {
        sleep_ms(ms);
        _exit(0);
    }
    fprintf(stderr, "e2e-client: forked child %d\n", (int)child);
}

/* Buffer b as 2 rows of size/2 bytes from cuMemAllocPitch_v2, which the stand-in does
 * not export: the interposer's, found at run time. The rows are contiguous enough for the
 * rounds' size bytes, as the pitch is at least a row. */
static void alloc_pitched(CUdeviceptr *dptr, uint64_t size, uint64_t b)
{
    CUresult (*alloc_pitch)(CUdeviceptr *, size_t *, size_t, size_t, unsigned) =
        (CUresult(*)(CUdeviceptr *, size_t *, size_t, size_t, unsigned))dlsym(
            RTLD_DEFAULT, "cuMemAllocPitch_v2");
    if (alloc_pitch == NULL) {
        fprintf(stderr, "e2e-client: no cuMemAllocPitch_v2 (run it under the interposer)\n");
        exit(2);
    }
    size_t pitch = 0, row = (size_t)(size / 2);
    CK(alloc_pitch(dptr, &pitch, row, 2, 4), (long)b, 0);
    if (pitch < row || pitch % 512 != 0) {
        fprintf(stderr, "e2e-client: pitch %zu for rows of %zu bytes\n", pitch, row);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    uint64_t buffers = 4, size = 16ull << 20, rounds = 3, seed = 1, hold_ms = 0, verified = 0;
    uint64_t fork_child_ms = 0, try_alloc = 0, launches = 0, pitched = 0, hot = UINT64_MAX;
    uint64_t devices = 1;
    double launch_ns_each = 0;
    const char *ptx = NULL;
    int own_context = 0, resolve_runtime = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--own-context")) {
            own_context = 1;
            continue;
        }
        if (!strcmp(a, "--pitched")) {
            pitched = 1;
            continue;
        }
        if (!strcmp(a, "--buffers"))
            buffers = number(a, v, 100000);
        else if (!strcmp(a, "--size") && (v == NULL || gpuswap_parse_size(v, &size) != 0))
            usage("bad or missing byte count (e.g. 65536, 64K, 64M, 64MiB) after ", a);
        else if (!strcmp(a, "--rounds"))
            rounds = number(a, v, 1000000);
        else if (!strcmp(a, "--seed"))
            seed = number(a, v, UINT32_MAX);
        else if (!strcmp(a, "--hold-ms"))
            hold_ms = number(a, v, 86400000);
        else if (!strcmp(a, "--fork-child-ms"))
            fork_child_ms = number(a, v, 86400000);
        else if (!strcmp(a, "--try-alloc"))
            try_alloc = number(a, v, UINT64_MAX);
        else if (!strcmp(a, "--launches"))
            launches = number(a, v, 1000000000);
        else if (!strcmp(a, "--hot-buffers"))
            hot = number(a, v, 100000);
        else if (!strcmp(a, "--devices"))
            devices = number(a, v, DEVICES_MAX);
        else if (!strcmp(a, "--ptx") && v == NULL)
            usage("missing file after ", a);
        else if (!strcmp(a, "--ptx"))
            ptx = v;
        else if (!strcmp(a, "--resolve") && v != NULL && !strcmp(v, "runtime"))
            resolve_runtime = 1;
        else if (!strcmp(a, "--resolve") && (v == NULL || strcmp(v, "link") != 0))
            usage("--resolve takes link or runtime, not ", v ? v : "nothing");
        else if (strcmp(a, "--size") != 0 && strcmp(a, "--resolve") != 0)
            usage("unknown argument ", a);
        i++;
    }
    if (buffers == 0 || size == 0 || size % 4 != 0)
        usage("--buffers must be at least 1 and --size a positive multiple of 4", NULL);
    if (devices == 0)
        usage("--devices must be at least 1", NULL);

    double t0 = now_ms();
    uint64_t words = size / 4;
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUdeviceptr *buf = calloc(buffers, sizeof *buf);
    uint32_t *host = malloc(size);
    if (buf == NULL || host == NULL) {
        fprintf(stderr, "e2e-client: out of host memory\n");
        return 2;
    }
    if (resolve_runtime)
        resolve_as_runtime();
    CK(cuInit(0), -1, 0);
    for (uint64_t d = 0; d < devices; d++) {
        CK(cuDeviceGet(&dev, (int)d), -1, 0);
        if (own_context)
            CK(cuCtxCreate_v2(&ctx, 0, dev), -1, 0);
        else {
            CK(cuDevicePrimaryCtxRetain(&ctx, dev), -1, 0);
            CK(cuCtxSetCurrent(ctx), -1, 0);
        }
        g_dev[d].ctx = ctx;
    }
    use_device(0);
    if (try_alloc > 0) {
        CUdeviceptr probe;
        CK(cuMemAlloc_v2(&probe, (size_t)try_alloc), -1, 0);
        CK(cuMemFree_v2(probe), -1, 0);
        return 0;
    }
    for (uint64_t d = 0; d < devices; d++) { /* a module is its context's */
        CK(cuCtxSetCurrent(g_dev[d].ctx), -1, 0);
        if (ptx != NULL)
            CK(cuModuleLoadData(&mod, read_file(ptx)), -1, 0);
        else
            CK(cuModuleLoadData(&mod, "gpuswap-standin-builtin\0"), -1, 0);
        CK(cuModuleGetFunction(&g_dev[d].fill, mod, "gpuswap_fill"), -1, 0);
        CK(cuModuleGetFunction(&g_dev[d].checksum, mod, "gpuswap_checksum"), -1, 0);
        CK(cuModuleGetFunction(&g_dev[d].axpy, mod, "gpuswap_axpy"), -1, 0);
    }

    for (uint64_t b = 0; b < buffers; b++) {
        use_device(b % devices);
        if (pitched)
            alloc_pitched(&buf[b], size, b);
        else
            CK(cuMemAlloc_v2(&buf[b], size), b, 0);
        fill(buf[b], words, (uint32_t)(seed + b * 1000), (long)b, 0);
    }
    for (uint64_t d = 0; d < devices; d++) {
        use_device(d);
        CK(cuMemAlloc_v2(&g_dev[d].scratch, 4096 + 2 * AXPY_N * sizeof(float)), -1, 0);
        CK(cuCtxSynchronize(), -1, 0);
    }
    use_device(0);
    if (fork_child_ms > 0)
        fork_child(fork_child_ms);
    fprintf(stderr, "e2e-client: allocated %" PRIu64 " buffers of %" PRIu64 " bytes\n", buffers,
            size);
    for (uint64_t d = 0; d < devices; d++) {
        use_device(d);
        check_axpy(g_dev[d].scratch);
    }
    use_device(0);
    if (launches > 0)
        launch_ns_each = launch_many(launches, buf[0], g_dev[0].scratch);

    for (uint64_t r = 1; r <= rounds + 1; r++) { /* round rounds+1: the final check */
        if (r <= rounds)
            sleep_ms(hold_ms);
        for (uint64_t b = 0; b < buffers; b++) {
            /* A cold buffer keeps its first contents until the final check. */
            if (b >= hot && r <= rounds)
                continue;
            uint64_t last = b < hot ? r - 1 : 0;
            use_device(b % devices);
            verify(buf[b], words, (uint32_t)(seed + b * 1000 + last), host,
                   g_dev[b % devices].scratch, (long)b, (long)r);
            verified += size;
            if (r <= rounds)
                fill(buf[b], words, (uint32_t)(seed + b * 1000 + r), (long)b, (long)r);
        }
        for (uint64_t d = 0; d < devices; d++) {
            use_device(d);
            CK(cuCtxSynchronize(), -1, r);
        }
        if (r <= rounds)
            fprintf(stderr, "e2e-client: round %" PRIu64 " verified\n", r);
        else
            fprintf(stderr, "e2e-client: final contents verified\n");
    }

    size_t mem_free = 0, mem_total = 0;
    use_device(0);
    CK(cuMemGetInfo_v2(&mem_free, &mem_total), -1, 0);
    for (uint64_t b = 0; b < buffers; b++) {
        use_device(b % devices);
        CK(cuMemFree_v2(buf[b]), b, 0);
    }
    for (uint64_t d = 0; d < devices; d++) {
        use_device(d);
        CK(cuMemFree_v2(g_dev[d].scratch), -1, 0);
    }
    printf("{\"ok\":true,\"buffers\":%" PRIu64 ",\"bytes_per_buffer\":%" PRIu64
           ",\"rounds\":%" PRIu64 ",\"verified_bytes\":%" PRIu64 ",\"mem_info_free\":%zu"
           ",\"mem_info_total\":%zu,\"elapsed_ms\":%.0f,\"launches\":%" PRIu64
           ",\"launch_ns_each\":%.1f}\n",
           buffers, size, rounds, verified, mem_free, mem_total, now_ms() - t0, launches,
           launch_ns_each);
    return 0;
}

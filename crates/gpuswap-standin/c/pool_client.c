/*
 * pool_client.c: gpuswap's test client for the allocators beside cuMemAlloc (issue 41):
 * stream-ordered pools, managed memory, pitched memory and IPC, a plain CUDA
 * driver-API program like e2e_client.c.
 *
 *   --mode pools    BUFFERS buffers of SIZE, by turns from cuMemAllocAsync and from a
 *                   pool of its own (cuMemAllocFromPoolAsync), its release threshold set
 *                   and read back; half of them are copied into the others and freed in
 *                   stream order (cuMemFreeAsync behind the copies), then the rest.
 *   --mode managed  one cuMemAllocManaged of SIZE (advised and prefetched to the device)
 *                   beside BUFFERS cuMemAlloc buffers; the managed bytes are written by
 *                   the host directly and read back by the device.
 *   --mode pitch    a cuMemAllocPitch of SIZE rows of 1000 bytes, written and read with
 *                   cuMemcpy2D from host rows of another pitch.
 *   --mode export   one cuMemAlloc buffer of SIZE, exported with cuIpcGetMemHandle of
 *                   its middle (the handle names the whole buffer): the handle goes to
 *                   stdout as "handle HEX"; then BUFFERS more buffers of SIZE are
 *                   allocated beside it (under gpuswap beside another tenant: an
 *                   oversubscription, chunks evicted); once the importer wrote its
 *                   second half, both halves and the other buffers are verified.
 *                   With --fork-child-ms MS it forks, once exported, a child that makes
 *                   no CUDA call and lives MS ("pool-client: forked child PID" on
 *                   stderr), as a DataLoader worker outlives its trainer.
 *   --mode import --handle HEX   opens the export, verifies its first half and writes
 *                   its second half, verified again before it closes.
 *
 * Every buffer is written with gpuswap_pattern(seed, word) and verified word by word
 * ROUNDS times, HOLD_MS apart, so that a manager may move it between the checks. With
 * --steps the program stops at each step ("pool-client: step NAME" on stderr) until
 * stdin gives it a line, so a test can compare the books at that point.
 *
 * Exit status: 0 ok, 1 data mismatch, 2 CUDA error, 64 bad flags. On success prints
 * {"ok":true} to stdout (after the handle line in export mode).
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_subset.h"
#include "gpuswap_common.h"

#define MAX_BUFFERS 64
#define PITCH_WIDTH 1000

static int g_steps;
static unsigned long g_fork_child_ms;
static unsigned g_rounds = 2;
static unsigned long g_hold_ms = 100;

static void say(const char *what)
{
    fprintf(stderr, "pool-client: %s\n", what);
}

static void fail_cuda(const char *call, CUresult r)
{
    const char *name = "?";
    cuGetErrorName(r, &name);
    fprintf(stderr, "pool-client: %s failed: %s (%d)\n", call, name, (int)r);
    exit(2);
}

#define CHECK(call)                                                                          \
    do {                                                                                     \
        CUresult r_ = (call);                                                                \
        if (r_ != CUDA_SUCCESS)                                                              \
            fail_cuda(#call, r_);                                                            \
    } while (0)

/* A step a test may check the books at: stops until stdin gives a line. */
static void step(const char *name)
{
    char line[64];
    fprintf(stderr, "pool-client: step %s\n", name);
    if (g_steps && fgets(line, sizeof line, stdin) == NULL) {
        say("stdin closed at a step");
        exit(64);
    }
}

static void sleep_ms(unsigned long ms)
{
    struct timespec t = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static uint32_t *pattern(uint32_t seed, size_t bytes, size_t from_word)
{
    uint32_t *w = malloc(bytes);
    if (w == NULL) {
        say("out of host memory");
        exit(2);
    }
    for (size_t i = 0; i < bytes / 4; i++)
        w[i] = gpuswap_pattern(seed, from_word + i);
    return w;
}

/* Writes the pattern of seed to [d, d+bytes), its words numbered from from_word. */
static void fill(CUdeviceptr d, size_t bytes, uint32_t seed, size_t from_word)
{
    uint32_t *w = pattern(seed, bytes, from_word);
    CHECK(cuMemcpyHtoD_v2(d, w, bytes));
    free(w);
}

/* Verifies [d, d+bytes) holds the pattern of seed; exits 1 if not. */
static void verify(CUdeviceptr d, size_t bytes, uint32_t seed, size_t from_word, const char *who)
{
    uint32_t *want = pattern(seed, bytes, from_word), *got = malloc(bytes);
    if (got == NULL)
        exit(2);
    CHECK(cuMemcpyDtoH_v2(got, d, bytes));
    for (size_t i = 0; i < bytes / 4; i++)
        if (got[i] != want[i]) {
            fprintf(stderr, "pool-client: %s: word %zu is %08x, not %08x\n", who, i, got[i],
                    want[i]);
            exit(1);
        }
    free(want);
    free(got);
}

/* ROUNDS checks of every buffer, each refilled with the next seed, HOLD_MS apart. */
static void rounds(CUdeviceptr *d, size_t n, size_t bytes, uint32_t *seed)
{
    for (unsigned r = 0; r < g_rounds; r++) {
        sleep_ms(g_hold_ms);
        for (size_t i = 0; i < n; i++) {
            verify(d[i], bytes, seed[i], 0, "a round");
            fill(d[i], bytes, ++seed[i], 0);
        }
    }
}

static void mode_pools(size_t n, size_t bytes)
{
    CUdeviceptr d[MAX_BUFFERS];
    uint32_t seed[MAX_BUFFERS];
    CUstream s;
    CUmemoryPool pool;
    CUmemPoolProps props;
    cuuint64_t threshold = 64ull << 20, got = 0, used = 0;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location = (CUmemLocation){CU_MEM_LOCATION_TYPE_DEVICE, 0};
    CHECK(cuStreamCreate(&s, 0));
    CHECK(cuMemPoolCreate(&pool, &props));
    CHECK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
    CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &got));
    if (got != threshold) {
        say("the release threshold read back differs");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        if (i % 2 == 0)
            CHECK(cuMemAllocAsync(&d[i], bytes, s));
        else
            CHECK(cuMemAllocFromPoolAsync(&d[i], bytes, pool, s));
        seed[i] = (uint32_t)(100 + i);
        fill(d[i], bytes, seed[i], 0);
    }
    CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
    if (used < (n / 2) * bytes) {
        fprintf(stderr, "pool-client: the pool says %" PRIu64 " bytes used\n", used);
        exit(1);
    }
    step("allocated");
    rounds(d, n, bytes, seed);
    /* Stream order: each odd buffer is copied into the even one before it, then freed
     * behind the copy; the copy must have read it whole. */
    for (size_t i = 1; i < n; i += 2) {
        CHECK(cuMemcpyDtoDAsync_v2(d[i - 1], d[i], bytes, s));
        CHECK(cuMemFreeAsync(d[i], s));
        seed[i - 1] = seed[i];
    }
    CHECK(cuStreamSynchronize(s));
    step("freed-in-stream-order");
    size_t kept = 0;
    for (size_t i = 0; i < n; i += 2)
        d[kept] = d[i], seed[kept++] = seed[i];
    rounds(d, kept, bytes, seed);
    for (size_t i = 0; i < kept; i++)
        CHECK(cuMemFreeAsync(d[i], s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemPoolDestroy(pool));
    CHECK(cuStreamDestroy_v2(s));
    step("freed");
}

static void mode_managed(size_t n, size_t bytes)
{
    CUdeviceptr d[MAX_BUFFERS + 1], m;
    uint32_t seed[MAX_BUFFERS + 1];
    CHECK(cuMemAllocManaged(&m, bytes, CU_MEM_ATTACH_GLOBAL));
    CHECK(cuMemAdvise(m, bytes, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, 0));
    CHECK(cuMemPrefetchAsync(m, bytes, 0, NULL));
    /* Managed memory is the host's too: written in place, read by the device. */
    uint32_t *w = pattern(7, bytes, 0);
    memcpy((void *)(uintptr_t)m, w, bytes);
    free(w);
    d[0] = m, seed[0] = 7;
    for (size_t i = 1; i <= n; i++) {
        CHECK(cuMemAlloc_v2(&d[i], bytes));
        seed[i] = (uint32_t)(200 + i);
        fill(d[i], bytes, seed[i], 0);
    }
    step("allocated");
    rounds(d, n + 1, bytes, seed);
    for (size_t i = 0; i <= n; i++)
        CHECK(cuMemFree_v2(d[i]));
    step("freed");
}

static void mode_pitch(size_t height)
{
    CUdeviceptr d;
    size_t pitch, host_pitch = PITCH_WIDTH + 24;
    CHECK(cuMemAllocPitch_v2(&d, &pitch, PITCH_WIDTH, height, 4));
    if (pitch < PITCH_WIDTH) {
        say("the pitch is narrower than a row");
        exit(1);
    }
    uint8_t *src = calloc(height, host_pitch), *back = calloc(height, host_pitch);
    if (src == NULL || back == NULL)
        exit(2);
    for (size_t i = 0; i < height * host_pitch; i++)
        src[i] = (uint8_t)gpuswap_pattern(3, i);
    CUDA_MEMCPY2D c;
    memset(&c, 0, sizeof c);
    c.srcMemoryType = CU_MEMORYTYPE_HOST, c.srcHost = src, c.srcPitch = host_pitch;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE, c.dstDevice = d, c.dstPitch = pitch;
    c.WidthInBytes = PITCH_WIDTH, c.Height = height;
    CHECK(cuMemcpy2D_v2(&c));
    step("allocated");
    for (unsigned r = 0; r <= g_rounds; r++) {
        sleep_ms(r ? g_hold_ms : 0);
        memset(&c, 0, sizeof c);
        c.srcMemoryType = CU_MEMORYTYPE_DEVICE, c.srcDevice = d, c.srcPitch = pitch;
        c.dstMemoryType = CU_MEMORYTYPE_HOST, c.dstHost = back, c.dstPitch = host_pitch;
        c.WidthInBytes = PITCH_WIDTH, c.Height = height;
        CHECK(cuMemcpy2D_v2(&c));
        for (size_t row = 0; row < height; row++)
            if (memcmp(back + row * host_pitch, src + row * host_pitch, PITCH_WIDTH) != 0) {
                fprintf(stderr, "pool-client: pitched row %zu differs\n", row);
                exit(1);
            }
    }
    free(src);
    free(back);
    CHECK(cuMemFree_v2(d));
    step("freed");
}

/* The exported buffer holds the exporter's pattern in its first half, the importer's
 * in its second. */
static void verify_halves(CUdeviceptr d, size_t bytes)
{
    verify(d, bytes / 2, 11, 0, "the exporter's half");
    verify(d + bytes / 2, bytes / 2, 12, bytes / 8, "the importer's half");
}

static void mode_export(size_t n, size_t bytes)
{
    CUdeviceptr d, others[MAX_BUFFERS];
    uint32_t seed[MAX_BUFFERS];
    CUipcMemHandle h;
    CHECK(cuMemAlloc_v2(&d, bytes));
    fill(d, bytes, 11, 0);
    step("allocated");
    CHECK(cuIpcGetMemHandle(&h, d + bytes / 2));
    printf("handle ");
    for (size_t i = 0; i < sizeof h.reserved; i++)
        printf("%02x", (unsigned char)h.reserved[i]);
    printf("\n");
    fflush(stdout);
    if (g_fork_child_ms > 0) {
        fflush(stderr);
        pid_t child = fork();
        if (child < 0) {
            say("fork failed");
            exit(2);
        }
        if (child == 0) {
            struct timespec t = {(time_t)(g_fork_child_ms / 1000),
                                 (long)(g_fork_child_ms % 1000) * 1000000L};
            nanosleep(&t, NULL);
            _exit(0);
        }
        fprintf(stderr, "pool-client: forked child %d\n", (int)child);
        fflush(stderr);
    }
    step("exported");
    for (size_t i = 0; i < n; i++) {
        CHECK(cuMemAlloc_v2(&others[i], bytes));
        seed[i] = (uint32_t)(20 + i);
        fill(others[i], bytes, seed[i], 0);
    }
    /* The importer writes the second half meanwhile; the first is still ours. */
    step("oversubscribed");
    verify_halves(d, bytes);
    rounds(others, n, bytes, seed);
    verify_halves(d, bytes);
    for (size_t i = 0; i < n; i++)
        CHECK(cuMemFree_v2(others[i]));
    CHECK(cuMemFree_v2(d));
    step("freed");
}

static void mode_import(const char *hex, size_t bytes)
{
    CUipcMemHandle h;
    CUdeviceptr d;
    memset(&h, 0, sizeof h);
    for (size_t i = 0; i < sizeof h.reserved && hex[2 * i] && hex[2 * i + 1]; i++) {
        unsigned byte;
        if (sscanf(hex + 2 * i, "%2x", &byte) != 1)
            exit(64);
        h.reserved[i] = (char)byte;
    }
    CHECK(cuIpcOpenMemHandle_v2(&d, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    step("opened");
    verify(d, bytes / 2, 11, 0, "the exporter's half, imported");
    fill(d + bytes / 2, bytes / 2, 12, bytes / 8);
    verify_halves(d, bytes);
    CHECK(cuIpcCloseMemHandle(d));
    step("closed");
}

int main(int argc, char **argv)
{
    const char *mode = NULL, *handle = NULL;
    uint64_t bytes = 8ull << 20, n = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "--steps")) {
            g_steps = 1;
            continue;
        }
        if (v == NULL)
            bad = 1;
        else if (!strcmp(a, "--mode"))
            mode = v;
        else if (!strcmp(a, "--handle"))
            handle = v;
        else if (!strcmp(a, "--size"))
            bad = gpuswap_parse_size(v, &bytes);
        else if (!strcmp(a, "--buffers"))
            bad = gpuswap_parse_size(v, &n) || n == 0 || n > MAX_BUFFERS;
        else if (!strcmp(a, "--rounds"))
            g_rounds = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--hold-ms"))
            g_hold_ms = strtoul(v, NULL, 10);
        else if (!strcmp(a, "--fork-child-ms"))
            g_fork_child_ms = strtoul(v, NULL, 10);
        else
            bad = 1;
        if (bad || bytes == 0 || bytes % 8 != 0) {
            fprintf(stderr, "pool-client: bad flag %s\n", a);
            return 64;
        }
        i++;
    }
    if (mode == NULL || (!strcmp(mode, "import") && handle == NULL)) {
        say("usage: --mode pools|managed|pitch|export|import [--handle HEX] [--size S] "
            "[--buffers N] [--rounds R] [--hold-ms MS] [--fork-child-ms MS] [--steps]");
        return 64;
    }
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    if (!strcmp(mode, "pools"))
        mode_pools((size_t)n, (size_t)bytes);
    else if (!strcmp(mode, "managed"))
        mode_managed((size_t)n, (size_t)bytes);
    else if (!strcmp(mode, "pitch"))
        mode_pitch((size_t)bytes / PITCH_WIDTH);
    else if (!strcmp(mode, "export"))
        mode_export((size_t)n, (size_t)bytes);
    else if (!strcmp(mode, "import"))
        mode_import(handle, (size_t)bytes);
    else {
        fprintf(stderr, "pool-client: unknown mode %s\n", mode);
        return 64;
    }
    printf("{\"ok\":true}\n");
    return 0;
}

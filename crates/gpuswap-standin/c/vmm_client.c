/*
 * vmm_client.c: a CUDA driver-API program that manages its own device memory with the
 * virtual memory management calls, as PyTorch's expandable segments do: it reserves one
 * large range, and as it grows it creates a handle per segment (cuMemCreate) and maps it
 * at the end of what it has (cuMemMap, cuMemSetAccess); as it shrinks it unmaps the last
 * segments and releases their handles. Some segments are mapped twice: every odd one at
 * a second address too (its *alias*), every third one in part (from its second granule
 * on) at a third address. Every mapping of a segment must show the same bytes. Every
 * fourth one from the third is released as soon as it is mapped, as many allocators
 * do: its last unmap frees it.
 *
 * Each round it verifies every segment at every mapping (gpuswap_checksum against the
 * host's checksum, and a full copy back of the main mapping compared word by word),
 * then refills it with the next seed, through the alias when it has one. In the middle
 * of the rounds it shrinks by half and grows back (new handles, new data). With
 * --pause-resume it then does what torch_memory_saver's pause and resume do with a CPU
 * backup: copies every segment to host memory, unmaps and releases it all, creates and
 * maps new handles at the same addresses, copies the data back and verifies it.
 *
 * With --export it also creates a handle that may be shared, exports it as a POSIX file
 * descriptor and prints what the driver answered ("export answered CODE" on stderr).
 *
 * With --checkpoints, after each step it prints "checkpoint STEP HELD" to stdout (HELD:
 * the bytes of its handles that exist now, plus its scratch buffer) and waits for a line
 * on stdin, so that a test can compare the daemon's accounting with the driver's then.
 *
 * Exit status: 0 ok, 1 data mismatch, 2 CUDA error, 64 bad flags. On success prints one
 * JSON line to stdout; progress goes to stderr, prefixed "vmm-client:".
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_subset.h"
#include "gpuswap_common.h"

#define MAX_SEGMENTS 64

/* Every CUDA call goes through CK: on error, say which call and its code, and exit 2. */
static void check(CUresult r, const char *call)
{
    const char *name = NULL;
    if (r == CUDA_SUCCESS)
        return;
    cuGetErrorName(r, &name);
    fprintf(stderr, "vmm-client: %s failed: error %d %s\n", call, (int)r, name ? name : "?");
    exit(2);
}
#define CK(call) check((call), #call)

static void usage(const char *what, const char *arg)
{
    fprintf(stderr,
            "vmm-client: %s%s\n"
            "usage: gpuswap-vmm-client [--segments N] [--segment BYTES] [--rounds R]\n"
            "                          [--seed S] [--hold-ms MS] [--ptx FILE]\n"
            "                          [--pause-resume] [--checkpoints] [--export]\n"
            "  --segments N   segments at its largest, 2 to %d (default 6)\n"
            "  --segment BYTES  bytes per segment, a multiple of the granularity, at least\n"
            "                 two (default 6MiB)\n"
            "  --rounds R     verify-and-refill rounds, at least 2 (default 4)\n"
            "  --seed S       base seed, below 2^32 (default 1)\n"
            "  --hold-ms MS   sleep before each round (default 0)\n"
            "  --ptx FILE     load this PTX as the module (default: the stand-in's built-in)\n"
            "  --pause-resume  at the end, unmap and release everything and map it again\n"
            "  --checkpoints  after each step, print it and wait for a line on stdin\n"
            "  --export       export a new handle as a file descriptor and say what the\n"
            "                 driver answered (\"export answered CODE\")\n",
            what, arg ? arg : "", MAX_SEGMENTS);
    exit(64);
}

/* A count or size after flag (gpuswap_parse_size's forms), at most max. */
static uint64_t flag_value(const char *flag, const char *s, uint64_t max)
{
    uint64_t v = 0;
    if (gpuswap_parse_size(s, &v) != 0 || v > max)
        usage("bad or missing value after ", flag);
    return v;
}

/* The allocator's state: one reservation of three areas of MAX segments each (main,
 * alias, part), and the live segments' handles. */
static struct {
    size_t granule, seg;
    CUdeviceptr base;
    size_t reserved;
    unsigned live;    /* segments mapped (0 to live - 1) */
    unsigned handles; /* handles created and not released */
    CUmemGenericAllocationHandle h[MAX_SEGMENTS];
    uint32_t seed[MAX_SEGMENTS];
    CUfunction fill, checksum;
    CUdeviceptr out; /* 8 bytes of a cuMemAlloc scratch buffer */
    int checkpoints;
} g;

static CUdeviceptr main_at(unsigned i) { return g.base + i * g.seg; }
static CUdeviceptr alias_at(unsigned i) { return g.base + (MAX_SEGMENTS + i) * g.seg; }
static CUdeviceptr part_at(unsigned i) { return g.base + (2 * MAX_SEGMENTS + i) * g.seg; }
static int has_alias(unsigned i) { return i % 2 == 1; }
static int has_part(unsigned i) { return i % 3 == 0; }
/* Released as soon as mapped, as many allocators do: freed by its last unmap. */
static int released_early(unsigned i) { return i % 4 == 2; }

/* The step just done, and the bytes held now; waits for the test's line. */
static void checkpoint(const char *step)
{
    if (!g.checkpoints)
        return;
    printf("checkpoint %s %" PRIu64 "\n", step, (uint64_t)(g.handles * g.seg + g.granule));
    fflush(stdout);
    char line[64];
    if (fgets(line, sizeof line, stdin) == NULL) {
        fprintf(stderr, "vmm-client: no answer at checkpoint %s\n", step);
        exit(2);
    }
}

static void set_access(CUdeviceptr at, size_t bytes)
{
    CUmemAccessDesc rw = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CK(cuMemSetAccess(at, bytes, &rw, 1));
}

/* Maps segment i's handle at every address it has, access granted. */
static void map_segment(unsigned i)
{
    CK(cuMemMap(main_at(i), g.seg, 0, g.h[i], 0));
    set_access(main_at(i), g.seg);
    if (has_alias(i)) {
        CK(cuMemMap(alias_at(i), g.seg, 0, g.h[i], 0));
        set_access(alias_at(i), g.seg);
    }
    if (has_part(i)) {
        CK(cuMemMap(part_at(i), g.seg - g.granule, g.granule, g.h[i], 0));
        set_access(part_at(i), g.seg - g.granule);
    }
}

static void unmap_segment(unsigned i)
{
    CK(cuMemUnmap(main_at(i), g.seg));
    if (has_alias(i))
        CK(cuMemUnmap(alias_at(i), g.seg));
    if (has_part(i))
        CK(cuMemUnmap(part_at(i), g.seg - g.granule));
}

static void fill_at(CUdeviceptr at, uint32_t seed)
{
    unsigned long long words = g.seg / 4;
    void *params[] = {&at, &words, &seed};
    CK(cuLaunchKernel(g.fill, 256, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
}

/* The checksum of words [first, first + words) of seed's pattern, weighted from 0. */
static uint64_t host_checksum(uint32_t seed, uint64_t first, uint64_t words)
{
    uint64_t sum = 0;
    for (uint64_t i = 0; i < words; i++)
        sum += (uint64_t)gpuswap_pattern(seed, first + i) * gpuswap_checksum_weight(i);
    return sum;
}

static void check_sum(CUdeviceptr at, uint64_t first, uint64_t words, unsigned i, const char *where)
{
    uint64_t zero = 0, sum = 0, expect = host_checksum(g.seed[i], first, words);
    unsigned long long n = words;
    void *params[] = {&at, &n, &g.out};
    CK(cuMemcpyHtoD_v2(g.out, &zero, sizeof zero));
    CK(cuLaunchKernel(g.checksum, 256, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
    CK(cuCtxSynchronize());
    CK(cuMemcpyDtoH_v2(&sum, g.out, sizeof sum));
    if (sum != expect) {
        fprintf(stderr, "vmm-client: checksum mismatch: segment %u at its %s mapping\n", i, where);
        exit(1);
    }
}

/* Segment i at every mapping: checksums, then its main mapping word by word. */
static void verify(unsigned i, uint32_t *host)
{
    uint64_t words = g.seg / 4, skip = g.granule / 4;
    check_sum(main_at(i), 0, words, i, "main");
    if (has_alias(i))
        check_sum(alias_at(i), 0, words, i, "second");
    if (has_part(i))
        check_sum(part_at(i), skip, words - skip, i, "partial");
    CK(cuMemcpyDtoH_v2(host, main_at(i), g.seg));
    for (uint64_t w = 0; w < words; w++)
        if (host[w] != gpuswap_pattern(g.seed[i], w)) {
            fprintf(stderr, "vmm-client: data mismatch: segment %u word %" PRIu64 "\n", i, w);
            exit(1);
        }
}

/* Segment i's handle, created and mapped at every address it has (and released at
 * once where it is released early). */
static void new_segment(unsigned i)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CK(cuMemCreate(&g.h[i], g.seg, &prop, 0));
    g.handles++;
    checkpoint("create");
    map_segment(i);
    checkpoint("map");
    if (released_early(i)) {
        CK(cuMemRelease(g.h[i]));
        checkpoint("release-mapped");
    }
}

/* Grows to n segments: a handle per new segment, mapped, filled. */
static void grow(unsigned n, uint32_t seed)
{
    for (unsigned i = g.live; i < n; i++) {
        new_segment(i);
        g.seed[i] = seed + 100 * i;
        fill_at(main_at(i), g.seed[i]);
        g.live = i + 1;
        checkpoint("fill");
    }
}

/* Shrinks to n segments: the last ones unmapped, then released. */
static void shrink(unsigned n)
{
    while (g.live > n) {
        unsigned i = g.live - 1;
        unmap_segment(i);
        if (released_early(i)) {
            g.handles--; /* its last unmap freed it */
        } else {
            checkpoint("unmap");
            CK(cuMemRelease(g.h[i]));
            g.handles--;
        }
        g.live = i;
        checkpoint("release");
    }
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* torch_memory_saver's pause and resume with a CPU backup, checked; their times in ms
 * go to times[0] (copies out, unmaps, releases) and times[1] (creates, maps, copies
 * back). */
static void pause_resume(uint32_t **backup, uint32_t *host, double *times)
{
    unsigned n = g.live;
    double t = now_ms();
    for (unsigned i = 0; i < n; i++)
        CK(cuMemcpyDtoH_v2(backup[i], main_at(i), g.seg));
    shrink(0);
    times[0] = now_ms() - t;
    checkpoint("paused");
    t = now_ms();
    for (unsigned i = g.live; i < n; i++) {
        new_segment(i);
        CK(cuMemcpyHtoD_v2(main_at(i), backup[i], g.seg));
        g.live = i + 1;
    }
    CK(cuCtxSynchronize());
    times[1] = now_ms() - t;
    checkpoint("resumed");
    for (unsigned i = 0; i < n; i++)
        verify(i, host);
}

/* Exports a new handle made for it (a POSIX file descriptor) and says what the driver
 * answered: the stand-in gives a descriptor, the interposer refuses. */
static void try_export(void)
{
    CUmemAllocationProp prop;
    CUmemGenericAllocationHandle h;
    int fd = -1;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CK(cuMemCreate(&h, g.granule, &prop, 0));
    CUresult r = cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    fprintf(stderr, "vmm-client: export answered %d\n", (int)r);
    if (r == CUDA_SUCCESS)
        close(fd);
    CK(cuMemRelease(h));
}

/* The handle's properties and a retained reference, as an allocator asks for them. */
static void check_handle_calls(void)
{
    CUmemGenericAllocationHandle h = 0;
    CUmemAllocationProp prop;
    CK(cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)(main_at(0) + g.granule)));
    if (h != g.h[0]) {
        fprintf(stderr, "vmm-client: cuMemRetainAllocationHandle gave another handle\n");
        exit(1);
    }
    CK(cuMemGetAllocationPropertiesFromHandle(&prop, h));
    if (prop.type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop.location.id != 0) {
        fprintf(stderr, "vmm-client: cuMemGetAllocationPropertiesFromHandle is wrong\n");
        exit(1);
    }
    CK(cuMemRelease(h));
}

int main(int argc, char **argv)
{
    uint64_t segments = 6, seg = 6ull << 20, rounds = 4, seed = 1, hold_ms = 0, verified = 0;
    int pause = 0, export = 0;
    const char *ptx = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--pause-resume")) {
            pause = 1;
            continue;
        }
        if (!strcmp(a, "--export")) {
            export = 1;
            continue;
        }
        if (!strcmp(a, "--checkpoints")) {
            g.checkpoints = 1;
            continue;
        }
        if (!strcmp(a, "--segments"))
            segments = flag_value(a, v, MAX_SEGMENTS);
        else if (!strcmp(a, "--segment"))
            seg = flag_value(a, v, 1ull << 40);
        else if (!strcmp(a, "--rounds"))
            rounds = flag_value(a, v, 1000000);
        else if (!strcmp(a, "--seed"))
            seed = flag_value(a, v, UINT32_MAX);
        else if (!strcmp(a, "--hold-ms"))
            hold_ms = flag_value(a, v, 3600000);
        else if (!strcmp(a, "--ptx")) {
            if (v == NULL)
                usage("missing file after ", a);
            ptx = v;
        } else
            usage("unknown flag ", a);
        i++;
    }
    if (segments < 2 || rounds < 2)
        usage("at least 2 segments and 2 rounds", NULL);

    CUcontext ctx;
    CUmodule mod;
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CK(cuInit(0));
    CK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CK(cuCtxSetCurrent(ctx));
    CK(cuMemGetAllocationGranularity(&g.granule, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    if (seg < 2 * g.granule || seg % g.granule != 0)
        usage("the segment must be a multiple of the granularity, at least two", NULL);
    g.seg = (size_t)seg;
    if (ptx != NULL)
        CK(cuModuleLoad(&mod, ptx));
    else
        CK(cuModuleLoadData(&mod, "gpuswap stand-in kernels"));
    CK(cuModuleGetFunction(&g.fill, mod, "gpuswap_fill"));
    CK(cuModuleGetFunction(&g.checksum, mod, "gpuswap_checksum"));
    CK(cuMemAlloc_v2(&g.out, 8));
    g.reserved = 3 * MAX_SEGMENTS * g.seg;
    CK(cuMemAddressReserve(&g.base, g.reserved, 0, 0, 0));

    uint32_t *host = malloc(g.seg), *backup[MAX_SEGMENTS];
    for (unsigned i = 0; i < segments; i++)
        backup[i] = malloc(g.seg);
    if (host == NULL || backup[segments - 1] == NULL) {
        fprintf(stderr, "vmm-client: out of host memory\n");
        return 2;
    }
    double start = now_ms();
    grow((unsigned)segments, (uint32_t)seed);
    check_handle_calls();
    if (export)
        try_export();
    for (uint64_t r = 1; r <= rounds; r++) {
        struct timespec hold = {(time_t)(hold_ms / 1000), (long)(hold_ms % 1000) * 1000000L};
        nanosleep(&hold, NULL);
        for (unsigned i = 0; i < g.live; i++) {
            verify(i, host);
            verified += g.seg;
            /* The next seed, written through the alias where there is one. */
            g.seed[i] += 1;
            fill_at(has_alias(i) ? alias_at(i) : main_at(i), g.seed[i]);
        }
        if (r == rounds / 2) {
            shrink((unsigned)segments / 2);
            grow((unsigned)segments, (uint32_t)(seed + 1000 * r));
        }
    }
    for (unsigned i = 0; i < g.live; i++)
        verify(i, host);
    double times[2] = {0, 0};
    if (pause)
        pause_resume(backup, host, times);
    shrink(0);
    checkpoint("done");
    CK(cuMemAddressFree(g.base, g.reserved));
    CK(cuMemFree_v2(g.out));
    printf("{\"ok\":true,\"segments\":%" PRIu64 ",\"segment_bytes\":%zu,\"rounds\":%" PRIu64
           ",\"verified_bytes\":%" PRIu64 ",\"paused\":%s,\"pause_ms\":%.1f,\"resume_ms\":%.1f"
           ",\"elapsed_ms\":%.0f}\n",
           segments, g.seg, rounds, verified, pause ? "true" : "false", times[0], times[1],
           now_ms() - start);
    return 0;
}
